/* The draft-model drafter (draft.h): a second, smaller model sharing the
 * target's tokenizer runs ahead of each decoding request, as llama.cpp's
 * draft-model speculation (common/speculative.cpp) and vLLM's draft-model
 * speculative decoding do.
 *
 * Each request has its own sequence in the draft model's KV cache, holding
 * the request's tokens it has computed and the drafts it fed after them. A
 * step of the engine first catches each sequence up: what the draft KV holds
 * that the request kept (its accepted drafts) stays; the rest is cut off
 * (model_seq_truncate) and the request's new tokens are computed, every
 * request's in one batched forward pass (chunked to the draft model's
 * n_batch). Then up to `max` drafts are drawn one position at a time, every
 * request's position in one batched pass:
 *   - at temperature 0, the draft model's argmax (a point-mass draft: the
 *     verifier keeps it when it is the target's argmax, so the output is the
 *     target's greedy output); its confidence is the draft model's
 *     probability of it;
 *   - at temperature > 0, a sample from q, the draft model's distribution
 *     after the request's temperature, top-k, top-p and min-p (not its
 *     penalties, bias or grammar: q may be any distribution), with a seeded
 *     RNG of its own (the request's seed, mixed); q is handed to the verifier
 *     (min(1, p/q), sampler_verify) and its value at the draft is the
 *     confidence.
 * A request whose draft sequence cannot get KV room (the draft cache is
 * full) drafts nothing that step and gives its draft blocks back. */
#include <stdlib.h>
#include <string.h>

#include "engine/draft.h"
#include "model/model.h"

enum { DRAFT_MODEL_MAX = 64 }; /* drafts per step at most (speculative_tokens' bound) */

typedef struct dm_state {
    model_seq *seq;
    int64_t base;                    /* the request's tokens the draft KV holds */
    int32_t drafts[DRAFT_MODEL_MAX]; /* the drafts after them; the KV holds n_past - base */
    sampler *smp;                    /* temperature > 0: the drafts' sampler; else NULL */
} dm_state;

typedef struct dm_drafter {
    drafter base;
    model *m; /* owned */
    int32_t n_vocab;
    int max_running;
    model_batch_item *items; /* [max_running] */
    int *item_of;            /* [max_running]: the request of each item */
    int64_t *next;           /* [max_running]: each request's next token to compute */
    int *active;             /* [max_running] */
    float *logits;           /* [max_running, n_vocab] */
    sampler_candidate *scratch;
} dm_drafter;

static void dm_release(drafter *d, void *state)
{
    dm_drafter *dm = (dm_drafter *)d;
    dm_state *st = state;
    if (!st) return;
    if (st->seq) model_seq_free(dm->m, st->seq);
    sampler_free(st->smp);
    free(st);
}

/* r's state, created the first time (NULL when out of memory). */
static dm_state *state_of(dm_drafter *dm, draft_request *r)
{
    if (*r->state) return *r->state;
    dm_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    if (model_seq_create(dm->m, &st->seq) != DI_OK) {
        free(st);
        return NULL;
    }
    if (draft_sampler_create(r->smp, dm->n_vocab, 0xd1b54a32d192ed03ull, &st->smp) != DI_OK) {
        dm_release(&dm->base, st);
        return NULL;
    }
    *r->state = st;
    return st;
}

/* Draw request r's draft j from its logits row (modified). */
static void draw_draft(dm_drafter *dm, draft_request *r, dm_state *st, int j, float *row)
{
    float conf;
    int32_t x =
        draft_pick(row, dm->n_vocab, st->smp, dm->scratch,
                   st->smp ? r->q + (size_t)j * (size_t)dm->n_vocab : NULL, &conf, r->n_tokens + j);
    if (st->smp) r->has_q = 1;
    r->out[j] = x;
    r->conf[j] = conf;
    st->drafts[j] = x;
    r->n = j + 1;
}

/* Request i drafts nothing more this step; when `reset`, its draft KV is
 * dropped (a failure left it unknown, or its room is needed). */
static void stop(dm_drafter *dm, draft_request *reqs, int i, int reset)
{
    dm->active[i] = 0;
    dm_state *st = *reqs[i].state;
    if (reset && st) {
        model_seq_reset(dm->m, st->seq);
        st->base = 0;
    }
}

static void dm_propose(drafter *d, draft_request *reqs, int n)
{
    dm_drafter *dm = (dm_drafter *)d;
    if (n > dm->max_running) n = dm->max_running; /* cannot happen: one per running request */
    for (int i = 0; i < n; i++) {
        draft_request *r = &reqs[i];
        r->n = 0;
        r->has_q = 0;
        dm->active[i] = 0;
        if (r->max > DRAFT_MODEL_MAX) r->max = DRAFT_MODEL_MAX;
        dm_state *st = state_of(dm, r);
        if (!st || r->max < 1) continue;
        if (st->smp && !r->q) continue; /* no room for q: no sampled drafts */
        /* What the draft KV holds that the request kept stays; at least the
         * last token is computed again (its logits give the first draft). */
        int64_t n_kv = model_seq_n_past(st->seq), c = st->base;
        if (c > r->n_tokens) c = 0; /* cannot happen: tokens only grow */
        while (c < n_kv && c < r->n_tokens && r->tokens[c] == st->drafts[c - st->base]) c++;
        if (c > r->n_tokens - 1) c = r->n_tokens - 1;
        if (c < n_kv) model_seq_truncate(dm->m, st->seq, c);
        st->base = c;
        if (model_seq_n_past(st->seq) != c ||
            model_seq_reserve(dm->m, st->seq, r->n_tokens + r->max - 1) != DI_OK) {
            stop(dm, reqs, i, 1);
            continue;
        }
        dm->next[i] = c;
        dm->active[i] = 1;
    }
    /* Catch up: every request's tokens the draft KV lacks, in batched passes
     * of at most n_batch tokens. */
    const int64_t n_batch = model_n_batch(dm->m);
    for (;;) {
        int n_items = 0;
        int64_t budget = n_batch;
        for (int i = 0; i < n && budget > 0; i++) {
            if (!dm->active[i] || dm->next[i] >= reqs[i].n_tokens) continue;
            int64_t left = reqs[i].n_tokens - dm->next[i], take = left < budget ? left : budget;
            dm_state *st = *reqs[i].state;
            dm->items[n_items] =
                (model_batch_item){st->seq, reqs[i].tokens + dm->next[i], take, take == left};
            dm->item_of[n_items++] = i;
            budget -= take;
        }
        if (n_items == 0) break;
        if (model_forward_batch(dm->m, dm->items, n_items, dm->logits, NULL) != DI_OK) {
            for (int k = 0; k < n_items; k++) stop(dm, reqs, dm->item_of[k], 1);
            continue;
        }
        int row = 0;
        for (int k = 0; k < n_items; k++) {
            int i = dm->item_of[k];
            dm->next[i] += dm->items[k].n_tokens;
            if (dm->items[k].want_logits) {
                dm_state *st = *reqs[i].state;
                st->base = reqs[i].n_tokens;
                draw_draft(dm, &reqs[i], st, 0, dm->logits + (size_t)row++ * (size_t)dm->n_vocab);
            }
        }
    }
    /* Draft j + 1 from draft j, every request's in one pass. */
    for (int j = 1;; j++) {
        int n_items = 0;
        for (int i = 0; i < n; i++) {
            if (!dm->active[i] || reqs[i].n != j || j >= reqs[i].max) continue;
            dm_state *st = *reqs[i].state;
            dm->items[n_items] = (model_batch_item){st->seq, &st->drafts[j - 1], 1, 1};
            dm->item_of[n_items++] = i;
        }
        if (n_items == 0) break;
        if (model_forward_batch(dm->m, dm->items, n_items, dm->logits, NULL) != DI_OK) {
            for (int k = 0; k < n_items; k++) stop(dm, reqs, dm->item_of[k], 1);
            break;
        }
        for (int k = 0; k < n_items; k++) {
            int i = dm->item_of[k];
            draw_draft(dm, &reqs[i], *reqs[i].state, j,
                       dm->logits + (size_t)k * (size_t)dm->n_vocab);
        }
    }
}

static void dm_destroy(drafter *d)
{
    dm_drafter *dm = (dm_drafter *)d;
    if (!dm) return;
    model_free(dm->m);
    free(dm->items);
    free(dm->item_of);
    free(dm->next);
    free(dm->active);
    free(dm->logits);
    free(dm->scratch);
    free(dm);
}

static const drafter_ops dm_ops = {"draft-model", dm_propose, NULL, dm_release, dm_destroy};

di_status drafter_model_create(model *m, int max_running, drafter **out)
{
    *out = NULL;
    dm_drafter *dm = calloc(1, sizeof *dm);
    if (!dm) {
        model_free(m);
        return DI_ERR_OUT_OF_MEMORY;
    }
    dm->base.ops = &dm_ops;
    dm->base.gives_q = 1;
    dm->m = m;
    dm->n_vocab = (int32_t)model_get_config(m)->n_vocab;
    dm->max_running = max_running;
    size_t mr = (size_t)max_running;
    dm->items = calloc(mr, sizeof *dm->items);
    dm->item_of = calloc(mr, sizeof *dm->item_of);
    dm->next = calloc(mr, sizeof *dm->next);
    dm->active = calloc(mr, sizeof *dm->active);
    dm->logits = malloc(mr * (size_t)dm->n_vocab * sizeof *dm->logits);
    dm->scratch = malloc(sampler_scratch_count(dm->n_vocab) * sizeof *dm->scratch);
    if (!dm->items || !dm->item_of || !dm->next || !dm->active || !dm->logits || !dm->scratch) {
        dm_destroy(&dm->base);
        return DI_ERR_OUT_OF_MEMORY;
    }
    *out = &dm->base;
    return DI_OK;
}
