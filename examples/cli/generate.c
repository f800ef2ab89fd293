/* deepinfer generate --model PATH --tokens 1,2,3 --max-tokens N [--threads T] [--ctx N]
 *                    [--kv-f32 | --kv-cache-type f16|f32|q8_0|q4_0]
 *                    [--draft off|auto|prompt-lookup|draft-model|mtp] [--draft-max N]
 *                    [--draft-model PATH] [--verbose]
 * deepinfer logits   --model PATH --tokens 1,2,3 --out FILE [--threads T] [--ctx N]
 *                    [--kv-f32 | --kv-cache-type f16|f32|q8_0|q4_0]
 *
 * generate: greedy decoding (the highest logit; the lowest id on ties) of N
 * tokens after the prompt; prints the generated token IDs as a JSON array on
 * one line. It does not stop at end-of-sequence tokens: exactly N are made.
 * --verbose: also prints to stderr the CPU kernels that ran (di_cpu_kernels), the KV cache bytes
 * per token (di_model_kv_bytes_per_token) and the prefill and decode speeds.
 * --draft / --draft-max / --draft-model (--speculative N: --draft-max N) run it
 * through the engine with speculative decoding (di_engine_create, a token
 * request with ignore_eos, di_poll): the same tokens, sooner where drafts are
 * kept; --verbose then prints which drafter runs and the drafted and kept
 * counts. The engine's runs
 * (a drafter, a constraint, --device cuda) print no KV cache line.
 * logits: runs the prompt once and writes the logits of every position to FILE
 * as little-endian f32, row-major [n_tokens, vocab].
 * PATH is a .gguf file or a Hugging Face model directory. Built only on the
 * public API (di_model_*). docs/cli.md documents both. */
#include <deepinfer/deepinfer.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct gen_args {
    const char *model, *tokens, *out;
    long max_tokens, threads, ctx;
    int kv_f32, verbose;
    int32_t kv_type; /* --kv-cache-type: a di_kv_cache_type, 0: f16 */
    int kv_type_given;
    cli_draft draft;
    /* --json-schema (a file, or the JSON itself when it starts with '{'),
     * --grammar (a GBNF file), --regex (the pattern): at most one; the values
     * as given on the command line, read by load_constraint */
    const char *json_schema, *grammar, *regex;
    int32_t device; /* --device: a di_device, 0: the default (the CPU) */
} gen_args;

/* parse_args' status for --help: the usage was printed, the command succeeds. */
enum { EXIT_HELP = -1 };

static int usage(const char *cmd, const char *why)
{
    if (strcmp(cmd, "generate") == 0)
        fprintf(stderr,
                "deepinfer generate: %s (usage: deepinfer generate --model PATH --tokens "
                "ID,ID,... --max-tokens N [--threads T] [--ctx N] [--kv-f32 | --kv-cache-type "
                "f16|f32|q8_0|q4_0] [--draft "
                "off|auto|prompt-lookup|draft-model|mtp] [--draft-max N] [--draft-model PATH] "
                "[--json-schema FILE|JSON | --grammar FILE | --regex PATTERN] [--device cpu|cuda] "
                "[--verbose])\n",
                why);
    else
        fprintf(
            stderr,
            "deepinfer logits: %s (usage: deepinfer logits --model PATH --tokens ID,ID,... "
            "--out FILE [--threads T] [--ctx N] [--kv-f32 | --kv-cache-type f16|f32|q8_0|q4_0])\n",
            why);
    return EXIT_USAGE;
}

/* "1,2,3" -> ids; an empty list or a malformed entry is an error. */
static int parse_tokens(const char *s, int32_t **ids, size_t *n)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) return -1;
    *n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        if (*p < '0' || *p > '9') {
            if (*p != '-') return -1;
        }
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX) return -1;
        (*ids)[(*n)++] = (int32_t)v;
        if (*end == '\0') break;
        if (*end != ',') return -1;
        p = end + 1;
    }
    return 0;
}

/* Whether o is one of cmd's options that take a value (so one given last
 * lacks it, where another is unknown). */
static int takes_value(const char *cmd, const char *o)
{
    static const char *const any[] = {"--kv-cache-type", "--model", "--tokens", "--threads",
                                      "--ctx"};
    static const char *const gen[] = {"--draft",       "--draft-max",   "--speculative",
                                      "--draft-model", "--json-schema", "--grammar",
                                      "--regex",       "--device",      "--max-tokens"};
    for (size_t i = 0; i < sizeof any / sizeof any[0]; i++)
        if (strcmp(o, any[i]) == 0) return 1;
    if (strcmp(cmd, "logits") == 0) return strcmp(o, "--out") == 0;
    for (size_t i = 0; i < sizeof gen / sizeof gen[0]; i++)
        if (strcmp(o, gen[i]) == 0) return 1;
    return 0;
}

static int parse_args(const char *cmd, int argc, char **argv, gen_args *a)
{
    memset(a, 0, sizeof *a);
    a->draft = (cli_draft)CLI_DRAFT_INIT;
    a->max_tokens = -1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            printf("usage: deepinfer %s --model PATH --tokens ID,ID,... %s[--threads T] [--ctx N] "
                   "[--kv-f32 | --kv-cache-type f16|f32|q8_0|q4_0]%s\n(docs/cli.md)\n",
                   cmd, strcmp(cmd, "generate") == 0 ? "--max-tokens N " : "--out FILE ",
                   strcmp(cmd, "generate") == 0
                       ? " [--draft off|auto|prompt-lookup|draft-model|mtp] [--draft-max N] "
                         "[--draft-model PATH] [--json-schema FILE|JSON | --grammar FILE | "
                         "--regex PATTERN] [--device cpu|cuda] [--verbose]"
                       : "");
            return EXIT_HELP;
        }
        if (strcmp(o, "--kv-f32") == 0) {
            a->kv_f32 = 1;
            continue;
        }
        if (strcmp(o, "--verbose") == 0 && strcmp(cmd, "generate") == 0) {
            a->verbose = 1;
            continue;
        }
        if (o[0] != '-') return usage(cmd, "unexpected argument (options only: see docs/cli.md)");
        if (i + 1 >= argc) {
            char why[300];
            snprintf(why, sizeof why,
                     takes_value(cmd, o) ? "missing value after %s" : "unknown option '%s'", o);
            return usage(cmd, why);
        }
        const char *v = argv[++i];
        const char *bad = NULL;
        if (strcmp(cmd, "generate") == 0 && cli_draft_option(o, v, &a->draft, &bad)) {
            if (bad) return usage(cmd, bad);
        } else if (strcmp(cmd, "generate") == 0 && strcmp(o, "--json-schema") == 0) {
            a->json_schema = v;
        } else if (strcmp(cmd, "generate") == 0 && strcmp(o, "--grammar") == 0) {
            a->grammar = v;
        } else if (strcmp(cmd, "generate") == 0 && strcmp(o, "--regex") == 0) {
            a->regex = v;
        } else if (strcmp(cmd, "generate") == 0 && strcmp(o, "--device") == 0) {
            if (cli_device(v, &a->device) != 0) return usage(cmd, "--device must be cpu or cuda");
        } else if (strcmp(o, "--kv-cache-type") == 0) {
            if (cli_kv_cache_type(v, &a->kv_type) != 0)
                return usage(cmd, "--kv-cache-type must be f16, f32, q8_0 or q4_0");
            a->kv_type_given = 1;
        } else if (strcmp(o, "--model") == 0) {
            a->model = v;
        } else if (strcmp(o, "--tokens") == 0) {
            a->tokens = v;
        } else if (strcmp(o, "--out") == 0 && strcmp(cmd, "logits") == 0) {
            a->out = v;
        } else if (strcmp(o, "--max-tokens") == 0 && strcmp(cmd, "generate") == 0) {
            if (cli_parse_long(v, 0, 1L << 24, &a->max_tokens))
                return usage(cmd, "--max-tokens: expected an integer from 0");
        } else if (strcmp(o, "--threads") == 0) {
            if (cli_parse_long(v, 1, 1024, &a->threads))
                return usage(cmd, "--threads: expected an integer from 1 to 1024");
        } else if (strcmp(o, "--ctx") == 0) {
            if (cli_parse_long(v, 1, 1L << 30, &a->ctx))
                return usage(cmd, "--ctx: expected an integer from 1 to 1073741824 (tokens)");
        } else {
            char why[300];
            snprintf(why, sizeof why, "unknown option '%s'", o);
            return usage(cmd, why);
        }
    }
    if (!a->model) return usage(cmd, "--model is required");
    if (!a->tokens) return usage(cmd, "--tokens is required");
    if (strcmp(cmd, "generate") == 0 && a->max_tokens < 0)
        return usage(cmd, "--max-tokens is required");
    if (strcmp(cmd, "logits") == 0 && !a->out) return usage(cmd, "--out is required");
    if ((a->json_schema != NULL) + (a->grammar != NULL) + (a->regex != NULL) > 1)
        return usage(cmd, "--json-schema, --grammar and --regex are mutually exclusive");
    di_engine_config probe;
    di_engine_config_init(&probe);
    const char *why = cli_draft_apply(&a->draft, &probe);
    if (why) return usage(cmd, why);
    if (a->kv_f32 && a->kv_type_given && a->kv_type != DI_KV_CACHE_F32)
        return usage(cmd, "--kv-f32 and --kv-cache-type ask for different types");
    if (a->kv_f32) a->kv_type = DI_KV_CACHE_F32;
    return EXIT_OK;
}

static int fail_error(const char *cmd, di_error *err)
{
    fprintf(stderr, "deepinfer %s: %s\n", cmd, di_error_message(err));
    di_error_free(err);
    return EXIT_FAILED;
}

static int load(const char *cmd, const gen_args *a, di_model **m)
{
    di_model_options o;
    di_model_options_init(&o);
    o.n_threads = (int32_t)a->threads;
    o.kv_cache_type = a->kv_type;
    o.n_ctx = a->ctx;
    di_error *err = NULL;
    if (di_model_load(a->model, &o, m, &err) != DI_OK) return fail_error(cmd, err);
    return EXIT_OK;
}

typedef struct spec_run {
    int32_t *out;
    long n_out, max;
    int done;
    di_status status;
    char message[300];
    uint32_t drafted, accepted;
    double t_first, t_last; /* the first and last token events' arrival */
    int n_batches;          /* token events apart in time (1: all at once) */
} spec_run;

static void on_spec_event(void *user, const di_event *ev)
{
    spec_run *r = user;
    if (di_event_kind_of(ev) == DI_EVENT_TOKENS) {
        size_t n = 0;
        const int32_t *t = di_event_tokens(ev, &n);
        const double now = cli_now();
        if (r->n_out == 0 && n > 0) r->t_first = now;
        if (n > 0 && (r->n_batches == 0 || now - r->t_last > 1e-4)) r->n_batches++;
        if (n > 0) r->t_last = now;
        for (size_t i = 0; i < n && r->n_out < r->max; i++) r->out[r->n_out++] = t[i];
    } else if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        r->done = 1;
        r->status = di_event_status(ev);
        snprintf(r->message, sizeof r->message, "%s", di_event_message(ev));
        r->drafted = di_event_draft_tokens(ev);
        r->accepted = di_event_accepted_draft_tokens(ev);
    }
}

static int constrained(const gen_args *a)
{
    return a->json_schema || a->grammar || a->regex;
}

/* the engine path (not di_model_*): a drafter, a constraint or a device other
 * than the CPU */
/* The engine's warnings, and with --verbose (user non-zero) which drafter it
 * chose (its "speculative decoding: ..." line). */
static void on_engine_log(void *user, di_log_level level, const char *message)
{
    if (level <= DI_LOG_WARN ||
        (*(const int *)user && strncmp(message, "speculative decoding:", 21) == 0))
        fprintf(stderr, "deepinfer generate: %s\n", message);
}

static int needs_engine(const gen_args *a)
{
    return constrained(a) || a->device == DI_DEVICE_CUDA;
}

/* The text of --json-schema (inline JSON when it starts with '{', else a
 * file) or --grammar (a file) in *out, owned by the caller; NULL when the
 * option is absent. Returns EXIT_OK, or EXIT_FAILED with the reason printed
 * (a file that cannot be read). */
static int load_constraint(const char *value, int is_schema, char **out)
{
    *out = NULL;
    if (!value) return EXIT_OK;
    if (is_schema && value[0] == '{') {
        *out = strdup(value);
        if (*out) return EXIT_OK;
        fprintf(stderr, "deepinfer generate: out of memory\n");
        return EXIT_FAILED;
    }
    size_t len = 0;
    *out = cli_read_input("generate", value, &len);
    return *out ? EXIT_OK : EXIT_FAILED;
}

/* generate through the engine (speculative decoding or a constraint): greedy,
 * exactly max_tokens tokens (ignore_eos) or, constrained, until the output is
 * complete, printed as run() prints them. */
static int generate_speculative(const gen_args *a, const int32_t *ids, size_t n)
{
    char *schema = NULL, *grammar = NULL;
    if (load_constraint(a->json_schema, 1, &schema) != EXIT_OK ||
        load_constraint(a->grammar, 0, &grammar) != EXIT_OK) {
        free(schema);
        return EXIT_FAILED;
    }
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = a->model;
    cfg.n_threads = (int32_t)a->threads;
    cfg.n_ctx = a->ctx;
    cfg.kv_cache_type = a->kv_type;
    cfg.max_running = 1;
    cfg.disable_prefix_cache = 1;
    cfg.log = on_engine_log;
    cfg.log_user = (void *)&a->verbose;
    if (a->device) cfg.device = a->device;
    (void)cli_draft_apply(&a->draft, &cfg); /* checked by parse_args */
    di_engine *e = NULL;
    di_error *err = NULL;
    int rc = EXIT_OK;
    spec_run r = {0};
    if (di_engine_create(&cfg, &e, &err) != DI_OK) {
        rc = fail_error("generate", err);
        goto done;
    }
    r.max = a->max_tokens;
    r.out = malloc((size_t)(a->max_tokens > 0 ? a->max_tokens : 1) * sizeof *r.out);
    if (!r.out) {
        fprintf(stderr, "deepinfer generate: out of memory\n");
        rc = EXIT_FAILED;
        goto done;
    }
    if ((int64_t)n + a->max_tokens > di_engine_context_length(e)) {
        fprintf(stderr,
                "deepinfer generate: %zu prompt tokens and %ld new ones exceed the context of "
                "%lld tokens\n",
                n, a->max_tokens, (long long)di_engine_context_length(e));
        rc = EXIT_FAILED;
        goto done;
    }
    if (a->max_tokens > 0) {
        di_request req;
        di_request_init(&req);
        req.tokens = ids;
        req.n_tokens = n;
        req.max_tokens = a->max_tokens;
        req.temperature = 0;
        /* a constrained output ends when it is complete (the model's end of
         * sequence is allowed only then); unconstrained, exactly max_tokens */
        req.ignore_eos = !constrained(a);
        req.json_schema = schema;
        req.grammar = grammar;
        req.regex = a->regex;
        req.on_event = on_spec_event;
        req.user_data = &r;
        uint64_t id = 0;
        double t0 = cli_now();
        if (di_submit(e, &req, &id, &err) != DI_OK) {
            rc = fail_error("generate", err);
            goto done;
        }
        while (!r.done)
            if (di_poll(e, 100) < 0) break;
        if (r.status != DI_OK || (r.n_out != a->max_tokens && !constrained(a))) {
            fprintf(stderr, "deepinfer generate: %s\n",
                    r.status != DI_OK ? r.message : "the engine stopped before max-tokens");
            rc = EXIT_FAILED;
            goto done;
        }
        if (a->verbose && r.n_out > 1 && r.n_batches > 1) /* (a constrained output may end early) */
            fprintf(stderr,
                    "deepinfer generate: prefill %zu tokens %.1f tokens/s, decode %ld tokens "
                    "%.1f tokens/s\n",
                    n, (double)n / (r.t_first - t0), r.n_out - 1,
                    (double)(r.n_out - 1) / (r.t_last - r.t_first));
        else if (a->verbose && r.n_out > 1) /* every token before the host polled */
            fprintf(stderr,
                    "deepinfer generate: prefill %zu tokens, decode %ld tokens (delivered together "
                    "%.2f ms after submission, at least %.1f tokens/s in all: the engine "
                    "finished before the host polled)\n",
                    n, r.n_out - 1, (r.t_last - t0) * 1e3,
                    (double)((long)n + r.n_out) / (r.t_last - t0));
    }
    putchar('[');
    for (long i = 0; i < r.n_out; i++) printf(i ? ",%d" : "%d", (int)r.out[i]);
    printf("]\n");
    if (a->verbose && cfg.speculative_tokens > 0)
        fprintf(stderr,
                "deepinfer generate: speculative decoding: %u draft tokens verified, %u kept\n",
                r.drafted, r.accepted);
    if (a->verbose && a->device != DI_DEVICE_CUDA)
        fprintf(stderr, "deepinfer generate: CPU kernels: %s\n", di_cpu_kernels());
done:
    free(r.out);
    free(schema);
    free(grammar);
    di_engine_destroy(e);
    return rc;
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int run(const char *cmd, int argc, char **argv)
{
    gen_args a;
    int rc = parse_args(cmd, argc, argv, &a);
    if (rc != EXIT_OK) return rc == EXIT_HELP ? EXIT_OK : rc;
    int32_t *ids = NULL;
    size_t n = 0;
    if (parse_tokens(a.tokens, &ids, &n)) {
        free(ids);
        return usage(cmd, "--tokens: expected comma-separated token IDs, e.g. 1,2,3");
    }
    if (strcmp(cmd, "generate") == 0) {
        di_engine_config probe;
        di_engine_config_init(&probe);
        (void)cli_draft_apply(&a.draft, &probe);
        if (probe.speculative_tokens > 0 || needs_engine(&a)) {
            rc = generate_speculative(&a, ids, n);
            free(ids);
            return rc;
        }
    }
    di_model *m = NULL;
    float *logits = NULL;
    if ((rc = load(cmd, &a, &m)) != EXIT_OK) goto done;
    int32_t vocab = di_model_vocab_size(m);
    di_error *err = NULL;
    if (strcmp(cmd, "logits") == 0) {
        logits = malloc(n * (size_t)vocab * sizeof *logits);
        if (!logits) {
            fprintf(stderr, "deepinfer logits: out of memory\n");
            rc = EXIT_FAILED;
            goto done;
        }
        if (di_model_eval(m, ids, n, logits, DI_EVAL_ALL_LOGITS, &err) != DI_OK) {
            rc = fail_error(cmd, err);
            goto done;
        }
        FILE *f = fopen(a.out, "wb");
        if (!f) {
            fprintf(stderr, "deepinfer logits: cannot open '%s': %s\n", a.out, strerror(errno));
            rc = EXIT_FAILED;
            goto done;
        }
        size_t w = fwrite(logits, sizeof *logits, n * (size_t)vocab, f);
        if (fclose(f) != 0 || w != n * (size_t)vocab) {
            fprintf(stderr, "deepinfer logits: cannot write '%s'\n", a.out);
            rc = EXIT_FAILED;
        }
        goto done;
    }
    logits = malloc((size_t)vocab * sizeof *logits);
    if (!logits) {
        fprintf(stderr, "deepinfer generate: out of memory\n");
        rc = EXIT_FAILED;
        goto done;
    }
    if (a.max_tokens > 0 && (int64_t)n + a.max_tokens - 1 > di_model_context_length(m)) {
        fprintf(stderr,
                "deepinfer generate: %zu prompt tokens and %ld new ones exceed the context of "
                "%lld tokens\n",
                n, a.max_tokens, (long long)di_model_context_length(m));
        rc = EXIT_FAILED;
        goto done;
    }
    if (a.verbose)
        fprintf(stderr, "deepinfer generate: KV cache %lld bytes per token (%s)\n",
                (long long)di_model_kv_bytes_per_token(m), cli_kv_cache_type_name(a.kv_type));
    /* the IDs are printed only when every step succeeded: a failed run prints
     * its error and nothing on stdout */
    int32_t *out = a.max_tokens > 0 ? malloc((size_t)a.max_tokens * sizeof *out) : NULL;
    if (a.max_tokens > 0 && !out) {
        fprintf(stderr, "deepinfer generate: out of memory\n");
        rc = EXIT_FAILED;
        goto done;
    }
    double t0 = cli_now(), t1 = t0;
    if (a.max_tokens > 0) {
        if (di_model_eval(m, ids, n, logits, 0, &err) != DI_OK) {
            free(out);
            rc = fail_error(cmd, err);
            goto done;
        }
        t1 = cli_now();
        for (long i = 0; i < a.max_tokens; i++) {
            for (int32_t v = 0; v < vocab; v++)
                if (!isfinite(logits[v])) {
                    fprintf(stderr,
                            "deepinfer generate: the model computed a non-finite logit (NaN or "
                            "infinity) at output token %ld: its weights are probably corrupt\n",
                            i);
                    free(out);
                    rc = EXIT_FAILED;
                    goto done;
                }
            int32_t next = argmax(logits, vocab);
            out[i] = next;
            if (i + 1 == a.max_tokens) break;
            if (di_model_eval(m, &next, 1, logits, 0, &err) != DI_OK) {
                free(out);
                rc = fail_error(cmd, err);
                goto done;
            }
        }
    } else if (di_model_eval(m, ids, n, NULL, 0, &err) != DI_OK) {
        rc = fail_error(cmd, err);
        goto done;
    }
    putchar('[');
    for (long i = 0; i < a.max_tokens; i++) printf(i ? ",%d" : "%d", (int)out[i]);
    printf("]\n");
    free(out);
    if (a.verbose && a.max_tokens > 1) {
        double t2 = cli_now();
        fprintf(stderr,
                "deepinfer generate: prefill %zu tokens %.1f tokens/s, decode %ld tokens %.1f "
                "tokens/s\n",
                n, (double)n / (t1 - t0), a.max_tokens - 1, (double)(a.max_tokens - 1) / (t2 - t1));
    }
    if (a.verbose) fprintf(stderr, "deepinfer generate: CPU kernels: %s\n", di_cpu_kernels());
done:
    free(logits);
    free(ids);
    di_model_free(m);
    return rc;
}

int cli_generate(int argc, char **argv)
{
    return run("generate", argc, argv);
}
int cli_logits(int argc, char **argv)
{
    return run("logits", argc, argv);
}
