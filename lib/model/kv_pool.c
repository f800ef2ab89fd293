/* The KV cache's block manager and prefix index (kv_pool.h). */
#include "model/kv_pool.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "model/model.h"

enum { BLOCK = MODEL_KV_BLOCK };

di_status kv_pool_init(kv_pool *p, int32_t n_blocks, uint64_t fingerprint)
{
    memset(p, 0, sizeof *p);
    if (n_blocks < 1) return DI_ERR_INVALID_ARGUMENT;
    size_t n = (size_t)n_blocks, cap = 2;
    while (cap < 2 * n) cap *= 2;
    p->n_blocks = n_blocks;
    p->fingerprint = fingerprint;
    p->ref = calloc(n, sizeof *p->ref);
    p->key = calloc(n, sizeof *p->key);
    p->indexed = calloc(n, sizeof *p->indexed);
    p->free_stack = malloc(n * sizeof *p->free_stack);
    p->lru_prev = malloc(n * sizeof *p->lru_prev);
    p->lru_next = malloc(n * sizeof *p->lru_next);
    p->idx_key = calloc(cap, sizeof *p->idx_key);
    p->idx_block = malloc(cap * sizeof *p->idx_block);
    p->idx_cap = cap;
    if (!p->ref || !p->key || !p->indexed || !p->free_stack || !p->lru_prev || !p->lru_next ||
        !p->idx_key || !p->idx_block) {
        kv_pool_free(p);
        return DI_ERR_OUT_OF_MEMORY;
    }
    /* Popped from the end: block 0 first. */
    for (int32_t i = 0; i < n_blocks; i++) p->free_stack[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    return DI_OK;
}

void kv_pool_free(kv_pool *p)
{
    free(p->ref);
    free(p->key);
    free(p->indexed);
    free(p->free_stack);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->idx_key);
    free(p->idx_block);
    memset(p, 0, sizeof *p);
}

int32_t kv_pool_available(const kv_pool *p)
{
    return p->n_free + p->n_cached;
}

int32_t kv_pool_cached(const kv_pool *p)
{
    return p->n_cached;
}

/* --- the index: key -> block, linear probing, backward-shift deletion --- */

static size_t idx_slot(const kv_pool *p, uint64_t key)
{
    size_t i = (size_t)(key ^ (key >> 29)) & (p->idx_cap - 1);
    while (p->idx_key[i] && p->idx_key[i] != key) i = (i + 1) & (p->idx_cap - 1);
    return i;
}

static int32_t idx_get(const kv_pool *p, uint64_t key)
{
    size_t i = idx_slot(p, key);
    return p->idx_key[i] ? p->idx_block[i] : -1;
}

static void idx_put(kv_pool *p, uint64_t key, int32_t block)
{
    size_t i = idx_slot(p, key);
    p->idx_key[i] = key;
    p->idx_block[i] = block;
}

static void idx_del(kv_pool *p, uint64_t key)
{
    size_t mask = p->idx_cap - 1, i = idx_slot(p, key);
    if (!p->idx_key[i]) return;
    /* Move later entries of the probe run back over the hole when their home
     * slot does not lie (cyclically) after the hole. */
    for (size_t j = (i + 1) & mask; p->idx_key[j]; j = (j + 1) & mask) {
        size_t home = (size_t)(p->idx_key[j] ^ (p->idx_key[j] >> 29)) & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            p->idx_key[i] = p->idx_key[j];
            p->idx_block[i] = p->idx_block[j];
            i = j;
        }
    }
    p->idx_key[i] = 0;
}

/* --- the cached list --- */

static void lru_unlink(kv_pool *p, int32_t b)
{
    int32_t prev = p->lru_prev[b], next = p->lru_next[b];
    if (prev >= 0)
        p->lru_next[prev] = next;
    else
        p->lru_head = next;
    if (next >= 0)
        p->lru_prev[next] = prev;
    else
        p->lru_tail = prev;
    p->n_cached--;
}

static void lru_append(kv_pool *p, int32_t b)
{
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0)
        p->lru_next[p->lru_tail] = b;
    else
        p->lru_head = b;
    p->lru_tail = b;
    p->n_cached++;
}

/* A block nobody holds: free, or evicted from the cached list (unkeyed). */
static int32_t take_block(kv_pool *p)
{
    int32_t b;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
    } else {
        b = p->lru_head;
        if (p->on_evict) p->on_evict(p->evict_user, b, p->key[b]);
        lru_unlink(p, b);
        idx_del(p, p->key[b]);
        p->indexed[b] = 0;
        p->n_evicted++;
    }
    p->key[b] = 0;
    p->ref[b] = 1;
    return b;
}

static void release_block(kv_pool *p, int32_t b)
{
    if (--p->ref[b] > 0) return;
    if (p->indexed[b]) {
        lru_append(p, b);
    } else {
        p->key[b] = 0;
        p->free_stack[p->n_free++] = b;
    }
}

/* --- sequences --- */

di_status kv_pool_seq_init(kv_pool *p, backend_kv_seq *s, int64_t max_tokens)
{
    (void)p;
    memset(s, 0, sizeof *s);
    int64_t nb = (max_tokens + BLOCK - 1) / BLOCK;
    if (nb <= 0 || nb > INT32_MAX) return DI_ERR_INVALID_ARGUMENT;
    s->block_table = malloc((size_t)nb * sizeof *s->block_table);
    if (!s->block_table) return DI_ERR_OUT_OF_MEMORY;
    s->n_blocks_max = (int32_t)nb;
    return DI_OK;
}

void kv_pool_seq_reset(kv_pool *p, backend_kv_seq *s)
{
    while (s->n_blocks > 0) release_block(p, s->block_table[--s->n_blocks]);
    s->n_tokens = 0;
    s->n_keyed = 0;
}

void kv_pool_seq_free(kv_pool *p, backend_kv_seq *s)
{
    if (s->block_table) kv_pool_seq_reset(p, s);
    free(s->block_table);
    memset(s, 0, sizeof *s);
}

di_status kv_pool_seq_reserve(kv_pool *p, backend_kv_seq *s, int64_t n_tokens)
{
    int64_t need = (n_tokens + BLOCK - 1) / BLOCK;
    if (need > s->n_blocks_max) return DI_ERR_CONTEXT_LENGTH;
    if (need - s->n_blocks > kv_pool_available(p)) return DI_ERR_OUT_OF_MEMORY;
    while (s->n_blocks < need) s->block_table[s->n_blocks++] = take_block(p);
    return DI_OK;
}

void kv_pool_seq_truncate(kv_pool *p, backend_kv_seq *s, int64_t n_tokens)
{
    if (n_tokens < 0) n_tokens = 0;
    if (n_tokens > s->n_tokens) return;
    int64_t keep = (n_tokens + BLOCK - 1) / BLOCK;
    if (keep < s->n_keyed) keep = s->n_keyed; /* shared blocks are never rewritten */
    while (s->n_blocks > keep) release_block(p, s->block_table[--s->n_blocks]);
    s->n_tokens = n_tokens < (int64_t)s->n_keyed * BLOCK ? (int64_t)s->n_keyed * BLOCK : n_tokens;
}

/* The key of a full block of tokens after the block keyed parent (0: the
 * first block). Never 0. */
static uint64_t block_key(const kv_pool *p, uint64_t parent, const int32_t *tokens)
{
    uint64_t k =
        XXH3_64bits_withSeed(tokens, BLOCK * sizeof *tokens, parent ? parent : p->fingerprint);
    return k ? k : 1;
}

int64_t kv_pool_probe(const kv_pool *p, const int32_t *tokens, int64_t n_tokens,
                      int32_t *n_cached_blocks)
{
    int32_t cached = 0;
    int64_t n = 0;
    uint64_t parent = 0;
    for (; n + BLOCK <= n_tokens; n += BLOCK) {
        uint64_t k = block_key(p, parent, tokens + n);
        int32_t b = idx_get(p, k);
        if (b < 0) break;
        cached += p->ref[b] == 0;
        parent = k;
    }
    if (n_cached_blocks) *n_cached_blocks = cached;
    return n;
}

int64_t kv_pool_seq_match(kv_pool *p, backend_kv_seq *s, const int32_t *tokens, int64_t n_tokens)
{
    if (s->n_blocks != 0) return 0;
    uint64_t parent = 0;
    int64_t n = 0;
    for (; n + BLOCK <= n_tokens && s->n_blocks < s->n_blocks_max; n += BLOCK) {
        uint64_t k = block_key(p, parent, tokens + n);
        int32_t b = idx_get(p, k);
        if (b < 0) break;
        if (p->ref[b]++ == 0) lru_unlink(p, b);
        s->block_table[s->n_blocks++] = b;
        parent = k;
    }
    s->n_tokens = n;
    s->n_keyed = s->n_blocks;
    return n;
}

int64_t kv_pool_seq_fork(kv_pool *p, backend_kv_seq *dst, const backend_kv_seq *src,
                         int64_t n_tokens)
{
    if (dst->n_blocks != 0 || n_tokens <= 0) return 0;
    int64_t k = n_tokens / BLOCK;
    if (k > src->n_tokens / BLOCK) k = src->n_tokens / BLOCK;
    if (k > dst->n_blocks_max) k = dst->n_blocks_max;
    for (int64_t i = 0; i < k; i++) {
        int32_t b = src->block_table[i];
        p->ref[b]++; /* held by src: never on the cached list */
        dst->block_table[dst->n_blocks++] = b;
    }
    dst->n_tokens = k * BLOCK;
    dst->n_keyed = (int32_t)k;
    return k * BLOCK;
}

void kv_pool_seq_publish(kv_pool *p, backend_kv_seq *s, const int32_t *tokens)
{
    int32_t full = (int32_t)(s->n_tokens / BLOCK);
    for (int32_t i = s->n_keyed; i < full; i++) {
        int32_t b = s->block_table[i];
        uint64_t parent = i > 0 ? p->key[s->block_table[i - 1]] : 0;
        uint64_t k = block_key(p, parent, tokens + (int64_t)i * BLOCK);
        p->key[b] = k;
        if (idx_get(p, k) < 0) {
            idx_put(p, k, b);
            p->indexed[b] = 1;
            if (p->on_publish) p->on_publish(p->evict_user, b, k);
        }
    }
    if (full > s->n_keyed) s->n_keyed = full;
}

void kv_pool_keys(const kv_pool *p, const int32_t *tokens, int64_t n_blocks, uint64_t *keys)
{
    uint64_t parent = 0;
    for (int64_t i = 0; i < n_blocks; i++)
        parent = keys[i] = block_key(p, parent, tokens + i * BLOCK);
}

int kv_pool_has(const kv_pool *p, uint64_t key)
{
    return key != 0 && idx_get(p, key) >= 0;
}

int32_t kv_pool_adopt(kv_pool *p, uint64_t key)
{
    if (key == 0 || kv_pool_available(p) == 0 || idx_get(p, key) >= 0) return -1;
    int32_t b = take_block(p);
    p->key[b] = key;
    idx_put(p, key, b);
    p->indexed[b] = 1;
    p->ref[b] = 0;
    lru_append(p, b);
    return b;
}
