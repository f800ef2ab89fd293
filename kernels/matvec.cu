/* Matrix products with f32 activations and weights in their stored formats,
 * dequantized in registers (dequant.cuh): the decode matrix-vector product and,
 * for now, prefill too (docs/cuda.md: cuBLASLt GEMMs are not wired yet).
 *
 * One warp per output row o and tile of up to ROWS activation rows: lane l
 * takes the 32-element groups l, l + 32, ... of W[o], dequantizes each once and
 * multiplies it into the ROWS accumulators, then the warp sums by a fixed
 * butterfly. A row's result therefore depends on its own x row only, summed
 * in the same order whatever else is in the batch (batch-invariant), and two
 * runs give the same bits.
 *
 * Roofline (decode, n_rows = 1): bytes = n_out * row_bytes (the weights,
 * streamed once) + 4 n_in + 4 n_out, FLOPs = 2 n_in n_out: memory-bound at
 * ~0.25-1 FLOP/byte, so the bound is HBM bandwidth (H200: 4.8 TB/s). With
 * n_rows > ROWS the weights are re-read once per tile of ROWS rows: bytes =
 * ceil(n_rows / ROWS) n_out row_bytes, served mostly from L2 for the tiny and
 * 7B shapes; prefill-sized batches want a tensor-core GEMM instead. */
#include "dequant.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace
{

constexpr int WARPS = 4; /* warps per block: 4 output rows */
constexpr int ROWS = 4;  /* activation rows per warp */

__global__ void matvec_kernel(int dtype, const uint8_t *__restrict__ w, size_t row_bytes,
                              int64_t n_in, int64_t n_out, const float *__restrict__ x,
                              int64_t n_rows, const float *__restrict__ bias, float *__restrict__ y)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t o = (int64_t)blockIdx.x * WARPS + warp;
    const int64_t r0 = (int64_t)blockIdx.y * ROWS;
    if (o >= n_out) return;
    const int nr = n_rows - r0 < ROWS ? (int)(n_rows - r0) : ROWS;
    const uint8_t *row = w + (size_t)o * row_bytes;
    const int64_t n_groups = (n_in + 31) / 32;
    float acc[ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
    float wv[32];
    for (int64_t g = lane; g < n_groups; g += 32) {
        const int cnt = dq_group(dtype, row, n_in, g, wv);
        for (int r = 0; r < ROWS; r++) {
            if (r >= nr) break;
            const float *xr = x + (r0 + r) * n_in + g * 32;
            float a = acc[r];
            for (int i = 0; i < cnt; i++) a = fmaf(wv[i], xr[i], a);
            acc[r] = a;
        }
    }
    for (int r = 0; r < ROWS; r++) {
        float a = acc[r];
        for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
        acc[r] = a;
    }
    if (lane == 0)
        for (int r = 0; r < nr; r++) y[(r0 + r) * n_out + o] = bias ? acc[r] + bias[o] : acc[r];
}

/* The float formats (f32, f16, bf16) with 16-byte loads: lane l reads the
 * 16-byte chunks l, l + 32, ... of W[o] (a warp reads 512 contiguous bytes per
 * step: coalesced) and the matching 16 or 32 bytes of each x row (float4).
 * Same shape and invariance as matvec_kernel: a row's sum is its lanes'
 * strided sums, then the butterfly, whatever the batch. Needs n_in a multiple
 * of the chunk (8 halves, 4 floats) and 16-byte aligned x rows; the launcher
 * checks both and otherwise takes matvec_kernel (the choice depends on the
 * weight and the x buffer only, never on the number of rows). Roofline: as
 * matvec_kernel's, the weights streamed once per tile of ROWS rows. */
template <int DT>
__global__ void matvec_float_kernel(const uint4 *__restrict__ w, int64_t n_in, int64_t n_out,
                                    const float *__restrict__ x, int64_t n_rows,
                                    const float *__restrict__ bias, float *__restrict__ y)
{
    constexpr int EPC = DT == DI_CUDA_F32 ? 4 : 8; /* elements per 16-byte chunk */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t o = (int64_t)blockIdx.x * WARPS + warp;
    const int64_t r0 = (int64_t)blockIdx.y * ROWS;
    if (o >= n_out) return;
    const int nr = n_rows - r0 < ROWS ? (int)(n_rows - r0) : ROWS;
    const int64_t n_chunks = n_in / EPC;
    const uint4 *row = w + o * n_chunks;
    float acc[ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t c = lane; c < n_chunks; c += 32) {
        const uint4 q = __ldg(row + c);
        float wv[8];
        const uint32_t u[4] = {q.x, q.y, q.z, q.w};
        if (DT == DI_CUDA_F32) {
            for (int k = 0; k < 4; k++) wv[k] = __uint_as_float(u[k]);
        } else {
            for (int k = 0; k < 4; k++) { /* little-endian: the low half first */
                const uint16_t lo = (uint16_t)(u[k] & 0xffffu), hi = (uint16_t)(u[k] >> 16);
                if (DT == DI_CUDA_BF16) {
                    wv[2 * k] = __uint_as_float((uint32_t)lo << 16);
                    wv[2 * k + 1] = __uint_as_float((uint32_t)hi << 16);
                } else {
                    wv[2 * k] = __half2float(__ushort_as_half(lo));
                    wv[2 * k + 1] = __half2float(__ushort_as_half(hi));
                }
            }
        }
        for (int r = 0; r < ROWS; r++) {
            if (r >= nr) break;
            const float4 *xr = (const float4 *)(x + (r0 + r) * n_in + c * EPC);
            float a = acc[r];
            for (int v = 0; v < EPC / 4; v++) {
                const float4 xv = xr[v];
                a = fmaf(wv[4 * v + 0], xv.x, a);
                a = fmaf(wv[4 * v + 1], xv.y, a);
                a = fmaf(wv[4 * v + 2], xv.z, a);
                a = fmaf(wv[4 * v + 3], xv.w, a);
            }
            acc[r] = a;
        }
    }
    for (int r = 0; r < ROWS; r++) {
        float a = acc[r];
        for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
        acc[r] = a;
    }
    if (lane == 0)
        for (int r = 0; r < nr; r++) y[(r0 + r) * n_out + o] = bias ? acc[r] + bias[o] : acc[r];
}

/* One thread per 32-element group of one output row. Roofline: reads the
 * rows' bytes, writes 4 n_in bytes per row; no reuse. */
__global__ void dequant_rows_kernel(int dtype, const uint8_t *__restrict__ w, size_t row_bytes,
                                    int64_t n_in, const int32_t *__restrict__ rows, int64_t n,
                                    float *__restrict__ out, int64_t out_stride)
{
    const int64_t n_groups = (n_in + 31) / 32;
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n * n_groups) return;
    const int64_t r = id / n_groups, g = id % n_groups;
    const int64_t src = rows ? rows[r] : r;
    float v[32];
    const int cnt = dq_group(dtype, w + (size_t)src * row_bytes, n_in, g, v);
    float *dst = out + r * out_stride + g * 32;
    for (int i = 0; i < cnt; i++) dst[i] = v[i];
}

} // namespace

extern "C" int di_cuda_dtype_supported(int dtype, int64_t n_in)
{
    const int be = dq_block_elems(dtype);
    return be > 0 && n_in > 0 && n_in % be == 0;
}

extern "C" size_t di_cuda_row_bytes(int dtype, int64_t n_in)
{
    if (!di_cuda_dtype_supported(dtype, n_in)) return 0;
    return (size_t)(n_in / dq_block_elems(dtype)) * (size_t)dq_block_bytes(dtype);
}

extern "C" int di_cuda_matvec(di_cuda_stream stream, int dtype, const void *w, size_t row_bytes,
                              int64_t n_in, int64_t n_out, const float *x, int64_t n_rows,
                              const float *bias, float *y)
{
    if (n_rows <= 0 || n_out <= 0) return 0;
    const int64_t gy = (n_rows + ROWS - 1) / ROWS;
    if (gy > 65535) return (int)cudaErrorInvalidConfiguration;
    dim3 grid((unsigned)((n_out + WARPS - 1) / WARPS), (unsigned)gy);
    const int epc = dtype == DI_CUDA_F32 ? 4 : 8;
    const int vec = (dtype == DI_CUDA_F32 || dtype == DI_CUDA_F16 || dtype == DI_CUDA_BF16) &&
                    n_in % epc == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)w & 15) == 0;
    if (vec && dtype == DI_CUDA_F32)
        matvec_float_kernel<DI_CUDA_F32>
            <<<grid, WARPS * 32, 0, stream>>>((const uint4 *)w, n_in, n_out, x, n_rows, bias, y);
    else if (vec && dtype == DI_CUDA_F16)
        matvec_float_kernel<DI_CUDA_F16>
            <<<grid, WARPS * 32, 0, stream>>>((const uint4 *)w, n_in, n_out, x, n_rows, bias, y);
    else if (vec)
        matvec_float_kernel<DI_CUDA_BF16>
            <<<grid, WARPS * 32, 0, stream>>>((const uint4 *)w, n_in, n_out, x, n_rows, bias, y);
    else
        matvec_kernel<<<grid, WARPS * 32, 0, stream>>>(dtype, (const uint8_t *)w, row_bytes, n_in,
                                                       n_out, x, n_rows, bias, y);
    return (int)cudaGetLastError();
}

extern "C" int di_cuda_dequant_rows(di_cuda_stream stream, int dtype, const void *w,
                                    size_t row_bytes, int64_t n_in, const int32_t *rows, int64_t n,
                                    float *out, int64_t out_stride)
{
    if (n <= 0) return 0;
    const int64_t total = n * ((n_in + 31) / 32);
    dequant_rows_kernel<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(
        dtype, (const uint8_t *)w, row_bytes, n_in, rows, n, out, out_stride);
    return (int)cudaGetLastError();
}
