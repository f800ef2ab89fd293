/* Shared pieces of the deepinfer command: exit statuses, input reading, and the
 * commands that live in their own files. */
#ifndef DEEPINFER_CLI_H
#define DEEPINFER_CLI_H

#include <deepinfer/deepinfer.h>
#include <stddef.h>

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };

/* Read all of FILE, or stdin for "-", into a new NUL-terminated buffer (*len
 * bytes, the NUL not counted). Prints one line on stderr and returns NULL on
 * failure. */
char *cli_read_input(const char *command, const char *path, size_t *len);

/* The encoding named dsv4, dsv41, dsv3, r1 or chatml; returns -1 for another name. */
int cli_encoding(const char *name, di_encoding *out);

/* A decimal integer in [lo, hi] (the whole string) into *out; -1 otherwise. */
int cli_parse_long(const char *s, long lo, long hi, long *out);

/* Seconds on the monotonic clock. */
double cli_now(void);

/* The protocol named chat, messages or responses; returns -1 for another name. */
int cli_protocol(const char *name, di_protocol *out);

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
