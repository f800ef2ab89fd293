/* Single-thread encode throughput of deepinfer's tokenizer, over the public API.
 *
 *   tokenizer_encode TOKENIZER CORPUS.txt [REPEATS [CHUNK_BYTES]]
 *
 * Cuts CORPUS into chunks of about CHUNK_BYTES (default 256 KiB) at line breaks (as
 * bench/tokenizer_bench.py cuts it for the other tokenizers), encodes every
 * chunk with DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED (what HF's
 * encode(add_special_tokens=False) does), and prints one line:
 *   seconds=<best of REPEATS> tokens=<total> bytes=<total>
 * The tokenizer's load time is not counted. */
#include <deepinfer/deepinfer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tokenizer_encode TOKENIZER CORPUS.txt [REPEATS]\n");
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    size_t chunk = argc > 4 ? (size_t)atol(argv[4]) : 256 * 1024;
    if (repeats < 1 || chunk < 1) return 2;
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) return 2;
    fclose(f);
    di_tokenizer *tok = NULL;
    di_error *err = NULL;
    if (di_tokenizer_load(argv[1], &tok, &err) != DI_OK) {
        fprintf(stderr, "tokenizer_encode: %s\n", di_error_message(err));
        return 1;
    }
    double best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < repeats; r++) {
        tokens = 0;
        double t0 = now();
        for (size_t start = 0; start < (size_t)size;) {
            size_t end = start + chunk < (size_t)size ? start + chunk : (size_t)size;
            if (end < (size_t)size) {
                size_t nl = end;
                while (nl > start && text[nl - 1] != '\n') nl--;
                if (nl > start) end = nl;
                while (end < (size_t)size && ((unsigned char)text[end] & 0xC0) == 0x80) end++;
            }
            int32_t *ids;
            size_t n;
            if (di_tokenizer_encode(tok, text + start, end - start,
                                    DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED, &ids, &n,
                                    &err) != DI_OK) {
                fprintf(stderr, "tokenizer_encode: %s\n", di_error_message(err));
                return 1;
            }
            tokens += n;
            di_tokens_free(ids);
            start = end;
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    printf("seconds=%.6f tokens=%zu bytes=%ld\n", best, tokens, size);
    di_tokenizer_free(tok);
    free(text);
    return 0;
}
