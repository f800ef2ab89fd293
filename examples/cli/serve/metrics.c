/* /metrics: the server's counters in the Prometheus text exposition format
 * (version 0.0.4: # HELP and # TYPE lines, cumulative histogram buckets with an
 * le="+Inf" bucket equal to _count, then _sum and _count). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

/* Time to first token: from the request's arrival to its first generated token. */
static const double ttft_bounds[SRV_TTFT_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                     1,     2.5,  5,     10,   30,  60,   120};
/* Inter-token latency: between consecutive token events of one request. */
static const double itl_bounds[SRV_ITL_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                   0.1,   0.25,   0.5,   1,    2.5,   5};

static const char *const endpoint_names[EP_N] = {"/v1/chat/completions",
                                                 "/v1/messages",
                                                 "/v1/responses",
                                                 "/v1/messages/count_tokens",
                                                 "/v1/models",
                                                 "/health",
                                                 "/metrics",
                                                 "/",
                                                 "other"};

const char *srv_endpoint_name(srv_endpoint ep)
{
    return ep < EP_N ? endpoint_names[ep] : "other";
}

void srv_metrics_init(srv_metrics *m)
{
    memset(m, 0, sizeof *m);
    m->ttft.bounds = ttft_bounds;
    m->ttft.n_bounds = SRV_TTFT_BUCKETS;
    m->itl.bounds = itl_bounds;
    m->itl.n_bounds = SRV_ITL_BUCKETS;
}

void srv_metrics_request(srv_metrics *m, srv_endpoint ep, unsigned status)
{
    for (size_t i = 0; i < SRV_MAX_STATUS; i++) {
        if (m->requests[ep][i].code == status || m->requests[ep][i].code == 0) {
            m->requests[ep][i].code = status;
            m->requests[ep][i].n++;
            return;
        }
    }
    /* more distinct statuses than slots: the last slot keeps counting them */
    m->requests[ep][SRV_MAX_STATUS - 1].n++;
}

void srv_histogram_observe(srv_histogram *h, double seconds)
{
    size_t i = 0;
    while (i < h->n_bounds && seconds > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += seconds;
    h->count++;
}

/* A growing text buffer. */
typedef struct text {
    char *s;
    size_t len, cap;
    int failed;
} text;

__attribute__((format(printf, 2, 3))) static void put(text *t, const char *fmt, ...)
{
    if (t->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *p = realloc(t->s, cap);
        if (!p) {
            t->failed = 1;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
}

static void histogram(text *t, const char *name, const char *help, const srv_histogram *h)
{
    put(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        put(t, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    put(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
        (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}

static void counter(text *t, const char *name, const char *help, uint64_t v)
{
    put(t, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

static void gauge(text *t, const char *name, const char *help, double v)
{
    put(t, "# HELP %s %s\n# TYPE %s gauge\n%s %.10g\n", name, help, name, name, v);
}

char *srv_metrics_render(const srv *s)
{
    const srv_metrics *m = &s->metrics;
    text t = {malloc(4096), 0, 4096, 0};
    if (!t.s) return NULL;
    t.s[0] = 0;
    put(&t, "# HELP deepinfer_requests_total HTTP requests answered, by endpoint and status code.\n"
            "# TYPE deepinfer_requests_total counter\n");
    for (int ep = 0; ep < EP_N; ep++)
        for (size_t i = 0; i < SRV_MAX_STATUS && m->requests[ep][i].code; i++)
            put(&t, "deepinfer_requests_total{endpoint=\"%s\",code=\"%u\"} %llu\n",
                endpoint_names[ep], m->requests[ep][i].code,
                (unsigned long long)m->requests[ep][i].n);
    counter(&t, "deepinfer_prompt_tokens_total",
            "Prompt tokens of finished generation requests (after rendering).", m->prompt_tokens);
    counter(&t, "deepinfer_prompt_cached_tokens_total",
            "Of the prompt tokens, those taken from the prefix cache (not computed again).",
            m->cached_tokens);
    counter(&t, "deepinfer_generated_tokens_total",
            "Tokens generated (every sampled token, end of sequence included).",
            m->generated_tokens);
    counter(&t, "deepinfer_draft_tokens_total",
            "Speculative decoding's draft tokens verified, over finished requests (--draft).",
            m->draft_tokens);
    counter(&t, "deepinfer_draft_accepted_tokens_total",
            "Of the verified draft tokens, those kept (each equal to what decoding gives).",
            m->accepted_draft_tokens);
    put(&t, "# HELP deepinfer_generation_requests_total Generation requests the engine ended, by "
            "result.\n# TYPE deepinfer_generation_requests_total counter\n");
    static const char *const results[3] = {"ok", "cancelled", "error"};
    for (int i = 0; i < 3; i++)
        put(&t, "deepinfer_generation_requests_total{result=\"%s\"} %llu\n", results[i],
            (unsigned long long)m->finished[i]);
    counter(&t, "deepinfer_client_disconnects_total",
            "Requests whose client went away before the answer ended (each was cancelled).",
            m->client_disconnects);
    histogram(&t, "deepinfer_time_to_first_token_seconds",
              "From a generation request's arrival to its first generated token.", &m->ttft);
    histogram(&t, "deepinfer_inter_token_latency_seconds",
              "Between consecutive generated tokens of one request.", &m->itl);
    gauge(&t, "deepinfer_queue_length",
          "Requests submitted that have no token yet (waiting for a slot, or prefilling).",
          (double)s->waiting);
    gauge(&t, "deepinfer_running_requests",
          "Requests in the engine: submitted, terminal event not yet delivered.",
          (double)s->in_engine);
    gauge(&t, "deepinfer_engine_pending_requests",
          "di_engine_pending: requests whose terminal event the server has not taken yet.",
          (double)di_engine_pending(s->engine));
    /* The KV cache, as the engine's worker last published it
     * (di_engine_kv_cache_stats); left out if the engine refuses the call. */
    di_kv_cache_stats kv;
    di_kv_cache_stats_init(&kv);
    if (di_engine_kv_cache_stats(s->engine, &kv, NULL) == DI_OK) {
        gauge(&t, "deepinfer_kv_cache_blocks",
              "KV cache blocks in all (each holds deepinfer_kv_cache_block_tokens tokens).",
              (double)kv.blocks_total);
        gauge(&t, "deepinfer_kv_cache_block_tokens", "Tokens one KV cache block holds.",
              (double)kv.block_tokens);
        gauge(&t, "deepinfer_kv_cache_used_blocks",
              "KV cache blocks held by running requests (a shared prefix block counts once).",
              (double)kv.blocks_used);
        gauge(&t, "deepinfer_kv_cache_cached_blocks",
              "KV cache blocks held by no request that keep a computed prefix (the prefix "
              "cache; evicted when room is needed).",
              (double)kv.blocks_cached);
        gauge(&t, "deepinfer_kv_cache_free_blocks", "KV cache blocks neither used nor cached.",
              (double)kv.blocks_free);
        gauge(&t, "deepinfer_kv_cache_used_tokens",
              "Tokens whose keys and values the running requests hold, summed over requests.",
              (double)kv.tokens_used);
        gauge(&t, "deepinfer_kv_cache_usage_ratio",
              "Used blocks over all blocks, 0 to 1 (as vLLM's kv_cache_usage_perc).",
              kv.blocks_total > 0 ? (double)kv.blocks_used / (double)kv.blocks_total : 0.0);
        counter(&t, "deepinfer_prefix_cache_queries_tokens_total",
                "Tokens of admitted requests looked up in the prefix cache.",
                (uint64_t)kv.prefix_cache_queries_total);
        counter(&t, "deepinfer_prefix_cache_hits_tokens_total",
                "Of those, tokens found computed in the prefix cache (not computed again).",
                (uint64_t)kv.prefix_cache_hits_total);
        counter(&t, "deepinfer_kv_cache_evicted_blocks_total",
                "Cached prefix blocks whose room a request took.",
                (uint64_t)kv.blocks_evicted_total);
    }
    gauge(&t, "deepinfer_max_queue", "The server's limit on requests in the engine (--max-queue).",
          (double)s->cfg->max_queue);
    gauge(&t, "deepinfer_uptime_seconds", "Seconds since the server started listening.",
          srv_now() - s->started);
    if (t.failed) {
        free(t.s);
        return NULL;
    }
    return t.s;
}
