/* engine_example: the smallest complete host of the engine. Three prompts run
 * concurrently on one engine; their text arrives through callbacks inside
 * di_poll on this thread, and each ends with exactly one DI_EVENT_DONE.
 *
 *   engine_example MODEL.gguf ["prompt" ...]
 *
 * docs/api.md explains the lifecycle and threading model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepinfer/deepinfer.h"

typedef struct output {
    char text[4096];
    size_t len;
    int done;
} output;

/* Runs inside di_poll, on the thread that polls. */
static void on_event(void *user, const di_event *ev)
{
    output *out = user;
    size_t n;
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_TEXT: {
        const char *t = di_event_text(ev, &n);
        if (out->len + n < sizeof out->text) {
            memcpy(out->text + out->len, t, n);
            out->len += n;
        }
        break;
    }
    case DI_EVENT_DONE:
        out->done = 1;
        if (di_event_status(ev) != DI_OK)
            fprintf(stderr, "request %llu: %s: %s\n", (unsigned long long)di_event_request_id(ev),
                    di_status_string(di_event_status(ev)), di_event_message(ev));
        else
            fprintf(stderr, "request %llu: %u prompt + %u output tokens, finish %s\n",
                    (unsigned long long)di_event_request_id(ev), di_event_prompt_tokens(ev),
                    di_event_completion_tokens(ev),
                    di_event_finish_reason(ev) == DI_FINISH_STOP ? "stop" : "length");
        break;
    default: break; /* tokens, chunks, kinds added later */
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: engine_example MODEL [PROMPT ...]\n");
        return 2;
    }
    const char *defaults[3] = {"The capital of France is", "A haiku about the sea:\n",
                               "def fibonacci(n):"};
    int n = argc > 2 ? argc - 2 : 3;
    const char **prompts = argc > 2 ? (const char **)argv + 2 : defaults;

    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = argv[1];
    cfg.n_ctx = 1024;
    di_engine *engine;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &engine, &err) != DI_OK) {
        fprintf(stderr, "%s\n", di_error_message(err));
        di_error_free(err);
        return 1;
    }
    const di_tokenizer *tok = di_engine_tokenizer(engine);
    if (!tok) {
        fprintf(stderr, "the model has no tokenizer\n");
        di_engine_destroy(engine);
        return 1;
    }
    output *outs = calloc((size_t)n, sizeof *outs);
    if (!outs) return 1;
    for (int i = 0; i < n; i++) {
        int32_t *ids;
        size_t n_ids;
        if (di_tokenizer_encode(tok, prompts[i], strlen(prompts[i]), DI_TOKENIZE_HF_DEFAULT, &ids,
                                &n_ids, &err) != DI_OK) {
            fprintf(stderr, "%s\n", di_error_message(err));
            return 1;
        }
        di_request req;
        di_request_init(&req);
        req.tokens = ids; /* copied by di_submit */
        req.n_tokens = n_ids;
        req.max_tokens = 40;
        req.temperature = 0.7f;
        req.top_p = 0.9f;
        req.seed = 1234 + i; /* the same seed gives the same text, alone or batched */
        req.on_event = on_event;
        req.user_data = &outs[i];
        uint64_t id;
        di_status st = di_submit(engine, &req, &id, &err);
        di_tokens_free(ids);
        if (st != DI_OK) {
            fprintf(stderr, "%s\n", di_error_message(err));
            di_error_free(err);
            err = NULL;
            outs[i].done = 1;
        }
    }
    while (di_engine_pending(engine) > 0) di_poll(engine, 100);
    for (int i = 0; i < n; i++) printf("--- %s%.*s\n", prompts[i], (int)outs[i].len, outs[i].text);
    free(outs);
    di_engine_destroy(engine);
    return 0;
}
