/* Tokenize text and stream it back, as a host that runs its own model would:
 *
 *   tokenizer_example TOKENIZER "some text"
 *
 * Encodes the text (special-token spellings recognised), prints the IDs, then
 * feeds them one at a time to a detokenizer and prints each piece as it comes —
 * pieces never split a UTF-8 character. Exits 1 if the streamed text differs
 * from the input. */
#include <deepinfer/deepinfer.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: tokenizer_example TOKENIZER TEXT\n");
        return 2;
    }
    di_tokenizer *tok = NULL;
    di_error *err = NULL;
    if (di_tokenizer_load(argv[1], &tok, &err) != DI_OK) {
        fprintf(stderr, "tokenizer_example: %s\n", di_error_message(err));
        di_error_free(err);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (di_tokenizer_encode(tok, argv[2], strlen(argv[2]), DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED,
                            &ids, &n, &err) != DI_OK) {
        fprintf(stderr, "tokenizer_example: %s\n", di_error_message(err));
        di_error_free(err);
        di_tokenizer_free(tok);
        return 1;
    }
    printf("%zu tokens:", n);
    for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\nstreamed:");

    di_detokenizer *d = NULL;
    char streamed[4096];
    size_t used = 0;
    int ok = di_detokenizer_create(tok, 0, &d) == DI_OK;
    for (size_t i = 0; ok && i <= n; i++) {
        const char *piece;
        size_t len;
        ok = (i < n ? di_detokenizer_push(d, ids[i], &piece, &len)
                    : di_detokenizer_flush(d, &piece, &len)) == DI_OK;
        if (ok && len) {
            printf(" [%.*s]", (int)len, piece);
            if (used + len < sizeof streamed) memcpy(streamed + used, piece, len);
            used += len;
        }
    }
    printf("\n");
    ok = ok && used == strlen(argv[2]) && memcmp(streamed, argv[2], used) == 0;
    di_detokenizer_free(d);
    di_tokens_free(ids);
    di_tokenizer_free(tok);
    return ok ? 0 : 1;
}
