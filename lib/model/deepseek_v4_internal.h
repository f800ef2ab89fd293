/* DeepSeek-V4's model state, shared by deepseek_v4.c (the main layers) and
 * deepseek_v4_mtp.c (the MTP layer). Internal to lib/model/. */
#ifndef DI_MODEL_DEEPSEEK_V4_INTERNAL_H
#define DI_MODEL_DEEPSEEK_V4_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/deepseek_v4.h"
#include "model/engram.h"
#include "model/kv_pool.h"
#include "model/model_internal.h"

typedef struct v4_compressor {
    const backend_matrix *kv, *gate; /* [cw, n_embd], cw = width (HCA) or 2 width (CSA) */
    const float *bias;               /* position_bias [rate, cw] */
    const float *norm;               /* [width] */
    int64_t width, cw;
    int rate, overlap;
} v4_compressor;

/* One compressor's cache in a sequence: its rows' rings f32 [comp_ring, cw]
 * and the entries [cap] rows of width in the cache's dtype (backend.h's
 * v4_rows_store), grown with the sequence (dsv4_seq_reserve) up to n_ctx /
 * rate + 1; the sequence's first n_past / rate entries are valid (so
 * truncating the sequence drops the rest). */
typedef struct v4_comp_cache {
    float *kv_ring, *gate_ring;
    void *entries;
    int64_t cap; /* rows of entries */
} v4_comp_cache;

/* A sequence's cache, per layer: the window ring of win_ring rows of
 * head_dim in the cache's dtype (position p at row p % win_ring) and the
 * compressors'. Kept for reuse when the sequence ends (dsv4_seq_release). */
typedef struct v4_layer_cache {
    void *win;
    v4_comp_cache comp, index;
} v4_layer_cache;

struct dsv4_cache {
    v4_layer_cache *layers; /* layers first .. first + n_layers - 1 */
    uint32_t first;
    /* Positions [0, n_written) were computed into the rings since the sequence
     * last began at position 0 (a cut sequence keeps the most it reached): a
     * row is still in its ring when at most n_batch positions past it were
     * written (dsv4_seq_truncate). */
    int64_t n_written;
    /* DeepSeek-V4.1's Engram: the compressed IDs of the sequence's tokens,
     * position p at engram_ids[p % dsv4.engram_ring] (NULL without Engram or in
     * an MTP layer's cache) */
    int32_t *engram_ids;
    struct dsv4_cache *next_free;
};

typedef struct v4_layer {
    model_v4_attention kind;
    int hash;
    const float *attn_norm, *ffn_norm, *q_a_norm, *kv_norm, *sinks;
    const backend_matrix *wq_a, *wq_b, *wkv, *wo_b;
    const backend_matrix **wo_a; /* [o_groups]: rows g o_lora_rank .. of o_a_proj */
    const backend_matrix *attn_fn, *ffn_fn;
    const float *attn_base, *attn_scale, *ffn_base, *ffn_scale;
    const backend_rope *rope; /* main (sliding) or compress */
    v4_compressor comp, index;
    const backend_matrix *iq_b, *iw; /* the indexer's query and weights projections */
    /* DeepSeek-V4.1: the compression ratio (0: a window only) and the layers
     * whose compressed entries, indexer keys and top-k this one reads (itself
     * when a source: comp set for a KV source, index's entries for a key
     * source, iq_b and iw for a top-k source); the keys' projection of the
     * pre-RoPE entries (KProject) and its norm */
    int rate, kv_src, index_src, index_k_src;
    const backend_matrix *ik_proj;
    const float *ik_norm;
    const backend_matrix *gate_inp, *sh_gate, *sh_up, *sh_down;
    const float *exp_probs_b;
    /* the routing: the model's (hash or scored), a V4.1 DSpark stage's own
     * expert counts */
    backend_route_params route;
    int32_t *tid2eid; /* host [n_vocab, k] (hash layers), owned */
    const backend_moe *experts;
    /* Engram before the attention block (DeepSeek-V4.1): its slot in the
     * model's engram layout (-1: none), the norm weights [hc, n_embd], the
     * stacked n-gram tables [rows, engram_head_dim] and the projection
     * [(hc + 1) n_embd, n_tables engram_head_dim] */
    int engram_slot;
    const float *engram_q, *engram_k;
    const backend_matrix *engram_embed, *engram_wkv;
} v4_layer;

/* The rows of one sequence in a step: its cache, first position and count. */
typedef struct v4_span {
    dsv4_cache *cache;
    int64_t pos0, n;
} v4_span;

struct dsv4 {
    const model_weights *w;
    model_config cfg;
    model_options opt;
    backend *be;
    v4_layer *layers;
    model_tensor **views; /* row views of fused weights, owned (one array per layer) */
    const backend_matrix *tok_embd, *output, *head_fn;
    const float *output_norm, *head_base, *head_scale;
    const backend_rope *rope_main, *rope_comp;
    backend_route_params route, route_hash;
    int64_t window; /* sliding_window, or the context when it is shorter */
    int64_t win_ring, comp_ring;
    int hc, n_mix;
    kv_pool pool;          /* block accounting of the sequences (no prefix cache) */
    model_seq seq;         /* the default sequence of dsv4_forward */
    dsv4_cache *free_list; /* caches of ended sequences, for the next ones */
    dsv4_cache **made;     /* [n_made] every cache, freed with the model */
    size_t n_made;
    /* activations [n_batch, ...] */
    float *x, *x2, *xn, *mix, *col, *h, *post, *comb, *qa, *q, *kv, *attn, *grp_in, *grp_out, *oa,
        *out, *ckv, *cg, *iq, *iw, *router, *gate, *up;
    float *pooled; /* [n_batch + 1, max(head_dim, index_head_dim)]: a span's new entries, f32 */
    /* DeepSeek-V4.1: the step's new pre-RoPE entries of the current KV source,
     * the spans' one after another from row pre_off[i] ([2 n_batch, head_dim]);
     * the first YOCO consumer's normed input [n_batch, n_embd]; the pre mix the
     * last mHC block computed for the next [n_batch, hc] */
    float *pre_kv, *shared_h, *pre_mix;
    int64_t *pre_off;
    int hc_first; /* the next mHC block is the step's first (it reads stream 0) */
    /* host [n_batch, ...] */
    int64_t *pos, *neg_pos, *entry_pos;
    int64_t *kpos;  /* the rows' places in their sequence (the window ring's; the
                       MTP layer's pairs have their own, apart from RoPE's pos) */
    int64_t *klast; /* the last window position each row sees (NULL: its kpos;
                       DSpark's block rows see the whole block) */
    v4_span *spans;
    int32_t *index_sel, *sel, *tokens;
    int32_t *cand_sel; /* V4.1's candidate blocks of a step's rows [n_batch, cand_blocks] */
    float *sel_w;
    /* The MTP layer (deepseek_v4_mtp.c): layers[n_layer] when has_mtp. */
    int has_mtp;
    model_weights *mtp_w; /* an MTP GGUF's weights (dsv4_mtp_attach), owned; or NULL */
    const backend_matrix *mtp_e_proj, *mtp_h_proj, *mtp_head_fn;
    const backend_matrix *mtp_eh; /* llama.cpp's fused [e_proj | h_proj] (an MTP GGUF's) */
    float *mtp_cat;               /* [n_batch, 2 n_embd]: eh's input, with mtp_eh */
    const float *mtp_enorm, *mtp_hnorm, *mtp_norm, *mtp_head_base, *mtp_head_scale;
    float *last_hidden; /* [n_batch, hc, n_embd]: the last step's streams after the layers */
    int64_t n_last;
    /* Engram (deepseek_v4_engram.c): the tables' layout (from the config), the
     * tokenizer's compressed vocabulary (engram_lookup [engram_n_lookup] raw ID
     * -> compressed; NULL until dsv4_engram_set_vocab), the pad's compressed ID,
     * the caches' ID rings' length, the step's rows host [n_engram][n_batch]
     * [n_tables], and the gathered rows and their projection (backend) */
    engram_layout engram;
    int32_t *engram_lookup;
    int32_t engram_n_lookup, engram_pad_id;
    int64_t engram_ring;
    int32_t *engram_rows;
    float *engram_emb, *engram_kv;
    kv_pool mtp_pool;
    model_seq mtp_seq;    /* the sequence of dsv4_mtp_forward */
    dsv4_cache *mtp_free; /* MTP caches of ended sequences */
    /* DSpark (deepseek_v4_dspark.c): its stages are layers[n_layer ..
     * n_layer + cfg.v4.n_dspark); the target's features of the last forward
     * step [n_feat, n_dspark_target n_embd] (captured after the target layers),
     * the features' projection and norm, the Markov head (w1 an embedding
     * [n_vocab, rank], w2 [n_vocab, rank]), the confidence head [1, n_embd +
     * rank], the last stage's mHC head and norm; the block rows' last window
     * position, the rows' pre-norm hidden states, the Markov rows, the
     * confidence head's input and output, the block's tokens (host) */
    int has_dspark;
    model_weights *dspark_w; /* a DSpark GGUF's weights (dsv4_dspark_attach), owned; or NULL */
    int64_t dspark_rank;
    float *dspark_feat;
    int64_t n_feat;
    const backend_matrix *dspark_proj, *dspark_w1, *dspark_w2, *dspark_conf, *dspark_head_fn;
    const float *dspark_main_norm, *dspark_norm, *dspark_head_base, *dspark_head_scale;
    int64_t *dspark_last;
    float *dspark_hid, *dspark_mk, *dspark_cat, *dspark_cf, *dspark_bias;
    kv_pool dspark_pool;
    dsv4_cache *dspark_free;
};

/* "model.layers.<i>." for a main layer, "model.mtp.<i - n_layer>." for the
 * MTP layer or a DSpark stage ("model.layers.<i>." from an MTP GGUF,
 * "model.layers.<i - n_layer>." from a DSpark GGUF), into buf. */
const char *dsv4_layer_prefix(const dsv4 *d, uint32_t i, char *buf, size_t size);
/* The weights layer i's tensors are in: the MTP layer's in an attached MTP
 * GGUF (dsv4_mtp_attach), DSpark's stages' in an attached DSpark GGUF
 * (dsv4_dspark_attach), else the model's. */
const model_weights *dsv4_layer_weights(const dsv4 *d, uint32_t i);
/* A tensor of layer i (its prefix, then suffix) of the given shape, *st set
 * (DI_ERR_MODEL_FORMAT naming it when missing or of another shape). */
const model_tensor *dsv4_layer_tensor(const dsv4 *d, uint32_t i, const char *suffix,
                                      uint32_t n_dims, const int64_t *ne, di_error **err,
                                      di_status *st);
/* A 1-D f32 copy in the backend of any tensor of n elements (its shape checked
 * by the caller), through the flattened view *view. */
di_status dsv4_flat_vector(dsv4 *d, model_tensor *view, const model_tensor *t, const float **out,
                           di_error **err);
/* Layer i's weights into d->layers[i] (and its views). */
di_status dsv4_load_layer(dsv4 *d, uint32_t i, di_error **err);
/* A cache holding layers [first, first + n) of one sequence (the main layers,
 * or the MTP layer's window alone): NULL when out of memory (what was
 * allocated stays with the model until it is freed). */
dsv4_cache *dsv4_cache_create(dsv4 *d, uint32_t first, uint32_t n);
/* One mHC-wrapped block of layer l over the n rows of d->x (the spans' rows
 * in order; d->pos, d->neg_pos, d->kpos, d->spans set): attention, or the MoE
 * when tokens. */
void dsv4_hc_block(dsv4 *d, uint32_t l, const backend_matrix *fn, const float *base,
                   const float *scale, const float *norm, const int32_t *tokens, int64_t n,
                   int n_spans);
/* A sequence s over a cache of layers [first, first + n) (from free_list, or
 * new) and its blocks' table in pool: DI_ERR_OUT_OF_MEMORY. Release gives both
 * back (the cache to free_list). */
di_status dsv4_cache_seq_init(dsv4 *d, kv_pool *pool, dsv4_cache **free_list, uint32_t first,
                              uint32_t n, model_seq *s);
void dsv4_cache_seq_release(kv_pool *pool, dsv4_cache **free_list, model_seq *s);
/* After a step wrote n rows of s: its token count and the most its cache's
 * rings have reached (dsv4_cache_truncate's bound). */
void dsv4_seq_advance(model_seq *s, int64_t n);
/* Keep a cache's sequence s at its first n_tokens in pool: a cut deeper than
 * n_batch below the most it reached drops it all (the rings' rows are gone). */
void dsv4_cache_truncate(dsv4 *d, kv_pool *pool, model_seq *s, int64_t n_tokens);

/* Engram (deepseek_v4_engram.c): the layout and buffers from the config
 * (dsv4_engram_init, after the layers; nothing without Engram), layer i's
 * weights (dsv4_engram_load_layer), the rows of a step's tokens
 * (dsv4_engram_rows: writes each item's compressed IDs into its cache's ring
 * first), and the gate on d->x before layer l's attention block
 * (dsv4_engram_apply). */
di_status dsv4_engram_init(dsv4 *d, di_error **err);
di_status dsv4_engram_load_layer(dsv4 *d, uint32_t i, v4_layer *L, di_error **err);
void dsv4_engram_rows(dsv4 *d, const model_batch_item *items, int n_items);
void dsv4_engram_apply(dsv4 *d, const v4_layer *L, int64_t n);
void dsv4_engram_free(dsv4 *d);

/* The first config field that a draft file's sliding-window layers (an MTP
 * GGUF's, a DSpark GGUF's stages) must share with the model a and b differ in
 * (its GGUF key, or what it is), or NULL. */
const char *dsv4_draft_config_mismatch(const model_config *a, const model_config *b);

/* Rows [0, n) of src (width wide, src_stride apart) into the ring at the
 * rows of positions pos0.. (row p % ring), as dtype (backend.h's
 * v4_rows_store). */
void dsv4_ring_store(backend *be, model_dtype dtype, void *ring, int64_t ring_rows, int64_t width,
                     const float *src, int64_t src_stride, int64_t pos0, int64_t n);

/* DSpark (deepseek_v4_dspark.c): its stages' weights and buffers when the
 * config has them (after the main layers), the target's features of main
 * layer l's output over the step's n rows (a no-op unless l is a target
 * layer), and their release. */
di_status dsv4_dspark_load(dsv4 *d, di_error **err);
void dsv4_dspark_capture(dsv4 *d, uint32_t l, int64_t n);
void dsv4_dspark_free(dsv4 *d);

/* The MTP layer (deepseek_v4_mtp.c): its weights and buffers when the
 * checkpoint has them (has_mtp stays 0 otherwise), and their release. */
di_status dsv4_mtp_load(dsv4 *d, di_error **err);
void dsv4_mtp_free(dsv4 *d);

#endif
