/* DeepSeek-V4's config.json fields (config_json.h), as transformers 5.24's
 * DeepseekV4Config reads them, defaults included, with its folding of
 * DeepSeek's release keys: compress_ratios (0 / 4 / 128 per layer) for
 * layer_types, compress_rate_csa / compress_rate_hca for compress_rates,
 * num_hash_layers for mlp_layer_types, qk_rope_head_dim for
 * partial_rotary_factor, and a flat rope dict for the compressed branches'
 * YaRN (whose attention_factor then defaults to 1: V4 does not scale cos/sin). */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "model/config_json.h"
#include "model/weights_internal.h"

static di_status bad(cfg_ctx *c, di_status st, const char *what)
{
    return di_error_setf(c->err, st, "%s: %s", c->file, what);
}

/* layer_types (names) or compress_ratios (0 / 4 / 128). */
static di_status read_layer_types(cfg_ctx *c, model_config *m, uint32_t rate_csa, uint32_t rate_hca)
{
    model_config_v4 *v = &m->v4;
    json_t *lt = json_object_get(c->root, "layer_types");
    json_t *cr = json_object_get(c->root, "compress_ratios");
    if (json_is_array(lt)) {
        if (json_array_size(lt) < m->n_layer)
            return bad(c, DI_ERR_MODEL_FORMAT, "layer_types has fewer entries than layers");
        for (uint32_t i = 0; i < m->n_layer; i++) {
            const char *t = json_string_value(json_array_get(lt, i));
            if (t && strcmp(t, "sliding_attention") == 0)
                v->attention[i] = MODEL_V4_SLIDING;
            else if (t && strcmp(t, "compressed_sparse_attention") == 0)
                v->attention[i] = MODEL_V4_CSA;
            else if (t && strcmp(t, "heavily_compressed_attention") == 0)
                v->attention[i] = MODEL_V4_HCA;
            else
                return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                                     "%s: layer_types[%u] '%.48s' is not supported "
                                     "(sliding_attention, compressed_sparse_attention and "
                                     "heavily_compressed_attention are)",
                                     c->file, i, t ? t : "(not a string)");
        }
    } else if (json_is_array(cr)) {
        if (json_array_size(cr) < m->n_layer)
            return bad(c, DI_ERR_MODEL_FORMAT, "compress_ratios has fewer entries than layers");
        for (uint32_t i = 0; i < m->n_layer; i++) {
            json_t *r = json_array_get(cr, i);
            json_int_t x = json_is_integer(r) ? json_integer_value(r) : -1;
            if (x == 0)
                v->attention[i] = MODEL_V4_SLIDING;
            else if (x == 4)
                v->attention[i] = MODEL_V4_CSA;
            else if (x == 128)
                v->attention[i] = MODEL_V4_HCA;
            else
                return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                                     "%s: compress_ratios[%u] is not 0, 4 or 128", c->file, i);
        }
    } else if (lt || cr) {
        return bad(c, DI_ERR_MODEL_FORMAT, "layer_types is not a list");
    } else { /* V4-Pro's default: two HCA layers, then CSA and HCA alternating */
        for (uint32_t i = 0; i < m->n_layer; i++)
            v->attention[i] = i < 2 ? MODEL_V4_HCA : (i - 2) % 2 ? MODEL_V4_CSA : MODEL_V4_HCA;
    }
    (void)rate_csa;
    (void)rate_hca;
    return DI_OK;
}

/* The MTP layer (num_nextn_predict_layers; the first one is run): stored
 * after the main layers (mtp.0.*), a sliding-window block with scored MoE, as
 * llama.cpp's deepseek4 graph runs DeepSeek-V4's. DeepSeek's compress_ratios
 * may list it after the main layers: anything but 0 there is refused. */
static di_status read_mtp_type(cfg_ctx *c, model_config *m, uint32_t mtp)
{
    if (json_object_get(c->root, "dspark_block_size")) return cfg_read_dspark(c, m, mtp, 0);
    m->n_nextn_layer = mtp > 0;
    if (!mtp) return DI_OK;
    if (m->n_layer >= MODEL_V4_MAX_LAYERS)
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                             "%s: %u layers and an MTP layer exceed the %d DeepSeek-V4 layers "
                             "deepinfer holds",
                             c->file, m->n_layer, MODEL_V4_MAX_LAYERS);
    json_t *r = json_array_get(json_object_get(c->root, "compress_ratios"), m->n_layer);
    if (r && !(json_is_integer(r) && json_integer_value(r) == 0))
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                             "%s: compress_ratios[%u] (the MTP layer's) is not 0: deepinfer runs "
                             "DeepSeek-V4's MTP layer as a sliding-window layer only",
                             c->file, m->n_layer);
    const char *t =
        json_string_value(json_array_get(json_object_get(c->root, "layer_types"), m->n_layer));
    if (json_array_get(json_object_get(c->root, "layer_types"), m->n_layer) &&
        !(t && strcmp(t, "sliding_attention") == 0))
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                             "%s: layer_types[%u] (the MTP layer's) is not sliding_attention: "
                             "deepinfer runs DeepSeek-V4's MTP layer as a sliding-window layer "
                             "only",
                             c->file, m->n_layer);
    m->v4.attention[m->n_layer] = MODEL_V4_SLIDING;
    m->v4.hash_moe[m->n_layer] = 0;
    return DI_OK;
}

/* DeepSeek-V4.1's own DSpark keys: the stages' expert counts (required,
 * as DeepInfer reads them), the Markov rank (checked against the tensor at
 * load) and dspark_target_attn_input (DeepInfer runs only true). */
static di_status v41_dspark(cfg_ctx *c, model_config *m)
{
    model_config_v4 *v = &m->v4;
    uint32_t rank = 0;
    di_status st;
    if ((st = cfg_need_uint(c, "dspark_n_routed_experts", &v->dspark_n_expert)) != DI_OK ||
        (st = cfg_need_uint(c, "dspark_num_experts_per_tok", &v->dspark_n_expert_used)) != DI_OK ||
        (st = cfg_need_uint(c, "dspark_markov_rank", &rank)) != DI_OK)
        return st;
    if (v->dspark_n_expert_used > v->dspark_n_expert || v->dspark_n_expert > 4096)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: dspark_num_experts_per_tok %u is more than "
                             "dspark_n_routed_experts %u (or that is past 4096)",
                             c->file, v->dspark_n_expert_used, v->dspark_n_expert);
    json_t *ai = json_object_get(c->root, "dspark_target_attn_input");
    if (ai && !json_is_true(ai))
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                             "%s: dspark_target_attn_input is not true: DeepSeek-V4.1's DSpark "
                             "head reads the target layers' attention input (DeepInfer runs "
                             "no other)",
                             c->file);
    v->dspark_markov_rank = rank;
    return DI_OK;
}

/* DeepSeek-V4-Flash-DSpark's draft head (the keys llama.cpp's converter
 * reads: dspark_block_size, dspark_target_layer_ids, dspark_noise_token_id):
 * its num_nextn_predict_layers stages after the main layers, each a
 * sliding-window layer with scored MoE (compress_ratios 0 there, as llama.cpp
 * requires); no MTP layer then. DeepSeek-V4.1's adds the keys DeepInfer's
 * hugging_face/config.py _build_dflash_cfg reads (v41_dspark). */
di_status cfg_read_dspark(cfg_ctx *c, model_config *m, uint32_t stages, int v41)
{
    model_config_v4 *v = &m->v4;
    uint32_t block = 0;
    di_status st;
    if ((st = cfg_opt_uint(c, c->root, "dspark_block_size", &block)) != DI_OK) return st;
    if (block < 1 || block > 64)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: dspark_block_size %u is not in [1, 64]", c->file, block);
    /* (any token id, 0 included, as a DSpark GGUF's mask_token_id) */
    json_t *nz = json_object_get(c->root, "dspark_noise_token_id");
    if (!json_is_integer(nz) || json_integer_value(nz) < 0 ||
        json_integer_value(nz) >= (json_int_t)m->n_vocab)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: dspark_noise_token_id is missing or not a token id below the "
                             "vocabulary's %u",
                             c->file, m->n_vocab);
    if (stages < 1 || stages > MODEL_V4_MAX_LAYERS - m->n_layer)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: num_nextn_predict_layers %u (the DSpark stages) is not in [1, "
                             "%u]",
                             c->file, stages, MODEL_V4_MAX_LAYERS - m->n_layer);
    json_t *ids = json_object_get(c->root, "dspark_target_layer_ids");
    if (!json_is_array(ids) || !json_array_size(ids) || json_array_size(ids) > m->n_layer)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: dspark_target_layer_ids is not a list of 1 to %u main layers",
                             c->file, m->n_layer);
    for (size_t k = 0; k < json_array_size(ids); k++) {
        json_t *e = json_array_get(ids, k);
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) >= (json_int_t)m->n_layer)
            return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                                 "%s: dspark_target_layer_ids[%zu] is not a main layer (0 to %u)",
                                 c->file, k, m->n_layer - 1);
        v->dspark_target[k] = (uint8_t)json_integer_value(e);
    }
    if (v41 && (st = v41_dspark(c, m)) != DI_OK) return st;
    json_t *cr = v41 ? NULL : json_object_get(c->root, "compress_ratios");
    for (uint32_t s = 0; s < stages; s++) {
        json_t *r = json_array_get(cr, m->n_layer + s);
        if (r && !(json_is_integer(r) && json_integer_value(r) == 0))
            return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                                 "%s: compress_ratios[%u] (DSpark stage %u) is not 0: DSpark's "
                                 "stages are sliding-window layers",
                                 c->file, m->n_layer + s, s);
        /* layer_types and mlp_layer_types may list the stages too */
        json_t *lt = json_array_get(json_object_get(c->root, "layer_types"), m->n_layer + s),
               *mt = json_array_get(json_object_get(c->root, "mlp_layer_types"), m->n_layer + s);
        if (lt && !(json_is_string(lt) && strcmp(json_string_value(lt), "sliding_attention") == 0))
            return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                                 "%s: layer_types[%u] (DSpark stage %u) is not sliding_attention: "
                                 "DSpark's stages are sliding-window layers",
                                 c->file, m->n_layer + s, s);
        if (mt && !(json_is_string(mt) && strcmp(json_string_value(mt), "moe") == 0))
            return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                                 "%s: mlp_layer_types[%u] (DSpark stage %u) is not moe: DSpark's "
                                 "stages route by score (llama.cpp's draft has no hash layers)",
                                 c->file, m->n_layer + s, s);
        v->attention[m->n_layer + s] = MODEL_V4_SLIDING;
        v->hash_moe[m->n_layer + s] = 0;
    }
    v->n_dspark = stages;
    v->dspark_block = block;
    v->dspark_noise = (uint32_t)json_integer_value(nz);
    v->n_dspark_target = (uint32_t)json_array_size(ids);
    m->n_nextn_layer = 0;
    return DI_OK;
}

/* mlp_layer_types (hash_moe / moe) or num_hash_layers (default 3). */
static di_status read_mlp_types(cfg_ctx *c, model_config *m)
{
    json_t *mt = json_object_get(c->root, "mlp_layer_types");
    if (mt && !json_is_null(mt)) {
        if (!json_is_array(mt) || json_array_size(mt) < m->n_layer)
            return bad(c, DI_ERR_MODEL_FORMAT, "mlp_layer_types is not a list of every layer");
        for (uint32_t i = 0; i < m->n_layer; i++) {
            const char *t = json_string_value(json_array_get(mt, i));
            if (t && strcmp(t, "hash_moe") == 0)
                m->v4.hash_moe[i] = 1;
            else if (t && strcmp(t, "moe") == 0)
                m->v4.hash_moe[i] = 0;
            else
                return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                                     "%s: mlp_layer_types[%u] '%.48s' is not supported "
                                     "(hash_moe and moe are)",
                                     c->file, i, t ? t : "(not a string)");
        }
        return DI_OK;
    }
    uint32_t n_hash = 3;
    di_status st = cfg_opt_count(c, "num_hash_layers", &n_hash);
    for (uint32_t i = 0; i < m->n_layer; i++) m->v4.hash_moe[i] = i < n_hash;
    return st;
}

/* The compressed branches' RoPE: rope_parameters.compress (transformers'
 * nested form) or a flat rope_parameters / rope_scaling (DeepSeek's). */
static di_status read_compress_rope(cfg_ctx *c, model_config *m)
{
    di_status st;
    json_t *rp = json_object_get(c->root, "rope_parameters");
    if (!rp || json_is_null(rp)) rp = json_object_get(c->root, "rope_scaling");
    if (rp && !json_is_null(rp) && !json_is_object(rp))
        return bad(c, DI_ERR_MODEL_FORMAT, "rope_parameters is not an object");
    json_t *main_rp = json_object_get(rp, "main"), *r = json_object_get(rp, "compress");
    int nested = json_is_object(main_rp) && json_is_object(r);
    if (nested) {
        json_t *mt = json_object_get(main_rp, "rope_type");
        if (json_is_string(mt) && strcmp(json_string_value(mt), "default") != 0)
            return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                                 "%s: rope_parameters.main.rope_type '%.32s' is not supported "
                                 "(default is)",
                                 c->file, json_string_value(mt));
        if ((st = cfg_opt_float(c, main_rp, "rope_theta", &m->rope_theta)) != DI_OK ||
            (st = cfg_opt_float(c, r, "rope_theta", &m->v4.compress_rope_theta)) != DI_OK)
            return st;
    } else {
        r = rp;
    }
    json_t *t = r ? json_object_get(r, "rope_type") : NULL;
    if (!t && r) t = json_object_get(r, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : "default";
    if (strcmp(type, "default") == 0) {
        m->rope_scaling = MODEL_ROPE_SCALING_NONE;
        return DI_OK;
    }
    if (strcmp(type, "yarn") != 0)
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                             "%s: the compressed branches' rope_type '%.32s' is not supported "
                             "(default and yarn are)",
                             c->file, type);
    m->rope_scaling = MODEL_ROPE_SCALING_YARN;
    if (!json_is_number(json_object_get(r, "factor")))
        return bad(c, DI_ERR_MODEL_FORMAT, "the YaRN rope parameters lack factor");
    if (!json_is_integer(json_object_get(r, "original_max_position_embeddings")))
        return bad(c, DI_ERR_MODEL_FORMAT,
                   "the YaRN rope parameters lack original_max_position_embeddings");
    if ((st = cfg_opt_float(c, r, "factor", &m->rope_factor)) != DI_OK ||
        (st = cfg_opt_uint(c, r, "original_max_position_embeddings", &m->rope_orig_ctx)) != DI_OK ||
        (st = cfg_opt_float(c, r, "beta_fast", &m->yarn_beta_fast)) != DI_OK ||
        (st = cfg_opt_float(c, r, "beta_slow", &m->yarn_beta_slow)) != DI_OK)
        return st;
    /* transformers reads truncate from the top of rope_parameters, which the
     * nested form never has: the correction range is always truncated. */
    m->yarn_truncate = 1;
    json_t *af = json_object_get(r, "attention_factor");
    if (json_is_number(af)) {
        m->yarn_attn_factor = (float)json_number_value(af);
    } else if (!nested) {
        m->yarn_attn_factor = 1.0f; /* DeepseekV4Config's setdefault */
    } else {
        float ms = 0, msa = 0;
        if ((st = cfg_opt_float(c, r, "mscale", &ms)) != DI_OK ||
            (st = cfg_opt_float(c, r, "mscale_all_dim", &msa)) != DI_OK)
            return st;
        float f = m->rope_factor;
#define MSCALE(s, k) ((s) <= 1.0f ? 1.0f : 0.1f * (k)*logf(s) + 1.0f)
        m->yarn_attn_factor =
            ms != 0.0f && msa != 0.0f ? MSCALE(f, ms) / MSCALE(f, msa) : MSCALE(f, 1.0f);
#undef MSCALE
    }
    return DI_OK;
}

di_status cfg_read_deepseek_v4(cfg_ctx *c, model_config *m)
{
    model_config_v4 *v = &m->v4;
    di_status st;
    if (m->n_layer > MODEL_V4_MAX_LAYERS)
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED, "%s: %u layers are more than %d", c->file,
                             m->n_layer, MODEL_V4_MAX_LAYERS);
    /* transformers' defaults (DeepseekV4Config) */
    m->head_dim = 512;
    m->n_head_kv = 1;
    m->q_lora_rank = 1024;
    m->n_ff_exp = 2048;
    m->n_expert = 256;
    m->n_expert_shared = 1;
    m->n_expert_used = 6;
    m->routed_scaling_factor = 1.5f;
    m->rope_theta = 10000.0f;
    m->n_group = m->topk_group = 1;
    m->n_layer_dense_lead = 0;
    m->norm_topk_prob = 1; /* V4's routers always renormalise */
    m->topk_method = MODEL_TOPK_NOAUX_TC;
    m->rope_style = MODEL_ROPE_NORM; /* V4's interleaved RoPE: adjacent pairs */
    *v = (model_config_v4){.sliding_window = 128,
                           .compress_rate_csa = 4,
                           .compress_rate_hca = 128,
                           .compress_rope_theta = 160000.0f,
                           .hc_mult = 4,
                           .hc_sinkhorn_iters = 20,
                           .hc_eps = 1e-6f,
                           .swiglu_limit = 10.0f,
                           .o_groups = 8,
                           .o_lora_rank = 1024,
                           .index_n_heads = 64,
                           .index_head_dim = 128,
                           .index_topk = 512};
    float prf = 0.0f;
    uint32_t rope_dim = 0, mtp = 0;
    if ((st = cfg_opt_uint(c, c->root, "head_dim", &m->head_dim)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "num_key_value_heads", &m->n_head_kv)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "q_lora_rank", &m->q_lora_rank)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "moe_intermediate_size", &m->n_ff_exp)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "n_routed_experts", &m->n_expert)) != DI_OK ||
        (st = cfg_opt_count(c, "n_shared_experts", &m->n_expert_shared)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "num_experts_per_tok", &m->n_expert_used)) != DI_OK ||
        (st = cfg_opt_float(c, c->root, "routed_scaling_factor", &m->routed_scaling_factor)) !=
            DI_OK ||
        (st = cfg_opt_float(c, c->root, "rope_theta", &m->rope_theta)) != DI_OK ||
        (st = cfg_opt_float(c, c->root, "compress_rope_theta", &v->compress_rope_theta)) != DI_OK ||
        (st = cfg_opt_float(c, c->root, "partial_rotary_factor", &prf)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "qk_rope_head_dim", &rope_dim)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "hc_mult", &v->hc_mult)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "hc_sinkhorn_iters", &v->hc_sinkhorn_iters)) != DI_OK ||
        (st = cfg_opt_float(c, c->root, "hc_eps", &v->hc_eps)) != DI_OK ||
        (st = cfg_opt_float(c, c->root, "swiglu_limit", &v->swiglu_limit)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "sliding_window", &v->sliding_window)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "o_groups", &v->o_groups)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "o_lora_rank", &v->o_lora_rank)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "index_n_heads", &v->index_n_heads)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "index_head_dim", &v->index_head_dim)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "index_topk", &v->index_topk)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "compress_rate_csa", &v->compress_rate_csa)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "compress_rate_hca", &v->compress_rate_hca)) != DI_OK ||
        (st = cfg_opt_count(c, "num_nextn_predict_layers", &mtp)) != DI_OK)
        return st;
    json_t *rates = json_object_get(c->root, "compress_rates");
    if (rates && !json_is_null(rates)) {
        if (!json_is_object(rates))
            return bad(c, DI_ERR_MODEL_FORMAT, "compress_rates is not an object");
        if ((st = cfg_opt_uint(c, rates, "compressed_sparse_attention", &v->compress_rate_csa)) !=
                DI_OK ||
            (st = cfg_opt_uint(c, rates, "heavily_compressed_attention", &v->compress_rate_hca)) !=
                DI_OK)
            return st;
    }
    if ((st = read_layer_types(c, m, v->compress_rate_csa, v->compress_rate_hca)) != DI_OK ||
        (st = read_mlp_types(c, m)) != DI_OK || (st = read_compress_rope(c, m)) != DI_OK)
        return st;
    /* partial_rotary_factor (transformers), else qk_rope_head_dim / head_dim
     * (DeepSeek's key), else 64 / 512; a factor outside (0, 1] has no rotary
     * part (and its product with head_dim may have no uint32_t) */
    json_t *prf_json = json_object_get(c->root, "partial_rotary_factor");
    if (json_is_number(prf_json) && !(prf > 0.0f && prf <= 1.0f))
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: partial_rotary_factor %g is not in (0, 1]", c->file, (double)prf);
    m->qk_rope_head_dim = prf > 0.0f ? (uint32_t)((float)m->head_dim * prf)
                          : rope_dim ? rope_dim
                                     : m->head_dim / 8;
    if ((st = read_mtp_type(c, m, mtp)) != DI_OK) return st;
    json_t *sf = json_object_get(c->root, "scoring_func");
    const char *scoring = json_is_string(sf) ? json_string_value(sf) : "sqrtsoftplus";
    if (strcmp(scoring, "sqrtsoftplus") == 0)
        m->expert_gating = MODEL_EXPERT_GATING_SQRTSOFTPLUS;
    else if (strcmp(scoring, "sigmoid") == 0)
        m->expert_gating = MODEL_EXPERT_GATING_SIGMOID;
    else
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                             "%s: scoring_func '%.32s' is not supported for DeepSeek-V4 "
                             "(sqrtsoftplus and sigmoid are; transformers 5.24 runs no other)",
                             c->file, scoring);
    if (json_is_true(json_object_get(c->root, "attention_bias")) ||
        json_is_true(json_object_get(c->root, "mlp_bias")))
        return bad(c, DI_ERR_UNSUPPORTED, "attention_bias or mlp_bias true is not supported");
    return mw_check_v4(m, c->file, c->err);
}

di_status mw_check_v4(model_config *m, const char *file, di_error **err)
{
    const model_config_v4 *v = &m->v4;
    const char *why = NULL;
    if (m->n_head_kv != 1)
        why = "num_key_value_heads must be 1 (V4 shares one key/value head)";
    else if (m->head_dim > 1024 || m->qk_rope_head_dim == 0 || m->qk_rope_head_dim % 2 ||
             m->qk_rope_head_dim > m->head_dim)
        why = "head_dim and the rotary part (partial_rotary_factor) are out of range";
    else if (!v->o_groups || m->n_head % v->o_groups || !v->o_lora_rank)
        why = "o_groups must divide num_attention_heads";
    else if (!v->hc_mult || v->hc_mult > 16 || !v->hc_sinkhorn_iters || v->hc_sinkhorn_iters > 1000)
        why = "hc_mult (1..16) or hc_sinkhorn_iters (1..1000) is out of range";
    else if (!v->sliding_window ||
             (!v->v41 && (v->compress_rate_csa < 1 || v->compress_rate_hca < 1 ||
                          v->compress_rate_csa > 4096 || v->compress_rate_hca > 4096)))
        why = "sliding_window or a compress rate is out of range";
    else if (!v->index_n_heads || !v->index_head_dim || v->index_head_dim > 1024 ||
             v->index_head_dim % 2 || v->index_head_dim < m->qk_rope_head_dim || !v->index_topk ||
             v->index_topk > 65536)
        why = "the indexer's fields (index_n_heads, index_head_dim, index_topk) are out of range";
    else if (!(v->swiglu_limit > 0.0f))
        why = "swiglu_limit must be positive (transformers clamps at it)";
    else if (!(v->hc_eps >= 0.0f) || !(m->v4.compress_rope_theta > 0.0f))
        why = "hc_eps must not be negative and compress_rope_theta must be positive";
    else if (!m->q_lora_rank || !m->n_expert || !m->n_ff_exp)
        why = "q_lora_rank, n_routed_experts and moe_intermediate_size must be positive";
    else if (m->n_expert_shared != 1)
        why = "n_shared_experts must be 1 (deepseek_v4.c runs one shared expert)";
    if (why) return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: %s", file, why);
    return mw_check_moe(m, file, err);
}
