/* DeepSeek-V4.1 Engram's metadata (lib/model/engram.c,
 * lib/tokenizer/compressed_vocab.c) against DeepSeek's own code: the fixture
 * tests/fixtures/model/engram/engram.json is written by
 * tests/oracle/make_engram_fixtures.py from DeepInfer 0.1.0's
 * engram_metadata.py (CompressedVocabulary, EngramLayout, NgramHashMapping:
 * HF tokenizers' normalizers, sympy's nextprime, NumPy's default_rng) and
 * tile-kernels 2.1.0's engram_hash_ref; CI re-runs it live (--check). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "deepinfer/deepinfer.h"
#include "model/engram.h"
#include "tokenizer/tokenizer.h"

static json_t *fixture;

static int setup(void **state)
{
    (void)state;
    json_error_t e;
    fixture = json_load_file(DI_FIXTURE_DIR "/model/engram/engram.json", 0, &e);
    if (!fixture) fprintf(stderr, "engram.json: %s (line %d)\n", e.text, e.line);
    return fixture ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(fixture);
    return 0;
}

static int64_t at(json_t *a, size_t i)
{
    return (int64_t)json_integer_value(json_array_get(a, i));
}

static void test_numpy_default_rng_integers_bit_for_bit(void **state)
{
    (void)state;
    json_t *cases = json_object_get(fixture, "numpy");
    assert_true(json_array_size(cases) >= 5);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *o = json_array_get(cases, c), *want = json_object_get(o, "values");
        uint64_t seed = (uint64_t)json_integer_value(json_object_get(o, "seed"));
        int64_t bound = json_integer_value(json_object_get(o, "bound"));
        int64_t got[8];
        size_t n = json_array_size(want);
        assert_true(n <= 8);
        assert_int_equal(engram_numpy_integers(seed, bound, n, got), 0);
        for (size_t i = 0; i < n; i++) {
            if (got[i] != at(want, i))
                fail_msg("default_rng(%llu).integers(0, %lld)[%zu]: %lld, NumPy %lld",
                         (unsigned long long)seed, (long long)bound, i, (long long)got[i],
                         (long long)at(want, i));
        }
    }
    /* ranges NumPy draws from 32-bit words are refused, not guessed */
    int64_t v;
    assert_int_equal(engram_numpy_integers(0, (int64_t)UINT32_MAX + 1, 1, &v), -1);
    assert_int_equal(engram_numpy_integers(0, 300, 1, &v), -1);
}

static void test_next_prime_is_sympys(void **state)
{
    (void)state;
    json_t *cases = json_object_get(fixture, "next_prime");
    assert_true(json_array_size(cases) >= 10);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *p = json_array_get(cases, c);
        uint64_t n = (uint64_t)at(p, 0), want = (uint64_t)at(p, 1);
        if (engram_next_prime(n) != want)
            fail_msg("nextprime(%llu): %llu, sympy %llu", (unsigned long long)n,
                     (unsigned long long)engram_next_prime(n), (unsigned long long)want);
    }
}

static void test_layouts_and_hashes_are_deepinfers(void **state)
{
    (void)state;
    json_t *layouts = json_object_get(fixture, "layouts");
    assert_int_equal(json_array_size(layouts), 3);
    for (size_t c = 0; c < json_array_size(layouts); c++) {
        json_t *o = json_array_get(layouts, c);
        json_t *ids_json = json_object_get(o, "layer_ids"), *tv = json_object_get(o, "table_vocab");
        int n_layers = (int)json_array_size(ids_json);
        int max_ngram = (int)json_integer_value(json_object_get(o, "max_ngram"));
        int32_t layers[8];
        int64_t table_vocab[ENGRAM_MAX_NGRAM];
        for (int i = 0; i < n_layers; i++) layers[i] = (int32_t)at(ids_json, (size_t)i);
        for (int i = 0; i < max_ngram - 1; i++) table_vocab[i] = at(tv, (size_t)i);
        engram_layout l;
        di_error *err = NULL;
        assert_int_equal(engram_layout_init(&l, n_layers, layers, max_ngram, table_vocab,
                                            (int)json_integer_value(json_object_get(o, "n_heads")),
                                            json_integer_value(json_object_get(o, "vocab")), 0,
                                            &err),
                         DI_OK);
        json_t *mult = json_object_get(o, "multipliers"), *rows = json_object_get(o, "table_rows"),
               *off = json_object_get(o, "offsets");
        for (int s = 0; s < n_layers; s++) {
            for (int r = 0; r < max_ngram; r++)
                assert_int_equal(l.multiplier[s * max_ngram + r],
                                 at(json_array_get(mult, (size_t)s), (size_t)r));
            for (int t = 0; t < l.n_tables; t++) {
                assert_int_equal(l.rows[s * l.n_tables + t],
                                 at(json_array_get(rows, (size_t)s), (size_t)t));
                assert_int_equal(l.offset[s * l.n_tables + t],
                                 at(json_array_get(off, (size_t)s), (size_t)t));
            }
        }
        /* rows[layer][token][table] from engram_hash_ref */
        json_t *tokens = json_object_get(o, "ids"), *want = json_object_get(o, "rows");
        for (size_t t = 0; t < json_array_size(tokens); t++) {
            int32_t ngram[ENGRAM_MAX_NGRAM];
            for (int r = 0; r < max_ngram; r++)
                ngram[r] = (int32_t)at(json_array_get(tokens, t), (size_t)r);
            for (int s = 0; s < n_layers; s++) {
                int32_t got[64];
                assert_true(l.n_tables <= 64);
                engram_hash(&l, s, ngram, got);
                json_t *w = json_array_get(json_array_get(want, (size_t)s), t);
                for (int k = 0; k < l.n_tables; k++)
                    if (got[k] != at(w, (size_t)k))
                        fail_msg("layout %zu layer slot %d token %zu table %d: row %lld, "
                                 "engram_hash_ref %lld",
                                 c, s, t, k, (long long)got[k], (long long)at(w, (size_t)k));
            }
        }
        engram_layout_free(&l);
    }
}

static void test_bad_layouts_are_named(void **state)
{
    (void)state;
    static const struct {
        int max_ngram, n_heads;
        int64_t table_vocab, vocab;
        const char *want;
    } cases[] = {
        {1, 4, 97, 300, "longest n-gram (1) is outside [2, 8]"},
        {9, 4, 97, 300, "longest n-gram (9) is outside [2, 8]"},
        {3, 0, 97, 300, "0 heads a n-gram size"},
        {3, 4, 1, 300, "the 2-gram tables' size 1 is outside"},
        {3, 4, (int64_t)1 << 31, 300, "size 2147483648 is outside"},
        {3, 4, 97, 0, "compressed vocabulary has 0 tokens"},
        {3, 4, 97, (int64_t)1 << 31, "NumPy's 32-bit draws"},
    };
    int32_t layers[1] = {3};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t tv[ENGRAM_MAX_NGRAM];
        for (int k = 0; k < ENGRAM_MAX_NGRAM; k++) tv[k] = cases[i].table_vocab;
        engram_layout l;
        di_error *err = NULL;
        assert_int_equal(engram_layout_init(&l, 1, layers, cases[i].max_ngram, tv, cases[i].n_heads,
                                            cases[i].vocab, 0, &err),
                         DI_ERR_MODEL_FORMAT);
        if (!strstr(di_error_message(err), cases[i].want))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, di_error_message(err), cases[i].want);
        assert_null(l.rows);
        di_error_free(err);
    }
    /* tables past 2^31 rows in one layer: two 2-gram heads of about 1.5e9 */
    int64_t big[1] = {1500000000};
    engram_layout l;
    di_error *err = NULL;
    assert_int_equal(engram_layout_init(&l, 1, layers, 2, big, 2, 300, 0, &err),
                     DI_ERR_MODEL_FORMAT);
    assert_non_null(strstr(di_error_message(err), "rows (past 2^31)"));
    di_error_free(err);
}

static void test_compressed_vocabulary_is_deepinfers(void **state)
{
    (void)state;
    const char *path = DI_ASSET_DIR "/deepseek-v4/tokenizer.json";
    if (access(path, R_OK) != 0) skip();
    json_t *c = json_array_get(json_object_get(fixture, "compressed"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "tokenizer")), "deepseek-v4");
    di_tokenizer *tok = NULL;
    di_error *err = NULL;
    assert_int_equal(di_tokenizer_load(path, &tok, &err), DI_OK);
    int32_t *map = NULL, n_ids = 0, n_keys = 0;
    tok_error terr = {0};
    assert_int_equal(tok_compressed_vocab(tok, &map, &n_ids, &n_keys, &terr), DI_OK);
    assert_int_equal(n_ids, di_tokenizer_vocab_size(tok)); /* (no holes in V4's) */
    int32_t n_vocab = (int32_t)json_integer_value(json_object_get(c, "n_vocab"));
    assert_int_equal(di_tokenizer_vocab_size(tok), n_vocab);
    /* the oracle's mapping: its repeats, every other token the next fresh ID */
    json_t *rep = json_object_get(c, "repeats");
    size_t r = 0, bad = 0;
    int32_t fresh = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        int32_t want;
        if (r < json_array_size(rep) && at(json_array_get(rep, r), 0) == id)
            want = (int32_t)at(json_array_get(rep, r++), 1);
        else
            want = fresh++;
        if (map[id] != want && bad++ < 10) {
            char *text = NULL;
            size_t len;
            di_tokenizer_decode(tok, &id, 1, 0, &text, &len, NULL);
            fprintf(stderr, "token %d \"%s\": compressed %d, DeepInfer %d\n", id, text, map[id],
                    want);
            di_text_free(text);
        }
    }
    assert_int_equal(bad, 0);
    assert_int_equal(n_keys, json_integer_value(json_object_get(c, "n_keys")));
    printf("compressed vocabulary: %d tokens -> %d keys, as DeepInfer's\n", n_vocab, n_keys);
    free(map);
    di_tokenizer_free(tok);
}

/* Tokenizers cut from V4's (the fixture's "crafted"): IDs with holes map
 * range(count of tokens) as DeepInfer does; a tokenizer without the pad
 * token at 2 is refused, as DeepInfer asserts. */
static void test_crafted_tokenizers_as_deepinfer(void **state)
{
    (void)state;
    json_t *crafted = json_object_get(fixture, "crafted");
    assert_int_equal(json_array_size(crafted), 2);
    for (size_t c = 0; c < json_array_size(crafted); c++) {
        json_t *o = json_array_get(crafted, c);
        const char *text = json_string_value(json_object_get(o, "tokenizer"));
        di_tokenizer *tok = NULL;
        di_error *err = NULL;
        assert_int_equal(di_tokenizer_load_json(text, strlen(text), &tok, &err), DI_OK);
        int32_t *map = NULL, n_ids = 0, n_keys = 0;
        tok_error terr = {0};
        di_status st = tok_compressed_vocab(tok, &map, &n_ids, &n_keys, &terr);
        json_t *want = json_object_get(o, "old2new");
        if (!want) { /* DeepInfer's assertion */
            assert_int_equal(st, DI_ERR_MODEL_FORMAT);
            assert_non_null(strstr(terr.message, "at id 2"));
        } else {
            assert_int_equal(st, DI_OK);
            assert_int_equal(n_ids, json_array_size(want));
            assert_true(n_ids < di_tokenizer_vocab_size(tok)); /* (the holes) */
            for (int32_t id = 0; id < n_ids; id++)
                if (map[id] != at(want, (size_t)id))
                    fail_msg("%s: token %d: %d, DeepInfer %lld",
                             json_string_value(json_object_get(o, "name")), id, map[id],
                             (long long)at(want, (size_t)id));
            assert_int_equal(n_keys, json_integer_value(json_object_get(o, "n_keys")));
        }
        free(map);
        di_tokenizer_free(tok);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numpy_default_rng_integers_bit_for_bit),
        cmocka_unit_test(test_next_prime_is_sympys),
        cmocka_unit_test(test_layouts_and_hashes_are_deepinfers),
        cmocka_unit_test(test_bad_layouts_are_named),
        cmocka_unit_test(test_compressed_vocabulary_is_deepinfers),
        cmocka_unit_test(test_crafted_tokenizers_as_deepinfer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
