/* The public model API (deepinfer.h, "Models (CPU)") over lib/model/model.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"
#include "util/struct_size.h"
#include "model/model.h"
#include "api/engram_vocab.h"

_Static_assert(sizeof(di_model_options) == DI_STRUCT_SIZE_UNTIL(di_model_options, reserved),
               "di_model_options has no trailing padding");

struct di_model {
    model *m;
};

/* The size the exported di_model_options_init writes: the struct of the
 * release that added di_model_options_init_size. Frozen: binaries compiled
 * before the di_model_options_init macro pass a struct no larger, so a field
 * appended later must not change it (it names today's last field, not sizeof). */
#define MODEL_OPTIONS_INIT_SIZE DI_STRUCT_SIZE_UNTIL(di_model_options, reserved)
_Static_assert(MODEL_OPTIONS_INIT_SIZE <= sizeof(di_model_options),
               "di_model_options_init's frozen size is a release of the struct");

DI_API void di_model_options_init_size(di_model_options *opts, size_t struct_size)
{
    di_struct_init(opts, struct_size); /* every default is zero */
}

DI_API void(di_model_options_init)(di_model_options *opts)
{
    di_model_options_init_size(opts, MODEL_OPTIONS_INIT_SIZE);
}

DI_API di_status di_model_load(const char *path, const di_model_options *opts, di_model **out,
                               di_error **err)
{
    if (!path || !out)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "path and out must not be NULL");
    *out = NULL;
    di_model_options o;
    di_model_options_init(&o);
    if (opts) {
        const char *msg;
        /* the first release ended at n_ctx */
        if (di_struct_copy_in(&o, sizeof o, opts, DI_STRUCT_SIZE_UNTIL(di_model_options, n_ctx),
                              &msg) != DI_OK)
            return di_error_set(err, DI_ERR_INVALID_ARGUMENT, msg);
    }
    if (o.n_threads < 0 || o.n_threads > 1024)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "n_threads: expected 0 (all CPUs) to 1024");
    if (o.n_ctx < 0 || o.n_ctx > (int64_t)1 << 24)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "n_ctx: expected 0 (the model's) to 16777216 tokens");
    if (o.kv_cache_f32 != 0 && o.kv_cache_f32 != 1)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "kv_cache_f32: expected 0 or 1");
    model_dtype kv_dtype;
    di_status st = model_kv_dtype_of(o.kv_cache_type, &kv_dtype, err);
    if (st != DI_OK) return st;
    if (o.kv_cache_f32 && o.kv_cache_type != DI_KV_CACHE_F16 && o.kv_cache_type != DI_KV_CACHE_F32)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "kv_cache_f32: set, but kv_cache_type asks for another type");
    if (o.kv_cache_f32) kv_dtype = MODEL_DTYPE_F32;
    if (o.reserved != 0) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "reserved: must be 0");
    model_options mo = {0};
    mo.n_threads = o.n_threads;
    if (mo.n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        mo.n_threads = n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
    }
    mo.n_ctx = o.n_ctx;
    mo.kv_dtype = kv_dtype;
    di_model *h = calloc(1, sizeof *h);
    if (!h) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    st = model_load(path, &mo, &h->m, err);
    if (st == DI_OK && (st = api_engram_vocab(h->m, NULL, path, err)) != DI_OK) model_free(h->m);
    if (st != DI_OK) {
        free(h);
        return st;
    }
    *out = h;
    return DI_OK;
}

DI_API void di_model_free(di_model *dm)
{
    if (!dm) return;
    model_free(dm->m);
    free(dm);
}

DI_API int32_t di_model_vocab_size(const di_model *dm)
{
    return dm ? (int32_t)model_get_config(dm->m)->n_vocab : 0;
}

DI_API int64_t di_model_context_length(const di_model *dm)
{
    return dm ? model_n_ctx(dm->m) : 0;
}

DI_API int64_t di_model_n_past(const di_model *dm)
{
    return dm ? model_n_past(dm->m) : 0;
}

DI_API int64_t di_model_kv_bytes_per_token(const di_model *dm)
{
    return dm ? (int64_t)model_kv_bytes_per_token(dm->m) : 0;
}

DI_API void di_model_reset(di_model *dm)
{
    if (dm) model_reset(dm->m);
}

DI_API di_status di_model_eval(di_model *dm, const int32_t *tokens, size_t n_tokens, float *logits,
                               unsigned flags, di_error **err)
{
    if (!dm) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "model must not be NULL");
    if (flags & ~(unsigned)DI_EVAL_ALL_LOGITS)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "flags: unknown bits set");
    if (n_tokens > (size_t)INT64_MAX / 2)
        return di_error_set(err, DI_ERR_CONTEXT_LENGTH, "n_tokens exceeds the context");
    /* the context first: a count beyond it is refused before the ids are read */
    int64_t room = model_n_ctx(dm->m) - model_n_past(dm->m);
    if ((int64_t)n_tokens > room) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "%zu tokens after %lld already in the sequence exceed the context of %lld",
                 n_tokens, (long long)model_n_past(dm->m), (long long)model_n_ctx(dm->m));
        return di_error_set(err, DI_ERR_CONTEXT_LENGTH, msg);
    }
    return model_forward(dm->m, tokens, (int64_t)n_tokens, logits,
                         (flags & DI_EVAL_ALL_LOGITS) != 0, err);
}
