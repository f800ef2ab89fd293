/* The C side of the grammar oracle (grammar_parity.py): loads a tokenizer
 * (tokenizer.json or GGUF), compiles a grammar and answers commands on stdin,
 * one per line, so the Python side can drive it next to xgrammar:
 *   v          the vocabulary: one line per id, "<special 0|1> <hex bytes>"
 *   m          the mask: the allowed ids, ascending, on one line
 *   a <id>     accept a token: "ok" or "rej"
 *   b <hex>    accept raw bytes: "ok" or "rej"
 *   t          the last mask's time in nanoseconds (grammar_matcher_fill_mask)
 *   k          the compile time in nanoseconds: the grammar, then the matcher
 *              with its precomputed adaptive mask entries
 *   c          "1" when the output is complete, else "0"
 * Usage: grammar_driver <tokenizer> <gbnf|json|regex> <grammar file> <eos id>
 * A grammar that does not compile prints "ERR <message>" and exits 2. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sampler/grammar.h"
#include "tokenizer/tokenizer.h"

static char *slurp(const char *path, size_t *len)
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
    *len = (size_t)n;
    return s;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: grammar_driver <tokenizer> <gbnf|json|regex> <file> <eos>\n");
        return 1;
    }
    tok_error terr;
    di_tokenizer_impl *tok = NULL;
    size_t pl = strlen(argv[1]);
    di_status st = pl > 5 && strcmp(argv[1] + pl - 5, ".gguf") == 0
                       ? tok_load_gguf(&tok, argv[1], &terr)
                       : tok_load_json(&tok, argv[1], &terr);
    if (st != DI_OK) {
        fprintf(stderr, "tokenizer: %d\n", (int)st);
        return 1;
    }
    int32_t n = tok->n_vocab;
    const uint8_t **bytes = calloc((size_t)n, sizeof *bytes);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    uint8_t *excl = calloc((size_t)n, 1);
    for (int32_t i = 0; i < n; i++) {
        if (tok_token_bytes(tok, i, &bytes[i], &lens[i], &terr) != DI_OK) lens[i] = 0;
        excl[i] = (tok->tok_flags[i] & TOK_FLAG_SPECIAL) != 0;
    }
    size_t len;
    char *text = slurp(argv[3], &len);
    if (!text) return 1;
    grammar_vocab *v;
    if (grammar_vocab_create(n, bytes, lens, excl, &v) != DI_OK) return 1;
    char msg[512];
    grammar *g = NULL;
    struct timespec c0, c1;
    clock_gettime(CLOCK_MONOTONIC, &c0);
    if (strcmp(argv[2], "gbnf") == 0)
        st = grammar_compile_gbnf(text, len, &g, msg, sizeof msg);
    else if (strcmp(argv[2], "json") == 0)
        st = grammar_compile_json_schema(text, len, &g, msg, sizeof msg);
    else
        st = grammar_compile_regex(text, len, &g, msg, sizeof msg);
    if (st != DI_OK) {
        printf("ERR %s\n", msg);
        return 2;
    }
    if (getenv("GRAMMAR_DRIVER_DUMP") && strcmp(argv[2], "json") == 0) {
        char *gb = grammar_json_schema_to_gbnf(text, len, msg, sizeof msg);
        fprintf(stderr, "%s", gb ? gb : msg);
        free(gb);
    }
    int32_t eos = atoi(argv[4]) >= 0 ? atoi(argv[4]) : tok->eos_id;
    grammar_matcher *m;
    if (grammar_matcher_create(g, v, &eos, 1, &m) != DI_OK) return 1;
    clock_gettime(CLOCK_MONOTONIC, &c1);
    long long compile_ns = (c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec);
    uint32_t *mask = calloc(((size_t)n + 31) / 32, sizeof *mask);
    char line[256];
    long long last_ns = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == 'v') {
            printf("eos %d\n", (int)eos);
            for (int32_t i = 0; i < n; i++) {
                printf("%d ", excl[i]);
                for (size_t j = 0; j < lens[i]; j++) printf("%02x", bytes[i][j]);
                printf("\n");
            }
            printf("end\n");
        } else if (line[0] == 'm') {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            if (grammar_matcher_fill_mask(m, mask) < 0) return 1;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            last_ns = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
            int first = 1;
            for (int32_t i = 0; i < n; i++)
                if ((mask[i >> 5] >> (i & 31)) & 1) printf(first ? "%d" : " %d", i), first = 0;
            printf("\n");
        } else if (line[0] == 'a') {
            printf(grammar_matcher_accept(m, atoi(line + 2)) == 0 ? "ok\n" : "rej\n");
        } else if (line[0] == 'b') { /* b <hex>: accept raw bytes (debugging) */
            uint8_t raw[128];
            size_t nb = 0;
            for (const char *p = line + 2; p[0] && p[1] && p[0] != '\n' && nb < sizeof raw;
                 p += 2) {
                unsigned x;
                if (sscanf(p, "%2x", &x) != 1) break;
                raw[nb++] = (uint8_t)x;
            }
            printf(grammar_matcher_accept_bytes(m, raw, nb) == 0 ? "ok\n" : "rej\n");
        } else if (line[0] == 't') {
            printf("%lld\n", last_ns);
        } else if (line[0] == 'k') {
            printf("%lld\n", compile_ns);
        } else if (line[0] == 'c') {
            printf("%d\n", grammar_matcher_is_complete(m));
        }
        fflush(stdout);
    }
    grammar_matcher_free(m);
    grammar_vocab_free(v);
    free(mask);
    free(text);
    free(bytes);
    free(lens);
    free(excl);
    tok_free(tok);
    return 0;
}
