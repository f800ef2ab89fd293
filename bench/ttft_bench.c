/* ttft_bench: time to first token and decode timings of one greedy request,
 * through the engine (di_submit / di_poll) and through the model
 * (di_model_eval), for bench/ttft_bench.py, which runs llama.cpp beside it.
 *
 *   ttft_bench MODEL THREADS N_CTX [N_BATCH=0]
 *
 * Loads one engine and one di_model of MODEL (both with THREADS threads and
 * N_CTX tokens of context; N_BATCH is the engine's di_engine_config.n_batch, 0
 * for its default), then reads commands from stdin, one per line:
 *
 *   engine GEN N ID_1 … ID_N     a token request: prompt ID_1…ID_N, greedy,
 *                                end of sequence ignored, GEN output tokens
 *   model GEN N ID_1 … ID_N      the same through di_model_eval: the prompt in
 *                                one call, then one call per token, argmax
 *   batch K GEN N ID_1 … ID_N    K token requests submitted at once, request k's
 *                                prompt the N ids rotated left by k (so no two
 *                                share a prefix), each as `engine`
 *
 * and answers each with one line of JSON on stdout:
 *
 *   {"mode":…, "ttft_s":…, "decode_s":…, "t_s":[…], "tokens":[…], …}
 *
 * t_s[i] is when output token i was available to the host, in seconds from the
 * start (engine: just before di_submit; model: just before the prompt's
 * di_model_eval); ttft_s = t_s[0]; decode_s = t_s[GEN-1] - t_s[0]. Engine
 * extras: submit_s (di_submit's own time) and done_s (when DI_EVENT_DONE was
 * delivered). Model extras: prefill_s (the prompt's di_model_eval alone). The
 * engine's callback records the time of every DI_EVENT_TOKENS; the host polls
 * with di_poll(engine, -1), which sleeps on a condition variable until an
 * event is queued, so no polling interval is added. "cpu_s" is the process's
 * CPU time (all threads) over the command. `batch` answers
 *
 *   {"mode":"batch","k":…, "all_first_s":…, "end_s":…, "n_out":…,
 *    "n_out_after_all_first":…, "ttft_s":[K], "tokens":[[…]…], "cpu_s":…}
 *
 * all_first_s: when every request had its first token (the prompts' prefill,
 * batched); end_s: when the last DI_EVENT_DONE came; n_out_after_all_first: the
 * tokens that arrived after all_first_s (the aggregate decode rate's numerator). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_clock.h"
#include "deepinfer/deepinfer.h"

/* One run's results, filled by the engine's callback or the model loop. */
typedef struct run_state {
    double t0;
    int cap, n;       /* output tokens wanted, received */
    int32_t *tokens;  /* [cap] */
    double *t;        /* [cap], seconds since t0 */
    int done, status; /* DI_EVENT_DONE seen, its status */
    double t_done;
    char message[256];
} run_state;

static void on_event(void *user, const di_event *ev)
{
    run_state *rs = user;
    double t = now() - rs->t0;
    if (di_event_kind_of(ev) == DI_EVENT_TOKENS) {
        size_t n;
        const int32_t *ids = di_event_tokens(ev, &n);
        for (size_t i = 0; i < n && rs->n < rs->cap; i++) {
            rs->tokens[rs->n] = ids[i];
            rs->t[rs->n++] = t;
        }
    } else if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        rs->done = 1;
        rs->t_done = t;
        rs->status = (int)di_event_status(ev);
        snprintf(rs->message, sizeof rs->message, "%s", di_event_message(ev));
    }
}

static void print_run(const char *mode, const run_state *rs, double cpu_s, const char *extra)
{
    printf("{\"mode\":\"%s\",\"n_out\":%d,\"ttft_s\":%.9f,\"decode_s\":%.9f,\"cpu_s\":%.6f%s,"
           "\"t_s\":[",
           mode, rs->n, rs->n ? rs->t[0] : -1.0, rs->n ? rs->t[rs->n - 1] - rs->t[0] : -1.0, cpu_s,
           extra);
    for (int i = 0; i < rs->n; i++) printf("%s%.9f", i ? "," : "", rs->t[i]);
    printf("],\"tokens\":[");
    for (int i = 0; i < rs->n; i++) printf("%s%d", i ? "," : "", (int)rs->tokens[i]);
    printf("]}\n");
    fflush(stdout);
}

static int run_engine(di_engine *e, const int32_t *prompt, int n_prompt, run_state *rs)
{
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = (size_t)n_prompt;
    q.max_tokens = rs->cap;
    q.temperature = 0.0f;
    q.ignore_eos = 1;
    q.on_event = on_event;
    q.user_data = rs;
    uint64_t id;
    di_error *err = NULL;
    double c0 = cpu();
    rs->t0 = now();
    if (di_submit(e, &q, &id, &err) != DI_OK) {
        fprintf(stderr, "di_submit: %s\n", di_error_message(err));
        di_error_free(err);
        return -1;
    }
    double submit_s = now() - rs->t0;
    while (!rs->done)
        if (di_poll(e, -1) < 0) return -1;
    double cpu_s = cpu() - c0;
    if (rs->status != DI_OK) {
        fprintf(stderr, "request failed: %s\n", rs->message);
        return -1;
    }
    char extra[128];
    snprintf(extra, sizeof extra, ",\"submit_s\":%.9f,\"done_s\":%.9f", submit_s, rs->t_done);
    print_run("engine", rs, cpu_s, extra);
    return 0;
}

static int run_batch(di_engine *e, int k, int gen, const int32_t *prompt, int n_prompt)
{
    run_state *rs = calloc((size_t)k, sizeof *rs);
    int32_t *prompts = malloc((size_t)k * (size_t)n_prompt * sizeof *prompts);
    int rc = -1;
    if (!rs || !prompts) goto out;
    double c0 = cpu(), t0 = now();
    for (int r = 0; r < k; r++) {
        rs[r].cap = gen;
        rs[r].t0 = t0;
        rs[r].tokens = malloc((size_t)gen * sizeof *rs[r].tokens);
        rs[r].t = malloc((size_t)gen * sizeof *rs[r].t);
        if (!rs[r].tokens || !rs[r].t) goto out;
        int32_t *p = prompts + (size_t)r * (size_t)n_prompt;
        for (int i = 0; i < n_prompt; i++) p[i] = prompt[(i + r) % n_prompt];
    }
    for (int r = 0; r < k; r++) {
        di_request q;
        di_request_init(&q);
        q.tokens = prompts + (size_t)r * (size_t)n_prompt;
        q.n_tokens = (size_t)n_prompt;
        q.max_tokens = gen;
        q.temperature = 0.0f;
        q.ignore_eos = 1;
        q.on_event = on_event;
        q.user_data = &rs[r];
        uint64_t id;
        di_error *err = NULL;
        if (di_submit(e, &q, &id, &err) != DI_OK) {
            fprintf(stderr, "di_submit: %s\n", di_error_message(err));
            di_error_free(err);
            goto out;
        }
    }
    for (int r = 0; r < k; r++)
        while (!rs[r].done)
            if (di_poll(e, -1) < 0) goto out;
    double cpu_s = cpu() - c0, all_first = 0, end = 0;
    long n_out = 0, after = 0;
    for (int r = 0; r < k; r++) {
        if (rs[r].status != DI_OK || rs[r].n < 1) {
            fprintf(stderr, "request %d failed: %s\n", r, rs[r].message);
            goto out;
        }
        if (rs[r].t[0] > all_first) all_first = rs[r].t[0];
        if (rs[r].t_done > end) end = rs[r].t_done;
    }
    for (int r = 0; r < k; r++)
        for (int i = 0; i < rs[r].n; i++) {
            n_out++;
            after += rs[r].t[i] > all_first;
        }
    printf("{\"mode\":\"batch\",\"k\":%d,\"all_first_s\":%.9f,\"end_s\":%.9f,\"n_out\":%ld,"
           "\"n_out_after_all_first\":%ld,\"cpu_s\":%.6f,\"ttft_s\":[",
           k, all_first, end, n_out, after, cpu_s);
    for (int r = 0; r < k; r++) printf("%s%.9f", r ? "," : "", rs[r].t[0]);
    printf("],\"tokens\":[");
    for (int r = 0; r < k; r++) {
        printf("%s[", r ? "," : "");
        for (int i = 0; i < rs[r].n; i++) printf("%s%d", i ? "," : "", (int)rs[r].tokens[i]);
        printf("]");
    }
    printf("]}\n");
    fflush(stdout);
    rc = 0;
out:
    if (rs)
        for (int r = 0; r < k; r++) {
            free(rs[r].tokens);
            free(rs[r].t);
        }
    free(rs);
    free(prompts);
    return rc;
}

static int32_t argmax(const float *v, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

static int run_model(di_model *m, float *logits, const int32_t *prompt, int n_prompt, run_state *rs)
{
    int32_t vocab = di_model_vocab_size(m);
    di_error *err = NULL;
    di_model_reset(m);
    double c0 = cpu();
    rs->t0 = now();
    if (di_model_eval(m, prompt, (size_t)n_prompt, logits, 0, &err) != DI_OK) goto fail;
    double prefill_s = now() - rs->t0;
    for (;;) {
        int32_t tok = argmax(logits, vocab);
        rs->tokens[rs->n] = tok;
        rs->t[rs->n++] = now() - rs->t0;
        if (rs->n == rs->cap) break;
        if (di_model_eval(m, &tok, 1, logits, 0, &err) != DI_OK) goto fail;
    }
    double cpu_s = cpu() - c0;
    char extra[64];
    snprintf(extra, sizeof extra, ",\"prefill_s\":%.9f", prefill_s);
    print_run("model", rs, cpu_s, extra);
    return 0;
fail:
    fprintf(stderr, "di_model_eval: %s\n", di_error_message(err));
    di_error_free(err);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: ttft_bench MODEL THREADS N_CTX [N_BATCH=0]\n");
        return 2;
    }
    int threads = atoi(argv[2]);
    int64_t n_ctx = atoll(argv[3]), n_batch = argc > 4 ? atoll(argv[4]) : 0;
    di_error *err = NULL;

    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = argv[1];
    cfg.n_threads = threads;
    cfg.n_ctx = n_ctx;
    cfg.n_batch = n_batch;
    di_engine *e;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) {
        fprintf(stderr, "di_engine_create: %s\n", di_error_message(err));
        return 1;
    }
    di_model_options mo;
    di_model_options_init(&mo);
    mo.n_threads = threads;
    mo.n_ctx = n_ctx;
    di_model *m;
    if (di_model_load(argv[1], &mo, &m, &err) != DI_OK) {
        fprintf(stderr, "di_model_load: %s\n", di_error_message(err));
        return 1;
    }
    float *logits = malloc((size_t)di_model_vocab_size(m) * sizeof *logits);
    int32_t *prompt = malloc((size_t)n_ctx * sizeof *prompt);
    if (!logits || !prompt) return 1;
    printf("{\"ready\":true,\"vocab\":%d,\"n_ctx\":%lld}\n", (int)di_model_vocab_size(m),
           (long long)di_engine_context_length(e));
    fflush(stdout);

    char mode[16];
    int gen, n, k = 1;
    int rc = 0;
    while (scanf("%15s", mode) == 1) {
        if (strcmp(mode, "batch") == 0 && (scanf("%d", &k) != 1 || k < 1 || k > 256)) {
            fprintf(stderr, "batch: expected a request count of 1 to 256\n");
            rc = 1;
            break;
        }
        if (scanf("%d %d", &gen, &n) != 2) {
            fprintf(stderr, "%s: expected GEN and N\n", mode);
            rc = 1;
            break;
        }
        if (gen < 1 || n < 1 || n > n_ctx || gen > n_ctx - n) {
            fprintf(stderr, "prompt %d + output %d tokens do not fit N_CTX %lld\n", n, gen,
                    (long long)n_ctx);
            rc = 1;
            break;
        }
        for (int i = 0; i < n; i++)
            if (scanf("%d", &prompt[i]) != 1) {
                fprintf(stderr, "expected %d token ids\n", n);
                rc = 1;
                goto out;
            }
        if (strcmp(mode, "batch") == 0) {
            if (run_batch(e, k, gen, prompt, n) != 0) {
                rc = 1;
                break;
            }
            continue;
        }
        run_state rs = {0};
        rs.cap = gen;
        rs.tokens = malloc((size_t)gen * sizeof *rs.tokens);
        rs.t = malloc((size_t)gen * sizeof *rs.t);
        if (!rs.tokens || !rs.t) return 1;
        int r = strcmp(mode, "engine") == 0  ? run_engine(e, prompt, n, &rs)
                : strcmp(mode, "model") == 0 ? run_model(m, logits, prompt, n, &rs)
                                             : (fprintf(stderr, "unknown mode %s\n", mode), -1);
        free(rs.tokens);
        free(rs.t);
        if (r != 0) {
            rc = 1;
            break;
        }
    }
out:
    free(logits);
    free(prompt);
    di_model_free(m);
    di_engine_destroy(e);
    return rc;
}
