/* The scheduler: one worker thread that computes every request of an engine.
 *
 * It sees token IDs and samplers, never protocols. Each step it builds one
 * batch for model_forward_batch under a token budget (the model's n_batch):
 *   1. every running request that is decoding contributes its one new token —
 *      all of them, every step, oldest first, so no decoding request waits on
 *      another (fair progress);
 *   2. running requests still in their prompt get prompt chunks from what is
 *      left of the budget, oldest first (chunked prefill);
 *   3. waiting requests are admitted in arrival order (none overtakes the
 *      front) while a running slot is free, the budget has room and the KV
 *      cache has free blocks for the whole prompt (admission control).
 * A request's KV blocks are reserved as it grows. With the prefix cache on, a
 * request admitted takes the leading full blocks of its tokens that an
 * earlier request computed (model_prefix_probe) and prefills only the rest;
 * every full block a step computes is published for later requests, so a
 * cancelled, finished or pre-empted request leaves its blocks reusable until
 * they are evicted (least recently released first). When a decoding request
 * needs a block and none is free, the newest running request is pre-empted
 * (its blocks freed; it goes back to the front of the queue and is recomputed
 * from its prompt and the tokens it has generated, which gives it the same
 * logits: vLLM's recompute pre-emption). A request that cannot fit even alone
 * ends with DI_ERR_CONTEXT_LENGTH. No request is ever dropped: every one
 * submitted ends in exactly one sink->on_done call. With speculative decoding
 * (n_draft > 0) a decoding request's item also carries the draft tokens its
 * drafter proposed and draft_allocate chose; each is kept while
 * sampler_verify keeps it (speculative sampling), and the rejected ones' KV is
 * cut off (model_seq_truncate) before the step's blocks are published.
 *
 * Thread-safety: sched_submit, sched_cancel and sched_pending may be called
 * from any thread; the sink's functions run on the worker thread. */
#ifndef DI_ENGINE_SCHEDULER_H
#define DI_ENGINE_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"
#include "engine/draft.h"
#include "model/model.h"
#include "sampler/sampler.h"

/* A request as the scheduler runs it. The submitter fills the public part;
 * after sched_submit the scheduler owns it and frees it (sched_request_free)
 * after on_done. */
/* The most alternatives a token's log probabilities list (OpenAI's top_logprobs bound). */
#define SCHED_MAX_TOP 20

typedef struct sched_request {
    /* filled by the submitter */
    int32_t *tokens;    /* prompt, then output: [cap] allocated, n_all used; owned */
    int64_t n_prompt;   /* prompt tokens */
    int64_t max_tokens; /* output tokens at most (>= 1) */
    sampler *smp;       /* owned */
    int32_t *stop_ids;  /* tokens that end the output; owned */
    size_t n_stop;
    void *owner; /* the submitter's state, handed to the sink */
    /* log probabilities (token requests): 1 to compute them for each output
     * token, and the most likely alternatives to list (0..SCHED_MAX_TOP) */
    int want_logprobs;
    int top_logprobs;
    /* the token on_tokens is handed: its log probability and the top_logprobs
     * most likely tokens with theirs, most likely first (set when
     * want_logprobs, valid during the call) */
    float lp;
    int32_t lp_top_ids[SCHED_MAX_TOP];
    float lp_top[SCHED_MAX_TOP];
    /* the scheduler's */
    uint64_t id;
    int64_t n_all, cap;
    model_seq *seq;
    uint64_t admit_order;   /* 0 until first admitted */
    int64_t n_cached;       /* prompt tokens the prefix cache held at first admission */
    int64_t n_drafted;      /* draft tokens verified (speculative decoding) */
    int64_t n_accepted;     /* of them, those kept */
    int n_proposed, k_step; /* this step's proposals, and those verified */
    int has_q;              /* 1: this step's drafts were sampled, q holds their distributions */
    int recomputing;        /* 1: pre-empted, and no token emitted since */
    float *q;               /* [n_draft, n_vocab] (a drafter that samples), or NULL; owned */
    draft_accept accept;    /* its drafts' acceptance by confidence class and run */
    int64_t draft_run;      /* tokens in a row its drafter predicted right */
    int32_t *draft_tok; /* [n_draft]: this step's proposals (emitted tokens overwrite r->tokens') */
    unsigned char *draft_cls; /* [n_draft]: their confidence classes; owned with draft_tok */
    void *draft_state;        /* the drafter's (draft.h), released when the request stops running */
    uint64_t *keys;           /* the prompt's block keys, for the tiers (computed once); owned */
    int64_t n_keys;
    int64_t restore_since_ns; /* 0, or when it began waiting on restores */
    /* Chat `n` (sched_submit_group): the choices of one request share its id;
     * choice is this sequence's index. The leader (choice 0) prefills the
     * prompt; each follower waits (fork_of: its leader; in no queue) until the
     * leader's prompt is computed, then, in that step, forks the leader's full
     * prompt blocks (model_seq_fork) and joins the running set, computing only
     * the prompt tokens after them (less than a block; their logits are the
     * leader's, model.h's batch invariance). followers: the leader's not yet
     * forked ([n_followers], owned), each holding a running slot in reserve
     * while the leader runs. */
    int choice;
    struct sched_request *fork_of;
    struct sched_request **followers;
    int n_followers;
    int cancel;                        /* set under the lock by sched_cancel */
    int running;                       /* 1: admitted, holds a sequence */
    struct sched_request *next, *prev; /* the live list */
} sched_request;

/* Free a request that was never submitted (or that the scheduler is done with). */
void sched_request_free(sched_request *r);

typedef struct sched_sink {
    /* New output tokens of r (the ids, n of them; the last is the newest). Return
     * 1 to end the request here as a stop (e.g. a stop sequence matched). */
    int (*on_tokens)(void *ctx, sched_request *r, const int32_t *ids, size_t n, int is_stop);
    /* The end of r: once per request, last. finish is 0 unless status is DI_OK.
     * message is "" when status is DI_OK. */
    void (*on_done)(void *ctx, sched_request *r, di_finish finish, di_status status,
                    const char *message);
    /* A log line (may be NULL). */
    void (*log)(void *ctx, di_log_level level, const char *message);
    void *ctx;
} sched_sink;

typedef struct sched sched;

/* The prefix cache's settings (docs/prefix-cache.md). */
typedef struct sched_cache {
    int prefix_cache;     /* 1: requests share computed prompt prefixes */
    int64_t host_bytes;   /* the host tier's budget (kv_tiers.h); 0: none */
    const char *disk_dir; /* the disk tier's directory; NULL: none */
    int64_t disk_bytes;   /* its budget; 0: 4 GiB */
} sched_cache;

/* Start the worker over model m (owned by the caller, used only by the worker
 * from now until sched_destroy). n_draft > 0 turns on speculative decoding:
 * each decoding request verifies up to n_draft draft tokens per step, from
 * the step's budget the other decoders leave, proposed by drafter d (taken,
 * freed by sched_destroy or on failure; NULL: prompt lookup); 0: off (d is
 * freed). draft_fixed 1 verifies every proposal; 0 lets draft_allocate choose
 * (a drafter's sampled drafts are always all verified). With tiers, a request
 * admitted whose next prompt blocks the tiers hold waits at the front of the
 * queue (as long as the restores take, at most 2 s) and then takes them as
 * computed. Errors: DI_ERR_OUT_OF_MEMORY, DI_ERR_BACKEND. */
di_status sched_create(model *m, int max_running, int n_draft, int draft_fixed, drafter *d,
                       const sched_cache *cache, const sched_sink *sink, sched **out);
/* Queue r; *id gets its id. DI_ERR_INVALID_STATE once sched_close was called
 * (r is not taken: the caller frees it). */
di_status sched_submit(sched *s, sched_request *r, uint64_t *id);
/* Queue the n >= 2 choices of one request (rs[0] the leader, rs[1..n) its
 * followers: sched_request.fork_of), all under one id (*id): the prompt is
 * prefilled once and forked. Each choice ends with its own on_done. The caller
 * keeps n <= the scheduler's max_running. DI_ERR_INVALID_STATE once
 * sched_close was called, DI_ERR_OUT_OF_MEMORY (none taken: the caller frees
 * them). */
di_status sched_submit_group(sched *s, sched_request **rs, int n, uint64_t *id);
/* Cancel every choice of request id: DI_OK (cancel requested, or already
 * requested), DI_ERR_NOT_FOUND (never issued), DI_ERR_INVALID_STATE (already ended, or the
 * scheduler closing). */
di_status sched_cancel(sched *s, uint64_t id);
/* The KV cache's counts as the worker last published them (di_kv_cache_stats'
 * fields, the same meanings): the worker writes them under the scheduler's
 * lock as it builds each step's batch, at the end of each step, and in every
 * request's end before on_done. */
typedef struct sched_kv_stats {
    int64_t blocks_total, blocks_used, blocks_cached, blocks_free;
    int64_t tokens_used, running_requests;
    int64_t prefix_queries, prefix_hits, blocks_evicted;
    int64_t prefill_tokens; /* prompt tokens the forward pass computed, cumulative */
} sched_kv_stats;
/* A copy of the last published counts. Thread-safe. */
void sched_kv_stats_get(sched *s, sched_kv_stats *out);
/* Stop the worker: every live request ends with DI_ERR_CANCELLED through
 * on_done ("the engine was destroyed"), then the thread is joined. Idempotent. */
void sched_close(sched *s);
/* sched_close, then free. */
void sched_destroy(sched *s);

#endif
