/* DeepSeek-V4.1's Engram in the model (docs/deepseek-v41.md): before an Engram
 * layer's attention block, each token's n-grams of compressed IDs pick one row
 * of each hashed table (model/engram.h), the rows' projection gives a key per
 * mHC stream and one value, and the backend's engram_gate adds the value to
 * each stream gated by the key's agreement with it (DeepInfer 0.1.0's
 * engram.py and decoder_layer.py: the gate sits on the trunk after the
 * previous block's post, before this block's pre). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/deepseek_v4_internal.h"
#include "model/load.h"
#include "util/error.h"

di_status dsv4_engram_init(dsv4 *d, di_error **err)
{
    const model_config_v4 *v = &d->cfg.v4;
    for (uint32_t i = 0; i <= d->cfg.n_layer; i++) d->layers[i].engram_slot = -1;
    if (!v->n_engram) return DI_OK;
    int32_t layers[MODEL_V4_MAX_LAYERS];
    int64_t table_vocab[ENGRAM_MAX_NGRAM];
    for (uint32_t k = 0; k < v->n_engram; k++) layers[k] = v->engram_layer[k];
    for (uint32_t n = 0; n + 1 < v->engram_max_ngram; n++) table_vocab[n] = v->engram_table_vocab;
    /* seed 0, as DeepInfer's model builds its NgramHashMapping; the multipliers'
     * bound from the compressed vocabulary the config declares (the tokenizer's
     * is checked against it in dsv4_engram_set_vocab) */
    di_status st =
        engram_layout_init(&d->engram, (int)v->n_engram, layers, (int)v->engram_max_ngram,
                           table_vocab, (int)v->engram_heads, v->engram_compressed_vocab, 0, err);
    if (st != DI_OK) return st;
    const int64_t B = d->opt.n_batch, T = d->engram.n_tables, E = d->cfg.n_embd;
    d->engram_ring = B + ENGRAM_MAX_NGRAM;
    d->engram_rows = malloc((size_t)(v->n_engram * B * T) * sizeof *d->engram_rows);
    d->engram_emb = d->be->ops->alloc(d->be, B * T * v->engram_head_dim);
    d->engram_kv = d->be->ops->alloc(d->be, B * (d->hc + 1) * E);
    if (!d->engram_rows || !d->engram_emb || !d->engram_kv)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for Engram's buffers");
    return DI_OK;
}

di_status dsv4_engram_load_layer(dsv4 *d, uint32_t i, v4_layer *L, di_error **err)
{
    const model_config *c = &d->cfg;
    const model_config_v4 *v = &c->v4;
    L->engram_slot = -1;
    if (i >= c->n_layer) return DI_OK;
    int slot = -1;
    for (uint32_t k = 0; k < v->n_engram; k++)
        if (v->engram_layer[k] == i) slot = (int)k;
    if (slot < 0) return DI_OK;
    const model_weights *w = dsv4_layer_weights(d, i);
    backend *be = d->be;
    const int64_t E = c->n_embd, hc = d->hc, T = d->engram.n_tables, hd = v->engram_head_dim;
    char name[160], pre[40];
    dsv4_layer_prefix(d, i, pre, sizeof pre);
    di_status st;
    /* the norm weights [hc, n_embd], as flat vectors */
    static const char *const norms[2] = {"engram.q_weight", "engram.k_weight"};
    const float **dst[2] = {&L->engram_q, &L->engram_k};
    const int64_t ne[2] = {E, hc};
    for (int k = 0; k < 2; k++) {
        const model_tensor *t = dsv4_layer_tensor(d, i, norms[k], 2, ne, err, &st);
        model_tensor flat;
        if (st != DI_OK || (st = dsv4_flat_vector(d, &flat, t, dst[k], err)) != DI_OK) return st;
    }
    /* the stacked tables: at least the layout's rows (checkpoints pad them to a
     * multiple of 256) */
    snprintf(name, sizeof name, "%sengram.embed.weight", pre);
    const model_tensor *t = model_weights_get(w, name);
    const int64_t rows = d->engram.total_rows[slot];
    if (!t) return di_error_setf(err, DI_ERR_MODEL_FORMAT, "tensor '%s' is missing", name);
    if (t->n_dims != 2 || t->ne[0] != hd || t->ne[1] < rows)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "tensor '%s' is not [at least %lld, %lld] (the tables of "
                             "engram_n_heads %u x %u n-gram sizes, engram_head_dim %u)",
                             name, (long long)rows, (long long)hd, v->engram_heads,
                             v->engram_max_ngram - 1, v->engram_head_dim);
    if (t->dtype == MODEL_DTYPE_FP8_E4M3)
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "tensor '%s': Engram tables in fp8 are not run yet "
                             "(docs/deepseek-v41.md)",
                             name);
    if ((st = be->ops->embedding(be, t, &L->engram_embed, err)) != DI_OK) return st;
    snprintf(name, sizeof name, "%sengram.wkv.weight", pre);
    if ((st = model_matrix(w, be, name, T * hd, (hc + 1) * E, &L->engram_wkv, err)) != DI_OK)
        return st;
    L->engram_slot = slot;
    return DI_OK;
}

di_status dsv4_engram_set_vocab(dsv4 *d, const int32_t *old2new, int32_t n_tokens, int32_t n_keys,
                                di_error **err)
{
    const model_config_v4 *v = &d->cfg.v4;
    if (!v->n_engram) return DI_OK;
    if (n_keys != (int32_t)v->engram_compressed_vocab)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "engram_compressed_vocab_size is %u, but the tokenizer's compressed "
                             "vocabulary has %d tokens: is this the model's tokenizer?",
                             v->engram_compressed_vocab, n_keys);
    if ((uint32_t)n_tokens <= v->engram_pad)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "the tokenizer has %d tokens, without engram_pad_token_id %u",
                             n_tokens, v->engram_pad);
    int32_t *lookup = malloc((size_t)n_tokens * sizeof *lookup);
    if (!lookup)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for Engram's vocabulary");
    memcpy(lookup, old2new, (size_t)n_tokens * sizeof *lookup);
    free(d->engram_lookup);
    d->engram_lookup = lookup;
    d->engram_n_lookup = n_tokens;
    d->engram_pad_id = lookup[v->engram_pad];
    return DI_OK;
}

int dsv4_engram_needs_vocab(const dsv4 *d)
{
    return d->cfg.v4.n_engram > 0 && !d->engram_lookup;
}

/* A token's compressed ID; a model ID past the tokenizer's vocabulary (a
 * padded embedding) counts as the pad. */
static int32_t compressed(const dsv4 *d, int32_t token)
{
    return token >= 0 && token < d->engram_n_lookup ? d->engram_lookup[token] : d->engram_pad_id;
}

void dsv4_engram_rows(dsv4 *d, const model_batch_item *items, int n_items)
{
    const int64_t ring = d->engram_ring, B = d->opt.n_batch, T = d->engram.n_tables;
    const int max_ngram = d->engram.max_ngram;
    int64_t row = 0;
    for (int i = 0; i < n_items; i++) {
        int32_t *ids = items[i].seq->v4->engram_ids;
        const int64_t pos0 = items[i].seq->kv.n_tokens;
        for (int64_t t = 0; t < items[i].n_tokens; t++)
            ids[(pos0 + t) % ring] = compressed(d, items[i].tokens[t]);
        for (int64_t t = 0; t < items[i].n_tokens; t++, row++) {
            int32_t ngram[ENGRAM_MAX_NGRAM];
            for (int r = 0; r < max_ngram; r++)
                ngram[r] = pos0 + t - r >= 0 ? ids[(pos0 + t - r) % ring] : d->engram_pad_id;
            for (int s = 0; s < d->engram.n_layers; s++)
                engram_hash(&d->engram, s, ngram, d->engram_rows + (s * B + row) * T);
        }
    }
}

void dsv4_engram_apply(dsv4 *d, const v4_layer *L, int64_t n)
{
    const backend_ops *op = d->be->ops;
    const model_config *c = &d->cfg;
    const int64_t T = d->engram.n_tables, hd = c->v4.engram_head_dim, E = c->n_embd;
    const int32_t *rows = d->engram_rows + (int64_t)L->engram_slot * d->opt.n_batch * T;
    op->embed(d->be, L->engram_embed, rows, n * T, d->engram_emb, hd);
    op->matmul(d->be, 1, &L->engram_wkv, NULL, d->engram_emb, n, &d->engram_kv);
    op->engram_gate(d->be, d->x, d->engram_kv, L->engram_q, L->engram_k, d->hc, E, n,
                    c->rms_norm_eps);
}

void dsv4_engram_free(dsv4 *d)
{
    engram_layout_free(&d->engram);
    free(d->engram_lookup);
    free(d->engram_rows);
    d->engram_lookup = NULL;
    d->engram_rows = NULL;
}
