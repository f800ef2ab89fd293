/* Opening a model from a GGUF file (llama.cpp's format and naming): tensor types
 * mapped to model_dtype, model_config from the "<arch>.*" metadata keys as
 * llama.cpp's llama_model_loader reads them (llama-arch.cpp's LLM_KV names). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/weights_internal.h"

/* ggml_type numbers (ggml.h) of the types deepinfer runs. */
static int dtype_of(uint32_t ggml_type, model_dtype *out)
{
    switch (ggml_type) {
    case 0: *out = MODEL_DTYPE_F32; return 1;
    case 1: *out = MODEL_DTYPE_F16; return 1;
    case 2: *out = MODEL_DTYPE_Q4_0; return 1;
    case 3: *out = MODEL_DTYPE_Q4_1; return 1;
    case 6: *out = MODEL_DTYPE_Q5_0; return 1;
    case 7: *out = MODEL_DTYPE_Q5_1; return 1;
    case 8: *out = MODEL_DTYPE_Q8_0; return 1;
    case 10: *out = MODEL_DTYPE_Q2_K; return 1;
    case 11: *out = MODEL_DTYPE_Q3_K; return 1;
    case 12: *out = MODEL_DTYPE_Q4_K; return 1;
    case 13: *out = MODEL_DTYPE_Q5_K; return 1;
    case 14: *out = MODEL_DTYPE_Q6_K; return 1;
    case 20: *out = MODEL_DTYPE_IQ4_NL; return 1;
    case 23: *out = MODEL_DTYPE_IQ4_XS; return 1;
    case 26: *out = MODEL_DTYPE_I32; return 1; /* integer tables (deepseek4's tid2eid) */
    case 30: *out = MODEL_DTYPE_BF16; return 1;
    case 39: *out = MODEL_DTYPE_MXFP4_GGML; return 1; /* repacked for deepseek4 */
    default: return 0;
    }
}

di_status mw_gguf_need_u32(const gguf_file *f, const char *path, const char *arch, const char *key,
                           uint32_t *out, di_error **err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (gguf_get_u32(f, full, out)) return DI_OK;
    return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: metadata key %s is %s", path, full,
                         gguf_find(f, full) ? "not an unsigned integer" : "missing");
}

di_status mw_gguf_need_f32(const gguf_file *f, const char *path, const char *arch, const char *key,
                           float *out, di_error **err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (gguf_get_f32(f, full, out)) return DI_OK;
    return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: metadata key %s is %s", path, full,
                         gguf_find(f, full) ? "not a float" : "missing");
}

static void opt_u32(const gguf_file *f, const char *arch, const char *key, uint32_t *out)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    gguf_get_u32(f, full, out);
}

static void opt_f32(const gguf_file *f, const char *arch, const char *key, float *out)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    gguf_get_f32(f, full, out);
}

static int str_is(const char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

static di_status read_common(model_weights *w, const gguf_file *f, const char *path,
                             const char *arch, di_error **err);

/* llama.cpp's deepseek2 metadata (convert_hf_to_gguf.py's DeepseekV2Model, read
 * as llama-model.cpp reads it) into the DeepSeek fields of model_config. MLA
 * heads: the converter writes key_length = kv_lora_rank + rope (the absorbed
 * "MQA" view) with key_length_mla / value_length_mla the per-head widths; older
 * files have only key_length = nope + rope and value_length. Gating:
 * expert_gating_func 2 (sigmoid) is DeepSeek-V3's routing (with the correction
 * bias, noaux_tc), 1 or none (llama.cpp's default) softmax, V2's. */
static di_status read_deepseek2(const model_weights *w, const gguf_file *f, const char *path,
                                const char *arch, model_config *c, di_error **err)
{
    di_status st;
    uint32_t key_len = 0, val_len = 0, key_mla = 0, val_mla = 0, gating = 0, lead = 0;
    if ((st = mw_gguf_need_u32(f, path, arch, "attention.kv_lora_rank", &c->kv_lora_rank, err)) !=
            DI_OK ||
        (st = mw_gguf_need_u32(f, path, arch, "rope.dimension_count", &c->qk_rope_head_dim, err)) !=
            DI_OK ||
        (st = mw_gguf_need_u32(f, path, arch, "attention.key_length", &key_len, err)) != DI_OK ||
        (st = mw_gguf_need_u32(f, path, arch, "attention.value_length", &val_len, err)) != DI_OK)
        return st;
    opt_u32(f, arch, "attention.q_lora_rank", &c->q_lora_rank);
    opt_u32(f, arch, "attention.key_length_mla", &key_mla);
    opt_u32(f, arch, "attention.value_length_mla", &val_mla);
    if (key_mla || val_mla) {
        if (key_len != c->kv_lora_rank + c->qk_rope_head_dim || val_len != c->kv_lora_rank)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: %s.attention.key_length %u / value_length %u do not match "
                                 "kv_lora_rank %u + rope %u (the MLA layout)",
                                 path, arch, key_len, val_len, c->kv_lora_rank,
                                 c->qk_rope_head_dim);
        key_len = key_mla;
        val_len = val_mla;
    }
    if (key_len <= c->qk_rope_head_dim)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: %s key length %u leaves no dimensions without RoPE (%s.rope."
                             "dimension_count %u)",
                             path, arch, key_len, arch, c->qk_rope_head_dim);
    c->qk_nope_head_dim = key_len - c->qk_rope_head_dim;
    c->v_head_dim = val_len;
    c->head_dim = key_len;
    c->n_head_kv = c->n_head;
    c->n_expert_used = c->n_group = c->topk_group = 1;
    c->routed_scaling_factor = 1.0f;
    opt_u32(f, arch, "leading_dense_block_count", &lead);
    opt_u32(f, arch, "expert_count", &c->n_expert);
    opt_u32(f, arch, "expert_shared_count", &c->n_expert_shared);
    opt_u32(f, arch, "expert_used_count", &c->n_expert_used);
    opt_u32(f, arch, "expert_feed_forward_length", &c->n_ff_exp);
    opt_u32(f, arch, "expert_group_count", &c->n_group);
    opt_u32(f, arch, "expert_group_used_count", &c->topk_group);
    opt_u32(f, arch, "nextn_predict_layers", &c->n_nextn_layer);
    opt_f32(f, arch, "expert_weights_scale", &c->routed_scaling_factor);
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    gguf_get_bool(f, key, &c->norm_topk_prob);
    opt_u32(f, arch, "expert_gating_func", &gating);
    if (gating > 2)
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: %s.expert_gating_func %u is not supported (1 softmax, 2 sigmoid)",
                             path, arch, gating);
    /* A converter given transformers' DeepseekV3Config (which has no
     * scoring_func) writes no gating function; llama.cpp then routes with
     * softmax, and its tokens leave transformers' (docs/deepseek-v3.md). The
     * correction bias is DeepSeek-V3's alone: with it, the routing is V3's. */
    snprintf(key, sizeof key, "blk.%u.exp_probs_b.bias", lead);
    if (gating == 0 && model_weights_get(w, key)) gating = 2;
    if (gating == 2) {
        c->arch = MODEL_ARCH_DEEPSEEK_V3;
        c->expert_gating = MODEL_EXPERT_GATING_SIGMOID;
        c->topk_method = MODEL_TOPK_NOAUX_TC;
    } else {
        c->arch = MODEL_ARCH_DEEPSEEK_V2;
        c->expert_gating = MODEL_EXPERT_GATING_SOFTMAX;
        c->topk_method = c->n_group > 1 ? MODEL_TOPK_GROUP_LIMITED : MODEL_TOPK_GREEDY;
    }
    c->n_layer_dense_lead = lead;
    if ((st = mw_check_moe(c, path, err)) != DI_OK) return st;
    return DI_OK;
}

static di_status read_config(model_weights *w, const gguf_file *f, const char *path, di_error **err)
{
    model_config *c = &w->config;
    const char *a;
    size_t alen;
    if (!gguf_get_string(f, "general.architecture", &a, &alen))
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: metadata key general.architecture is %s", path,
                             gguf_find(f, "general.architecture") ? "not a string" : "missing");
    char arch[32];
    if (str_is(a, alen, "llama")) {
        c->arch = MODEL_ARCH_LLAMA;
        /* llama.cpp's llama_model_rope_type: LLM_ARCH_LLAMA is NORM (the converter
         * permuted Q/K so adjacent pairs rotate). */
        c->rope_style = MODEL_ROPE_NORM;
    } else if (str_is(a, alen, "qwen2")) {
        c->arch = MODEL_ARCH_QWEN2;
        c->rope_style = MODEL_ROPE_NEOX; /* LLM_ARCH_QWEN2 is NEOX there */
    } else if (str_is(a, alen, "deepseek2")) {
        c->arch = MODEL_ARCH_DEEPSEEK_V3; /* or V2: read_deepseek2 decides by the gating */
        c->rope_style = MODEL_ROPE_NORM;  /* LLM_ARCH_DEEPSEEK2 is NORM there */
    } else if (str_is(a, alen, "deepseek4") || str_is(a, alen, "dflash")) {
        c->arch = MODEL_ARCH_DEEPSEEK_V4; /* (dflash: DeepSeek-V4's DSpark draft GGUF) */
    } else {
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: general.architecture '%.*s' is not supported (llama, qwen2, "
                             "deepseek2, deepseek4 and deepseek4's DSpark dflash are)",
                             path, (int)(alen < 64 ? alen : 64), a);
    }
    snprintf(arch, sizeof arch, "%.*s", (int)alen, a);
    snprintf(w->architecture, sizeof w->architecture, "%s", arch);
    const char *name;
    size_t nlen;
    if (gguf_get_string(f, "general.name", &name, &nlen))
        mw_copy_name(w->name, sizeof w->name, name, nlen);
    di_status st;
    const int v4 = c->arch == MODEL_ARCH_DEEPSEEK_V4; /* no dense MLP: no feed_forward_length */
    if ((st = mw_gguf_need_u32(f, path, arch, "context_length", &c->n_ctx_train, err)) != DI_OK ||
        (st = mw_gguf_need_u32(f, path, arch, "embedding_length", &c->n_embd, err)) != DI_OK ||
        (st = mw_gguf_need_u32(f, path, arch, "block_count", &c->n_layer, err)) != DI_OK ||
        (!v4 &&
         (st = mw_gguf_need_u32(f, path, arch, "feed_forward_length", &c->n_ff, err)) != DI_OK) ||
        (st = mw_gguf_need_u32(f, path, arch, "attention.head_count", &c->n_head, err)) != DI_OK)
        return st;
    c->n_head_kv = c->n_head;
    if (v4) {
        if ((st = mw_gguf_read_deepseek4(w, f, path, arch, err)) != DI_OK) return st;
        return read_common(w, f, path, arch, err);
    }
    if (c->arch == MODEL_ARCH_DEEPSEEK_V3) {
        if ((st = read_deepseek2(w, f, path, arch, c, err)) != DI_OK) return st;
        return read_common(w, f, path, arch, err);
    }
    opt_u32(f, arch, "attention.head_count_kv", &c->n_head_kv);
    opt_u32(f, arch, "attention.key_length", &c->head_dim);
    /* Partial rotary embeddings and V heads of another width are not Llama/Qwen2. */
    uint32_t v_len = 0, rope_dims = 0;
    opt_u32(f, arch, "attention.value_length", &v_len);
    opt_u32(f, arch, "rope.dimension_count", &rope_dims);
    if (!c->head_dim && (c->n_head == 0 || c->n_embd % c->n_head != 0))
        return di_error_setf(
            err, DI_ERR_MODEL_FORMAT,
            "%s: %s.attention.head_count %u does not divide %s.embedding_length %u "
            "(and no %s.attention.key_length says the head width)",
            path, arch, c->n_head, arch, c->n_embd, arch);
    uint32_t head_dim = c->head_dim ? c->head_dim : c->n_embd / c->n_head;
    if (v_len && v_len != head_dim)
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: %s.attention.value_length %u differs from the key length %u",
                             path, arch, v_len, head_dim);
    if (rope_dims && rope_dims != head_dim)
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: %s.rope.dimension_count %u: partial rotary embeddings (head "
                             "dimension %u) are not supported",
                             path, arch, rope_dims, head_dim);
    return read_common(w, f, path, arch, err);
}

/* What every architecture reads alike: the norm epsilon, RoPE base and scaling,
 * the vocabulary and the special token ids. */
static di_status read_common(model_weights *w, const gguf_file *f, const char *path,
                             const char *arch, di_error **err)
{
    model_config *c = &w->config;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if (!gguf_get_f32(f, key, &c->rms_norm_eps))
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: metadata key %s is %s", path, key,
                             gguf_find(f, key) ? "not a float" : "missing");
    opt_f32(f, arch, "rope.freq_base", &c->rope_theta);

    const char *s;
    size_t slen;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_get_string(f, key, &s, &slen)) {
        if (str_is(s, slen, "none"))
            c->rope_scaling = MODEL_ROPE_SCALING_NONE;
        else if (str_is(s, slen, "linear"))
            c->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
        else if (str_is(s, slen, "yarn"))
            c->rope_scaling = MODEL_ROPE_SCALING_YARN;
        else
            return di_error_setf(err, DI_ERR_UNSUPPORTED,
                                 "%s: %s '%.*s' is not supported (none, linear, yarn are)", path,
                                 key, (int)(slen < 32 ? slen : 32), s);
    }
    opt_f32(f, arch, "rope.scaling.factor", &c->rope_factor);
    if (c->rope_factor == 0.0f) c->rope_factor = 1.0f; /* llama.cpp: 0 means none */
    opt_u32(f, arch, "rope.scaling.original_context_length", &c->rope_orig_ctx);
    opt_f32(f, arch, "rope.scaling.yarn_beta_fast", &c->yarn_beta_fast);
    opt_f32(f, arch, "rope.scaling.yarn_beta_slow", &c->yarn_beta_slow);
    if (c->rope_scaling == MODEL_ROPE_SCALING_YARN && c->arch == MODEL_ARCH_DEEPSEEK_V4) {
        /* deepseek4's graph divides ggml's YaRN magnitude back out of cos and
         * sin (dsv4_rope_attn_factor), as transformers' V4 leaves them
         * unscaled; the scaling applies to the compressed branches only */
        c->yarn_attn_factor = 1.0f;
        c->yarn_truncate = 1;
    } else if (c->rope_scaling == MODEL_ROPE_SCALING_YARN &&
               (c->arch == MODEL_ARCH_DEEPSEEK_V3 || c->arch == MODEL_ARCH_DEEPSEEK_V2)) {
        /* llama.cpp's deepseek2 graph cancels YaRN's scaling of cos and sin and
         * puts (1 + yarn_log_multiplier ln factor)^2 into the softmax scale:
         * transformers' DeepSeek YaRN with mscale == mscale_all_dim =
         * yarn_log_multiplier / 0.1 (the only case a GGUF can state). */
        float log_mul = 0.0f;
        opt_f32(f, arch, "rope.scaling.yarn_log_multiplier", &log_mul);
        c->yarn_mscale_all_dim = c->yarn_mscale = log_mul / 0.1f;
        c->yarn_attn_factor = 1.0f;
    } else if (c->rope_scaling == MODEL_ROPE_SCALING_YARN) {
        /* llama.cpp's rope: mscale = attn_factor · (1 + 0.1 ln(1 / freq_scale)). */
        float attn_factor = 1.0f;
        opt_f32(f, arch, "rope.scaling.attn_factor", &attn_factor);
        c->yarn_attn_factor =
            attn_factor * (c->rope_factor > 1.0f ? 0.1f * logf(c->rope_factor) + 1.0f : 1.0f);
    }

    /* The vocabulary: the tokenizer's token list, else token_embd's rows. */
    const gguf_kv *tokens = gguf_find(f, "tokenizer.ggml.tokens");
    if (tokens && tokens->type == GGUF_TYPE_ARRAY && tokens->count <= UINT32_MAX)
        c->n_vocab = (uint32_t)tokens->count;
    else if (snprintf(key, sizeof key, "%s.vocab_size", arch) > 0 &&
             !gguf_get_u32(f, key, &c->n_vocab)) {
        const model_tensor *e = model_weights_get(w, "token_embd.weight");
        if (e && e->n_dims == 2 && e->ne[1] <= UINT32_MAX) c->n_vocab = (uint32_t)e->ne[1];
    }
    uint32_t id;
    if (gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &id) && id <= INT32_MAX)
        c->bos_token_id = (int32_t)id;
    if (gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &id) && id <= INT32_MAX)
        c->eos_token_id = (int32_t)id;
    c->attn_qkv_bias = model_weights_get(w, "blk.0.attn_q.bias") != NULL;
    return DI_OK;
}

/* ggml's block_mxfp4 rows [n_blocks] (an E8M0 byte, then 16 bytes whose low
 * nibbles are values 0..15 and high nibbles 16..31) into MODEL_DTYPE_MXFP4's
 * codes (two a byte, in order) and f32 scales, both owned by w. */
static di_status repack_mxfp4(model_weights *w, const char *path, const char *name,
                              const uint8_t *src, size_t n_blocks, uint8_t **codes, float **scales,
                              di_error **err)
{
    void **owned = realloc(w->owned, (w->n_owned + 2) * sizeof *owned);
    if (owned) w->owned = owned;
    *codes = owned ? malloc(n_blocks * 16) : NULL;
    if (*codes) w->owned[w->n_owned++] = *codes;
    *scales = *codes ? malloc(n_blocks * sizeof **scales) : NULL;
    if (*scales) w->owned[w->n_owned++] = *scales;
    if (!*scales) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", path);
    for (size_t b = 0; b < n_blocks; b++) {
        const uint8_t *blk = src + b * 17, *qs = blk + 1;
        if (blk[0] == 255)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: tensor '%s' block %zu has E8M0's NaN (255) as its scale",
                                 path, name, b);
        (*scales)[b] = ldexpf(1.0f, (int)blk[0] - 127);
        uint8_t *out = *codes + b * 16;
        for (int k = 0; k < 16; k++) {
            int i0 = 2 * k, i1 = 2 * k + 1;
            uint8_t c0 = i0 < 16 ? qs[i0] & 15 : qs[i0 - 16] >> 4;
            uint8_t c1 = i1 < 16 ? qs[i1] & 15 : qs[i1 - 16] >> 4;
            out[k] = (uint8_t)(c0 | c1 << 4);
        }
    }
    return DI_OK;
}

di_status mw_gguf_split_experts(model_weights *w, const char *path, uint32_t first, uint32_t end,
                                int required, mw_expert_name_fn expert_name, di_error **err)
{
    const model_config *c = &w->config;
    static const char *const kinds[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    char name[192], scale_name[208];
    di_status st;
    for (uint32_t l = first; l < end; l++)
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, kinds[k]);
            const model_tensor *t = model_weights_get(w, name);
            if (!t && !required) continue; /* a dense layer; the model names what it misses */
            if (!t)
                return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: tensor '%s' is missing", path,
                                     name);
            const model_tensor stacked = *t; /* mw_add_tensor may move the table */
            const int64_t X = stacked.ne[2], per_elems = stacked.ne[0] * stacked.ne[1];
            const int mx = stacked.dtype == MODEL_DTYPE_MXFP4_GGML;
            if (stacked.n_dims != 3 || X != (int64_t)c->n_expert ||
                stacked.n_bytes % (size_t)X != 0 || (mx && stacked.ne[0] % 32 != 0))
                return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                     "%s: tensor %s should be 3-D with %u experts (ne[2])", path,
                                     name, c->n_expert);
            uint8_t *codes = NULL;
            float *scales = NULL;
            if (mx && (st = repack_mxfp4(w, path, name, stacked.data, (size_t)(per_elems / 32 * X),
                                         &codes, &scales, err)) != DI_OK)
                return st;
            const size_t per = mx ? (size_t)per_elems / 2 : stacked.n_bytes / (size_t)X,
                         per_scales = (size_t)(per_elems / 32);
            int64_t ne[4] = {stacked.ne[0], stacked.ne[1], 1, 1};
            int64_t ne_s[4] = {stacked.ne[0] / 32, stacked.ne[1], 1, 1};
            for (int64_t e = 0; e < X; e++) {
                expert_name(name, sizeof name, l, k, e);
                const void *data = mx ? (const void *)(codes + (size_t)e * per)
                                      : (const char *)stacked.data + (size_t)e * per;
                if ((st = mw_add_tensor(w, path, name, strlen(name),
                                        mx ? MODEL_DTYPE_MXFP4 : stacked.dtype, 2, ne, data, per,
                                        err)) != DI_OK)
                    return st;
                if (!mx) continue;
                int n = snprintf(scale_name, sizeof scale_name, "%s.scale", name);
                if ((st = mw_add_tensor(w, path, scale_name, (size_t)n, MODEL_DTYPE_F32, 2, ne_s,
                                        scales + (size_t)e * per_scales, per_scales * sizeof(float),
                                        err)) != DI_OK)
                    return st;
            }
        }
    /* MXFP4 experts paired with their scales once the table stops moving */
    for (size_t i = w->n_file_tensors; i < w->n_tensors; i++) {
        model_tensor *t = &w->tensors[i];
        if (t->dtype != MODEL_DTYPE_MXFP4) continue;
        snprintf(scale_name, sizeof scale_name, "%s.scale", t->name);
        t->scale = model_weights_get(w, scale_name);
    }
    return DI_OK;
}

/* llama.cpp's deepseek2 names: expert e of "blk.N.ffn_gate_exps.weight" is
 * "blk.N.ffn_gate_exps.e.weight", as the Hugging Face loader names it. */
static void deepseek2_expert_name(char *out, size_t size, uint32_t l, int k, int64_t e)
{
    static const char *const kinds[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    snprintf(out, size, "blk.%u.%s.%lld.weight", l, kinds[k], (long long)e);
}

di_status mw_open_gguf(model_weights *w, const char *path, di_error **err)
{
    char msg[512];
    di_status st = gguf_open(path, 0, &w->gguf, msg, sizeof msg);
    if (st != DI_OK) return di_error_setf(err, st, "%s", msg);
    const gguf_file *f = w->gguf;
    const char *a;
    size_t alen;
    /* deepseek4 and its DSpark GGUF (dflash): their own tensor names
     * (weights_gguf_dsv4.c) */
    const int v4 = gguf_get_string(f, "general.architecture", &a, &alen) &&
                   (str_is(a, alen, "deepseek4") || str_is(a, alen, "dflash"));
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor_info *ti = &f->tensors[i];
        model_dtype dt;
        if (!dtype_of(ti->type, &dt) || (!v4 && (ti->type == 26 || ti->type == 39))) {
            const char *tn = gguf_tensor_type_name(ti->type);
            return di_error_setf(
                err, DI_ERR_UNSUPPORTED,
                "%s: tensor '%.*s' has ggml type %s (%u), which deepinfer does not run", path,
                (int)(ti->name_len < 128 ? ti->name_len : 128), ti->name, tn ? tn : "?", ti->type);
        }
        int64_t ne[4];
        for (int d = 0; d < 4; d++) ne[d] = (int64_t)ti->dims[d];
        char renamed[192];
        const char *name = ti->name;
        size_t name_len = ti->name_len;
        if (v4 && mw_gguf_dsv4_name(ti->name, ti->name_len, renamed, sizeof renamed)) {
            name = renamed;
            name_len = strlen(renamed);
        }
        st = mw_add_tensor(w, path, name, name_len, dt, ti->n_dims, ne,
                           f->data + f->data_offset + ti->offset, (size_t)ti->n_bytes, err);
        if (st != DI_OK) return st;
    }
    w->n_file_tensors = w->n_tensors;
    if ((st = read_config(w, f, path, err)) != DI_OK) return st;
    const model_arch arch = w->config.arch;
    if (arch == MODEL_ARCH_DEEPSEEK_V3 || arch == MODEL_ARCH_DEEPSEEK_V2) {
        if ((st = mw_gguf_split_experts(w, path, 0, w->config.n_layer + w->config.n_nextn_layer, 0,
                                        deepseek2_expert_name, err)) != DI_OK)
            return st;
    } else if (arch == MODEL_ARCH_DEEPSEEK_V4) {
        if ((st = mw_gguf_dsv4_experts(w, path, err)) != DI_OK) return st;
    }
    return DI_OK;
}
