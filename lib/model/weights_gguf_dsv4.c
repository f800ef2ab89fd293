/* llama.cpp's deepseek4 GGUFs (convert_hf_to_gguf.py's DeepseekV4Model, the
 * llama.cpp vendored by llama-cpp-python 0.3.36): the "deepseek4.*" metadata
 * (or "dflash.*", the same keys in a DSpark draft GGUF)
 * as llama_model_deepseek4::load_arch_hparams reads it, the tensors renamed to
 * the names deepseek_v4.c reads (transformers' module paths), and the routed
 * experts — stacked ffn_{gate,up,down}_exps, ne = {n_in, n_out, n_expert} —
 * split into one matrix per expert by weights_gguf.c's mw_gguf_split_experts.
 * The converter writes them in ggml's MXFP4, which that repacks into
 * MODEL_DTYPE_MXFP4 (codes two a byte in order, f32 scales beside), the layout
 * DeepSeek's release safetensors load into, so both files run the same
 * kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/weights_internal.h"

/* GGUF name -> deepseek_v4.c's name (the suffix after "blk.N." or a whole
 * top-level name). */
static const struct {
    const char *gguf, *name;
} top_names[] = {
    {"output_hc_fn.weight", "model.hc_head.hc_fn"},
    {"output_hc_base.weight", "model.hc_head.hc_base"},
    {"output_hc_scale.weight", "model.hc_head.hc_scale"},
};

static const struct {
    const char *gguf, *name;
} layer_names[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_sinks.weight", "self_attn.sinks"},
    {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
    {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
    {"attn_q_a_norm.weight", "self_attn.q_a_norm.weight"},
    {"attn_kv.weight", "self_attn.kv_proj.weight"},
    {"attn_kv_a_norm.weight", "self_attn.kv_norm.weight"},
    {"attn_output_a.weight", "self_attn.o_a_proj.weight"},
    {"attn_output_b.weight", "self_attn.o_b_proj.weight"},
    {"attn_compressor_ape.weight", "self_attn.compressor.position_bias"},
    {"attn_compressor_kv.weight", "self_attn.compressor.kv_proj.weight"},
    {"attn_compressor_gate.weight", "self_attn.compressor.gate_proj.weight"},
    {"attn_compressor_norm.weight", "self_attn.compressor.kv_norm.weight"},
    {"indexer.attn_q_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"},
    {"indexer.proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"},
    {"indexer_compressor_ape.weight", "self_attn.compressor.indexer.position_bias"},
    {"indexer_compressor_kv.weight", "self_attn.compressor.indexer.kv_proj.weight"},
    {"indexer_compressor_gate.weight", "self_attn.compressor.indexer.gate_proj.weight"},
    {"indexer_compressor_norm.weight", "self_attn.compressor.indexer.kv_norm.weight"},
    {"hc_attn_fn.weight", "attn_hc.fn"},
    {"hc_attn_base.weight", "attn_hc.base"},
    {"hc_attn_scale.weight", "attn_hc.scale"},
    {"hc_ffn_fn.weight", "ffn_hc.fn"},
    {"hc_ffn_base.weight", "ffn_hc.base"},
    {"hc_ffn_scale.weight", "ffn_hc.scale"},
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
    {"ffn_gate_tid2eid.weight", "mlp.gate.tid2eid"},
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
    /* an MTP GGUF's (convert_hf_to_gguf.py --mtp): its layer's own parts
     * (deepseek_v4_mtp.c); the optional embed_tokens / shared_head_head
     * copies are not read (the model's are) */
    {"nextn.eh_proj.weight", "eh_proj.weight"},
    {"nextn.enorm.weight", "enorm.weight"},
    {"nextn.hnorm.weight", "hnorm.weight"},
    {"nextn.shared_head_norm.weight", "norm.weight"},
};

int mw_gguf_dsv4_name(const char *gguf, size_t n, char *out, size_t size)
{
    for (size_t i = 0; i < sizeof top_names / sizeof top_names[0]; i++)
        if (n == strlen(top_names[i].gguf) && memcmp(gguf, top_names[i].gguf, n) == 0) {
            snprintf(out, size, "%s", top_names[i].name);
            return 1;
        }
    char buf[160], *end;
    if (n >= sizeof buf || n < 6 || memcmp(gguf, "blk.", 4) != 0) return 0;
    memcpy(buf, gguf, n);
    buf[n] = '\0';
    if (buf[4] < '0' || buf[4] > '9') return 0;
    unsigned long layer = strtoul(buf + 4, &end, 10);
    if (*end != '.' || layer >= MODEL_V4_MAX_LAYERS) return 0;
    for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
        if (strcmp(end + 1, layer_names[i].gguf) == 0) {
            snprintf(out, size, "model.layers.%lu.%s", layer, layer_names[i].name);
            return 1;
        }
    return 0;
}

/* The metadata's prefix: "deepseek4", or "dflash" in a DSpark GGUF (the same
 * keys under llama.cpp's dflash architecture). */
typedef struct dsv4_keys {
    const gguf_file *f;
    const char *path, *arch;
} dsv4_keys;

static di_status need(const dsv4_keys *k, const char *key, uint32_t *out, di_error **err)
{
    return mw_gguf_need_u32(k->f, k->path, k->arch, key, out, err);
}

static di_status need_f32(const dsv4_keys *k, const char *key, float *out, di_error **err)
{
    return mw_gguf_need_f32(k->f, k->path, k->arch, key, out, err);
}

/* Element i of the array "<arch>.<key>" of n_want numbers (u32, i32 or
 * f32, as the converter writes them) as a double. */
static di_status array_at(const dsv4_keys *k, const char *key, uint64_t n_want, uint64_t i,
                          double *out, di_error **err)
{
    const gguf_file *f = k->f;
    const char *path = k->path;
    char full[128];
    snprintf(full, sizeof full, "%s.%s", k->arch, key);
    const gguf_kv *kv = gguf_find(f, full);
    *out = 0;
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->count < n_want ||
        (kv->elem_type != GGUF_TYPE_UINT32 && kv->elem_type != GGUF_TYPE_INT32 &&
         kv->elem_type != GGUF_TYPE_FLOAT32))
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: metadata key %s is %s (an array of %llu numbers)", path, full,
                             kv ? "not" : "missing", (unsigned long long)n_want);
    const unsigned char *p = kv->value + 4 * i;
    if (kv->elem_type == GGUF_TYPE_FLOAT32) {
        float v;
        memcpy(&v, p, 4);
        *out = v;
    } else if (kv->elem_type == GGUF_TYPE_INT32) {
        int32_t v;
        memcpy(&v, p, 4);
        *out = v;
    } else {
        uint32_t v;
        memcpy(&v, p, 4);
        *out = v;
    }
    return DI_OK;
}

/* "<arch>.<key>": one number, or an array with one value for every layer
 * (llama.cpp's get_key_or_arr); a per-layer array whose values differ is
 * DI_ERR_UNSUPPORTED (deepseek_v4.c has one value for the model). */
static di_status same_for_every_layer(const dsv4_keys *k, const char *key, uint32_t n_layer,
                                      double *out, di_error **err)
{
    const gguf_file *f = k->f;
    const char *path = k->path;
    char full[128];
    snprintf(full, sizeof full, "%s.%s", k->arch, key);
    const gguf_kv *kv = gguf_find(f, full);
    uint32_t u;
    float x;
    *out = 0;
    if (gguf_get_u32(f, full, &u)) {
        *out = u;
        return DI_OK;
    }
    if (gguf_get_f32(f, full, &x)) {
        *out = x;
        return DI_OK;
    }
    if (!kv || kv->type != GGUF_TYPE_ARRAY)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: metadata key %s is %s", path, full,
                             kv ? "not a number or an array" : "missing");
    di_status st;
    for (uint32_t i = 0; i < n_layer; i++) {
        double v = 0;
        if ((st = array_at(k, key, n_layer, i, &v, err)) != DI_OK) return st;
        if (i && v != *out)
            return di_error_setf(err, DI_ERR_UNSUPPORTED,
                                 "%s: %s differs between layers (%g at layer 0, %g at layer %u); "
                                 "deepinfer runs one value for every layer",
                                 path, full, *out, v, i);
        *out = v;
    }
    return DI_OK;
}

/* A DSpark GGUF's own keys (convert_hf_to_gguf.py --dspark: llama.cpp's
 * dflash architecture with the deepseek4 keys): its stages are its layers,
 * dflash.block_size, dflash.target_layers (the main layers' ids + 1: the
 * layer inputs llama.cpp reads), tokenizer.ggml.mask_token_id the noise
 * token. */
static di_status read_dspark(const dsv4_keys *k, model_config *c, di_error **err)
{
    model_config_v4 *v = &c->v4;
    uint32_t block = 0, noise = 0;
    di_status st;
    if ((st = need(k, "block_size", &block, err)) != DI_OK) return st;
    if (!gguf_get_u32(k->f, "tokenizer.ggml.mask_token_id", &noise))
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: metadata key tokenizer.ggml.mask_token_id (DSpark's noise "
                             "token) is missing",
                             k->path);
    if (block < 1 || block > 64)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: dflash.block_size %u is not in [1, 64]",
                             k->path, block);
    const gguf_kv *kv = gguf_find(k->f, "dflash.target_layers");
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->count < 1 || kv->count > MODEL_V4_MAX_LAYERS)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: metadata key dflash.target_layers is %s (an array of 1 to %d "
                             "layer numbers)",
                             k->path, kv ? "not" : "missing", MODEL_V4_MAX_LAYERS);
    for (uint64_t i = 0; i < kv->count; i++) {
        double id = 0;
        if ((st = array_at(k, "target_layers", kv->count, i, &id, err)) != DI_OK) return st;
        if (!(id >= 1 && id <= MODEL_V4_MAX_LAYERS && id == floor(id)))
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: dflash.target_layers[%llu] is %g (a main layer's id + 1)",
                                 k->path, (unsigned long long)i, id);
        v->dspark_target[i] = (uint8_t)(id - 1);
    }
    v->n_dspark_target = (uint32_t)kv->count;
    v->n_dspark = c->n_layer;
    v->dspark_block = block;
    v->dspark_noise = noise;
    return DI_OK;
}

di_status mw_gguf_read_deepseek4(model_weights *w, const gguf_file *f, const char *path,
                                 const char *arch, di_error **err)
{
    model_config *c = &w->config;
    model_config_v4 *v = &c->v4;
    const dsv4_keys ks = {f, path, arch}, *k = &ks;
    const int dspark = strcmp(arch, "dflash") == 0;
    di_status st;
    uint32_t key_len = 0, val_len = 0, nextn = 0, gating = 0, n_hash = 0;
    float hc_eps = 0.0f;
    double ff_exp = 0, clamp = 0, clamp_sh = 0;
    c->arch = MODEL_ARCH_DEEPSEEK_V4;
    c->rope_style = MODEL_ROPE_NORM; /* V4's interleaved RoPE: adjacent pairs */
    c->n_head_kv = 1;
    c->n_group = c->topk_group = 1;
    c->topk_method = MODEL_TOPK_NOAUX_TC;
    if ((st = need(k, "attention.head_count_kv", &c->n_head_kv, err)) != DI_OK ||
        (st = need(k, "attention.key_length", &key_len, err)) != DI_OK ||
        (st = need(k, "attention.value_length", &val_len, err)) != DI_OK ||
        (st = need(k, "rope.dimension_count", &c->qk_rope_head_dim, err)) != DI_OK ||
        (st = need(k, "attention.q_lora_rank", &c->q_lora_rank, err)) != DI_OK ||
        (st = need(k, "attention.sliding_window", &v->sliding_window, err)) != DI_OK ||
        (st = need(k, "expert_count", &c->n_expert, err)) != DI_OK ||
        (st = need(k, "expert_used_count", &c->n_expert_used, err)) != DI_OK ||
        (st = need(k, "expert_shared_count", &c->n_expert_shared, err)) != DI_OK ||
        (st = need_f32(k, "expert_weights_scale", &c->routed_scaling_factor, err)) != DI_OK ||
        (st = need(k, "expert_gating_func", &gating, err)) != DI_OK ||
        (st = need(k, "attention.indexer.head_count", &v->index_n_heads, err)) != DI_OK ||
        (st = need(k, "attention.indexer.key_length", &v->index_head_dim, err)) != DI_OK ||
        (st = need(k, "attention.indexer.top_k", &v->index_topk, err)) != DI_OK ||
        (st = need(k, "attention.output_group_count", &v->o_groups, err)) != DI_OK ||
        (st = need(k, "attention.output_lora_rank", &v->o_lora_rank, err)) != DI_OK ||
        (st = need_f32(k, "attention.compress_rope_freq_base", &v->compress_rope_theta, err)) !=
            DI_OK ||
        (st = need(k, "hyper_connection.count", &v->hc_mult, err)) != DI_OK ||
        (st = need(k, "hyper_connection.sinkhorn_iterations", &v->hc_sinkhorn_iters, err)) !=
            DI_OK ||
        (st = need_f32(k, "hyper_connection.epsilon", &hc_eps, err)) != DI_OK ||
        (st = need(k, "hash_layer_count", &n_hash, err)) != DI_OK)
        return st;
    v->hc_eps = hc_eps;
    /* An MTP export counts its NextN layers in block_count (stored after the
     * main ones): convert_hf_to_gguf.py --mtp writes them alone, a file of
     * their own (deepseek_v4_mtp.c attaches it to its model). */
    char key[128];
    snprintf(key, sizeof key, "%s.nextn_predict_layers", arch);
    gguf_get_u32(f, key, &nextn);
    if (nextn >= c->n_layer)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: %s %u leaves no layers of the %u", path,
                             key, nextn, c->n_layer);
    c->n_layer -= nextn;
    c->n_nextn_layer = nextn;
    if (c->n_layer > MODEL_V4_MAX_LAYERS)
        return di_error_setf(err, DI_ERR_UNSUPPORTED, "%s: %u layers are more than %d", path,
                             c->n_layer, MODEL_V4_MAX_LAYERS);
    if (key_len != val_len)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: %s.attention.key_length %u differs from value_length %u "
                             "(V4's one key/value head)",
                             path, arch, key_len, val_len);
    c->head_dim = key_len;
    if ((st = same_for_every_layer(k, "expert_feed_forward_length", c->n_layer, &ff_exp, err)) !=
            DI_OK ||
        (st = same_for_every_layer(k, "swiglu_clamp_exp", c->n_layer, &clamp, err)) != DI_OK)
        return st;
    if (!(ff_exp >= 1 && ff_exp <= 1 << 20 && ff_exp == floor(ff_exp)))
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: %s.expert_feed_forward_length %g is not a whole number from 1 "
                             "to 2^20",
                             path, arch, ff_exp);
    c->n_ff_exp = c->n_ff = (uint32_t)ff_exp;
    v->swiglu_limit = (float)clamp;
    snprintf(key, sizeof key, "%s.swiglu_clamp_shexp", arch);
    if (gguf_find(f, key)) {
        if ((st = same_for_every_layer(k, "swiglu_clamp_shexp", c->n_layer, &clamp_sh, err)) !=
            DI_OK)
            return st;
        if (clamp_sh != clamp)
            return di_error_setf(err, DI_ERR_UNSUPPORTED,
                                 "%s: %s %g differs from swiglu_clamp_exp %g (one clip for every "
                                 "expert is supported)",
                                 path, key, clamp_sh, clamp);
    }
    c->norm_topk_prob = 1;
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    gguf_get_bool(f, key, &c->norm_topk_prob);
    /* llama.cpp's llama_expert_gating_func_type: 2 sigmoid, 4 sqrt(softplus) */
    if (gating == 4)
        c->expert_gating = MODEL_EXPERT_GATING_SQRTSOFTPLUS;
    else if (gating == 2 && !dspark) /* (llama.cpp's DSpark draft requires sqrtsoftplus) */
        c->expert_gating = MODEL_EXPERT_GATING_SIGMOID;
    else
        return di_error_setf(
            err, DI_ERR_UNSUPPORTED, "%s: %s.expert_gating_func %u is not supported (%s)", path,
            arch, gating, dspark ? "4 sqrtsoftplus is" : "2 sigmoid, 4 sqrtsoftplus are");
    /* compress_ratios per layer: 0 the sliding window alone, 4 CSA (llama.cpp's
     * fixed CSA ratio), any other one rate of HCA; a DSpark GGUF's stages are
     * sliding-window layers (llama.cpp requires it too) */
    v->compress_rate_csa = 4;
    v->compress_rate_hca = 0;
    for (uint32_t i = 0; i < c->n_layer; i++) {
        double r = 0;
        if ((st = array_at(k, "attention.compress_ratios", c->n_layer, i, &r, err)) != DI_OK)
            return st;
        if (r == 0) {
            v->attention[i] = MODEL_V4_SLIDING;
        } else if (r == 4 && !dspark) {
            v->attention[i] = MODEL_V4_CSA;
        } else if (r >= 1 && r <= 4096 && r == floor(r) && !dspark &&
                   (v->compress_rate_hca == 0 || v->compress_rate_hca == r)) {
            v->attention[i] = MODEL_V4_HCA;
            v->compress_rate_hca = (uint32_t)r;
        } else {
            return di_error_setf(err, DI_ERR_UNSUPPORTED,
                                 "%s: %s.attention.compress_ratios[%u] is %g (%s)", path, arch, i,
                                 r,
                                 dspark ? "DSpark's stages are sliding-window layers: 0"
                                        : "0, 4 and one whole HCA rate up to 4096 are supported");
        }
        v->hash_moe[i] = i < n_hash;
    }
    if (v->compress_rate_hca == 0) v->compress_rate_hca = 128;
    if (dspark && (n_hash || nextn))
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: a DSpark GGUF with hash or NextN layers (llama.cpp's has none)",
                             path);
    if (dspark && (st = read_dspark(k, c, err)) != DI_OK) return st;
    return mw_check_v4(c, path, err);
}

/* deepseek_v4.c's names: expert e of layer l's gate, up or down projection. */
static void dsv4_expert_name(char *out, size_t size, uint32_t l, int k, int64_t e)
{
    static const char *const kinds[] = {"gate_proj", "up_proj", "down_proj"};
    snprintf(out, size, "model.layers.%u.mlp.experts.%lld.%s.weight", l, (long long)e, kinds[k]);
}

di_status mw_gguf_dsv4_experts(model_weights *w, const char *path, di_error **err)
{
    const model_config *c = &w->config;
    /* an MTP GGUF: the NextN layer after the main ones, which it lacks */
    const int mtp_only =
        c->n_nextn_layer > 0 && !model_weights_get(w, "model.layers.0.input_layernorm.weight");
    di_status st =
        mtp_only
            ? mw_gguf_split_experts(w, path, c->n_layer, c->n_layer + 1, 1, dsv4_expert_name, err)
            : mw_gguf_split_experts(w, path, 0, c->n_layer, 1, dsv4_expert_name, err);
    if (st != DI_OK) return st;
    /* any other MXFP4 tensor: deepseek_v4.c runs MXFP4 routed experts only */
    for (size_t i = 0; i < w->n_file_tensors; i++) {
        const model_tensor *t = &w->tensors[i];
        if (t->dtype == MODEL_DTYPE_MXFP4_GGML && !strstr(t->name, "_exps.weight"))
            return di_error_setf(err, DI_ERR_UNSUPPORTED,
                                 "%s: tensor '%s' is MXFP4, which deepinfer runs for the routed "
                                 "experts only",
                                 path, t->name);
    }
    return DI_OK;
}
