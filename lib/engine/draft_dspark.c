/* The DSpark drafter (draft.h): DeepSeek-V4's DSpark head drafts a block of
 * tokens for the model it belongs to in one pass (model.h's model_dspark_*,
 * as llama.cpp's draft-dspark speculation: common/speculative.cpp).
 *
 * Each request has a DSpark sequence holding one key per stage for each of
 * its target tokens from position `start` on:
 *   - observe, after every target step, appends the features of the rows the
 *     request kept (a prompt chunk's, a verified item's up to its last kept
 *     draft; model_dspark_features, the step's rows), every kept row in
 *     order. The target computes the features of every token but the last
 *     (the token sampled from the last row), which is the next block's
 *     anchor. A sequence whose rows do not continue where it ended (a
 *     restarted or pre-empted request) starts over at the observed position:
 *     its keys are RoPE'd at their places in the sequence, so a later start
 *     shifts every position alike (the window attends to the same offsets).
 *   - propose runs one block per request (every request's in one batched
 *     pass): the anchor and the noise tokens, whose rows give the Markov
 *     head's logits. At temperature 0 the drafts are the Markov chain's
 *     argmaxes (llama.cpp's in-graph chain), each with the confidence head's
 *     acceptance probability as its confidence; at temperature > 0 each row
 *     is sampled after the request's temperature, top-k, top-p and min-p with
 *     an RNG of its own seeded from the request's seed (q handed to the
 *     verifier, confidence q(draft)), as draft_mtp.c does. The block writes
 *     its keys past the sequence's end; the next observe overwrites them.
 * A request whose sequence finds no room drafts nothing until its next
 * observation restarts it. Random weights (the test fixtures) make the
 * drafts' acceptance meaningless; the output is exact whatever they are (the
 * verifier's rule). */
#include <stdlib.h>
#include <string.h>

#include "engine/draft.h"
#include "model/model.h"

typedef struct dspark_state {
    model_seq *seq; /* keys of target positions start, start + 1, ... */
    int64_t start;
    sampler *smp; /* temperature > 0: the drafts' sampler; else NULL */
} dspark_state;

typedef struct dspark_drafter {
    drafter base;
    model *m; /* the target (borrowed) */
    int32_t n_vocab;
    int block;
    int64_t width;
    int max_running;
    model_seq **seqs;  /* [max_running] */
    int32_t *anchors;  /* [max_running] */
    int *item_of;      /* [max_running]: the request of each item */
    float *logits;     /* [max_running x block, n_vocab] */
    float *confidence; /* [max_running x block] */
    int32_t *drafts;   /* [max_running x block] */
    sampler_candidate *scratch;
} dspark_drafter;

static void dspark_release(drafter *d, void *state)
{
    dspark_drafter *dd = (dspark_drafter *)d;
    dspark_state *st = state;
    if (!st) return;
    model_dspark_seq_free(dd->m, st->seq);
    sampler_free(st->smp);
    free(st);
}

/* The request's state, created the first time (NULL when out of memory). */
static dspark_state *state_of(dspark_drafter *dd, void **state, const sampler *smp)
{
    if (*state) return *state;
    dspark_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    if (model_dspark_seq_create(dd->m, &st->seq) != DI_OK) {
        dspark_release(&dd->base, st);
        return NULL;
    }
    if (draft_sampler_create(smp, dd->n_vocab, 0x5bd1e9955bd1e995ull, &st->smp) != DI_OK) {
        dspark_release(&dd->base, st);
        return NULL;
    }
    *state = st;
    return st;
}

static void dspark_observe(drafter *d, const draft_observation *obs, int n, const float *features)
{
    dspark_drafter *dd = (dspark_drafter *)d;
    for (int i = 0; i < n; i++) {
        const draft_observation *o = &obs[i];
        if (o->n_kept < 1) continue;
        dspark_state *st = state_of(dd, o->state, o->smp);
        if (!st) continue;
        if (st->start + model_seq_n_past(st->seq) != o->pos0) {
            model_dspark_seq_truncate(dd->m, st->seq, 0);
            st->start = o->pos0;
        }
        if (model_dspark_inject(dd->m, st->seq, features + o->row0 * dd->width, o->n_kept, NULL) !=
            DI_OK) {
            model_dspark_seq_truncate(dd->m, st->seq, 0);
            st->start = -1; /* (no position matches: the next observation restarts it) */
        }
    }
}

static void dspark_propose(drafter *d, draft_request *reqs, int n)
{
    dspark_drafter *dd = (dspark_drafter *)d;
    const size_t V = (size_t)dd->n_vocab;
    int n_items = 0;
    for (int i = 0; i < n && n_items < dd->max_running; i++) {
        draft_request *r = &reqs[i];
        r->n = 0;
        r->has_q = 0;
        dspark_state *st = *r->state;
        /* the sequence must hold every token but the last, the anchor */
        if (!st || st->start < 0 || st->start + model_seq_n_past(st->seq) != r->n_tokens - 1 ||
            r->max < 1)
            continue;
        if (st->smp && !r->q) continue; /* no room for q: no sampled drafts */
        /* (a sequence without room for its block drafts nothing; the others do) */
        if (model_dspark_reserve(dd->m, st->seq, NULL) != DI_OK) continue;
        dd->seqs[n_items] = st->seq;
        dd->anchors[n_items] = r->tokens[r->n_tokens - 1];
        dd->item_of[n_items++] = i;
    }
    if (n_items == 0 || model_dspark_draft(dd->m, dd->seqs, dd->anchors, n_items, dd->logits,
                                           dd->confidence, dd->drafts, NULL) != DI_OK)
        return;
    for (int k = 0; k < n_items; k++) {
        draft_request *r = &reqs[dd->item_of[k]];
        dspark_state *st = *r->state;
        const int max = r->max < dd->block ? r->max : dd->block;
        for (int j = 0; j < max; j++) {
            const size_t row = (size_t)k * (size_t)dd->block + (size_t)j;
            if (st->smp) {
                float conf;
                r->out[j] = draft_pick(dd->logits + row * V, dd->n_vocab, st->smp, dd->scratch,
                                       r->q + (size_t)j * V, &conf, r->n_tokens + j);
                r->conf[j] = conf;
                r->has_q = 1;
            } else {
                r->out[j] = dd->drafts[row];
                r->conf[j] = dd->confidence[row];
            }
            r->n = j + 1;
        }
    }
}

static void dspark_destroy(drafter *d)
{
    dspark_drafter *dd = (dspark_drafter *)d;
    if (!dd) return;
    free(dd->seqs);
    free(dd->anchors);
    free(dd->item_of);
    free(dd->logits);
    free(dd->confidence);
    free(dd->drafts);
    free(dd->scratch);
    free(dd);
}

static const drafter_ops dspark_ops = {"dspark", dspark_propose, dspark_observe, dspark_release,
                                       dspark_destroy};

di_status drafter_dspark_create(model *m, int max_running, drafter **out)
{
    *out = NULL;
    if (model_dspark_block(m) < 1) return DI_ERR_UNSUPPORTED;
    if (model_dspark_block(m) > model_n_batch(m)) return DI_ERR_INVALID_ARGUMENT;
    dspark_drafter *dd = calloc(1, sizeof *dd);
    if (!dd) return DI_ERR_OUT_OF_MEMORY;
    dd->base.ops = &dspark_ops;
    dd->base.gives_q = 1;
    dd->m = m;
    dd->n_vocab = (int32_t)model_get_config(m)->n_vocab;
    dd->block = model_dspark_block(m);
    dd->width = model_dspark_feature_width(m);
    dd->max_running = max_running;
    const size_t mr = (size_t)max_running, rows = mr * (size_t)dd->block;
    dd->seqs = calloc(mr, sizeof(model_seq *));
    dd->anchors = calloc(mr, sizeof *dd->anchors);
    dd->item_of = calloc(mr, sizeof *dd->item_of);
    dd->logits = malloc(rows * (size_t)dd->n_vocab * sizeof *dd->logits);
    dd->confidence = malloc(rows * sizeof *dd->confidence);
    dd->drafts = malloc(rows * sizeof *dd->drafts);
    dd->scratch = malloc(sampler_scratch_count(dd->n_vocab) * sizeof *dd->scratch);
    if (!dd->seqs || !dd->anchors || !dd->item_of || !dd->logits || !dd->confidence ||
        !dd->drafts || !dd->scratch) {
        dspark_destroy(&dd->base);
        return DI_ERR_OUT_OF_MEMORY;
    }
    *out = &dd->base;
    return DI_OK;
}
