/* Shared pieces of the deepinfer command: exit statuses, input reading, and the
 * commands that live in their own files. */
#ifndef DEEPINFER_CLI_H
#define DEEPINFER_CLI_H

#include <deepinfer/deepinfer.h>
#include <stddef.h>
#include <stdint.h>

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };

/* Read all of FILE, or stdin for "-", into a new NUL-terminated buffer (*len
 * bytes, the NUL not counted). Prints one line on stderr and returns NULL on
 * failure. */
char *cli_read_input(const char *command, const char *path, size_t *len);

/* Why the library refuses a request body the CLI's own JSON reader (jansson)
 * would not take, in the library's words (di_codec_render's message, e.g.
 * "request: invalid JSON at line 1 column 14 (byte 13): EOF while parsing a
 * value"), so a bad body reads the same from run, serve, render and the
 * bindings. Writes it into msg (size bytes) and returns 0, or returns -1
 * without touching msg when the library reads the body. */
int cli_request_error(di_protocol protocol, const char *body, size_t len, char *msg, size_t size);

/* The encoding named dsv4, dsv41, dsv3, r1 or chatml; returns -1 for another name. */
int cli_encoding(const char *name, di_encoding *out);

/* --device: "cpu" or "cuda" into *out (a di_device). Returns 0, or -1 for any
 * other name (the caller prints the usage error). */
int cli_device(const char *name, int32_t *out);

/* The KV cache type named f16, f32, q8_0 or q4_0 (--kv-cache-type, as
 * llama.cpp's --cache-type-k/v names them) into *out, a di_kv_cache_type;
 * returns -1 for another name. */
int cli_kv_cache_type(const char *name, int32_t *out);
/* The name of a di_kv_cache_type ("f16", ...); "?" for another value. */
const char *cli_kv_cache_type_name(int32_t type);

/* A decimal integer in [lo, hi] (the whole string) into *out; -1 otherwise. */
int cli_parse_long(const char *s, long lo, long hi, long *out);

/* Seconds on the monotonic clock. */
double cli_now(void);

/* The protocol named chat, messages or responses; returns -1 for another name. */
int cli_protocol(const char *name, di_protocol *out);

/* Speculative decoding's options (draft_options.c; docs/cli.md): --draft
 * off|auto|prompt-lookup|draft-model|mtp, --draft-max N (0 to 64; --speculative N
 * is its older name), --draft-model PATH. Initialise with {0, 0, -1, NULL}. */
typedef struct cli_draft {
    int named;         /* --draft was given */
    int32_t draft;     /* a di_draft, or -1: off */
    long max;          /* --draft-max; -1: not given */
    const char *model; /* --draft-model, or NULL */
} cli_draft;
#define CLI_DRAFT_INIT                                                                             \
    {                                                                                              \
        0, 0, -1, NULL                                                                             \
    }
/* When option o (with its value v) is one of them: records it and returns 1,
 * *why getting NULL or the usage message of a bad value; 0 otherwise. */
int cli_draft_option(const char *o, const char *v, cli_draft *d, const char **why);
/* The engine's speculative_tokens, draft and draft_model_path from them: off
 * unless one is given; a drafter without --draft-max verifies up to 8 drafts
 * a step. Returns NULL, or the usage message of a combination that does not
 * fit (draft-model without a path, a path with prompt-lookup, mtp or off, ...). */
const char *cli_draft_apply(const cli_draft *d, di_engine_config *cfg);

int cli_tokenize(int argc, char **argv);
int cli_render(int argc, char **argv);
int cli_parse(int argc, char **argv);
int cli_generate(int argc, char **argv);
int cli_logits(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_chat(int argc, char **argv);
/* deepinfer serve (serve/serve.c), or a refusal when built without libmicrohttpd. */
int cli_serve(int argc, char **argv);
int cli_info(int argc, char **argv);

#endif
