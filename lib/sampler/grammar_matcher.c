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
    int32_t *skip; /* [n] the first index after k whose lcp is below lcp[k] (n: none):
                      the tokens from k to skip[k] all share more than lcp[k] - 1 bytes */
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
    if (!(v->skip = malloc(((size_t)n ? (size_t)n : 1) * sizeof *v->skip))) goto oom;
    for (int32_t k = n - 1; k >= 0; k--) { /* the tokens up to skip[j] have lcp >= lcp[j] */
        int32_t j = k + 1;
        while (j < n && v->lcp[j] >= v->lcp[k]) j = v->skip[j];
        v->skip[k] = j;
    }
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
    free(v->skip);
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
 * of top nodes; ACCEPT stands for the empty stack (the grammar complete).
 * FRAME stands for "whatever lies below": the bottom of the stacks an
 * adaptive mask entry is computed from (below). */
#define ACCEPT (-1)
#define FRAME  (-2)

typedef struct gnode {
    int32_t pos, parent;
} gnode;

typedef struct ivec {
    int32_t *v;
    size_t n, cap;
} ivec;

#define MASK_CACHE 16
/* at most this many stacks in one set (by default): a grammar that allows
 * more parses at once (an ambiguous one) stops the matcher with an error
 * instead of taking ever more seconds and gigabytes per token; an enum of
 * 20,000 values starts with 20,000 stacks */
#define MAX_STACKS 32768
/* at most this many bytes of adaptive entries per matcher; past it a state
 * whose tops have none is walked whole */
#define ADAPTIVE_BYTES ((size_t)16 << 20)

/* xgrammar's adaptive token mask, per stack top: walked from the top with
 * only its first few nodes kept and FRAME below them, a token is accepted (it
 * ends before or as the walk reaches FRAME), rejected (it dies before FRAME)
 * or uncertain (it reaches FRAME with bytes left: what follows depends on the
 * stack below). Accepted and rejected hold whatever lies below, so a state's
 * mask is the union of its tops' accepted sets plus its uncertain tokens
 * walked whole. xgrammar keeps one entry per rule position; here repetitions
 * are small right-recursive rules (a string's character is a rule of its
 * own), so an entry keeps as many nodes as it takes to leave few tokens
 * uncertain: ADAPTIVE_LEVELS kept, then the next count when more than
 * n / ADAPTIVE_UNCERTAIN of the n tokens were uncertain. Entries are keyed
 * by the truncated top's node (hash-consed, so equal truncations are one). */
static const int ADAPTIVE_LEVELS[] = {1, 3, 7, 15};
#define CTX_UNKNOWN INT32_MIN
#define DFA_UNKNOWN (-1)
#define DFA_DEAD    (-2)
#define DFA_STATES  4096 /* about 4 MiB of subset states per matcher */
/* a new matcher computes entries until its walks have taken this many steps
 * per token of the vocabulary */
#define ADAPTIVE_PRECOMPUTE 32
#define ADAPTIVE_UNCERTAIN  64

typedef struct adaptive_entry {
    uint32_t *accepted; /* [words] a bitmap by token id, or NULL: see ids */
    int32_t *ids;       /* [n_ids] the accepted token ids when they are few */
    int32_t *uncertain; /* [n_uncertain] sorted-list indices, ascending */
    int32_t n_ids, n_uncertain;
    int deeper; /* too many uncertain: look up the top with more nodes kept */
} adaptive_entry;

struct grammar_matcher {
    grammar *g;
    const grammar_vocab *voc;
    int32_t *eos;
    size_t n_eos;
    gnode *nodes;
    uint32_t *stamp; /* [nodes] the advance that last added the node */
    /* [nodes] a byte-set top's successors, computed on first use: the stacks
     * after its byte, expanded (succ.v[succ_off[t]..][0, succ_n[t])), so an
     * advance costs no node lookups once a top has been stepped through;
     * succ_off -1: not yet */
    int32_t *succ_off, *succ_n;
    ivec succ;
    size_t n_nodes, cap_nodes;
    di_u64_map intern; /* (pos, parent) -> node */
    uint32_t gen;
    uint32_t accept_stamp; /* gen when ACCEPT was added */
    uint32_t frame_stamp;  /* gen when FRAME was added */
    ivec state;            /* the current stack set */
    ivec hist;             /* earlier states, each followed by its length */
    ivec work;             /* the mask's per-depth sets */
    int terminated;
    int oom;
    int ambiguous;     /* a set passed max_stacks */
    size_t max_stacks; /* MAX_STACKS unless a test sets it */
    size_t set_from;   /* where the set being built starts in the vector expand fills */
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
    di_u64_map adaptive_of; /* truncated top node -> index in adaptive */
    /* [n_elems] per byte-set element, the index of its entry in adaptive
     * (-1: not computed, -2: not to be had): the stack kept up to the first
     * rule with more than one calling context (adaptive_key) */
    int32_t *entry_at;
    /* [n_rules] per rule: its one calling place (element position of the
     * reference, -1 the start for root) or -2 when it has several; the
     * context's node, computed on first use (CTX_UNKNOWN: not yet) */
    int32_t *caller, *caller_rule, *context;
    int32_t *rule_of; /* [n_elems] the rule an element belongs to */
    adaptive_entry *adaptive;
    size_t n_adaptive, cap_adaptive, adaptive_bytes;
    ivec sel; /* the uncertain tokens a mask walks */
    /* stack sets met in walks, determinized as they come (subset states):
     * each set once (keyed by its node ids in order), with its transitions
     * by byte filled on first use, so a walk through a set it has met costs
     * a table lookup per byte; cleared past DFA_STATES between walks */
    struct dfa_state {
        int32_t off, n;    /* its nodes: dfa_nodes.v[off, off + n) */
        int32_t framed;    /* FRAME is among them */
        int32_t next[256]; /* DFA_UNKNOWN, DFA_DEAD or a state */
    } * dfa;
    size_t n_dfa, cap_dfa;
    di_bytes_map dfa_of;
    ivec dfa_nodes, dfa_tmp;
    uint64_t steps; /* bytes walked through the subset states, in all */
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
        int32_t *so = realloc(m->succ_off, cap * sizeof *so);
        if (so) m->succ_off = so;
        int32_t *sn = realloc(m->succ_n, cap * sizeof *sn);
        if (sn) m->succ_n = sn;
        if (!n || !s || !so || !sn) return m->oom = 1, ACCEPT;
        m->cap_nodes = cap;
    }
    int32_t id = (int32_t)m->n_nodes++;
    m->nodes[id] = (gnode){pos, parent};
    m->stamp[id] = 0;
    m->succ_off[id] = -1;
    m->succ_n[id] = 0;
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
        if (m->accept_stamp == m->gen) return 0;
        m->accept_stamp = m->gen;
        return ivec_push(out, ACCEPT);
    }
    if (n == FRAME) {
        if (m->frame_stamp == m->gen) return 0;
        m->frame_stamp = m->gen;
        return ivec_push(out, FRAME);
    }
    if (m->stamp[n] == m->gen) return 0;
    m->stamp[n] = m->gen;
    const grammar *g = m->g;
    gnode nd = m->nodes[n];
    const gelem *e = &g->elems[nd.pos];
    if (e->type == GE_BYTES) {
        if (out->n - m->set_from >= m->max_stacks) return m->ambiguous = 1, -1;
        return ivec_push(out, n);
    }
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

/* A new generation of stamps: every node unmarked. */
static void next_gen(grammar_matcher *m)
{
    if (++m->gen == 0) { /* wrapped: clear the stamps */
        memset(m->stamp, 0, m->n_nodes * sizeof *m->stamp);
        m->accept_stamp = m->frame_stamp = 0;
        m->gen = 1;
    }
}

/* Compute byte-set top t's successors (the stacks after its byte, expanded). */
static int compute_succ(grammar_matcher *m, int32_t t)
{
    next_gen(m);
    size_t at = m->succ.n;
    m->set_from = at;
    int32_t next = after(m, m->nodes[t].pos, m->nodes[t].parent);
    if (m->oom || expand(m, next, &m->succ)) return -1;
    m->succ_off[t] = (int32_t)at;
    m->succ_n[t] = (int32_t)(m->succ.n - at);
    return m->succ.n > INT32_MAX ? -1 : 0;
}

/* w += the stacks of w->v[from, to) after byte c, each once (read by index:
 * the pushes may move w->v). */
static int advance(grammar_matcher *m, ivec *w, size_t from, size_t to, uint8_t c)
{
    const grammar *g = m->g;
    for (size_t i = from; i < to; i++) { /* successors first: they take generations */
        int32_t t = w->v[i];
        if (t >= 0 && m->succ_off[t] < 0 &&
            byteset_has(&g->sets[g->elems[m->nodes[t].pos].value], c) && compute_succ(m, t))
            return -1;
    }
    next_gen(m);
    for (size_t i = from; i < to; i++) {
        int32_t t = w->v[i];
        if (t < 0) continue; /* ACCEPT, FRAME: no byte follows */
        if (!byteset_has(&g->sets[g->elems[m->nodes[t].pos].value], c)) continue;
        for (int32_t k = 0; k < m->succ_n[t]; k++) {
            int32_t x = m->succ.v[m->succ_off[t] + k];
            uint32_t *mark = x == ACCEPT  ? &m->accept_stamp
                             : x == FRAME ? &m->frame_stamp
                                          : &m->stamp[x];
            if (*mark == m->gen) continue;
            *mark = m->gen;
            if (w->n - to >= m->max_stacks) return m->ambiguous = 1, -1;
            if (ivec_push(w, x)) return -1;
        }
    }
    return 0;
}

static const adaptive_entry *position_entry(grammar_matcher *m, int32_t p);

/* The tables the adaptive entries need: each element's rule, each rule's
 * one caller (or none, -2). -1 when out of memory. */
static int adaptive_init(grammar_matcher *m)
{
    const grammar *g = m->g;
    size_t ne = (size_t)g->n_elems, nr = (size_t)g->n_rules;
    m->entry_at = malloc(ne * sizeof *m->entry_at);
    m->rule_of = malloc(ne * sizeof *m->rule_of);
    m->caller = malloc(nr * sizeof *m->caller);
    m->caller_rule = malloc(nr * sizeof *m->caller_rule);
    m->context = malloc(nr * sizeof *m->context);
    if (!m->entry_at || !m->rule_of || !m->caller || !m->caller_rule || !m->context) return -1;
    for (size_t i = 0; i < ne; i++) m->entry_at[i] = -1, m->rule_of[i] = -1;
    for (size_t r = 0; r < nr; r++)
        m->caller[r] = -3, m->context[r] = CTX_UNKNOWN; /* -3: none yet */
    m->caller[g->root] = -1;                            /* called at the start */
    for (int32_t r = 0; r < g->n_rules; r++)
        for (int32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
            for (int32_t p = g->rule_alts[a]; g->elems[p].type > GE_ALT; p++) {
                m->rule_of[p] = r;
                if (g->elems[p].type != GE_REF) continue;
                int32_t callee = g->elems[p].value;
                if (callee == r && g->elems[p + 1].type <= GE_ALT) continue; /* self, tail */
                m->caller[callee] = m->caller[callee] == -3 ? p : -2;
                m->caller_rule[callee] = r;
            }
    for (size_t r = 0; r < nr; r++)
        if (m->caller[r] == -3) m->caller[r] = -2; /* never called: no context known */
    return 0;
}

/* Compute byte-set elements' entries now (at di_submit, as xgrammar does at
 * compile time), so that the masks of a generation do not pay for them, until
 * the walks have taken ADAPTIVE_PRECOMPUTE steps per token (a grammar of many
 * elements, such as a long bounded repetition, gets the rest on first use). */
static void adaptive_precompute(grammar_matcher *m)
{
    const grammar *g = m->g;
    uint64_t budget = (uint64_t)ADAPTIVE_PRECOMPUTE * (uint64_t)m->voc->n;
    for (int32_t p = 0; p < g->n_elems && m->steps < budget; p++)
        if (g->elems[p].type == GE_BYTES && m->rule_of[p] >= 0) position_entry(m, p);
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
    m->max_stacks = MAX_STACKS;
    if (di_u64_map_init(&m->intern, 1024) != 0 || di_u64_map_init(&m->adaptive_of, 64) != 0 ||
        di_bytes_map_init(&m->dfa_of, 256) != 0)
        goto oom;
    if (n_eos) {
        if (!(m->eos = malloc(n_eos * sizeof *m->eos))) goto oom;
        memcpy(m->eos, eos, n_eos * sizeof *eos);
        m->n_eos = n_eos;
    }
    m->gen = 1;
    if (adaptive_init(m)) goto oom;
    /* the start: root's alternatives over the empty stack */
    const grammar *gr = m->g;
    for (int32_t a = gr->alt_off[gr->root]; a < gr->alt_off[gr->root + 1]; a++) {
        int32_t start = gr->rule_alts[a];
        int32_t t = gr->elems[start].type <= GE_ALT ? ACCEPT : node(m, start, ACCEPT);
        if (m->oom || expand(m, t, &m->state)) {
            di_status st = m->ambiguous ? DI_ERR_INVALID_REQUEST : DI_ERR_OUT_OF_MEMORY;
            grammar_matcher_free(m);
            return st;
        }
    }
    adaptive_precompute(m);
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
    free(m->succ_off);
    free(m->succ_n);
    free(m->succ.v);
    di_u64_map_free(&m->intern);
    free(m->state.v);
    free(m->hist.v);
    free(m->work.v);
    for (size_t i = 0; i < m->n_cache; i++) {
        free(m->cache[i].key);
        free(m->cache[i].mask);
    }
    for (size_t i = 0; i < m->n_adaptive; i++) {
        free(m->adaptive[i].accepted);
        free(m->adaptive[i].ids);
        free(m->adaptive[i].uncertain);
    }
    free(m->adaptive);
    di_u64_map_free(&m->adaptive_of);
    free(m->entry_at);
    free(m->dfa);
    di_bytes_map_free(&m->dfa_of);
    free(m->dfa_nodes.v);
    free(m->dfa_tmp.v);
    free(m->caller);
    free(m->caller_rule);
    free(m->rule_of);
    free(m->context);
    free(m->sel.v);
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

void grammar_matcher_set_max_stacks(grammar_matcher *m, size_t n)
{
    m->max_stacks = n;
}

di_status grammar_matcher_error(const grammar_matcher *m, const char **why)
{
    *why = NULL;
    if (m->ambiguous) {
        *why = "the grammar allows more than 32768 parses of the output at once (an ambiguous "
               "grammar, such as a repetition of something that can match nothing)";
        return DI_ERR_INVALID_REQUEST;
    }
    if (!m->oom) return DI_OK;
    *why = "out of memory for the grammar's matcher";
    return DI_ERR_OUT_OF_MEMORY;
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

static int has_bit(const uint32_t *mask, int32_t id)
{
    return (int)((mask[id >> 5] >> (id & 31)) & 1u);
}

/* Bytes two tokens of the sorted list share at their start. */
static int32_t common_prefix(const grammar_vocab *v, int32_t a, int32_t b)
{
    const uint8_t *x = v->bytes + v->off[a], *y = v->bytes + v->off[b];
    uint32_t la = v->off[a + 1] - v->off[a], lb = v->off[b + 1] - v->off[b];
    int32_t c = 0;
    while ((uint32_t)c < la && (uint32_t)c < lb && x[c] == y[c]) c++;
    return c;
}

/* The subset state of the stack set nodes[0, n) (n > 0), added when new;
 * -1 when out of memory. */
static int32_t dfa_state(grammar_matcher *m, const int32_t *nodes, size_t n)
{
    if (n > INT32_MAX / sizeof *nodes) return -1;
    int32_t id = di_bytes_map_get(&m->dfa_of, nodes, n * sizeof *nodes);
    if (id >= 0) return id;
    if (m->n_dfa == m->cap_dfa) {
        size_t cap = m->cap_dfa ? 2 * m->cap_dfa : 64;
        struct dfa_state *d = realloc(m->dfa, cap * sizeof *d);
        if (!d) return -1;
        m->dfa = d;
        m->cap_dfa = cap;
    }
    struct dfa_state *d = &m->dfa[m->n_dfa];
    d->off = (int32_t)m->dfa_nodes.n;
    d->n = (int32_t)n;
    d->framed = 0;
    for (size_t i = 0; i < n; i++) {
        d->framed |= nodes[i] == FRAME;
        if (ivec_push(&m->dfa_nodes, nodes[i])) return -1;
    }
    for (int c = 0; c < 256; c++) d->next[c] = DFA_UNKNOWN;
    if (m->dfa_nodes.n > INT32_MAX ||
        di_bytes_map_put(&m->dfa_of, nodes, n * sizeof *nodes, (int32_t)m->n_dfa) < 0)
        return -1;
    return (int32_t)m->n_dfa++;
}

/* The subset state after byte c from state s (DFA_DEAD: no stack takes it);
 * DFA_UNKNOWN when out of memory. */
static int32_t dfa_step(grammar_matcher *m, int32_t s, uint8_t c)
{
    int32_t next = m->dfa[s].next[c];
    if (next != DFA_UNKNOWN) return next;
    ivec *t = &m->dfa_tmp;
    t->n = 0;
    for (int32_t i = 0; i < m->dfa[s].n; i++)
        if (ivec_push(t, m->dfa_nodes.v[m->dfa[s].off + i])) return DFA_UNKNOWN;
    size_t n = t->n;
    if (advance(m, t, 0, n, c)) return DFA_UNKNOWN;
    next = t->n == n ? DFA_DEAD : dfa_state(m, t->v + n, t->n - n);
    if (next == -1) return DFA_UNKNOWN;
    m->dfa[s].next[c] = next;
    return next;
}

/* Walk tokens from the stack set init: sel[0, n_sel) (sorted-list indices,
 * ascending), or every token when sel is NULL. Sets the bit of each token a
 * stack accepts in bits; with uncertain, pushes the index of each token no
 * stack accepts whose walk reached FRAME with bytes left, and stops (returns
 * 1) when there are more than max_uncertain of them. A token reuses the
 * states of the prefix it shares with the token before it; when a prefix
 * dies, the tokens under it are skipped (pushed to uncertain alike when FRAME
 * came first: their walks are the same). Returns 0, 1, or -1 when out of
 * memory. */
static int walk(grammar_matcher *m, const int32_t *init, size_t n_init, const int32_t *sel,
                int32_t n_sel, uint32_t *bits, ivec *uncertain, size_t max_uncertain)
{
    const grammar_vocab *v = m->voc;
    if (n_init == 0) return 0;
    if (m->n_dfa > DFA_STATES) { /* start the subset states afresh */
        di_bytes_map_free(&m->dfa_of);
        if (di_bytes_map_init(&m->dfa_of, 256) != 0) return -1;
        m->n_dfa = 0;
        m->dfa_nodes.n = 0;
    }
    /* at[d]: the state after d bytes; framed[d]: FRAME was in a state after
     * 1..d bytes */
    int32_t at_stack[258];
    uint8_t framed_stack[258];
    int32_t *at = at_stack;
    uint8_t *framed = framed_stack;
    int rc = -1;
    if (v->max_len > 255) {
        at = malloc(((size_t)v->max_len + 2) * sizeof *at);
        framed = malloc((size_t)v->max_len + 2);
        if (!at || !framed) goto done;
    }
    if ((at[0] = dfa_state(m, init, n_init)) < 0) goto done;
    framed[0] = 0;
    rc = 0;
    int32_t n = sel ? n_sel : v->n, valid = 0, prev = -1; /* depths 0..valid computed */
    for (int32_t i = 0; i < n;) {
        int32_t k = sel ? sel[i] : i;
        int32_t lcp = sel ? (prev < 0 ? 0 : common_prefix(v, prev, k)) : v->lcp[k];
        if (valid > lcp) valid = lcp;
        const uint8_t *tb = v->bytes + v->off[k];
        int32_t len = (int32_t)(v->off[k + 1] - v->off[k]);
        int32_t d = valid;
        for (; d < len; d++) { /* the state after d + 1 bytes */
            int32_t next = dfa_step(m, at[d], tb[d]);
            m->steps++;
            if (next == DFA_UNKNOWN) goto oom;
            if (next == DFA_DEAD) break;
            at[d + 1] = next;
            framed[d + 1] = (uint8_t)(framed[d] | m->dfa[next].framed);
        }
        prev = k;
        i++;
        if (d == len) {
            valid = len;
            int32_t id = v->ids[k];
            bits[id >> 5] |= 1u << (id & 31);
            continue;
        }
        valid = d; /* states 0..d are good; the tokens under the dead prefix die alike */
        int unsure = uncertain && framed[d];
        if (unsure && ivec_push(uncertain, k)) goto oom;
        if (!sel && !unsure) { /* jump over them */
            while (i < n && v->lcp[i] > d) i = v->skip[i];
            prev = i - 1;
            continue;
        }
        while (i < n) {
            int32_t next = sel ? sel[i] : i;
            if ((sel ? common_prefix(v, prev, next) : v->lcp[next]) <= d) break;
            if (unsure && ivec_push(uncertain, next)) goto oom;
            prev = next;
            i++;
        }
        if (unsure && uncertain->n > max_uncertain) {
            rc = 1;
            break;
        }
    }
    goto done;
oom:
    rc = -1;
done:
    if (at != at_stack) free(at);
    if (framed != framed_stack) free(framed);
    return rc;
}

/* The count of set bits, after the end tokens' rule: allowed when the
 * output is complete (or ended), and when no token continues (the
 * vocabulary cannot spell what must come) so the output ends rather than
 * breaks the grammar. */
static int32_t finish_mask(grammar_matcher *m, uint32_t *mask)
{
    size_t words = ((size_t)m->voc->n_vocab + 31) / 32;
    int32_t count = 0;
    for (size_t i = 0; i < words; i++) count += __builtin_popcount(mask[i]);
    int complete = m->terminated || grammar_matcher_is_complete(m);
    for (size_t i = 0; i < m->n_eos; i++) {
        int32_t e = m->eos[i];
        if ((complete || count == 0) && e >= 0 && e < m->voc->n_vocab && !has_bit(mask, e)) {
            mask[e >> 5] |= 1u << (e & 31);
            count++;
        }
    }
    return count;
}

int32_t grammar_matcher_fill_mask_exact(grammar_matcher *m, uint32_t *mask)
{
    memset(mask, 0, ((size_t)m->voc->n_vocab + 31) / 32 * sizeof *mask);
    if (!m->terminated && walk(m, m->state.v, m->state.n, NULL, 0, mask, NULL, 0)) return -1;
    return finish_mask(m, mask);
}

/* Top t with only its first `kept` nodes, FRAME below them; t itself when
 * its stack is no deeper (*whole set). -1 when out of memory. */
static int32_t truncated(grammar_matcher *m, int32_t t, int kept, int *whole)
{
    int32_t chain[16];
    int n = 0;
    int32_t x = t;
    while (x >= 0 && n < kept) {
        chain[n++] = x;
        x = m->nodes[x].parent;
    }
    *whole = x < 0;
    if (*whole) return t;
    int32_t b = FRAME;
    for (int i = n - 1; i >= 0; i--) {
        b = node(m, m->nodes[chain[i]].pos, b);
        if (m->oom) return -1;
    }
    return b;
}

/* The adaptive entry of the truncated top key (computed on first use), or
 * NULL when out of memory or past ADAPTIVE_BYTES. */
static const adaptive_entry *entry_of(grammar_matcher *m, int32_t key, int whole)
{
    uint64_t at;
    if (di_u64_map_get(&m->adaptive_of, (uint64_t)(uint32_t)key, &at)) return &m->adaptive[at];
    const grammar_vocab *v = m->voc;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    if (m->adaptive_bytes + words * sizeof(uint32_t) > ADAPTIVE_BYTES) return NULL;
    if (m->n_adaptive == m->cap_adaptive) {
        size_t cap = m->cap_adaptive ? 2 * m->cap_adaptive : 16;
        adaptive_entry *a = realloc(m->adaptive, cap * sizeof *a);
        if (!a) return NULL;
        m->adaptive = a;
        m->cap_adaptive = cap;
    }
    adaptive_entry e = {0};
    ivec unc = {0};
    e.accepted = calloc(words, sizeof *e.accepted);
    int rc = e.accepted ? walk(m, &key, 1, NULL, 0, e.accepted, &unc,
                               whole ? SIZE_MAX : (size_t)v->n / ADAPTIVE_UNCERTAIN)
                        : -1;
    if (rc < 0) goto oom;
    if (rc) { /* too many uncertain: keep more of the stack */
        free(e.accepted);
        free(unc.v);
        e = (adaptive_entry){.deeper = 1};
        unc = (ivec){0};
    } else {
        int32_t n_acc = 0;
        for (size_t i = 0; i < words; i++) n_acc += __builtin_popcount(e.accepted[i]);
        if ((size_t)n_acc < words) { /* few: a list is smaller and faster to add */
            if (n_acc) {
                if (!(e.ids = malloc((size_t)n_acc * sizeof *e.ids))) goto oom;
                for (size_t i = 0; i < words; i++)
                    for (uint32_t b = e.accepted[i]; b && e.n_ids < n_acc; b &= b - 1)
                        e.ids[e.n_ids++] = (int32_t)(i * 32 + (size_t)__builtin_ctz(b));
            }
            free(e.accepted);
            e.accepted = NULL;
        }
        e.uncertain = unc.v;
        e.n_uncertain = (int32_t)unc.n;
    }
    if (di_u64_map_put(&m->adaptive_of, (uint64_t)(uint32_t)key, m->n_adaptive) < 0) goto oom;
    m->adaptive_bytes += sizeof e + (e.accepted ? words : (size_t)e.n_ids) * sizeof(uint32_t) +
                         unc.n * sizeof(int32_t);
    m->adaptive[m->n_adaptive] = e;
    return &m->adaptive[m->n_adaptive++];
oom:
    free(e.accepted);
    free(e.ids);
    free(unc.v);
    return NULL;
}

/* The stack below rule r's nodes as far as it is known from the grammar
 * alone: while a rule is called from one place only (self-calls in tail
 * position add no context), its caller's continuation; FRAME where a rule
 * has several callers, ACCEPT (the real bottom) under root called only at the
 * start. Truncating anywhere is sound, so depth is bounded. */
static int32_t rule_context(grammar_matcher *m, int32_t r, int depth)
{
    if (m->context[r] != CTX_UNKNOWN) return m->context[r];
    int32_t c = FRAME, site = m->caller[r];
    if (site == -1)
        c = ACCEPT;
    else if (site >= 0 && depth < 32) {
        int32_t below = rule_context(m, m->caller_rule[r], depth + 1);
        c = m->g->elems[site + 1].type <= GE_ALT ? below : node(m, site + 1, below);
        if (m->oom) return ACCEPT;
    }
    m->context[r] = c;
    return c;
}

/* The entry of byte-set element p (computed on first use), keyed by p's node
 * over its rule's known context: xgrammar's per-position entry, with the
 * small rules a repetition or a class compiles to seen through. NULL when it
 * cannot be had; an entry marked deeper when too many tokens stay uncertain. */
static const adaptive_entry *position_entry(grammar_matcher *m, int32_t p)
{
    if (m->entry_at[p] >= 0) return &m->adaptive[m->entry_at[p]];
    if (m->entry_at[p] == -2) return NULL;
    int32_t below = rule_context(m, m->rule_of[p], 0);
    int whole = 1;
    for (int32_t x = below; x >= 0; x = m->nodes[x].parent)
        if (m->nodes[x].parent == FRAME) whole = 0;
    if (below == FRAME) whole = 0;
    int32_t key = m->oom ? -1 : node(m, p, below);
    const adaptive_entry *e = key >= 0 && !m->oom ? entry_of(m, key, whole) : NULL;
    m->entry_at[p] = e ? (int32_t)(e - m->adaptive) : -2;
    return e;
}

/* The adaptive entry for top t: the shallowest truncation (ADAPTIVE_LEVELS)
 * that leaves few tokens uncertain, else the whole stack's. */
static const adaptive_entry *adaptive_entry_of(grammar_matcher *m, int32_t t)
{
    size_t n_levels = sizeof ADAPTIVE_LEVELS / sizeof ADAPTIVE_LEVELS[0];
    for (size_t l = 0; l <= n_levels; l++) {
        int whole = 1;
        int32_t key = l < n_levels ? truncated(m, t, ADAPTIVE_LEVELS[l], &whole) : t;
        if (key == -1) return NULL;
        const adaptive_entry *e = entry_of(m, key, whole);
        if (!e || !e->deeper) return e;
    }
    return NULL; /* (the whole stack's entry is never deeper) */
}

/* The state's mask from its tops' adaptive entries: their accepted sets,
 * then the uncertain tokens not among them walked from the whole state.
 * Falls back to the exact walk when an entry cannot be had. */
static int32_t compute_mask(grammar_matcher *m, uint32_t *mask)
{
    if (m->terminated) return grammar_matcher_fill_mask_exact(m, mask);
    size_t words = ((size_t)m->voc->n_vocab + 31) / 32;
    memset(mask, 0, words * sizeof *mask);
    ivec *sel = &m->sel;
    sel->n = 0;
    int sources = 0;
    for (size_t i = 0; i < m->state.n; i++) {
        int32_t t = m->state.v[i];
        if (t < 0) continue;
        const adaptive_entry *e = position_entry(m, m->nodes[t].pos);
        if (e && e->deeper) e = adaptive_entry_of(m, t);
        if (!e) return grammar_matcher_fill_mask_exact(m, mask);
        if (e->accepted)
            for (size_t j = 0; j < words; j++) mask[j] |= e->accepted[j];
        else
            for (int32_t j = 0; j < e->n_ids; j++) mask[e->ids[j] >> 5] |= 1u << (e->ids[j] & 31);
        if (e->n_uncertain) sources++;
        for (int32_t j = 0; j < e->n_uncertain; j++)
            if (ivec_push(sel, e->uncertain[j])) return -1;
    }
    if (sources > 1) { /* several lists: sorted, once each */
        qsort(sel->v, sel->n, sizeof *sel->v, cmp_i32);
        size_t u = 0;
        for (size_t i = 0; i < sel->n; i++)
            if (!u || sel->v[u - 1] != sel->v[i]) sel->v[u++] = sel->v[i];
        sel->n = u;
    }
    size_t kept = 0; /* those another top accepts already need no walk */
    for (size_t i = 0; i < sel->n; i++)
        if (!has_bit(mask, m->voc->ids[sel->v[i]])) sel->v[kept++] = sel->v[i];
    sel->n = kept;
    if (kept && walk(m, m->state.v, m->state.n, sel->v, (int32_t)kept, mask, NULL, 0)) return -1;
    return finish_mask(m, mask);
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

/* 1 when no token of the vocabulary continues the output (the mask holds
 * the end tokens alone); 0 when one does or memory ran out. */
static int nothing_continues(grammar_matcher *m)
{
    size_t words = ((size_t)m->voc->n_vocab + 31) / 32;
    uint32_t *mask = calloc(words, sizeof *mask);
    int none = mask && walk(m, m->state.v, m->state.n, NULL, 0, mask, NULL, 0) == 0;
    for (size_t i = 0; none && i < words; i++) none = mask[i] == 0;
    free(mask);
    return none;
}

int grammar_matcher_accept(grammar_matcher *m, int32_t token)
{
    const grammar_vocab *v = m->voc;
    if (token < 0 || token >= v->n_vocab || m->terminated) return -1;
    if (is_eos(m, token)) { /* allowed when complete, or when no token continues (finish_mask) */
        if (!grammar_matcher_is_complete(m) && !nothing_continues(m)) return -1;
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
