/* deepinfer tokenize --tokenizer PATH [--special] [--decode] FILE|-
 *
 * Encode: prints the token IDs of the text in FILE as a JSON array (one line).
 * Special-token spellings in the text are plain text unless --special is given,
 * when every added token is recognised (DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED).
 * Decode (--decode): FILE holds a JSON array of IDs; prints their text exactly,
 * with no added newline. PATH is a tokenizer.json, a directory holding one, or a
 * .gguf file. docs/cli.md documents it. */
#include <deepinfer/deepinfer.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define TOKENIZE_USAGE "deepinfer tokenize --tokenizer PATH [--special] [--decode] FILE|-"

static int usage(const char *why)
{
    fprintf(stderr, "deepinfer tokenize: %s (usage: " TOKENIZE_USAGE ")\n", why);
    return EXIT_USAGE;
}

/* Parse a JSON array of integers, strictly: [ int (, int)* ] with whitespace. */
static int parse_ids(const char *s, int32_t **ids, size_t *n, const char **why)
{
    size_t cap = 256;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) {
        *why = "out of memory";
        return -1;
    }
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    if (*s++ != '[') {
        *why = "expected a JSON array of token IDs";
        return -1;
    }
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
        if (*s == ']' && *n == 0) {
            s++;
            break;
        }
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < INT32_MIN || v > INT32_MAX || *s == '+') {
            *why = "expected an integer token ID in the array";
            return -1;
        }
        if (*n == cap) {
            int32_t *bigger = realloc(*ids, cap * 2 * sizeof *bigger);
            if (!bigger) {
                *why = "out of memory";
                return -1;
            }
            *ids = bigger;
            cap *= 2;
        }
        (*ids)[(*n)++] = (int32_t)v;
        s = end;
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s == ']') {
            s++;
            break;
        }
        *why = "expected ',' or ']' in the array";
        return -1;
    }
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    if (*s) {
        *why = "unexpected text after the array";
        return -1;
    }
    return 0;
}

int cli_tokenize(int argc, char **argv)
{
    const char *path = NULL, *input = NULL;
    int special = 0, decode = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0) {
            if (++i == argc) return usage("--tokenizer needs a PATH");
            path = argv[i];
        } else if (strcmp(argv[i], "--special") == 0) {
            special = 1;
        } else if (strcmp(argv[i], "--decode") == 0) {
            decode = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: " TOKENIZE_USAGE "\n(docs/cli.md)\n");
            return EXIT_OK;
        } else if (argv[i][0] == '-' && argv[i][1] != 0) {
            char why[160];
            snprintf(why, sizeof why, "unknown option '%.100s'", argv[i]);
            return usage(why);
        } else if (input) {
            return usage("more than one input FILE");
        } else {
            input = argv[i];
        }
    }
    if (!path) return usage("--tokenizer PATH is required");
    if (!input) return usage("an input FILE (or - for stdin) is required");

    size_t len;
    char *text = cli_read_input("tokenize", input, &len);
    if (!text) return EXIT_FAILED;
    di_tokenizer *tok = NULL;
    di_error *err = NULL;
    int status = EXIT_FAILED;
    if (di_tokenizer_load(path, &tok, &err) != DI_OK) {
        fprintf(stderr, "deepinfer tokenize: %s\n", di_error_message(err));
        goto done;
    }
    if (decode) {
        int32_t *ids = NULL;
        size_t n = 0;
        const char *why = NULL;
        if (parse_ids(text, &ids, &n, &why) != 0) {
            fprintf(stderr, "deepinfer tokenize: %s: %s\n", input, why);
            free(ids);
            goto done;
        }
        char *out = NULL;
        size_t out_len = 0;
        di_status st = di_tokenizer_decode(tok, ids, n, 0, &out, &out_len, &err);
        free(ids);
        if (st != DI_OK) {
            fprintf(stderr, "deepinfer tokenize: %s\n", di_error_message(err));
            goto done;
        }
        fwrite(out, 1, out_len, stdout);
        di_text_free(out);
    } else {
        int32_t *ids = NULL;
        size_t n = 0;
        unsigned flags = special ? DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED : 0;
        if (di_tokenizer_encode(tok, text, len, flags, &ids, &n, &err) != DI_OK) {
            fprintf(stderr, "deepinfer tokenize: %s: %s\n", input, di_error_message(err));
            goto done;
        }
        putchar('[');
        for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
        puts("]");
        di_tokens_free(ids);
    }
    status = EXIT_OK;
done:
    di_error_free(err);
    di_tokenizer_free(tok);
    free(text);
    return status;
}
