/* The engine on DI_DEVICE_CUDA, through the public API (on a GPU only):
 *   test_cuda_engine FIXTURE_DIR
 * 1. greedy decoding of the fixture's prompt gives transformers' greedy
 *    tokens (reference.json "greedy": the independent oracle);
 * 2. six seeded sampling requests (temperature 0.8, top-k, top-p) run
 *    together give each the tokens it gets alone (the engine's promise that a
 *    request's tokens depend only on its prompt, settings and seed);
 * 3. the same seeded request twice gives the same tokens.
 * Exits 77 (ctest: skipped), saying why, where the engine cannot be made on
 * DI_DEVICE_CUDA (no module, driver or usable GPU). */
#include <deepinfer/deepinfer.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_OUT = 64, N_REQ = 6 };

typedef struct rec {
    int32_t toks[MAX_OUT];
    int n_toks, done;
    di_status status;
} rec;

static int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL: %s\n", what);
        failures++;
    }
}

static void on_event(void *user, const di_event *ev)
{
    rec *r = user;
    size_t n;
    if (di_event_kind_of(ev) == DI_EVENT_TOKENS) {
        const int32_t *t = di_event_tokens(ev, &n);
        for (size_t i = 0; i < n && r->n_toks < MAX_OUT; i++) r->toks[r->n_toks++] = t[i];
    } else if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        r->done = 1;
        r->status = di_event_status(ev);
    }
}

static void run(di_engine *e, di_request *q, rec *r, int n)
{
    for (int i = 0; i < n; i++) {
        memset(&r[i], 0, sizeof r[i]);
        q[i].on_event = on_event;
        q[i].user_data = &r[i];
        uint64_t id;
        check(di_submit(e, &q[i], &id, NULL) == DI_OK, "di_submit");
    }
    for (int k = 0; k < 200000 && di_engine_pending(e) > 0; k++) di_poll(e, 50);
    for (int i = 0; i < n; i++) check(r[i].done && r[i].status == DI_OK, "request finished");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_cuda_engine FIXTURE_DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/reference.json", argv[1]);
    json_error_t jerr;
    json_t *ref = json_load_file(path, 0, &jerr);
    if (!ref) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return 1;
    }
    json_t *jp = json_object_get(ref, "prompt"), *jg = json_object_get(ref, "greedy");
    int32_t prompt[MAX_OUT], greedy[MAX_OUT];
    size_t np = json_array_size(jp), ng = json_array_size(jg);
    if (np > MAX_OUT) np = MAX_OUT;
    if (ng > MAX_OUT) ng = MAX_OUT;
    for (size_t i = 0; i < np; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(jp, i));
    for (size_t i = 0; i < ng; i++) greedy[i] = (int32_t)json_integer_value(json_array_get(jg, i));
    json_decref(ref);

    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = argv[1];
    cfg.device = DI_DEVICE_CUDA;
    cfg.n_threads = 2;
    cfg.max_running = N_REQ;
    cfg.n_batch = 64;
    di_engine *e = NULL;
    di_error *err = NULL;
    di_status st = di_engine_create(&cfg, &e, &err);
    if (st != DI_OK) {
        printf("%s: %s: %s\n", st == DI_ERR_UNSUPPORTED ? "SKIP" : "FAIL", argv[1],
               err ? di_error_message(err) : "");
        di_error_free(err);
        return st == DI_ERR_UNSUPPORTED ? 77 : 1;
    }
    /* 1. greedy against transformers */
    di_request q[N_REQ];
    rec r[N_REQ], alone[N_REQ];
    di_request_init(&q[0]);
    q[0].tokens = prompt;
    q[0].n_tokens = np;
    q[0].temperature = 0.0f;
    q[0].max_tokens = (int64_t)ng;
    q[0].ignore_eos = 1;
    run(e, q, r, 1);
    check(r[0].n_toks == (int)ng && memcmp(r[0].toks, greedy, ng * sizeof *greedy) == 0,
          "greedy tokens equal transformers'");
    printf("greedy: %d of %zu tokens as transformers'\n",
           r[0].n_toks == (int)ng && memcmp(r[0].toks, greedy, ng * sizeof *greedy) == 0 ? (int)ng
                                                                                         : 0,
           ng);
    /* 2. and 3. seeded sampling, together and alone */
    static int32_t prompts[N_REQ][24];
    for (int i = 0; i < N_REQ; i++) {
        for (int k = 0; k < 24; k++) prompts[i][k] = prompt[(size_t)(k * 5 + i) % np];
        di_request_init(&q[i]);
        q[i].tokens = prompts[i];
        q[i].n_tokens = 4 + 3 * (size_t)i;
        q[i].temperature = 0.8f;
        q[i].top_k = 20;
        q[i].top_p = 0.9f;
        q[i].seed = 100 + i;
        q[i].max_tokens = 16;
        q[i].ignore_eos = 1;
    }
    run(e, q, r, N_REQ);
    for (int i = 0; i < N_REQ; i++) run(e, &q[i], &alone[i], 1);
    int same = 0;
    for (int i = 0; i < N_REQ; i++)
        same += r[i].n_toks == alone[i].n_toks &&
                memcmp(r[i].toks, alone[i].toks, sizeof(int32_t) * (size_t)r[i].n_toks) == 0;
    printf("seeded sampling: %d of %d requests identical together and alone\n", same, N_REQ);
    check(same == N_REQ, "a request's tokens do not depend on the batch");
    rec again;
    run(e, &q[N_REQ - 1], &again, 1);
    check(again.n_toks == alone[N_REQ - 1].n_toks &&
              memcmp(again.toks, alone[N_REQ - 1].toks, sizeof(int32_t) * (size_t)again.n_toks) ==
                  0,
          "the same seeded request twice gives the same tokens");
    check(di_engine_destroy(e) == DI_OK, "di_engine_destroy");
    if (failures) return 1;
    printf("ok: %s\n", argv[1]);
    return 0;
}
