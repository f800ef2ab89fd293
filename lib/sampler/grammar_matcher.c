/* The vocabulary's sorted token list and the matcher: a state of stacks,
 * advanced byte by byte, and the token mask of a state (grammar.h). */
#include "sampler/grammar.h"
#include "sampler/grammar_impl.h"

#include "util/hashmap.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- vocabulary */

struct grammar_vocab {
    int32_t n_vocab;
    int32_t n;     /* tokens in the sorted list */
    int32_t *ids;  /* [n] sorted by bytes */
    int32_t *slot; /* [n_vocab] the token's index in ids, or -1 */
    uint32_t *off; /* [n + 1] into bytes */
    uint16_t *lcp; /* [n] bytes shared with the token before */
    uint8_t *bytes;
    int32_t max_len;
};

static const uint8_t *sort_bytes;
static const uint32_t *sort_off;

static int cmp_tokens(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = sort_off[x + 1] - sort_off[x], ly = sort_off[y + 1] - sort_off[y];
    int c = memcmp(sort_bytes + sort_off[x], sort_bytes + sort_off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

di_status grammar_vocab_create(int32_t n_vocab, const uint8_t *const *bytes, const size_t *lens,
                               const uint8_t *excluded, grammar_vocab **out)
{
    *out = NULL;
    if (n_vocab <= 0 || !bytes || !lens) return DI_ERR_INVALID_ARGUMENT;
    grammar_vocab *v = calloc(1, sizeof *v);
    uint32_t *all_off = malloc(((size_t)n_vocab + 1) * sizeof *all_off);
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) total += lens[i] > 65535 ? 0 : lens[i];
    uint8_t *all = malloc(total ? total : 1);
    int32_t *order = malloc((size_t)n_vocab * sizeof *order);
    if (!v || !all_off || !all || !order || total > UINT32_MAX) goto oom;
    v->n_vocab = n_vocab;
    total = 0;
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        all_off[i] = (uint32_t)total;
        size_t l = lens[i] > 65535 ? 0 : lens[i];
        if (l) memcpy(all + total, bytes[i], l);
        total += l;
        if (l && !(excluded && excluded[i])) order[n++] = i;
    }
    all_off[n_vocab] = (uint32_t)total;
    sort_bytes = all; /* (qsort has no context argument in C11) */
    sort_off = all_off;
    qsort(order, (size_t)n, sizeof *order, cmp_tokens);
    v->n = n;
    v->ids = order;
    order = NULL;
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->lcp = malloc(((size_t)n ? (size_t)n : 1) * sizeof *v->lcp);
    v->bytes = malloc(total ? total : 1);
    if (!v->off || !v->lcp || !v->bytes) goto oom;
    size_t o = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = v->ids[k];
        uint32_t l = all_off[id + 1] - all_off[id];
        memcpy(v->bytes + o, all + all_off[id], l);
        v->off[k] = (uint32_t)o;
        o += l;
        if ((int32_t)l > v->max_len) v->max_len = (int32_t)l;
        uint32_t c = 0;
        if (k) {
            uint32_t pl = v->off[k] - v->off[k - 1];
            while (c < l && c < pl && v->bytes[v->off[k - 1] + c] == v->bytes[v->off[k] + c]) c++;
        }
        v->lcp[k] = (uint16_t)c;
    }
    v->off[n] = (uint32_t)o;
    if (!(v->slot = malloc((size_t)n_vocab * sizeof *v->slot))) goto oom;
    for (int32_t i = 0; i < n_vocab; i++) v->slot[i] = -1;
    for (int32_t k = 0; k < n; k++) v->slot[v->ids[k]] = k;
    free(all);
    free(all_off);
    *out = v;
    return DI_OK;
oom:
    free(all);
    free(all_off);
    free(order);
    grammar_vocab_free(v);
    return DI_ERR_OUT_OF_MEMORY;
}

void grammar_vocab_free(grammar_vocab *v)
{
    if (!v) return;
    free(v->ids);
    free(v->slot);
    free(v->off);
    free(v->lcp);
    free(v->bytes);
    free(v);
}

int32_t grammar_vocab_size(const grammar_vocab *v)
{
    return v->n_vocab;
}

/* ---------------------------------------------------------------- matcher */

/* A stack node: the element to match next (a byte set or a rule reference
 * not yet expanded) and the node below it (-1: the bottom). A state is a set
 * of top nodes; ACCEPT stands for the empty stack (the grammar complete). */
#define ACCEPT (-1)

typedef struct gnode {
    int32_t pos, parent;
} gnode;

typedef struct ivec {
    int32_t *v;
    size_t n, cap;
} ivec;

#define MASK_CACHE 16

struct grammar_matcher {
    grammar *g;
    const grammar_vocab *voc;
    int32_t *eos;
    size_t n_eos;
    gnode *nodes;
    uint32_t *stamp; /* [nodes] the advance that last added the node */
    size_t n_nodes, cap_nodes;
    di_u64_map intern; /* (pos, parent) -> node */
    uint32_t gen;
    int accept_stamp; /* gen when ACCEPT was added */
    ivec state;       /* the current stack set */
    ivec hist;        /* earlier states, each followed by its length */
    ivec work;        /* the mask's per-depth sets */
    int terminated;
    int oom;
    /* masks of recent states, keyed by the state's sorted node ids (a state
     * that comes back — free text before a tool call's trigger, a string's
     * characters — costs a copy, not a walk of the vocabulary) */
    struct mask_entry {
        int32_t *key;
        size_t n_key;
        uint32_t *mask;
        int32_t count;
    } cache[MASK_CACHE];
    size_t n_cache, next_cache;
};

static int ivec_push(ivec *a, int32_t x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static int32_t node(grammar_matcher *m, int32_t pos, int32_t parent)
{
    uint64_t key = ((uint64_t)(uint32_t)pos << 32) | (uint32_t)(parent + 1), v;
    if (di_u64_map_get(&m->intern, key, &v)) return (int32_t)v;
    if (m->n_nodes == m->cap_nodes) {
        size_t cap = m->cap_nodes ? 2 * m->cap_nodes : 1024;
        gnode *n = realloc(m->nodes, cap * sizeof *n);
        if (n) m->nodes = n;
        uint32_t *s = realloc(m->stamp, cap * sizeof *s);
        if (s) m->stamp = s;
        if (!n || !s) return m->oom = 1, ACCEPT;
        m->cap_nodes = cap;
    }
    int32_t id = (int32_t)m->n_nodes++;
    m->nodes[id] = (gnode){pos, parent};
    m->stamp[id] = 0;
    if (di_u64_map_put(&m->intern, key, (uint64_t)id) < 0) m->oom = 1;
    return id;
}

/* The continuation after element pos of a rule: the node for pos + 1, or the
 * parent itself when the alternative ends there. */
static int32_t after(grammar_matcher *m, int32_t pos, int32_t parent)
{
    return m->g->elems[pos + 1].type <= GE_ALT ? parent : node(m, pos + 1, parent);
}

/* Add stack n to out with its rule references expanded, so every top is a
 * byte set (or ACCEPT); each node once per advance (m->gen), which also ends
 * the cycles of nullable repetitions. */
static int expand(grammar_matcher *m, int32_t n, ivec *out)
{
    if (n == ACCEPT) {
        if (m->accept_stamp == (int)m->gen) return 0;
        m->accept_stamp = (int)m->gen;
        return ivec_push(out, ACCEPT);
    }
    if (m->stamp[n] == m->gen) return 0;
    m->stamp[n] = m->gen;
    const grammar *g = m->g;
    gnode nd = m->nodes[n];
    const gelem *e = &g->elems[nd.pos];
    if (e->type == GE_BYTES) return ivec_push(out, n);
    int32_t cont = after(m, nd.pos, nd.parent);
    for (int32_t a = g->alt_off[e->value]; a < g->alt_off[e->value + 1]; a++) {
        int32_t start = g->rule_alts[a];
        int32_t t = g->elems[start].type <= GE_ALT ? cont : node(m, start, cont);
        if (m->oom || expand(m, t, out)) return -1;
    }
    return 0;
}

static int byteset_has(const byteset *s, uint8_t c)
{
    return (int)((s->w[c >> 5] >> (c & 31)) & 1u);
}

/* w += the stacks of w->v[from, to) after byte c (read by index: the pushes
 * may move w->v). */
static int advance(grammar_matcher *m, ivec *w, size_t from, size_t to, uint8_t c)
{
    m->gen++;
    if (m->gen == 0) { /* wrapped: clear the stamps */
        memset(m->stamp, 0, m->n_nodes * sizeof *m->stamp);
        m->gen = 1;
    }
    const grammar *g = m->g;
    for (size_t i = from; i < to; i++) {
        int32_t t = w->v[i];
        if (t == ACCEPT) continue;
        gnode nd = m->nodes[t];
        if (!byteset_has(&g->sets[g->elems[nd.pos].value], c)) continue;
        int32_t next = after(m, nd.pos, nd.parent);
        if (m->oom || expand(m, next, w)) return -1;
    }
    return m->oom ? -1 : 0;
}

di_status grammar_matcher_create(grammar *g, const grammar_vocab *v, const int32_t *eos,
                                 size_t n_eos, grammar_matcher **out)
{
    *out = NULL;
    grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) {
        grammar_free(g);
        return DI_ERR_OUT_OF_MEMORY;
    }
    m->g = g;
    m->voc = v;
    m->accept_stamp = -1;
    if (di_u64_map_init(&m->intern, 1024) != 0) goto oom;
    if (n_eos) {
        if (!(m->eos = malloc(n_eos * sizeof *m->eos))) goto oom;
        memcpy(m->eos, eos, n_eos * sizeof *eos);
        m->n_eos = n_eos;
    }
    m->gen = 1;
    /* the start: root's alternatives over the empty stack */
    const grammar *gr = m->g;
    for (int32_t a = gr->alt_off[gr->root]; a < gr->alt_off[gr->root + 1]; a++) {
        int32_t start = gr->rule_alts[a];
        int32_t t = gr->elems[start].type <= GE_ALT ? ACCEPT : node(m, start, ACCEPT);
        if (m->oom || expand(m, t, &m->state)) goto oom;
    }
    *out = m;
    return DI_OK;
oom:
    grammar_matcher_free(m);
    return DI_ERR_OUT_OF_MEMORY;
}

void grammar_matcher_free(grammar_matcher *m)
{
    if (!m) return;
    grammar_free(m->g);
    free(m->eos);
    free(m->nodes);
    free(m->stamp);
    di_u64_map_free(&m->intern);
    free(m->state.v);
    free(m->hist.v);
    free(m->work.v);
    for (size_t i = 0; i < m->n_cache; i++) {
        free(m->cache[i].key);
        free(m->cache[i].mask);
    }
    free(m);
}

static int is_eos(const grammar_matcher *m, int32_t t)
{
    for (size_t i = 0; i < m->n_eos; i++)
        if (m->eos[i] == t) return 1;
    return 0;
}

int grammar_matcher_is_complete(const grammar_matcher *m)
{
    for (size_t i = 0; i < m->state.n; i++)
        if (m->state.v[i] == ACCEPT) return 1;
    return 0;
}

int grammar_matcher_is_terminated(const grammar_matcher *m)
{
    return m->terminated;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int32_t compute_mask(grammar_matcher *m, uint32_t *mask);

int32_t grammar_matcher_fill_mask(grammar_matcher *m, uint32_t *mask)
{
    size_t words = ((size_t)m->voc->n_vocab + 31) / 32, n = m->state.n;
    if (m->terminated || n == 0 || n > 256) return compute_mask(m, mask);
    int32_t key_stack[256];
    memcpy(key_stack, m->state.v, n * sizeof *key_stack);
    qsort(key_stack, n, sizeof *key_stack, cmp_i32);
    for (size_t i = 0; i < m->n_cache; i++)
        if (m->cache[i].n_key == n &&
            memcmp(m->cache[i].key, key_stack, n * sizeof *key_stack) == 0) {
            memcpy(mask, m->cache[i].mask, words * sizeof *mask);
            return m->cache[i].count;
        }
    int32_t count = compute_mask(m, mask);
    if (count < 0) return count;
    int32_t *key = malloc(n * sizeof *key);
    uint32_t *copy = malloc(words * sizeof *copy);
    if (!key || !copy) { /* not cached: the mask is still right */
        free(key);
        free(copy);
        return count;
    }
    memcpy(key, key_stack, n * sizeof *key);
    memcpy(copy, mask, words * sizeof *copy);
    size_t slot;
    if (m->n_cache < MASK_CACHE)
        slot = m->n_cache++;
    else { /* full: replace round-robin */
        slot = m->next_cache;
        m->next_cache = (m->next_cache + 1) % MASK_CACHE;
        free(m->cache[slot].key);
        free(m->cache[slot].mask);
    }
    m->cache[slot] = (struct mask_entry){key, n, copy, count};
    return count;
}

static int32_t compute_mask(grammar_matcher *m, uint32_t *mask)
{
    const grammar_vocab *v = m->voc;
    memset(mask, 0, ((size_t)v->n_vocab + 31) / 32 * sizeof *mask);
    int32_t count = 0;
    int complete = grammar_matcher_is_complete(m);
    for (size_t i = 0; i < m->n_eos; i++)
        if ((complete || m->terminated) && m->eos[i] >= 0 && m->eos[i] < v->n_vocab &&
            !((mask[m->eos[i] >> 5] >> (m->eos[i] & 31)) & 1)) {
            mask[m->eos[i] >> 5] |= 1u << (m->eos[i] & 31);
            count++;
        }
    if (m->terminated) return count;
    /* depth_off[d]: where the set after d bytes starts in work; the set at
     * depth 0 is the state */
    size_t depth_off_stack[257];
    size_t *depth_off = depth_off_stack;
    if (v->max_len > 255) {
        depth_off = malloc(((size_t)v->max_len + 2) * sizeof *depth_off);
        if (!depth_off) return -1;
    }
    ivec *w = &m->work;
    w->n = 0;
    for (size_t i = 0; i < m->state.n; i++)
        if (ivec_push(w, m->state.v[i])) goto oom;
    depth_off[0] = 0;
    depth_off[1] = w->n;
    int32_t valid = 0; /* depths with a computed set: 0..valid */
    for (int32_t k = 0; k < v->n;) {
        int32_t lcp = v->lcp[k];
        if (valid > lcp) valid = lcp;
        const uint8_t *tb = v->bytes + v->off[k];
        int32_t len = (int32_t)(v->off[k + 1] - v->off[k]);
        int32_t d = valid;
        for (; d < len; d++) { /* the set after d + 1 bytes */
            w->n = depth_off[d + 1];
            if (advance(m, w, depth_off[d], depth_off[d + 1], tb[d])) goto oom;
            depth_off[d + 2] = w->n;
            if (w->n == depth_off[d + 1]) break; /* dead after d + 1 bytes */
        }
        if (d == len) {
            valid = len;
            int32_t id = v->ids[k];
            if (!((mask[id >> 5] >> (id & 31)) & 1)) {
                mask[id >> 5] |= 1u << (id & 31);
                count++;
            }
            k++;
        } else {
            valid = d; /* sets 0..d are good; skip the tokens under the dead prefix */
            k++;
            while (k < v->n && v->lcp[k] > d) k++;
        }
    }
    if (depth_off != depth_off_stack) free(depth_off);
    if (count == 0) /* no token continues (the vocabulary cannot spell what must come):
                       the end tokens, so the output ends rather than breaks the grammar */
        for (size_t i = 0; i < m->n_eos; i++)
            if (m->eos[i] >= 0 && m->eos[i] < v->n_vocab &&
                !((mask[m->eos[i] >> 5] >> (m->eos[i] & 31)) & 1)) {
                mask[m->eos[i] >> 5] |= 1u << (m->eos[i] & 31);
                count++;
            }
    return count;
oom:
    if (depth_off != depth_off_stack) free(depth_off);
    return -1;
}

static int advance_state(grammar_matcher *m, const uint8_t *bytes, size_t len)
{
    ivec *w = &m->work;
    w->n = 0;
    for (size_t i = 0; i < m->state.n; i++)
        if (ivec_push(w, m->state.v[i])) return -1;
    size_t from = 0;
    for (size_t i = 0; i < len; i++) {
        size_t to = w->n;
        if (advance(m, w, from, to, bytes[i])) return -1;
        if (w->n == to) return -1;
        memmove(w->v, w->v + to, (w->n - to) * sizeof *w->v);
        w->n -= to;
        from = 0;
    }
    m->state.n = 0;
    for (size_t i = 0; i < w->n; i++)
        if (ivec_push(&m->state, w->v[i])) return -1;
    return 0;
}

static int push_history(grammar_matcher *m)
{
    for (size_t i = 0; i < m->state.n; i++)
        if (ivec_push(&m->hist, m->state.v[i])) return -1;
    return ivec_push(&m->hist, (int32_t)m->state.n);
}

int grammar_matcher_accept_bytes(grammar_matcher *m, const uint8_t *bytes, size_t len)
{
    if (m->terminated) return -1;
    return advance_state(m, bytes, len); /* (the state changes only on success) */
}

int grammar_matcher_accept(grammar_matcher *m, int32_t token)
{
    const grammar_vocab *v = m->voc;
    if (token < 0 || token >= v->n_vocab || m->terminated) return -1;
    if (is_eos(m, token)) {
        if (!grammar_matcher_is_complete(m)) return -1;
        if (push_history(m)) return -1;
        m->terminated = 1;
        return 0;
    }
    int32_t k = v->slot[token];
    if (k < 0) return -1; /* excluded or empty: never allowed */
    size_t hist_n = m->hist.n;
    if (push_history(m)) return -1;
    if (advance_state(m, v->bytes + v->off[k], v->off[k + 1] - v->off[k]) != 0) {
        m->hist.n = hist_n;
        return -1;
    }
    return 0;
}

int grammar_matcher_rollback(grammar_matcher *m, int32_t n)
{
    size_t h = m->hist.n, start = h, len = 0;
    if (n <= 0) return n == 0 ? 0 : -1;
    for (int32_t i = 0; i < n; i++) {
        if (h == 0) return -1;
        len = (size_t)m->hist.v[h - 1];
        start = h - 1 - len;
        h = start;
    }
    m->state.n = 0;
    for (size_t i = 0; i < len; i++)
        if (ivec_push(&m->state, m->hist.v[start + i])) return -1;
    m->hist.n = start;
    m->terminated = 0;
    return 0;
}
