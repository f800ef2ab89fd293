/* The CUDA kernels' dequantization (kernels/dequant.cuh, dq_group: the code
 * every matrix product and embedding lookup runs on the GPU) against the CPU
 * backend's cpu_dequantize_row, the oracle, for every storage type the CUDA
 * backend takes. dq_group is host code too: this is plain C++, built and run on
 * every host, with or without nvcc or a GPU. Random bytes exercise every quant code and sub-
 * block scale; the f16 fields (d, dmin, m) are random finite halves, and the
 * f16/bf16 rows random bit patterns (subnormals, infinities, NaNs). Each
 * group of each row must equal the oracle bit for bit (NaN matching NaN): the
 * arithmetic is the same in the same order (docs/cuda.md). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dequant.cuh"

extern "C" void cpu_dequantize_row(int dtype, const void *x, float *y, int64_t n);

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* A random finite f16: sign, exponent 0..30, mantissa. */
static uint16_t rnd_half(void)
{
    uint16_t h = (uint16_t)rnd();
    if (((h >> 10) & 0x1f) == 0x1f) h &= (uint16_t) ~(1u << 14);
    return h;
}

static void put_half(uint8_t *p, uint16_t h)
{
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

int main(void)
{
    const struct {
        int dtype;
        const char *name;
        int half_offsets[2]; /* f16 fields of each block (-1: none) */
    } types[] = {
        {DI_CUDA_F32, "f32", {-1, -1}},   {DI_CUDA_F16, "f16", {-1, -1}},
        {DI_CUDA_BF16, "bf16", {-1, -1}}, {DI_CUDA_Q8_0, "q8_0", {0, -1}},
        {DI_CUDA_Q4_0, "q4_0", {0, -1}},  {DI_CUDA_Q4_1, "q4_1", {0, 2}},
        {DI_CUDA_Q4_K, "q4_k", {0, 2}},   {DI_CUDA_Q6_K, "q6_k", {208, -1}},
    };
    int failures = 0;
    const int64_t rows = 16;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const int dt = types[k].dtype, be = dq_block_elems(dt), bb = dq_block_bytes(dt);
        /* float rows of a length that is not a multiple of 32 too (the tail group) */
        const int64_t n_in = be == 1 ? 100 : 2 * 256;
        const size_t row_bytes = (size_t)(n_in / be) * (size_t)bb;
        uint8_t *w = (uint8_t *)malloc(row_bytes * rows);
        float *ref = (float *)malloc(sizeof(float) * (size_t)n_in), got[32];
        if (!w || !ref) return 1;
        for (size_t i = 0; i < row_bytes * rows; i++) w[i] = (uint8_t)rnd();
        if (dt == DI_CUDA_F32) /* finite floats: the oracle copies, NaN payloads aside */
            for (size_t i = 0; i < (size_t)(n_in * rows); i++) {
                float f = (float)((int)(rnd() % 2001) - 1000) / 37.0f;
                memcpy(w + 4 * i, &f, 4);
            }
        if (be > 1)
            for (size_t b = 0; b < row_bytes * rows / (size_t)bb; b++)
                for (int h = 0; h < 2; h++)
                    if (types[k].half_offsets[h] >= 0)
                        put_half(w + b * (size_t)bb + types[k].half_offsets[h], rnd_half());
        int64_t bad = 0;
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *row = w + (size_t)r * row_bytes;
            cpu_dequantize_row(dt, row, ref, n_in);
            for (int64_t g = 0; g < (n_in + 31) / 32; g++) {
                const int cnt = dq_group(dt, row, n_in, g, got);
                const int want = n_in - 32 * g < 32 ? (int)(n_in - 32 * g) : 32;
                if (cnt != want) bad++;
                for (int i = 0; i < cnt && i < want; i++) {
                    const float a = got[i], b = ref[32 * g + i];
                    if (!(a == b || (isnan(a) && isnan(b)))) {
                        if (bad < 3)
                            fprintf(stderr, "%s row %lld element %lld: %.9g, cpu %.9g\n",
                                    types[k].name, (long long)r, (long long)(32 * g + i), a, b);
                        bad++;
                    }
                }
            }
        }
        printf("%s: %lld rows of %lld: %s\n", types[k].name, (long long)rows, (long long)n_in,
               bad ? "MISMATCH" : "identical to cpu_dequantize_row");
        failures += bad != 0;
        free(w);
        free(ref);
    }
    return failures ? 1 : 0;
}
