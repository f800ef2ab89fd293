/* DeepSeek-V3 / DeepSeek-V2 forward pass (deepseek_v3.h), on the device behind
 * backend/backend.h.
 *
 * Per layer, as transformers' DeepseekV3DecoderLayer (and DeepseekV2's, which
 * differs only in its router):
 *   h = RMSNorm(x) * attn_norm
 *   q = h Wq                                  or  RMSNorm(h Wq_a) * q_a_norm  Wq_b  (q LoRA)
 *   [c_kv, k_pe] = h Wkv_a_mqa;  c_kv = RMSNorm(c_kv) * kv_a_norm
 *   q_pe, k_pe = RoPE(q_pe, pos), RoPE(k_pe, pos)   (adjacent pairs when rope_interleave,
 *                                                     YaRN inv_freq and cos/sin factor)
 *   cache <- [c_kv, k_pe]                     (kv_lora_rank + qk_rope_head_dim per token, layer)
 *   x = x + MLA(q, cache, Wkv_b) Wo           (backend mla_attention: absorbed, or naive with
 *                                              model_options.mla_naive; softmax scale
 *                                              qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2)
 *   h = RMSNorm(x) * ffn_norm
 *   x = x + MLP(h)                            layers < first_k_dense_replace
 *   x = x + sum_{e in topk} w_e Expert_e(h) + Shared(h)   otherwise (DeepSeekMoE)
 * then logits = RMSNorm(x) * output_norm  Woutput.
 *
 * Routing (transformers' DeepseekV3TopkRouter / DeepseekV2TopkRouter: sigmoid
 * with the correction bias and group-limited top-k for V3, softmax with greedy
 * or group-limited top-k for V2) is the backend's moe_route (backend/cpu/moe.h
 * spells it out); the routed experts are one batched moe_experts per layer,
 * each active expert's weights read once per step. */
#include "model/deepseek_v3.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/kv_pool.h"
#include "model/load.h"
#include "model/model_internal.h"
#include "util/error.h"

/* The rows of one sequence in a step: its cache, first slot and row count. */
typedef struct span {
    const backend_kv_seq *seq;
    int64_t pos0, n;
} span;

typedef struct ds_layer {
    const backend_matrix *wq, *wq_a, *wq_b, *wkv_a, *wkv_b, *wo;
    const float *attn_norm, *ffn_norm, *q_a_norm, *kv_a_norm; /* f32 in the backend */
    const float *kv_b;                                        /* f32 Wkv_b [H*(nope+v), R] */
    int moe;
    const backend_matrix *w_gate, *w_up, *w_down; /* dense MLP, or shared experts */
    const backend_matrix *gate_inp;               /* router {n_embd, n_expert} */
    const float *exp_probs_b;                     /* e_score_correction_bias, or NULL */
    const backend_moe *experts;                   /* the routed experts */
} ds_layer;

struct dsv3 {
    const model_weights *w;
    model_config cfg;
    model_options opt;
    backend *be; /* borrowed from the model; owns the weights, buffers and caches */
    ds_layer *layers;
    const backend_matrix *tok_embd, *output;
    const float *output_norm;
    const backend_rope *rope;
    float attn_scale;
    backend_route_params route;
    backend_kv *kv;
    kv_pool pool;  /* which of kv's blocks hold what */
    model_seq seq; /* the default sequence of dsv3_forward */
    /* activations in the backend, [n_batch, ...] */
    float *x, *h, *q, *qa, *kva, *attn, *gate, *up, *ffn, *router;
    /* The MTP (NextN) module, DeepSeek-V3 §2.2, when the checkpoint has it:
     * layers[n_layer] is its decoder layer, with its own one-layer latent cache. */
    int has_mtp;
    const float *mtp_enorm, *mtp_hnorm, *mtp_norm;
    const backend_matrix *mtp_eh, *mtp_head;
    backend_kv *mtp_kv;
    kv_pool mtp_pool;
    backend_kv_seq mtp_seq;
    float *hidden_out; /* [n_batch, n_embd]: final normed hidden rows of the last chunk */
    int64_t n_hidden;
    float *cat; /* [n_batch, 2 n_embd] */
    /* host, [n_batch, ...] */
    int64_t *pos; /* RoPE position of each row */
    span *spans;  /* [n_batch]: the sequences of the step */
    int32_t *sel; /* [n_batch, n_expert_used] chosen experts */
    float *sel_w; /* [n_batch, n_expert_used] their weights */
};

static di_status load_layer(dsv3 *d, uint32_t i, di_error **err)
{
    const model_config *c = &d->cfg;
    ds_layer *L = &d->layers[i];
    backend *be = d->be;
    const int64_t E = c->n_embd, H = c->n_head, qd = c->qk_nope_head_dim + c->qk_rope_head_dim,
                  R = c->kv_lora_rank, rope = c->qk_rope_head_dim;
    char name[128];
    di_status st;
#define MAT(field, suffix, nin, nout)                                                              \
    snprintf(name, sizeof name, "blk.%u." suffix ".weight", i);                                    \
    if ((st = model_matrix(d->w, be, name, nin, nout, &L->field, err)) != DI_OK) return st
#define VEC(field, suffix, n)                                                                      \
    snprintf(name, sizeof name, "blk.%u." suffix, i);                                              \
    if ((st = model_vector(d->w, be, name, n, &L->field, err)) != DI_OK) return st
    VEC(attn_norm, "attn_norm.weight", E);
    VEC(ffn_norm, "ffn_norm.weight", E);
    if (c->q_lora_rank) {
        MAT(wq_a, "attn_q_a", E, c->q_lora_rank);
        VEC(q_a_norm, "attn_q_a_norm.weight", c->q_lora_rank);
        MAT(wq_b, "attn_q_b", c->q_lora_rank, H * qd);
    } else {
        MAT(wq, "attn_q", E, H * qd);
    }
    MAT(wkv_a, "attn_kv_a_mqa", E, R + rope);
    VEC(kv_a_norm, "attn_kv_a_norm.weight", R);
    /* attn_kv_b as transformers has it, or, when the file's first layer has
     * attn_k_b, llama.cpp's split form in every layer */
    if (!model_weights_get(d->w, "blk.0.attn_k_b.weight")) {
        MAT(wkv_b, "attn_kv_b", R, H * (c->qk_nope_head_dim + c->v_head_dim));
        if ((st = be->ops->matrix_f32(be, L->wkv_b, &L->kv_b, err)) != DI_OK) return st;
    } else {
        const model_tensor *kb, *vb;
        int64_t ne_k[3] = {c->qk_nope_head_dim, R, H}, ne_v[3] = {R, c->v_head_dim, H};
        snprintf(name, sizeof name, "blk.%u.attn_k_b.weight", i);
        if ((st = model_weights_require(d->w, name, 3, ne_k, &kb, err)) != DI_OK) return st;
        snprintf(name, sizeof name, "blk.%u.attn_v_b.weight", i);
        if ((st = model_weights_require(d->w, name, 3, ne_v, &vb, err)) != DI_OK) return st;
        if ((st = be->ops->mla_kv_b_join(be, kb, vb, &L->kv_b, &L->wkv_b, err)) != DI_OK) return st;
    }
    MAT(wo, "attn_output", H * c->v_head_dim, E);
    L->moe = i >= c->n_layer_dense_lead;
    if (!L->moe) {
        MAT(w_gate, "ffn_gate", E, c->n_ff);
        MAT(w_up, "ffn_up", E, c->n_ff);
        MAT(w_down, "ffn_down", c->n_ff, E);
        return DI_OK;
    }
    const int64_t F = c->n_ff_exp, Fs = (int64_t)c->n_ff_exp * c->n_expert_shared;
    MAT(gate_inp, "ffn_gate_inp", E, c->n_expert);
    if (c->topk_method == MODEL_TOPK_NOAUX_TC) {
        VEC(exp_probs_b, "exp_probs_b.bias", c->n_expert);
    }
    if (c->n_expert_shared) {
        MAT(w_gate, "ffn_gate_shexp", E, Fs);
        MAT(w_up, "ffn_up_shexp", E, Fs);
        MAT(w_down, "ffn_down_shexp", Fs, E);
    }
    const backend_matrix **exps = calloc((size_t)3 * c->n_expert, sizeof(const backend_matrix *));
    if (!exps)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY,
                             "out of memory loading the experts of layer %u", i);
    const backend_matrix **gate = exps, **up = exps + c->n_expert,
                         **down = exps + 2 * (size_t)c->n_expert;
    for (uint32_t e = 0; e < c->n_expert && st == DI_OK; e++) {
        int64_t ne_in[2] = {E, F}, ne_out[2] = {F, E};
        const char *kinds[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        const backend_matrix **dst[3] = {&gate[e], &up[e], &down[e]};
        for (int k = 0; k < 3 && st == DI_OK; k++) {
            snprintf(name, sizeof name, "blk.%u.%s.%u.weight", i, kinds[k], e);
            const int64_t *ne = k < 2 ? ne_in : ne_out;
            st = model_matrix(d->w, be, name, ne[0], ne[1], dst[k], err);
        }
    }
    if (st == DI_OK)
        st = be->ops->moe_create(be, (int32_t)c->n_expert, gate, up, down, 0.0f, &L->experts, err);
    free((void *)exps);
    return st;
#undef MAT
#undef VEC
}

/* The MTP module's own tensors (its decoder layer is loaded by load_layer). */
static di_status load_mtp(dsv3 *d, di_error **err)
{
    const model_config *c = &d->cfg;
    const int64_t E = c->n_embd;
    char name[96];
    di_status st;
    uint32_t L = c->n_layer;
    snprintf(name, sizeof name, "blk.%u.nextn.enorm.weight", L);
    if ((st = model_vector(d->w, d->be, name, E, &d->mtp_enorm, err)) != DI_OK) return st;
    snprintf(name, sizeof name, "blk.%u.nextn.hnorm.weight", L);
    if ((st = model_vector(d->w, d->be, name, E, &d->mtp_hnorm, err)) != DI_OK) return st;
    snprintf(name, sizeof name, "blk.%u.nextn.shared_head_norm.weight", L);
    if ((st = model_vector(d->w, d->be, name, E, &d->mtp_norm, err)) != DI_OK) return st;
    snprintf(name, sizeof name, "blk.%u.nextn.eh_proj.weight", L);
    if ((st = model_matrix(d->w, d->be, name, 2 * E, E, &d->mtp_eh, err)) != DI_OK) return st;
    /* shared_head.head is the main LM head in DeepSeek-V3 (transformers ties it);
     * a checkpoint's own copy is used when present. */
    snprintf(name, sizeof name, "blk.%u.nextn.shared_head_head.weight", L);
    if (!model_weights_get(d->w, name)) {
        d->mtp_head = d->output;
        return DI_OK;
    }
    return model_matrix(d->w, d->be, name, E, c->n_vocab, &d->mtp_head, err);
}

di_status dsv3_load(const model_weights *w, const model_options *opt, backend *be, dsv3 **out,
                    di_error **err)
{
    dsv3 *d = calloc(1, sizeof *d);
    if (!d) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading the model");
    d->w = w;
    d->cfg = *model_weights_config(w);
    d->opt = *opt;
    d->be = be;
    const model_config *c = &d->cfg;
    const backend_ops *op = be->ops;
    di_status st;
    const int64_t E = c->n_embd, H = c->n_head, B = d->opt.n_batch, R = c->kv_lora_rank,
                  rope = c->qk_rope_head_dim, qd = c->qk_nope_head_dim + c->qk_rope_head_dim,
                  ctx = d->opt.n_ctx;
    if (R > 8192 || rope > 1024 || rope % 2 || qd > 4096 || c->v_head_dim > 4096 ||
        c->q_lora_rank > 65536) {
        st = di_error_setf(err, DI_ERR_MODEL_FORMAT,
                           "MLA dimensions out of range (kv_lora_rank %u, qk_rope_head_dim %u, "
                           "qk_nope_head_dim %u, v_head_dim %u, q_lora_rank %u)",
                           c->kv_lora_rank, c->qk_rope_head_dim, c->qk_nope_head_dim, c->v_head_dim,
                           c->q_lora_rank);
        goto fail;
    }
    if ((st = model_embedding(w, be, "token_embd.weight", E, c->n_vocab, &d->tok_embd, err)) !=
            DI_OK ||
        (st = model_matrix(w, be, c->tie_embeddings ? "token_embd.weight" : "output.weight", E,
                           c->n_vocab, &d->output, err)) != DI_OK ||
        (st = model_vector(w, be, "output_norm.weight", E, &d->output_norm, err)) != DI_OK)
        goto fail;
    char mtp_name[96];
    snprintf(mtp_name, sizeof mtp_name, "blk.%u.nextn.eh_proj.weight", c->n_layer);
    /* A checkpoint converted without its MTP tensors runs without MTP. */
    d->has_mtp = c->n_nextn_layer > 0 && model_weights_get(w, mtp_name) != NULL;
    d->layers = calloc(c->n_layer + (uint32_t)d->has_mtp, sizeof *d->layers);
    if (!d->layers) {
        st = di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading the layers");
        goto fail;
    }
    for (uint32_t i = 0; i < c->n_layer + (uint32_t)d->has_mtp; i++) {
        if ((st = load_layer(d, i, err)) != DI_OK) goto fail;
        if (d->opt.progress && i < c->n_layer &&
            d->opt.progress(d->opt.progress_user, (float)(i + 1) / (float)c->n_layer) != 0) {
            st = di_error_setf(err, DI_ERR_CANCELLED, "the model load was cancelled by the host");
            goto fail;
        }
    }
    if (d->has_mtp && (st = load_mtp(d, err)) != DI_OK) goto fail;
    /* RoPE over the qk_rope_head_dim dims only (transformers' config.head_dim). */
    backend_rope_params rp = model_rope_params(c, c->qk_rope_head_dim, 0);
    if ((st = op->rope_create(be, &rp, &d->rope, err)) != DI_OK) goto fail;
    /* transformers' yarn_apply_mscale: any rope scaling with mscale_all_dim. */
    d->attn_scale = 1.0f / sqrtf((float)qd);
    if (c->rope_scaling != MODEL_ROPE_SCALING_NONE && c->yarn_mscale_all_dim != 0.0f &&
        c->rope_factor > 1.0f) {
        float m = 0.1f * c->yarn_mscale_all_dim * logf(c->rope_factor) + 1.0f;
        d->attn_scale *= m * m;
    }
    d->route = (backend_route_params){(int32_t)c->n_expert, (int32_t)c->n_expert_used,
                                      (int32_t)c->n_group,  (int32_t)c->topk_group,
                                      c->expert_gating,     c->topk_method,
                                      c->norm_topk_prob,    c->routed_scaling_factor};
    const backend_mla_shape shape = {(int)H, (int)c->qk_nope_head_dim, (int)rope,
                                     (int)c->v_head_dim, (int)R};
    enum { BLOCK = MODEL_KV_BLOCK };
    int32_t n_blocks;
    if ((st = model_kv_dtype_check(d->opt.kv_dtype, R + rope,
                                   "MLA latent row (kv_lora_rank + qk_rope_head_dim)", err)) !=
        DI_OK)
        goto fail;
    int64_t block_bytes =
        (int64_t)c->n_layer * BLOCK * model_kv_row_bytes(d->opt.kv_dtype, R + rope);
    if ((st = model_kv_block_count(&d->opt, block_bytes, &n_blocks, err)) != DI_OK) goto fail;
    /* The MTP layer's cache serves the one sequence of dsv3_mtp_forward and the
     * MTP drafter's sequences (one per request, holding at most the tokens the
     * main cache holds, and a few drafts each): as many blocks as the main
     * cache plus one context. One layer of n_layer + 1: a small share. */
    const int32_t mtp_blocks = n_blocks + (int32_t)((ctx + BLOCK - 1) / BLOCK);
    if ((st = op->kv_create(be, d->opt.kv_dtype, (int)c->n_layer, 1, (int)(R + rope), BLOCK,
                            n_blocks, &shape, d->opt.mla_naive, &d->kv, err)) != DI_OK)
        goto fail;
    if ((st = kv_pool_init(&d->pool, n_blocks, model_kv_fingerprint(w, &d->opt))) != DI_OK ||
        (st = kv_pool_seq_init(&d->pool, &d->seq.kv, ctx)) != DI_OK) {
        st = di_error_setf(err, st, "cannot allocate the KV cache for %lld tokens", (long long)ctx);
        goto fail;
    }
    if (d->has_mtp) {
        if ((st = op->kv_create(be, d->opt.kv_dtype, 1, 1, (int)(R + rope), BLOCK, mtp_blocks,
                                &shape, d->opt.mla_naive, &d->mtp_kv, err)) != DI_OK)
            goto fail;
        if ((st = kv_pool_init(&d->mtp_pool, mtp_blocks, 0)) != DI_OK ||
            (st = kv_pool_seq_init(&d->mtp_pool, &d->mtp_seq, ctx)) != DI_OK) {
            st = di_error_setf(err, st, "cannot allocate the MTP layer's KV cache for %lld tokens",
                               (long long)ctx);
            goto fail;
        }
        if (!(d->hidden_out = op->alloc(be, B * E)) || !(d->cat = op->alloc(be, B * 2 * E))) {
            st = di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the MTP buffers");
            goto fail;
        }
    }
    int64_t ff = c->n_ff;
    if ((int64_t)c->n_ff_exp * c->n_expert_shared > ff)
        ff = (int64_t)c->n_ff_exp * c->n_expert_shared;
    int64_t wide = E > H * qd ? E : H * qd;
    int64_t k_used = c->n_expert_used ? c->n_expert_used : 1;
    d->x = op->alloc(be, B * E);
    d->h = op->alloc(be, B * wide);
    d->q = op->alloc(be, B * H * qd);
    d->qa = op->alloc(be, B * (c->q_lora_rank ? c->q_lora_rank : 1));
    d->kva = op->alloc(be, B * (R + rope));
    d->attn = op->alloc(be, B * H * c->v_head_dim);
    d->gate = op->alloc(be, B * ff);
    d->up = op->alloc(be, B * ff);
    d->ffn = op->alloc(be, B * E);
    d->router = op->alloc(be, B * (c->n_expert ? c->n_expert : 1));
    d->pos = malloc((size_t)B * sizeof *d->pos);
    d->spans = malloc((size_t)B * sizeof *d->spans);
    d->sel = malloc((size_t)(B * k_used) * sizeof *d->sel);
    d->sel_w = malloc((size_t)(B * k_used) * sizeof *d->sel_w);
    if (!d->x || !d->h || !d->q || !d->qa || !d->kva || !d->attn || !d->gate || !d->up || !d->ffn ||
        !d->router || !d->pos || !d->spans || !d->sel || !d->sel_w) {
        st = di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the forward pass buffers");
        goto fail;
    }
    *out = d;
    return DI_OK;
fail:
    dsv3_free(d);
    return st;
}

void dsv3_free(dsv3 *d)
{
    if (!d) return;
    free(d->layers);
    kv_pool_seq_free(&d->mtp_pool, &d->mtp_seq);
    kv_pool_free(&d->mtp_pool);
    kv_pool_seq_free(&d->pool, &d->seq.kv);
    kv_pool_free(&d->pool);
    free(d->pos);
    free(d->spans);
    free(d->sel);
    free(d->sel_w);
    free(d);
}

int64_t dsv3_n_past(const dsv3 *d)
{
    return d->seq.kv.n_tokens;
}

backend_kv *dsv3_kv(const dsv3 *d)
{
    return d->kv;
}

kv_pool *dsv3_pool(dsv3 *d)
{
    return &d->pool;
}

void dsv3_reset(dsv3 *d)
{
    kv_pool_seq_reset(&d->pool, &d->seq.kv);
    if (d->has_mtp) kv_pool_seq_reset(&d->mtp_pool, &d->mtp_seq);
    d->n_hidden = 0;
}

int dsv3_mtp_layers(const dsv3 *d)
{
    return d->has_mtp;
}

kv_pool *dsv3_mtp_pool(dsv3 *d)
{
    return d->has_mtp ? &d->mtp_pool : NULL;
}

const float *dsv3_last_hidden(const dsv3 *d, int64_t *n_rows)
{
    *n_rows = d->has_mtp ? d->n_hidden : 0;
    return d->has_mtp ? d->hidden_out : NULL;
}

size_t dsv3_kv_bytes_per_token(const dsv3 *d)
{
    return d->be->ops->kv_bytes_per_token(d->kv);
}

/* A SiLU-gated MLP over n rows of x: y = (SiLU(x Wg) * (x Wu)) Wd. */
static void mlp(dsv3 *d, const backend_matrix *wg, const backend_matrix *wu,
                const backend_matrix *wd, int64_t n_ff, const float *x, int64_t n, float *y)
{
    backend *be = d->be;
    const backend_matrix *w[2] = {wg, wu};
    float *out[2] = {d->gate, d->up};
    be->ops->matmul(be, 2, w, NULL, x, n, out);
    be->ops->silu_mul(be, d->gate, d->up, n * n_ff);
    be->ops->matmul(be, 1, &wd, NULL, d->gate, n, &y);
}

/* DeepSeekMoE: d->ffn = routed experts (weighted) + shared experts of d->h. */
static void moe(dsv3 *d, const ds_layer *L, int64_t n)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    be->ops->matmul(be, 1, &L->gate_inp, NULL, d->h, n, &d->router);
    be->ops->moe_route(be, &d->route, L->exp_probs_b, d->router, n, d->sel, d->sel_w);
    if (c->n_expert_shared)
        mlp(d, L->w_gate, L->w_up, L->w_down, (int64_t)c->n_ff_exp * c->n_expert_shared, d->h, n,
            d->ffn);
    be->ops->moe_experts(be, L->experts, d->h, n, d->sel, d->sel_w, (int32_t)c->n_expert_used,
                         d->ffn, c->n_expert_shared != 0);
}

/* MLA of layer L over cache kv, cache layer l (the MTP layer has its own), for
 * the n rows of d->h: RoPE positions d->pos, the rows of each sequence at its
 * cache slots (d->spans[0, n_spans), in row order). */
static void attention(dsv3 *d, const ds_layer *L, backend_kv *kv, uint32_t l, int64_t n,
                      int n_spans)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t H = c->n_head, R = c->kv_lora_rank, rope = c->qk_rope_head_dim,
                  nope = c->qk_nope_head_dim, qd = nope + rope, D = R + rope, V = H * c->v_head_dim;
    if (c->q_lora_rank) {
        op->matmul(be, 1, &L->wq_a, NULL, d->h, n, &d->qa);
        op->rmsnorm(be, d->qa, c->q_lora_rank, L->q_a_norm, d->qa, c->q_lora_rank, n,
                    c->q_lora_rank, c->rms_norm_eps);
        op->matmul(be, 1, &L->wq_b, NULL, d->qa, n, &d->q);
    } else {
        op->matmul(be, 1, &L->wq, NULL, d->h, n, &d->q);
    }
    op->matmul(be, 1, &L->wkv_a, NULL, d->h, n, &d->kva);
    op->rmsnorm(be, d->kva, D, L->kv_a_norm, d->kva, D, n, R, c->rms_norm_eps);
    op->rope(be, d->rope, d->kva + R, n, D, 1, rope, d->pos);
    op->rope(be, d->rope, d->q + nope, n, H * qd, (int)H, qd, d->pos);
    int64_t r0 = 0;
    for (int i = 0; i < n_spans; i++) {
        const span *sp = &d->spans[i];
        op->kv_store(be, kv, sp->seq, (int)l, sp->pos0, sp->n, d->kva + r0 * D, NULL);
        op->mla_attention(be, kv, sp->seq, (int)l, d->q + r0 * H * qd, sp->pos0, sp->n, L->kv_b,
                          L->wkv_b, d->attn_scale, d->attn + r0 * V);
        r0 += sp->n;
    }
}

/* One decoder layer over the n rows of d->x (positions and sequences as for
 * attention). */
static void decoder_layer(dsv3 *d, const ds_layer *L, backend_kv *kv, uint32_t l, int64_t n,
                          int n_spans)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const int64_t E = c->n_embd;
    be->ops->rmsnorm(be, d->x, E, L->attn_norm, d->h, E, n, E, c->rms_norm_eps);
    attention(d, L, kv, l, n, n_spans);
    be->ops->matmul(be, 1, &L->wo, NULL, d->attn, n, &d->h);
    be->ops->add(be, d->x, d->h, n * E);
    be->ops->rmsnorm(be, d->x, E, L->ffn_norm, d->h, E, n, E, c->rms_norm_eps);
    if (L->moe)
        moe(d, L, n);
    else
        mlp(d, L->w_gate, L->w_up, L->w_down, c->n_ff, d->h, n, d->ffn);
    be->ops->add(be, d->x, d->ffn, n * E);
}

/* One step: the items' tokens stacked as rows [0, n) (n <= n_batch), item i
 * appended to its sequence. Logits: one row per item with want_logits, or
 * with all_logits (a single item) every row. */
static void forward_step(dsv3 *d, const model_batch_item *items, int n_items, int64_t n,
                         float *logits, int all_logits)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const int64_t E = c->n_embd;
    int64_t row = 0;
    for (int i = 0; i < n_items; i++) {
        const backend_kv_seq *seq = &items[i].seq->kv;
        be->ops->embed(be, d->tok_embd, items[i].tokens, items[i].n_tokens, d->x + row * E, E);
        for (int64_t t = 0; t < items[i].n_tokens; t++) d->pos[row + t] = seq->n_tokens + t;
        d->spans[i] = (span){seq, seq->n_tokens, items[i].n_tokens};
        row += items[i].n_tokens;
    }
    for (uint32_t l = 0; l < c->n_layer; l++) decoder_layer(d, &d->layers[l], d->kv, l, n, n_items);
    for (int i = 0; i < n_items; i++) items[i].seq->kv.n_tokens += items[i].n_tokens;
    if (d->has_mtp) { /* what the MTP module drafts from: the LM head's input */
        be->ops->rmsnorm(be, d->x, E, d->output_norm, d->hidden_out, E, n, E, c->rms_norm_eps);
        d->n_hidden = n;
    }
    if (logits)
        model_logits(be, d->output, d->output_norm, c->rms_norm_eps, E, d->x, d->h, items, n_items,
                     n, logits, all_logits);
}

void dsv3_forward_batch(dsv3 *d, const model_batch_item *items, int n_items, int64_t n_tokens,
                        float *logits)
{
    forward_step(d, items, n_items, n_tokens, logits, 0);
}

static void step_v3(void *arch, const model_batch_item *items, int n_items, int64_t n,
                    float *logits, int all_logits)
{
    forward_step(arch, items, n_items, n, logits, all_logits);
}

di_status dsv3_forward(dsv3 *d, const int32_t *tokens, int64_t n_tokens, float *logits,
                       int all_logits, di_error **err)
{
    return model_forward_chunked(&d->pool, &d->seq, &d->opt, d->cfg.n_vocab, tokens, n_tokens,
                                 logits, all_logits, step_v3, d, err);
}

di_status dsv3_mtp_forward(dsv3 *d, const int32_t *tokens, int64_t n_tokens, const float *hidden,
                           float *logits, di_error **err)
{
    if (!d->has_mtp) return di_error_setf(err, DI_ERR_UNSUPPORTED, "the model has no MTP layer");
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t E = c->n_embd;
    const float eps = c->rms_norm_eps;
    /* The MTP cache's k-th entry is token k + 1, at position k + 1. */
    int64_t k0 = d->mtp_seq.n_tokens;
    if (n_tokens > d->opt.n_ctx - 1 - k0)
        return di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                             "%lld MTP tokens after %lld exceed the context of %lld",
                             (long long)n_tokens, (long long)k0, (long long)d->opt.n_ctx);
    if (kv_pool_seq_reserve(&d->mtp_pool, &d->mtp_seq, k0 + n_tokens) != DI_OK)
        return di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                             "the MTP KV cache has no room for %lld tokens", (long long)n_tokens);
    for (int64_t done = 0; done < n_tokens; done += d->opt.n_batch) {
        int64_t n = n_tokens - done < d->opt.n_batch ? n_tokens - done : d->opt.n_batch;
        /* x = eh_proj [enorm(embedding), hnorm(hidden)] */
        op->embed(be, d->tok_embd, tokens + done, n, d->cat, 2 * E);
        op->rmsnorm(be, d->cat, 2 * E, d->mtp_enorm, d->cat, 2 * E, n, E, eps);
        op->rmsnorm(be, hidden + done * E, E, d->mtp_hnorm, d->cat + E, 2 * E, n, E, eps);
        op->matmul(be, 1, &d->mtp_eh, NULL, d->cat, n, &d->x);
        for (int64_t t = 0; t < n; t++) d->pos[t] = k0 + done + 1 + t;
        d->spans[0] = (span){&d->mtp_seq, k0 + done, n};
        decoder_layer(d, &d->layers[c->n_layer], d->mtp_kv, 0, n, 1);
        op->rmsnorm(be, d->x, E, d->mtp_norm, d->h, E, n, E, eps);
        if (logits) {
            float *out = logits + done * (int64_t)c->n_vocab;
            op->matmul(be, 1, &d->mtp_head, NULL, d->h, n, &out);
        }
        d->mtp_seq.n_tokens = k0 + done + n;
    }
    return DI_OK;
}

void dsv3_mtp_forward_batch(dsv3 *d, const model_mtp_item *items, int n_items, int64_t n,
                            const float *hidden, float *logits, float *hidden_out)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t E = c->n_embd;
    const float eps = c->rms_norm_eps;
    int64_t row = 0;
    for (int i = 0; i < n_items; i++) {
        const backend_kv_seq *seq = &items[i].seq->kv;
        op->embed(be, d->tok_embd, items[i].tokens, items[i].n_tokens, d->cat + row * 2 * E, 2 * E);
        for (int64_t t = 0; t < items[i].n_tokens; t++) d->pos[row + t] = items[i].pos0 + t;
        d->spans[i] = (span){seq, seq->n_tokens, items[i].n_tokens};
        row += items[i].n_tokens;
    }
    /* x = eh_proj [enorm(embedding), hnorm(hidden)] */
    op->rmsnorm(be, d->cat, 2 * E, d->mtp_enorm, d->cat, 2 * E, n, E, eps);
    op->rmsnorm(be, hidden, E, d->mtp_hnorm, d->cat + E, 2 * E, n, E, eps);
    op->matmul(be, 1, &d->mtp_eh, NULL, d->cat, n, &d->x);
    decoder_layer(d, &d->layers[c->n_layer], d->mtp_kv, 0, n, n_items);
    /* Each wanted item's last row, gathered: its output (the hidden input of
     * a chained step) and the logits of shared_head. */
    row = 0;
    int64_t k = 0;
    for (int i = 0; i < n_items; i++) {
        items[i].seq->kv.n_tokens += items[i].n_tokens;
        row += items[i].n_tokens;
        if (items[i].want) memcpy(d->ffn + k++ * E, d->x + (row - 1) * E, (size_t)E * sizeof *d->x);
    }
    if (hidden_out) memcpy(hidden_out, d->ffn, (size_t)(k * E) * sizeof *d->ffn);
    if (logits && k > 0) dsv3_mtp_logits(d, d->ffn, k, logits);
}

void dsv3_mtp_logits(dsv3 *d, const float *hidden, int64_t n, float *logits)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const int64_t E = c->n_embd;
    for (int64_t done = 0; done < n; done += d->opt.n_batch) {
        int64_t m = n - done < d->opt.n_batch ? n - done : d->opt.n_batch;
        be->ops->rmsnorm(be, hidden + done * E, E, d->mtp_norm, d->h, E, m, E, c->rms_norm_eps);
        float *out = logits + done * (int64_t)c->n_vocab;
        be->ops->matmul(be, 1, &d->mtp_head, NULL, d->h, m, &out);
    }
}
