/* DeepSeek-V4 forward pass (deepseek_v4.h), on the device behind
 * backend/backend.h, as transformers 5.24's DeepseekV4ForCausalLM computes it
 * (the V4 paper's sections cited there).
 *
 * The residual is hc streams per token (mHC, §2.2): x [n, hc, n_embd], the
 * embedding copied into each. Per layer, each of the two blocks:
 *   mix = fn · RMSNorm(flatten(x))                 (unweighted norm, [n, (2 + hc) hc])
 *   pre, post, comb = hc_pre(mix);  c = sum_j pre_j x_j
 *   y = Block(RMSNorm(c) * norm_weight)            (attention, then the MoE)
 *   x_k = post_k y + sum_j comb[j, k] x_j           (hc_post)
 * then c = sum_j pre_j x_j with the head's pre only, logits = RMSNorm(c) ·
 * output_norm · Woutput.
 *
 * Attention (§2.3), one K = V head shared by every query head:
 *   qa = RMSNorm(h Wq_a) * q_a_norm;  q = UnweightedRMSNorm_per_head(qa Wq_b)
 *   kv = RMSNorm(h Wkv) * kv_norm;  RoPE on the last qk_rope_head_dim of each
 *   (adjacent pairs; the "main" table on sliding layers, the "compress" one,
 *   compress_rope_theta with its YaRN, on CSA/HCA layers)
 *   keys: the window's last sliding_window kv rows, plus the compressor's
 *   entries (HCA: every finished one; CSA: the lightning indexer's top-k)
 *   o = softmax([q·k / sqrt(head_dim), sink_h]) without the sink · keys
 *   o's rope part rotated back by -pos; out = grouped(o) Wo_b, the heads in
 *   o_groups groups each projected by its rows of Wo_a to o_lora_rank.
 * Compressor (CSA rate 4 with two overlapping series, HCA rate 128): the
 * window's rows h Wkv_c and h Wgate_c pooled by a softmax over the window
 * (plus position_bias), RMSNorm'd, rotated at the window's first position. The
 * indexer runs its own compressor at index_head_dim over the same windows and
 * scores queries qa Wq_b_i with weights h Wweights (§2.3.1).
 * MoE (§2.1): hash layers take tid2eid[token]'s experts, the others the top-k
 * of sqrtsoftplus (or sigmoid) scores + the correction bias; weights the
 * scores renormalised times routed_scaling_factor; routed experts and one
 * shared expert, every SwiGLU clipped at swiglu_limit.
 *
 * The cache of the one sequence, per layer: a ring of window + n_batch kv
 * rows, rings of 2 rate + n_batch compressor (and indexer) rows (the windows
 * a chunk closes), and the emitted entries. */
#include "model/deepseek_v4.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/deepseek_v4_internal.h"
#include "model/kv_pool.h"
#include "model/load.h"
#include "model/model_internal.h"
#include "util/error.h"

const char *dsv4_layer_prefix(const dsv4 *d, uint32_t i, char *buf, size_t size)
{
    if (i < d->cfg.n_layer || d->mtp_w) /* (an MTP GGUF numbers it as a layer) */
        snprintf(buf, size, "model.layers.%u.", i);
    else if (d->dspark_w) /* (a DSpark GGUF's stages are its layers) */
        snprintf(buf, size, "model.layers.%u.", i - d->cfg.n_layer);
    else
        snprintf(buf, size, "model.mtp.%u.", i - d->cfg.n_layer);
    return buf;
}

const model_weights *dsv4_layer_weights(const dsv4 *d, uint32_t i)
{
    if (i < d->cfg.n_layer) return d->w;
    return d->mtp_w ? d->mtp_w : d->dspark_w ? d->dspark_w : d->w;
}

const model_tensor *dsv4_layer_tensor(const dsv4 *d, uint32_t i, const char *suffix,
                                      uint32_t n_dims, const int64_t *ne, di_error **err,
                                      di_status *st)
{
    char name[160], pre[40];
    snprintf(name, sizeof name, "%s%s", dsv4_layer_prefix(d, i, pre, sizeof pre), suffix);
    const model_tensor *t = NULL;
    *st = model_weights_require(dsv4_layer_weights(d, i), name, n_dims, ne, &t, err);
    return t;
}

di_status dsv4_flat_vector(dsv4 *d, model_tensor *view, const model_tensor *t, const float **out,
                           di_error **err)
{
    *view = *t;
    view->n_dims = 1;
    view->ne[0] = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    view->ne[1] = view->ne[2] = view->ne[3] = 1;
    return d->be->ops->vector(d->be, view, out, err);
}

/* Rows [r0, r0 + n) of the 2-D weight (or of a stacked 3-D one, as rows of
 * [ne[2] ne[1], ne[0]]) t, as a matrix; fp8 block scales follow when the rows
 * stay within 128-row blocks as the whole weight has them. */
static di_status row_view(dsv4 *d, model_tensor *view, model_tensor *scale_view,
                          const model_tensor *t, const model_tensor *scale, int64_t r0, int64_t n,
                          const backend_matrix **out, di_error **err)
{
    const int64_t cols = t->ne[0];
    size_t row_bytes = t->n_bytes / (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
    *view = *t;
    view->n_dims = 2;
    view->ne[1] = n;
    view->ne[2] = view->ne[3] = 1;
    view->data = (const char *)t->data + (size_t)r0 * row_bytes;
    view->n_bytes = (size_t)n * row_bytes;
    view->scale = NULL;
    if (t->dtype == MODEL_DTYPE_FP8_E4M3) {
        if (!scale)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: fp8 without its block scales",
                                 t->name);
        /* per 2-D matrix (ne[1] rows), ceil(ne[1] / 128) scale rows */
        const int64_t rows = t->ne[1], srows = (rows + 127) / 128, scols = (cols + 127) / 128;
        int64_t m = r0 / rows, local = r0 % rows; /* the stacked matrix and its row */
        if ((local % 128 != 0 && local % 128 + n > 128) || local + n > rows)
            return di_error_setf(err, DI_ERR_UNSUPPORTED,
                                 "%s: rows %lld..%lld cross its 128-row fp8 scale blocks", t->name,
                                 (long long)r0, (long long)r0 + (long long)n);
        *scale_view = *scale;
        scale_view->n_dims = 2;
        scale_view->ne[0] = scols;
        scale_view->ne[1] = (n + 127) / 128;
        scale_view->ne[2] = scale_view->ne[3] = 1;
        scale_view->data = (const float *)scale->data + (m * srows + local / 128) * scols;
        scale_view->n_bytes = (size_t)(scale_view->ne[1] * scols) * sizeof(float);
        view->scale = scale_view;
    }
    return d->be->ops->matrix(d->be, view, out, err);
}

static di_status load_compressor(dsv4 *d, uint32_t i, const char *prefix, v4_compressor *c,
                                 int64_t width, int rate, int overlap, model_tensor *views,
                                 di_error **err)
{
    const model_config *cf = &d->cfg;
    const int64_t E = cf->n_embd, cw = overlap ? 2 * width : width;
    char name[160], pre[40];
    dsv4_layer_prefix(d, i, pre, sizeof pre);
    di_status st;
    c->width = width;
    c->cw = cw;
    c->rate = rate;
    c->overlap = overlap;
    snprintf(name, sizeof name, "%s%s.kv_proj.weight", pre, prefix);
    if ((st = model_matrix(dsv4_layer_weights(d, i), d->be, name, E, cw, &c->kv, err)) != DI_OK)
        return st;
    snprintf(name, sizeof name, "%s%s.gate_proj.weight", pre, prefix);
    if ((st = model_matrix(dsv4_layer_weights(d, i), d->be, name, E, cw, &c->gate, err)) != DI_OK)
        return st;
    snprintf(name, sizeof name, "%s%s.kv_norm.weight", pre, prefix);
    if ((st = model_vector(dsv4_layer_weights(d, i), d->be, name, width, &c->norm, err)) != DI_OK)
        return st;
    snprintf(name, sizeof name, "%s%s.position_bias", pre, prefix);
    const model_tensor *pb;
    int64_t ne[2] = {cw, rate};
    if ((st = model_weights_require(dsv4_layer_weights(d, i), name, 2, ne, &pb, err)) != DI_OK)
        return st;
    return dsv4_flat_vector(d, &views[0], pb, &c->bias, err);
}

/* DeepSeek-V4.1's compressed attention of layer i (docs/deepseek-v41.md): a
 * KV source's compressor (ratio 1: the projection alone; 2: with its gate; no
 * position bias, no overlap), a key source's KProject (keys of index_head_dim
 * from the pre-RoPE entries, normed), a top-k source's query and weights
 * projections; the sources' layer numbers. */
static di_status load_v41_attention(dsv4 *d, uint32_t i, v4_layer *L, di_error **err)
{
    const model_config *c = &d->cfg;
    const model_config_v4 *v = &c->v4;
    const int64_t E = c->n_embd, hd = c->head_dim, QL = c->q_lora_rank, ihd = v->index_head_dim,
                  IH = v->index_n_heads;
    const model_weights *w = dsv4_layer_weights(d, i);
    char name[160], pre[40];
    dsv4_layer_prefix(d, i, pre, sizeof pre);
    di_status st = DI_OK;
    L->rate = v->rate[i];
    L->kv_src = v->kv_src[i];
    L->index_src = v->index_src[i];
    L->index_k_src = v->index_k_src[i];
    if (!L->rate) return DI_OK;
#define NAMED(suffix) (snprintf(name, sizeof name, "%s%s", pre, suffix), name)
    if (L->kv_src == (int)i) {
        v4_compressor *cp = &L->comp;
        /* (ratio 1 keeps no rings: its rows are its entries) */
        *cp = (v4_compressor){.width = hd, .cw = L->rate == 2 ? hd : 0, .rate = L->rate};
        if ((st = model_matrix(w, d->be, NAMED("self_attn.compressor.kv_proj.weight"), E, hd,
                               &cp->kv, err)) != DI_OK ||
            (L->rate == 2 &&
             (st = model_matrix(w, d->be, NAMED("self_attn.compressor.gate_proj.weight"), E, hd,
                                &cp->gate, err)) != DI_OK) ||
            (st = model_vector(w, d->be, NAMED("self_attn.compressor.kv_norm.weight"), hd,
                               &cp->norm, err)) != DI_OK)
            return st;
    }
    if (L->index_k_src == (int)i) {
        L->index = (v4_compressor){.width = ihd, .rate = L->rate}; /* entries only, no rings */
        if ((st = model_matrix(w, d->be, NAMED("self_attn.compressor.indexer.k_proj.weight"), hd,
                               ihd, &L->ik_proj, err)) != DI_OK ||
            (st = model_vector(w, d->be, NAMED("self_attn.compressor.indexer.k_norm.weight"), ihd,
                               &L->ik_norm, err)) != DI_OK)
            return st;
    }
    if (L->index_src == (int)i &&
        ((st = model_matrix(w, d->be, NAMED("self_attn.compressor.indexer.q_b_proj.weight"), QL,
                            IH * ihd, &L->iq_b, err)) != DI_OK ||
         (st = model_matrix(w, d->be,
                            NAMED("self_attn.compressor.indexer.scorer.weights_proj.weight"), E, IH,
                            &L->iw, err)) != DI_OK))
        return st;
#undef NAMED
    return DI_OK;
}

/* The routed experts: transformers' fused experts.gate_up_proj [E, 2 I, n_embd]
 * and experts.down_proj [E, n_embd, I], or one gate/up/down_proj per expert. */
static di_status load_experts(dsv4 *d, uint32_t i, v4_layer *L, model_tensor *views, di_error **err)
{
    const model_config *c = &d->cfg;
    const int64_t E = c->n_embd, I = c->n_ff_exp, X = L->route.n_expert;
    const backend_matrix **m = calloc((size_t)(3 * X), sizeof(const backend_matrix *));
    if (!m) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading layer %u", i);
    const backend_matrix **gate = m, **up = m + X, **down = m + 2 * X;
    di_status st = DI_OK;
    char name[160], pre[40];
    dsv4_layer_prefix(d, i, pre, sizeof pre);
    snprintf(name, sizeof name, "%smlp.experts.gate_up_proj", pre);
    if (model_weights_get(dsv4_layer_weights(d, i), name)) {
        int64_t ne_gu[3] = {E, 2 * I, X}, ne_d[3] = {I, E, X};
        const model_tensor *gu =
            dsv4_layer_tensor(d, i, "mlp.experts.gate_up_proj", 3, ne_gu, err, &st);
        const model_tensor *dn =
            st == DI_OK ? dsv4_layer_tensor(d, i, "mlp.experts.down_proj", 3, ne_d, err, &st)
                        : NULL;
        for (int64_t e = 0; e < X && st == DI_OK; e++) {
            model_tensor *v = views + 6 * e;
            if ((st = row_view(d, &v[0], &v[1], gu, gu->scale, e * 2 * I, I, &gate[e], err)) !=
                    DI_OK ||
                (st = row_view(d, &v[2], &v[3], gu, gu->scale, e * 2 * I + I, I, &up[e], err)) !=
                    DI_OK)
                break;
            st = row_view(d, &v[4], &v[5], dn, dn->scale, e * E, E, &down[e], err);
        }
    } else {
        for (int64_t e = 0; e < X && st == DI_OK; e++) {
            const char *kinds[3] = {"gate_proj", "up_proj", "down_proj"};
            const backend_matrix **dst[3] = {&gate[e], &up[e], &down[e]};
            for (int k = 0; k < 3 && st == DI_OK; k++) {
                snprintf(name, sizeof name, "%smlp.experts.%lld.%s.weight", pre, (long long)e,
                         kinds[k]);
                st = model_matrix(dsv4_layer_weights(d, i), d->be, name, k < 2 ? E : I,
                                  k < 2 ? I : E, dst[k], err);
            }
        }
    }
    if (st == DI_OK)
        st = d->be->ops->moe_create(d->be, (int32_t)X, gate, up, down, c->v4.swiglu_limit,
                                    &L->experts, err);
    free((void *)m);
    return st;
}

/* tid2eid [n_vocab, k] (I64 or I32) into a host int32 copy, every entry an
 * expert. */
static di_status load_tid2eid(dsv4 *d, uint32_t i, v4_layer *L, di_error **err)
{
    const model_config *c = &d->cfg;
    char name[160], pre[40];
    snprintf(name, sizeof name, "%smlp.gate.tid2eid", dsv4_layer_prefix(d, i, pre, sizeof pre));
    const model_tensor *t = model_weights_get(dsv4_layer_weights(d, i), name);
    if (!t)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "tensor '%s' is missing (a hash layer)",
                             name);
    if (t->n_dims != 2 || t->ne[0] != c->n_expert_used || t->ne[1] != c->n_vocab ||
        (t->dtype != MODEL_DTYPE_I64 && t->dtype != MODEL_DTYPE_I32))
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "tensor '%s' is not an integer table [%u, %u] (vocabulary x "
                             "num_experts_per_tok)",
                             name, c->n_vocab, c->n_expert_used);
    const size_t n = (size_t)c->n_vocab * c->n_expert_used;
    if (!(L->tid2eid = malloc(n * sizeof *L->tid2eid)))
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", name);
    for (size_t j = 0; j < n; j++) {
        int64_t e = t->dtype == MODEL_DTYPE_I64 ? ((const int64_t *)t->data)[j]
                                                : ((const int32_t *)t->data)[j];
        if (e < 0 || e >= c->n_expert)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: entry %zu (token %zu) is %lld, not one of the %u experts",
                                 name, j, j / c->n_expert_used, (long long)e, c->n_expert);
        L->tid2eid[j] = (int32_t)e;
    }
    return DI_OK;
}

di_status dsv4_load_layer(dsv4 *d, uint32_t i, di_error **err)
{
    const model_config *c = &d->cfg;
    const model_config_v4 *v = &c->v4;
    v4_layer *L = &d->layers[i];
    backend *be = d->be;
    const int64_t E = c->n_embd, H = c->n_head, hd = c->head_dim, QL = c->q_lora_rank,
                  G = v->o_groups, RO = v->o_lora_rank, in_g = H * hd / G, hcE = d->hc * E;
    L->hash = v->hash_moe[i];
    L->route = L->hash ? d->route_hash : d->route;
    if (i >= c->n_layer && v->dspark_n_expert) { /* a V4.1 DSpark stage's own experts */
        L->route.n_expert = (int32_t)v->dspark_n_expert;
        L->route.n_expert_used = (int32_t)v->dspark_n_expert_used;
    }
    const int64_t X = L->route.n_expert;
    const size_t n_views = 6 * (size_t)X + 2 * (size_t)G + 8;
    model_tensor *views = calloc(n_views, sizeof *views);
    if (!views)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading layer %u", i);
    d->views[i] = views;
    char name[160], pre[40];
    dsv4_layer_prefix(d, i, pre, sizeof pre);
    di_status st;
#define MAT(field, suffix, nin, nout)                                                              \
    snprintf(name, sizeof name, "%s" suffix, pre);                                                 \
    if ((st = model_matrix(dsv4_layer_weights(d, i), be, name, nin, nout, &L->field, err)) !=      \
        DI_OK)                                                                                     \
    return st
#define VEC(field, suffix, n)                                                                      \
    snprintf(name, sizeof name, "%s" suffix, pre);                                                 \
    if ((st = model_vector(dsv4_layer_weights(d, i), be, name, n, &L->field, err)) != DI_OK)       \
    return st
    L->kind = (model_v4_attention)v->attention[i];
    L->rope = L->kind == MODEL_V4_SLIDING ? d->rope_main : d->rope_comp;
    VEC(attn_norm, "input_layernorm.weight", E);
    VEC(ffn_norm, "post_attention_layernorm.weight", E);
    VEC(q_a_norm, "self_attn.q_a_norm.weight", QL);
    VEC(kv_norm, "self_attn.kv_norm.weight", hd);
    VEC(sinks, "self_attn.sinks", H);
    MAT(wq_a, "self_attn.q_a_proj.weight", E, QL);
    MAT(wq_b, "self_attn.q_b_proj.weight", QL, H * hd);
    MAT(wkv, "self_attn.kv_proj.weight", E, hd);
    MAT(wo_b, "self_attn.o_b_proj.weight", G * RO, E);
    MAT(attn_fn, "attn_hc.fn", hcE, d->n_mix);
    MAT(ffn_fn, "ffn_hc.fn", hcE, d->n_mix);
    VEC(attn_base, "attn_hc.base", d->n_mix);
    VEC(attn_scale, "attn_hc.scale", 3);
    VEC(ffn_base, "ffn_hc.base", d->n_mix);
    VEC(ffn_scale, "ffn_hc.scale", 3);
    /* the grouped output projection: o_groups row blocks of o_a_proj */
    int64_t ne_oa[2] = {in_g, G * RO};
    const model_tensor *oa =
        dsv4_layer_tensor(d, i, "self_attn.o_a_proj.weight", 2, ne_oa, err, &st);
    if (st != DI_OK) return st;
    if (!(L->wo_a = calloc((size_t)G, sizeof(const backend_matrix *))))
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading layer %u", i);
    model_tensor *gv = views + 6 * (size_t)X;
    for (int64_t g = 0; g < G; g++)
        if ((st = row_view(d, &gv[2 * g], &gv[2 * g + 1], oa, oa->scale, g * RO, RO, &L->wo_a[g],
                           err)) != DI_OK)
            return st;
    model_tensor *mv = gv + 2 * G; /* 8 more */
    if (v->v41) {
        if ((st = load_v41_attention(d, i, L, err)) != DI_OK) return st;
    } else if (L->kind != MODEL_V4_SLIDING) {
        int csa = L->kind == MODEL_V4_CSA;
        int rate = (int)(csa ? v->compress_rate_csa : v->compress_rate_hca);
        if ((st = load_compressor(d, i, "self_attn.compressor", &L->comp, hd, rate, csa, &mv[0],
                                  err)) != DI_OK)
            return st;
        if (csa) {
            const int64_t ihd = v->index_head_dim, IH = v->index_n_heads;
            if ((st = load_compressor(d, i, "self_attn.compressor.indexer", &L->index, ihd, rate, 1,
                                      &mv[1], err)) != DI_OK)
                return st;
            MAT(iq_b, "self_attn.compressor.indexer.q_b_proj.weight", QL, IH * ihd);
            MAT(iw, "self_attn.compressor.indexer.scorer.weights_proj.weight", E, IH);
        }
    }
    MAT(gate_inp, "mlp.gate.weight", E, X);
    MAT(sh_gate, "mlp.shared_experts.gate_proj.weight", E, c->n_ff_exp);
    MAT(sh_up, "mlp.shared_experts.up_proj.weight", E, c->n_ff_exp);
    MAT(sh_down, "mlp.shared_experts.down_proj.weight", c->n_ff_exp, E);
    if (L->hash) {
        if ((st = load_tid2eid(d, i, L, err)) != DI_OK) return st;
    } else {
        VEC(exp_probs_b, "mlp.gate.e_score_correction_bias", X);
    }
#undef MAT
#undef VEC
    if ((st = load_experts(d, i, L, views, err)) != DI_OK) return st;
    return dsv4_engram_load_layer(d, i, L, err);
}

di_status dsv4_load(const model_weights *w, const model_options *opt, backend *be, dsv4 **out,
                    di_error **err)
{
    dsv4 *d = calloc(1, sizeof *d);
    if (!d) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading the model");
    d->w = w;
    d->cfg = *model_weights_config(w);
    d->opt = *opt;
    d->be = be;
    const model_config *c = &d->cfg;
    const model_config_v4 *v = &c->v4;
    const backend_ops *op = be->ops;
    di_status st;
    const int64_t E = c->n_embd, H = c->n_head, hd = c->head_dim, B = d->opt.n_batch,
                  rd = c->qk_rope_head_dim, G = v->o_groups, RO = v->o_lora_rank;
    d->hc = (int)v->hc_mult;
    d->n_mix = (2 + d->hc) * d->hc;
    /* A window past the context sees all of it: the ring need not be longer
     * (sliding_window is the config's, up to 2^32 - 1 tokens). */
    d->window =
        (int64_t)v->sliding_window < d->opt.n_ctx ? (int64_t)v->sliding_window : d->opt.n_ctx;
    if (d->window > INT32_MAX) d->window = INT32_MAX; /* sink_attention's int */
    d->win_ring = d->window + B;
    uint32_t max_rate = v->v41                                        ? 2
                        : v->compress_rate_csa > v->compress_rate_hca ? v->compress_rate_csa
                                                                      : v->compress_rate_hca;
    d->comp_ring = 2 * (int64_t)max_rate + B;
    if ((st = model_embedding(w, be, "token_embd.weight", E, c->n_vocab, &d->tok_embd, err)) !=
            DI_OK ||
        (st = model_matrix(w, be, c->tie_embeddings ? "token_embd.weight" : "output.weight", E,
                           c->n_vocab, &d->output, err)) != DI_OK ||
        (st = model_vector(w, be, "output_norm.weight", E, &d->output_norm, err)) != DI_OK)
        goto fail;
    /* (V4.1's shifted mHC has no head: the last block's pre mix collapses the streams) */
    if (!v->v41 &&
        ((st = model_matrix(w, be, "model.hc_head.hc_fn", d->hc * E, d->hc, &d->head_fn, err)) !=
             DI_OK ||
         (st = model_vector(w, be, "model.hc_head.hc_base", d->hc, &d->head_base, err)) != DI_OK ||
         (st = model_vector(w, be, "model.hc_head.hc_scale", 1, &d->head_scale, err)) != DI_OK))
        goto fail;
    /* RoPE over the last qk_rope_head_dim of each head: the main table (rope_theta,
     * unscaled) and the compressed branches' (compress_rope_theta, the config's
     * scaling) */
    backend_rope_params rp = model_rope_params(c, (uint32_t)rd, 0);
    rp.rope_scaling = MODEL_ROPE_SCALING_NONE;
    if ((st = op->rope_create(be, &rp, &d->rope_main, err)) != DI_OK) goto fail;
    rp = model_rope_params(c, (uint32_t)rd, 0);
    rp.rope_theta = v->compress_rope_theta;
    if ((st = op->rope_create(be, &rp, &d->rope_comp, err)) != DI_OK) goto fail;
    d->route = (backend_route_params){
        (int32_t)c->n_expert, (int32_t)c->n_expert_used, 1, 1,
        c->expert_gating,     MODEL_TOPK_NOAUX_TC,       1, c->routed_scaling_factor};
    d->route_hash = d->route;
    d->route_hash.topk_method = MODEL_TOPK_HASH;
    /* (after the main ones: the MTP layer, or DSpark's stages) */
    const uint32_t n_all = c->n_layer + (v->n_dspark ? v->n_dspark : 1);
    d->layers = calloc(n_all, sizeof *d->layers);
    d->views = calloc(n_all, sizeof(model_tensor *));
    if (!d->layers || !d->views) {
        st = di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading the layers");
        goto fail;
    }
    if ((st = dsv4_engram_init(d, err)) != DI_OK) goto fail;
    for (uint32_t i = 0; i < c->n_layer; i++) {
        if ((st = dsv4_load_layer(d, i, err)) != DI_OK) goto fail;
        if (d->opt.progress &&
            d->opt.progress(d->opt.progress_user, (float)(i + 1) / (float)c->n_layer) != 0) {
            st = di_error_setf(err, DI_ERR_CANCELLED, "the model load was cancelled by the host");
            goto fail;
        }
    }
    const int64_t hcE = d->hc * E, ihd = v->index_head_dim, IH = v->index_n_heads, F = c->n_ff_exp,
                  k = c->n_expert_used > v->dspark_n_expert_used ? c->n_expert_used
                                                                 : v->dspark_n_expert_used,
                  X = c->n_expert > v->dspark_n_expert ? c->n_expert : v->dspark_n_expert;
    /* the caches' rows: the window's and the entries' head_dim, the indexer
     * keys' index_head_dim (a Q8_0/Q4_0 cache needs whole blocks of 32) */
    int has_csa = 0;
    for (uint32_t i = 0; i < c->n_layer; i++)
        has_csa |= v->v41 ? d->layers[i].index.rate > 0 : d->layers[i].kind == MODEL_V4_CSA;
    if ((st = model_kv_dtype_check(d->opt.kv_dtype, hd, "head_dim", err)) != DI_OK ||
        (has_csa &&
         (st = model_kv_dtype_check(d->opt.kv_dtype, ihd, "index_head_dim", err)) != DI_OK))
        goto fail;
    d->x = op->alloc(be, B * hcE);
    d->x2 = op->alloc(be, B * hcE);
    d->xn = op->alloc(be, B * hcE);
    d->mix = op->alloc(be, B * d->n_mix);
    d->col = op->alloc(be, B * E);
    d->h = op->alloc(be, B * E);
    d->post = op->alloc(be, B * d->hc);
    d->comb = op->alloc(be, B * d->hc * d->hc);
    d->qa = op->alloc(be, B * c->q_lora_rank);
    d->q = op->alloc(be, B * H * hd);
    d->kv = op->alloc(be, B * hd);
    d->attn = op->alloc(be, B * H * hd);
    d->grp_in = op->alloc(be, B * H * hd / G);
    d->grp_out = op->alloc(be, B * RO);
    d->oa = op->alloc(be, B * G * RO);
    d->out = op->alloc(be, B * E);
    d->ckv = op->alloc(be, B * 2 * (hd > ihd ? hd : ihd));
    d->cg = op->alloc(be, B * 2 * (hd > ihd ? hd : ihd));
    d->iq = op->alloc(be, B * IH * ihd);
    d->iw = op->alloc(be, B * IH);
    d->router = op->alloc(be, B * X);
    d->gate = op->alloc(be, B * F);
    d->up = op->alloc(be, B * F);
    d->pooled = op->alloc(be, (B + 1) * (hd > ihd ? hd : ihd));
    if (v->v41) {
        d->pre_kv = op->alloc(be, 2 * B * hd);
        d->shared_h = op->alloc(be, B * E);
        d->pre_mix = op->alloc(be, B * d->hc);
        d->pre_off = malloc((size_t)(B + 1) * sizeof *d->pre_off);
        if (!d->pre_kv || !d->shared_h || !d->pre_mix || !d->pre_off) {
            st = di_error_setf(err, DI_ERR_OUT_OF_MEMORY,
                               "out of memory for the forward pass buffers");
            goto fail;
        }
    }
    d->pos = malloc((size_t)B * sizeof *d->pos);
    d->neg_pos = malloc((size_t)B * sizeof *d->neg_pos);
    d->kpos = malloc((size_t)B * sizeof *d->kpos);
    d->entry_pos = malloc((size_t)(B + 2) * sizeof *d->entry_pos);
    d->index_sel = malloc((size_t)(B * v->index_topk) * sizeof *d->index_sel);
    d->cand_sel = malloc((size_t)(B * (v->cand_blocks ? v->cand_blocks : 1)) * sizeof *d->cand_sel);
    d->sel = malloc((size_t)(B * k) * sizeof *d->sel);
    d->sel_w = malloc((size_t)(B * k) * sizeof *d->sel_w);
    d->spans = malloc((size_t)B * sizeof *d->spans);
    d->tokens = malloc((size_t)B * sizeof *d->tokens);
    if (!d->x || !d->x2 || !d->xn || !d->mix || !d->col || !d->h || !d->post || !d->comb ||
        !d->qa || !d->q || !d->kv || !d->attn || !d->grp_in || !d->grp_out || !d->oa || !d->out ||
        !d->ckv || !d->cg || !d->iq || !d->iw || !d->router || !d->gate || !d->up || !d->pooled ||
        !d->pos || !d->neg_pos || !d->kpos || !d->entry_pos || !d->index_sel || !d->cand_sel ||
        !d->sel || !d->sel_w || !d->spans || !d->tokens) {
        st = di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the forward pass buffers");
        goto fail;
    }
    /* The sequences' blocks count tokens against the budget (model_kv_block_count:
     * a block is MODEL_KV_BLOCK tokens at the per-token cost of a full context);
     * the caches themselves are each sequence's (dsv4_seq_init). */
    int32_t n_blocks;
    int64_t block_bytes = (int64_t)dsv4_kv_bytes_per_token(d) * MODEL_KV_BLOCK;
    if ((st = model_kv_block_count(&d->opt, block_bytes > 0 ? block_bytes : 1, &n_blocks, err)) !=
        DI_OK)
        goto fail;
    if ((st = kv_pool_init(&d->pool, n_blocks, model_kv_fingerprint(w, &d->opt))) != DI_OK) {
        st = di_error_setf(err, st, "out of memory for the sequences' blocks");
        goto fail;
    }
    if ((st = dsv4_seq_init(d, &d->seq)) != DI_OK) {
        st = di_error_setf(err, st, "out of memory for the cache of %lld tokens",
                           (long long)d->opt.n_ctx);
        goto fail;
    }
    if ((st = dsv4_mtp_load(d, err)) != DI_OK || (st = dsv4_dspark_load(d, err)) != DI_OK)
        goto fail;
    *out = d;
    return DI_OK;
fail:
    dsv4_free(d);
    return st;
}

/* Backend floats holding rows of width values of the cache's dtype. */
static int64_t floats_for_rows(model_dtype dtype, int64_t rows, int64_t width)
{
    return (rows * model_kv_row_bytes(dtype, width) + (int64_t)sizeof(float) - 1) /
           (int64_t)sizeof(float);
}

static void *alloc_rows(backend *be, model_dtype dtype, int64_t rows, int64_t width)
{
    return be->ops->alloc(be, floats_for_rows(dtype, rows, width));
}

/* Each layer's window ring, and its compressors' rings (the entries come
 * with the tokens, dsv4_seq_reserve). */
dsv4_cache *dsv4_cache_create(dsv4 *d, uint32_t first, uint32_t n)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    dsv4_cache **made = realloc(d->made, (d->n_made + 1) * sizeof(dsv4_cache *));
    if (!made) return NULL;
    d->made = made;
    dsv4_cache *k = calloc(1, sizeof *k);
    if (!k || !(k->layers = calloc(n, sizeof *k->layers))) {
        free(k);
        return NULL;
    }
    k->first = first;
    d->made[d->n_made++] = k;
    if (first == 0 && c->v4.n_engram &&
        !(k->engram_ids = calloc((size_t)d->engram_ring, sizeof *k->engram_ids)))
        return NULL;
    for (uint32_t i = first; i < first + n; i++) {
        const v4_layer *L = &d->layers[i];
        v4_layer_cache *lc = &k->layers[i - first];
        if (!(lc->win = alloc_rows(be, d->opt.kv_dtype, d->win_ring, c->head_dim))) return NULL;
        const v4_compressor *cp[2] = {&L->comp, &L->index};
        v4_comp_cache *cc[2] = {&lc->comp, &lc->index};
        for (int j = 0; j < 2; j++) {
            if (!cp[j]->rate || !cp[j]->cw) continue; /* none, or (V4.1's keys) no rings */
            if (!(cc[j]->kv_ring = be->ops->alloc(be, d->comp_ring * cp[j]->cw)) ||
                !(cc[j]->gate_ring = be->ops->alloc(be, d->comp_ring * cp[j]->cw)))
                return NULL; /* the entries come with the tokens (dsv4_seq_reserve) */
        }
    }
    return k;
}

di_status dsv4_cache_seq_init(dsv4 *d, kv_pool *pool, dsv4_cache **free_list, uint32_t first,
                              uint32_t n, model_seq *s)
{
    dsv4_cache *k = *free_list;
    if (k)
        *free_list = k->next_free;
    else if (!(k = dsv4_cache_create(d, first, n)))
        return DI_ERR_OUT_OF_MEMORY;
    if (kv_pool_seq_init(pool, &s->kv, d->opt.n_ctx) != DI_OK) {
        k->next_free = *free_list;
        *free_list = k;
        return DI_ERR_OUT_OF_MEMORY;
    }
    s->v4 = k;
    return DI_OK;
}

void dsv4_cache_seq_release(kv_pool *pool, dsv4_cache **free_list, model_seq *s)
{
    if (!s->v4) return;
    kv_pool_seq_free(pool, &s->kv);
    s->v4->next_free = *free_list;
    *free_list = s->v4;
    s->v4 = NULL;
}

di_status dsv4_seq_init(dsv4 *d, model_seq *s)
{
    return dsv4_cache_seq_init(d, &d->pool, &d->free_list, 0, d->cfg.n_layer, s);
}

/* Room in k's entries for a sequence of n_tokens (at most n_ctx): each
 * compressor's grown to twice what it had, or what is needed, or n_ctx's.
 * The tokens are counted in whole blocks, as the pool reserves them and
 * model_forward_batch admits a step (a reserve of 100 lets a step run to
 * 112, closing entries 25-27 past the 26 that 100 tokens need). */
static di_status cache_reserve(dsv4 *d, dsv4_cache *k, int64_t n_tokens)
{
    n_tokens = (n_tokens + MODEL_KV_BLOCK - 1) / MODEL_KV_BLOCK * MODEL_KV_BLOCK;
    if (n_tokens > d->opt.n_ctx) n_tokens = d->opt.n_ctx;
    for (uint32_t i = 0; i < d->cfg.n_layer; i++) {
        const v4_layer *L = &d->layers[i];
        const v4_compressor *cp[2] = {&L->comp, &L->index};
        v4_comp_cache *cc[2] = {&k->layers[i].comp, &k->layers[i].index};
        for (int j = 0; j < 2; j++) {
            if (!cp[j]->rate) continue;
            const int64_t need = n_tokens / cp[j]->rate + 1, most = d->opt.n_ctx / cp[j]->rate + 1;
            if (cc[j]->cap >= need) continue;
            int64_t cap = cc[j]->cap * 2 > need ? cc[j]->cap * 2 : need;
            if (cap < 16) cap = 16;
            if (cap > most) cap = most;
            float *p = d->be->ops->realloc(d->be, cc[j]->entries,
                                           floats_for_rows(d->opt.kv_dtype, cap, cp[j]->width));
            if (!p) return DI_ERR_OUT_OF_MEMORY;
            cc[j]->entries = p;
            cc[j]->cap = cap;
        }
    }
    return DI_OK;
}

di_status dsv4_seq_reserve(dsv4 *d, model_seq *s, int64_t n_tokens)
{
    return s->v4 ? cache_reserve(d, s->v4, n_tokens) : DI_OK;
}

void dsv4_seq_advance(model_seq *s, int64_t n)
{
    if (s->kv.n_tokens == 0) s->v4->n_written = 0; /* a new sequence, perhaps a reused cache */
    s->kv.n_tokens += n;
    if (s->v4->n_written < s->kv.n_tokens) s->v4->n_written = s->kv.n_tokens;
}

void dsv4_cache_truncate(dsv4 *d, kv_pool *pool, model_seq *s, int64_t n_tokens)
{
    /* win_ring = window + n_batch and comp_ring = 2 max_rate + n_batch rows:
     * past a deeper cut, the rows the next step reads were overwritten */
    if (s->v4 && s->v4->n_written - n_tokens > d->opt.n_batch) n_tokens = 0;
    kv_pool_seq_truncate(pool, &s->kv, n_tokens);
}

void dsv4_seq_truncate(dsv4 *d, model_seq *s, int64_t n_tokens)
{
    dsv4_cache_truncate(d, &d->pool, s, n_tokens);
}

void dsv4_seq_release(dsv4 *d, model_seq *s)
{
    dsv4_cache_seq_release(&d->pool, &d->free_list, s);
}

kv_pool *dsv4_pool(dsv4 *d)
{
    return &d->pool;
}

void dsv4_free(dsv4 *d)
{
    if (!d) return;
    dsv4_mtp_free(d);
    dsv4_dspark_free(d);
    dsv4_seq_release(d, &d->seq);
    kv_pool_free(&d->pool);
    for (size_t i = 0; i < d->n_made; i++) {
        free(d->made[i]->engram_ids);
        free(d->made[i]->layers);
        free(d->made[i]);
    }
    free(d->made);
    free(d->spans);
    free(d->tokens);
    const uint32_t n_all = d->cfg.n_layer + (d->cfg.v4.n_dspark ? d->cfg.v4.n_dspark : 1);
    for (uint32_t i = 0; d->layers && i < n_all; i++) {
        free(d->layers[i].tid2eid);
        free((void *)d->layers[i].wo_a);
    }
    for (uint32_t i = 0; d->views && i < n_all; i++) free(d->views[i]);
    free(d->views);
    free(d->layers);
    free(d->pos);
    free(d->neg_pos);
    free(d->kpos);
    free(d->entry_pos);
    free(d->pre_off);
    free(d->index_sel);
    free(d->cand_sel);
    free(d->sel);
    free(d->sel_w);
    dsv4_engram_free(d);
    free(d);
}

int64_t dsv4_n_past(const dsv4 *d)
{
    return d->seq.kv.n_tokens;
}

void dsv4_reset(dsv4 *d)
{
    kv_pool_seq_reset(&d->pool, &d->seq.kv);
    if (d->has_mtp) kv_pool_seq_reset(&d->mtp_pool, &d->mtp_seq.kv);
}

size_t dsv4_kv_bytes_per_token(const dsv4 *d)
{
    const model_config *c = &d->cfg;
    const model_dtype dt = d->opt.kv_dtype;
    const double ctx = (double)d->opt.n_ctx, f32 = sizeof(float);
    double per = 0.0; /* bytes */
    for (uint32_t i = 0; i < c->n_layer; i++) {
        const v4_layer *L = &d->layers[i];
        const v4_compressor *cp[2] = {&L->comp, &L->index};
        /* the window (fixed, spread over the context) */
        per += (double)d->win_ring * (double)model_kv_row_bytes(dt, c->head_dim) / ctx;
        for (int j = 0; j < 2; j++) {
            if (!cp[j]->rate) continue; /* an entry per rate tokens, the f32 rings fixed */
            per += (double)model_kv_row_bytes(dt, cp[j]->width) / cp[j]->rate +
                   2.0 * (double)d->comp_ring * (double)cp[j]->cw * f32 / ctx;
        }
    }
    return (size_t)ceil(per);
}

const char *dsv4_draft_config_mismatch(const model_config *a, const model_config *b)
{
#define SAME(f, name)                                                                              \
    if (a->f != b->f) return name
    SAME(arch, "the architecture");
    SAME(n_embd, "embedding_length");
    SAME(n_vocab, "the vocabulary");
    SAME(n_head, "attention.head_count");
    SAME(head_dim, "attention.key_length");
    SAME(qk_rope_head_dim, "rope.dimension_count");
    SAME(q_lora_rank, "attention.q_lora_rank");
    SAME(n_expert, "expert_count");
    SAME(n_expert_used, "expert_used_count");
    SAME(n_ff_exp, "expert_feed_forward_length");
    SAME(expert_gating, "expert_gating_func");
    SAME(v4.hc_mult, "hyper_connection.count");
    SAME(v4.hc_sinkhorn_iters, "hyper_connection.sinkhorn_iterations");
    SAME(v4.o_groups, "attention.output_group_count");
    SAME(v4.o_lora_rank, "attention.output_lora_rank");
    SAME(v4.sliding_window, "attention.sliding_window");
    SAME(v4.swiglu_limit, "swiglu_clamp_exp");
    SAME(rope_theta, "rope.freq_base");
#undef SAME
    return NULL;
}

/* (F32 for a compressor's rings, the cache's dtype for the window: an f32
 * row is copied exactly) */
void dsv4_ring_store(backend *be, model_dtype dtype, void *ring, int64_t ring_rows, int64_t width,
                     const float *src, int64_t src_stride, int64_t pos0, int64_t n)
{
    const int64_t rb = model_kv_row_bytes(dtype, width);
    int64_t done = 0;
    while (done < n) {
        int64_t r = (pos0 + done) % ring_rows, run = ring_rows - r;
        if (run > n - done) run = n - done;
        be->ops->v4_rows_store(be, dtype, (char *)ring + r * rb, src + done * src_stride,
                               src_stride, width, run);
        done += run;
    }
}

/* The compressor's projections of the span's rows of d->h (from row r0) into
 * its rings, and the entries the chunk completes (pooled, normalised, rotated
 * at their windows' first positions). */
static void compress(dsv4 *d, const v4_layer *L, const v4_compressor *c, v4_comp_cache *cc,
                     int64_t r0, const v4_span *sp)
{
    backend *be = d->be;
    const backend_ops *op = be->ops;
    dsv4_ring_store(be, MODEL_DTYPE_F32, cc->kv_ring, d->comp_ring, c->cw, d->ckv + r0 * c->cw,
                    c->cw, sp->pos0, sp->n);
    dsv4_ring_store(be, MODEL_DTYPE_F32, cc->gate_ring, d->comp_ring, c->cw, d->cg + r0 * c->cw,
                    c->cw, sp->pos0, sp->n);
    const int64_t e0 = sp->pos0 / c->rate, e1 = (sp->pos0 + sp->n) / c->rate;
    if (e1 <= e0) return;
    /* pooled, normalised and rotated in f32, then stored in the cache's dtype */
    float *pooled = d->pooled;
    op->compress_pool(be, cc->kv_ring, cc->gate_ring, d->comp_ring, c->cw, c->bias, c->rate,
                      c->width, c->overlap, e0, e1 - e0, pooled, c->width);
    op->rmsnorm(be, pooled, c->width, c->norm, pooled, c->width, e1 - e0, c->width,
                d->cfg.rms_norm_eps);
    const int64_t rd = d->cfg.qk_rope_head_dim;
    for (int64_t e = e0; e < e1; e++) d->entry_pos[e - e0] = e * c->rate;
    op->rope(be, L->rope, pooled + c->width - rd, e1 - e0, c->width, 1, c->width, d->entry_pos);
    const model_dtype dt = d->opt.kv_dtype;
    op->v4_rows_store(be, dt, (char *)cc->entries + e0 * model_kv_row_bytes(dt, c->width), pooled,
                      c->width, c->width, e1 - e0);
}

/* A compressor's projections of the n rows of d->h, into d->ckv and d->cg. */
static void compress_project(dsv4 *d, const v4_compressor *c, int64_t n)
{
    const backend_matrix *w[2] = {c->kv, c->gate};
    float *y[2] = {d->ckv, d->cg};
    d->be->ops->matmul(d->be, 2, w, NULL, d->h, n, y);
}

/* The attention's q [n, H, head_dim] and window keys of layer l for the n rows
 * of d->h: qa = RMSNorm(h Wq_a), q = qa Wq_b (each head RMS-normed without a
 * weight when q_norm: V4's, not V4.1's), kv = RMSNorm(h Wkv); RoPE on both;
 * kv into each span's window ring. */
static void project_q_kv(dsv4 *d, uint32_t l, int64_t n, int n_spans, int q_norm)
{
    const model_config *c = &d->cfg;
    const v4_layer *L = &d->layers[l];
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t H = c->n_head, hd = c->head_dim, rd = c->qk_rope_head_dim, QL = c->q_lora_rank;
    const float eps = c->rms_norm_eps;
    op->matmul(be, 1, &L->wq_a, NULL, d->h, n, &d->qa);
    op->rmsnorm(be, d->qa, QL, L->q_a_norm, d->qa, QL, n, QL, eps);
    op->matmul(be, 1, &L->wq_b, NULL, d->qa, n, &d->q);
    if (q_norm) op->rmsnorm(be, d->q, hd, NULL, d->q, hd, n * H, hd, eps);
    op->rope(be, L->rope, d->q + hd - rd, n, H * hd, (int)H, hd, d->pos);
    op->matmul(be, 1, &L->wkv, NULL, d->h, n, &d->kv);
    op->rmsnorm(be, d->kv, hd, L->kv_norm, d->kv, hd, n, hd, eps);
    op->rope(be, L->rope, d->kv + hd - rd, n, hd, 1, hd, d->pos);
    int64_t r0 = 0;
    for (int i = 0; i < n_spans; i++) { /* the window's keys */
        const v4_span *sp = &d->spans[i];
        dsv4_ring_store(be, d->opt.kv_dtype, sp->cache->layers[l - sp->cache->first].win,
                        d->win_ring, hd, d->kv + r0 * hd, hd, sp->pos0, sp->n);
        r0 += sp->n;
    }
}

/* The attention's output d->attn [n, H, head_dim] into d->out: its RoPE part
 * rotated back (K = V carried RoPE into the values), the heads in o_groups
 * groups each projected by its rows of Wo_a, then Wo_b. */
static void project_out(dsv4 *d, const v4_layer *L, int64_t n)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t H = c->n_head, hd = c->head_dim, rd = c->qk_rope_head_dim, G = c->v4.o_groups,
                  RO = c->v4.o_lora_rank, in_g = H * hd / G;
    op->rope(be, L->rope, d->attn + hd - rd, n, H * hd, (int)H, hd, d->neg_pos);
    for (int64_t g = 0; g < G; g++) {
        op->copy_rows(be, d->grp_in, in_g, d->attn + g * in_g, H * hd, in_g, n);
        op->matmul(be, 1, &L->wo_a[g], NULL, d->grp_in, n, &d->grp_out);
        op->copy_rows(be, d->oa + g * RO, G * RO, d->grp_out, RO, RO, n);
    }
    op->matmul(be, 1, &L->wo_b, NULL, d->oa, n, &d->out);
}

/* Attention of layer l for the n rows of d->h (the spans' rows in order,
 * positions d->pos): the output projection's result in d->out. */
static void attention(dsv4 *d, uint32_t l, int64_t n, int n_spans)
{
    const model_config *c = &d->cfg;
    const model_config_v4 *v = &c->v4;
    const v4_layer *L = &d->layers[l];
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t H = c->n_head, hd = c->head_dim, rd = c->qk_rope_head_dim, IH = v->index_n_heads,
                  ihd = v->index_head_dim, K = v->index_topk;
    project_q_kv(d, l, n, n_spans, 1);
    int64_t r0 = 0;
    if (L->kind != MODEL_V4_SLIDING) {
        compress_project(d, &L->comp, n);
        r0 = 0;
        for (int i = 0; i < n_spans; i++) {
            compress(d, L, &L->comp, &d->spans[i].cache->layers[l].comp, r0, &d->spans[i]);
            r0 += d->spans[i].n;
        }
    }
    if (L->kind == MODEL_V4_CSA) {
        compress_project(d, &L->index, n);
        r0 = 0;
        for (int i = 0; i < n_spans; i++) {
            compress(d, L, &L->index, &d->spans[i].cache->layers[l].index, r0, &d->spans[i]);
            r0 += d->spans[i].n;
        }
        op->matmul(be, 1, &L->iq_b, NULL, d->qa, n, &d->iq);
        op->rope(be, L->rope, d->iq + ihd - rd, n, IH * ihd, (int)IH, ihd, d->pos);
        op->matmul(be, 1, &L->iw, NULL, d->h, n, &d->iw);
    }
    r0 = 0;
    for (int i = 0; i < n_spans; i++) {
        const v4_span *sp = &d->spans[i];
        const v4_layer_cache *lc = &sp->cache->layers[l - sp->cache->first];
        const int64_t n_entries = L->comp.rate ? (sp->pos0 + sp->n) / L->comp.rate : 0;
        const int32_t *sel = NULL;
        if (L->kind == MODEL_V4_CSA) {
            op->indexer_topk(be, d->iq + r0 * IH * ihd, d->iw + r0 * IH, (int)IH, ihd, sp->n,
                             d->pos + r0, lc->index.entries, d->opt.kv_dtype, n_entries,
                             L->index.rate, 1.0f / sqrtf((float)ihd), 1.0f / sqrtf((float)IH),
                             (int)K, d->index_sel + r0 * K, NULL);
            sel = d->index_sel + r0 * K;
        }
        op->sink_attention(be, d->q + r0 * H * hd, (int)H, hd, sp->n, d->kpos + r0,
                           d->klast ? d->klast + r0 : NULL, lc->win, d->win_ring, (int)d->window,
                           L->kind == MODEL_V4_SLIDING ? NULL : lc->comp.entries, n_entries,
                           L->comp.rate ? L->comp.rate : 1, sel, (int)K, d->opt.kv_dtype, L->sinks,
                           1.0f / sqrtf((float)hd), d->attn + r0 * H * hd);
        r0 += sp->n;
    }
    project_out(d, L, n);
}

/* DeepSeek-V4.1: the KV source layer L's entries the span completes from its
 * projections (row r0 on of d->ckv / d->cg): ratio 1, each row; ratio 2, the
 * rows into the rings and the softmax over each pair (no position bias),
 * normalised, their pre-RoPE rows kept at pre, then rotated at
 * their first tokens and stored. Returns how many entries it completed. */
static int64_t compress_v41(dsv4 *d, const v4_layer *L, v4_comp_cache *cc, int64_t r0,
                            const v4_span *sp, float *pre)
{
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const v4_compressor *c = &L->comp;
    const int64_t e0 = sp->pos0 / c->rate, e1 = (sp->pos0 + sp->n) / c->rate;
    float *pooled = d->pooled;
    if (c->rate == 1) { /* each row an entry: no rings, no pooling */
        op->copy_rows(be, pooled, c->width, d->ckv + r0 * c->width, c->width, c->width, sp->n);
    } else {
        dsv4_ring_store(be, MODEL_DTYPE_F32, cc->kv_ring, d->comp_ring, c->cw, d->ckv + r0 * c->cw,
                        c->cw, sp->pos0, sp->n);
        dsv4_ring_store(be, MODEL_DTYPE_F32, cc->gate_ring, d->comp_ring, c->cw, d->cg + r0 * c->cw,
                        c->cw, sp->pos0, sp->n);
        if (e1 <= e0) return 0;
        op->compress_pool(be, cc->kv_ring, cc->gate_ring, d->comp_ring, c->cw, NULL, c->rate,
                          c->width, 0, e0, e1 - e0, pooled, c->width);
    }
    op->rmsnorm(be, pooled, c->width, c->norm, pooled, c->width, e1 - e0, c->width,
                d->cfg.rms_norm_eps);
    op->copy_rows(be, pre, c->width, pooled, c->width, c->width, e1 - e0);
    const int64_t rd = d->cfg.qk_rope_head_dim;
    for (int64_t e = e0; e < e1; e++) d->entry_pos[e - e0] = e * c->rate;
    op->rope(be, L->rope, pooled + c->width - rd, e1 - e0, c->width, 1, c->width, d->entry_pos);
    const model_dtype dt = d->opt.kv_dtype;
    op->v4_rows_store(be, dt, (char *)cc->entries + e0 * model_kv_row_bytes(dt, c->width), pooled,
                      c->width, c->width, e1 - e0);
    return e1 - e0;
}

/* DeepSeek-V4.1: the key source layer L's indexer keys of the span's new
 * entries: KProject of their pre-RoPE rows (n_new at pre), normalised,
 * rotated at the entries' first tokens, stored. */
static void index_keys_v41(dsv4 *d, const v4_layer *L, v4_comp_cache *ic, const v4_span *sp,
                           const float *pre, int64_t n_new)
{
    if (!n_new) return;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t ihd = d->cfg.v4.index_head_dim, rd = d->cfg.qk_rope_head_dim;
    const int64_t e1 = (sp->pos0 + sp->n) / L->rate, e0 = e1 - n_new;
    op->matmul(be, 1, &L->ik_proj, NULL, pre, n_new, &d->pooled);
    op->rmsnorm(be, d->pooled, ihd, L->ik_norm, d->pooled, ihd, n_new, ihd, d->cfg.rms_norm_eps);
    for (int64_t e = e0; e < e1; e++) d->entry_pos[e - e0] = e * L->rate;
    op->rope(be, L->rope, d->pooled + ihd - rd, n_new, ihd, 1, ihd, d->entry_pos);
    const model_dtype dt = d->opt.kv_dtype;
    op->v4_rows_store(be, dt, (char *)ic->entries + e0 * model_kv_row_bytes(dt, ihd), d->pooled,
                      ihd, ihd, n_new);
}

/* DeepSeek-V4.1's attention of layer l (docs/deepseek-v41.md) for the n rows
 * of d->h: as V4's, without the per-head q norm; a compressed layer reads the
 * entries of its KV source, the keys of its key source and the top-k of its
 * top-k source (each the layer itself, or one before it in this step); the KV
 * sources from n_prefill_layer on project the normed input of that layer. */
static void attention_v41(dsv4 *d, uint32_t l, int64_t n, int n_spans)
{
    const model_config *c = &d->cfg;
    const model_config_v4 *v = &c->v4;
    const v4_layer *L = &d->layers[l];
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t H = c->n_head, hd = c->head_dim, rd = c->qk_rope_head_dim, IH = v->index_n_heads,
                  ihd = v->index_head_dim, K = v->index_topk;
    if (l == v->n_prefill_layer)
        op->copy_rows(be, d->shared_h, c->n_embd, d->h, c->n_embd, c->n_embd, n);
    project_q_kv(d, l, n, n_spans, 0);
    int64_t r0 = 0;
    if (L->rate && L->kv_src == (int)l) { /* a KV source: the entries, their pre-RoPE rows */
        const backend_matrix *w[2] = {L->comp.kv, L->comp.gate};
        float *y[2] = {d->ckv, d->cg};
        op->matmul(be, L->comp.gate ? 2 : 1, w, NULL, l >= v->n_prefill_layer ? d->shared_h : d->h,
                   n, y);
        r0 = 0;
        d->pre_off[0] = 0;
        for (int i = 0; i < n_spans; i++) {
            const v4_span *sp = &d->spans[i];
            d->pre_off[i + 1] = d->pre_off[i] + compress_v41(d, L, &sp->cache->layers[l].comp, r0,
                                                             sp, d->pre_kv + d->pre_off[i] * hd);
            r0 += sp->n;
        }
    }
    if (L->rate && L->index_k_src == (int)l) /* a key source: the new entries' keys */
        for (int i = 0; i < n_spans; i++)
            index_keys_v41(d, L, &d->spans[i].cache->layers[l].index, &d->spans[i],
                           d->pre_kv + d->pre_off[i] * hd, d->pre_off[i + 1] - d->pre_off[i]);
    if (L->rate && L->index_src == (int)l) {
        op->matmul(be, 1, &L->iq_b, NULL, d->qa, n, &d->iq);
        op->rope(be, L->rope, d->iq + ihd - rd, n, IH * ihd, (int)IH, ihd, d->pos);
        op->matmul(be, 1, &L->iw, NULL, d->h, n, &d->iw);
        /* the candidate source picks its rows' blocks, the top-k sources after
         * it score within them */
        const int64_t NB = v->cand_blocks;
        const int cand = NB && l >= v->cand_src;
        r0 = 0;
        for (int i = 0; i < n_spans; i++) {
            const v4_span *sp = &d->spans[i];
            int32_t *rows = d->cand_sel + r0 * NB;
            const backend_index_candidates bc = {l == v->cand_src ? NULL : rows,
                                                 l == v->cand_src ? rows : NULL, (int)NB,
                                                 (int)v->cand_block};
            op->indexer_topk(be, d->iq + r0 * IH * ihd, d->iw + r0 * IH, (int)IH, ihd, sp->n,
                             d->pos + r0, sp->cache->layers[L->index_k_src].index.entries,
                             d->opt.kv_dtype, (sp->pos0 + sp->n) / L->rate, L->rate, 1.0f, 1.0f,
                             (int)K, d->index_sel + r0 * K, cand ? &bc : NULL);
            r0 += sp->n;
        }
    }
    r0 = 0;
    for (int i = 0; i < n_spans; i++) {
        const v4_span *sp = &d->spans[i];
        const v4_layer_cache *lc = &sp->cache->layers[l - sp->cache->first];
        op->sink_attention(be, d->q + r0 * H * hd, (int)H, hd, sp->n, d->kpos + r0,
                           d->klast ? d->klast + r0 : NULL, lc->win, d->win_ring, (int)d->window,
                           L->rate ? sp->cache->layers[L->kv_src].comp.entries : NULL,
                           L->rate ? (sp->pos0 + sp->n) / L->rate : 0, L->rate ? L->rate : 1,
                           L->rate ? d->index_sel + r0 * K : NULL, (int)K, d->opt.kv_dtype,
                           L->sinks, 1.0f / sqrtf((float)hd), d->attn + r0 * H * hd);
        r0 += sp->n;
    }
    project_out(d, L, n);
}

/* The MoE of layer L for the n rows of d->h (tokens: the rows' ids) into
 * d->out: the shared expert, then the routed ones added. */
static void moe(dsv4 *d, const v4_layer *L, const int32_t *tokens, int64_t n)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t k = L->route.n_expert_used;
    op->matmul(be, 1, &L->gate_inp, NULL, d->h, n, &d->router);
    if (L->hash)
        for (int64_t t = 0; t < n; t++)
            memcpy(d->sel + t * k, L->tid2eid + (int64_t)tokens[t] * k, (size_t)k * sizeof *d->sel);
    op->moe_route(be, &L->route, L->hash ? NULL : L->exp_probs_b, d->router, n, d->sel, d->sel_w);
    const backend_matrix *w[2] = {L->sh_gate, L->sh_up};
    float *y[2] = {d->gate, d->up};
    op->matmul(be, 2, w, NULL, d->h, n, y);
    op->silu_mul_clamp(be, d->gate, d->up, n * c->n_ff_exp, c->v4.swiglu_limit);
    op->matmul(be, 1, &L->sh_down, NULL, d->gate, n, &d->out);
    op->moe_experts(be, L->experts, d->h, n, d->sel, d->sel_w, (int32_t)k, d->out, 1);
}

/* One mHC-wrapped block of layer l: collapse the streams of d->x into d->h
 * (normed by norm), run the block (attention, or the MoE when tokens),
 * expand back. */
void dsv4_hc_block(dsv4 *d, uint32_t l, const backend_matrix *fn, const float *base,
                   const float *scale, const float *norm, const int32_t *tokens, int64_t n,
                   int n_spans)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t E = c->n_embd, hcE = d->hc * E;
    if (!tokens && d->layers[l].engram_slot >= 0) dsv4_engram_apply(d, &d->layers[l], n);
    /* V4.1's DSpark features: the streams at a main layer's attention input */
    if (!tokens && d->has_dspark && c->v4.v41 && l < c->n_layer) dsv4_dspark_capture(d, l, n);
    op->rmsnorm(be, d->x, hcE, NULL, d->xn, hcE, n, hcE, c->rms_norm_eps);
    op->matmul(be, 1, &fn, NULL, d->xn, n, &d->mix);
    if (c->v4.v41) { /* shifted: the previous block's pre mix; this one's kept for the next */
        op->hc_pre_shifted(be, d->mix, base, scale, d->hc, (int)c->v4.hc_sinkhorn_iters,
                           c->v4.hc_eps, d->x, E, n, d->hc_first ? NULL : d->pre_mix, d->col,
                           d->pre_mix, d->post, d->comb);
        d->hc_first = 0;
    } else {
        op->hc_pre(be, d->mix, base, scale, d->hc, (int)c->v4.hc_sinkhorn_iters, c->v4.hc_eps, d->x,
                   E, n, d->col, d->post, d->comb);
    }
    op->rmsnorm(be, d->col, E, norm, d->h, E, n, E, c->rms_norm_eps);
    if (tokens)
        moe(d, &d->layers[l], tokens, n);
    else if (c->v4.v41)
        attention_v41(d, l, n, n_spans);
    else
        attention(d, l, n, n_spans);
    op->hc_post(be, d->x, d->out, d->post, d->comb, d->hc, E, n, d->x2);
    float *t = d->x;
    d->x = d->x2;
    d->x2 = t;
}

/* One step: the items' tokens stacked as rows [0, n) (n <= n_batch), item i
 * appended to its sequence. Logits: one row per item with want_logits, or
 * with all_logits (a single item) every row. */
static void forward_step(dsv4 *d, const model_batch_item *items, int n_items, int64_t n,
                         float *logits, int all_logits)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t E = c->n_embd, hcE = d->hc * E;
    int64_t row = 0;
    for (int i = 0; i < n_items; i++) {
        const int64_t pos0 = items[i].seq->kv.n_tokens;
        op->embed(be, d->tok_embd, items[i].tokens, items[i].n_tokens, d->h + row * E, E);
        memcpy(d->tokens + row, items[i].tokens, (size_t)items[i].n_tokens * sizeof *d->tokens);
        for (int64_t t = 0; t < items[i].n_tokens; t++) {
            d->pos[row + t] = d->kpos[row + t] = pos0 + t;
            d->neg_pos[row + t] = -(pos0 + t);
        }
        d->spans[i] = (v4_span){items[i].seq->v4, pos0, items[i].n_tokens};
        row += items[i].n_tokens;
    }
    for (int j = 0; j < d->hc; j++) op->copy_rows(be, d->x + j * E, hcE, d->h, E, E, n);
    d->hc_first = 1;
    if (c->v4.n_engram) dsv4_engram_rows(d, items, n_items);
    for (uint32_t l = 0; l < c->n_layer; l++) {
        const v4_layer *L = &d->layers[l];
        dsv4_hc_block(d, l, L->attn_fn, L->attn_base, L->attn_scale, L->attn_norm, NULL, n,
                      n_items);
        dsv4_hc_block(d, l, L->ffn_fn, L->ffn_base, L->ffn_scale, L->ffn_norm, d->tokens, n,
                      n_items);
        if (d->has_dspark && !c->v4.v41) dsv4_dspark_capture(d, l, n); /* (after layer l) */
    }
    if (d->has_mtp) { /* the MTP layer's input (model_last_hidden) */
        op->copy_rows(be, d->last_hidden, hcE, d->x, hcE, hcE, n);
        d->n_last = n;
    }
    for (int i = 0; i < n_items; i++) dsv4_seq_advance(items[i].seq, items[i].n_tokens);
    if (!logits) return;
    if (c->v4.v41) { /* the last block's pre mix collapses the streams */
        op->hc_pre_shifted(be, NULL, NULL, NULL, d->hc, 0, 0.0f, d->x, E, n, d->pre_mix, d->col,
                           NULL, NULL, NULL);
    } else {
        op->rmsnorm(be, d->x, hcE, NULL, d->xn, hcE, n, hcE, c->rms_norm_eps);
        op->matmul(be, 1, &d->head_fn, NULL, d->xn, n, &d->mix);
        op->hc_pre(be, d->mix, d->head_base, d->head_scale, d->hc, 0, c->v4.hc_eps, d->x, E, n,
                   d->col, NULL, NULL);
    }
    model_logits(be, d->output, d->output_norm, c->rms_norm_eps, E, d->col, d->h, items, n_items, n,
                 logits, all_logits);
}

void dsv4_forward_batch(dsv4 *d, const model_batch_item *items, int n_items, int64_t n_tokens,
                        float *logits)
{
    forward_step(d, items, n_items, n_tokens, logits, 0);
}

static void step_v4(void *arch, const model_batch_item *items, int n_items, int64_t n,
                    float *logits, int all_logits)
{
    forward_step(arch, items, n_items, n, logits, all_logits);
}

di_status dsv4_forward(dsv4 *d, const int32_t *tokens, int64_t n_tokens, float *logits,
                       int all_logits, di_error **err)
{
    const int64_t total = d->seq.kv.n_tokens + n_tokens;
    if (cache_reserve(d, d->seq.v4, total) != DI_OK)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY,
                             "out of memory growing the compressed KV cache to %lld tokens",
                             (long long)total);
    return model_forward_chunked(&d->pool, &d->seq, &d->opt, d->cfg.n_vocab, tokens, n_tokens,
                                 logits, all_logits, step_v4, d, err);
}
