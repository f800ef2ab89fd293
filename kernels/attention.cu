/* The paged KV cache on the device: storing rows, and causal GQA attention
 * over a sequence's blocks (vLLM's PagedAttention layout, the same as the CPU
 * backend's: backend/cpu/kv_cache.h). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels.h"

namespace
{

constexpr int ATT_THREADS = 256; /* >= the largest head_dim taken */

__device__ __forceinline__ int64_t slot_index(const di_cuda_kv &c, const int32_t *table, int l,
                                              int64_t p)
{
    const int64_t b = table[p / c.block_size], slot = p % c.block_size;
    return ((int64_t)l * c.n_blocks + b) * c.block_size + slot;
}

__device__ __forceinline__ float kv_load(const void *base, int f16, int64_t i)
{
    return f16 ? __half2float(((const __half *)base)[i]) : ((const float *)base)[i];
}

/* One thread per element of k and v. Roofline: reads 8 n kv_dim bytes, writes
 * 2 n kv_dim elem_size; no arithmetic beyond the conversion (f16: round to
 * nearest even, as the CPU's cpu_f32_to_fp16). */
__global__ void kv_store_kernel(di_cuda_kv c, const int32_t *__restrict__ table, int l,
                                int64_t pos0, int64_t n, const float *__restrict__ k,
                                const float *__restrict__ v)
{
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n * c.kv_dim) return;
    const int64_t t = id / c.kv_dim, j = id % c.kv_dim;
    const int64_t dst = slot_index(c, table, l, pos0 + t) * c.kv_dim + j;
    if (c.f16) {
        ((__half *)c.k)[dst] = __float2half_rn(k[id]);
        if (v) ((__half *)c.v)[dst] = __float2half_rn(v[id]);
    } else {
        ((float *)c.k)[dst] = k[id];
        if (v) ((float *)c.v)[dst] = v[id];
    }
}

/* One block per (query token t, head h), for prefill and decode alike: the
 * keys 0 .. pos0 + t in tiles of ATT_THREADS, one key per thread; an online
 * softmax (running max and sum, FlashAttention's rescaling) over the tiles;
 * thread d < head_dim owns output element d. Fixed orders throughout, so a
 * row's result depends on its own query and the cache only.
 * Roofline per (t, h) with m = pos0 + t + 1 keys: reads 2 m head_dim elements
 * of the cache (heads of one KV group re-read them, from L2), 4 m head_dim
 * FLOPs + m exp; decode is bound by cache bandwidth, prefill (not tiled over
 * queries yet) by L2. */
__global__ void attention_kernel(di_cuda_kv c, const int32_t *__restrict__ table, int l,
                                 const float *__restrict__ q, int n_head, int64_t pos0, float scale,
                                 float *__restrict__ out)
{
    __shared__ float qs[ATT_THREADS];
    __shared__ float p[ATT_THREADS];
    __shared__ float red[ATT_THREADS];
    const int64_t t = blockIdx.x / n_head;
    const int h = (int)(blockIdx.x % n_head), d = c.head_dim, tid = threadIdx.x;
    const int g = h / (n_head / c.n_head_kv);
    const float *qr = q + (t * n_head + h) * d;
    if (tid < d) qs[tid] = qr[tid];
    __syncthreads();
    const int64_t n_keys = pos0 + t + 1;
    float m_run = -INFINITY, l_run = 0.0f, acc = 0.0f;
    for (int64_t j0 = 0; j0 < n_keys; j0 += ATT_THREADS) {
        const int64_t j = j0 + tid;
        float s = -INFINITY;
        if (j < n_keys) {
            const int64_t base = slot_index(c, table, l, j) * c.kv_dim + (int64_t)g * d;
            float dot = 0.0f;
            for (int i = 0; i < d; i++) dot = fmaf(qs[i], kv_load(c.k, c.f16, base + i), dot);
            s = dot * scale;
        }
        /* the tile's max, by a fixed tree */
        red[tid] = s;
        __syncthreads();
        for (int off = ATT_THREADS / 2; off > 0; off >>= 1) {
            if (tid < off) red[tid] = fmaxf(red[tid], red[tid + off]);
            __syncthreads();
        }
        const float m_new = fmaxf(m_run, red[0]);
        /* every score so far -inf: e^(x - 0), not e^(-inf + inf) = NaN, so the
         * weights and the rescale are 0 until a finite score (as the CPU's
         * softmax_step16) */
        const float shift = m_new == -INFINITY ? 0.0f : m_new;
        __syncthreads();
        const float e = j < n_keys ? expf(s - shift) : 0.0f;
        p[tid] = e;
        red[tid] = e;
        __syncthreads();
        for (int off = ATT_THREADS / 2; off > 0; off >>= 1) {
            if (tid < off) red[tid] += red[tid + off];
            __syncthreads();
        }
        const float alpha = expf(m_run - shift); /* 0 before the first finite score */
        l_run = l_run * alpha + red[0];
        m_run = m_new;
        if (tid < d) {
            float a = acc * alpha;
            const int64_t n_tile = n_keys - j0 < ATT_THREADS ? n_keys - j0 : ATT_THREADS;
            for (int64_t jj = 0; jj < n_tile; jj++) {
                const int64_t base =
                    slot_index(c, table, l, j0 + jj) * c.kv_dim + (int64_t)g * d + tid;
                a = fmaf(p[jj], kv_load(c.v, c.f16, base), a);
            }
            acc = a;
        }
        __syncthreads();
    }
    if (tid < d) out[(t * n_head + h) * d + tid] = acc / l_run;
}

} // namespace

extern "C" int di_cuda_kv_store(di_cuda_stream stream, const di_cuda_kv *c, const int32_t *table,
                                int l, int64_t pos0, int64_t n, const float *k, const float *v)
{
    const int64_t total = n * c->kv_dim;
    if (total <= 0) return 0;
    kv_store_kernel<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(*c, table, l, pos0, n, k,
                                                                         v);
    return (int)cudaGetLastError();
}

extern "C" int di_cuda_attention(di_cuda_stream stream, const di_cuda_kv *c, const int32_t *table,
                                 int l, const float *q, int n_head, int64_t pos0, int64_t n,
                                 float scale, float *out)
{
    if (n <= 0) return 0;
    if (c->head_dim > ATT_THREADS || n_head % c->n_head_kv != 0 || n * n_head > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    attention_kernel<<<(unsigned)(n * n_head), ATT_THREADS, 0, stream>>>(*c, table, l, q, n_head,
                                                                         pos0, scale, out);
    return (int)cudaGetLastError();
}
