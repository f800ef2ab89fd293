/* deepinfer — the command-line front end of the SDK, built only on the public API.
 *
 *   deepinfer render --protocol chat --encoding dsv4|dsv41 [--tokenizer PATH] [--tokens] FILE|-
 *   deepinfer tokenize --tokenizer PATH [--special] [--decode] FILE|-
 *   deepinfer parse --protocol P --request REQ.json [--stream] [...] CHUNKS.json|-
 *   deepinfer generate --model PATH --tokens ID,... --max-tokens N [--threads T] [--kv-f32]
 *   deepinfer logits --model PATH --tokens ID,... --out FILE [--threads T] [--kv-f32]
 *   deepinfer run --model PATH --protocol P [--stream] [...] REQUEST.json|-
 *   deepinfer chat --model PATH [--system TEXT] [...]
 *   deepinfer serve --model PATH [--host ADDR] [--port N] [...]
 *   deepinfer info --model PATH [--tokenizer PATH] [--ctx N]
 *   deepinfer version         print the library and header versions
 *   deepinfer help            list the commands
 *
 * Exit status: 0 on success, 1 when a command fails, 2 on a usage error (an
 * unknown command or option), with one line on stderr saying why. docs/cli.md
 * documents every command. */
#include <deepinfer/deepinfer.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} command;

static int cmd_version(int argc, char **argv);

#ifndef DI_HAVE_SERVE
int cli_serve(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: deepinfer serve --model PATH [OPTIONS] (docs/serve.md; not in this build: "
               "configure with libmicrohttpd-dev installed)\n");
        return EXIT_OK;
    }
    fprintf(stderr, "deepinfer serve: this build has no server (configure with libmicrohttpd "
                    "installed: libmicrohttpd-dev)\n");
    return EXIT_FAILED;
}
#endif
static int cmd_help(int argc, char **argv);

static const command commands[] = {
    {"run", "answer an API request with a model (JSON, or the SSE stream)", cli_run},
    {"chat", "talk with a model on the terminal, streaming", cli_chat},
    {"serve", "serve the OpenAI and Anthropic HTTP APIs with a model", cli_serve},
    {"render", "render an API request into a DeepSeek prompt or its token IDs", cli_render},
    {"tokenize", "encode text to token IDs, or decode IDs to text", cli_tokenize},
    {"parse", "turn generated text into a protocol response or SSE stream", cli_parse},
    {"generate", "greedy-decode token IDs after a prompt of token IDs", cli_generate},
    {"logits", "write the logits of every prompt position as f32", cli_logits},
    {"info", "describe a model as JSON (architecture, parameters, formats, template)", cli_info},
    {"version", "print the library and header versions", cmd_version},
    {"help", "list the commands, or with COMMAND its usage", cmd_help},
};

static int is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

static int cmd_version(int argc, char **argv)
{
    if (argc == 2 && is_help(argv[1])) {
        printf("usage: deepinfer version (prints the library and header versions)\n");
        return EXIT_OK;
    }
    if (argc > 1) {
        fprintf(stderr, "deepinfer version: unexpected argument '%s'\n", argv[1]);
        return EXIT_USAGE;
    }
    printf("deepinfer %s (header %s)\n", di_version_string(), DI_VERSION_STRING);
    return di_version() == DI_VERSION_NUMBER ? EXIT_OK : EXIT_FAILED;
}

static void print_usage(FILE *out)
{
    fprintf(out, "usage: deepinfer COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

static int cmd_help(int argc, char **argv)
{
    /* help COMMAND: that command's usage, as COMMAND --help */
    for (size_t i = 0; argc == 2 && i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0 && commands[i].run != cmd_help) {
            char *args[] = {argv[1], "--help", NULL};
            return commands[i].run(2, args);
        }
    if (argc > 1 && !(argc == 2 && is_help(argv[1]))) {
        fprintf(stderr, "deepinfer help: unexpected argument '%s'\n", argv[1]);
        return EXIT_USAGE;
    }
    print_usage(stdout);
    return EXIT_OK;
}

/* A command whose output could not be written (a full disk, a closed pipe) has
 * failed, whatever it computed. */
static int finish_output(int status)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "deepinfer: cannot write the output\n");
        return status == EXIT_OK ? EXIT_FAILED : status;
    }
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: deepinfer COMMAND [ARGS...] (try 'deepinfer help')\n");
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0) name = "version";
    if (is_help(name)) name = "help";
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0)
            return finish_output(commands[i].run(argc - 1, argv + 1));
    fprintf(stderr, "deepinfer: unknown command '%s' (try 'deepinfer help')\n", argv[1]);
    return EXIT_USAGE;
}
