/* Test helper shared by the model tests: a copy of a fixture's config.json
 * with fields edited, to load the fixture's weights under another config. */
#ifndef DI_TESTS_MODEL_VARIANT_H
#define DI_TESTS_MODEL_VARIANT_H

#include <jansson.h>
#include <stdio.h>
#include <unistd.h>

/* Write <tmpdir>/variant/config.json: tests/fixtures/model/<fixture>/config.json
 * with the JSON object `edit` merged over it (a null value deletes the key).
 * Returns the folder (static storage; the caller puts the weights there). */
static const char *model_variant_config(const char *tmpdir, const char *fixture, const char *edit)
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
static void model_variant_remove(const char *tmpdir)
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

#endif
