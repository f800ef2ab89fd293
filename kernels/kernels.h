/* The CUDA backend's device code (the .cu files of kernels/) as C-callable launchers, for
 * the host side in lib/backend/cuda/. Every launcher enqueues its kernel(s) on
 * `stream` and returns the launch's cudaError_t as an int (0: success);
 * faults inside a kernel surface at the next synchronisation. Pointers are
 * device memory unless said otherwise; shapes are in elements, strides in
 * floats. Each kernel's roofline is stated where it is defined. */
#ifndef DI_KERNELS_KERNELS_H
#define DI_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *di_cuda_stream;

/* The weight storage types the kernels dequantize (model_dtype's values:
 * backend/types.h). */
enum {
    DI_CUDA_F32 = 0,
    DI_CUDA_F16 = 1,
    DI_CUDA_BF16 = 2,
    DI_CUDA_Q8_0 = 3,
    DI_CUDA_Q4_0 = 4,
    DI_CUDA_Q4_1 = 5,
    DI_CUDA_Q4_K = 6,
    DI_CUDA_Q6_K = 8,
};

/* 1 when the kernels take dtype with rows of n_in elements (block formats:
 * n_in a multiple of their block). */
int di_cuda_dtype_supported(int dtype, int64_t n_in);
/* Bytes of a row of n_in elements of dtype (0 when unsupported). */
size_t di_cuda_row_bytes(int dtype, int64_t n_in);

/* y[r, o] = sum_i x[r, i] W[o, i] (+ bias[o]) for r < n_rows, o < n_out; W
 * [n_out, n_in] in dtype, row_bytes apart; bias NULL or f32 [n_out]. */
int di_cuda_matvec(di_cuda_stream stream, int dtype, const void *w, size_t row_bytes, int64_t n_in,
                   int64_t n_out, const float *x, int64_t n_rows, const float *bias, float *y);
/* out[r, i] = W[rows[r], i] as f32 (rows: device int32 [n], each < n_rows_w;
 * out rows out_stride apart). With rows NULL: every row of W, n = n_rows_w. */
int di_cuda_dequant_rows(di_cuda_stream stream, int dtype, const void *w, size_t row_bytes,
                         int64_t n_in, const int32_t *rows, int64_t n, float *out,
                         int64_t out_stride);

/* RMSNorm (backend.h): y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w (w NULL: none). */
int di_cuda_rmsnorm(di_cuda_stream stream, const float *x, int64_t x_stride, const float *w,
                    float *y, int64_t y_stride, int64_t n_rows, int64_t n, float eps);
/* x[i] += y[i] */
int di_cuda_add(di_cuda_stream stream, float *x, const float *y, int64_t n);
/* gate[i] = silu(gate[i]) * up[i] */
int di_cuda_silu_mul(di_cuda_stream stream, float *gate, const float *up, int64_t n);

/* RoPE as backend/cpu/rope.c's cpu_rope_apply: the table's fields copied. */
typedef struct di_cuda_rope_table {
    int head_dim;
    int neox; /* 1: pairs (i, i + d/2); 0: (2i, 2i + 1) */
    int ggml_angles;
    float theta_scale, freq_scale, mscale;
    const float *inv_freq; /* device f32 [head_dim / 2] */
} di_cuda_rope_table;
/* Rotate in place n_heads heads of n_rows rows (head h of row t at x + t
 * row_stride + h head_stride) by pos[t] (device int64 [n_rows]). */
int di_cuda_rope(di_cuda_stream stream, const di_cuda_rope_table *r, float *x, int64_t n_rows,
                 int64_t row_stride, int n_heads, int64_t head_stride, const int64_t *pos);

/* The paged KV cache (backend/cpu/kv_cache.h's layout): per layer, n_blocks x
 * block_size slots of kv_dim elements (f32, or f16 when f16 is 1). */
typedef struct di_cuda_kv {
    void *k, *v;
    int f16;
    int n_layer, n_head_kv, head_dim, kv_dim, block_size;
    int32_t n_blocks;
} di_cuda_kv;
/* Store k, v (f32 [n, kv_dim]) at positions pos0.. of layer l of the sequence
 * whose block table is table (device int32). */
int di_cuda_kv_store(di_cuda_stream stream, const di_cuda_kv *c, const int32_t *table, int l,
                     int64_t pos0, int64_t n, const float *k, const float *v);
/* Causal GQA attention (backend/cpu/attention.h): q f32 [n, n_head, head_dim]
 * at positions pos0.., out likewise; head_dim <= 256. */
int di_cuda_attention(di_cuda_stream stream, const di_cuda_kv *c, const int32_t *table, int l,
                      const float *q, int n_head, int64_t pos0, int64_t n, float scale, float *out);

#ifdef __cplusplus
}
#endif

#endif
