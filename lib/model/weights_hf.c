/* Opening a model from a Hugging Face directory: config.json (as transformers'
 * LlamaConfig / Qwen2Config write it, versions 4 and 5) and safetensors weights,
 * one model.safetensors or shards listed by model.safetensors.index.json.
 * Tensor names are mapped to GGUF names (llama.cpp's convert_hf_to_gguf.py
 * mapping of these architectures) and shapes reversed into ggml order; no weight
 * is permuted, so Llama keeps transformers' rotate_half RoPE (NEOX). */
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/config_json.h"
#include "model/weights_internal.h"
#include "util/file.h"

/* A required positive integer that fits uint32. */
di_status cfg_need_uint(cfg_ctx *c, const char *key, uint32_t *out)
{
    json_t *v = json_object_get(c->root, key);
    if (!v) return di_error_setf(c->err, DI_ERR_MODEL_FORMAT, "%s: %s is missing", c->file, key);
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > UINT32_MAX)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT, "%s: %s is not a positive integer",
                             c->file, key);
    *out = (uint32_t)json_integer_value(v);
    return DI_OK;
}

/* An optional positive integer: absent or null leaves *out. */
di_status cfg_opt_uint(cfg_ctx *c, json_t *obj, const char *key, uint32_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return DI_OK;
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > UINT32_MAX)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT, "%s: %s is not a positive integer",
                             c->file, key);
    *out = (uint32_t)json_integer_value(v);
    return DI_OK;
}

/* An optional number: absent or null leaves *out. */
di_status cfg_opt_float(cfg_ctx *c, json_t *obj, const char *key, float *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return DI_OK;
    if (!json_is_number(v))
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT, "%s: %s is not a number", c->file, key);
    /* a double past float's range has no float (C17 6.3.1.5: undefined) */
    double x = json_number_value(v);
    if (!(fabs(x) <= FLT_MAX))
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT, "%s: %s %g is out of a float's range",
                             c->file, key, x);
    *out = (float)x;
    return DI_OK;
}

/* bos_token_id / eos_token_id: an integer, a list of integers (the first is
 * taken), or null. */
static di_status token_id(cfg_ctx *c, const char *key, int32_t *out)
{
    json_t *v = json_object_get(c->root, key);
    if (json_is_array(v)) v = json_array_get(v, 0);
    if (!v || json_is_null(v)) return DI_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: %s is not a token id (an integer or a list of them)", c->file,
                             key);
    *out = (int32_t)json_integer_value(v);
    return DI_OK;
}

/* YaRN's magnitude correction, 0.1 · mscale · ln(scale) + 1 (1 for scale <= 1),
 * as transformers' get_mscale and DeepSeek-V3's yarn_get_mscale compute it. */
static float yarn_get_mscale(float scale, float mscale)
{
    if (scale <= 1.0f) return 1.0f;
    return 0.1f * mscale * logf(scale) + 1.0f;
}

static di_status read_rope(cfg_ctx *c, model_config *m)
{
    di_status st;
    if ((st = cfg_opt_float(c, c->root, "rope_theta", &m->rope_theta)) != DI_OK) return st;
    /* transformers 5 writes rope_parameters (with rope_theta inside); 4 wrote
     * rope_scaling. */
    const char *which = "rope_parameters";
    json_t *r = json_object_get(c->root, which);
    if (!r || json_is_null(r)) r = json_object_get(c->root, which = "rope_scaling");
    if (!r || json_is_null(r)) return DI_OK;
    if (!json_is_object(r))
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT, "%s: %s is not an object", c->file,
                             which);
    if ((st = cfg_opt_float(c, r, "rope_theta", &m->rope_theta)) != DI_OK) return st;
    json_t *t = json_object_get(r, "rope_type");
    if (!t) t = json_object_get(r, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : NULL;
    if (t && !type)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT, "%s: %s.rope_type is not a string",
                             c->file, which);
    if (!type || strcmp(type, "default") == 0)
        m->rope_scaling = MODEL_ROPE_SCALING_NONE;
    else if (strcmp(type, "linear") == 0)
        m->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
    else if (strcmp(type, "yarn") == 0)
        m->rope_scaling = MODEL_ROPE_SCALING_YARN;
    else if (strcmp(type, "llama3") == 0)
        m->rope_scaling = MODEL_ROPE_SCALING_LLAMA3;
    else
        return di_error_setf(
            c->err, DI_ERR_UNSUPPORTED,
            "%s: %s.rope_type '%.32s' is not supported (default, linear, yarn, llama3 "
            "are)",
            c->file, which, type);
    if (m->rope_scaling == MODEL_ROPE_SCALING_NONE) return DI_OK;
    if (!json_object_get(r, "factor"))
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT, "%s: %s.factor is missing", c->file,
                             which);
    if ((st = cfg_opt_float(c, r, "factor", &m->rope_factor)) != DI_OK ||
        (st = cfg_opt_uint(c, r, "original_max_position_embeddings", &m->rope_orig_ctx)) != DI_OK ||
        (st = cfg_opt_float(c, r, "beta_fast", &m->yarn_beta_fast)) != DI_OK ||
        (st = cfg_opt_float(c, r, "beta_slow", &m->yarn_beta_slow)) != DI_OK ||
        (st = cfg_opt_float(c, r, "mscale", &m->yarn_mscale)) != DI_OK ||
        (st = cfg_opt_float(c, r, "mscale_all_dim", &m->yarn_mscale_all_dim)) != DI_OK ||
        (st = cfg_opt_float(c, r, "low_freq_factor", &m->llama3_low_freq_factor)) != DI_OK ||
        (st = cfg_opt_float(c, r, "high_freq_factor", &m->llama3_high_freq_factor)) != DI_OK)
        return st;
    if (m->rope_scaling == MODEL_ROPE_SCALING_LLAMA3 && !m->rope_orig_ctx)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: %s.original_max_position_embeddings is missing (llama3 needs it)",
                             c->file, which);
    if (m->rope_scaling != MODEL_ROPE_SCALING_YARN) return DI_OK;
    /* Without original_max_position_embeddings transformers' YaRN uses
     * max_position_embeddings. */
    if (!m->rope_orig_ctx) m->rope_orig_ctx = m->n_ctx_train;
    json_t *tr = json_object_get(r, "truncate");
    if (tr && !json_is_boolean(tr))
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT, "%s: %s.truncate is not a boolean",
                             c->file, which);
    m->yarn_truncate = !json_is_false(tr);
    /* transformers' _compute_yarn_parameters: attention_factor, else the ratio
     * of get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when
     * both are given (and non-zero), else get_mscale(factor). */
    float given = 0.0f;
    if ((st = cfg_opt_float(c, r, "attention_factor", &given)) != DI_OK) return st;
    json_t *ms = json_object_get(r, "mscale"), *msa = json_object_get(r, "mscale_all_dim");
    if (json_object_get(r, "attention_factor") &&
        !json_is_null(json_object_get(r, "attention_factor")))
        m->yarn_attn_factor = given;
    else if (json_is_number(ms) && json_is_number(msa) && m->yarn_mscale != 0.0f &&
             m->yarn_mscale_all_dim != 0.0f)
        m->yarn_attn_factor = yarn_get_mscale(m->rope_factor, m->yarn_mscale) /
                              yarn_get_mscale(m->rope_factor, m->yarn_mscale_all_dim);
    else
        m->yarn_attn_factor = yarn_get_mscale(m->rope_factor, 1.0f);
    return DI_OK;
}

/* An optional non-negative integer: absent or null leaves *out. */
di_status cfg_opt_count(cfg_ctx *c, const char *key, uint32_t *out)
{
    json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) return DI_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 20)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT, "%s: %s is not an integer in [0, 2^20]",
                             c->file, key);
    *out = (uint32_t)json_integer_value(v);
    return DI_OK;
}

/* DeepSeek-V2/V3's MLA and MoE fields, with transformers' DeepseekV3Config /
 * DeepseekV2Config defaults where a field is optional; head_dim (config.json's is
 * qk_rope_head_dim) becomes qk_nope_head_dim + qk_rope_head_dim. */
static di_status read_deepseek(cfg_ctx *c, model_config *m)
{
    int v3 = m->arch == MODEL_ARCH_DEEPSEEK_V3;
    di_status st;
    m->q_lora_rank = 0;
    m->n_expert = 0;
    m->n_expert_shared = 0;
    m->n_expert_used = 1;
    m->n_group = 1;
    m->topk_group = 1;
    m->n_layer_dense_lead = 0;
    m->n_nextn_layer = 0;
    m->routed_scaling_factor = 1.0f;
    m->norm_topk_prob = 0;
    m->n_ff_exp = 0;
    if ((st = cfg_opt_count(c, "q_lora_rank", &m->q_lora_rank)) != DI_OK ||
        (st = cfg_need_uint(c, "kv_lora_rank", &m->kv_lora_rank)) != DI_OK ||
        (st = cfg_need_uint(c, "qk_nope_head_dim", &m->qk_nope_head_dim)) != DI_OK ||
        (st = cfg_need_uint(c, "qk_rope_head_dim", &m->qk_rope_head_dim)) != DI_OK ||
        (st = cfg_need_uint(c, "v_head_dim", &m->v_head_dim)) != DI_OK ||
        (st = cfg_opt_count(c, "n_routed_experts", &m->n_expert)) != DI_OK ||
        (st = cfg_opt_count(c, "n_shared_experts", &m->n_expert_shared)) != DI_OK ||
        (st = cfg_opt_count(c, "num_experts_per_tok", &m->n_expert_used)) != DI_OK ||
        (st = cfg_opt_count(c, "moe_intermediate_size", &m->n_ff_exp)) != DI_OK ||
        (st = cfg_opt_count(c, "n_group", &m->n_group)) != DI_OK ||
        (st = cfg_opt_count(c, "topk_group", &m->topk_group)) != DI_OK ||
        (st = cfg_opt_count(c, "first_k_dense_replace", &m->n_layer_dense_lead)) != DI_OK ||
        (st = cfg_opt_count(c, "num_nextn_predict_layers", &m->n_nextn_layer)) != DI_OK ||
        (st = cfg_opt_float(c, c->root, "routed_scaling_factor", &m->routed_scaling_factor)) !=
            DI_OK)
        return st;
    /* transformers' DeepseekV2 router never renormalises the top-k weights. */
    if (json_is_true(json_object_get(c->root, "attention_bias")) ||
        json_is_true(json_object_get(c->root, "mlp_bias")))
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                             "%s: attention_bias or mlp_bias true is not supported", c->file);
    m->norm_topk_prob = v3 && json_is_true(json_object_get(c->root, "norm_topk_prob"));
    m->head_dim = m->qk_nope_head_dim + m->qk_rope_head_dim;
    m->n_head_kv = m->n_head;
    /* rope_interleave (V3, default true) rotates adjacent pairs; V2's complex
     * rotary embedding does too. */
    json_t *il = json_object_get(c->root, "rope_interleave");
    m->rope_style = (v3 && json_is_false(il)) ? MODEL_ROPE_NEOX : MODEL_ROPE_NORM;
    m->expert_gating = v3 ? MODEL_EXPERT_GATING_SIGMOID : MODEL_EXPERT_GATING_SOFTMAX;
    json_t *sf = json_object_get(c->root, "scoring_func");
    if (json_is_string(sf) && strcmp(json_string_value(sf), v3 ? "sigmoid" : "softmax") != 0)
        return di_error_setf(
            c->err, DI_ERR_UNSUPPORTED,
            "%s: scoring_func '%.32s' is not supported for this architecture (%s is)", c->file,
            json_string_value(sf), v3 ? "sigmoid" : "softmax");
    const char *method = v3 ? "noaux_tc" : "greedy";
    json_t *tm = json_object_get(c->root, "topk_method");
    if (json_is_string(tm)) method = json_string_value(tm);
    if (v3 && strcmp(method, "noaux_tc") == 0)
        m->topk_method = MODEL_TOPK_NOAUX_TC;
    else if (!v3 && strcmp(method, "greedy") == 0)
        m->topk_method = MODEL_TOPK_GREEDY;
    else if (!v3 && strcmp(method, "group_limited_greedy") == 0)
        m->topk_method = MODEL_TOPK_GROUP_LIMITED;
    else
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                             "%s: topk_method '%.32s' is not supported (%s)", c->file, method,
                             v3 ? "noaux_tc is" : "greedy and group_limited_greedy are");
    if ((st = mw_check_moe(m, c->file, c->err)) != DI_OK) return st;
    return DI_OK;
}

static di_status read_config(model_weights *w, const char *dir, int *tie, di_error **err)
{
    char file[4096];
    snprintf(file, sizeof file, "%s/config.json", dir);
    struct stat cb;
    if (stat(file, &cb) != 0 && errno == ENOENT)
        return di_error_setf(err, DI_ERR_IO,
                             "%s: is a directory without a config.json: a model is a .gguf file or "
                             "a Hugging Face folder (config.json and *.safetensors)",
                             dir);
    if (di_regular_file(file) != 0)
        return di_error_setf(err, DI_ERR_IO, "%s: %s%s", file,
                             errno == EINVAL ? "not a regular file" : "cannot open: ",
                             errno == EINVAL ? "" : strerror(errno));
    json_error_t je;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        struct stat sb;
        if (stat(file, &sb) != 0)
            return di_error_setf(err, DI_ERR_IO, "%s: cannot open: no such file", file);
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: not valid JSON: %s (line %d, byte offset %d)", file, je.text,
                             je.line, je.position);
    }
    cfg_ctx c = {file, root, err};
    model_config *m = &w->config;
    di_status st = DI_OK;
    if (!json_is_object(root)) {
        st = di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: not a JSON object", file);
        goto done;
    }
    json_t *v = json_object_get(root, "_name_or_path");
    if (json_is_string(v))
        mw_copy_name(w->name, sizeof w->name, json_string_value(v), json_string_length(v));
    v = json_array_get(json_object_get(root, "architectures"), 0);
    if (json_is_string(v))
        mw_copy_name(w->architecture, sizeof w->architecture, json_string_value(v),
                     json_string_length(v));
    json_t *archs = json_object_get(root, "architectures");
    const char *arch = json_string_value(json_array_get(archs, 0));
    if (!arch) {
        st = di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: architectures is %s", file,
                           archs ? "not a list of strings" : "missing");
        goto done;
    }
    if (strcmp(arch, "LlamaForCausalLM") == 0)
        m->arch = MODEL_ARCH_LLAMA;
    else if (strcmp(arch, "Qwen2ForCausalLM") == 0)
        m->arch = MODEL_ARCH_QWEN2;
    else if (strcmp(arch, "DeepseekV3ForCausalLM") == 0)
        m->arch = MODEL_ARCH_DEEPSEEK_V3;
    else if (strcmp(arch, "DeepseekV2ForCausalLM") == 0)
        m->arch = MODEL_ARCH_DEEPSEEK_V2;
    else if (strcmp(arch, "DeepseekV4ForCausalLM") == 0 ||
             strcmp(arch, "DeepseekV41ForCausalLM") == 0)
        m->arch = MODEL_ARCH_DEEPSEEK_V4;
    else {
        st = di_error_setf(err, DI_ERR_UNSUPPORTED,
                           "%s: architectures[0] '%.64s' is not supported (LlamaForCausalLM, "
                           "Qwen2ForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, "
                           "DeepseekV4ForCausalLM and DeepseekV41ForCausalLM are)",
                           file, arch);
        goto done;
    }
    const int v4 = m->arch == MODEL_ARCH_DEEPSEEK_V4;
    /* DeepSeek-V4.1's text model is text_config (the token ids stay at the top) */
    const int v41 = strcmp(arch, "DeepseekV41ForCausalLM") == 0;
    cfg_ctx top = c;
    if (v41) {
        c.root = json_object_get(root, "text_config");
        if (!json_is_object(c.root)) {
            st = di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: text_config is not an object", file);
            goto done;
        }
    }
    m->rope_style = MODEL_ROPE_NEOX; /* transformers' rotate_half, weights as trained */
    m->rms_norm_eps = 0.0f;
    m->n_ctx_train = 0;
    if ((st = cfg_need_uint(&c, "vocab_size", &m->n_vocab)) != DI_OK ||
        (st = cfg_need_uint(&c, "hidden_size", &m->n_embd)) != DI_OK ||
        (st = cfg_need_uint(&c, "num_hidden_layers", &m->n_layer)) != DI_OK ||
        (st = cfg_need_uint(&c, "num_attention_heads", &m->n_head)) != DI_OK ||
        (!v4 && (st = cfg_need_uint(&c, "intermediate_size", &m->n_ff)) != DI_OK) ||
        (st = cfg_opt_uint(&c, c.root, "num_key_value_heads", &m->n_head_kv)) != DI_OK ||
        (st = cfg_opt_uint(&c, c.root, "head_dim", &m->head_dim)) != DI_OK ||
        (st = cfg_opt_uint(&c, c.root, "max_position_embeddings", &m->n_ctx_train)) != DI_OK ||
        (st = token_id(&top, "bos_token_id", &m->bos_token_id)) != DI_OK ||
        (st = token_id(&top, "eos_token_id", &m->eos_token_id)) != DI_OK)
        goto done;
    if (!json_object_get(c.root, "rms_norm_eps")) {
        st = di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: rms_norm_eps is missing", file);
        goto done;
    }
    if ((st = cfg_opt_float(&c, c.root, "rms_norm_eps", &m->rms_norm_eps)) != DI_OK ||
        (!v4 && (st = read_rope(&c, m)) != DI_OK))
        goto done;
    if (v4) {
        if ((st = v41 ? cfg_read_deepseek_v41(&c, m, root) : cfg_read_deepseek_v4(&c, m)) != DI_OK)
            goto done;
        m->n_ff = m->n_ff_exp; /* the shared expert's width */
    }
    if ((m->arch == MODEL_ARCH_DEEPSEEK_V3 || m->arch == MODEL_ARCH_DEEPSEEK_V2) &&
        (st = read_deepseek(&c, m)) != DI_OK)
        goto done;
    json_t *tw = json_object_get(c.root, "tie_word_embeddings");
    *tie = json_is_true(tw);
    json_t *act = json_object_get(c.root, "hidden_act");
    if (act && (!json_is_string(act) || strcmp(json_string_value(act), "silu") != 0)) {
        st = di_error_setf(err, DI_ERR_UNSUPPORTED,
                           "%s: hidden_act %s%.32s%s is not supported (silu is)", file,
                           json_is_string(act) ? "'" : "",
                           json_is_string(act) ? json_string_value(act) : "(not a string)",
                           json_is_string(act) ? "'" : "");
        goto done;
    }
    if (json_is_true(json_object_get(root, "use_sliding_window"))) {
        st = di_error_setf(err, DI_ERR_UNSUPPORTED, "%s: use_sliding_window true is not supported",
                           file);
        goto done;
    }
    const char *biases[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2 && m->arch == MODEL_ARCH_LLAMA; i++)
        if (json_is_true(json_object_get(root, biases[i]))) {
            st = di_error_setf(err, DI_ERR_UNSUPPORTED, "%s: %s true is not supported", file,
                               biases[i]);
            goto done;
        }
done:
    json_decref(root);
    return st;
}

/* Map a Hugging Face tensor name to its GGUF name; returns 0 when the name is
 * not one of the Llama/Qwen2 names (it is then kept as it is). */
static int gguf_name(const char *hf, char *out, size_t size)
{
    const char *dot = strrchr(hf, '.');
    if (!dot) return 0;
    const char *suffix = dot + 1; /* weight, bias, weight_scale_inv */
    size_t mlen = (size_t)(dot - hf);
    static const struct {
        const char *hf, *gguf;
    } top[] = {{"model.embed_tokens", "token_embd"},
               {"model.norm", "output_norm"},
               {"lm_head", "output"}},
      layer[] = {{"self_attn.q_proj", "attn_q"},
                 {"self_attn.k_proj", "attn_k"},
                 {"self_attn.v_proj", "attn_v"},
                 {"self_attn.o_proj", "attn_output"},
                 {"input_layernorm", "attn_norm"},
                 {"post_attention_layernorm", "ffn_norm"},
                 {"mlp.gate_proj", "ffn_gate"},
                 {"mlp.up_proj", "ffn_up"},
                 {"mlp.down_proj", "ffn_down"},
                 /* DeepSeek-V2/V3 (llama.cpp's deepseek2 names) */
                 {"self_attn.q_a_proj", "attn_q_a"},
                 {"self_attn.q_a_layernorm", "attn_q_a_norm"},
                 {"self_attn.q_b_proj", "attn_q_b"},
                 {"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"},
                 {"self_attn.kv_a_layernorm", "attn_kv_a_norm"},
                 {"self_attn.kv_b_proj", "attn_kv_b"},
                 {"mlp.gate", "ffn_gate_inp"},
                 {"mlp.shared_experts.gate_proj", "ffn_gate_shexp"},
                 {"mlp.shared_experts.up_proj", "ffn_up_shexp"},
                 {"mlp.shared_experts.down_proj", "ffn_down_shexp"},
                 /* the MTP (NextN) layer, model.layers.<num_hidden_layers> */
                 {"enorm", "nextn.enorm"},
                 {"hnorm", "nextn.hnorm"},
                 {"eh_proj", "nextn.eh_proj"},
                 {"embed_tokens", "nextn.embed_tokens"},
                 {"shared_head.norm", "nextn.shared_head_norm"},
                 {"shared_head.head", "nextn.shared_head_head"}};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strlen(top[i].hf) == mlen && memcmp(hf, top[i].hf, mlen) == 0) {
            snprintf(out, size, "%s.%s", top[i].gguf, suffix);
            return 1;
        }
    static const char prefix[] = "model.layers.";
    if (strncmp(hf, prefix, sizeof prefix - 1) != 0) return 0;
    const char *p = hf + sizeof prefix - 1;
    char *end;
    if (*p < '0' || *p > '9') return 0;
    unsigned long n = strtoul(p, &end, 10);
    if (*end != '.' || n > 100000) return 0;
    const char *mod = end + 1;
    size_t modlen = (size_t)(dot - mod);
    if (dot < mod) return 0;
    if (modlen == 8 && memcmp(mod, "mlp.gate", 8) == 0 &&
        strcmp(suffix, "e_score_correction_bias") == 0) {
        snprintf(out, size, "blk.%lu.exp_probs_b.bias", n);
        return 1;
    }
    /* mlp.experts.<E>.{gate,up,down}_proj: expert E of llama.cpp's stacked
     * ffn_*_exps, kept as its own 2-D tensor "blk.N.ffn_gate_exps.E.weight". */
    static const char experts[] = "mlp.experts.";
    if (modlen > sizeof experts - 1 && memcmp(mod, experts, sizeof experts - 1) == 0) {
        const char *q = mod + sizeof experts - 1;
        if (*q < '0' || *q > '9') return 0;
        unsigned long e = strtoul(q, &end, 10);
        if (*end != '.' || e > 100000) return 0;
        const char *proj = end + 1;
        size_t plen = (size_t)(dot - proj);
        static const char *const projs[][2] = {{"gate_proj", "ffn_gate_exps"},
                                               {"up_proj", "ffn_up_exps"},
                                               {"down_proj", "ffn_down_exps"}};
        for (size_t i = 0; i < 3; i++)
            if (strlen(projs[i][0]) == plen && memcmp(proj, projs[i][0], plen) == 0) {
                snprintf(out, size, "blk.%lu.%s.%lu.%s", n, projs[i][1], e, suffix);
                return 1;
            }
        return 0;
    }
    for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
        if (strlen(layer[i].hf) == modlen && memcmp(mod, layer[i].hf, modlen) == 0) {
            snprintf(out, size, "blk.%lu.%s.%s", n, layer[i].gguf, suffix);
            return 1;
        }
    return 0;
}

/* DeepSeek-V4's names: transformers' module names (kept, but for the three
 * GGUF names every model shares: token_embd, output_norm, output), or
 * DeepSeek's release layout — which transformers' save_pretrained writes too,
 * under "model." — renamed to transformers' as its conversion mapping does
 * ("layers.N.attn.wq_a.weight" -> "model.layers.N.self_attn.q_a_proj.weight",
 * ...; the per-expert w1/w2/w3 -> "model.layers.N.mlp.experts.E.{gate,down,
 * up}_proj.weight"); the MTP layer's "mtp.K.X" likewise to "model.mtp.K.X".
 * Returns 0 for a name kept as it is. */
static int dsv4_name(const char *hf, char *out, size_t size)
{
    static const struct {
        const char *from, *to;
    } top[] = {{"model.embed_tokens.weight", "token_embd.weight"},
               {"model.embed.weight", "token_embd.weight"},
               {"model.norm.weight", "output_norm.weight"},
               {"lm_head.weight", "output.weight"},
               {"embed.weight", "token_embd.weight"},
               {"norm.weight", "output_norm.weight"},
               {"head.weight", "output.weight"},
               {"hc_head_fn", "model.hc_head.hc_fn"},
               {"hc_head_base", "model.hc_head.hc_base"},
               {"hc_head_scale", "model.hc_head.hc_scale"}};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strcmp(hf, top[i].from) == 0) {
            snprintf(out, size, "%s", top[i].to);
            return 1;
        }
    if (strncmp(hf, "model.layers.", 13) == 0 || strncmp(hf, "model.mtp.", 10) == 0) hf += 6;
    /* the MTP layer's "mtp.K.<layer part>" as a layer's (its own e_proj,
     * h_proj, enorm, hnorm, norm and hc_head_* keep their names) */
    if (strncmp(hf, "layers.", 7) != 0 && strncmp(hf, "mtp.", 4) != 0) return 0;
    /* the release layout: a module path renamed piece by piece (longest first) */
    static const struct {
        const char *from, *to;
    } part[] = {
        {".attn.indexer.compressor.", ".self_attn.compressor.indexer."},
        /* DeepSeek-V4.1's indexer keys from the compressed entries (KProject) */
        {".attn.indexer.wk.", ".self_attn.compressor.indexer.k_proj."},
        {".attn.indexer.k_norm.", ".self_attn.compressor.indexer.k_norm."},
        {".attn.indexer.weights_proj.", ".self_attn.compressor.indexer.scorer.weights_proj."},
        {".attn.indexer.wq_b.", ".self_attn.compressor.indexer.q_b_proj."},
        {".attn.compressor.", ".self_attn.compressor."},
        {".attn.wq_a.", ".self_attn.q_a_proj."},
        {".attn.wq_b.", ".self_attn.q_b_proj."},
        {".attn.q_norm.", ".self_attn.q_a_norm."},
        {".attn.wkv.", ".self_attn.kv_proj."},
        {".attn.kv_norm.", ".self_attn.kv_norm."},
        {".attn.norm.", ".self_attn.kv_norm."},
        {".attn.wo_a.", ".self_attn.o_a_proj."},
        {".attn.wo_b.", ".self_attn.o_b_proj."},
        {".attn.attn_sink", ".self_attn.sinks"},
        {".attn_norm.", ".input_layernorm."},
        {".ffn_norm.", ".post_attention_layernorm."},
        {".hc_attn_fn", ".attn_hc.fn"},
        {".hc_attn_base", ".attn_hc.base"},
        {".hc_attn_scale", ".attn_hc.scale"},
        {".hc_ffn_fn", ".ffn_hc.fn"},
        {".hc_ffn_base", ".ffn_hc.base"},
        {".hc_ffn_scale", ".ffn_hc.scale"},
        {".ffn.gate.bias", ".mlp.gate.e_score_correction_bias"},
        {".ffn.shared_experts.w1.", ".mlp.shared_experts.gate_proj."},
        {".ffn.shared_experts.w2.", ".mlp.shared_experts.down_proj."},
        {".ffn.shared_experts.w3.", ".mlp.shared_experts.up_proj."},
        {".ffn.", ".mlp."}};
    char buf[1100];
    snprintf(buf, sizeof buf, "model.%s", hf);
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        char *at = strstr(buf, part[i].from);
        if (!at) continue;
        char tail[1100];
        snprintf(tail, sizeof tail, "%s", at + strlen(part[i].from));
        snprintf(at, sizeof buf - (size_t)(at - buf), "%s%s", part[i].to, tail);
    }
    /* within the compressors: wkv, wgate, ape, norm */
    static const struct {
        const char *from, *to;
    } leaf[] = {{".wkv.", ".kv_proj."},
                {".wgate.", ".gate_proj."},
                {".ape", ".position_bias"},
                {".norm.", ".kv_norm."}};
    char *comp = strstr(buf, ".compressor.");
    for (size_t i = 0; comp && i < sizeof leaf / sizeof leaf[0]; i++) {
        char *at = strstr(comp, leaf[i].from);
        if (!at) continue;
        char tail[1100];
        snprintf(tail, sizeof tail, "%s", at + strlen(leaf[i].from));
        snprintf(at, sizeof buf - (size_t)(at - buf), "%s%s", leaf[i].to, tail);
    }
    /* routed experts: .mlp.experts.E.w1/w2/w3 */
    static const char *const w123[][2] = {{".w1.weight", ".gate_proj.weight"},
                                          {".w2.weight", ".down_proj.weight"},
                                          {".w3.weight", ".up_proj.weight"},
                                          {".w1.scale", ".gate_proj.scale"},
                                          {".w2.scale", ".down_proj.scale"},
                                          {".w3.scale", ".up_proj.scale"},
                                          {".w1.weight_scale_inv", ".gate_proj.weight_scale_inv"},
                                          {".w2.weight_scale_inv", ".down_proj.weight_scale_inv"},
                                          {".w3.weight_scale_inv", ".up_proj.weight_scale_inv"}};
    if (strstr(buf, ".mlp.experts."))
        for (size_t i = 0; i < sizeof w123 / sizeof w123[0]; i++) {
            size_t lb = strlen(buf), lf = strlen(w123[i][0]);
            if (lb > lf && strcmp(buf + lb - lf, w123[i][0]) == 0) {
                buf[lb - lf] = 0;
                snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s", w123[i][1]);
                break;
            }
        }
    snprintf(out, size, "%s", buf);
    return 1;
}

static di_status add_shard(model_weights *w, const char *path, int tie, di_error **err)
{
    safetensors_file **shards = realloc(w->shards, (w->n_shards + 1) * sizeof(safetensors_file *));
    if (shards) w->shards = shards;
    char **paths = shards ? realloc(w->shard_paths, (w->n_shards + 1) * sizeof *paths) : NULL;
    if (paths) w->shard_paths = paths;
    char *path_copy = paths ? strdup(path) : NULL;
    if (!path_copy)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory opening %s", path);
    char msg[768];
    safetensors_file *f;
    di_status st = safetensors_open(path, &f, msg, sizeof msg);
    if (st != DI_OK) {
        free(path_copy);
        return di_error_setf(err, st, "%s", msg);
    }
    w->shards[w->n_shards] = f;
    w->shard_paths[w->n_shards++] = path_copy;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const safetensors_tensor *t = &f->tensors[i];
        if (strlen(t->name) > 1024)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: tensor name of %zu bytes is too long", path, strlen(t->name));
        char name[1100];
        int mapped = w->config.arch == MODEL_ARCH_DEEPSEEK_V4
                         ? dsv4_name(t->name, name, sizeof name)
                         : gguf_name(t->name, name, sizeof name);
        if (!mapped) snprintf(name, sizeof name, "%s", t->name);
        if (tie && strcmp(name, "output.weight") == 0) continue; /* transformers ties it */
        static const model_dtype dtypes[] = {
            [SAFETENSORS_F32] = MODEL_DTYPE_F32,      [SAFETENSORS_F16] = MODEL_DTYPE_F16,
            [SAFETENSORS_BF16] = MODEL_DTYPE_BF16,    [SAFETENSORS_F8_E4M3] = MODEL_DTYPE_FP8_E4M3,
            [SAFETENSORS_I64] = MODEL_DTYPE_I64,      [SAFETENSORS_I32] = MODEL_DTYPE_I32,
            [SAFETENSORS_F8_E8M0] = MODEL_DTYPE_E8M0, [SAFETENSORS_I8] = MODEL_DTYPE_I8};
        int64_t ne[4] = {1, 1, 1, 1};
        uint32_t n_dims = t->n_dims ? t->n_dims : 1;
        for (uint32_t d = 0; d < t->n_dims; d++) ne[d] = (int64_t)t->shape[t->n_dims - 1 - d];
        const void *data = t->data;
        size_t n_bytes = (size_t)(t->end - t->begin);
        size_t es = safetensors_dtype_size(t->dtype);
        if ((uintptr_t)data % es != 0) {
            /* The format does not promise alignment: copy to an aligned buffer. */
            void **owned = realloc(w->owned, (w->n_owned + 1) * sizeof *owned);
            if (!owned)
                return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", path);
            w->owned = owned;
            void *copy = malloc(n_bytes ? n_bytes : 1);
            if (!copy)
                return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", path);
            memcpy(copy, data, n_bytes);
            w->owned[w->n_owned++] = copy;
            data = copy;
        }
        st = mw_add_tensor(w, path, name, strlen(name), dtypes[t->dtype], n_dims, ne, data, n_bytes,
                           err);
        if (st != DI_OK) return st;
    }
    return DI_OK;
}

/* Shards from model.safetensors.index.json: every file its weight_map names, and
 * every tensor it lists found in the file it names. */
static di_status open_index(model_weights *w, const char *dir, const char *index, int tie,
                            di_error **err)
{
    if (di_regular_file(index) != 0)
        return di_error_setf(err, DI_ERR_IO, "%s: %s%s", index,
                             errno == EINVAL ? "not a regular file" : "cannot open: ",
                             errno == EINVAL ? "" : strerror(errno));
    json_error_t je;
    json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: not valid JSON: %s (line %d, byte offset %d)", index, je.text,
                             je.line, je.position);
    di_status st = DI_OK;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0) {
        st = di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: weight_map is %s", index,
                           map ? "not a non-empty object" : "missing");
        goto done;
    }
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v)
    {
        const char *file = json_string_value(v);
        if (!file || !*file || strchr(file, '/') || strcmp(file, "..") == 0) {
            st = di_error_setf(err, DI_ERR_MODEL_FORMAT,
                               "%s: weight_map['%.128s'] is not a file name", index, name);
            goto done;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        size_t s = 0;
        for (; s < w->n_shards; s++)
            if (strcmp(w->shard_paths[s], path) == 0) break;
        if (s == w->n_shards) {
            struct stat sb;
            if (stat(path, &sb) != 0) {
                st = di_error_setf(err, DI_ERR_IO, "%s: shard %s (of tensor '%.128s') is missing",
                                   index, path, name);
                goto done;
            }
            if ((st = add_shard(w, path, tie, err)) != DI_OK) goto done;
        }
        if (!safetensors_find(w->shards[s], name)) {
            st = di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: tensor '%.128s' is not in %s", index,
                               name, path);
            goto done;
        }
    }
done:
    json_decref(root);
    return st;
}

/* Attach "X_scale_inv" to a stacked fp8 X [n, rows, cols] (transformers'
 * fused experts, gate_up_proj / down_proj): F32 [n, ceil(rows / 128),
 * ceil(cols / 128)], 128x128 blocks of each of the n matrices. A name whose
 * X is missing is left alone. */
static di_status attach_fused_scale(model_weights *w, const char *dir, const model_tensor *s,
                                    di_error **err)
{
    static const char suffix[] = "_scale_inv";
    size_t n = strlen(s->name);
    if (n <= sizeof suffix - 1 || strcmp(s->name + n - (sizeof suffix - 1), suffix) != 0)
        return DI_OK;
    char base[1100];
    snprintf(base, sizeof base, "%.*s", (int)(n - (sizeof suffix - 1)), s->name);
    model_tensor *t = (model_tensor *)model_weights_get(w, base);
    if (!t) return DI_OK;
    if (t->dtype != MODEL_DTYPE_FP8_E4M3)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: '%s' scales '%s', which is not fp8",
                             dir, s->name, base);
    int64_t b0 = (t->ne[0] + 127) / 128, b1 = (t->ne[1] + 127) / 128;
    if (s->dtype != MODEL_DTYPE_F32 || t->n_dims != 3 || s->n_dims != 3 || s->ne[0] != b0 ||
        s->ne[1] != b1 || s->ne[2] != t->ne[2])
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: '%s' must be F32 of shape {%lld, %lld, %lld} (128x128 blocks "
                             "of each matrix of the 3-D '%s')",
                             dir, s->name, (long long)b0, (long long)b1, (long long)t->ne[2], base);
    t->scale = s;
    return DI_OK;
}

/* An E8M0 scale tensor (one 2^(e - 127) a byte) made f32 in place, its values
 * in an owned copy; 255 (E8M0's NaN) is refused. */
static di_status e8m0_to_f32(model_weights *w, const char *dir, model_tensor *s, di_error **err)
{
    const int64_t n = s->ne[0] * s->ne[1];
    void **owned = realloc(w->owned, (w->n_owned + 1) * sizeof *owned);
    if (owned) w->owned = owned;
    float *f = owned ? malloc((size_t)n * sizeof *f) : NULL;
    if (!f) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", dir);
    w->owned[w->n_owned++] = f;
    const uint8_t *e = s->data;
    for (int64_t k = 0; k < n; k++) {
        if (e[k] == 255)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: '%s' block %lld is E8M0's NaN (255)", dir, s->name,
                                 (long long)k);
        f[k] = ldexpf(1.0f, (int)e[k] - 127);
    }
    s->dtype = MODEL_DTYPE_F32;
    s->data = f;
    s->n_bytes = (size_t)n * sizeof *f;
    return DI_OK;
}

/* fp8-e4m3 one byte as a float (sign, 4 exponent bits of bias 7, 3 mantissa
 * bits; 0x7f / 0xff NaN), for widening. */
static float fp8_e4m3(uint8_t b)
{
    int e = (b >> 3) & 15, m = b & 7;
    float r = e == 15 && m == 7 ? NAN
              : e               ? ldexpf(1.0f + (float)m / 8.0f, e - 7)
                                : (float)m * 0x1p-9f;
    return b & 0x80 ? -r : r;
}

/* DeepSeek-V4.1's fp8 in blocks of block_rows x 32 (32: the matrices'
 * quantization_config.weight_block_size, scales [ceil(rows / 32), ceil(cols /
 * 32)]; 1: an Engram table's scale per 32 values of a row, [rows, cols / 32]),
 * scales f32 by now, widened to BF16 in an owned copy: an e4m3 value times a
 * power of two has at most 4 significant bits, so bf16 holds it exactly (a
 * scale that is not a power of two would round: refused). The matrix products
 * and the embedding rows then read bf16. */
static di_status widen_fp8_block32(model_weights *w, const char *dir, model_tensor *t,
                                   const model_tensor *s, int64_t block_rows, di_error **err)
{
    const int64_t cols = t->ne[0], rows = t->ne[1], scols = s->ne[0];
    void **owned = realloc(w->owned, (w->n_owned + 2) * sizeof *owned);
    if (owned) w->owned = owned;
    uint16_t *bf = owned ? malloc((size_t)(rows * cols) * sizeof *bf) : NULL;
    model_tensor *stored = bf ? malloc(sizeof *stored) : NULL;
    if (!stored) {
        free(bf);
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", dir);
    }
    w->owned[w->n_owned++] = bf;
    w->owned[w->n_owned++] = stored;
    *stored = *t;
    stored->scale = s;
    const uint8_t *q = t->data;
    const float *sc = s->data;
    for (int64_t k = 0; k < s->ne[0] * s->ne[1]; k++) {
        int e;
        if (!(sc[k] > 0.0f) || !isfinite(sc[k]) || frexpf(sc[k], &e) != 0.5f)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: '%s' block %lld is %g, not a positive power of two "
                                 "(scale_fmt ue8m0)",
                                 dir, s->name, (long long)k, (double)sc[k]);
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) {
            float f = fp8_e4m3(q[r * cols + k]) * sc[(r / block_rows) * scols + k / 32];
            uint32_t u;
            memcpy(&u, &f, sizeof u);
            if ((u & 0xffffu) || !isfinite(f))
                return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                     "%s: '%s' row %lld column %lld overflows or underflows "
                                     "bf16 with its block scale",
                                     dir, t->name, (long long)r, (long long)k);
            bf[r * cols + k] = (uint16_t)(u >> 16);
        }
    t->data = bf;
    t->dtype = MODEL_DTYPE_BF16;
    t->n_bytes = (size_t)(rows * cols) * sizeof *bf;
    t->scale = NULL;
    t->stored = stored;
    return DI_OK;
}

/* Pair every "<X>.weight_scale_inv" (or the release's "<X>.scale") with
 * "<X>.weight": fp8 with f32 or E8M0
 * scales per 128x128 block (DeepSeek's checkpoints), or DeepSeek-V4's MXFP4
 * experts — I8 codes [rows, cols / 2] with E8M0 scales [rows, cols / 32],
 * which become an MXFP4 weight of cols columns; and each stacked X's
 * "X_scale_inv" (attach_fused_scale). */
static di_status attach_scales(model_weights *w, const char *dir, di_error **err)
{
    static const char suffix[] = ".weight_scale_inv", release[] = ".scale";
    di_status st;
    for (size_t i = 0; i < w->n_tensors; i++) {
        model_tensor *s = &w->tensors[i];
        size_t n = strlen(s->name), cut;
        char base[1100];
        model_tensor *t;
        if (n > sizeof suffix - 1 && strcmp(s->name + n - (sizeof suffix - 1), suffix) == 0) {
            cut = sizeof suffix - 1;
        } else if (n > sizeof release - 1 &&
                   strcmp(s->name + n - (sizeof release - 1), release) == 0) {
            /* DeepSeek's release names a block scale "X.scale" beside "X.weight";
             * without one it is some other parameter (an mHC scale) */
            snprintf(base, sizeof base, "%.*s.weight", (int)(n - (sizeof release - 1)), s->name);
            if (!model_weights_get(w, base)) continue;
            cut = sizeof release - 1;
        } else {
            if ((st = attach_fused_scale(w, dir, s, err)) != DI_OK) return st;
            continue;
        }
        snprintf(base, sizeof base, "%.*s.weight", (int)(n - cut), s->name);
        if (!(t = (model_tensor *)model_weights_get(w, base)))
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: '%s' scales a tensor that is missing (%s)", dir, s->name,
                                 base);
        if (t->dtype == MODEL_DTYPE_I8) {
            if (s->dtype != MODEL_DTYPE_E8M0 || t->n_dims != 2 || s->n_dims != 2 ||
                s->ne[0] * 16 != t->ne[0] || s->ne[1] != t->ne[1])
                return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                     "%s: '%s' must be F8_E8M0 of shape {%lld, %lld} (one scale "
                                     "per 32 MXFP4 values of '%s')",
                                     dir, s->name, (long long)(t->ne[0] / 16), (long long)t->ne[1],
                                     base);
            if ((st = e8m0_to_f32(w, dir, s, err)) != DI_OK) return st;
            t->dtype = MODEL_DTYPE_MXFP4;
            t->ne[0] *= 2; /* two codes a byte */
            t->scale = s;
            continue;
        }
        if (t->dtype != MODEL_DTYPE_FP8_E4M3)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: '%s' scales '%s', which is not fp8",
                                 dir, s->name, base);
        /* an Engram table (V4.1): a scale per 32 values of a row */
        const size_t nb = strlen(base), suffix_len = sizeof ".engram.embed.weight" - 1;
        const int engram =
            nb > suffix_len && strcmp(base + nb - suffix_len, ".engram.embed.weight") == 0;
        const int64_t blk = engram || w->config.v4.fp8_block == 32 ? 32 : 128,
                      blk_rows = engram ? 1 : blk;
        int64_t b0 = (t->ne[0] + blk - 1) / blk, b1 = (t->ne[1] + blk_rows - 1) / blk_rows;
        if ((s->dtype != MODEL_DTYPE_F32 && s->dtype != MODEL_DTYPE_E8M0) || t->n_dims != 2 ||
            s->n_dims != 2 || s->ne[0] != b0 || s->ne[1] != b1)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: '%s' must be F32 or F8_E8M0 of shape {%lld, %lld} (%lldx%lld "
                                 "blocks of '%s')",
                                 dir, s->name, (long long)b0, (long long)b1, (long long)blk_rows,
                                 (long long)blk, base);
        if (s->dtype == MODEL_DTYPE_E8M0 && (st = e8m0_to_f32(w, dir, s, err)) != DI_OK) return st;
        if (blk == 32) {
            if ((st = widen_fp8_block32(w, dir, t, s, blk_rows, err)) != DI_OK) return st;
            continue;
        }
        t->scale = s;
    }
    return DI_OK;
}

di_status mw_open_hf(model_weights *w, const char *dir, di_error **err)
{
    int tie = 0;
    di_status st = read_config(w, dir, &tie, err);
    if (st != DI_OK) return st;
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (stat(path, &sb) == 0) {
        st = open_index(w, dir, path, tie, err);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (stat(path, &sb) != 0)
            return di_error_setf(
                err, DI_ERR_IO,
                "%s: neither model.safetensors nor model.safetensors.index.json is there", dir);
        st = add_shard(w, path, tie, err);
    }
    if (st != DI_OK) return st;
    w->n_file_tensors = w->n_tensors; /* a folder's loader derives none */
    if ((st = attach_scales(w, dir, err)) != DI_OK) return st;
    w->config.attn_qkv_bias = model_weights_get(w, "blk.0.attn_q.bias") != NULL;
    if (!tie && !model_weights_get(w, "output.weight"))
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: lm_head.weight is missing and tie_word_embeddings is not true",
                             dir);
    return DI_OK;
}
