/* The MTP drafter (draft.h): DeepSeek-V3's multi-token prediction (NextN)
 * module drafts for the model it belongs to (DeepSeek-V3 §2.2), as vLLM's
 * DeepSeekMTP proposer and llama.cpp's NextN drafting do.
 *
 * The module's step i combines the target's final normed hidden state h_i
 * of token i with the embedding of token i + 1 (at position i + 1) in its
 * one decoder layer, which has its own paged latent cache; its logits draft
 * token i + 2. Each request has a sequence in that cache (model_mtp_seq_*)
 * holding the pairs from position `start` on:
 *   - observe, after every target step, appends the pairs of the rows the
 *     request kept — a prompt chunk's, a verified item's up to its last
 *     accepted draft — with the token that followed each (a prompt token, a
 *     kept draft, the token sampled from the row), every request's in one
 *     batched pass; so it holds a pair for every token but the last, and the
 *     output g of the last pair is kept: g's logits draft the next token.
 *     The target computes no rows for a prompt's blocks the prefix cache
 *     held: the sequence then starts at the first row the target computed
 *     (the module attends to what it has seen; the drafts are only less
 *     likely kept).
 *   - propose draws draft 0 from shared_head(g), then chains: draft j from
 *     the module's step on (its own previous output, draft j - 1), every
 *     request's draft j in one batched pass; at temperature 0 the argmax (a
 *     point-mass draft, confidence its probability), at temperature > 0 a
 *     sample of q after the request's temperature, top-k, top-p and min-p,
 *     with an RNG of its own seeded from the request's seed (q handed to the
 *     verifier), as draft_model.c does.
 *   - the chained pairs are not the target's: the next observe cuts them off
 *     by truncating the block table (never a copy) before appending the
 *     target's.
 * A request whose sequence finds no room in the MTP cache drafts nothing
 * until its next observation restarts it. Random weights (the test
 * fixtures) make the drafts' acceptance meaningless; the output is exact
 * whatever they are (the verifier's rule). */
#include <stdlib.h>
#include <string.h>

#include "engine/draft.h"
#include "model/model.h"

enum { MTP_MAX = 64 }; /* drafts per step at most (speculative_tokens' bound) */

typedef struct mtp_state {
    model_seq *seq;          /* pairs from target position start on */
    int64_t start;           /* the target position of the sequence's first pair */
    int64_t n_pairs;         /* the target's pairs it holds (chained ones after them) */
    int has_g;               /* g is the output of pair start + n_pairs - 1 */
    float *g;                /* [n_embd] */
    int32_t drafts[MTP_MAX]; /* this step's drafts */
    sampler *smp;            /* temperature > 0: the drafts' sampler; else NULL */
} mtp_state;

typedef struct mtp_drafter {
    drafter base;
    model *m; /* the target (borrowed) */
    int32_t n_vocab;
    int64_t n_embd, n_batch;
    int max_running;
    model_mtp_item *items; /* [max_running] */
    int *item_of;          /* [max_running]: the request of each item */
    int *active;           /* [max_running] */
    float *hidden;         /* [n_batch, n_embd]: the pairs' hidden rows, stacked */
    float *out;            /* [max_running, n_embd]: the wanted pairs' outputs */
    float *logits;         /* [max_running, n_vocab] */
    int32_t *tokens;       /* [n_batch]: the pairs' tokens, stacked */
    sampler_candidate *scratch;
} mtp_drafter;

static void mtp_release(drafter *d, void *state)
{
    mtp_drafter *md = (mtp_drafter *)d;
    mtp_state *st = state;
    if (!st) return;
    model_mtp_seq_free(md->m, st->seq);
    sampler_free(st->smp);
    free(st->g);
    free(st);
}

/* The request's state, created the first time (NULL when out of memory). */
static mtp_state *state_of(mtp_drafter *md, void **state, const sampler *smp)
{
    if (*state) return *state;
    mtp_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->g = malloc((size_t)md->n_embd * sizeof *st->g);
    if (!st->g || model_mtp_seq_create(md->m, &st->seq) != DI_OK) {
        mtp_release(&md->base, st);
        return NULL;
    }
    if (draft_sampler_create(smp, md->n_vocab, 0x9e3779b97f4a7c15ull, &st->smp) != DI_OK) {
        mtp_release(&md->base, st);
        return NULL;
    }
    *state = st;
    return st;
}

/* Forget what st's sequence holds; it restarts at the next observation. */
static void restart(mtp_drafter *md, mtp_state *st)
{
    model_mtp_seq_reset(md->m, st->seq);
    st->start = 0;
    st->n_pairs = 0;
    st->has_g = 0;
}

static void mtp_observe(drafter *d, const draft_observation *obs, int n, const float *hidden)
{
    mtp_drafter *md = (mtp_drafter *)d;
    const size_t E = (size_t)md->n_embd;
    int i = 0;
    while (i < n) {
        /* One batched pass over as many observations as n_batch rows hold
         * (the step's kept rows are at most n_batch: one pass but for a
         * chunked remainder). */
        int n_items = 0;
        int64_t rows = 0;
        for (; i < n && n_items < md->max_running; i++) {
            const draft_observation *o = &obs[i];
            if (o->n_kept < 1) continue;
            if (rows + o->n_kept > md->n_batch) break;
            mtp_state *st = state_of(md, o->state, o->smp);
            if (!st) continue;
            /* Chained pairs go; the target's pairs up to pos0 stay when they
             * end there, else the sequence starts over at pos0. */
            if (st->n_pairs > 0 && st->start + st->n_pairs == o->pos0) {
                model_mtp_seq_truncate(md->m, st->seq, st->n_pairs);
            } else {
                restart(md, st);
                st->start = o->pos0;
            }
            st->has_g = 0;
            if (model_seq_n_past(st->seq) != st->n_pairs ||
                model_mtp_seq_reserve(md->m, st->seq, st->n_pairs + o->n_kept) != DI_OK) {
                restart(md, st);
                continue;
            }
            memcpy(md->hidden + (size_t)rows * E, hidden + (size_t)o->row0 * E,
                   (size_t)o->n_kept * E * sizeof *hidden);
            memcpy(md->tokens + rows, o->next, (size_t)o->n_kept * sizeof *o->next);
            md->items[n_items] =
                (model_mtp_item){st->seq, md->tokens + rows, o->n_kept, o->pos0 + 1, 1};
            md->item_of[n_items++] = i;
            rows += o->n_kept;
        }
        if (n_items == 0) {
            if (i < n && obs[i].n_kept > md->n_batch) i++; /* cannot happen: kept <= n_batch */
            continue;
        }
        if (model_mtp_forward_batch(md->m, md->items, n_items, md->hidden, NULL, md->out, NULL) !=
            DI_OK) {
            for (int k = 0; k < n_items; k++) restart(md, *obs[md->item_of[k]].state);
            continue;
        }
        for (int k = 0; k < n_items; k++) {
            mtp_state *st = *obs[md->item_of[k]].state;
            st->n_pairs += md->items[k].n_tokens;
            memcpy(st->g, md->out + (size_t)k * E, E * sizeof *st->g);
            st->has_g = 1;
        }
    }
}

/* Draw request r's draft j from its logits row (modified). */
static void draw(mtp_drafter *md, draft_request *r, mtp_state *st, int j, float *row)
{
    float conf;
    float *q = st->smp ? r->q + (size_t)j * (size_t)md->n_vocab : NULL;
    int32_t x = draft_pick(row, md->n_vocab, st->smp, md->scratch, q, &conf, r->n_tokens + j);
    if (st->smp) r->has_q = 1;
    r->out[j] = x;
    r->conf[j] = conf;
    st->drafts[j] = x;
    r->n = j + 1;
}

static void mtp_propose(drafter *d, draft_request *reqs, int n)
{
    mtp_drafter *md = (mtp_drafter *)d;
    const size_t E = (size_t)md->n_embd, V = (size_t)md->n_vocab;
    if (n > md->max_running) n = md->max_running; /* cannot happen: one per running request */
    /* Draft 0: shared_head of each request's g, every request's in one pass. */
    int n_items = 0;
    for (int i = 0; i < n; i++) {
        draft_request *r = &reqs[i];
        r->n = 0;
        r->has_q = 0;
        md->active[i] = 0;
        if (r->max > MTP_MAX) r->max = MTP_MAX;
        /* A step verifies n_batch - 1 drafts at most (with the request's
         * last token), and the next observe cuts the chained pairs off: a
         * DeepSeek-V4 sequence cut deeper than n_batch is dropped whole
         * (model_mtp_seq_truncate), and would restart at every step. */
        if (r->max > md->n_batch - 1) r->max = (int)(md->n_batch - 1);
        mtp_state *st = *r->state;
        /* g must be the output of the pair of the last token */
        if (!st || !st->has_g || st->start + st->n_pairs != r->n_tokens - 1 || r->max < 1) continue;
        if (st->smp && !r->q) continue; /* no room for q: no sampled drafts */
        model_mtp_seq_truncate(md->m, st->seq, st->n_pairs);
        /* room for the chained pairs of drafts 1 .. max - 1 (none: one draft) */
        if (r->max > 1 && model_mtp_seq_reserve(md->m, st->seq, st->n_pairs + r->max - 1) != DI_OK)
            r->max = 1;
        memcpy(md->out + (size_t)n_items * E, st->g, E * sizeof *st->g);
        md->item_of[n_items++] = i;
    }
    if (n_items == 0) return;
    if (model_mtp_logits(md->m, md->out, n_items, md->logits, NULL) != DI_OK) return;
    for (int k = 0; k < n_items; k++) {
        int i = md->item_of[k];
        draw(md, &reqs[i], *reqs[i].state, 0, md->logits + (size_t)k * V);
        md->active[i] = 1;
    }
    /* Draft j + 1 from the module's step on (its output for draft j - 1,
     * draft j), every request's in one pass; md->out holds each active
     * request's last output in item order. */
    for (int j = 1;; j++) {
        int n_next = 0;
        for (int k = 0; k < n_items; k++) {
            int i = md->item_of[k];
            draft_request *r = &reqs[i];
            /* (a pass takes n_batch pairs at most: past them a request's
             * chain stops here) */
            if (!md->active[i] || r->n != j || j >= r->max || n_next >= md->n_batch) continue;
            mtp_state *st = *r->state;
            memcpy(md->hidden + (size_t)n_next * E, md->out + (size_t)k * E,
                   E * sizeof *md->hidden);
            /* the pair (output for token n_tokens + j - 2, draft j - 1) at
             * position n_tokens + j - 1 drafts token n_tokens + j */
            md->items[n_next] =
                (model_mtp_item){st->seq, &st->drafts[j - 1], 1, r->n_tokens + j - 1, 1};
            md->item_of[n_next++] = i;
        }
        n_items = n_next;
        if (n_items == 0) break;
        if (model_mtp_forward_batch(md->m, md->items, n_items, md->hidden, md->logits, md->out,
                                    NULL) != DI_OK)
            break;
        for (int k = 0; k < n_items; k++) {
            int i = md->item_of[k];
            draw(md, &reqs[i], *reqs[i].state, j, md->logits + (size_t)k * V);
        }
    }
}

static void mtp_destroy(drafter *d)
{
    mtp_drafter *md = (mtp_drafter *)d;
    if (!md) return;
    free(md->items);
    free(md->item_of);
    free(md->active);
    free(md->hidden);
    free(md->out);
    free(md->logits);
    free(md->tokens);
    free(md->scratch);
    free(md);
}

static const drafter_ops mtp_ops = {"mtp", mtp_propose, mtp_observe, mtp_release, mtp_destroy};

di_status drafter_mtp_create(model *m, int max_running, drafter **out)
{
    *out = NULL;
    if (model_mtp_layers(m) < 1) return DI_ERR_UNSUPPORTED;
    mtp_drafter *md = calloc(1, sizeof *md);
    if (!md) return DI_ERR_OUT_OF_MEMORY;
    md->base.ops = &mtp_ops;
    md->base.gives_q = 1;
    md->m = m;
    md->n_vocab = (int32_t)model_get_config(m)->n_vocab;
    md->n_embd = model_mtp_hidden_width(m); /* (hc_mult x n_embd for DeepSeek-V4) */
    md->n_batch = model_n_batch(m);
    md->max_running = max_running;
    size_t mr = (size_t)max_running, nb = (size_t)md->n_batch, E = (size_t)md->n_embd;
    size_t rows = nb > mr ? nb : mr;
    md->items = calloc(mr, sizeof *md->items);
    md->item_of = calloc(mr, sizeof *md->item_of);
    md->active = calloc(mr, sizeof *md->active);
    md->hidden = malloc(rows * E * sizeof *md->hidden);
    md->out = malloc(mr * E * sizeof *md->out);
    md->logits = malloc(mr * (size_t)md->n_vocab * sizeof *md->logits);
    md->tokens = malloc(nb * sizeof *md->tokens);
    md->scratch = malloc(sampler_scratch_count(md->n_vocab) * sizeof *md->scratch);
    if (!md->items || !md->item_of || !md->active || !md->hidden || !md->out || !md->logits ||
        !md->tokens || !md->scratch) {
        mtp_destroy(&md->base);
        return DI_ERR_OUT_OF_MEMORY;
    }
    *out = &md->base;
    return DI_OK;
}
