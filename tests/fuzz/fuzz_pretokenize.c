/* libFuzzer target: the hand-written pre-tokenizers (DeepSeek V3/V4, Qwen2) split
 * any valid UTF-8 exactly as the general Oniguruma path does with the same
 * patterns. Invalid UTF-8 inputs are skipped (encode rejects them first). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char v3_main[] =
    "[!\\\"#$%&'()*+,\\\\-./"
    ":;<=>?@\\\\[\\\\\\\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\\\p{L}\\\\p{P}\\\\p{S}]?"
    "[\\\\p{L}\\\\p{M}]+| ?[\\\\p{P}\\\\p{S}]+[\\r\\n]*|\\\\s*[\\r\\n]+|\\\\s+(?!\\\\S)|\\\\s+";
static const char *const patterns_v3[] = {"\\\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", v3_main};
static const char qwen2_main[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+";
static const char *const patterns_qwen2[] = {qwen2_main};

/* A tokenizer.json with the given Split patterns and a vocabulary of the 256
 * byte-level single-byte tokens. */
static di_tokenizer_impl *make(const char *const *patterns, size_t n)
{
    char *json = malloc(1 << 16);
    size_t len = 0;
    len += (size_t)sprintf(json + len, "{\"model\":{\"type\":\"BPE\",\"merges\":[],\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b, enc[3];
        size_t m = tok_byte_level_encode(&byte, 1, enc);
        if (b) json[len++] = ',';
        json[len++] = '"';
        if (enc[0] == '"' || enc[0] == '\\') json[len++] = '\\';
        memcpy(json + len, enc, m);
        len += m;
        len += (size_t)sprintf(json + len, "\":%d", b);
    }
    len +=
        (size_t)sprintf(json + len, "}},\"decoder\":{\"type\":\"ByteLevel\"},"
                                    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[");
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(json + len,
                               "%s{\"type\":\"Split\",\"pattern\":{\"Regex\":\"%s\"},"
                               "\"behavior\":\"Isolated\"}",
                               i ? "," : "", patterns[i]);
    len += (size_t)sprintf(json + len, ",{\"type\":\"ByteLevel\",\"use_regex\":false}]}}");
    di_tokenizer_impl *tok = NULL;
    tok_error err;
    if (tok_load_json_text(&tok, json, len, &err) != DI_OK) {
        fprintf(stderr, "fuzz_pretokenize: %s\n", err.message);
        abort();
    }
    free(json);
    return tok;
}

static void compare(const di_tokenizer_impl *tok, const uint8_t *data, size_t size)
{
    if (tok->fast_path == TOK_FAST_NONE) abort(); /* the patterns must select the fast path */
    tok_spans a = {0}, b = {0};
    if (tok_pretokenize_fast(tok->fast_path, data, size, &a) ||
        tok_pretokenize_general(tok, data, size, &b))
        abort();
    if (a.n != b.n || (a.n && memcmp(a.v, b.v, a.n * sizeof *a.v) != 0)) abort();
    free(a.v);
    free(b.v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static di_tokenizer_impl *v3, *qwen2;
    if (!v3) {
        v3 = make(patterns_v3, 3);
        qwen2 = make(patterns_qwen2, 1);
    }
    if (di_utf8_scan_bytes(data, size).state != DI_UTF8_VALID) return 0;
    compare(v3, data, size);
    compare(qwen2, data, size);
    return 0;
}
