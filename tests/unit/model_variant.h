/* Test helpers shared by the model tests: a copy of a fixture's config.json
 * with fields edited, to load the fixture's weights under another config; a
 * load that must fail naming something; a fixture's f32 file. Include after
 * cmocka.h. */
#ifndef DI_TESTS_MODEL_VARIANT_H
#define DI_TESTS_MODEL_VARIANT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "util/error.h"

/* A fresh tmpdir (from template, "/tmp/NAMEXXXXXX") with an empty variant/
 * folder: 0, or -1 when it cannot be made (a cmocka group setup's status). */
static inline int model_variant_make(char *tmpdir, size_t size, const char *template)
{
    snprintf(tmpdir, size, "%s", template);
    if (!mkdtemp(tmpdir)) return -1;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/variant", tmpdir);
    return mkdir(dir, 0700) == 0 ? 0 : -1;
}

/* Write <tmpdir>/variant/config.json: tests/fixtures/model/<fixture>/config.json
 * with the JSON object `edit` merged over it (a null value deletes the key;
 * text_config's keys, DeepSeek-V4.1's, are merged one by one).
 * Returns the folder (static storage; the caller puts the weights there). */
static inline const char *model_variant_config(const char *tmpdir, const char *fixture,
                                               const char *edit)
{
    char path[700];
    snprintf(path, sizeof path, "%s/model/%s/config.json", DI_FIXTURE_DIR, fixture);
    json_t *cfg = json_load_file(path, 0, NULL);
    json_t *e = json_loads(edit, 0, NULL);
    assert_true(cfg && e);
    const char *key;
    json_t *v;
    json_object_foreach(e, key, v)
    {
        json_t *into = json_object_get(cfg, key);
        if (json_is_null(v)) {
            json_object_del(cfg, key);
        } else if (strcmp(key, "text_config") == 0 && json_is_object(into) && json_is_object(v)) {
            const char *k2; /* (DeepSeek-V4.1's text model: its keys merged one by one) */
            json_t *v2;
            json_object_foreach(v, k2, v2)
            {
                if (json_is_null(v2))
                    json_object_del(into, k2);
                else
                    json_object_set(into, k2, v2);
            }
        } else {
            json_object_set(cfg, key, v);
        }
    }
    static char dir[128];
    snprintf(dir, sizeof dir, "%s/variant", tmpdir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    json_decref(e);
    return dir;
}

/* model_variant_config, and the fixture's model.safetensors beside it:
 * linked, or copied when copy_weights (to be edited). Returns the folder. */
static inline const char *model_variant_folder(const char *tmpdir, const char *fixture,
                                               const char *edit, int copy_weights)
{
    const char *dir = model_variant_config(tmpdir, fixture, edit);
    char src[700], dst[700];
    snprintf(src, sizeof src, "%s/model/%s/model.safetensors", DI_FIXTURE_DIR, fixture);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    unlink(dst);
    if (!copy_weights) {
        assert_int_equal(symlink(src, dst), 0);
        return dir;
    }
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    assert_true(in && out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
    return dir;
}

/* model_load of dir fails with status, and its message names n1 (and n2 when
 * not NULL). */
static inline void model_expect_load_error(const char *dir, di_status status, const char *n1,
                                           const char *n2)
{
    model_options o = {0};
    o.n_threads = 1;
    o.kv_dtype = MODEL_DTYPE_F32;
    model *m = NULL;
    di_error *err = NULL;
    assert_int_equal(model_load(dir, &o, &m, &err), status);
    assert_null(m);
    const char *msg = di_error_message(err);
    if (!strstr(msg, n1) || (n2 && !strstr(msg, n2)))
        fail_msg("message '%s' lacks '%s' / '%s'", msg, n1, n2 ? n2 : "");
    di_error_free(err);
}

/* dir/model.safetensors opened for update, its header read (NUL-ended,
 * *hl bytes; the caller frees it and closes *f). */
static inline char *model_variant_header(const char *dir, FILE **f, uint64_t *hl)
{
    char path[300];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    *f = fopen(path, "r+b");
    assert_non_null(*f);
    assert_int_equal(fread(hl, 8, 1, *f), 1);
    char *hdr = calloc(1, *hl + 1);
    assert_non_null(hdr);
    assert_int_equal(fread(hdr, 1, *hl, *f), *hl);
    return hdr;
}

/* Overwrite n bytes of tensor name in dir/model.safetensors (a copied
 * variant's) from byte at of its data. */
static inline void model_variant_poke(const char *dir, const char *name, size_t at,
                                      const void *bytes, size_t n)
{
    FILE *f;
    uint64_t hl;
    char *hdr = model_variant_header(dir, &f, &hl);
    json_t *h = json_loads(hdr, 0, NULL);
    assert_non_null(h);
    json_t *offs = json_object_get(json_object_get(h, name), "data_offsets");
    assert_non_null(offs);
    long pos = (long)(8 + hl + (uint64_t)json_integer_value(json_array_get(offs, 0)) + at);
    assert_int_equal(fseek(f, pos, SEEK_SET), 0);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
    json_decref(h);
    free(hdr);
}

/* Rename a tensor in dir/model.safetensors (a copied variant's): the header's
 * name changed in place, same length. */
static inline void model_variant_rename(const char *dir, const char *from, const char *to)
{
    assert_int_equal(strlen(from), strlen(to));
    FILE *f;
    uint64_t hl;
    char *hdr = model_variant_header(dir, &f, &hl);
    char quoted[200];
    snprintf(quoted, sizeof quoted, "\"%s\"", from);
    char *at = strstr(hdr, quoted);
    assert_non_null(at);
    memcpy(at + 1, to, strlen(to));
    assert_int_equal(fseek(f, 8, SEEK_SET), 0);
    assert_int_equal(fwrite(hdr, 1, hl, f), hl);
    fclose(f);
    free(hdr);
}

/* One cache type and the bytes a token takes in it, counted by hand. */
typedef struct model_kv_bytes_case {
    model_dtype dtype;
    double bytes;
} model_kv_bytes_case;

/* model_kv_bytes_per_token of the model in dir at a context of 2^22 tokens
 * (so a fixed part spread over it adds under a byte and a half) is each
 * case's count by hand, rounded up. */
static inline void model_expect_kv_bytes(const char *dir, const model_kv_bytes_case *cases,
                                         size_t n)
{
    for (size_t i = 0; i < n; i++) {
        model_options o = {0};
        o.n_threads = 1;
        o.kv_dtype = cases[i].dtype;
        o.n_ctx = 4194304;
        o.n_batch = 16;
        o.kv_n_ctx_multiple = 1;
        model *m = NULL;
        di_error *err = NULL;
        if (model_load(dir, &o, &m, &err) != DI_OK) fail_msg("%s", di_error_message(err));
        double per = (double)model_kv_bytes_per_token(m);
        printf("%s cache: %.0f bytes a token (by hand %.2f)\n", model_kv_dtype_name(cases[i].dtype),
               per, cases[i].bytes);
        if (per < cases[i].bytes || per > cases[i].bytes + 1.5)
            fail_msg("%s: %.0f bytes a token, want %.2f", model_kv_dtype_name(cases[i].dtype), per,
                     cases[i].bytes);
        model_free(m);
    }
}

/* n floats of dir/file (a fixture's logits), malloc'd. */
static inline float *model_fixture_f32(const char *dir, const char *file, size_t n)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    float *v = malloc(n * sizeof *v);
    FILE *fp = fopen(path, "rb");
    assert_true(v && fp);
    assert_int_equal(fread(v, sizeof *v, n, fp), n);
    fclose(fp);
    return v;
}

/* Remove what model_variant_config and the caller put in tmpdir (config.json
 * and model.safetensors in variant/), then tmpdir itself. */
static inline void model_variant_remove(const char *tmpdir)
{
    char path[160];
    snprintf(path, sizeof path, "%s/variant/config.json", tmpdir);
    unlink(path);
    snprintf(path, sizeof path, "%s/variant/model.safetensors", tmpdir);
    unlink(path);
    snprintf(path, sizeof path, "%s/variant", tmpdir);
    rmdir(path);
    rmdir(tmpdir);
}

/* Write to dst a copy of the GGUF src with the bytes `from` (a metadata key
 * or tensor name, found once) replaced by `to` of the same length, or, when
 * value_after is >= 0, the u32 value stored after the key `from` set to it,
 * or, when it is MODEL_VARIANT_AS_F32, that key's 4-byte value made the f32
 * at `to`. Returns dst. */
enum { MODEL_VARIANT_AS_F32 = -2 };
static inline const char *model_variant_gguf(const char *src, const char *dst, const char *from,
                                             const char *to, long value_after)
{
    FILE *f = fopen(src, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    size_t len = strlen(from);
    char *at = NULL;
    for (long i = 0; i + (long)len <= n && !at; i++)
        if (memcmp(b + i, from, len) == 0) at = b + i;
    assert_non_null(at);
    if (value_after >= 0) {
        uint32_t v = (uint32_t)value_after; /* after the key: a u32 type tag, then the value */
        memcpy(at + len + 4, &v, 4);
    } else if (value_after == MODEL_VARIANT_AS_F32) {
        uint32_t tag = 6; /* GGUF_TYPE_FLOAT32: the 4 value bytes, `to`, read as an f32 */
        memcpy(at + len, &tag, 4);
        memcpy(at + len + 4, to, 4);
    } else {
        memcpy(at, to, len);
    }
    f = fopen(dst, "wb");
    assert_non_null(f);
    fwrite(b, 1, (size_t)n, f);
    fclose(f);
    free(b);
    return dst;
}

#endif
