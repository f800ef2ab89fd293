/* Test helper shared by the model tests: a copy of a fixture's config.json
 * with fields edited, to load the fixture's weights under another config. */
#ifndef DI_TESTS_MODEL_VARIANT_H
#define DI_TESTS_MODEL_VARIANT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Write <tmpdir>/variant/config.json: tests/fixtures/model/<fixture>/config.json
 * with the JSON object `edit` merged over it (a null value deletes the key).
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
        if (json_is_null(v))
            json_object_del(cfg, key);
        else
            json_object_set(cfg, key, v);
    }
    static char dir[128];
    snprintf(dir, sizeof dir, "%s/variant", tmpdir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    json_decref(e);
    return dir;
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
