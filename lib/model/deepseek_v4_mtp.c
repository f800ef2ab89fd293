/* DeepSeek-V4's MTP (multi-token prediction) layer, for speculative decoding
 * (deepseek_v4.h; the MTP drafter, lib/engine/draft_mtp.c, runs it through
 * model.h's model_mtp_*). As llama.cpp's deepseek4 MTP graph computes it
 * (there is no other executable reference: transformers 5.24 ignores the
 * checkpoint's mtp.* tensors), step i joins the main model's hidden streams
 * h_i [hc, n_embd] after its last layer (before the mHC head) and the
 * embedding e of token i + 1, at RoPE position i + 1:
 *   x_k = e_proj(RMSNorm(e) enorm) + h_proj(RMSNorm(h_i,k) hnorm)  per stream k
 *   x = Block(x)          (a sliding-window layer with scored MoE, mHC-wrapped)
 *   logits = RMSNorm(hc_head(x)) norm · Woutput  (its own mHC head and norm,
 *                                                 the main model's LM head)
 * and its output streams x are the h of the next chained step. Tensors:
 * DeepSeek's release names mtp.0.{e_proj,h_proj,enorm,hnorm,norm}.weight,
 * mtp.0.hc_head_{fn,base,scale} and the block's as a layer's (model.mtp.0.*
 * once renamed, weights_hf.c).
 *
 * An MTP sequence has its own window ring (a dsv4_cache of that one layer)
 * whose rows are its pairs in order: the ring's positions are the pairs'
 * places in the sequence (d->kpos), RoPE's the target positions (d->pos). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/deepseek_v4_internal.h"
#include "model/load.h"
#include "util/error.h"

/* Where the MTP layer's own tensors are: DeepSeek's release names (renamed
 * model.mtp.0.*, weights_hf.c), or llama.cpp's MTP GGUF (blk.L.nextn.* as
 * model.layers.L.*, its fused eh_proj; the file's output_hc_* the layer's mHC
 * head). */
typedef struct mtp_names {
    char e_proj[64], h_proj[64], eh_proj[64], enorm[64], hnorm[64], norm[64], head_fn[64],
        head_base[64], head_scale[64];
} mtp_names;

static void names_for(const dsv4 *d, mtp_names *n)
{
    if (!d->mtp_w) {
        snprintf(n->e_proj, sizeof n->e_proj, "model.mtp.0.e_proj.weight");
        snprintf(n->h_proj, sizeof n->h_proj, "model.mtp.0.h_proj.weight");
        n->eh_proj[0] = '\0';
        snprintf(n->enorm, sizeof n->enorm, "model.mtp.0.enorm.weight");
        snprintf(n->hnorm, sizeof n->hnorm, "model.mtp.0.hnorm.weight");
        snprintf(n->norm, sizeof n->norm, "model.mtp.0.norm.weight");
        snprintf(n->head_fn, sizeof n->head_fn, "model.mtp.0.hc_head_fn");
        snprintf(n->head_base, sizeof n->head_base, "model.mtp.0.hc_head_base");
        snprintf(n->head_scale, sizeof n->head_scale, "model.mtp.0.hc_head_scale");
        return;
    }
    const uint32_t L = d->cfg.n_layer;
    n->e_proj[0] = n->h_proj[0] = '\0';
    snprintf(n->eh_proj, sizeof n->eh_proj, "model.layers.%u.eh_proj.weight", L);
    snprintf(n->enorm, sizeof n->enorm, "model.layers.%u.enorm.weight", L);
    snprintf(n->hnorm, sizeof n->hnorm, "model.layers.%u.hnorm.weight", L);
    snprintf(n->norm, sizeof n->norm, "model.layers.%u.norm.weight", L);
    snprintf(n->head_fn, sizeof n->head_fn, "model.hc_head.hc_fn");
    snprintf(n->head_base, sizeof n->head_base, "model.hc_head.hc_base");
    snprintf(n->head_scale, sizeof n->head_scale, "model.hc_head.hc_scale");
}

/* The MTP layer's weights (from dsv4_layer_weights), buffers and pool. */
static di_status load_mtp(dsv4 *d, di_error **err)
{
    const model_config *c = &d->cfg;
    const model_weights *w = dsv4_layer_weights(d, c->n_layer);
    backend *be = d->be;
    const int64_t E = c->n_embd, B = d->opt.n_batch;
    mtp_names n;
    names_for(d, &n);
    di_status st;
    if ((st = dsv4_load_layer(d, c->n_layer, err)) != DI_OK) return st;
    if (n.eh_proj[0]) {
        if ((st = model_matrix(w, be, n.eh_proj, 2 * E, E, &d->mtp_eh, err)) != DI_OK) return st;
        if (!(d->mtp_cat = be->ops->alloc(be, B * 2 * E)))
            return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the MTP buffers");
    } else if ((st = model_matrix(w, be, n.e_proj, E, E, &d->mtp_e_proj, err)) != DI_OK ||
               (st = model_matrix(w, be, n.h_proj, E, E, &d->mtp_h_proj, err)) != DI_OK) {
        return st;
    }
    if ((st = model_vector(w, be, n.enorm, E, &d->mtp_enorm, err)) != DI_OK ||
        (st = model_vector(w, be, n.hnorm, E, &d->mtp_hnorm, err)) != DI_OK ||
        (st = model_vector(w, be, n.norm, E, &d->mtp_norm, err)) != DI_OK ||
        (st = model_matrix(w, be, n.head_fn, d->hc * E, d->hc, &d->mtp_head_fn, err)) != DI_OK ||
        (st = model_vector(w, be, n.head_base, d->hc, &d->mtp_head_base, err)) != DI_OK ||
        (st = model_vector(w, be, n.head_scale, 1, &d->mtp_head_scale, err)) != DI_OK)
        return st;
    if (!(d->last_hidden = be->ops->alloc(be, B * d->hc * E)))
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the MTP buffers");
    /* The MTP sequences' pairs are counted as the main sequences' tokens are:
     * as many blocks as the main pool plus one context (the drafter's
     * sequences hold at most their request's tokens and a few drafts). */
    const int64_t ctx_blocks = (d->opt.n_ctx + MODEL_KV_BLOCK - 1) / MODEL_KV_BLOCK;
    if ((st = kv_pool_init(&d->mtp_pool, d->pool.n_blocks + (int32_t)ctx_blocks, 0)) != DI_OK)
        return di_error_setf(err, st, "out of memory for the MTP sequences' blocks");
    d->has_mtp = 1;
    if ((st = dsv4_mtp_seq_init(d, &d->mtp_seq)) != DI_OK)
        return di_error_setf(err, st, "out of memory for the MTP layer's cache");
    return DI_OK;
}

di_status dsv4_mtp_load(dsv4 *d, di_error **err)
{
    /* A checkpoint without its MTP tensors runs without MTP; one with some of
     * them has the rest named when they are missing. */
    static const char *const any[] = {"model.mtp.0.e_proj.weight", "model.mtp.0.h_proj.weight",
                                      "model.mtp.0.enorm.weight", "model.mtp.0.hnorm.weight",
                                      "model.mtp.0.input_layernorm.weight"};
    int present = 0;
    for (size_t i = 0; i < sizeof any / sizeof any[0]; i++)
        present |= model_weights_get(d->w, any[i]) != NULL;
    return d->cfg.n_nextn_layer && present ? load_mtp(d, err) : DI_OK;
}

int dsv4_weights_mtp_only(const model_weights *w)
{
    const model_config *c = model_weights_config(w);
    char name[64];
    snprintf(name, sizeof name, "model.layers.%u.eh_proj.weight", c->n_layer);
    return c->arch == MODEL_ARCH_DEEPSEEK_V4 && c->n_nextn_layer > 0 &&
           model_weights_get(w, name) != NULL &&
           model_weights_get(w, "model.layers.0.input_layernorm.weight") == NULL;
}

/* Each field of an MTP GGUF's config that must be the model's: the first
 * that differs, named, or NULL. */
static const char *config_mismatch(const model_config *a, const model_config *b)
{
#define SAME(f, name)                                                                              \
    if (a->f != b->f) return name
    const char *why = dsv4_draft_config_mismatch(a, b);
    if (why) return why;
    SAME(n_layer, "the main layer count (block_count - nextn_predict_layers)");
    SAME(v4.compress_rope_theta, "attention.compress_rope_freq_base");
    SAME(v4.compress_rate_csa, "attention.compress_ratios");
    SAME(v4.compress_rate_hca, "attention.compress_ratios");
    SAME(v4.index_n_heads, "attention.indexer.head_count");
    SAME(v4.index_head_dim, "attention.indexer.key_length");
    SAME(v4.index_topk, "attention.indexer.top_k");
#undef SAME
    for (uint32_t i = 0; i < a->n_layer; i++)
        if (a->v4.attention[i] != b->v4.attention[i])
            return "attention.compress_ratios";
        else if (a->v4.hash_moe[i] != b->v4.hash_moe[i])
            return "hash_layer_count";
    return NULL;
}

di_status dsv4_mtp_attach(dsv4 *d, model_weights *w, const char *path, di_error **err)
{
    const model_config *c = model_weights_config(w);
    if (d->has_mtp || d->cfg.v4.n_dspark)
        return di_error_setf(
            err, DI_ERR_UNSUPPORTED, "%s: the model has %s already (its checkpoint's)", path,
            d->has_mtp ? "an MTP layer" : "a DSpark head, whose stages take the MTP layer's place");
    const char *why = config_mismatch(&d->cfg, c);
    if (why)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: its %s is not the model's: an MTP GGUF drafts only for the "
                             "model it was converted with",
                             path, why);
    d->mtp_w = w;
    di_status st = load_mtp(d, err);
    if (st != DI_OK) d->mtp_w = NULL; /* (the caller frees w) */
    return st;
}

void dsv4_mtp_free(dsv4 *d)
{
    if (d->has_mtp) {
        dsv4_mtp_seq_release(d, &d->mtp_seq);
        kv_pool_free(&d->mtp_pool);
        d->has_mtp = 0;
    }
    model_weights_close(d->mtp_w);
    d->mtp_w = NULL;
}

int dsv4_mtp_layers(const dsv4 *d)
{
    return d->has_mtp;
}

int64_t dsv4_mtp_hidden_width(const dsv4 *d)
{
    return (int64_t)d->hc * d->cfg.n_embd;
}

const float *dsv4_last_hidden(const dsv4 *d, int64_t *n_rows)
{
    *n_rows = d->has_mtp ? d->n_last : 0;
    return d->has_mtp ? d->last_hidden : NULL;
}

kv_pool *dsv4_mtp_pool(dsv4 *d)
{
    return d->has_mtp ? &d->mtp_pool : NULL;
}

di_status dsv4_mtp_seq_init(dsv4 *d, model_seq *s)
{
    return dsv4_cache_seq_init(d, &d->mtp_pool, &d->mtp_free, d->cfg.n_layer, 1, s);
}

void dsv4_mtp_seq_release(dsv4 *d, model_seq *s)
{
    dsv4_cache_seq_release(&d->mtp_pool, &d->mtp_free, s);
}

void dsv4_mtp_seq_truncate(dsv4 *d, model_seq *s, int64_t n_tokens)
{
    dsv4_cache_truncate(d, &d->mtp_pool, s, n_tokens);
}

/* logits [n, n_vocab] of n rows of MTP output streams x [n, hc, n_embd]:
 * the MTP layer's own mHC head and norm, then the LM head. */
static void mtp_head(dsv4 *d, const float *x, int64_t n, float *logits)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t E = c->n_embd, hcE = d->hc * E;
    op->rmsnorm(be, x, hcE, NULL, d->xn, hcE, n, hcE, c->rms_norm_eps);
    op->matmul(be, 1, &d->mtp_head_fn, NULL, d->xn, n, &d->mix);
    op->hc_pre(be, d->mix, d->mtp_head_base, d->mtp_head_scale, d->hc, 0, c->v4.hc_eps, x, E, n,
               d->col, NULL, NULL);
    op->rmsnorm(be, d->col, E, d->mtp_norm, d->col, E, n, E, c->rms_norm_eps);
    op->matmul(be, 1, &d->output, NULL, d->col, n, &logits);
}

void dsv4_mtp_forward_batch(dsv4 *d, const model_mtp_item *items, int n_items, int64_t n,
                            const float *hidden, float *logits, float *hidden_out)
{
    const model_config *c = &d->cfg;
    backend *be = d->be;
    const backend_ops *op = be->ops;
    const int64_t E = c->n_embd, hcE = d->hc * E;
    const float eps = c->rms_norm_eps;
    int64_t row = 0;
    for (int i = 0; i < n_items; i++) {
        const model_mtp_item *it = &items[i];
        const int64_t k0 = it->seq->kv.n_tokens;
        op->embed(be, d->tok_embd, it->tokens, it->n_tokens, d->h + row * E, E);
        memcpy(d->tokens + row, it->tokens, (size_t)it->n_tokens * sizeof *d->tokens);
        for (int64_t t = 0; t < it->n_tokens; t++) {
            d->pos[row + t] = it->pos0 + t;
            d->neg_pos[row + t] = -(it->pos0 + t);
            d->kpos[row + t] = k0 + t;
        }
        d->spans[i] = (v4_span){it->seq->v4, k0, it->n_tokens};
        row += it->n_tokens;
    }
    /* x_k = e_proj(enorm(e)) + h_proj(hnorm(h_k)), a stream at a time (an MTP
     * GGUF's fused eh_proj on [enorm(e); hnorm(h_k)]) */
    if (d->mtp_eh) {
        op->rmsnorm(be, d->h, E, d->mtp_enorm, d->mtp_cat, 2 * E, n, E, eps);
        for (int k = 0; k < d->hc; k++) {
            op->rmsnorm(be, hidden + k * E, hcE, d->mtp_hnorm, d->mtp_cat + E, 2 * E, n, E, eps);
            op->matmul(be, 1, &d->mtp_eh, NULL, d->mtp_cat, n, &d->h);
            op->copy_rows(be, d->x + k * E, hcE, d->h, E, E, n);
        }
    } else {
        op->rmsnorm(be, d->h, E, d->mtp_enorm, d->col, E, n, E, eps);
        op->matmul(be, 1, &d->mtp_e_proj, NULL, d->col, n, &d->out);
        for (int k = 0; k < d->hc; k++) {
            op->rmsnorm(be, hidden + k * E, hcE, d->mtp_hnorm, d->col, E, n, E, eps);
            op->matmul(be, 1, &d->mtp_h_proj, NULL, d->col, n, &d->h);
            op->add(be, d->h, d->out, n * E);
            op->copy_rows(be, d->x + k * E, hcE, d->h, E, E, n);
        }
    }
    const v4_layer *L = &d->layers[c->n_layer];
    dsv4_hc_block(d, c->n_layer, L->attn_fn, L->attn_base, L->attn_scale, L->attn_norm, NULL, n,
                  n_items);
    dsv4_hc_block(d, c->n_layer, L->ffn_fn, L->ffn_base, L->ffn_scale, L->ffn_norm, d->tokens, n,
                  n_items);
    row = 0;
    int64_t n_out = 0;
    for (int i = 0; i < n_items; i++) {
        dsv4_seq_advance(items[i].seq, items[i].n_tokens);
        row += items[i].n_tokens;
        if (!items[i].want) continue;
        /* the wanted rows gathered (row-wise operations: nothing else changes) */
        op->copy_rows(be, d->x2 + n_out * hcE, hcE, d->x + (row - 1) * hcE, hcE, hcE, 1);
        n_out++;
    }
    if (hidden_out && n_out) memcpy(hidden_out, d->x2, (size_t)(n_out * hcE) * sizeof *hidden_out);
    if (logits && n_out) mtp_head(d, d->x2, n_out, logits);
}

void dsv4_mtp_logits(dsv4 *d, const float *hidden, int64_t n, float *logits)
{
    const int64_t hcE = dsv4_mtp_hidden_width(d), B = d->opt.n_batch;
    for (int64_t done = 0; done < n; done += B) {
        const int64_t m = n - done < B ? n - done : B;
        memcpy(d->x2, hidden + done * hcE, (size_t)(m * hcE) * sizeof *d->x2);
        mtp_head(d, d->x2, m, logits + done * (int64_t)d->cfg.n_vocab);
    }
}

di_status dsv4_mtp_forward(dsv4 *d, const int32_t *tokens, int64_t n_tokens, const float *hidden,
                           float *logits, di_error **err)
{
    if (!d->has_mtp) return di_error_setf(err, DI_ERR_UNSUPPORTED, "the model has no MTP layer");
    model_seq *s = &d->mtp_seq;
    /* The MTP sequence's pair k is token k + 1, at position k + 1. */
    const int64_t k0 = s->kv.n_tokens, hcE = dsv4_mtp_hidden_width(d);
    if (n_tokens > d->opt.n_ctx - 1 - k0)
        return di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                             "%lld MTP tokens after %lld exceed the context of %lld",
                             (long long)n_tokens, (long long)k0, (long long)d->opt.n_ctx);
    if (kv_pool_seq_reserve(&d->mtp_pool, &s->kv, k0 + n_tokens) != DI_OK)
        return di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                             "the MTP cache has no room for %lld tokens", (long long)n_tokens);
    for (int64_t done = 0; done < n_tokens; done += d->opt.n_batch) {
        const int64_t n = n_tokens - done < d->opt.n_batch ? n_tokens - done : d->opt.n_batch;
        model_mtp_item it = {s, tokens + done, n, k0 + done + 1, 0};
        dsv4_mtp_forward_batch(d, &it, 1, n, hidden + done * hcE, NULL, NULL);
        if (logits) /* every row's */
            mtp_head(d, d->x, n, logits + done * (int64_t)d->cfg.n_vocab);
    }
    return DI_OK;
}
