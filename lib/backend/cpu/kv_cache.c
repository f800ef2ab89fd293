/* The paged KV cache (kv_cache.h). */
#include "backend/cpu/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/huge_pages.h"
#include "backend/cpu/quant.h"

/* Both constructors: the K pool, and the V pool when with_values. */
static di_status kv_init(cpu_kv_cache *c, model_dtype dtype, int n_layer, int n_head_kv,
                         int head_dim, int block_size, int32_t n_blocks, int with_values)
{
    memset(c, 0, sizeof *c);
    const int blocked = dtype == MODEL_DTYPE_Q8_0 || dtype == MODEL_DTYPE_Q4_0;
    if ((dtype != MODEL_DTYPE_F32 && dtype != MODEL_DTYPE_F16 && !blocked) || n_layer <= 0 ||
        n_head_kv <= 0 || head_dim <= 0 || block_size <= 0 || n_blocks <= 0 ||
        (blocked && head_dim % 32 != 0))
        return DI_ERR_INVALID_ARGUMENT;
    /* a row of n_head_kv x head_dim values must fit an int, and a pool's
     * bytes a size_t: beyond that the sizes are out of memory, not wrapped */
    int kv_dim;
    size_t bytes;
    if (__builtin_mul_overflow(n_head_kv, head_dim, &kv_dim)) return DI_ERR_OUT_OF_MEMORY;
    const size_t head_bytes = cpu_row_bytes((int)dtype, head_dim);
    if (__builtin_mul_overflow((size_t)n_head_kv, head_bytes, &bytes) ||
        __builtin_mul_overflow(bytes, (size_t)block_size, &bytes) ||
        __builtin_mul_overflow(bytes, (size_t)n_blocks, &bytes) ||
        __builtin_mul_overflow(bytes, (size_t)n_layer, &bytes))
        return DI_ERR_OUT_OF_MEMORY;
    c->dtype = dtype;
    c->n_layer = n_layer;
    c->n_head_kv = n_head_kv;
    c->head_dim = head_dim;
    c->kv_dim = kv_dim;
    c->block_size = block_size;
    c->n_blocks = n_blocks;
    c->rotated = cpu_kv_rotates(dtype, head_dim);
    c->head_bytes = head_bytes;
    c->row_bytes = (size_t)n_head_kv * head_bytes;
    c->bytes = bytes;
    c->k = cpu_huge_alloc(c->bytes);
    c->v = with_values ? cpu_huge_alloc(c->bytes) : NULL;
    if (!c->k || (with_values && !c->v)) {
        cpu_kv_cache_free(c);
        return DI_ERR_OUT_OF_MEMORY;
    }
    return DI_OK;
}

di_status cpu_kv_cache_init(cpu_kv_cache *c, model_dtype dtype, int n_layer, int n_head_kv,
                            int head_dim, int block_size, int32_t n_blocks)
{
    return kv_init(c, dtype, n_layer, n_head_kv, head_dim, block_size, n_blocks, 1);
}

di_status cpu_kv_cache_init_latent(cpu_kv_cache *c, model_dtype dtype, int n_layer, int dim,
                                   int block_size, int32_t n_blocks)
{
    return kv_init(c, dtype, n_layer, 1, dim, block_size, n_blocks, 0);
}

size_t cpu_kv_cache_bytes_per_token(const cpu_kv_cache *c)
{
    return (size_t)c->n_layer * c->row_bytes * (c->v ? 2 : 1);
}

void cpu_kv_cache_free(cpu_kv_cache *c)
{
    cpu_huge_free(c->k, c->bytes);
    cpu_huge_free(c->v, c->bytes);
    memset(c, 0, sizeof *c);
}

void cpu_kv_rotate(float *x, int64_t n)
{
    for (int64_t g = 0; g < n; g += 64) {
        float *y = x + g;
        for (int len = 1; len < 64; len *= 2)
            for (int i = 0; i < 64; i += 2 * len)
                for (int j = i; j < i + len; j++) {
                    float a = y[j], b = y[j + len];
                    y[j] = a + b;
                    y[j + len] = a - b;
                }
        for (int j = 0; j < 64; j++) y[j] *= 0.125f; /* 1 / sqrt(64): orthonormal */
    }
}

int cpu_kv_rotates(model_dtype dtype, int64_t n)
{
    return (dtype == MODEL_DTYPE_Q8_0 || dtype == MODEL_DTYPE_Q4_0) && n % 64 == 0;
}

void cpu_kv_store_row(model_dtype dtype, int rotated, const float *x, void *dst, int64_t n)
{
    if (!rotated) {
        cpu_quantize_row((int)dtype, x, dst, n);
        return;
    }
    float g[64]; /* rotated, then quantized, 64 at a time (two blocks of 32) */
    const size_t bytes = cpu_row_bytes((int)dtype, 64);
    for (int64_t i = 0; i < n; i += 64) {
        memcpy(g, x + i, sizeof g);
        cpu_kv_rotate(g, 64);
        cpu_quantize_row((int)dtype, g, (char *)dst + (size_t)(i / 64) * bytes, 64);
    }
}

void cpu_kv_store(cpu_kv_cache *c, const cpu_kv_seq *s, int l, int64_t pos0, int64_t n_tokens,
                  const float *k, const float *v)
{
    for (int64_t t = 0; t < n_tokens; t++) {
        cpu_kv_store_row(c->dtype, c->rotated, k + t * c->kv_dim, cpu_kv_k(c, s, l, pos0 + t),
                         c->kv_dim);
        if (c->v)
            cpu_kv_store_row(c->dtype, c->rotated, v + t * c->kv_dim, cpu_kv_v(c, s, l, pos0 + t),
                             c->kv_dim);
    }
}

size_t cpu_kv_block_bytes(const cpu_kv_cache *c)
{
    return (size_t)c->n_layer * (size_t)c->block_size * c->row_bytes * (c->v ? 2 : 1);
}

/* Layer l's part of block b in one of the two pools. */
static char *block_part(const cpu_kv_cache *c, void *pool, int l, int32_t b)
{
    return (char *)pool + cpu_kv_block_offset(c, l, b);
}

void cpu_kv_block_read(const cpu_kv_cache *c, int32_t block, void *dst)
{
    size_t per = (size_t)c->block_size * c->row_bytes;
    char *d = dst;
    for (int l = 0; l < c->n_layer; l++, d += per) memcpy(d, block_part(c, c->k, l, block), per);
    if (c->v)
        for (int l = 0; l < c->n_layer; l++, d += per)
            memcpy(d, block_part(c, c->v, l, block), per);
}

void cpu_kv_block_write(cpu_kv_cache *c, int32_t block, const void *src)
{
    size_t per = (size_t)c->block_size * c->row_bytes;
    const char *p = src;
    for (int l = 0; l < c->n_layer; l++, p += per) memcpy(block_part(c, c->k, l, block), p, per);
    if (c->v)
        for (int l = 0; l < c->n_layer; l++, p += per)
            memcpy(block_part(c, c->v, l, block), p, per);
}
