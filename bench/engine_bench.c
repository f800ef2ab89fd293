/* engine_bench: aggregate decode throughput of the engine with 1 and with N
 * concurrent requests — the gain continuous batching gives — on one model.
 *
 *   engine_bench MODEL.gguf [N=8] [MAX_TOKENS=64] [THREADS=2]
 *
 * Each request is a token request (prompt of 32 tokens, greedy, end of
 * sequence ignored, MAX_TOKENS output tokens); all N are submitted at once and
 * polled to the end. Reported for 1 request and for N: wall time, output
 * tokens, tokens per second, CPU ms per token, and decode tokens per second
 * counted from the moment every request had its first token (so the prompts'
 * prefill is left out); the ratio of the decode rates last (bench/README.md).
 * The anchor is the same engine serving one request at a time.
 * bench/make_engine_bench_model.py writes a memory-bound model for it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_clock.h"
#include "deepinfer/deepinfer.h"

static long n_out;
static int n_done, n_bad, n_started, n_req;
static double t_all_started; /* when every request had its first token */
static long out_at_all_started;
static int started[1024];

static void on_event(void *user, const di_event *ev)
{
    (void)user;
    size_t n;
    if (di_event_kind_of(ev) == DI_EVENT_TOKENS) {
        di_event_tokens(ev, &n);
        n_out += (long)n;
        uint64_t id = di_event_request_id(ev) % 1024;
        if (!started[id]) {
            started[id] = 1;
            if (++n_started == n_req) {
                t_all_started = now();
                out_at_all_started = n_out;
            }
        }
    } else if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        n_done++;
        if (di_event_status(ev) != DI_OK) {
            fprintf(stderr, "request %llu: %s\n", (unsigned long long)di_event_request_id(ev),
                    di_event_message(ev));
            n_bad++;
        }
    }
}

/* Run n requests at once; returns output tokens per second. */
static double run(di_engine *e, int n, int max_tokens, int vocab)
{
    int32_t prompt[32];
    n_out = 0;
    n_done = n_bad = n_started = 0;
    n_req = n;
    memset(started, 0, sizeof started);
    double t0 = now(), c0 = cpu();
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 32; k++) prompt[k] = (int32_t)((i * 7919 + k * 104729 + 17) % vocab);
        di_request q;
        di_request_init(&q);
        q.tokens = prompt;
        q.n_tokens = 32;
        q.max_tokens = max_tokens;
        q.temperature = 0.0f;
        q.ignore_eos = 1;
        q.on_event = on_event;
        uint64_t id;
        di_error *err = NULL;
        if (di_submit(e, &q, &id, &err) != DI_OK) {
            fprintf(stderr, "di_submit: %s\n", di_error_message(err));
            exit(1);
        }
    }
    while (n_done < n) di_poll(e, 100);
    double t1 = now(), dt = t1 - t0, dc = cpu() - c0;
    /* Decode alone: from the moment every request had its first token (all
     * prompts done) to the end, and the tokens produced in that time. */
    double decode = (double)(n_out - out_at_all_started) / (t1 - t_all_started);
    printf("%2d concurrent: %6.2f s, %5ld output tokens, %7.1f tokens/s, %6.2f CPU ms/token, "
           "decode %7.1f tokens/s%s\n",
           n, dt, n_out, (double)n_out / dt, 1e3 * dc / (double)n_out, decode,
           n_bad ? " (some failed)" : "");
    return decode;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: engine_bench MODEL [N=8] [MAX_TOKENS=64] [THREADS=2]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 8, max_tokens = argc > 3 ? atoi(argv[3]) : 64;
    int threads = argc > 4 ? atoi(argv[4]) : 2;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = argv[1];
    cfg.n_threads = threads;
    cfg.max_running = n;
    cfg.n_ctx = 512;
    di_engine *e;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) {
        fprintf(stderr, "di_engine_create: %s\n", di_error_message(err));
        return 1;
    }
    int vocab = di_engine_vocab_size(e);
    run(e, 1, 8, vocab); /* warm the caches and the page tables */
    double one = run(e, 1, max_tokens, vocab);
    double many = run(e, n, max_tokens, vocab);
    printf("aggregate decode tokens/s (after every prompt is in), %d concurrent vs 1: %.2fx\n", n,
           many / one);
    di_engine_destroy(e);
    return 0;
}
