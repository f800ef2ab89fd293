/* DeepSeek-V4.1's config.json (config_json.h): DeepseekV41ForCausalLM,
 * model_type deepseek_v41, the text model's fields in text_config, read as
 * DeepInfer 0.1.0's hugging_face/config.py reads them (docs/deepseek-v41.md):
 * compress_ratios 0 / 1 / 2 per layer, the sharing maps from
 * kv_source_layer_ids, index_source_layer_ids and index_k_source_layer_ids
 * (from the first source on, each layer takes the nearest source at or before
 * it; a segment of the finer map never crosses one of the coarser), YOCO from
 * the first ratio-1 layer, rope_scaling meaning YaRN (mscale 1), shifted mHC
 * with DeepInfer's defaults (post mix times 2), quantization_config's
 * weight_block_size. */
#include <jansson.h>
#include <string.h>

#include "model/config_json.h"
#include "model/engram.h"
#include "model/weights_internal.h"

static di_status unsupported(cfg_ctx *c, const char *field, const char *why)
{
    return di_error_setf(c->err, DI_ERR_UNSUPPORTED, "%s: %s: %s", c->file, field, why);
}

/* The candidate-block top-k (DeepInfer's _shared_layer_cfg and
 * cross_layer.py _validate_candidate_config, index_attn.py's limits):
 * candidate_source_layer_id absent or null: none; else a compressed top-k
 * source whose later layers all share its ratio, candidate_topk_blocks a
 * multiple of 8 up to 4096, candidate_block_size 8 or 16, the blocks holding
 * at least index_topk entries when a layer follows the source. */
static di_status candidates(cfg_ctx *c, model_config *m)
{
    model_config_v4 *v = &m->v4;
    json_t *src = json_object_get(c->root, "candidate_source_layer_id");
    if (!src || json_is_null(src)) return DI_OK;
    json_int_t s = json_is_integer(src) ? json_integer_value(src) : -1;
    if (s < 0 || s >= (json_int_t)m->n_layer)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: candidate_source_layer_id is not a layer number below %u",
                             c->file, m->n_layer);
    if (!v->rate[s] || v->index_src[s] != s)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: candidate_source_layer_id %lld is not a compressed layer making "
                             "its own top-k (index_source_layer_ids)",
                             c->file, (long long)s);
    uint32_t blocks = 0, block = 0;
    di_status st;
    if ((st = cfg_need_uint(c, "candidate_topk_blocks", &blocks)) != DI_OK ||
        (st = cfg_need_uint(c, "candidate_block_size", &block)) != DI_OK)
        return st;
    if (blocks % 8 || blocks > 4096)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: candidate_topk_blocks %u is not a multiple of 8 up to 4096",
                             c->file, blocks);
    if (block != 8 && block != 16)
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                             "%s: candidate_block_size %u is not 8 or 16 (DeepInfer's)", c->file,
                             block);
    for (uint32_t l = (uint32_t)s + 1; l < m->n_layer; l++)
        if (v->rate[l] != v->rate[s])
            return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                                 "%s: compress_ratios[%u] is %u, not the candidate source's %u "
                                 "(every layer after candidate_source_layer_id shares its ratio)",
                                 c->file, l, v->rate[l], v->rate[s]);
    /* (checked per consumer, as DeepInfer does: a source that is the last
     * main layer has none, whatever index_topk) */
    if ((uint32_t)s + 1 < m->n_layer && (uint64_t)blocks * block < v->index_topk)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: candidate_topk_blocks %u of candidate_block_size %u hold fewer "
                             "entries than index_topk %u",
                             c->file, blocks, block, v->index_topk);
    v->cand_src = (uint32_t)s;
    v->cand_blocks = blocks;
    v->cand_block = block;
    return DI_OK;
}

/* Engram's fields (text_config, as DeepInfer's hugging_face/config.py
 * _build_engram reads them): engram_layer_ids absent, null or empty: none. */
static di_status engram_config(cfg_ctx *c, model_config *m)
{
    model_config_v4 *v = &m->v4;
    json_t *ids = json_object_get(c->root, "engram_layer_ids");
    if (!ids || json_is_null(ids) || (json_is_array(ids) && !json_array_size(ids))) return DI_OK;
    if (!json_is_array(ids) || json_array_size(ids) > m->n_layer)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: engram_layer_ids is not a list of at most %u layer numbers",
                             c->file, m->n_layer);
    for (size_t k = 0; k < json_array_size(ids); k++) {
        json_t *e = json_array_get(ids, k);
        json_int_t l = json_is_integer(e) ? json_integer_value(e) : -1;
        if (l < 0 || l >= (json_int_t)m->n_layer || (k && l <= v->engram_layer[k - 1]))
            return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                                 "%s: engram_layer_ids[%zu] is not a layer number below %u, "
                                 "after the one before it",
                                 c->file, k, m->n_layer);
        v->engram_layer[k] = (uint8_t)l;
    }
    v->n_engram = (uint32_t)json_array_size(ids);
    v->engram_pad = 2; /* DeepInfer's DEEPINFER_ENGRAM_PAD_TOKEN default */
    di_status st;
    if ((st = cfg_need_uint(c, "engram_max_ngram_size", &v->engram_max_ngram)) != DI_OK ||
        (st = cfg_need_uint(c, "engram_n_heads", &v->engram_heads)) != DI_OK ||
        (st = cfg_need_uint(c, "engram_head_dim", &v->engram_head_dim)) != DI_OK ||
        (st = cfg_need_uint(c, "engram_vocab_size", &v->engram_table_vocab)) != DI_OK ||
        (st = cfg_need_uint(c, "engram_compressed_vocab_size", &v->engram_compressed_vocab)) !=
            DI_OK ||
        (st = cfg_opt_uint(c, c->root, "engram_pad_token_id", &v->engram_pad)) != DI_OK)
        return st;
    if (v->engram_max_ngram < 2 || v->engram_max_ngram > ENGRAM_MAX_NGRAM)
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                             "%s: engram_max_ngram_size %u is outside [2, %d]", c->file,
                             v->engram_max_ngram, ENGRAM_MAX_NGRAM);
    if (v->engram_heads > 1024 || v->engram_head_dim > 65536 || v->engram_table_vocab < 2)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: engram_n_heads (%u), engram_head_dim (%u) or engram_vocab_size "
                             "(%u) is out of range",
                             c->file, v->engram_heads, v->engram_head_dim, v->engram_table_vocab);
    if (v->engram_pad >= m->n_vocab)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: engram_pad_token_id %u is outside the vocabulary (%u)", c->file,
                             v->engram_pad, m->n_vocab);
    return DI_OK;
}

/* A *_source_layer_ids list (absent or null: every compressed layer is its own
 * source) into map: each layer from the first source on -> the nearest source
 * at or before it, the others themselves. */
static di_status source_map(cfg_ctx *c, const model_config *m, const char *key, json_t *list,
                            uint8_t *map)
{
    const model_config_v4 *v = &m->v4;
    uint8_t is_src[MODEL_V4_MAX_LAYERS] = {0};
    if (!list || json_is_null(list)) {
        for (uint32_t i = 0; i < m->n_layer; i++) is_src[i] = v->rate[i] > 0;
    } else {
        if (!json_is_array(list)) return unsupported(c, key, "is not a list of layer numbers");
        for (size_t k = 0; k < json_array_size(list); k++) {
            json_t *e = json_array_get(list, k);
            if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                json_integer_value(e) >= (json_int_t)m->n_layer)
                return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                                     "%s: %s[%zu] is not a layer number below %u", c->file, key, k,
                                     m->n_layer);
            is_src[json_integer_value(e)] = 1;
        }
    }
    int last = -1;
    for (uint32_t i = 0; i < m->n_layer; i++) {
        if (is_src[i]) last = (int)i;
        map[i] = (uint8_t)(last < 0 || is_src[i] ? i : (uint32_t)last);
        if (map[i] != i && (v->rate[i] == 0 || v->rate[i] != v->rate[map[i]]))
            return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                                 "%s: %s: layer %u (compress ratio %u) cannot share layer %u's "
                                 "(ratio %u)",
                                 c->file, key, i, v->rate[i], map[i], v->rate[map[i]]);
    }
    return DI_OK;
}

/* Segments of fine within segments of coarse (coarse[fine[l]] == coarse[l]). */
static di_status nested(cfg_ctx *c, const model_config *m, const char *key, const uint8_t *fine,
                        const uint8_t *coarse)
{
    for (uint32_t i = 0; i < m->n_layer; i++)
        if (coarse[fine[i]] != coarse[i])
            return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                                 "%s: %s: layer %u takes layer %u's across a segment of a "
                                 "coarser sharing map",
                                 c->file, key, i, fine[i]);
    return DI_OK;
}

/* A string field that must be one value when present. */
static di_status must_be(cfg_ctx *c, const char *key, const char *want)
{
    json_t *j = json_object_get(c->root, key);
    if (!j) return DI_OK;
    if (!json_is_string(j) || strcmp(json_string_value(j), want) != 0) {
        char why[96];
        snprintf(why, sizeof why, "is not '%s', which deepinfer runs", want);
        return unsupported(c, key, why);
    }
    return DI_OK;
}

di_status cfg_read_deepseek_v41(cfg_ctx *c, model_config *m, json_t *top)
{
    model_config_v4 *v = &m->v4;
    di_status st;
    json_t *mt = json_object_get(top, "model_type");
    if (!json_is_string(mt) || strcmp(json_string_value(mt), "deepseek_v41") != 0)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: model_type is not 'deepseek_v41' (DeepseekV41ForCausalLM's)",
                             c->file);
    if (m->n_layer > MODEL_V4_MAX_LAYERS)
        return di_error_setf(c->err, DI_ERR_UNSUPPORTED, "%s: %u layers are more than %d", c->file,
                             m->n_layer, MODEL_V4_MAX_LAYERS);
    if (!json_object_get(c->root, "num_key_value_heads")) m->n_head_kv = 1; /* else the file's */
    m->n_expert_shared = 1;
    m->n_group = m->topk_group = 1;
    m->n_layer_dense_lead = 0;
    m->norm_topk_prob = 1;
    m->topk_method = MODEL_TOPK_NOAUX_TC;
    m->rope_style = MODEL_ROPE_NORM; /* interleaved pairs */
    m->expert_gating = MODEL_EXPERT_GATING_SQRTSOFTPLUS;
    m->rope_scaling = MODEL_ROPE_SCALING_NONE;
    m->routed_scaling_factor = 1.5f;
    m->rope_theta = 10000.0f;
    *v = (model_config_v4){.v41 = 1, .hc_sinkhorn_iters = 20, .hc_eps = 1e-6f};
    uint32_t mtp = 0;
    json_t *nextn = json_object_get(c->root, "num_nextn_predict_layers");
    if (json_is_integer(nextn) && json_integer_value(nextn) >= 0 &&
        json_integer_value(nextn) < MODEL_V4_MAX_LAYERS)
        mtp = (uint32_t)json_integer_value(nextn);
    else if (nextn && !json_is_null(nextn))
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: num_nextn_predict_layers is not a layer count", c->file);
    if ((st = cfg_need_uint(c, "head_dim", &m->head_dim)) != DI_OK ||
        (st = cfg_need_uint(c, "qk_rope_head_dim", &m->qk_rope_head_dim)) != DI_OK ||
        (st = cfg_need_uint(c, "q_lora_rank", &m->q_lora_rank)) != DI_OK ||
        (st = cfg_need_uint(c, "moe_intermediate_size", &m->n_ff_exp)) != DI_OK ||
        (st = cfg_need_uint(c, "n_routed_experts", &m->n_expert)) != DI_OK ||
        (st = cfg_opt_count(c, "n_shared_experts", &m->n_expert_shared)) != DI_OK ||
        (st = cfg_need_uint(c, "num_experts_per_tok", &m->n_expert_used)) != DI_OK ||
        (st = cfg_opt_float(c, c->root, "routed_scaling_factor", &m->routed_scaling_factor)) !=
            DI_OK ||
        (st = cfg_opt_float(c, c->root, "rope_theta", &m->rope_theta)) != DI_OK ||
        (st = cfg_opt_float(c, c->root, "compress_rope_theta", &v->compress_rope_theta)) != DI_OK ||
        (st = cfg_need_uint(c, "hc_mult", &v->hc_mult)) != DI_OK ||
        (st = cfg_opt_uint(c, c->root, "hc_sinkhorn_iters", &v->hc_sinkhorn_iters)) != DI_OK ||
        (st = cfg_opt_float(c, c->root, "hc_eps", &v->hc_eps)) != DI_OK ||
        (st = cfg_opt_float(c, c->root, "swiglu_limit", &v->swiglu_limit)) != DI_OK ||
        (st = cfg_need_uint(c, "sliding_window", &v->sliding_window)) != DI_OK ||
        (st = cfg_need_uint(c, "o_groups", &v->o_groups)) != DI_OK ||
        (st = cfg_need_uint(c, "o_lora_rank", &v->o_lora_rank)) != DI_OK ||
        (st = cfg_need_uint(c, "index_n_heads", &v->index_n_heads)) != DI_OK ||
        (st = cfg_need_uint(c, "index_head_dim", &v->index_head_dim)) != DI_OK ||
        (st = cfg_need_uint(c, "index_topk", &v->index_topk)) != DI_OK ||
        (st = must_be(c, "scoring_func", "sqrtsoftplus")) != DI_OK ||
        (st = must_be(c, "topk_method", "noaux_tc")) != DI_OK)
        return st;
    if (json_is_false(json_object_get(c->root, "norm_topk_prob")))
        return unsupported(c, "norm_topk_prob", "false is not V4.1's (its routers renormalise)");
    if (json_is_false(json_object_get(c->root, "hc_shifted")))
        return unsupported(c, "hc_shifted", "false (unshifted mHC with an HC head) is not run");
    if ((st = engram_config(c, m)) != DI_OK) return st;
    /* compress_ratios: the main layers', then the DSpark stages' (not read) */
    json_t *cr = json_object_get(c->root, "compress_ratios");
    if (!json_is_array(cr) || json_array_size(cr) != (size_t)m->n_layer + mtp)
        return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                             "%s: compress_ratios must list num_hidden_layers + "
                             "num_nextn_predict_layers (%u) ratios",
                             c->file, m->n_layer + mtp);
    v->n_prefill_layer = m->n_layer;
    for (uint32_t i = 0; i < m->n_layer; i++) {
        json_t *r = json_array_get(cr, i);
        json_int_t x = json_is_integer(r) ? json_integer_value(r) : -1;
        if (x < 0 || x > 2)
            return di_error_setf(c->err, DI_ERR_UNSUPPORTED,
                                 "%s: compress_ratios[%u] is not 0, 1 or 2 (DeepSeek-V4.1's)",
                                 c->file, i);
        v->rate[i] = (uint8_t)x;
        v->attention[i] = x ? MODEL_V4_CSA : MODEL_V4_SLIDING;
        if (x == 1 && v->n_prefill_layer == m->n_layer) v->n_prefill_layer = i;
    }
    /* the DSpark head (DeepInfer's only head after the main layers); without
     * dspark_block_size the layers after the main ones are not run */
    if (mtp && json_object_get(c->root, "dspark_block_size") &&
        (st = cfg_read_dspark(c, m, mtp, 1)) != DI_OK)
        return st;
    json_t *kv = json_object_get(c->root, "kv_source_layer_ids");
    json_t *ik = json_object_get(c->root, "index_k_source_layer_ids");
    if ((st = source_map(c, m, "kv_source_layer_ids", kv, v->kv_src)) != DI_OK ||
        (st = source_map(c, m, "index_source_layer_ids",
                         json_object_get(c->root, "index_source_layer_ids"), v->index_src)) !=
            DI_OK ||
        (st = source_map(c, m, "index_k_source_layer_ids", ik && !json_is_null(ik) ? ik : kv,
                         v->index_k_src)) != DI_OK ||
        (st = nested(c, m, "index_source_layer_ids", v->index_src, v->index_k_src)) != DI_OK ||
        (st = nested(c, m, "index_k_source_layer_ids", v->index_k_src, v->kv_src)) != DI_OK)
        return st;
    if ((st = candidates(c, m)) != DI_OK) return st;
    /* rope_scaling present: YaRN on the compressed layers, cos/sin unscaled */
    json_t *rs = json_object_get(c->root, "rope_scaling");
    if (rs && !json_is_null(rs)) {
        if (!json_is_object(rs) || !json_is_number(json_object_get(rs, "factor")) ||
            !json_is_integer(json_object_get(rs, "original_max_position_embeddings")))
            return di_error_setf(c->err, DI_ERR_MODEL_FORMAT,
                                 "%s: rope_scaling needs factor and "
                                 "original_max_position_embeddings (YaRN)",
                                 c->file);
        m->rope_scaling = MODEL_ROPE_SCALING_YARN;
        m->yarn_beta_fast = 32.0f;
        m->yarn_beta_slow = 1.0f;
        if ((st = cfg_opt_float(c, rs, "factor", &m->rope_factor)) != DI_OK ||
            (st = cfg_opt_uint(c, rs, "original_max_position_embeddings", &m->rope_orig_ctx)) !=
                DI_OK ||
            (st = cfg_opt_float(c, rs, "beta_fast", &m->yarn_beta_fast)) != DI_OK ||
            (st = cfg_opt_float(c, rs, "beta_slow", &m->yarn_beta_slow)) != DI_OK)
            return st;
        m->yarn_truncate = 1;
        m->yarn_attn_factor = 1.0f;
    }
    /* DeepInfer requires [32, 32]; without a quantization_config the weights are
     * not fp8 (bf16 / f32 checkpoints) */
    json_t *q = json_object_get(top, "quantization_config");
    if (q && !json_is_null(q)) {
        json_t *wbs = json_object_get(q, "weight_block_size");
        json_t *b0 = json_array_get(wbs, 0), *b1 = json_array_get(wbs, 1);
        json_int_t b = json_is_integer(b0) ? json_integer_value(b0) : 0;
        if (json_array_size(wbs) != 2 || (b != 32 && b != 128) || !json_is_integer(b1) ||
            json_integer_value(b1) != b)
            return unsupported(c, "quantization_config.weight_block_size",
                               "is not [32, 32] or [128, 128]");
        v->fp8_block = (uint32_t)b;
    }
    if (json_is_true(json_object_get(c->root, "attention_bias")))
        return unsupported(c, "attention_bias", "true is not supported");
    return mw_check_v4(m, c->file, c->err);
}
