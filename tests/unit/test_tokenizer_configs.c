/* Every tokenizer pipeline component deepinfer supports, against HF tokenizers:
 * tests/fixtures/tokenizer/configs.json holds small tokenizers (each with one
 * Split behaviour, Digits, a normalizer, added tokens with lstrip / rstrip /
 * single_word / normalized, a BOS/EOS template, ignore_merges) and the IDs HF
 * gives for a set of strings (tests/oracle/make_tokenizer_unit_fixtures.py). */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"

static json_t *fixture;

static int load_fixture(void **state)
{
    (void)state;
    json_error_t err;
    fixture = json_load_file(DI_FIXTURE_DIR "/tokenizer/configs.json", 0, &err);
    if (!fixture) print_error("cannot read configs.json: %s\n", err.text);
    return fixture ? 0 : -1;
}

static int free_fixture(void **state)
{
    (void)state;
    json_decref(fixture);
    return 0;
}

static int ids_equal(json_t *want, const int32_t *ids, size_t n)
{
    if (json_array_size(want) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(want, i)) != ids[i]) return 0;
    return 1;
}

static void test_tokenizer_configs_match_hf(void **state)
{
    (void)state;
    size_t checked = 0;
    for (size_t k = 0; k < json_array_size(fixture); k++) {
        json_t *cfg = json_array_get(fixture, k);
        const char *name = json_string_value(json_object_get(cfg, "name"));
        json_t *spec = json_object_get(cfg, "tokenizer_json");
        di_tokenizer *tok = NULL;
        di_error *err = NULL;
        if (di_tokenizer_load_json(json_string_value(spec), json_string_length(spec), &tok, &err) !=
            DI_OK) {
            print_error("%s: %s\n", name, di_error_message(err));
            fail();
        }
        json_t *cases = json_object_get(cfg, "cases");
        for (size_t c = 0; c < json_array_size(cases); c++) {
            json_t *tc = json_array_get(cases, c);
            json_t *text = json_object_get(tc, "text");
            static const struct {
                const char *key;
                unsigned flags;
            } modes[] = {{"ids", DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED},
                         {"ids_add_special", DI_TOKENIZE_HF_DEFAULT},
                         {"ids_plain", 0}};
            for (size_t m = 0; m < 3; m++) {
                int32_t *ids = NULL;
                size_t n = 0;
                assert_int_equal(di_tokenizer_encode(tok, json_string_value(text),
                                                     json_string_length(text), modes[m].flags, &ids,
                                                     &n, NULL),
                                 DI_OK);
                if (!ids_equal(json_object_get(tc, modes[m].key), ids, n)) {
                    print_error("%s, %s, \"%s\": %zu IDs differ from HF's %zu\n", name,
                                modes[m].key, json_string_value(text), n,
                                json_array_size(json_object_get(tc, modes[m].key)));
                    fail();
                }
                if (m == 1) {
                    char *out = NULL;
                    size_t len = 0;
                    json_t *want = json_object_get(tc, "decoded");
                    assert_int_equal(di_tokenizer_decode(tok, ids, n, 0, &out, &len, NULL), DI_OK);
                    if (len != json_string_length(want) ||
                        memcmp(out, json_string_value(want), len) != 0) {
                        print_error("%s: decode of \"%s\" is \"%s\", HF \"%s\"\n", name,
                                    json_string_value(text), out, json_string_value(want));
                        fail();
                    }
                    di_text_free(out);
                }
                di_tokens_free(ids);
                checked++;
            }
        }
        di_tokenizer_free(tok);
    }
    assert_true(checked > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_configs_match_hf),
    };
    return cmocka_run_group_tests(tests, load_fixture, free_fixture);
}
