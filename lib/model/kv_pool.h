/* The KV cache's block manager: which of a paged cache's blocks each sequence
 * holds, and which blocks keep a computed prompt prefix for later requests
 * (the prefix cache). Host bookkeeping, the same for every device: the backend
 * only holds the blocks' memory (backend.h, kv_create) and reads block tables.
 *
 * Blocks are MODEL_KV_BLOCK tokens. A block is
 *   - free: held by nobody, content meaningless;
 *   - held: by ref >= 1 sequences (a block table entry each);
 *   - cached: held by nobody but keyed, kept in least-recently-released order
 *     and evicted (the oldest first) only when no free block is left.
 * A full block whose keys and values are computed gets a content key
 * (kv_pool_seq_publish): XXH3-64 of its MODEL_KV_BLOCK token IDs seeded with
 * the key of the block before it, the first block seeded with the pool's
 * fingerprint (the model and cache dtype), so a key names the whole prefix up
 * to the block's end — vLLM's prefix-caching hash chain. A later sequence
 * whose tokens give the same keys takes those blocks (kv_pool_seq_match) and
 * computes only the rest. A shared block is never written: a sequence appends
 * after its matched blocks, which are full.
 *
 * Exactness rests on the forward pass: a token's keys and values depend only
 * on the tokens before it, whatever else was in its batch and however its
 * prompt was chunked (model.h's batch invariance), so a matched block holds
 * the bytes a cold run would write.
 *
 * Not thread-safe: one owner (the model's thread). */
#ifndef DI_MODEL_KV_POOL_H
#define DI_MODEL_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "deepinfer/deepinfer.h"

typedef struct kv_pool {
    int32_t n_blocks;
    uint64_t fingerprint; /* seed of the first block's key */
    int32_t *ref;         /* [n_blocks] sequences holding the block */
    uint64_t *key;        /* [n_blocks] content key, 0: none */
    uint8_t *indexed;     /* [n_blocks] 1: the key is in the index (the block can be matched) */
    int32_t *free_stack;  /* free blocks */
    int32_t n_free;
    int32_t *lru_prev, *lru_next; /* [n_blocks] the cached list, -1 ends */
    int32_t lru_head, lru_tail;   /* head: released longest ago (evicted first) */
    int32_t n_cached;
    uint64_t *idx_key; /* [idx_cap] open addressing, 0: empty slot */
    int32_t *idx_block;
    size_t idx_cap; /* a power of two >= 2 n_blocks: never grows */
    int64_t n_evicted;
    /* Called with a cached block about to be reused (its key and contents are
     * still valid): the prefix cache's host tier copies it out. May be NULL. */
    void (*on_evict)(void *user, int32_t block, uint64_t key);
    /* Called with a block kv_pool_seq_publish has just keyed (the disk tier
     * writes it). May be NULL. */
    void (*on_publish)(void *user, int32_t block, uint64_t key);
    void *evict_user; /* both callbacks' */
} kv_pool;

/* n_blocks >= 1 blocks, all free. Errors: DI_ERR_INVALID_ARGUMENT,
 * DI_ERR_OUT_OF_MEMORY (the pool is then safe to free). */
di_status kv_pool_init(kv_pool *p, int32_t n_blocks, uint64_t fingerprint);
void kv_pool_free(kv_pool *p);

/* Blocks a reservation can take now: the free ones and the cached ones. */
int32_t kv_pool_available(const kv_pool *p);
/* Blocks held by nobody but keeping a prefix (the cached ones). */
int32_t kv_pool_cached(const kv_pool *p);

/* An empty sequence that may grow to max_tokens. DI_ERR_INVALID_ARGUMENT
 * (max_tokens < 1), DI_ERR_OUT_OF_MEMORY. */
di_status kv_pool_seq_init(kv_pool *p, backend_kv_seq *s, int64_t max_tokens);
/* Release the sequence's blocks, the last first (so a prefix's deepest blocks
 * are evicted before its first ones), and empty it. */
void kv_pool_seq_reset(kv_pool *p, backend_kv_seq *s);
void kv_pool_seq_free(kv_pool *p, backend_kv_seq *s);
/* Hold blocks for n_tokens tokens in total, taking free blocks first, then
 * evicting cached ones. DI_ERR_CONTEXT_LENGTH (more than the sequence's
 * max_tokens), DI_ERR_OUT_OF_MEMORY (not enough blocks); the sequence then
 * keeps what it held. */
di_status kv_pool_seq_reserve(kv_pool *p, backend_kv_seq *s, int64_t n_tokens);
/* Keep the first n_tokens of s (n_tokens <= s->n_tokens, and not inside its
 * keyed blocks): the blocks past them go back to the pool, the rest of the
 * last one is written again by the tokens that follow. Speculative
 * decoding's rollback of rejected draft tokens: a block-table truncation,
 * never a copy. */
void kv_pool_seq_truncate(kv_pool *p, backend_kv_seq *s, int64_t n_tokens);

/* Fork: the empty sequence dst takes the leading full blocks of src that lie
 * within its first n_tokens tokens (each block's ref + 1, nothing copied) and
 * counts their tokens as stored; returns those tokens (a multiple of
 * MODEL_KV_BLOCK). The blocks count as dst's keyed ones (never rewritten or
 * truncated into), as a prefix match's are. src's partial last block is not
 * shared: dst computes the tokens after the shared blocks itself (Chat `n`:
 * one prefill, then each choice recomputes at most one block of its prompt). */
int64_t kv_pool_seq_fork(kv_pool *p, backend_kv_seq *dst, const backend_kv_seq *src,
                         int64_t n_tokens);
/* The leading full blocks of tokens[0, n_tokens) the pool holds computed:
 * returns their tokens (a multiple of MODEL_KV_BLOCK); *n_cached_blocks (may
 * be NULL) gets how many of them are cached rather than held (taking those
 * spends available blocks). Changes nothing. */
int64_t kv_pool_probe(const kv_pool *p, const int32_t *tokens, int64_t n_tokens,
                      int32_t *n_cached_blocks);
/* For an empty sequence: take the blocks kv_pool_probe finds for tokens[0,
 * n_tokens) (each block's ref + 1) and count their tokens as stored. Returns
 * the tokens matched. */
int64_t kv_pool_seq_match(kv_pool *p, backend_kv_seq *s, const int32_t *tokens, int64_t n_tokens);
/* Key every full block of the sequence not keyed yet, tokens[] the
 * sequence's tokens (at least s->n_tokens of them), so later sequences can
 * match them. A block whose key another block already has stays private (the
 * first one is matched). Call only after the blocks' keys and values are
 * stored. */
void kv_pool_seq_publish(kv_pool *p, backend_kv_seq *s, const int32_t *tokens);

/* The keys of the first n_blocks full blocks of tokens (keys[n_blocks]). */
void kv_pool_keys(const kv_pool *p, const int32_t *tokens, int64_t n_blocks, uint64_t *keys);
/* 1 when a block with this key is kept (held or cached). */
int kv_pool_has(const kv_pool *p, uint64_t key);
/* A block for contents restored from elsewhere, kept under key as a cached
 * block released just now (the caller writes its contents before the next
 * forward step). Returns the block, or -1 when every block is held or the
 * key is already kept. */
int32_t kv_pool_adopt(kv_pool *p, uint64_t key);

#endif
