/* Weight lookups the architectures share; see load.h. */
#include "model/load.h"

#include <stdint.h>
#include <xxhash.h>

#include "model/model_internal.h"
#include "util/error.h"

di_status model_vector(const model_weights *w, backend *be, const char *name, int64_t n,
                       const float **out, di_error **err)
{
    const model_tensor *t;
    int64_t ne[1] = {n};
    di_status st = model_weights_require(w, name, 1, ne, &t, err);
    if (st != DI_OK) return st;
    return be->ops->vector(be, t, out, err);
}

di_status model_matrix(const model_weights *w, backend *be, const char *name, int64_t n_in,
                       int64_t n_out, const backend_matrix **out, di_error **err)
{
    const model_tensor *t;
    int64_t ne[2] = {n_in, n_out};
    di_status st = model_weights_require(w, name, 2, ne, &t, err);
    if (st != DI_OK) return st;
    return be->ops->matrix(be, t, out, err);
}

di_status model_embedding(const model_weights *w, backend *be, const char *name, int64_t n_embd,
                          int64_t n_vocab, const backend_matrix **out, di_error **err)
{
    const model_tensor *t;
    int64_t ne[2] = {n_embd, n_vocab};
    di_status st = model_weights_require(w, name, 2, ne, &t, err);
    if (st != DI_OK) return st;
    return be->ops->embedding(be, t, out, err);
}

backend_rope_params model_rope_params(const model_config *c, uint32_t head_dim, int ggml_angles)
{
    return (backend_rope_params){
        .head_dim = head_dim,
        .n_ctx_train = c->n_ctx_train,
        .rope_theta = c->rope_theta,
        .rope_style = c->rope_style,
        .rope_scaling = c->rope_scaling,
        .rope_factor = c->rope_factor,
        .rope_orig_ctx = c->rope_orig_ctx,
        .yarn_beta_fast = c->yarn_beta_fast,
        .yarn_beta_slow = c->yarn_beta_slow,
        .yarn_mscale = c->yarn_mscale,
        .yarn_mscale_all_dim = c->yarn_mscale_all_dim,
        .yarn_attn_factor = c->yarn_attn_factor,
        .yarn_truncate = c->yarn_truncate,
        .llama3_low_freq_factor = c->llama3_low_freq_factor,
        .llama3_high_freq_factor = c->llama3_high_freq_factor,
        .ggml_angles = ggml_angles,
    };
}

/* The cache dtypes by di_kv_cache_type, and their names. */
static const model_dtype kv_dtypes[] = {MODEL_DTYPE_F16, MODEL_DTYPE_F32, MODEL_DTYPE_Q8_0,
                                        MODEL_DTYPE_Q4_0};
static const char *const kv_dtype_names[] = {"f16", "f32", "q8_0", "q4_0"};

const char *model_kv_dtype_name(model_dtype dtype)
{
    for (size_t i = 0; i < sizeof kv_dtypes / sizeof kv_dtypes[0]; i++)
        if (kv_dtypes[i] == dtype) return kv_dtype_names[i];
    return "?";
}

di_status model_kv_dtype_of(int32_t type, model_dtype *out, di_error **err)
{
    if (type < 0 || type >= (int32_t)(sizeof kv_dtypes / sizeof kv_dtypes[0]))
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "kv_cache_type: unknown type %d (expected DI_KV_CACHE_F16, _F32, "
                             "_Q8_0 or _Q4_0)",
                             (int)type);
    *out = kv_dtypes[type];
    return DI_OK;
}

int64_t model_kv_row_bytes(model_dtype dtype, int64_t n)
{
    switch (dtype) {
    case MODEL_DTYPE_F32: return 4 * n;
    case MODEL_DTYPE_Q8_0: return n / 32 * 34;
    case MODEL_DTYPE_Q4_0: return n / 32 * 18;
    default: return 2 * n;
    }
}

di_status model_kv_dtype_check(model_dtype dtype, int64_t dims, const char *what, di_error **err)
{
    if ((dtype == MODEL_DTYPE_Q8_0 || dtype == MODEL_DTYPE_Q4_0) && dims % 32 != 0)
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "kv_cache_type %s: the cache's rows are blocks of 32 values, and "
                             "this model's %s is %lld (use f16 or f32)",
                             model_kv_dtype_name(dtype), what, (long long)dims);
    return DI_OK;
}

di_status model_kv_block_count(const model_options *opt, int64_t block_bytes, int32_t *out,
                               di_error **err)
{
    enum { BLOCK = MODEL_KV_BLOCK };
    int32_t n_blocks = opt->n_kv_blocks;
    if (n_blocks == 0 && opt->kv_bytes > 0) {
        int64_t nb = opt->kv_bytes / block_bytes;
        if (nb < 1 || nb > INT32_MAX)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "kv_cache_bytes: %lld bytes is not between one block of %d tokens "
                                 "(%lld bytes) and 2^31 blocks",
                                 (long long)opt->kv_bytes, BLOCK, (long long)block_bytes);
        n_blocks = (int32_t)nb;
    }
    if (n_blocks == 0)
        n_blocks = (int32_t)((opt->n_ctx + BLOCK - 1) / BLOCK) *
                   (opt->kv_n_ctx_multiple > 0 ? opt->kv_n_ctx_multiple : 1);
    *out = n_blocks;
    return DI_OK;
}

uint64_t model_kv_fingerprint(const model_weights *w, const model_options *opt)
{
    /* model_config holds scalars only, and the loaders zero it before filling it. */
    const model_config *c = model_weights_config(w);
    int32_t switches[4] = {(int32_t)opt->kv_dtype, opt->use_ref, opt->mla_naive, MODEL_KV_BLOCK};
    uint64_t k = XXH3_64bits_withSeed(c, sizeof *c, 0x6469707265666978ULL); /* "diprefix" */
    k = XXH3_64bits_withSeed(switches, sizeof switches, k);
    k ^= model_weights_digest(w);
    return k ? k : 1;
}

void model_logits(backend *be, const backend_matrix *output, const float *output_norm, float eps,
                  int64_t n_embd, const float *x, float *h, const model_batch_item *items,
                  int n_items, int64_t n, float *logits, int all_logits)
{
    const int64_t E = n_embd;
    if (all_logits) {
        be->ops->rmsnorm(be, x, E, output_norm, h, E, n, E, eps);
        be->ops->matmul(be, 1, &output, NULL, h, n, &logits);
        return;
    }
    /* The last want_logits rows of each item, gathered into h (every
     * operation is row-wise: a row's logits do not depend on the others). */
    int64_t n_out = 0, row = 0;
    for (int i = 0; i < n_items; i++) {
        row += items[i].n_tokens;
        int64_t k = items[i].want_logits;
        if (k > 0) {
            be->ops->rmsnorm(be, x + (row - k) * E, E, output_norm, h + n_out * E, E, k, E, eps);
            n_out += k;
        }
    }
    if (n_out) be->ops->matmul(be, 1, &output, NULL, h, n_out, &logits);
}

di_status model_forward_chunked(kv_pool *pool, model_seq *seq, const model_options *opt,
                                uint32_t n_vocab, const int32_t *tokens, int64_t n_tokens,
                                float *logits, int all_logits, model_step_fn step, void *arch,
                                di_error **err)
{
    int64_t pos0 = seq->kv.n_tokens;
    if (n_tokens > opt->n_ctx - pos0)
        return di_error_setf(
            err, DI_ERR_CONTEXT_LENGTH,
            "%lld tokens after %lld already in the sequence exceed the context of %lld",
            (long long)n_tokens, (long long)pos0, (long long)opt->n_ctx);
    if (kv_pool_seq_reserve(pool, &seq->kv, pos0 + n_tokens) != DI_OK)
        return di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                             "the KV cache has no room for %lld more tokens", (long long)n_tokens);
    for (int64_t done = 0; done < n_tokens; done += opt->n_batch) {
        int64_t n = n_tokens - done < opt->n_batch ? n_tokens - done : opt->n_batch;
        int last = done + n == n_tokens;
        float *out = NULL;
        if (logits && all_logits) out = logits + done * (int64_t)n_vocab;
        if (logits && !all_logits && last) out = logits;
        model_batch_item it = {seq, tokens + done, n, out != NULL};
        step(arch, &it, 1, n, out, all_logits);
    }
    return DI_OK;
}
