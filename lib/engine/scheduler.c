/* The continuous-batching scheduler (scheduler.h). */
#include "engine/scheduler.h"

#include <time.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/draft.h"
#include "engine/kv_tiers.h"
#include "util/thread.h"

struct sched {
    model *m;
    int max_running;
    int prefix_cache; /* 1: requests share computed prompt prefixes */
    kv_tiers *tiers;  /* the host and disk tiers, or NULL */
    void *block_buf;  /* one block's contents (restores) */
    int restoring;    /* the last step stopped admission to wait on restores */
    sched_sink sink;
    int32_t n_vocab;
    int64_t n_ctx;
    pthread_t thread;
    int thread_started;
    /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int closing;
    uint64_t next_id;
    sched_request *live; /* every request submitted and not yet ended */
    sched_request **incoming;
    size_t n_incoming, cap_incoming;
    sched_kv_stats stats; /* the KV cache's counts, as publish_stats last wrote them */
    /* the worker's own */
    sched_request **waiting; /* [0] is the front */
    size_t n_waiting, cap_waiting;
    sched_request **running; /* [max_running], in admission order */
    int n_running;
    uint64_t admit_counter;
    int64_t prefix_queries, prefix_hits; /* tokens looked up in the prefix cache, found */
    int64_t prefill_tokens;              /* prompt tokens computed */
    model_batch_item *items;             /* [max_running] */
    int n_building;                      /* items of the step being built (0 once computed) */
    sched_request **item_req;
    float *logits;              /* [max_running * (1 + n_draft), n_vocab] */
    sampler_candidate *scratch; /* the samplers' shared scratch */
    /* speculative decoding: draft tokens verified per request and step at most
     * (0: off), and each item's verified output of the step */
    int n_draft, draft_fixed;
    drafter *drafter;      /* owned; NULL when off */
    draft_profile profile; /* step time against tokens per step (draft_allocate) */
    draft_accept accept;   /* every request's drafts' acceptance (draft_gains) */
    uint64_t n_steps;
    int *avail, *k_plan; /* [max_running]: draft_allocate's arguments */
    double *gain;        /* [max_running, n_draft] */
    float *conf;         /* [max_running, n_draft]: the drafter's confidences */
    draft_request *dreq; /* [max_running]: this step's decoding requests */
    sched_request **dreq_r;
    draft_observation *obs; /* [max_running]: the step's items, for drafter observe */
    int32_t *obs_next;      /* [n_batch]: the token after each kept row */
    int32_t *emit;          /* [max_running, 1 + n_draft] */
    /* the emitted tokens' log probabilities, for requests that want them:
     * [max_running, 1 + n_draft] (+ SCHED_MAX_TOP alternatives each), and a
     * copy of the raw logits row being sampled ([n_vocab]) */
    float *emit_lp, *emit_top, *raw_row;
    int32_t *emit_top_ids;
    int *n_emit;        /* [max_running] */
    di_status *item_st; /* [max_running]: DI_OK, or why the item's request fails */
};

void sched_request_free(sched_request *r)
{
    if (!r) return;
    free(r->tokens);
    free(r->stop_ids);
    free(r->keys);
    free(r->q);
    free(r->draft_tok);
    free(r->draft_cls);
    free(r->followers);
    sampler_free(r->smp);
    free(r);
}

static void logf_(sched *s, di_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#include <stdarg.h>
static void logf_(sched *s, di_log_level level, const char *fmt, ...)
{
    if (!s->sink.log) return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->sink.log(s->sink.ctx, level, msg);
}

static void unlink_live(sched *s, sched_request *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        s->live = r->next;
    if (r->next) r->next->prev = r->prev;
    r->next = r->prev = NULL;
}

/* Free r's drafter state (its draft KV, for a draft model). */
static void release_draft(sched *s, sched_request *r)
{
    if (r->draft_state && s->drafter) s->drafter->ops->release(s->drafter, r->draft_state);
    r->draft_state = NULL;
}

static void remove_worker_lists(sched *s, sched_request *r)
{
    release_draft(s, r);
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == r) {
            memmove(&s->running[i], &s->running[i + 1],
                    (size_t)(s->n_running - i - 1) * sizeof(sched_request *));
            s->n_running--;
            break;
        }
    for (size_t i = 0; i < s->n_waiting; i++)
        if (s->waiting[i] == r) {
            memmove(&s->waiting[i], &s->waiting[i + 1],
                    (s->n_waiting - i - 1) * sizeof(sched_request *));
            s->n_waiting--;
            break;
        }
    if (r->seq) {
        model_seq_free(s->m, r->seq);
        r->seq = NULL;
    }
    r->running = 0;
}

/* Publish the KV cache's counts (sched_kv_stats) for readers on other
 * threads. The items of a step being built count their tokens as held (their
 * blocks are reserved). */
static void publish_stats(sched *s)
{
    model *m = s->m;
    sched_kv_stats k = {0};
    int32_t avail = model_kv_blocks_free(m); /* free or cached */
    k.blocks_total = model_kv_blocks_total(m);
    k.blocks_cached = model_kv_blocks_cached(m);
    k.blocks_free = avail - k.blocks_cached;
    k.blocks_used = k.blocks_total - avail;
    for (int i = 0; i < s->n_running; i++) k.tokens_used += model_seq_n_past(s->running[i]->seq);
    for (int i = 0; i < s->n_building; i++) k.tokens_used += s->items[i].n_tokens;
    k.running_requests = s->n_running;
    k.prefix_queries = s->prefix_queries;
    k.prefix_hits = s->prefix_hits;
    k.blocks_evicted = model_kv_blocks_evicted(m);
    k.prefill_tokens = s->prefill_tokens;
    pthread_mutex_lock(&s->mu);
    s->stats = k;
    pthread_mutex_unlock(&s->mu);
}

void sched_kv_stats_get(sched *s, sched_kv_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

static int push_waiting(sched *s, sched_request *r, int front);
static void retire(sched *s, sched_request *r, di_finish finish, di_status st, const char *msg,
                   int unlinked);

/* A choice of a Chat `n` request ending: a follower not yet forked leaves its
 * leader's list; a leader ending before its prompt was computed (cancelled,
 * failed) leaves its followers to go on alone — queued like any request,
 * each computing its prompt itself (or ending at once, when cancelled too). */
static void detach_choices(sched *s, sched_request *r)
{
    sched_request *lead = r->fork_of;
    if (lead) {
        for (int i = 0; i < lead->n_followers; i++)
            if (lead->followers[i] == r) {
                memmove(&lead->followers[i], &lead->followers[i + 1],
                        (size_t)(lead->n_followers - i - 1) * sizeof(sched_request *));
                lead->n_followers--;
                break;
            }
        r->fork_of = NULL;
    }
    int n = r->n_followers;
    r->n_followers = 0;
    for (int i = 0; i < n; i++) {
        sched_request *f = r->followers[i];
        f->fork_of = NULL;
        if (push_waiting(s, f, 0) != 0)
            retire(s, f, 0, DI_ERR_OUT_OF_MEMORY, "out of memory queueing a choice", 0);
    }
}

/* End r (already unlinked from the live list when `unlinked`). */
static void retire(sched *s, sched_request *r, di_finish finish, di_status st, const char *msg,
                   int unlinked)
{
    if (!unlinked) {
        pthread_mutex_lock(&s->mu);
        unlink_live(s, r);
        /* A cancel that di_cancel accepted wins over an end reached in the same
         * step: the host was told the request is being cancelled. */
        if (r->cancel && st == DI_OK) {
            st = DI_ERR_CANCELLED;
            msg = "cancelled by di_cancel";
        }
        pthread_mutex_unlock(&s->mu);
    }
    remove_worker_lists(s, r);
    detach_choices(s, r);
    publish_stats(s);                    /* before the host can see r's end */
    if (r->restore_since_ns && s->tiers) /* it ended while waiting on restores */
        kv_tiers_forget(s->tiers, r->keys, (size_t)r->n_keys);
    s->sink.on_done(s->sink.ctx, r, st == DI_OK ? finish : (di_finish)0, st, msg ? msg : "");
    sched_request_free(r);
}

/* Queue r under s->mu: DI_OK, or DI_ERR_INVALID_STATE / DI_ERR_OUT_OF_MEMORY
 * (r not taken). */
static di_status submit_locked(sched *s, sched_request *r)
{
    if (s->closing) return DI_ERR_INVALID_STATE;
    if (s->n_incoming == s->cap_incoming) {
        size_t cap = s->cap_incoming ? 2 * s->cap_incoming : 16;
        sched_request **p = realloc(s->incoming, cap * sizeof(sched_request *));
        if (!p) return DI_ERR_OUT_OF_MEMORY;
        s->incoming = p;
        s->cap_incoming = cap;
    }
    r->id = ++s->next_id;
    r->n_all = r->n_prompt;
    r->next = s->live;
    r->prev = NULL;
    if (s->live) s->live->prev = r;
    s->live = r;
    s->incoming[s->n_incoming++] = r;
    pthread_cond_signal(&s->cv);
    return DI_OK;
}

di_status sched_submit(sched *s, sched_request *r, uint64_t *id)
{
    pthread_mutex_lock(&s->mu);
    di_status st = submit_locked(s, r);
    if (st == DI_OK) *id = r->id;
    pthread_mutex_unlock(&s->mu);
    return st;
}

di_status sched_submit_group(sched *s, sched_request **rs, int n, uint64_t *id)
{
    sched_request *lead = rs[0];
    if (!(lead->followers = malloc((size_t)(n - 1) * sizeof(sched_request *))))
        return DI_ERR_OUT_OF_MEMORY;
    /* one lock: the worker never sees the leader without its followers */
    pthread_mutex_lock(&s->mu);
    di_status st = submit_locked(s, lead);
    if (st != DI_OK) {
        pthread_mutex_unlock(&s->mu);
        free(lead->followers);
        lead->followers = NULL;
        return st;
    }
    for (int i = 1; i < n; i++) {
        sched_request *f = rs[i];
        f->id = lead->id;
        f->choice = i;
        f->n_all = f->n_prompt;
        f->fork_of = lead;
        lead->followers[lead->n_followers++] = f;
        f->next = s->live;
        f->prev = NULL;
        s->live->prev = f;
        s->live = f;
    }
    *id = lead->id;
    pthread_mutex_unlock(&s->mu);
    return DI_OK;
}

di_status sched_cancel(sched *s, uint64_t id)
{
    di_status st = DI_ERR_INVALID_STATE;
    pthread_mutex_lock(&s->mu);
    if (id == 0 || id > s->next_id) {
        st = DI_ERR_NOT_FOUND;
    } else if (!s->closing) {
        for (sched_request *r = s->live; r; r = r->next)
            if (r->id == id) {
                r->cancel = 1; /* every choice of the request */
                st = DI_OK;
                pthread_cond_signal(&s->cv);
            }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

static int push_waiting(sched *s, sched_request *r, int front)
{
    if (s->n_waiting == s->cap_waiting) {
        size_t cap = s->cap_waiting ? 2 * s->cap_waiting : 16;
        sched_request **p = realloc(s->waiting, cap * sizeof(sched_request *));
        if (!p) return -1;
        s->waiting = p;
        s->cap_waiting = cap;
    }
    if (front) {
        memmove(&s->waiting[1], &s->waiting[0], s->n_waiting * sizeof(sched_request *));
        s->waiting[0] = r;
    } else {
        s->waiting[s->n_waiting] = r;
    }
    s->n_waiting++;
    return 0;
}

/* The tokens r computes before it decodes: all of them, or, for a
 * pre-empted request with output being recomputed, all but the last, which
 * its next decode step takes (with its drafts) as the step after the
 * pre-emption would have — so a seeded request's sampled drafts give the
 * same tokens pre-empted or not (the last token sampled at the end of the
 * recompute would be a plain draw where the other run verifies a draft). */
static int64_t compute_target(const sched_request *r)
{
    return r->recomputing && r->n_all > r->n_prompt ? r->n_all - 1 : r->n_all;
}

/* Give r's blocks back and queue it at the front, to be recomputed. */
static void preempt(sched *s, sched_request *r)
{
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == r) {
            memmove(&s->running[i], &s->running[i + 1],
                    (size_t)(s->n_running - i - 1) * sizeof(sched_request *));
            s->n_running--;
            break;
        }
    model_seq_free(s->m, r->seq);
    r->seq = NULL;
    r->running = 0;
    r->recomputing = 1;
    release_draft(s, r);
    /* The waiting array has room: it never holds more than every live request,
     * and a failed push would lose r, so grow it first. */
    if (push_waiting(s, r, 1) != 0) {
        retire(s, r, 0, DI_ERR_OUT_OF_MEMORY, "out of memory re-queueing a pre-empted request", 0);
        return;
    }
    logf_(s, DI_LOG_INFO, "request %llu pre-empted (KV cache full); it will be recomputed",
          (unsigned long long)r->id);
}

static int find_item(sched *s, int n_items, const sched_request *r)
{
    for (int i = 0; i < n_items; i++)
        if (s->item_req[i] == r) return i;
    return -1;
}

/* 1 when every logit is a finite number (NaN or infinity come from corrupt
 * weights; sampling over them would pick a meaningless token). */
static int all_finite(const float *v, int64_t n)
{
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= isfinite(v[i]) != 0;
    return ok;
}

static int is_stop(const sched_request *r, int32_t tok)
{
    for (size_t i = 0; i < r->n_stop; i++)
        if (r->stop_ids[i] == tok) return 1;
    return 0;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The tiers' part of admitting r: the prompt blocks after those the working
 * cache keeps, as far as the tiers hold them, are fetched and, once ready,
 * adopted into the cache as cached blocks (admission then matches them).
 * Returns 1 when r can be admitted now, 0 while a restore is pending (for at
 * most 2 s; then r goes on without the blocks still missing). */
static int restore(sched *s, sched_request *r)
{
    model *m = s->m;
    int64_t n_blocks = (r->n_all - 1) / MODEL_KV_BLOCK;
    if (n_blocks <= 0) return 1;
    if (!r->keys || r->n_keys != n_blocks) {
        uint64_t *k = realloc(r->keys, (size_t)n_blocks * sizeof *k);
        if (!k) return 1;
        r->keys = k;
        r->n_keys = n_blocks;
        model_prefix_keys(m, r->tokens, n_blocks, r->keys);
    }
    int64_t i = model_prefix_probe(m, r->tokens, r->n_all - 1, NULL) / MODEL_KV_BLOCK;
    int pending = 0;
    int64_t j = i;
    for (; j < n_blocks; j++) {
        if (model_prefix_has(m, r->keys[j])) continue;
        int got = kv_tiers_take(s->tiers, r->keys[j], s->block_buf);
        if (got == 1) {
            if (model_kv_adopt(m, r->keys[j], s->block_buf) != 0) break;
            continue;
        }
        if (got == 0) {
            pending = 1;
            break;
        }
        /* Not fetched (or it failed): the first time, fetch this block and
         * every following one the tiers hold; after that, go on without. */
        if (r->restore_since_ns || !kv_tiers_has(s->tiers, r->keys[j])) break;
        for (int64_t k = j; k < n_blocks && (k == j || kv_tiers_has(s->tiers, r->keys[k])); k++)
            kv_tiers_fetch(s->tiers, r->keys[k]);
        pending = 1;
        break;
    }
    if (pending && !r->restore_since_ns) r->restore_since_ns = now_ns();
    if (pending && now_ns() - r->restore_since_ns > 2000000000LL) {
        logf_(s, DI_LOG_WARN, "request %llu: the prefix cache's restores took over 2 s; computing",
              (unsigned long long)r->id);
        pending = 0;
    }
    if (pending) return 0;
    /* Done waiting: what it fetched and did not take is dropped. */
    if (r->restore_since_ns && j < n_blocks)
        kv_tiers_forget(s->tiers, r->keys + j, (size_t)(n_blocks - j));
    r->restore_since_ns = 0;
    return 1;
}

/* Prepare decoding request r's drafter call: at most n_draft drafts and
 * n_batch - 1, and never past its max_tokens or the context (the step's last token must be one
 * the request may still emit), written after its tokens (r->tokens[n_all,
 * n_all + k)) without counting them. Returns 0 when it may draft (dr filled;
 * conf is the caller's), -1 when not. */
static int prepare_draft(sched *s, sched_request *r, draft_request *dr, float *conf)
{
    r->n_proposed = r->k_step = 0;
    r->has_q = 0;
    int64_t k = s->n_draft;
    /* a step holds n_batch tokens: the request's own and its drafts (a fixed
     * plan verifies all of them or none, so more would never be verified) */
    if (k > model_n_batch(s->m) - 1) k = model_n_batch(s->m) - 1;
    int64_t left = r->max_tokens - (r->n_all - r->n_prompt) - 1;
    if (k > left) k = left;
    if (k > s->n_ctx - r->n_all - 1) k = s->n_ctx - r->n_all - 1;
    if (k <= 0) return -1;
    /* Sampled drafts change which random draw a position gets (a different
     * draw of the same distribution): they are proposed only at a request's
     * own decode steps — not for a prompt's last token (whether it is computed
     * alone depends on how the batch chunked the prompt); a pre-empted
     * request's recompute stops before its last token (compute_target), whose
     * decode step drafts again — so a seed gives the same tokens whatever the
     * batch. */
    if (s->drafter->gives_q && sampler_get_params(r->smp)->temperature > 0.0f &&
        r->n_all == r->n_prompt)
        return -1;
    if (r->n_all + k > r->cap) {
        int64_t cap = r->cap * 2 > r->n_all + k ? r->cap * 2 : r->n_all + k;
        if (cap > s->n_ctx) cap = s->n_ctx;
        int32_t *p = realloc(r->tokens, (size_t)cap * sizeof *p);
        if (!p) return -1; /* no drafts: the step goes on without them */
        r->tokens = p;
        r->cap = cap;
    }
    if (!r->draft_tok) {
        r->draft_tok = malloc((size_t)s->n_draft * sizeof *r->draft_tok);
        r->draft_cls = malloc((size_t)s->n_draft);
        if (!r->draft_tok || !r->draft_cls) {
            free(r->draft_tok);
            free(r->draft_cls);
            r->draft_tok = NULL;
            r->draft_cls = NULL;
            return -1;
        }
    }
    if (s->drafter->gives_q && !r->q && sampler_get_params(r->smp)->temperature > 0.0f) {
        r->q = malloc((size_t)s->n_draft * (size_t)s->n_vocab * sizeof *r->q);
        if (!r->q) return -1;
    }
    *dr = (draft_request){.tokens = r->tokens,
                          .n_tokens = r->n_all,
                          .max = (int)k,
                          .smp = r->smp,
                          .state = &r->draft_state,
                          .out = r->tokens + r->n_all,
                          .conf = conf,
                          .q = r->q};
    return 0;
}

/* This step's drafts: every decoding request's proposals, and how many each
 * verifies (draft_allocate: the expected tokens of draft_gains, from the
 * acceptance measure_drafts measured, against the step-time profile). Every
 * 16th step verifies one draft more than the plan, and every 16th after the
 * 8th none when the plan has some, so the profile keeps measuring the steps
 * next to the ones the plan chooses. */
static void plan_drafts(sched *s, int64_t budget)
{
    int n = 0;
    int64_t n_dec = 0, prefill = 0;
    const int stride = s->n_draft;
    for (int i = 0; i < s->n_running; i++) {
        sched_request *r = s->running[i];
        int64_t need = r->n_all - model_seq_n_past(r->seq);
        r->k_step = 0;
        r->n_proposed = 0;
        r->has_q = 0;
        if (need != 1) {
            prefill += need;
            continue;
        }
        n_dec++;
        if (prepare_draft(s, r, &s->dreq[n], s->conf + (size_t)n * (size_t)stride) != 0) continue;
        s->dreq_r[n++] = r;
    }
    if (n > 0) s->drafter->ops->propose(s->drafter, s->dreq, n);
    /* Each draft's gain: the probability that it and all before it are kept
     * (draft_gains: by its confidence class and how long the drafter has
     * been right, from the engine's and the request's measured acceptance,
     * the drafter's confidence before any). Sampled drafts (with q)
     * are all verified, as the budget allows: the draft model paid for them,
     * and a fixed plan keeps a seeded request's output independent of the
     * batch. */
    int n_sched = 0;
    for (int i = 0; i < n; i++) {
        sched_request *r = s->dreq_r[i];
        draft_request *dr = &s->dreq[i];
        r->n_proposed = dr->n;
        r->has_q = dr->has_q && dr->n > 0;
        s->avail[i] = r->has_q ? 0 : dr->n;
        if (dr->n == 0) r->draft_run = 0; /* no match: a new one starts afresh */
        draft_gains(&s->accept, &r->accept, dr->conf, dr->n, r->draft_run,
                    s->gain + (size_t)i * (size_t)stride);
        for (int j = 0; j < dr->n; j++) {
            r->draft_tok[j] = dr->out[j];
            r->draft_cls[j] = (unsigned char)draft_class(dr->conf[j]);
        }
        n_sched += s->avail[i] > 0;
    }
    int64_t base = n_dec + (prefill < budget - n_dec ? prefill : budget - n_dec);
    int64_t total = 0;
    if (s->draft_fixed) { /* every proposal, as the budget allows */
        for (int i = 0; i < n; i++) {
            s->k_plan[i] = total + s->avail[i] <= budget - n_dec ? s->avail[i] : 0;
            total += s->k_plan[i];
        }
    } else if (n_sched > 0) {
        total = draft_allocate(&s->profile, n, s->avail, s->gain, stride, base, (double)base,
                               budget - n_dec, s->k_plan);
    } else {
        for (int i = 0; i < n; i++) s->k_plan[i] = 0;
    }
    if (s->draft_fixed || n_sched == 0) {
        /* the plan is the proposals */
    } else if (s->n_steps % 16 == 0 && total < budget - n_dec) {
        /* measure one step longer than the plan: the most confident request
         * verifies one draft more */
        int best = -1;
        for (int i = 0; i < n; i++)
            if (s->k_plan[i] < s->avail[i] &&
                (best < 0 || s->gain[(size_t)i * (size_t)stride + (size_t)s->k_plan[i]] >
                                 s->gain[(size_t)best * (size_t)stride + (size_t)s->k_plan[best]]))
                best = i;
        if (best >= 0) s->k_plan[best]++;
    } else if (s->n_steps % 16 == 8 && total > 0) {
        for (int i = 0; i < n; i++) s->k_plan[i] = 0; /* and the plain one */
    }
    for (int i = 0; i < n; i++) {
        sched_request *r = s->dreq_r[i];
        if (r->has_q) { /* sampled drafts: all of them, as the budget allows */
            s->k_plan[i] = total + r->n_proposed <= budget - n_dec ? r->n_proposed : 0;
            total += s->k_plan[i];
        }
        r->k_step = s->k_plan[i];
    }
}

/* Measure the drafts of the step's decoding requests (draft_gains'
 * statistics): each emitted token against the proposal at its place, while
 * they agree. A point-mass draft (prompt lookup, greedy drafting) is kept
 * exactly when it equals the token the request emits there, so its proposals
 * that were not verified are measured too — against the token after the
 * last kept draft, a plain sample — and the statistics do not depend on how
 * many the plan verified: speculation the plan did not choose is still
 * observed. Sampled drafts are measured where verified. */
static void measure_drafts(sched *s, int n_items)
{
    for (int i = 0; i < n_items; i++) {
        sched_request *r = s->item_req[i];
        if (s->items[i].want_logits == 0 || r->n_proposed <= 0 || s->item_st[i] != DI_OK) continue;
        const int32_t *out = s->emit + (size_t)i * (size_t)(1 + s->n_draft);
        int n = r->has_q ? s->items[i].want_logits - 1 : r->n_proposed;
        for (int j = 0; j < n && j < s->n_emit[i]; j++) {
            int kept = out[j] == r->draft_tok[j];
            draft_accept_add(&s->accept, r->draft_cls[j], r->draft_run, kept);
            draft_accept_add(&r->accept, r->draft_cls[j], r->draft_run, kept);
            r->draft_run = kept ? r->draft_run + 1 : 0;
            if (!kept) break;
        }
    }
}

/* Requests of the running set still to get a decode item this step. */
static int64_t decoders_left(sched *s, int n_items, int from)
{
    int64_t n = 0;
    for (int i = from; i < s->n_running; i++) {
        sched_request *r = s->running[i];
        if (find_item(s, n_items, r) < 0 && r->n_all - model_seq_n_past(r->seq) == 1) n++;
    }
    return n;
}

/* The log-sum-exp of a raw logits row and its k most likely tokens (ids and
 * raw logits, most likely first; a tie goes to the lower id), for the log
 * probabilities OpenAI and vLLM report: log-softmax of the model's raw logits,
 * before logit_bias, penalties, temperature, the grammar mask and truncation.
 * Sums run in double. O(n_vocab * k). */
static double raw_lse_top(const float *logits, int32_t n_vocab, int k, int32_t *top_ids, float *top)
{
    float mx = logits[0];
    for (int32_t v = 1; v < n_vocab; v++)
        if (logits[v] > mx) mx = logits[v];
    double sum = 0.0;
    for (int32_t v = 0; v < n_vocab; v++) sum += exp((double)logits[v] - (double)mx);
    int n = 0;
    for (int32_t v = 0; v < n_vocab && k > 0; v++) {
        float x = logits[v];
        if (n == k && !(x > top[n - 1])) continue;
        int at = n < k ? n++ : k - 1;
        while (at > 0 && x > top[at - 1]) {
            top[at] = top[at - 1];
            top_ids[at] = top_ids[at - 1];
            at--;
        }
        top[at] = x;
        top_ids[at] = v;
    }
    return (double)mx + log(sum);
}

/* Show a drafter that drafts from the target's hidden states (MTP) the
 * step's kept rows: an item's prompt rows (the next token of each is the
 * item's next), then its sampled rows up to the last emitted token (each
 * followed by the token emitted from it: a kept draft or the correction);
 * rejected drafts' rows are not shown. */
static void observe_step(sched *s, int n_items)
{
    int64_t n_rows = 0, row = 0;
    const float *hidden = model_last_hidden(s->m, &n_rows);
    if (!hidden) hidden = model_dspark_features(s->m, &n_rows);
    if (!hidden) return;
    int n = 0;
    for (int i = 0; i < n_items; i++) {
        const model_batch_item *it = &s->items[i];
        sched_request *r = s->item_req[i];
        int64_t n_plain = it->n_tokens - it->want_logits;
        int64_t kept = n_plain + (it->want_logits > 0 ? s->n_emit[i] : 0);
        int32_t *next = s->obs_next + row;
        for (int64_t t = 0; t < n_plain; t++) next[t] = it->tokens[t + 1];
        memcpy(next + n_plain, s->emit + (size_t)i * (size_t)(1 + s->n_draft),
               (size_t)(kept - n_plain) * sizeof *next);
        s->obs[n++] = (draft_observation){.state = &r->draft_state,
                                          .smp = r->smp,
                                          .pos0 = it->tokens - r->tokens,
                                          .row0 = row,
                                          .n_kept = kept,
                                          .next = next};
        row += it->n_tokens;
    }
    if (row != n_rows) return; /* cannot happen: the rows are the step's */
    s->drafter->ops->observe(s->drafter, s->obs, n, hidden);
}

/* Running slots kept for the followers of running leaders (sched_request.fork_of). */
static int reserved_slots(const sched *s)
{
    int n = 0;
    for (int i = 0; i < s->n_running; i++) n += s->running[i]->n_followers;
    return n;
}

/* Leader r's prompt is computed: each follower forks its full prompt blocks
 * and joins the running set (into the slot kept for it), to compute the
 * prompt tokens after those blocks in the next step and sample from there —
 * the same logits as r's last prompt token (batch invariance), its own
 * sampler. */
static void fork_choices(sched *s, sched_request *r)
{
    int n = r->n_followers;
    r->n_followers = 0;
    for (int i = 0; i < n; i++) {
        sched_request *f = r->followers[i];
        f->fork_of = NULL;
        if (model_seq_create(s->m, &f->seq) != DI_OK) {
            retire(s, f, 0, DI_ERR_OUT_OF_MEMORY, "out of memory for a sequence", 0);
            continue;
        }
        /* at least the last prompt token is computed: its logits are the first sample's */
        (void)model_seq_fork(s->m, f->seq, r->seq, f->n_all - 1);
        f->n_cached = r->n_cached;
        f->running = 1;
        f->admit_order = ++s->admit_counter;
        s->running[s->n_running++] = f;
    }
}

static void step(sched *s)
{
    model *m = s->m;
    s->restoring = 0;
    s->n_building = 0;
    int64_t budget = model_n_batch(m);
    int n_items = 0;
    char msg[256];
    if (s->drafter) plan_drafts(s, budget);
    for (int pass = 0; pass < 2; pass++) {
    restart:
        for (int i = 0; i < s->n_running && budget > 0; i++) {
            sched_request *r = s->running[i];
            if (find_item(s, n_items, r) >= 0) continue;
            int64_t past = model_seq_n_past(r->seq), need = r->n_all - past;
            if ((pass == 0) != (need == 1)) continue;
            if (pass == 1) need = compute_target(r) - past; /* (a recompute's: not the last) */
            int64_t take = need < budget ? need : budget;
            /* Speculative decoding: a decoding request's draft tokens ride in
             * the same item, from the budget the other decoders leave. */
            int n_drafts = 0;
            if (pass == 0 && s->drafter) {
                int64_t room = budget - decoders_left(s, n_items, i + 1) - 1;
                n_drafts = r->k_step < room ? r->k_step : (int)(room > 0 ? room : 0);
                /* Without KV room for them, point-mass drafts are dropped (the
                 * output is the same); sampled ones make room like any other
                 * token (pre-emption below), as a step without them would be
                 * another draw — unless r runs alone. */
                if (n_drafts > 0 && model_seq_reserve(m, r->seq, past + 1 + n_drafts) != DI_OK &&
                    !(r->has_q && s->n_running > 1))
                    n_drafts = 0;
                take = 1 + n_drafts;
            }
            di_status st = model_seq_reserve(m, r->seq, past + take);
            if (st == DI_ERR_OUT_OF_MEMORY) {
                /* The newest running request gives its blocks back — r itself
                 * when it is the newest (vLLM's recompute pre-emption order). */
                sched_request *victim = NULL;
                for (int j = 0; j < s->n_running; j++)
                    if (!victim || s->running[j]->admit_order > victim->admit_order)
                        victim = s->running[j];
                if (victim == r && s->n_running == 1) {
                    snprintf(msg, sizeof msg,
                             "the KV cache budget (%d tokens) cannot hold the request's %lld "
                             "tokens even alone",
                             (int)(model_kv_blocks_total(m) * MODEL_KV_BLOCK),
                             (long long)(past + take));
                    retire(s, r, 0, DI_ERR_CONTEXT_LENGTH, msg, 0);
                    goto restart;
                }
                int k = find_item(s, n_items, victim);
                if (k >= 0) {
                    budget += s->items[k].n_tokens;
                    memmove(&s->items[k], &s->items[k + 1],
                            (size_t)(n_items - k - 1) * sizeof *s->items);
                    memmove(&s->item_req[k], &s->item_req[k + 1],
                            (size_t)(n_items - k - 1) * sizeof(sched_request *));
                    s->n_building = --n_items;
                }
                preempt(s, victim);
                goto restart;
            }
            if (st != DI_OK) {
                retire(s, r, 0, st, "the request outgrew the context", 0);
                goto restart;
            }
            int want = n_drafts > 0 ? 1 + n_drafts : past + take == r->n_all;
            s->items[n_items] = (model_batch_item){r->seq, r->tokens + past, take, want};
            s->item_req[n_items++] = r;
            s->n_building = n_items;
            budget -= take;
        }
    }
    /* Admission, in arrival order. The prompt's leading blocks the prefix cache
     * holds are taken as computed; at least the last token is computed (its
     * logits are the next token's). */
    while (s->n_waiting > 0 && budget > 0) {
        sched_request *r = s->waiting[0];
        /* a Chat `n` leader takes its followers' slots too, kept in reserve
         * until they fork */
        if (s->n_running + reserved_slots(s) + 1 + r->n_followers > s->max_running) break;
        int32_t need_blocks = model_kv_blocks_for(r->n_all + 1);
        if (need_blocks > model_kv_blocks_total(m)) {
            snprintf(msg, sizeof msg,
                     "the KV cache budget (%d tokens) cannot hold the request's %lld tokens",
                     (int)(model_kv_blocks_total(m) * MODEL_KV_BLOCK), (long long)r->n_all + 1);
            retire(s, r, 0, DI_ERR_CONTEXT_LENGTH, msg, 0);
            continue;
        }
        if (s->tiers && restore(s, r) == 0) { /* its next blocks are being read */
            s->restoring = 1;
            break;
        }
        int32_t n_cached_hit = 0;
        const int64_t target = compute_target(r); /* (at least its last token computed) */
        /* (a recomputed request's drafter that reads the target's rows sees
         * them all again, as it did: its drafts are then the same) */
        const int reread = r->recomputing && s->drafter && s->drafter->ops->observe;
        int64_t hit = s->prefix_cache && !reread
                          ? model_prefix_probe(m, r->tokens, target - 1, &n_cached_hit)
                          : 0;
        /* Blocks still to take: the cached ones matched leave the free count. */
        if (need_blocks - model_kv_blocks_for(hit) > model_kv_blocks_free(m) - n_cached_hit) break;
        if (model_seq_create(m, &r->seq) != DI_OK) {
            retire(s, r, 0, DI_ERR_OUT_OF_MEMORY, "out of memory for a sequence", 0);
            continue;
        }
        if (hit > 0) hit = model_seq_match_prefix(m, r->seq, r->tokens, hit);
        int64_t take = target - hit < budget ? target - hit : budget;
        if (model_seq_reserve(m, r->seq, hit + take) != DI_OK) { /* cannot happen: checked above */
            retire(s, r, 0, DI_ERR_INTERNAL, "KV cache reservation failed after admission", 0);
            continue;
        }
        memmove(&s->waiting[0], &s->waiting[1], (s->n_waiting - 1) * sizeof(sched_request *));
        s->n_waiting--;
        if (s->prefix_cache) {
            s->prefix_queries += r->n_all;
            s->prefix_hits += hit;
        }
        if (!r->admit_order) r->n_cached = hit < r->n_prompt ? hit : r->n_prompt;
        r->running = 1;
        r->admit_order = ++s->admit_counter;
        s->running[s->n_running++] = r;
        s->items[n_items] =
            (model_batch_item){r->seq, r->tokens + hit, take, hit + take == r->n_all};
        s->item_req[n_items++] = r;
        s->n_building = n_items;
        budget -= take;
    }
    if (n_items == 0) {
        publish_stats(s); /* blocks the tiers restored are cached now */
        if (s->restoring) kv_tiers_wait(s->tiers, 5);
        return;
    }
    publish_stats(s); /* the step's blocks are reserved */
    di_error *err = NULL;
    int64_t t0 = now_ns(), step_tokens = 0;
    for (int i = 0; i < n_items; i++) {
        step_tokens += s->items[i].n_tokens;
        int64_t past = model_seq_n_past(s->items[i].seq), n_prompt = s->item_req[i]->n_prompt;
        int64_t end = past + s->items[i].n_tokens;
        if (past < n_prompt) s->prefill_tokens += (end < n_prompt ? end : n_prompt) - past;
    }
    di_status st = model_forward_batch(m, s->items, n_items, s->logits, &err);
    s->n_building = 0; /* computed: the sequences count their own tokens */
    if (st != DI_OK) {
        snprintf(msg, sizeof msg, "the forward pass failed: %s", di_error_message(err));
        di_error_free(err);
        for (int i = 0; i < n_items; i++) retire(s, s->item_req[i], 0, DI_ERR_INTERNAL, msg, 0);
        return;
    }
    /* Sample each item's next token; a speculative item's rows verify its
     * drafts in order — row j is the logits after its j-th token, sampled as
     * a plain decode step would sample it (the same sampler state and random
     * draw), and a draft is kept only while it equals that sample — so the
     * output is token for token what decoding one token a step gives, greedy
     * or seeded (docs/speculative.md). The rejected drafts' KV entries are cut
     * off before the step's blocks are published. */
    int row = 0;
    for (int i = 0; i < n_items; i++) {
        s->n_emit[i] = 0;
        s->item_st[i] = DI_OK;
        int rows = s->items[i].want_logits;
        if (rows == 0) continue;
        sched_request *r = s->item_req[i];
        const int32_t *drafts = r->tokens + r->n_all;
        int32_t *out = s->emit + (size_t)i * (size_t)(1 + s->n_draft);
        int accepted = 0;
        for (int j = 0; j < rows; j++) {
            float *logits = s->logits + (size_t)(row + j) * (size_t)s->n_vocab;
            if (!all_finite(logits, s->n_vocab)) {
                s->item_st[i] = DI_ERR_MODEL_FORMAT;
                break;
            }
            size_t slot = (size_t)i * (size_t)(1 + s->n_draft) + (size_t)s->n_emit[i];
            double lse = 0.0;
            if (r->want_logprobs) { /* from the raw row: the sampler rewrites it */
                memcpy(s->raw_row, logits, (size_t)s->n_vocab * sizeof *logits);
                lse = raw_lse_top(logits, s->n_vocab, r->top_logprobs,
                                  s->emit_top_ids + slot * SCHED_MAX_TOP,
                                  s->emit_top + slot * SCHED_MAX_TOP);
            }
            /* rows before the last verify draft j (speculative sampling:
             * sampler_verify); the last is a plain sample */
            int kept = 0;
            int32_t tok =
                j + 1 < rows
                    ? sampler_verify(r->smp, logits, s->scratch, drafts[j],
                                     r->has_q ? r->q + (size_t)j * (size_t)s->n_vocab : NULL, &kept)
                    : sampler_sample(r->smp, logits, s->scratch);
            if (r->want_logprobs) {
                s->emit_lp[slot] = (float)((double)s->raw_row[tok] - lse);
                for (int t = 0; t < r->top_logprobs; t++)
                    s->emit_top[slot * SCHED_MAX_TOP + (size_t)t] =
                        (float)((double)s->emit_top[slot * SCHED_MAX_TOP + (size_t)t] - lse);
            }
            if (sampler_accept(r->smp, tok) != 0) {
                s->item_st[i] = DI_ERR_OUT_OF_MEMORY;
                break;
            }
            out[s->n_emit[i]++] = tok;
            int64_t n_out = r->n_all - r->n_prompt + s->n_emit[i];
            if (is_stop(r, tok) || sampler_grammar_ended(r->smp) || n_out >= r->max_tokens ||
                r->n_all + s->n_emit[i] >= s->n_ctx)
                break;
            if (j + 1 < rows) {
                if (!kept) break; /* rejected: tok is the correction */
                accepted++;
            }
        }
        row += rows;
        if (rows > 1) {
            r->n_drafted += rows - 1;
            r->n_accepted += accepted;
            /* KV holds the item's last real token and its drafts; what stays is
             * the tokens before the last one emitted */
            model_seq_truncate(m, r->seq, r->n_all - 1 + s->n_emit[i]);
        }
    }
    if (s->drafter) {
        /* the step's time: its forward pass and the sampling and verification
         * of its rows (each draft adds a row to both) */
        draft_profile_add(&s->profile, step_tokens, (double)(now_ns() - t0));
        s->n_steps++;
        measure_drafts(s, n_items);
    }
    if (s->drafter && s->drafter->ops->observe) observe_step(s, n_items);
    /* The blocks this step filled can serve later requests (before any of
     * these requests ends and gives its blocks back). */
    if (s->prefix_cache) /* (the KV kept ends at accepted drafts, which are in r->tokens) */
        for (int i = 0; i < n_items; i++)
            model_seq_publish(m, s->items[i].seq, s->item_req[i]->tokens);
    /* Chat `n`: a leader whose prompt is computed forks its choices now, before
     * it can end (its blocks stay theirs whatever it does next). */
    for (int i = 0; i < n_items; i++) {
        sched_request *r = s->item_req[i];
        if (r->n_followers && model_seq_n_past(r->seq) >= r->n_prompt) fork_choices(s, r);
    }
    for (int i = 0; i < n_items; i++) {
        if (s->items[i].want_logits == 0) continue;
        sched_request *r = s->item_req[i];
        if (s->item_st[i] == DI_ERR_MODEL_FORMAT) {
            retire(s, r, 0, DI_ERR_MODEL_FORMAT,
                   "the model computed a non-finite logit (NaN or infinity) for this sequence: "
                   "its weights are probably corrupt",
                   0);
            continue;
        }
        if (s->item_st[i] == DI_ERR_OUT_OF_MEMORY) {
            const char *why;
            di_status gst = sampler_grammar_error(r->smp, &why);
            if (gst != DI_OK)
                retire(s, r, 0, gst, why, 0);
            else
                retire(s, r, 0, DI_ERR_OUT_OF_MEMORY, "out of memory counting the output tokens",
                       0);
            continue;
        }
        const int32_t *out = s->emit + (size_t)i * (size_t)(1 + s->n_draft);
        for (int j = 0; j < s->n_emit[i]; j++) {
            if (r->n_all == r->cap) {
                int64_t cap = r->cap * 2;
                if (cap > s->n_ctx) cap = s->n_ctx;
                int32_t *p = realloc(r->tokens, (size_t)cap * sizeof *p);
                if (!p) {
                    retire(s, r, 0, DI_ERR_OUT_OF_MEMORY, "out of memory for the output tokens", 0);
                    break;
                }
                r->tokens = p;
                r->cap = cap;
            }
            int32_t tok = out[j];
            r->tokens[r->n_all++] = tok;
            if (r->want_logprobs) {
                size_t slot = (size_t)i * (size_t)(1 + s->n_draft) + (size_t)j;
                r->lp = s->emit_lp[slot];
                memcpy(r->lp_top_ids, s->emit_top_ids + slot * SCHED_MAX_TOP,
                       (size_t)r->top_logprobs * sizeof *r->lp_top_ids);
                memcpy(r->lp_top, s->emit_top + slot * SCHED_MAX_TOP,
                       (size_t)r->top_logprobs * sizeof *r->lp_top);
            }
            r->recomputing = 0;
            /* (the grammar ends at the last token emitted: the step stopped there) */
            int stop = is_stop(r, tok) || (j + 1 == s->n_emit[i] && sampler_grammar_ended(r->smp));
            int ended = s->sink.on_tokens(s->sink.ctx, r, &tok, 1, stop);
            if (stop || ended) {
                retire(s, r, DI_FINISH_STOP, DI_OK, "", 0);
                break;
            }
            if (r->n_all - r->n_prompt >= r->max_tokens || r->n_all >= s->n_ctx) {
                retire(s, r, DI_FINISH_LENGTH, DI_OK, "", 0);
                break;
            }
        }
    }
    publish_stats(s); /* rejected drafts' blocks went back */
}

static void *worker(void *arg)
{
    sched *s = arg;
    sched_request **ended = NULL;
    size_t cap_ended = 0;
    for (;;) {
        size_t n_ended = 0;
        pthread_mutex_lock(&s->mu);
        for (;;) {
            int any_cancel = 0;
            for (sched_request *r = s->live; r; r = r->next) any_cancel |= r->cancel;
            if (s->closing || any_cancel || s->n_incoming || s->n_running || s->n_waiting) break;
            pthread_cond_wait(&s->cv, &s->mu);
        }
        /* Incoming requests join the queue; cancelled (or, when closing, all)
         * live requests are collected to end. */
        int oom = 0;
        for (size_t i = 0; i < s->n_incoming; i++)
            if (push_waiting(s, s->incoming[i], 0) != 0) {
                /* Keep the rest for the next round; retire nothing silently. */
                memmove(s->incoming, s->incoming + i,
                        (s->n_incoming - i) * sizeof(sched_request *));
                s->n_incoming -= i;
                oom = 1;
                break;
            }
        if (!oom) s->n_incoming = 0;
        int closing = s->closing;
        size_t n_live = 0;
        for (sched_request *r = s->live; r; r = r->next) n_live++;
        if (n_live > cap_ended) {
            sched_request **p = realloc(ended, n_live * sizeof(sched_request *));
            if (p) {
                ended = p;
                cap_ended = n_live;
            }
        }
        for (sched_request *r = s->live, *next; r && n_ended < cap_ended; r = next) {
            next = r->next;
            if (closing || r->cancel) {
                unlink_live(s, r);
                ended[n_ended++] = r;
            }
        }
        if (closing) {
            /* Requests never moved out of incoming (only after an OOM above). */
            s->n_incoming = 0;
        }
        pthread_mutex_unlock(&s->mu);
        for (size_t i = 0; i < n_ended; i++)
            retire(s, ended[i], 0, DI_ERR_CANCELLED,
                   closing ? "the engine was destroyed" : "cancelled by di_cancel", 1);
        if (closing) {
            pthread_mutex_lock(&s->mu);
            int left = s->live != NULL;
            pthread_mutex_unlock(&s->mu);
            if (!left) break;
            continue;
        }
        step(s);
    }
    free(ended);
    return NULL;
}

static void tier_log(void *user, di_log_level level, const char *message)
{
    sched *s = user;
    if (s->sink.log) s->sink.log(s->sink.ctx, level, message);
}
static void on_evicted(void *user, uint64_t key, const void *data)
{
    kv_tiers_put(user, key, data, KV_TIER_HOST | KV_TIER_DISK);
}
static void on_published(void *user, uint64_t key, const void *data)
{
    kv_tiers_put(user, key, data, KV_TIER_DISK);
}

/* The host and disk tiers, when the settings ask for them. */
static di_status start_tiers(sched *s, const sched_cache *c)
{
    if (!c->prefix_cache || (c->host_bytes <= 0 && !c->disk_dir)) return DI_OK;
    /* Blocks on disk may be found by engines of other models: their folder is
     * named after every byte of the weights, not only the pool's fingerprint. */
    uint64_t fp = c->disk_dir ? model_kv_disk_fingerprint(s->m) : model_kv_fingerprint_of(s->m);
    kv_tiers_options o = {
        model_kv_block_bytes(s->m), fp, c->host_bytes, c->disk_dir, c->disk_bytes, tier_log, s};
    di_status st = kv_tiers_create(&o, &s->tiers, NULL);
    if (st != DI_OK) return st;
    if (!(s->block_buf = malloc(o.block_bytes))) return DI_ERR_OUT_OF_MEMORY;
    return model_kv_set_hooks(s->m, on_evicted, kv_tiers_disk_on(s->tiers) ? on_published : NULL,
                              s->tiers);
}

di_status sched_create(model *m, int max_running, int n_draft, int draft_fixed, drafter *d,
                       const sched_cache *cache, const sched_sink *sink, sched **out)
{
    sched *s = calloc(1, sizeof *s);
    if (!s) {
        drafter_destroy(d);
        return DI_ERR_OUT_OF_MEMORY;
    }
    s->m = m;
    s->max_running = max_running;
    s->n_draft = n_draft < 0 ? 0 : n_draft;
    s->draft_fixed = draft_fixed != 0;
    s->drafter = d;
    if (s->n_draft == 0) {
        drafter_destroy(s->drafter);
        s->drafter = NULL;
    } else if (!s->drafter && !(s->drafter = drafter_prompt_lookup_create())) {
        sched_destroy(s);
        return DI_ERR_OUT_OF_MEMORY;
    }
    s->sink = *sink;
    s->prefix_cache = cache->prefix_cache != 0;

    s->sink = *sink;
    s->n_vocab = (int32_t)model_get_config(m)->n_vocab;
    s->n_ctx = model_n_ctx(m);
    s->running = calloc((size_t)max_running, sizeof(sched_request *));
    s->items = calloc((size_t)max_running, sizeof *s->items);
    s->item_req = calloc((size_t)max_running, sizeof(sched_request *));
    size_t rows = (size_t)max_running * (size_t)(1 + s->n_draft);
    s->logits = malloc(rows * (size_t)s->n_vocab * sizeof *s->logits);
    s->scratch = malloc(sampler_scratch_count(s->n_vocab) * sizeof *s->scratch);
    s->emit = malloc(rows * sizeof *s->emit);
    s->emit_lp = malloc(rows * sizeof *s->emit_lp);
    s->emit_top = malloc(rows * SCHED_MAX_TOP * sizeof *s->emit_top);
    s->emit_top_ids = malloc(rows * SCHED_MAX_TOP * sizeof *s->emit_top_ids);
    s->raw_row = malloc((size_t)s->n_vocab * sizeof *s->raw_row);
    s->avail = calloc((size_t)max_running, sizeof *s->avail);
    s->k_plan = calloc((size_t)max_running, sizeof *s->k_plan);
    size_t n_plan = (size_t)max_running * (size_t)(s->n_draft ? s->n_draft : 1);
    s->gain = calloc(n_plan, sizeof *s->gain);
    s->conf = calloc(n_plan, sizeof *s->conf);
    s->dreq = calloc((size_t)max_running, sizeof *s->dreq);
    s->dreq_r = calloc((size_t)max_running, sizeof(sched_request *));
    s->obs = calloc((size_t)max_running, sizeof *s->obs);
    s->obs_next = calloc((size_t)model_n_batch(m), sizeof *s->obs_next);
    s->n_emit = calloc((size_t)max_running, sizeof *s->n_emit);
    s->item_st = calloc((size_t)max_running, sizeof *s->item_st);
    if (!s->running || !s->items || !s->item_req || !s->logits || !s->scratch || !s->emit ||
        !s->emit_lp || !s->emit_top || !s->emit_top_ids || !s->raw_row || !s->n_emit ||
        !s->item_st || !s->avail || !s->k_plan || !s->gain || !s->conf || !s->dreq || !s->dreq_r ||
        !s->obs || !s->obs_next) {
        sched_destroy(s);
        return DI_ERR_OUT_OF_MEMORY;
    }
    di_status st = start_tiers(s, cache);
    if (st != DI_OK) {
        sched_destroy(s);
        return st;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    publish_stats(s);
    if (di_thread_create(&s->thread, worker, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        s->thread_started = -1;
        sched_destroy(s);
        return DI_ERR_BACKEND;
    }
    s->thread_started = 1;
    *out = s;
    return DI_OK;
}

void sched_close(sched *s)
{
    if (!s || s->thread_started != 1) return;
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->thread_started = 2;
}

void sched_destroy(sched *s)
{
    if (!s) return;
    sched_close(s);
    if (s->thread_started == 2) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    free(s->incoming);
    free(s->waiting);
    free(s->running);
    free(s->items);
    free(s->item_req);
    free(s->logits);
    free(s->emit_lp);
    free(s->emit_top);
    free(s->emit_top_ids);
    free(s->raw_row);
    free(s->emit);
    free(s->avail);
    free(s->k_plan);
    free(s->gain);
    free(s->conf);
    free(s->dreq);
    free(s->dreq_r);
    free(s->obs);
    free(s->obs_next);
    free(s->n_emit);
    free(s->item_st);
    free(s->scratch);
    if (s->tiers) {
        (void)model_kv_set_hooks(s->m, NULL, NULL, NULL);
        kv_tiers_destroy(s->tiers);
    }
    free(s->block_buf);
    drafter_destroy(s->drafter); /* after close: the requests released their drafter state */
    free(s);
}
