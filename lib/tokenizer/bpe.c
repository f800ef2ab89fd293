/* Byte-pair encoding of one pre-token, as HF tokenizers' BPE model merges a word:
 * start from one symbol per byte, then repeatedly apply the lowest-ranked merge
 * present among adjacent pairs, the leftmost one when ranks tie, until none
 * applies.
 *
 * Two implementations of that one rule: short words (the common case) keep the
 * pair ranks in an array and rescan it (O(n^2) compares, no allocation after
 * warm-up); long words use a binary heap of candidate merges (O(n log n)), as HF
 * does. test_tokenizer_bpe checks they agree. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

/* Words up to this many symbols use the rescanning merge. */
#define BPE_SHORT_WORD 128

typedef struct heap_entry {
    uint32_t rank;
    uint32_t pos; /* index of the left symbol */
    int32_t left, right, merged;
} heap_entry;

struct tok_bpe_scratch {
    int32_t *ids;
    uint32_t *ranks;
    int32_t *merged;
    int32_t *prev, *next;
    heap_entry *heap;
    size_t cap, heap_cap, heap_n;
};

tok_bpe_scratch *tok_bpe_scratch_new(void)
{
    return calloc(1, sizeof(tok_bpe_scratch));
}

void tok_bpe_scratch_free(tok_bpe_scratch *s)
{
    if (!s) return;
    free(s->ids);
    free(s->ranks);
    free(s->merged);
    free(s->prev);
    free(s->next);
    free(s->heap);
    free(s);
}

static int scratch_reserve(tok_bpe_scratch *s, size_t n)
{
    if (n <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    int32_t *ids = realloc(s->ids, cap * sizeof *ids);
    if (ids) s->ids = ids;
    uint32_t *ranks = realloc(s->ranks, cap * sizeof *ranks);
    if (ranks) s->ranks = ranks;
    int32_t *merged = realloc(s->merged, cap * sizeof *merged);
    if (merged) s->merged = merged;
    int32_t *prev = realloc(s->prev, cap * sizeof *prev);
    if (prev) s->prev = prev;
    int32_t *next = realloc(s->next, cap * sizeof *next);
    if (next) s->next = next;
    if (!ids || !ranks || !merged || !prev || !next) return -1;
    s->cap = cap;
    return 0;
}

/* The rank and result of merging (left, right); rank UINT32_MAX when none. */
static inline uint32_t pair_rank(const di_tokenizer_impl *tok, int32_t left, int32_t right,
                                 int32_t *merged)
{
    uint64_t v;
    if (!di_u64_map_get(&tok->merges, ((uint64_t)(uint32_t)left << 32) | (uint32_t)right, &v))
        return UINT32_MAX;
    *merged = (int32_t)(uint32_t)v;
    return (uint32_t)(v >> 32);
}

static void merge_short(const di_tokenizer_impl *tok, tok_bpe_scratch *s, size_t *count)
{
    int32_t *ids = s->ids;
    uint32_t *ranks = s->ranks;
    int32_t *merged = s->merged;
    size_t n = *count;
    for (size_t i = 0; i + 1 < n; i++) ranks[i] = pair_rank(tok, ids[i], ids[i + 1], &merged[i]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (ranks[i] < ranks[best]) best = i;
        if (ranks[best] == UINT32_MAX) break;
        ids[best] = merged[best];
        /* drop symbol best+1 and the pair it started */
        memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof *ids);
        memmove(ranks + best + 1, ranks + best + 2, (n - best - 2) * sizeof *ranks);
        memmove(merged + best + 1, merged + best + 2, (n - best - 2) * sizeof *merged);
        n--;
        if (best > 0) ranks[best - 1] = pair_rank(tok, ids[best - 1], ids[best], &merged[best - 1]);
        if (best + 1 < n) ranks[best] = pair_rank(tok, ids[best], ids[best + 1], &merged[best]);
    }
    *count = n;
}

static int heap_less(const heap_entry *a, const heap_entry *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(tok_bpe_scratch *s, heap_entry e)
{
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 256;
        heap_entry *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return -1;
        s->heap = h;
        s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&e, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = e;
    return 0;
}

static heap_entry heap_pop(tok_bpe_scratch *s)
{
    heap_entry top = s->heap[0];
    heap_entry last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!heap_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static int push_candidate(const di_tokenizer_impl *tok, tok_bpe_scratch *s, int32_t pos)
{
    int32_t right = s->next[pos];
    if (right < 0) return 0;
    int32_t merged;
    uint32_t rank = pair_rank(tok, s->ids[pos], s->ids[right], &merged);
    if (rank == UINT32_MAX) return 0;
    heap_entry e = {rank, (uint32_t)pos, s->ids[pos], s->ids[right], merged};
    return heap_push(s, e);
}

static int merge_long(const di_tokenizer_impl *tok, tok_bpe_scratch *s, size_t *count)
{
    size_t n = *count;
    s->heap_n = 0;
    for (size_t i = 0; i < n; i++) {
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (push_candidate(tok, s, (int32_t)i) != 0) return -1;
    while (s->heap_n > 0) {
        heap_entry e = heap_pop(s);
        int32_t left = (int32_t)e.pos;
        if (s->ids[left] != e.left) continue; /* stale: the left symbol changed */
        int32_t right = s->next[left];
        if (right < 0 || s->ids[right] != e.right) continue; /* stale: right side changed */
        s->ids[left] = e.merged;
        s->ids[right] = -1; /* removed */
        s->next[left] = s->next[right];
        if (s->next[right] >= 0) s->prev[s->next[right]] = left;
        if (s->prev[left] >= 0 && push_candidate(tok, s, s->prev[left]) != 0) return -1;
        if (push_candidate(tok, s, left) != 0) return -1;
    }
    size_t m = 0;
    for (int32_t i = 0; i >= 0; i = s->next[i]) s->ids[m++] = s->ids[i];
    *count = m;
    return 0;
}

int tok_bpe_word(const di_tokenizer_impl *tok, tok_bpe_scratch *s, const uint8_t *word, size_t len,
                 tok_ids *out)
{
    return tok_bpe_word_with(tok, s, word, len, out, 0);
}

int tok_bpe_word_with(const di_tokenizer_impl *tok, tok_bpe_scratch *s, const uint8_t *word,
                      size_t len, tok_ids *out, int force_heap)
{
    if (len == 0) return 0;
    if (tok->ignore_merges) {
        int32_t id = di_bytes_map_get(&tok->vocab, word, len);
        if (id >= 0) return tok_ids_push(out, id);
    }
    if (scratch_reserve(s, len) != 0) return -1;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = tok->byte_token[word[i]];
        if (id >= 0)
            s->ids[n++] = id; /* a byte missing from the vocab is dropped, as HF
                                 BPE drops an unknown symbol without unk_token */
    }
    if (n == 0) return 0;
    if (n <= BPE_SHORT_WORD && !force_heap) {
        merge_short(tok, s, &n);
    } else if (merge_long(tok, s, &n) != 0) {
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (tok_ids_push(out, s->ids[i]) != 0) return -1;
    return 0;
}
