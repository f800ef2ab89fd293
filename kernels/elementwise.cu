/* Row-wise and element-wise kernels on f32 activations: RMSNorm, the residual
 * add, the SiLU-gated activation and RoPE, each the arithmetic of the CPU
 * backend's (backend/cpu/norm.c, activation.c, rope.c) in the same order
 * where the order matters (RMSNorm's sum of squares in double). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels.h"

namespace
{

constexpr int NORM_THREADS = 256;

/* One block per row: squares in f32 summed in double (as ggml and cpu_rmsnorm),
 * each thread over a fixed stride, then a fixed tree: the same bits for a row
 * whatever the batch. Roofline: reads 4n (twice, the second from L1/L2) + 4n
 * of weight, writes 4n bytes per row; ~4n FLOPs. */
__global__ void rmsnorm_kernel(const float *__restrict__ x, int64_t x_stride,
                               const float *__restrict__ w, float *y, int64_t y_stride, int64_t n,
                               float eps)
{
    __shared__ double part[NORM_THREADS];
    const float *xr = x + (int64_t)blockIdx.x * x_stride;
    float *yr = y + (int64_t)blockIdx.x * y_stride;
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS) s += (double)(xr[i] * xr[i]);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int off = NORM_THREADS / 2; off > 0; off >>= 1) {
        if ((int)threadIdx.x < off) part[threadIdx.x] += part[threadIdx.x + off];
        __syncthreads();
    }
    const float scale = 1.0f / sqrtf((float)(part[0] / (double)n) + eps);
    /* y may be x: every thread has read its elements' squares before the
     * barriers above, and writes only the elements it reads below */
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS)
        yr[i] = w ? xr[i] * scale * w[i] : xr[i] * scale;
}

/* Roofline: 12 bytes moved and 1 FLOP per element. */
__global__ void add_kernel(float *x, const float *__restrict__ y, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

/* Roofline: 12 bytes moved, ~5 FLOPs and an exp per element. */
__global__ void silu_mul_kernel(float *gate, const float *__restrict__ up, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* One thread per rotated pair (row t, head h, pair i): the angle as
 * cpu_rope_apply computes it (ggml's repeated f32 multiplication, or pos *
 * inv_freq[i]). Roofline: 16 bytes moved, ~6 FLOPs plus a sin and cos per
 * pair (the ggml form: i more multiplications). */
__global__ void rope_kernel(di_cuda_rope_table r, float *x, int64_t n_rows, int64_t row_stride,
                            int n_heads, int64_t head_stride, const int64_t *__restrict__ pos)
{
    const int half = r.head_dim / 2;
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_rows * n_heads * half) return;
    const int i = (int)(id % half);
    const int h = (int)((id / half) % n_heads);
    const int64_t t = id / ((int64_t)half * n_heads);
    float cs, sn;
    if (r.ggml_angles) {
        float theta = (float)pos[t];
        for (int k = 0; k < i; k++) theta *= r.theta_scale;
        const float a = theta * r.freq_scale;
        cs = cosf(a);
        sn = sinf(a);
    } else {
        const float a = (float)pos[t] * r.inv_freq[i];
        cs = cosf(a) * r.mscale;
        sn = sinf(a) * r.mscale;
    }
    float *v = x + t * row_stride + (int64_t)h * head_stride;
    const int ia = r.neox ? i : 2 * i, ib = r.neox ? i + half : 2 * i + 1;
    const float a = v[ia], b = v[ib];
    v[ia] = a * cs - b * sn;
    v[ib] = a * sn + b * cs;
}

unsigned blocks_for(int64_t n, int threads)
{
    return (unsigned)((n + threads - 1) / threads);
}

} // namespace

extern "C" int di_cuda_rmsnorm(di_cuda_stream stream, const float *x, int64_t x_stride,
                               const float *w, float *y, int64_t y_stride, int64_t n_rows,
                               int64_t n, float eps)
{
    if (n_rows <= 0) return 0;
    if (n_rows > 0x7fffffff) return (int)cudaErrorInvalidConfiguration;
    rmsnorm_kernel<<<(unsigned)n_rows, NORM_THREADS, 0, stream>>>(x, x_stride, w, y, y_stride, n,
                                                                  eps);
    return (int)cudaGetLastError();
}

extern "C" int di_cuda_add(di_cuda_stream stream, float *x, const float *y, int64_t n)
{
    if (n <= 0) return 0;
    add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, y, n);
    return (int)cudaGetLastError();
}

extern "C" int di_cuda_silu_mul(di_cuda_stream stream, float *gate, const float *up, int64_t n)
{
    if (n <= 0) return 0;
    silu_mul_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(gate, up, n);
    return (int)cudaGetLastError();
}

extern "C" int di_cuda_rope(di_cuda_stream stream, const di_cuda_rope_table *r, float *x,
                            int64_t n_rows, int64_t row_stride, int n_heads, int64_t head_stride,
                            const int64_t *pos)
{
    const int64_t total = n_rows * n_heads * (r->head_dim / 2);
    if (total <= 0) return 0;
    rope_kernel<<<blocks_for(total, 256), 256, 0, stream>>>(*r, x, n_rows, row_stride, n_heads,
                                                            head_stride, pos);
    return (int)cudaGetLastError();
}
