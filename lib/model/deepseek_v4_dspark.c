/* DeepSeek-V4's DSpark draft head (DeepSeek-V4-Flash-DSpark), for block
 * speculative decoding, as llama.cpp's dflash graph runs it (src/models/
 * dflash.cpp's graph_dsv4 and build_dspark_markov_head, in the llama.cpp that
 * llama-cpp-python 0.3.36 vendors: the executable reference,
 * tests/oracle/make_dspark_fixtures.py). The target model hands over its
 * features: per token, the mean of its mHC streams after each of the config's
 * dspark_target_layer_ids, concatenated. A DSpark sequence keeps, per stage,
 * a window ring of keys:
 *   inject (a target token at position p):  g = RMSNorm(main_proj feat) main_norm,
 *     key_s(p) = RoPE_p(RMSNorm(wkv_s g) kv_norm_s)       for every stage s
 *   draft (a block at positions n .. n + B - 1, n the sequence's length):
 *     tokens [anchor, noise x (B - 1)] embedded (the target's embedding) into
 *     the mHC streams, through the stages (V4 sliding-window layers with
 *     scored MoE, mHC-wrapped; each block row attends the window up to the
 *     block's last row: non-causal inside the block, its own keys written at
 *     n + i), the last stage's mHC head (h_i), norm, the target's LM head;
 *     then the Markov head, a chain: prev_0 = anchor,
 *       logits_i += markov_w2 markov_w1[prev_i],
 *       confidence_i = sigmoid(conf_proj [h_i; markov_w1[prev_i]]),
 *       prev_{i+1} = argmax logits_i (the draft i; the lower ID among equals).
 * Tensors (DeepSeek's release names, renamed model.mtp.K.* by weights_hf.c):
 * stage K's layer as mtp.K.<a layer's>, mtp.0.main_proj.weight [n_embd,
 * n_target n_embd], mtp.0.main_norm.weight, and on the last stage
 * markov_head.markov_w{1,2}.weight [n_vocab, rank],
 * confidence_head.proj.weight [1, n_embd + rank], norm.weight and
 * hc_head_{fn,base,scale}. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/deepseek_v4_internal.h"
#include "model/load.h"
#include "util/error.h"

/* The head's tensors: DeepSeek's release names (model.mtp.<stage>.<name> once
 * renamed: whichever stage holds each, as llama.cpp's converter takes them;
 * when none does, the name stage 0's projection or the last stage's heads
 * would have, for the error), or a DSpark
 * GGUF's top-level ones (llama.cpp's dflash names: fc, enc.output_norm,
 * markov_w1/w2, conf_proj, output_norm, output_hc_* read as the model's mHC
 * head names, weights_gguf_dsv4.c). */
typedef struct dspark_names {
    char proj[96], main_norm[96], w1[96], w2[96], conf[96], norm[96], head_fn[96], head_base[96],
        head_scale[96];
} dspark_names;

static void names_for(const dsv4 *d, dspark_names *n)
{
    if (d->dspark_w) {
        snprintf(n->proj, sizeof n->proj, "fc.weight");
        snprintf(n->main_norm, sizeof n->main_norm, "enc.output_norm.weight");
        snprintf(n->w1, sizeof n->w1, "markov_w1.weight");
        snprintf(n->w2, sizeof n->w2, "markov_w2.weight");
        snprintf(n->conf, sizeof n->conf, "conf_proj.weight");
        snprintf(n->norm, sizeof n->norm, "output_norm.weight");
        snprintf(n->head_fn, sizeof n->head_fn, "model.hc_head.hc_fn");
        snprintf(n->head_base, sizeof n->head_base, "model.hc_head.hc_base");
        snprintf(n->head_scale, sizeof n->head_scale, "model.hc_head.hc_scale");
        return;
    }
    /* (V4.1's Markov head names its tables embed and head, as DeepInfer's
     * hugging_face/names.py reads them; it has no mHC head) */
    const int v41 = d->cfg.v4.v41;
    const char *const suffix[9] = {"main_proj.weight",
                                   "main_norm.weight",
                                   v41 ? "markov_head.embed.weight"
                                       : "markov_head.markov_w1.weight",
                                   v41 ? "markov_head.head.weight" : "markov_head.markov_w2.weight",
                                   "confidence_head.proj.weight",
                                   "norm.weight",
                                   "hc_head_fn",
                                   "hc_head_base",
                                   "hc_head_scale"};
    char *out[9] = {n->proj, n->main_norm, n->w1,        n->w2,        n->conf,
                    n->norm, n->head_fn,   n->head_base, n->head_scale};
    const uint32_t S = d->cfg.v4.n_dspark;
    for (int k = 0; k < 9; k++) {
        snprintf(out[k], sizeof n->proj, "model.mtp.%u.%s", k < 2 ? 0 : S - 1, suffix[k]);
        for (uint32_t s = 0; s < S; s++) {
            char name[sizeof n->proj];
            snprintf(name, sizeof name, "model.mtp.%u.%s", s, suffix[k]);
            if (model_weights_get(d->w, name)) {
                memcpy(out[k], name, sizeof name);
                break;
            }
        }
    }
}

/* The Markov head's rank, from markov_w1's shape ({rank, n_vocab} in GGUF
 * order): DI_ERR_MODEL_FORMAT, named, when missing or misshapen. */
static di_status markov_rank(const dsv4 *d, const char *name, int64_t *rank, di_error **err)
{
    const model_tensor *t = model_weights_get(d->dspark_w ? d->dspark_w : d->w, name);
    if (!t) return di_error_setf(err, DI_ERR_MODEL_FORMAT, "tensor '%s' is missing", name);
    if (t->n_dims != 2 || t->ne[1] != (int64_t)d->cfg.n_vocab || t->ne[0] < 1 || t->ne[0] > 65536)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "tensor '%s' is not [n_vocab %u, rank] with rank in [1, 65536]", name,
                             d->cfg.n_vocab);
    *rank = t->ne[0];
    return DI_OK;
}

di_status dsv4_dspark_load(dsv4 *d, di_error **err)
{
    const model_config *c = &d->cfg;
    const model_config_v4 *v = &c->v4;
    if (!v->n_dspark) return DI_OK;
    backend *be = d->be;
    const model_weights *w = d->dspark_w ? d->dspark_w : d->w;
    const int64_t E = c->n_embd, B = d->opt.n_batch, F = (int64_t)v->n_dspark_target * E;
    di_status st;
    for (uint32_t s = 0; s < v->n_dspark; s++)
        if ((st = dsv4_load_layer(d, c->n_layer + s, err)) != DI_OK) return st;
    dspark_names n;
    names_for(d, &n);
    int64_t R = 0;
    if ((st = markov_rank(d, n.w1, &R, err)) != DI_OK) return st;
    if (v->dspark_markov_rank && R != (int64_t)v->dspark_markov_rank)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "tensor '%s' has rank %lld, the config's dspark_markov_rank is %u",
                             n.w1, (long long)R, v->dspark_markov_rank);
    d->dspark_rank = R;
    if ((st = model_matrix(w, be, n.proj, F, E, &d->dspark_proj, err)) != DI_OK ||
        (st = model_vector(w, be, n.main_norm, E, &d->dspark_main_norm, err)) != DI_OK ||
        (st = model_embedding(w, be, n.w1, R, c->n_vocab, &d->dspark_w1, err)) != DI_OK ||
        (st = model_matrix(w, be, n.w2, R, c->n_vocab, &d->dspark_w2, err)) != DI_OK ||
        (st = model_matrix(w, be, n.conf, E + R, 1, &d->dspark_conf, err)) != DI_OK ||
        (st = model_vector(w, be, n.norm, E, &d->dspark_norm, err)) != DI_OK)
        return st;
    /* (V4.1's shifted mHC: the last block's pre mix collapses the streams) */
    if (!v->v41 &&
        ((st = model_matrix(w, be, n.head_fn, d->hc * E, d->hc, &d->dspark_head_fn, err)) !=
             DI_OK ||
         (st = model_vector(w, be, n.head_base, d->hc, &d->dspark_head_base, err)) != DI_OK ||
         (st = model_vector(w, be, n.head_scale, 1, &d->dspark_head_scale, err)) != DI_OK))
        return st;
    d->dspark_feat = be->ops->alloc(be, B * F);
    d->dspark_hid = be->ops->alloc(be, B * E);
    d->dspark_mk = be->ops->alloc(be, B * R);
    d->dspark_cat = be->ops->alloc(be, B * (E + R));
    d->dspark_cf = be->ops->alloc(be, B);
    /* (an n_batch below the block loads: model_dspark_draft refuses to run) */
    const int64_t per = B / (int64_t)v->dspark_block > 0 ? B / (int64_t)v->dspark_block : 1;
    d->dspark_bias = be->ops->alloc(be, per * c->n_vocab);
    d->dspark_last = malloc((size_t)B * sizeof *d->dspark_last);
    if (!d->dspark_feat || !d->dspark_hid || !d->dspark_mk || !d->dspark_cat || !d->dspark_cf ||
        !d->dspark_bias || !d->dspark_last)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the DSpark buffers");
    /* The DSpark sequences' tokens are counted as the MTP layer's pairs are
     * (deepseek_v4_mtp.c): the main pool's blocks plus one context. */
    const int64_t ctx_blocks = (d->opt.n_ctx + MODEL_KV_BLOCK - 1) / MODEL_KV_BLOCK;
    if ((st = kv_pool_init(&d->dspark_pool, d->pool.n_blocks + (int32_t)ctx_blocks, 0)) != DI_OK)
        return di_error_setf(err, st, "out of memory for the DSpark sequences' blocks");
    d->has_dspark = 1;
    return DI_OK;
}

void dsv4_dspark_free(dsv4 *d)
{
    if (d->has_dspark) kv_pool_free(&d->dspark_pool);
    d->has_dspark = 0;
    free(d->dspark_last);
    d->dspark_last = NULL;
    model_weights_close(d->dspark_w);
    d->dspark_w = NULL;
}

int dsv4_weights_dspark_only(const model_weights *w)
{
    return strcmp(model_weights_architecture(w), "dflash") == 0 &&
           model_weights_config(w)->v4.n_dspark > 0;
}

/* Each field of a DSpark GGUF's config that must be the model's: the first
 * that differs, named, or NULL. */
static const char *config_mismatch(const model_config *a, const model_config *b)
{
    const char *why = dsv4_draft_config_mismatch(a, b);
    if (why) return why;
    if (a->v4.v41 != b->v4.v41) return "the model's kind (DeepSeek-V4, not V4.1)";
    for (uint32_t k = 0; k < b->v4.n_dspark_target; k++)
        if (b->v4.dspark_target[k] >= a->n_layer) return "target_layers (past the model's layers)";
    return NULL;
}

di_status dsv4_dspark_attach(dsv4 *d, model_weights *w, const char *path, di_error **err)
{
    const model_config *wc = model_weights_config(w);
    if (d->has_dspark || d->has_mtp || d->cfg.v4.n_dspark)
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: the model has %s already (its checkpoint's)", path,
                             d->has_mtp ? "an MTP layer" : "a DSpark head");
    const char *why = config_mismatch(&d->cfg, wc);
    if (why)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: its %s is not the model's: a DSpark GGUF drafts only for the "
                             "model it was converted with",
                             path, why);
    if (wc->v4.dspark_noise >= d->cfg.n_vocab)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: tokenizer.ggml.mask_token_id %u is past the vocabulary of %u",
                             path, wc->v4.dspark_noise, d->cfg.n_vocab);
    const uint32_t L = d->cfg.n_layer, S = wc->v4.n_dspark;
    if (S > MODEL_V4_MAX_LAYERS - L)
        return di_error_setf(err, DI_ERR_UNSUPPORTED, "%s: %u stages after %u layers exceed %d",
                             path, S, L, MODEL_V4_MAX_LAYERS);
    /* the stages after the main layers (the layer arrays grown to hold them) */
    v4_layer *layers = realloc(d->layers, (size_t)(L + S) * sizeof *layers);
    if (layers) d->layers = layers;
    model_tensor **views =
        layers ? realloc(d->views, (size_t)(L + S) * sizeof(model_tensor *)) : NULL;
    if (!views) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the stages");
    d->views = views;
    memset(d->layers + L, 0, (size_t)S * sizeof *d->layers);
    memset(d->views + L, 0, (size_t)S * sizeof(model_tensor *));
    model_config_v4 *v = &d->cfg.v4;
    v->n_dspark = S; /* (kept on failure: dsv4_free frees what the stages loaded) */
    v->dspark_block = wc->v4.dspark_block;
    v->dspark_noise = wc->v4.dspark_noise;
    v->n_dspark_target = wc->v4.n_dspark_target;
    memcpy(v->dspark_target, wc->v4.dspark_target, sizeof v->dspark_target);
    for (uint32_t s = 0; s < S; s++) {
        v->attention[L + s] = MODEL_V4_SLIDING;
        v->hash_moe[L + s] = 0;
    }
    d->dspark_w = w;
    di_status st = dsv4_dspark_load(d, err);
    if (st != DI_OK) {
        if (d->has_dspark) kv_pool_free(&d->dspark_pool);
        d->has_dspark = 0;
        d->dspark_w = NULL; /* (the caller frees w) */
    }
    return st;
}

void dsv4_dspark_capture(dsv4 *d, uint32_t l, int64_t n)
{
    const model_config *c = &d->cfg;
    const int64_t E = c->n_embd, F = (int64_t)c->v4.n_dspark_target * E;
    for (uint32_t k = 0; k < c->v4.n_dspark_target; k++) {
        if (c->v4.dspark_target[k] != l) continue;
        d->be->ops->hc_mean(d->be, d->x, d->hc, E, n, d->dspark_feat + k * E, F);
        d->n_feat = n;
    }
}

int dsv4_dspark_block(const dsv4 *d)
{
    return d->has_dspark ? (int)d->cfg.v4.dspark_block : 0;
}

int64_t dsv4_dspark_feature_width(const dsv4 *d)
{
    return (int64_t)d->cfg.v4.n_dspark_target * d->cfg.n_embd;
}

const float *dsv4_dspark_features(const dsv4 *d, int64_t *n_rows)
{
    *n_rows = d->has_dspark ? d->n_feat : 0;
    return d->has_dspark ? d->dspark_feat : NULL;
}

kv_pool *dsv4_dspark_pool(dsv4 *d)
{
    return d->has_dspark ? &d->dspark_pool : NULL;
}

di_status dsv4_dspark_seq_init(dsv4 *d, model_seq *s)
{
    return dsv4_cache_seq_init(d, &d->dspark_pool, &d->dspark_free, d->cfg.n_layer,
                               d->cfg.v4.n_dspark, s);
}

void dsv4_dspark_seq_release(dsv4 *d, model_seq *s)
{
    dsv4_cache_seq_release(&d->dspark_pool, &d->dspark_free, s);
}

void dsv4_dspark_seq_truncate(dsv4 *d, model_seq *s, int64_t n_tokens)
{
    dsv4_cache_truncate(d, &d->dspark_pool, s, n_tokens);
}

void dsv4_dspark_inject(dsv4 *d, model_seq *s, const float *features, int64_t n)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t E = c->n_embd, hd = c->head_dim, rd = c->qk_rope_head_dim,
                  F = (int64_t)c->v4.n_dspark_target * E;
    const float eps = c->rms_norm_eps;
    for (int64_t done = 0; done < n; done += d->opt.n_batch) {
        const int64_t m = n - done < d->opt.n_batch ? n - done : d->opt.n_batch,
                      p0 = s->kv.n_tokens;
        for (int64_t t = 0; t < m; t++) d->pos[t] = p0 + t;
        op->matmul(be, 1, &d->dspark_proj, NULL, features + done * F, m, &d->h);
        op->rmsnorm(be, d->h, E, d->dspark_main_norm, d->col, E, m, E, eps);
        for (uint32_t st = 0; st < c->v4.n_dspark; st++) {
            const v4_layer *L = &d->layers[c->n_layer + st];
            op->matmul(be, 1, &L->wkv, NULL, d->col, m, &d->kv);
            op->rmsnorm(be, d->kv, hd, L->kv_norm, d->kv, hd, m, hd, eps);
            op->rope(be, L->rope, d->kv + hd - rd, m, hd, 1, hd, d->pos);
            dsv4_ring_store(be, d->opt.kv_dtype, s->v4->layers[st].win, d->win_ring, hd, d->kv, hd,
                            p0, m);
        }
        dsv4_seq_advance(s, m);
    }
}

/* The confidence head's probability of its logit z: sigmoid(z), V4.1's with
 * z clamped to [-60, 60] (DeepInfer's confidence_head_fused_ref, its
 * temperature 1 by default). */
static float confidence_of(const dsv4 *d, float z)
{
    if (d->cfg.v4.v41) z = z < -60.0f ? -60.0f : z > 60.0f ? 60.0f : z;
    return 1.0f / (1.0f + expf(-z));
}

/* The Markov chain and the confidences of the n_items blocks whose rows are
 * logits [n_items B, n_vocab] (the LM head's) and d->dspark_hid (pre-norm):
 * position i of every block at once. */
static void markov(dsv4 *d, const int32_t *anchors, int n_items, float *logits, float *confidence,
                   int32_t *drafts)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t E = c->n_embd, R = d->dspark_rank, V = c->n_vocab,
                  Bk = (int64_t)c->v4.dspark_block;
    int32_t *prev = d->tokens; /* (free after the stages) */
    memcpy(prev, anchors, (size_t)n_items * sizeof *prev);
    for (int64_t i = 0; i < Bk; i++) {
        op->embed(be, d->dspark_w1, prev, n_items, d->dspark_mk, R);
        op->matmul(be, 1, &d->dspark_w2, NULL, d->dspark_mk, n_items, &d->dspark_bias);
        op->copy_rows(be, d->dspark_cat, E + R, d->dspark_hid + i * E, Bk * E, E, n_items);
        op->copy_rows(be, d->dspark_cat + E, E + R, d->dspark_mk, R, R, n_items);
        op->matmul(be, 1, &d->dspark_conf, NULL, d->dspark_cat, n_items, &d->dspark_cf);
        for (int k = 0; k < n_items; k++) {
            float *row = logits + (k * Bk + i) * V;
            op->add(be, row, d->dspark_bias + k * V, V);
            int32_t best = 0;
            for (int64_t j = 1; j < V; j++)
                if (row[j] > row[best]) best = (int32_t)j;
            prev[k] = best;
            drafts[k * Bk + i] = best;
            confidence[k * Bk + i] = confidence_of(d, d->dspark_cf[k]);
        }
    }
}

void dsv4_dspark_draft(dsv4 *d, model_seq *const *seqs, const int32_t *anchors, int n_items,
                       float *logits, float *confidence, int32_t *drafts)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t E = c->n_embd, hcE = d->hc * E, Bk = (int64_t)c->v4.dspark_block,
                  per = d->opt.n_batch / Bk;
    for (int i0 = 0; i0 < n_items; i0 += (int)per) {
        const int m = n_items - i0 < per ? n_items - i0 : (int)per;
        const int64_t n = m * Bk;
        for (int k = 0; k < m; k++) {
            model_seq *s = seqs[i0 + k];
            const int64_t p0 = s->kv.n_tokens;
            int32_t *tok = d->tokens + k * Bk;
            tok[0] = anchors[i0 + k];
            for (int64_t i = 1; i < Bk; i++) tok[i] = (int32_t)c->v4.dspark_noise;
            /* V4: row p sees the window up to p, then the block's later
             * rows (llama.cpp); V4.1: every row the window ending at the
             * last injected position, then the whole block (DeepInfer's
             * get_fused_dflash_get_input) */
            for (int64_t i = 0; i < Bk; i++) {
                d->pos[k * Bk + i] = p0 + i;
                d->kpos[k * Bk + i] = c->v4.v41 ? p0 - 1 : p0 + i;
                d->neg_pos[k * Bk + i] = -(p0 + i);
                d->dspark_last[k * Bk + i] = p0 + Bk - 1;
            }
            d->spans[k] = (v4_span){s->v4, p0, Bk};
        }
        op->embed(be, d->tok_embd, d->tokens, n, d->h, E);
        for (int j = 0; j < d->hc; j++) op->copy_rows(be, d->x + j * E, hcE, d->h, E, E, n);
        d->klast = d->dspark_last;
        d->hc_first = 1;
        for (uint32_t st = 0; st < c->v4.n_dspark; st++) {
            const uint32_t l = c->n_layer + st;
            const v4_layer *L = &d->layers[l];
            dsv4_hc_block(d, l, L->attn_fn, L->attn_base, L->attn_scale, L->attn_norm, NULL, n, m);
            dsv4_hc_block(d, l, L->ffn_fn, L->ffn_base, L->ffn_scale, L->ffn_norm, d->tokens, n, m);
        }
        d->klast = NULL;
        /* the last stage's mHC head (V4.1: its last pre mix): h (pre-norm,
         * the confidence head's), then the norm and the target's LM head */
        if (c->v4.v41) {
            op->hc_pre_shifted(be, NULL, NULL, NULL, d->hc, 0, 0.0f, d->x, E, n, d->pre_mix,
                               d->dspark_hid, NULL, NULL, NULL);
        } else {
            op->rmsnorm(be, d->x, hcE, NULL, d->xn, hcE, n, hcE, c->rms_norm_eps);
            op->matmul(be, 1, &d->dspark_head_fn, NULL, d->xn, n, &d->mix);
            op->hc_pre(be, d->mix, d->dspark_head_base, d->dspark_head_scale, d->hc, 0,
                       c->v4.hc_eps, d->x, E, n, d->dspark_hid, NULL, NULL);
        }
        op->rmsnorm(be, d->dspark_hid, E, d->dspark_norm, d->col, E, n, E, c->rms_norm_eps);
        float *lg = logits + (int64_t)i0 * Bk * c->n_vocab;
        op->matmul(be, 1, &d->output, NULL, d->col, n, &lg);
        markov(d, anchors + i0, m, lg, confidence + i0 * Bk, drafts + i0 * Bk);
        /* the block's rows overwrote ring rows: a later cut counts them
         * (dsv4_cache_truncate) */
        for (int k = 0; k < m; k++) {
            dsv4_cache *kc = seqs[i0 + k]->v4;
            const int64_t end = seqs[i0 + k]->kv.n_tokens + Bk;
            if (seqs[i0 + k]->kv.n_tokens == 0 || kc->n_written < end) kc->n_written = end;
        }
    }
}
