/* End to end through the public API: SmolLM2 token requests constrained by
 * JSON schemas (di_request.json_schema), seeded sampling, the output text
 * printed for grammar_e2e.py to validate with the `jsonschema` package.
 * Usage: grammar_e2e <model.gguf> <schema.json>...
 * Prints, per schema, "OUT <finish reason> <status>\n<text>\n\x1e\n". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepinfer/deepinfer.h"

typedef struct out {
    char text[65536];
    size_t len;
    int done;
    di_status status;
    char msg[512];
    const char *finish;
} out;

static void on_event(void *user, const di_event *ev)
{
    out *o = user;
    size_t n;
    if (di_event_kind_of(ev) == DI_EVENT_TEXT) {
        const char *t = di_event_text(ev, &n);
        if (o->len + n < sizeof o->text) memcpy(o->text + o->len, t, n), o->len += n;
    } else if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        o->done = 1;
        o->status = di_event_status(ev);
        snprintf(o->msg, sizeof o->msg, "%s", di_event_message(ev));
        o->finish = di_event_finish_reason(ev) == DI_FINISH_STOP ? "stop" : "length";
    }
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 3) return 1;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = argv[1];
    cfg.n_threads = 2;
    cfg.max_running = 4;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) {
        fprintf(stderr, "engine: %s\n", di_error_message(err));
        return 1;
    }
    const char *prompt = "<|im_start|>user\nGive me an example JSON object.<|im_end|>\n"
                         "<|im_start|>assistant\n";
    int32_t *ids;
    size_t n_ids;
    if (di_tokenizer_encode(di_engine_tokenizer(e), prompt, strlen(prompt),
                            DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED, &ids, &n_ids, &err) != DI_OK)
        return 1;
    /* di_submit's errors: each its status and the message naming the fault */
    struct {
        const char *gbnf, *schema, *regex, *want;
        di_status st;
    } bad[] = {
        {"root ::= item\n", NULL, NULL, "undefined rule 'item'", DI_ERR_INVALID_REQUEST},
        {NULL, "{\"type\":\"object\",\"allOf\":[]}", NULL, "allOf: unsupported keyword",
         DI_ERR_INVALID_REQUEST},
        {NULL, NULL, "a(?=b)", "regex at offset", DI_ERR_INVALID_REQUEST},
        {"root ::= \"a\"\n", NULL, "a", "set at most one", DI_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        di_request q;
        di_request_init(&q);
        q.tokens = ids;
        q.n_tokens = n_ids;
        q.grammar = bad[i].gbnf;
        q.json_schema = bad[i].schema;
        q.regex = bad[i].regex;
        q.on_event = on_event;
        uint64_t id;
        di_status st = di_submit(e, &q, &id, &err);
        int ok = st == bad[i].st && strstr(di_error_message(err), bad[i].want) != NULL;
        printf("%s submit error %zu: %d %s\n", ok ? "ok:" : "FAIL:", i, (int)st,
               di_error_message(err));
        di_error_free(err);
        err = NULL;
        if (!ok) return 1;
    }
    int n = argc - 2;
    out *outs = calloc((size_t)n, sizeof *outs);
    char **schemas = calloc((size_t)n, sizeof *schemas);
    for (int i = 0; i < n; i++) {
        schemas[i] = slurp(argv[2 + i]);
        di_request q;
        di_request_init(&q);
        q.tokens = ids;
        q.n_tokens = n_ids;
        q.max_tokens = 160;
        q.temperature = 0.7f;
        q.seed = 20 + i;
        q.json_schema = schemas[i];
        q.on_event = on_event;
        q.user_data = &outs[i];
        uint64_t id;
        if (di_submit(e, &q, &id, &err) != DI_OK) {
            outs[i].done = 1;
            outs[i].status = di_error_status(err);
            snprintf(outs[i].msg, sizeof outs[i].msg, "%s", di_error_message(err));
            outs[i].finish = "submit";
            di_error_free(err);
            err = NULL;
        }
    }
    while (di_engine_pending(e) > 0) di_poll(e, 100);
    for (int i = 0; i < n; i++) {
        printf("OUT %s %d %s\n", outs[i].finish ? outs[i].finish : "?", (int)outs[i].status,
               outs[i].msg);
        fwrite(outs[i].text, 1, outs[i].len, stdout);
        printf("\n\x1e\n");
        free(schemas[i]);
    }
    free(outs);
    free(schemas);
    di_tokens_free(ids);
    di_engine_destroy(e);
    return 0;
}
