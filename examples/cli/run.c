/* deepinfer run  --model PATH --protocol chat|messages|responses [--stream] [options]
 * REQUEST.json|- deepinfer chat --model PATH [--system TEXT] [options]
 *
 * run: answers one API request with the model, as a server would: the complete
 * response JSON, or with --stream (or "stream": true in the body) the SSE stream,
 * each message written as soon as the engine produces it.
 * chat: an interactive conversation on the terminal; reasoning (dimmed) and the
 * answer stream separately, tool calls are shown; Ctrl-C stops the answer being
 * written, /reset starts over, /quit or end of input leaves.
 * Options: --threads T, --ctx N (context tokens), --max-tokens N, --temperature X,
 * --seed S, --encoding E (override the model's prompt encoding), --tokenizer PATH (a
 * tokenizer.json or .gguf other than the model's own), --cache-dir DIR
 * (the prefix cache's disk tier: prompts computed once are found again in later
 * runs), --no-prefix-cache, --draft off|auto|prompt-lookup|draft-model|mtp,
 * --draft-max N (speculative decoding: up to N draft tokens a step; --speculative N
 * is its older name), --draft-model PATH, --verbose (time to first token, decode speed and
 * the prompt tokens taken from the prefix cache on stderr). The model loads with a progress
 * bar on stderr. Built only on the public API (di_engine_*, di_submit, di_poll,
 * di_cancel). docs/cli.md documents both. */
#include <deepinfer/deepinfer.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct run_args {
    const char *model, *input, *system, *cache_dir, *tokenizer;
    di_protocol protocol;
    di_encoding encoding;
    int stream, verbose, no_prefix_cache;
    long threads, ctx, max_tokens, seed;
    cli_draft draft;    /* --draft, --draft-max (--speculative), --draft-model */
    int speculative;    /* 1: the engine drafts */
    double temperature; /* < 0: the body's or the default */
    int n_choices;      /* a Chat body's `n`: the engine decodes that many at once */
    int32_t device;     /* --device: a di_device, 0: the default (the CPU) */
    int32_t kv_type;    /* --kv-cache-type: a di_kv_cache_type, 0: f16 */
} run_args;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* ---- the model-load progress bar ----------------------------------------- */

typedef struct progress {
    int tty, last; /* last: the percentage drawn */
    double start;
} progress;

static int on_progress(void *user, float fraction)
{
    progress *p = user;
    int pct = (int)(fraction * 100.0f + 0.5f);
    if (p->tty && pct != p->last) {
        char bar[31];
        int full = pct * 30 / 100;
        for (int i = 0; i < 30; i++) bar[i] = i < full ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\rloading the model [%s] %3d%%", bar, pct);
        p->last = pct;
    }
    return interrupted; /* Ctrl-C cancels the load */
}

static const char *encoding_name(int32_t enc)
{
    switch (enc) {
    case DI_ENCODING_DSV4: return "dsv4";
    case DI_ENCODING_DSV41: return "dsv41";
    case DI_ENCODING_DSV3: return "dsv3";
    case DI_ENCODING_R1: return "r1";
    case DI_ENCODING_CHATML: return "chatml";
    default: return "none: token requests only";
    }
}

/* The engine's warnings (a prefix cache directory it cannot use, files it
 * skips) on stderr; the rest stays quiet. */
static void on_log(void *user, di_log_level level, const char *message)
{
    (void)user;
    if (level <= DI_LOG_WARN) fprintf(stderr, "deepinfer: %s\n", message);
}

static di_engine *load(const char *cmd, const run_args *a)
{
    progress p = {isatty(STDERR_FILENO), -1, cli_now()};
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = a->model;
    cfg.tokenizer_path = a->tokenizer;
    cfg.n_threads = (int32_t)a->threads;
    cfg.n_ctx = a->ctx;
    cfg.encoding = (int32_t)a->encoding;
    cfg.max_running = a->n_choices > 1 ? a->n_choices : 1;
    cfg.kv_cache_dir = a->cache_dir;
    cfg.disable_prefix_cache = a->no_prefix_cache;
    if (a->device) cfg.device = a->device;
    cfg.kv_cache_type = a->kv_type;
    (void)cli_draft_apply(&a->draft, &cfg); /* checked by parse_args */
    cfg.log = on_log;
    cfg.progress = on_progress;
    cfg.progress_user = &p;
    di_engine *e = NULL;
    di_error *err = NULL;
    di_status st = di_engine_create(&cfg, &e, &err);
    if (p.tty) fprintf(stderr, "\n");
    if (st != DI_OK) {
        fprintf(stderr, "deepinfer %s: %s\n", cmd, di_error_message(err));
        di_error_free(err);
        return NULL;
    }
    fprintf(stderr, "loaded %s in %.2f s (vocabulary %d, context %lld, encoding %s, KV cache %s)\n",
            a->model, cli_now() - p.start, (int)di_engine_vocab_size(e),
            (long long)di_engine_context_length(e), encoding_name(di_engine_encoding(e)),
            cli_kv_cache_type_name(a->kv_type));
    return e;
}

/* ---- one request, streamed ----------------------------------------------- */

typedef struct turn {
    const run_args *a;
    int sse, chat, dim; /* what to print: SSE messages / chat text (dim: a tty) */
    int in_reasoning;   /* chat: the reasoning block is open on the terminal */
    int done;
    int write_failed; /* stdout refused the output (a closed pipe, a full disk) */
    di_status status;
    char message[512];
    char *text; /* chat: the answer so far */
    size_t text_len, text_cap;
    json_t *calls; /* chat: the tool calls, as Chat Completions writes them */
    char *response;
    double t_submit, t_first, t_last;
    uint32_t prompt_tokens, completion_tokens, cached_tokens, drafted, accepted;
} turn;

static void add_text(turn *t, const char *s, size_t n)
{
    if (t->text_len + n + 1 > t->text_cap) {
        size_t cap = (t->text_len + n + 1) * 2;
        char *p = realloc(t->text, cap);
        if (!p) return; /* the history loses the text; the terminal still shows it */
        t->text = p;
        t->text_cap = cap;
    }
    memcpy(t->text + t->text_len, s, n);
    t->text_len += n;
    t->text[t->text_len] = 0;
}

static void close_reasoning(turn *t)
{
    if (!t->in_reasoning) return;
    printf("%s\n\n", t->dim ? "\033[0m" : "");
    t->in_reasoning = 0;
}

/* Runs inside di_poll, on this thread. */
static void on_event(void *user, const di_event *ev)
{
    turn *t = user;
    size_t n;
    const char *s;
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_TOKENS:
        if (t->t_first == 0) t->t_first = cli_now();
        t->t_last = cli_now();
        break;
    case DI_EVENT_CHUNK:
        if (t->sse) {
            s = di_event_chunk_sse(ev, &n);
            if (fwrite(s, 1, n, stdout) != n || fflush(stdout) != 0) t->write_failed = 1;
        }
        break;
    case DI_EVENT_REASONING:
        if (!t->chat) break;
        s = di_event_text(ev, &n);
        if (!t->in_reasoning) {
            printf("%sthinking: ", t->dim ? "\033[2m" : "");
            t->in_reasoning = 1;
        }
        fwrite(s, 1, n, stdout);
        fflush(stdout);
        break;
    case DI_EVENT_TEXT:
        if (!t->chat) break;
        close_reasoning(t);
        s = di_event_text(ev, &n);
        fwrite(s, 1, n, stdout);
        fflush(stdout);
        add_text(t, s, n);
        break;
    case DI_EVENT_TOOL_CALL:
        if (!t->chat) break;
        close_reasoning(t);
        s = di_event_text(ev, &n);
        printf("\n[tool call %s(%.*s)]", di_event_tool_call_name(ev), (int)n, s);
        fflush(stdout);
        json_array_append_new(t->calls,
                              json_pack("{s:s, s:s, s:{s:s, s:s%}}", "id",
                                        di_event_tool_call_id(ev), "type", "function", "function",
                                        "name", di_event_tool_call_name(ev), "arguments", s, n));
        break;
    case DI_EVENT_DONE:
        t->done = 1;
        t->status = di_event_status(ev);
        snprintf(t->message, sizeof t->message, "%s", di_event_message(ev));
        t->prompt_tokens = di_event_prompt_tokens(ev);
        t->cached_tokens = di_event_prompt_cache_hit_tokens(ev);
        t->completion_tokens = di_event_completion_tokens(ev);
        t->drafted = di_event_draft_tokens(ev);
        t->accepted = di_event_accepted_draft_tokens(ev);
        s = di_event_response_json(ev, &n);
        if (s && (t->response = malloc(n + 1))) {
            memcpy(t->response, s, n);
            t->response[n] = 0;
        }
        if (t->chat) close_reasoning(t);
        break;
    default: break; /* deltas of tool calls, kinds added later */
    }
}

/* Submit `body` and deliver its events until its terminal one; Ctrl-C cancels it.
 * Returns 0, or -1 when di_submit refused the request (message printed). */
static int run_turn(const char *cmd, di_engine *e, const char *body, size_t len, turn *t)
{
    const run_args *a = t->a;
    di_request req;
    di_request_init(&req);
    req.protocol = (int32_t)a->protocol;
    req.json = body;
    req.json_len = len;
    req.max_tokens = a->max_tokens;
    req.seed = a->seed;
    if (a->temperature >= 0) req.temperature = (float)a->temperature;
    req.on_event = on_event;
    req.user_data = t;
    uint64_t id;
    di_error *err = NULL;
    t->t_submit = cli_now();
    if (di_submit(e, &req, &id, &err) != DI_OK) {
        fprintf(stderr, "deepinfer %s: %s\n", cmd, di_error_message(err));
        if (di_engine_encoding(e) == 0) /* the library names its field; the CLI's is: */
            fprintf(stderr,
                    "deepinfer %s: (the model's tokenizer.json, with its chat tokens, "
                    "can be named with --tokenizer PATH)\n",
                    cmd);
        di_error_free(err);
        return -1;
    }
    int cancelled = 0;
    while (!t->done) {
        di_poll(e, 50);
        if ((interrupted || t->write_failed) && !cancelled) {
            di_cancel(e, id, NULL); /* DI_ERR_INVALID_STATE when it just finished */
            cancelled = 1;
        }
    }
    if (a->verbose && t->t_first > 0) {
        double decode = t->t_last - t->t_first;
        fprintf(stderr,
                "\n%u prompt tokens (%u from the prefix cache), %u generated; time to first "
                "token %.1f ms, decode %.1f tokens/s\n",
                t->prompt_tokens, t->cached_tokens, t->completion_tokens,
                (t->t_first - t->t_submit) * 1e3,
                t->completion_tokens > 1 && decode > 0 ? (t->completion_tokens - 1) / decode : 0.0);
        if (a->speculative)
            fprintf(stderr, "speculative decoding: %u draft tokens verified, %u kept\n", t->drafted,
                    t->accepted);
        if (a->device != DI_DEVICE_CUDA) fprintf(stderr, "CPU kernels: %s\n", di_cpu_kernels());
    }
    return 0;
}

/* ---- arguments ------------------------------------------------------------ */

static const char *usage_line(const char *cmd)
{
    return strcmp(cmd, "run") == 0
               ? "deepinfer run --model PATH --protocol chat|messages|responses [--stream] "
                 "[--threads T] [--ctx N] [--max-tokens N] [--temperature X] [--seed S] "
                 "[--encoding E] [--tokenizer PATH] [--cache-dir DIR] [--no-prefix-cache] "
                 "[--draft off|auto|prompt-lookup|draft-model|mtp] [--draft-max N] "
                 "[--draft-model PATH] [--device cpu|cuda] [--kv-cache-type f16|f32|q8_0|q4_0] "
                 "[--verbose] REQUEST.json|-"
               : "deepinfer chat --model PATH [--system TEXT] [--threads T] [--ctx N] "
                 "[--max-tokens N] [--temperature X] [--seed S] [--encoding E] [--tokenizer PATH] "
                 "[--cache-dir DIR] [--no-prefix-cache] [--draft "
                 "off|auto|prompt-lookup|draft-model|mtp] "
                 "[--draft-max N] [--draft-model PATH] [--device cpu|cuda] "
                 "[--kv-cache-type f16|f32|q8_0|q4_0] [--verbose]";
}

static int usage(const char *cmd, const char *why)
{
    fprintf(stderr, "deepinfer %s: %s (usage: %s)\n", cmd, why, usage_line(cmd));
    return EXIT_USAGE;
}

/* EXIT_HELP: --help was asked (the usage is printed: the command succeeds). */
enum { EXIT_HELP = -1, EXIT_INTERRUPTED = 130 /* 128 + SIGINT, as shells report it */ };

/* Returns EXIT_OK, EXIT_HELP, or the usage status with the message printed. */
static int parse_args(const char *cmd, int argc, char **argv, run_args *a)
{
    memset(a, 0, sizeof *a);
    a->draft = (cli_draft)CLI_DRAFT_INIT;
    a->seed = -1;
    a->temperature = -1;
    a->protocol = DI_PROTOCOL_CHAT;
    int run = strcmp(cmd, "run") == 0, has_protocol = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : ""; /* "" only when missing */
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            printf("usage: %s\n(docs/cli.md)\n", usage_line(cmd));
            return EXIT_HELP;
        }
        int takes = strcmp(o, "--model") == 0 || strcmp(o, "--protocol") == 0 ||
                    strcmp(o, "--threads") == 0 || strcmp(o, "--ctx") == 0 ||
                    strcmp(o, "--max-tokens") == 0 || strcmp(o, "--temperature") == 0 ||
                    strcmp(o, "--seed") == 0 || strcmp(o, "--encoding") == 0 ||
                    strcmp(o, "--system") == 0 || strcmp(o, "--cache-dir") == 0 ||
                    strcmp(o, "--speculative") == 0 || strcmp(o, "--draft") == 0 ||
                    strcmp(o, "--draft-max") == 0 || strcmp(o, "--draft-model") == 0 ||
                    strcmp(o, "--device") == 0 || strcmp(o, "--kv-cache-type") == 0 ||
                    strcmp(o, "--tokenizer") == 0;
        if (takes && i + 1 >= argc) {
            char why[80];
            snprintf(why, sizeof why, "%.40s needs a value", o);
            return usage(cmd, why);
        }
        char *end;
        const char *bad = NULL;
        if (takes && cli_draft_option(o, v, &a->draft, &bad)) {
            if (bad) return usage(cmd, bad);
        } else if (strcmp(o, "--model") == 0) {
            a->model = v;
        } else if (strcmp(o, "--protocol") == 0 && run) {
            if (cli_protocol(v, &a->protocol) != 0)
                return usage(cmd, "--protocol must be chat, messages or responses");
            has_protocol = 1;
        } else if (strcmp(o, "--system") == 0 && !run) {
            a->system = v;
        } else if (strcmp(o, "--threads") == 0) {
            if (cli_parse_long(v, 0, 1024, &a->threads) != 0)
                return usage(cmd, "--threads must be 0 to 1024");
        } else if (strcmp(o, "--ctx") == 0) {
            if (cli_parse_long(v, 0, 1L << 20, &a->ctx) != 0)
                return usage(cmd, "--ctx must be 0 (the model's, at most 4096) to 1048576");
        } else if (strcmp(o, "--max-tokens") == 0) {
            if (cli_parse_long(v, 1, 1L << 20, &a->max_tokens) != 0)
                return usage(cmd, "--max-tokens must be 1 to 1048576");
        } else if (strcmp(o, "--seed") == 0) {
            if (cli_parse_long(v, 0, INT32_MAX, &a->seed) != 0)
                return usage(cmd, "--seed must be 0 to 2147483647");
        } else if (strcmp(o, "--temperature") == 0) {
            errno = 0;
            a->temperature = strtod(v, &end);
            if (end == v || *end || errno || !(a->temperature >= 0 && a->temperature <= 100))
                return usage(cmd, "--temperature must be a number from 0 to 100");
        } else if (strcmp(o, "--device") == 0) {
            if (cli_device(v, &a->device) != 0) return usage(cmd, "--device must be cpu or cuda");
        } else if (strcmp(o, "--kv-cache-type") == 0) {
            if (cli_kv_cache_type(v, &a->kv_type) != 0)
                return usage(cmd, "--kv-cache-type must be f16, f32, q8_0 or q4_0");
        } else if (strcmp(o, "--encoding") == 0) {
            if (cli_encoding(v, &a->encoding) != 0)
                return usage(cmd, "--encoding must be dsv4, dsv41, dsv3, r1 or chatml");
        } else if (strcmp(o, "--stream") == 0 && run) {
            a->stream = 1;
            continue;
        } else if (strcmp(o, "--cache-dir") == 0) {
            a->cache_dir = v;
        } else if (strcmp(o, "--tokenizer") == 0) {
            a->tokenizer = v;
        } else if (strcmp(o, "--no-prefix-cache") == 0) {
            a->no_prefix_cache = 1;
            continue;
        } else if (strcmp(o, "--verbose") == 0) {
            a->verbose = 1;
            continue;
        } else if (run && !a->input && (o[0] != '-' || strcmp(o, "-") == 0)) {
            a->input = o;
            continue;
        } else {
            char why[120];
            snprintf(why, sizeof why, "unexpected argument '%.60s'", o);
            return usage(cmd, why);
        }
        i++;
    }
    if (!a->model) return usage(cmd, "--model is required");
    di_engine_config probe;
    di_engine_config_init(&probe);
    const char *why = cli_draft_apply(&a->draft, &probe);
    if (why) return usage(cmd, why);
    a->speculative = probe.speculative_tokens > 0;
    if (run && !has_protocol) return usage(cmd, "--protocol is required");
    if (run && !a->input) return usage(cmd, "a REQUEST.json file (or - for stdin) is required");
    return EXIT_OK;
}

/* ---- run ------------------------------------------------------------------- */

int cli_run(int argc, char **argv)
{
    run_args a;
    int st = parse_args("run", argc, argv, &a);
    if (st != EXIT_OK) return st == EXIT_HELP ? EXIT_OK : st;
    size_t len;
    char *body = cli_read_input("run", a.input, &len);
    if (!body) return EXIT_FAILED;
    /* A body that is not even a JSON object fails before the model loads (the
     * codec checks the rest; JSON that does not parse is reported in the
     * library's words, as render and the bindings report it). The body's own stream flag asks for
     * SSE too;
     * --stream sets it, so the chunks are those of a streaming request. */
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
    if (!json_is_object(root)) {
        char why[600];
        if (root || cli_request_error(a.protocol, body, len, why, sizeof why) != 0)
            snprintf(why, sizeof why, "request: %s", root ? "expected a JSON object" : jerr.text);
        fprintf(stderr, "deepinfer run: %s\n", why);
        json_decref(root);
        free(body);
        return EXIT_FAILED;
    }
    int sse = a.stream || json_is_true(json_object_get(root, "stream"));
    /* Chat `n`: its choices decode together (a value out of range is the
     * engine's to refuse) */
    json_t *nv = json_object_get(root, "n");
    a.n_choices = json_is_integer(nv) && json_integer_value(nv) > 1 && json_integer_value(nv) <= 128
                      ? (int)json_integer_value(nv)
                      : 1;
    int edited = 0;
    if (a.stream && !json_is_true(json_object_get(root, "stream"))) {
        json_object_set_new(root, "stream", json_true());
        edited = 1;
    }
    /* --max-tokens overrides the body's budget: it is written into the body,
     * whose fields win over di_request's (docs/api.md, "Sampling precedence") */
    if (a.max_tokens > 0) {
        const char *field =
            a.protocol == DI_PROTOCOL_RESPONSES ? "max_output_tokens" : "max_tokens";
        json_object_del(root, "max_completion_tokens");
        json_object_set_new(root, field, json_integer(a.max_tokens));
        edited = 1;
    }
    if (edited) {
        char *with = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (with) {
            free(body);
            body = with;
            len = strlen(body);
        }
    }
    json_decref(root);
    signal(SIGINT, on_sigint);
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is a write error, reported */
    di_engine *e = load("run", &a);
    if (!e) {
        free(body);
        return interrupted ? EXIT_INTERRUPTED : EXIT_FAILED;
    }
    turn t = {0};
    t.a = &a;
    t.sse = sse;
    int rc = run_turn("run", e, body, len, &t);
    free(body);
    di_engine_destroy(e);
    if (rc != 0) return EXIT_FAILED;
    if (!sse && t.response) printf("%s\n", t.response);
    free(t.response);
    if (t.write_failed) return EXIT_FAILED; /* main says the output could not be written */
    if (t.status == DI_ERR_CANCELLED && interrupted) {
        fprintf(stderr, "deepinfer run: interrupted\n");
        return EXIT_INTERRUPTED;
    }
    if (t.status != DI_OK) {
        fprintf(stderr, "deepinfer run: %s: %s\n", di_status_string(t.status), t.message);
        return EXIT_FAILED;
    }
    return EXIT_OK;
}

/* ---- chat ------------------------------------------------------------------ */

int cli_chat(int argc, char **argv)
{
    run_args a;
    int st = parse_args("chat", argc, argv, &a);
    if (st != EXIT_OK) return st == EXIT_HELP ? EXIT_OK : st;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt ends getline */
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    di_engine *e = load("chat", &a);
    if (!e) return interrupted ? EXIT_INTERRUPTED : EXIT_FAILED;
    int tty = isatty(STDIN_FILENO), dim = isatty(STDOUT_FILENO);
    json_t *messages = json_array();
    if (a.system)
        json_array_append_new(messages,
                              json_pack("{s:s, s:s}", "role", "system", "content", a.system));
    size_t n_fixed = json_array_size(messages);
    if (tty) fprintf(stderr, "chat with the model: /reset starts over, /quit leaves\n");
    char *line = NULL;
    size_t cap = 0;
    int status = EXIT_OK;
    for (;;) {
        if (tty) fprintf(stderr, "> ");
        interrupted = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) break; /* end of input, or Ctrl-C at the prompt */
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if (strcmp(line, "/quit") == 0) break;
        if (strcmp(line, "/reset") == 0) {
            while (json_array_size(messages) > n_fixed)
                json_array_remove(messages, json_array_size(messages) - 1);
            continue;
        }
        json_t *user = json_pack("{s:s, s:s#}", "role", "user", "content", line, (int)n);
        if (!user) {
            fprintf(stderr, "[the line is not valid UTF-8: not sent]\n");
            status = EXIT_FAILED;
            continue;
        }
        json_array_append_new(messages, user);
        /* the V4 encodings convert by the reference's model names; the others
         * echo whatever is given */
        int32_t enc = di_engine_encoding(e);
        const char *name = enc == DI_ENCODING_DSV4    ? "DeepSeek-V4-Pro"
                           : enc == DI_ENCODING_DSV41 ? "DeepSeek-V4.1-Flash"
                                                      : "deepinfer";
        json_t *req =
            json_pack("{s:s, s:b, s:O}", "model", name, "stream", 1, "messages", messages);
        char *body = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        turn t = {0};
        t.a = &a;
        t.chat = 1;
        t.dim = dim;
        t.calls = json_array();
        int rc = body ? run_turn("chat", e, body, strlen(body), &t) : -1;
        free(body);
        printf("\n");
        if (rc != 0) {
            json_array_remove(messages, json_array_size(messages) - 1);
            status = EXIT_FAILED; /* the session goes on; its status says a turn failed */
        } else {
            if (t.status != DI_OK && !(t.status == DI_ERR_CANCELLED && interrupted)) {
                fprintf(stderr, "[%s: %s]\n", di_status_string(t.status), t.message);
                status = EXIT_FAILED;
            }
            /* the answer joins the history, as far as it was written */
            json_t *m = json_pack("{s:s, s:s%}", "role", "assistant", "content",
                                  t.text ? t.text : "", t.text_len);
            if (json_array_size(t.calls) > 0) json_object_set(m, "tool_calls", t.calls);
            json_array_append_new(messages, m);
        }
        json_decref(t.calls);
        free(t.text);
        free(t.response);
        if (fflush(stdout) != 0) {
            status = EXIT_FAILED;
            break;
        }
    }
    free(line);
    json_decref(messages);
    di_engine_destroy(e);
    return status;
}
