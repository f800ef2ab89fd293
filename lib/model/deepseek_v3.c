/* DeepSeek-V3 / DeepSeek-V2 forward pass on the CPU backend (deepseek_v3.h).
 *
 * Per layer, as transformers' DeepseekV3DecoderLayer (and DeepseekV2's, which
 * differs only in its router):
 *   h = RMSNorm(x) * attn_norm
 *   q = h Wq                                  or  RMSNorm(h Wq_a) * q_a_norm  Wq_b  (q LoRA)
 *   [c_kv, k_pe] = h Wkv_a_mqa;  c_kv = RMSNorm(c_kv) * kv_a_norm
 *   q_pe, k_pe = RoPE(q_pe, pos), RoPE(k_pe, pos)   (adjacent pairs when rope_interleave,
 *                                                     YaRN inv_freq and cos/sin factor)
 *   cache <- [c_kv, k_pe]                     (kv_lora_rank + qk_rope_head_dim per token, layer)
 *   x = x + MLA(q, cache, Wkv_b) Wo           (attention_mla.h: absorbed, or naive with
 *                                              model_options.mla_naive; softmax scale
 *                                              qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2)
 *   h = RMSNorm(x) * ffn_norm
 *   x = x + MLP(h)                            layers < first_k_dense_replace
 *   x = x + sum_{e in topk} w_e Expert_e(h) + Shared(h)   otherwise (DeepSeekMoE)
 * then logits = RMSNorm(x) * output_norm  Woutput.
 *
 * Routing (transformers' DeepseekV3TopkRouter / DeepseekV2TopkRouter): router
 * logits in f32; V3: s = sigmoid(logits), choice = s + e_score_correction_bias,
 * groups ranked by the sum of their two best choices, the topk_group best kept,
 * top-k of choice among them, weights s[top-k] (divided by their sum + 1e-20
 * when norm_topk_prob) times routed_scaling_factor. V2: s = softmax(logits),
 * top-k of s (greedy) or of s within the topk_group groups with the largest
 * max (group_limited_greedy), weights s[top-k] * routed_scaling_factor. */
#include "model/deepseek_v3.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/error.h"
#include "backend/cpu/attention_mla.h"
#include "backend/cpu/kv_cache.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/threadpool.h"
#include "model/cpu_weights.h"

/* The router's per-token work arrays (n_expert <= 4096 entries each), calloc'ed
 * once at load. */
typedef struct route_scratch {
    float scores[4096], choice[4096], group[4096], second[4096];
    unsigned char taken[4096], gkeep[4096];
} route_scratch;

typedef struct ds_layer {
    const model_tensor *wq, *wq_a, *wq_b, *wkv_a, *wkv_b, *wo;
    float *attn_norm, *ffn_norm, *q_a_norm, *kv_a_norm; /* f32 copies */
    float *kv_b;                                        /* f32 Wkv_b [H*(nope+v), R] */
    int moe;
    const model_tensor *w_gate, *w_up, *w_down;             /* dense MLP, or shared experts */
    const model_tensor *gate_inp;                           /* router {n_embd, n_expert} */
    float *exp_probs_b;                                     /* e_score_correction_bias, or NULL */
    const model_tensor **gate_exps, **up_exps, **down_exps; /* [n_expert] */
} ds_layer;

struct dsv3 {
    const model_weights *w;
    model_config cfg;
    model_options opt;
    ds_layer *layers;
    const model_tensor *tok_embd, *output;
    float *output_norm;
    cpu_rope rope;
    float attn_scale;
    cpu_mla_shape shape;
    cpu_threadpool *pool;
    cpu_kv_cache kv;
    cpu_kv_seq seq;
    /* scratch, [n_batch, ...] */
    float *x, *h, *q, *qa, *kva, *lat, *attn, *gate, *up, *ffn, *router;
    float *xe, *ye; /* one expert's gathered tokens [n_batch, n_embd] */
    /* The MTP (NextN) module, DeepSeek-V3 §2.2, when the checkpoint has it:
     * layers[n_layer] is its decoder layer, with its own one-layer latent cache. */
    int has_mtp;
    float *mtp_enorm, *mtp_hnorm, *mtp_norm;
    const model_tensor *mtp_eh, *mtp_head;
    cpu_kv_cache mtp_kv;
    cpu_kv_seq mtp_seq;
    float *hidden_out; /* [n_batch, n_embd]: final normed hidden rows of the last chunk */
    int64_t n_hidden;
    float *cat; /* [n_batch, 2 n_embd] */
    route_scratch *rs;
    int32_t *sel;    /* [n_batch, n_expert_used] chosen experts */
    float *sel_w;    /* [n_batch, n_expert_used] their weights */
    float *kv_f32;   /* [n_ctx, R + rope]: one layer's cache as f32 */
    float *kv_full;  /* naive only: [n_ctx, H*(nope+v)] */
    float *lat_rows; /* naive only: [n_ctx, R] */
    float *attn_scratch;
    void *act;
    size_t act_bytes;
    int64_t max_ff;
};

static size_t max_sz(size_t a, size_t b)
{
    return a > b ? a : b;
}

static di_status matrix(dsv3 *d, const char *name, int64_t n_in, int64_t n_out,
                        const model_tensor **out, di_error **err)
{
    di_status st = model_matrix(d->w, name, n_in, n_out, out, err);
    if (st != DI_OK) return st;
    d->act_bytes =
        max_sz(d->act_bytes, cpu_matmul_scratch_bytes((*out)->dtype, n_in, d->opt.n_batch));
    return DI_OK;
}

/* A whole 2-D weight as f32 [ne[1], ne[0]]; fp8 rows times their 128x128 block
 * scales (weight_scale_inv), as DeepSeek's fp8 checkpoints define them. */
static float *dequantize_matrix(const model_tensor *t)
{
    int64_t n_in = t->ne[0], n_out = t->ne[1];
    float *y = malloc((size_t)(n_in * n_out) * sizeof *y);
    if (!y) return NULL;
    size_t row = cpu_row_bytes((int)t->dtype, n_in);
    for (int64_t o = 0; o < n_out; o++) {
        float *yr = y + o * n_in;
        const char *src = (const char *)t->data + (size_t)o * row;
        if (t->dtype == MODEL_DTYPE_FP8_E4M3) {
            const float *sc = (const float *)t->scale->data + (o / 128) * t->scale->ne[0];
            for (int64_t i = 0; i < n_in; i++)
                yr[i] = cpu_fp8_e4m3_to_f32((uint8_t)src[i]) * sc[i / 128];
        } else {
            cpu_dequantize_row((int)t->dtype, src, yr, n_in);
        }
    }
    return y;
}

static di_status load_layer(dsv3 *d, uint32_t i, di_error **err)
{
    const model_config *c = &d->cfg;
    ds_layer *L = &d->layers[i];
    const int64_t E = c->n_embd, H = c->n_head, qd = c->qk_nope_head_dim + c->qk_rope_head_dim,
                  R = c->kv_lora_rank, rope = c->qk_rope_head_dim;
    char name[128];
    di_status st;
#define MAT(field, suffix, nin, nout)                                                              \
    snprintf(name, sizeof name, "blk.%u." suffix ".weight", i);                                    \
    if ((st = matrix(d, name, nin, nout, &L->field, err)) != DI_OK) return st
#define VEC(field, suffix, n)                                                                      \
    snprintf(name, sizeof name, "blk.%u." suffix, i);                                              \
    if ((st = model_vector_f32(d->w, name, n, &L->field, err)) != DI_OK) return st
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
    MAT(wkv_b, "attn_kv_b", R, H * (c->qk_nope_head_dim + c->v_head_dim));
    MAT(wo, "attn_output", H * c->v_head_dim, E);
    if (!(L->kv_b = dequantize_matrix(L->wkv_b)))
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading blk.%u.attn_kv_b",
                             i);
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
    L->gate_exps = calloc(c->n_expert, sizeof(const model_tensor *));
    L->up_exps = calloc(c->n_expert, sizeof(const model_tensor *));
    L->down_exps = calloc(c->n_expert, sizeof(const model_tensor *));
    if (!L->gate_exps || !L->up_exps || !L->down_exps)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY,
                             "out of memory loading the experts of layer %u", i);
    for (uint32_t e = 0; e < c->n_expert; e++) {
        int64_t ne_in[2] = {E, F}, ne_out[2] = {F, E};
        const char *kinds[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        const model_tensor **dst[3] = {&L->gate_exps[e], &L->up_exps[e], &L->down_exps[e]};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "blk.%u.%s.%u.weight", i, kinds[k], e);
            const int64_t *ne = k < 2 ? ne_in : ne_out;
            if ((st = matrix(d, name, ne[0], ne[1], dst[k], err)) != DI_OK) return st;
        }
    }
#undef MAT
#undef VEC
    return DI_OK;
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
    if ((st = model_vector_f32(d->w, name, E, &d->mtp_enorm, err)) != DI_OK) return st;
    snprintf(name, sizeof name, "blk.%u.nextn.hnorm.weight", L);
    if ((st = model_vector_f32(d->w, name, E, &d->mtp_hnorm, err)) != DI_OK) return st;
    snprintf(name, sizeof name, "blk.%u.nextn.shared_head_norm.weight", L);
    if ((st = model_vector_f32(d->w, name, E, &d->mtp_norm, err)) != DI_OK) return st;
    snprintf(name, sizeof name, "blk.%u.nextn.eh_proj.weight", L);
    if ((st = matrix(d, name, 2 * E, E, &d->mtp_eh, err)) != DI_OK) return st;
    /* shared_head.head is the main LM head in DeepSeek-V3 (transformers ties it);
     * a checkpoint's own copy is used when present. */
    snprintf(name, sizeof name, "blk.%u.nextn.shared_head_head.weight", L);
    if (!model_weights_get(d->w, name)) {
        d->mtp_head = d->output;
        return DI_OK;
    }
    return matrix(d, name, E, c->n_vocab, &d->mtp_head, err);
}

static float *alloc_f32(int64_t n)
{
    return malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
}

di_status dsv3_load(const model_weights *w, const model_options *opt, dsv3 **out, di_error **err)
{
    dsv3 *d = calloc(1, sizeof *d);
    if (!d) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading the model");
    d->w = w;
    d->cfg = *model_weights_config(w);
    d->opt = *opt;
    const model_config *c = &d->cfg;
    di_status st;
    const int64_t E = c->n_embd, H = c->n_head, B = d->opt.n_batch, R = c->kv_lora_rank,
                  rope = c->qk_rope_head_dim, qd = c->qk_nope_head_dim + c->qk_rope_head_dim,
                  full = H * (c->qk_nope_head_dim + c->v_head_dim), ctx = d->opt.n_ctx;
    if (R > 8192 || rope > 1024 || rope % 2 || qd > 4096 || c->v_head_dim > 4096 ||
        c->q_lora_rank > 65536) {
        st = di_error_setf(err, DI_ERR_MODEL_FORMAT,
                           "MLA dimensions out of range (kv_lora_rank %u, qk_rope_head_dim %u, "
                           "qk_nope_head_dim %u, v_head_dim %u, q_lora_rank %u)",
                           c->kv_lora_rank, c->qk_rope_head_dim, c->qk_nope_head_dim, c->v_head_dim,
                           c->q_lora_rank);
        goto fail;
    }
    int64_t ne_embd[2] = {E, c->n_vocab};
    if ((st = model_weights_require(w, "token_embd.weight", 2, ne_embd, &d->tok_embd, err)) !=
        DI_OK)
        goto fail;
    if (cpu_dtype_block_elems((int)d->tok_embd->dtype) == 0 ||
        d->tok_embd->dtype == MODEL_DTYPE_FP8_E4M3 ||
        E % cpu_dtype_block_elems((int)d->tok_embd->dtype) != 0) {
        st = di_error_setf(err, DI_ERR_UNSUPPORTED, "token_embd.weight: unsupported dtype %d",
                           (int)d->tok_embd->dtype);
        goto fail;
    }
    if ((st = matrix(d, c->tie_embeddings ? "token_embd.weight" : "output.weight", E, c->n_vocab,
                     &d->output, err)) != DI_OK ||
        (st = model_vector_f32(w, "output_norm.weight", E, &d->output_norm, err)) != DI_OK)
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
    for (uint32_t i = 0; i < c->n_layer + (uint32_t)d->has_mtp; i++)
        if ((st = load_layer(d, i, err)) != DI_OK) goto fail;
    if (d->has_mtp && (st = load_mtp(d, err)) != DI_OK) goto fail;
    /* RoPE over the qk_rope_head_dim dims only (transformers' config.head_dim). */
    model_config rc = *c;
    rc.head_dim = c->qk_rope_head_dim;
    if ((st = cpu_rope_init(&d->rope, &rc)) != DI_OK) {
        st = di_error_setf(err, st, "qk_rope_head_dim %u is not supported by RoPE",
                           c->qk_rope_head_dim);
        goto fail;
    }
    /* transformers' yarn_apply_mscale: any rope scaling with mscale_all_dim. */
    d->attn_scale = 1.0f / sqrtf((float)qd);
    if (c->rope_scaling != MODEL_ROPE_SCALING_NONE && c->yarn_mscale_all_dim != 0.0f &&
        c->rope_factor > 1.0f) {
        float m = 0.1f * c->yarn_mscale_all_dim * logf(c->rope_factor) + 1.0f;
        d->attn_scale *= m * m;
    }
    d->shape =
        (cpu_mla_shape){(int)H, (int)c->qk_nope_head_dim, (int)rope, (int)c->v_head_dim, (int)R};
    if ((st = cpu_threadpool_create(d->opt.n_threads, &d->pool)) != DI_OK) {
        st = di_error_setf(err, st, "cannot start %d threads", d->opt.n_threads);
        goto fail;
    }
    enum { BLOCK = 16 };
    int32_t n_blocks = (int32_t)((ctx + BLOCK - 1) / BLOCK);
    if ((st = cpu_kv_cache_init_latent(&d->kv, d->opt.kv_dtype, (int)c->n_layer, (int)(R + rope),
                                       BLOCK, n_blocks)) != DI_OK ||
        (st = cpu_kv_seq_init(&d->seq, &d->kv, ctx)) != DI_OK) {
        st = di_error_setf(err, st, "cannot allocate the KV cache for %lld tokens", (long long)ctx);
        goto fail;
    }
    if (d->has_mtp && ((st = cpu_kv_cache_init_latent(&d->mtp_kv, d->opt.kv_dtype, 1,
                                                      (int)(R + rope), BLOCK, n_blocks)) != DI_OK ||
                       (st = cpu_kv_seq_init(&d->mtp_seq, &d->mtp_kv, ctx)) != DI_OK)) {
        st = di_error_setf(err, st, "cannot allocate the MTP layer's KV cache for %lld tokens",
                           (long long)ctx);
        goto fail;
    }
    if (d->has_mtp && (!(d->hidden_out = alloc_f32(B * E)) || !(d->cat = alloc_f32(B * 2 * E)))) {
        st = di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the MTP buffers");
        goto fail;
    }
    int64_t ff = c->n_ff;
    if ((int64_t)c->n_ff_exp * c->n_expert_shared > ff)
        ff = (int64_t)c->n_ff_exp * c->n_expert_shared;
    if (c->n_ff_exp > ff) ff = c->n_ff_exp;
    d->max_ff = ff;
    int64_t wide = E > H * qd ? E : H * qd;
    int64_t k_used = c->n_expert_used ? c->n_expert_used : 1;
    d->x = alloc_f32(B * E);
    d->h = alloc_f32(B * wide);
    d->q = alloc_f32(B * H * qd);
    d->qa = alloc_f32(B * (c->q_lora_rank ? c->q_lora_rank : 1));
    d->kva = alloc_f32(B * (R + rope));
    d->attn = alloc_f32(B * H * c->v_head_dim);
    d->gate = alloc_f32(B * ff);
    d->up = alloc_f32(B * ff);
    d->ffn = alloc_f32(B * E);
    d->router = alloc_f32(B * (c->n_expert ? c->n_expert : 1));
    d->xe = alloc_f32(B * E);
    d->ye = alloc_f32(B * E);
    d->rs = calloc(1, sizeof *d->rs);
    d->sel = malloc((size_t)(B * k_used) * sizeof *d->sel);
    d->sel_w = alloc_f32(B * k_used);
    d->kv_f32 = alloc_f32(ctx * (R + rope));
    d->attn_scratch = alloc_f32((int64_t)d->opt.n_threads * cpu_mla_scratch_floats(&d->shape, ctx));
    if (d->opt.mla_naive) {
        d->kv_full = alloc_f32(ctx * full);
        d->lat_rows = alloc_f32(ctx * R);
        d->act_bytes =
            max_sz(d->act_bytes, cpu_matmul_scratch_bytes(d->layers[0].wkv_b->dtype, R, ctx));
    }
    d->act = malloc(d->act_bytes ? d->act_bytes : 1);
    if (!d->x || !d->h || !d->q || !d->qa || !d->kva || !d->attn || !d->gate || !d->up || !d->ffn ||
        !d->router || !d->xe || !d->ye || !d->rs || !d->sel || !d->sel_w || !d->kv_f32 ||
        !d->attn_scratch || !d->act || (d->opt.mla_naive && (!d->kv_full || !d->lat_rows))) {
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
    if (d->layers) {
        for (uint32_t i = 0; i < d->cfg.n_layer + (uint32_t)d->has_mtp; i++) {
            ds_layer *L = &d->layers[i];
            free(L->attn_norm);
            free(L->ffn_norm);
            free(L->q_a_norm);
            free(L->kv_a_norm);
            free(L->kv_b);
            free(L->exp_probs_b);
            free((void *)L->gate_exps);
            free((void *)L->up_exps);
            free((void *)L->down_exps);
        }
        free(d->layers);
    }
    free(d->output_norm);
    free(d->mtp_enorm);
    free(d->mtp_hnorm);
    free(d->mtp_norm);
    free(d->hidden_out);
    free(d->cat);
    if (d->mtp_seq.block_table) cpu_kv_seq_free(&d->mtp_seq, &d->mtp_kv);
    if (d->mtp_kv.k) cpu_kv_cache_free(&d->mtp_kv);
    if (d->seq.block_table) cpu_kv_seq_free(&d->seq, &d->kv);
    if (d->kv.k) cpu_kv_cache_free(&d->kv);
    cpu_threadpool_free(d->pool);
    float *bufs[] = {d->x,     d->h,      d->q,       d->qa,       d->kva,         d->attn,
                     d->gate,  d->up,     d->ffn,     d->router,   d->xe,          d->ye,
                     d->sel_w, d->kv_f32, d->kv_full, d->lat_rows, d->attn_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(d->sel);
    free(d->rs);
    free(d->act);
    free(d);
}

int64_t dsv3_n_past(const dsv3 *d)
{
    return d->seq.n_tokens;
}

void dsv3_reset(dsv3 *d)
{
    cpu_kv_seq_reset(&d->seq, &d->kv);
    if (d->has_mtp) cpu_kv_seq_reset(&d->mtp_seq, &d->mtp_kv);
    d->n_hidden = 0;
}

int dsv3_mtp_layers(const dsv3 *d)
{
    return d->has_mtp;
}

const float *dsv3_last_hidden(const dsv3 *d, int64_t *n_rows)
{
    *n_rows = d->has_mtp ? d->n_hidden : 0;
    return d->has_mtp ? d->hidden_out : NULL;
}

size_t dsv3_kv_bytes_per_token(const dsv3 *d)
{
    return cpu_kv_cache_bytes_per_token(&d->kv);
}

static void add_rows(float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

/* Index of the largest of v[0, n) not yet taken (ties: the lowest index). */
static int32_t argmax_free(const float *v, const unsigned char *taken, int32_t n)
{
    int32_t b = -1;
    for (int32_t i = 0; i < n; i++)
        if (!taken[i] && (b < 0 || v[i] > v[b])) b = i;
    return b;
}

/* Route one token: logits [n_expert] -> sel[k], w[k] (the file comment). */
static void route(const model_config *c, const float *bias, float *logits, int32_t *sel, float *w,
                  route_scratch *rs)
{
    const int32_t n = (int32_t)c->n_expert, k = (int32_t)c->n_expert_used, ng = (int32_t)c->n_group,
                  per = n / ng;
    float *scores = rs->scores, *choice = rs->choice, *group = rs->group, *second = rs->second;
    unsigned char *taken = rs->taken, *gkeep = rs->gkeep;
    if (n <= 0 || n > 4096 || ng <= 0 || per <= 0 || k <= 0 || k > n) return; /* checked at load */
    if (c->expert_gating == MODEL_EXPERT_GATING_SIGMOID) {
        for (int32_t e = 0; e < n; e++) scores[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else {
        memcpy(scores, logits, (size_t)n * sizeof *scores);
        cpu_softmax(scores, n);
    }
    for (int32_t e = 0; e < n; e++)
        choice[e] = scores[e] + (c->topk_method == MODEL_TOPK_NOAUX_TC && bias ? bias[e] : 0.0f);
    memset(gkeep, 1, (size_t)ng);
    if (c->topk_method != MODEL_TOPK_GREEDY && ng > 1) {
        /* V3: the sum of each group's two best choices; V2: its best. */
        for (int32_t g = 0; g < ng; g++) group[g] = second[g] = -INFINITY;
        for (int32_t e = 0; e < n; e++) {
            int32_t g = e / per;
            if (choice[e] > group[g]) {
                second[g] = group[g];
                group[g] = choice[e];
            } else if (choice[e] > second[g]) {
                second[g] = choice[e];
            }
        }
        if (c->topk_method == MODEL_TOPK_NOAUX_TC)
            for (int32_t g = 0; g < ng; g++) group[g] += second[g];
        memset(taken, 0, (size_t)ng);
        for (uint32_t i = 0; i < c->topk_group; i++) {
            int32_t g = argmax_free(group, taken, ng);
            if (g >= 0) taken[g] = 1;
        }
        memcpy(gkeep, taken, (size_t)ng);
    }
    /* Experts of dropped groups: -inf for V3 (never chosen), 0 for V2 (as
     * transformers' masked_fill). */
    for (int32_t e = 0; e < n; e++)
        if (!gkeep[e / per]) choice[e] = c->topk_method == MODEL_TOPK_NOAUX_TC ? -INFINITY : 0.0f;
    memset(taken, 0, (size_t)n);
    double sum = 0.0;
    for (int32_t i = 0; i < k; i++) {
        int32_t e = argmax_free(choice, taken, n);
        if (e < 0) e = 0; /* unreachable: k <= n */
        taken[e] = 1;
        sel[i] = e;
        w[i] = c->topk_method == MODEL_TOPK_NOAUX_TC ? scores[e] : choice[e];
        sum += w[i];
    }
    for (int32_t i = 0; i < k; i++) {
        if (c->norm_topk_prob) w[i] = (float)(w[i] / (sum + 1e-20));
        w[i] *= c->routed_scaling_factor;
    }
}

/* A SiLU-gated MLP over n rows of x: y = (SiLU(x Wg) * (x Wu)) Wd. */
static void mlp(dsv3 *d, const model_tensor *wg, const model_tensor *wu, const model_tensor *wd,
                const float *x, int64_t n, float *y)
{
    const int ref = d->opt.use_ref;
    if (cpu_matmul_can_share(wg, wu)) {
        const model_tensor *w[2] = {wg, wu};
        float *out[2] = {d->gate, d->up};
        cpu_matmul_multi(d->pool, 2, w, NULL, x, n, out, d->act, ref);
    } else {
        cpu_matmul(d->pool, wg, NULL, x, n, d->gate, d->act, ref);
        cpu_matmul(d->pool, wu, NULL, x, n, d->up, d->act, ref);
    }
    cpu_silu_mul(d->gate, d->up, n * wg->ne[1]);
    cpu_matmul(d->pool, wd, NULL, d->gate, n, y, d->act, ref);
}

/* DeepSeekMoE: d->ffn = routed experts (weighted) + shared experts of d->h. */
static void moe(dsv3 *d, const ds_layer *L, int64_t n)
{
    const model_config *c = &d->cfg;
    const int64_t E = c->n_embd, k = c->n_expert_used;
    cpu_matmul(d->pool, L->gate_inp, NULL, d->h, n, d->router, d->act, d->opt.use_ref);
    for (int64_t t = 0; t < n; t++)
        route(c, L->exp_probs_b, d->router + t * c->n_expert, d->sel + t * k, d->sel_w + t * k,
              d->rs);
    if (c->n_expert_shared)
        mlp(d, L->w_gate, L->w_up, L->w_down, d->h, n, d->ffn);
    else
        memset(d->ffn, 0, (size_t)(n * E) * sizeof *d->ffn);
    /* Each expert once, over the tokens that chose it (gathered rows). */
    for (uint32_t e = 0; e < c->n_expert; e++) {
        int64_t m = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < k; i++)
                if (d->sel[t * k + i] == (int32_t)e)
                    memcpy(d->xe + m++ * E, d->h + t * E, (size_t)E * sizeof *d->xe);
        if (m == 0) continue;
        mlp(d, L->gate_exps[e], L->up_exps[e], L->down_exps[e], d->xe, m, d->ye);
        m = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < k; i++)
                if (d->sel[t * k + i] == (int32_t)e) {
                    const float wt = d->sel_w[t * k + i], *y = d->ye + m++ * E;
                    float *o = d->ffn + t * E;
                    for (int64_t j = 0; j < E; j++) o[j] += wt * y[j];
                }
    }
}

/* MLA of layer L over cache kv / seq, cache layer l (the MTP layer has its own),
 * for n tokens at cache slots pos0.. and RoPE positions pos0 + rope_shift.. */
static void attention(dsv3 *d, const ds_layer *L, cpu_kv_cache *kv, const cpu_kv_seq *seq,
                      uint32_t l, int64_t n, int64_t pos0, int64_t rope_shift)
{
    const model_config *c = &d->cfg;
    const int ref = d->opt.use_ref;
    const int64_t E = c->n_embd, H = c->n_head, R = c->kv_lora_rank, rope = c->qk_rope_head_dim,
                  nope = c->qk_nope_head_dim, qd = nope + rope, D = R + rope;
    (void)E;
    if (c->q_lora_rank) {
        cpu_matmul(d->pool, L->wq_a, NULL, d->h, n, d->qa, d->act, ref);
        cpu_rmsnorm(d->qa, L->q_a_norm, d->qa, n, c->q_lora_rank, c->rms_norm_eps);
        cpu_matmul(d->pool, L->wq_b, NULL, d->qa, n, d->q, d->act, ref);
    } else {
        cpu_matmul(d->pool, L->wq, NULL, d->h, n, d->q, d->act, ref);
    }
    cpu_matmul(d->pool, L->wkv_a, NULL, d->h, n, d->kva, d->act, ref);
    for (int64_t t = 0; t < n; t++) {
        float *row = d->kva + t * D;
        cpu_rmsnorm(row, L->kv_a_norm, row, 1, R, c->rms_norm_eps);
        cpu_rope_apply(&d->rope, row + R, 1, pos0 + rope_shift + t);
        for (int64_t h = 0; h < H; h++)
            cpu_rope_apply(&d->rope, d->q + (t * H + h) * qd + nope, 1, pos0 + rope_shift + t);
    }
    cpu_kv_store(kv, seq, (int)l, pos0, n, d->kva, NULL);
    /* The layer's cache as f32 rows (read once per layer, shared by all heads). */
    const int64_t n_kv = pos0 + n;
    for (int64_t j = 0; j < n_kv; j++)
        cpu_dequantize_row((int)kv->dtype, cpu_kv_k(kv, seq, (int)l, j), d->kv_f32 + j * D, D);
    if (!d->opt.mla_naive) {
        cpu_mla_attention(d->pool, &d->shape, d->q, n, pos0, d->kv_f32, L->kv_b, d->attn_scale,
                          d->attn, d->attn_scratch, d->opt.n_ctx);
    } else {
        for (int64_t j = 0; j < n_kv; j++)
            memcpy(d->lat_rows + j * R, d->kv_f32 + j * D, (size_t)R * sizeof(float));
        cpu_matmul(d->pool, L->wkv_b, NULL, d->lat_rows, n_kv, d->kv_full, d->act, ref);
        cpu_mla_attention_naive(d->pool, &d->shape, d->q, n, pos0, d->kv_f32, d->kv_full,
                                d->attn_scale, d->attn, d->attn_scratch, d->opt.n_ctx);
    }
}

/* One decoder layer over the n rows of d->x at cache slots pos0.. (RoPE
 * positions shifted by rope_shift: 1 for the MTP module, 0 otherwise). */
static void decoder_layer(dsv3 *d, const ds_layer *L, cpu_kv_cache *kv, const cpu_kv_seq *seq,
                          uint32_t l, int64_t n, int64_t pos0, int64_t rope_shift)
{
    const model_config *c = &d->cfg;
    const int64_t E = c->n_embd;
    cpu_rmsnorm(d->x, L->attn_norm, d->h, n, E, c->rms_norm_eps);
    attention(d, L, kv, seq, l, n, pos0, rope_shift);
    cpu_matmul(d->pool, L->wo, NULL, d->attn, n, d->h, d->act, d->opt.use_ref);
    add_rows(d->x, d->h, n * E);
    cpu_rmsnorm(d->x, L->ffn_norm, d->h, n, E, c->rms_norm_eps);
    if (L->moe)
        moe(d, L, n);
    else
        mlp(d, L->w_gate, L->w_up, L->w_down, d->h, n, d->ffn);
    add_rows(d->x, d->ffn, n * E);
}

static void forward_chunk(dsv3 *d, const int32_t *tokens, int64_t n, int64_t pos0, float *logits,
                          int all_logits)
{
    const model_config *c = &d->cfg;
    const int64_t E = c->n_embd;
    const int ref = d->opt.use_ref;
    size_t erow = cpu_row_bytes((int)d->tok_embd->dtype, E);
    for (int64_t t = 0; t < n; t++)
        cpu_dequantize_row((int)d->tok_embd->dtype,
                           (const char *)d->tok_embd->data + (size_t)tokens[t] * erow, d->x + t * E,
                           E);
    for (uint32_t l = 0; l < c->n_layer; l++)
        decoder_layer(d, &d->layers[l], &d->kv, &d->seq, l, n, pos0, 0);
    if (d->has_mtp) { /* what the MTP module drafts from: the LM head's input */
        cpu_rmsnorm(d->x, d->output_norm, d->hidden_out, n, E, c->rms_norm_eps);
        d->n_hidden = n;
    }
    if (!logits) return;
    const float *x = all_logits ? d->x : d->x + (n - 1) * E;
    int64_t rows = all_logits ? n : 1;
    cpu_rmsnorm(x, d->output_norm, d->h, rows, E, c->rms_norm_eps);
    cpu_matmul(d->pool, d->output, NULL, d->h, rows, logits, d->act, ref);
}

di_status dsv3_forward(dsv3 *d, const int32_t *tokens, int64_t n_tokens, float *logits,
                       int all_logits, di_error **err)
{
    int64_t pos0 = d->seq.n_tokens;
    if (n_tokens > d->opt.n_ctx - pos0)
        return di_error_setf(
            err, DI_ERR_CONTEXT_LENGTH,
            "%lld tokens after %lld already in the sequence exceed the context of %lld",
            (long long)n_tokens, (long long)pos0, (long long)d->opt.n_ctx);
    if (cpu_kv_seq_reserve(&d->seq, &d->kv, pos0 + n_tokens) != DI_OK)
        return di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                             "the KV cache has no room for %lld more tokens", (long long)n_tokens);
    for (int64_t done = 0; done < n_tokens; done += d->opt.n_batch) {
        int64_t n = n_tokens - done < d->opt.n_batch ? n_tokens - done : d->opt.n_batch;
        int last = done + n == n_tokens;
        float *out = NULL;
        if (logits && all_logits) out = logits + done * (int64_t)d->cfg.n_vocab;
        if (logits && !all_logits && last) out = logits;
        forward_chunk(d, tokens + done, n, pos0 + done, out, all_logits);
        d->seq.n_tokens = pos0 + done + n;
    }
    return DI_OK;
}

di_status dsv3_mtp_forward(dsv3 *d, const int32_t *tokens, int64_t n_tokens, const float *hidden,
                           float *logits, di_error **err)
{
    if (!d->has_mtp) return di_error_setf(err, DI_ERR_UNSUPPORTED, "the model has no MTP layer");
    const model_config *c = &d->cfg;
    const int64_t E = c->n_embd;
    const int ref = d->opt.use_ref;
    /* The MTP cache's k-th entry is token k + 1, at position k + 1. */
    int64_t k0 = d->mtp_seq.n_tokens;
    if (n_tokens > d->opt.n_ctx - 1 - k0)
        return di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                             "%lld MTP tokens after %lld exceed the context of %lld",
                             (long long)n_tokens, (long long)k0, (long long)d->opt.n_ctx);
    if (cpu_kv_seq_reserve(&d->mtp_seq, &d->mtp_kv, k0 + n_tokens) != DI_OK)
        return di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                             "the MTP KV cache has no room for %lld tokens", (long long)n_tokens);
    size_t erow = cpu_row_bytes((int)d->tok_embd->dtype, E);
    for (int64_t done = 0; done < n_tokens; done += d->opt.n_batch) {
        int64_t n = n_tokens - done < d->opt.n_batch ? n_tokens - done : d->opt.n_batch;
        /* x = eh_proj [enorm(embedding), hnorm(hidden)] */
        for (int64_t t = 0; t < n; t++) {
            float *row = d->cat + t * 2 * E;
            cpu_dequantize_row((int)d->tok_embd->dtype,
                               (const char *)d->tok_embd->data + (size_t)tokens[done + t] * erow,
                               row, E);
            cpu_rmsnorm(row, d->mtp_enorm, row, 1, E, c->rms_norm_eps);
            cpu_rmsnorm(hidden + (done + t) * E, d->mtp_hnorm, row + E, 1, E, c->rms_norm_eps);
        }
        cpu_matmul(d->pool, d->mtp_eh, NULL, d->cat, n, d->x, d->act, ref);
        decoder_layer(d, &d->layers[c->n_layer], &d->mtp_kv, &d->mtp_seq, 0, n, k0 + done, 1);
        cpu_rmsnorm(d->x, d->mtp_norm, d->h, n, E, c->rms_norm_eps);
        if (logits)
            cpu_matmul(d->pool, d->mtp_head, NULL, d->h, n, logits + done * (int64_t)c->n_vocab,
                       d->act, ref);
        d->mtp_seq.n_tokens = k0 + done + n;
    }
    return DI_OK;
}
