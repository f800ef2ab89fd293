/* Bad input to the tokenizer API gets a precise status and message, and never
 * disturbs the tokenizer: corrupt or unsupported tokenizer.json and GGUF files,
 * invalid UTF-8, IDs out of range, NULL arguments. Also the incremental
 * detokenizer's hold-back and U+FFFD behaviour on split and broken UTF-8. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"

static di_tokenizer *tok; /* a small real tokenizer from the configs fixture */

static int setup(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *fx = json_load_file(DI_FIXTURE_DIR "/tokenizer/configs.json", 0, &jerr);
    if (!fx) return -1;
    json_t *spec = json_object_get(json_array_get(fx, 0), "tokenizer_json");
    di_status st =
        di_tokenizer_load_json(json_string_value(spec), json_string_length(spec), &tok, NULL);
    json_decref(fx);
    return st == DI_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    di_tokenizer_free(tok);
    return 0;
}

/* Load `json` and expect `status` with `needle` in the message. */
static void expect_load_error(const char *json, di_status status, const char *needle)
{
    di_tokenizer *t = (di_tokenizer *)1;
    di_error *err = NULL;
    di_status st = di_tokenizer_load_json(json, strlen(json), &t, &err);
    if (st != status || !strstr(di_error_message(err), needle)) {
        print_error("load %.60s: status %d \"%s\", want %d with \"%s\"\n", json, (int)st,
                    di_error_message(err), (int)status, needle);
        fail();
    }
    assert_null(t);
    assert_int_equal(di_error_status(err), status);
    di_error_free(err);
}

#define MIN_MODEL                                                                                  \
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}"

static void test_tokenizer_json_errors_name_the_field(void **state)
{
    (void)state;
    expect_load_error("{", DI_ERR_MODEL_FORMAT, "line 1");
    expect_load_error("[]", DI_ERR_MODEL_FORMAT, "expected a JSON object");
    expect_load_error("{}", DI_ERR_MODEL_FORMAT, "model");
    expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", DI_ERR_UNSUPPORTED,
                      "model.type");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a z\"]}}",
                      DI_ERR_MODEL_FORMAT, "merges[0]");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-4},\"merges\":[]}}",
                      DI_ERR_MODEL_FORMAT, "model.vocab[\"a\"]");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}",
                      DI_ERR_MODEL_FORMAT, "merges[0]");
    expect_load_error("{" MIN_MODEL ",\"pre_tokenizer\":{\"type\":\"Whitespace\"}}",
                      DI_ERR_UNSUPPORTED, "Whitespace");
    expect_load_error("{" MIN_MODEL ",\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":"
                      "[{\"type\":\"ByteLevel\",\"use_regex\":false},{\"type\":\"Split\","
                      "\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Isolated\"}]}}",
                      DI_ERR_UNSUPPORTED, "after the ByteLevel");
    expect_load_error("{" MIN_MODEL ",\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":"
                      "\"(\"},\"behavior\":\"Isolated\"}}",
                      DI_ERR_MODEL_FORMAT, "does not compile");
    expect_load_error(
        "{" MIN_MODEL ",\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":"
        "[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"}]}}",
        DI_ERR_MODEL_FORMAT, "pre_tokenizer.pretokenizers[0].behavior");
    expect_load_error("{" MIN_MODEL ",\"normalizer\":{\"type\":\"Lowercase\"}}", DI_ERR_UNSUPPORTED,
                      "normalizer.type");
    expect_load_error("{" MIN_MODEL ",\"decoder\":{\"type\":\"WordPiece\"}}", DI_ERR_UNSUPPORTED,
                      "decoder.type");
    expect_load_error("{" MIN_MODEL ",\"added_tokens\":[{\"id\":7}]}", DI_ERR_MODEL_FORMAT,
                      "added_tokens[0].content");
    /* settings that change what encode returns are refused, not ignored */
    expect_load_error("{" MIN_MODEL ",\"truncation\":{\"max_length\":3}}", DI_ERR_UNSUPPORTED,
                      "truncation");
    expect_load_error("{" MIN_MODEL ",\"padding\":{\"length\":8}}", DI_ERR_UNSUPPORTED, "padding");
    /* memory is sized by the largest id: a 61-byte file must not ask for gigabytes */
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1073741823},\"merges\":[]}}",
                      DI_ERR_MODEL_FORMAT, "far beyond");
}

static void test_tokenizer_catastrophic_pattern_is_a_clear_error(void **state)
{
    (void)state;
    /* (a+)+$ on aaaa…ab backtracks exponentially: Oniguruma stops at its retry limit */
    const char *json = "{" MIN_MODEL ",\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":"
                       "{\"Regex\":\"(a+)+$\"},\"behavior\":\"Isolated\"}}";
    di_tokenizer *t = NULL;
    assert_int_equal(di_tokenizer_load_json(json, strlen(json), &t, NULL), DI_OK);
    char text[64];
    memset(text, 'a', 40);
    text[40] = 'b';
    int32_t *ids = NULL;
    size_t n = 0;
    di_error *err = NULL;
    di_status st = di_tokenizer_encode(t, text, 41, 0, &ids, &n, &err);
    if (st != DI_OK) {
        assert_int_equal(st, DI_ERR_UNSUPPORTED);
        assert_non_null(strstr(di_error_message(err), "backtracking"));
    }
    di_error_free(err);
    di_tokens_free(ids);
    di_tokenizer_free(t);
}

static void test_tokenizer_load_missing_file_names_the_path(void **state)
{
    (void)state;
    di_tokenizer *t = NULL;
    di_error *err = NULL;
    assert_int_equal(di_tokenizer_load("/nonexistent/tokenizer.json", &t, &err), DI_ERR_IO);
    assert_non_null(strstr(di_error_message(err), "/nonexistent/tokenizer.json"));
    di_error_free(err);
    assert_int_equal(di_tokenizer_load(NULL, &t, NULL), DI_ERR_INVALID_ARGUMENT);
    assert_string_equal(di_error_message(NULL), "no error");
}

/* Write a small GGUF: header, then the given key/values already encoded. */
static char *write_gguf(const void *body, size_t body_len, uint64_t n_kv, uint32_t version)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/di_test_%d.gguf", (int)getpid());
    FILE *f = fopen(path, "wb");
    uint64_t n_tensors = 0;
    fwrite("GGUF", 1, 4, f);
    fwrite(&version, 4, 1, f);
    fwrite(&n_tensors, 8, 1, f);
    fwrite(&n_kv, 8, 1, f);
    fwrite(body, 1, body_len, f);
    fclose(f);
    return path;
}

static size_t put_string_kv(uint8_t *p, const char *key, const char *value)
{
    uint64_t kl = strlen(key), vl = strlen(value);
    uint32_t type = 8;
    size_t n = 0;
    memcpy(p + n, &kl, 8), n += 8;
    memcpy(p + n, key, kl), n += kl;
    memcpy(p + n, &type, 4), n += 4;
    memcpy(p + n, &vl, 8), n += 8;
    memcpy(p + n, value, vl), n += vl;
    return n;
}

static void expect_gguf_error(const char *path, di_status status, const char *needle)
{
    di_tokenizer *t = NULL;
    di_error *err = NULL;
    di_status st = di_tokenizer_load(path, &t, &err);
    if (st != status || !strstr(di_error_message(err), needle)) {
        print_error("gguf: status %d \"%s\", want %d with \"%s\"\n", (int)st, di_error_message(err),
                    (int)status, needle);
        fail();
    }
    assert_null(t);
    di_error_free(err);
}

static void test_tokenizer_gguf_errors_name_the_problem(void **state)
{
    (void)state;
    uint8_t body[512];
    size_t n = put_string_kv(body, "tokenizer.ggml.model", "llama");
    char *path = write_gguf(body, n, 1, 3);
    expect_gguf_error(path, DI_ERR_UNSUPPORTED, "tokenizer.ggml.model \"llama\"");
    path = write_gguf(body, n, 1, 7);
    expect_gguf_error(path, DI_ERR_MODEL_FORMAT, "version 7");
    path = write_gguf(body, n - 3, 1, 3); /* the value runs past the end */
    expect_gguf_error(path, DI_ERR_MODEL_FORMAT, "past the end");
    path = write_gguf(body, n, 1000000, 3);
    expect_gguf_error(path, DI_ERR_MODEL_FORMAT, "kv_count");
    n = put_string_kv(body, "general.name", "x");
    path = write_gguf(body, n, 1, 3);
    expect_gguf_error(path, DI_ERR_MODEL_FORMAT, "tokenizer.ggml.model is missing");
    /* present, but a u32 (type 4): not "missing", and not a file without a
     * vocabulary either (the engine then serves token requests only) */
    n = put_string_kv(body, "tokenizer.ggml.model", "");
    uint32_t u32_type = 4, three = 3;
    size_t at = 8 + strlen("tokenizer.ggml.model");
    memcpy(body + at, &u32_type, 4);
    memcpy(body + at + 4, &three, 4);
    path = write_gguf(body, at + 8, 1, 3);
    expect_gguf_error(path, DI_ERR_MODEL_FORMAT, "tokenizer.ggml.model is not a string");
    unlink(path);
}

static void test_tokenizer_encode_rejects_invalid_utf8_with_offset(void **state)
{
    (void)state;
    int32_t *ids = (int32_t *)1;
    size_t n = 99;
    di_error *err = NULL;
    assert_int_equal(di_tokenizer_encode(tok,
                                         "ab\xff"
                                         "cd",
                                         5, 0, &ids, &n, &err),
                     DI_ERR_INVALID_UTF8);
    assert_non_null(strstr(di_error_message(err), "byte offset 2"));
    assert_null(ids);
    assert_int_equal(n, 0);
    di_error_free(err);
    err = NULL;
    assert_int_equal(di_tokenizer_encode(tok, "\xed\xa0\x80", 3, 0, &ids, &n, &err),
                     DI_ERR_INVALID_UTF8);
    di_error_free(err);
    assert_int_equal(di_tokenizer_encode(tok, "x", 1, 0x80, &ids, &n, NULL),
                     DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_tokenizer_encode(NULL, "x", 1, 0, &ids, &n, NULL), DI_ERR_INVALID_ARGUMENT);
    /* The tokenizer still works after the errors. */
    assert_int_equal(di_tokenizer_encode(tok, "ok", 2, 0, &ids, &n, NULL), DI_OK);
    assert_true(n > 0);
    di_tokens_free(ids);
    assert_int_equal(di_tokenizer_encode(tok, "", 0, 0, &ids, &n, NULL), DI_OK);
    assert_int_equal(n, 0);
    assert_null(ids);
}

static void test_tokenizer_decode_rejects_ids_out_of_range(void **state)
{
    (void)state;
    int32_t ids[] = {0, di_tokenizer_vocab_size(tok), 1};
    char *text = NULL;
    size_t len = 0;
    di_error *err = NULL;
    assert_int_equal(di_tokenizer_decode(tok, ids, 3, 0, &text, &len, &err),
                     DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "ids[1]"));
    assert_null(text);
    di_error_free(err);
    ids[1] = -1;
    assert_int_equal(di_tokenizer_decode(tok, ids, 3, 0, &text, &len, NULL),
                     DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_tokenizer_decode(tok, ids, 1, 0, &text, &len, NULL), DI_OK);
    di_text_free(text);
}

static int32_t byte_id(uint8_t b)
{
    int32_t id = -1;
    assert_int_equal(di_tokenizer_token_id(tok, (const char *)&b, 1, &id), DI_OK);
    return id;
}

static void test_detokenizer_holds_split_utf8_and_never_stalls(void **state)
{
    (void)state;
    di_detokenizer *d = NULL;
    assert_int_equal(di_detokenizer_create(tok, 0, &d), DI_OK);
    const char *text;
    size_t len;
    /* U+1F600 as four byte tokens: nothing until the last byte. */
    const uint8_t emoji[] = {0xF0, 0x9F, 0x98, 0x80};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(di_detokenizer_push(d, byte_id(emoji[i]), &text, &len), DI_OK);
        assert_int_equal(len, 0);
    }
    assert_int_equal(di_detokenizer_push(d, byte_id(emoji[3]), &text, &len), DI_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(text, emoji, 4);
    /* A byte that can never start a sequence: U+FFFD at once, no waiting. */
    assert_int_equal(di_detokenizer_push(d, byte_id(0xFF), &text, &len), DI_OK);
    assert_string_equal(text, "\xef\xbf\xbd");
    /* A lead byte followed by ASCII: U+FFFD then the ASCII, as soon as it arrives. */
    assert_int_equal(di_detokenizer_push(d, byte_id(0xE4), &text, &len), DI_OK);
    assert_int_equal(len, 0);
    assert_int_equal(di_detokenizer_push(d, byte_id('a'), &text, &len), DI_OK);
    assert_string_equal(text, "\xef\xbf\xbd"
                              "a");
    /* An incomplete sequence at the end is flushed as U+FFFD. */
    assert_int_equal(di_detokenizer_push(d, byte_id(0xF0), &text, &len), DI_OK);
    assert_int_equal(len, 0);
    assert_int_equal(di_detokenizer_push(d, -5, &text, &len), DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(di_detokenizer_flush(d, &text, &len), DI_OK);
    assert_string_equal(text, "\xef\xbf\xbd");
    assert_int_equal(di_detokenizer_flush(d, &text, &len), DI_OK);
    assert_int_equal(len, 0);
    di_detokenizer_free(d);
    assert_int_equal(di_detokenizer_create(tok, 8, &d), DI_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_json_errors_name_the_field),
        cmocka_unit_test(test_tokenizer_load_missing_file_names_the_path),
        cmocka_unit_test(test_tokenizer_catastrophic_pattern_is_a_clear_error),
        cmocka_unit_test(test_tokenizer_gguf_errors_name_the_problem),
        cmocka_unit_test(test_tokenizer_encode_rejects_invalid_utf8_with_offset),
        cmocka_unit_test(test_tokenizer_decode_rejects_ids_out_of_range),
        cmocka_unit_test(test_detokenizer_holds_split_utf8_and_never_stalls),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
