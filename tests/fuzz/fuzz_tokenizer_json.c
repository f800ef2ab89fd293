/* libFuzzer target: loading a tokenizer.json from arbitrary bytes either fails
 * with a message or gives a tokenizer that encodes and decodes its own input
 * without crashing. */
#include <stdint.h>
#include <stdlib.h>

#include "tokenizer/detokenize.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    di_tokenizer_impl *tok = NULL;
    tok_error err;
    if (tok_load_json_text(&tok, (const char *)data, size, &err) != DI_OK) {
        if (err.message[0] == 0) abort(); /* every failure says why */
        return 0;
    }
    tok_ids ids = {0};
    static const char sample[] = "Hello, world! 123 <s> \xe4\xb8\xad\xe6\x96\x87";
    if (tok_encode(tok, (const uint8_t *)sample, sizeof sample - 1, DI_TOKENIZE_HF_DEFAULT, &ids,
                   &err) == DI_OK) {
        tok_buf out = {0};
        tok_decode(tok, ids.ids, ids.n, 0, &out, &err);
        free(out.data);
    }
    free(ids.ids);
    tok_free(tok);
    return 0;
}
