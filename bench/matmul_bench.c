/* The dense product alone (cpu_matmul) with F16, BF16 and F32 weights at
 * SmolLM2-135M's shapes (576 -> 49,152, the tied output head; 576 -> 1,536,
 * gate/up; 1,536 -> 576, down), one token (decode: GB/s of weights read) and
 * 512 tokens (prefill: GFLOP/s), against two anchors in the same run:
 *   read    a plain AVX2 sum over the same bytes on the same threads (the
 *           memory-bandwidth roofline decode is held to).
 * Decode walks copies of the matrix (128 MB in all), so its weights come
 * from memory as in a model's decode; prefill's GFLOP/s is printed as it is.
 * Random weights (the time does not depend on the values); best of `reps`.
 *
 *     matmul_bench [threads (2)] [reps (5)]
 * Ratio last: decode GB/s / read GB/s. A second table: the interleaved-row
 * kernels (matmul_packed.h) of every packed type at one token, at those shapes
 * (where the type's block divides n_in) and a 7B's 3,584 -> 18,944, the same
 * walk over 128 MB of copies against the same read, and last the same matrix
 * 64 times over (from L2 where it fits: the kernel's arithmetic ceiling). */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/bench_clock.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

static unsigned rng = 12345u;
static float frand(void)
{
    rng = rng * 1103515245u + 12345u;
    return (float)((rng >> 8) & 0xffff) / 65536.0f - 0.5f;
}

typedef struct read_job {
    const char *p;
    size_t bytes;
    double sum[64];
} read_job;

__attribute__((target("avx2"))) static void read_task(void *ctx, int64_t t, int thread)
{
    read_job *j = ctx;
    size_t chunk = j->bytes / 64, from = (size_t)t * chunk;
    __m256i acc = _mm256_setzero_si256();
    for (size_t i = from; i + 32 <= from + chunk; i += 32)
        acc = _mm256_add_epi32(acc, _mm256_loadu_si256((const __m256i *)(j->p + i)));
    int32_t v[8];
    _mm256_storeu_si256((__m256i *)v, acc);
    j->sum[t] += v[0] + v[7] + thread;
}

/* Random quants with every block's f16 scales (d, and dmin where the format
 * has one) set to 2^-7, so no NaN or subnormal: where they sit in the block. */
static void fill_blocks(model_dtype dt, char *w, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++) {
        rng = rng * 1103515245u + 12345u;
        w[i] = (char)(rng >> 24);
    }
    size_t bb = cpu_dtype_block_bytes((int)dt), n_scales = 1, at = 0;
    switch (dt) {
    case MODEL_DTYPE_Q4_1:
    case MODEL_DTYPE_Q5_1:
    case MODEL_DTYPE_Q4_K:
    case MODEL_DTYPE_Q5_K: n_scales = 2; break;
    case MODEL_DTYPE_Q2_K:
        at = offsetof(block_q2_K, d);
        n_scales = 2;
        break;
    case MODEL_DTYPE_Q3_K: at = offsetof(block_q3_K, d); break;
    case MODEL_DTYPE_Q6_K: at = offsetof(block_q6_K, d); break;
    default: break;
    }
    const uint16_t d = 0x2000;
    for (size_t b = 0; b + bb <= bytes; b += bb)
        for (size_t k = 0; k < n_scales; k++) memcpy(w + b + at + 2 * k, &d, 2);
}

static void packed_table(cpu_threadpool *pool, int reps)
{
    const struct {
        int64_t n_in, n_out;
    } shapes[] = {{576, 49152}, {576, 1536}, {1536, 576}, {3584, 18944}};
    const model_dtype types[] = {MODEL_DTYPE_Q8_0, MODEL_DTYPE_Q4_0,   MODEL_DTYPE_Q4_1,
                                 MODEL_DTYPE_Q5_0, MODEL_DTYPE_Q5_1,   MODEL_DTYPE_Q2_K,
                                 MODEL_DTYPE_Q3_K, MODEL_DTYPE_Q4_K,   MODEL_DTYPE_Q5_K,
                                 MODEL_DTYPE_Q6_K, MODEL_DTYPE_IQ4_NL, MODEL_DTYPE_IQ4_XS};
    const char *names[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",   "Q2_K",
                           "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"};
    printf("\npacked kernels, one token (decode)\n| dtype | n_in x n_out | decode GB/s | read "
           "GB/s | decode / read | the same matrix 64 times GB/s |\n|---|---|---|---|---|---|\n");
    for (size_t d = 0; d < sizeof types / sizeof types[0]; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t n_in = shapes[s].n_in, n_out = shapes[s].n_out;
            if (n_in % (int64_t)cpu_dtype_block_elems((int)types[d])) continue;
            size_t wb = cpu_row_bytes((int)types[d], n_in) * (size_t)n_out;
            char *raw = malloc(wb);
            float *x = malloc(sizeof(float) * (size_t)n_in);
            float *y = malloc(sizeof(float) * (size_t)n_out);
            void *scratch = malloc(cpu_matmul_scratch_bytes(types[d], n_in, 1));
            if (!raw || !x || !y || !scratch) exit(1);
            fill_blocks(types[d], raw, wb);
            model_tensor t = {.dtype = types[d], .data = raw, .ne = {n_in, n_out}};
            size_t pb = cpu_pack_bytes(&t), stride = (pb + 4095) / 4096 * 4096;
            size_t copies = ((size_t)128 << 20) / stride + 1;
            char *w = aligned_alloc(4096, stride * copies);
            if (!w || !cpu_pack_supported(&t)) {
                fprintf(stderr, "no packed kernel for %s here\n", names[d]);
                exit(1);
            }
            memset(w, 0, stride * copies); /* the pages between copies too */
            cpu_pack(&t, w);
            for (size_t c = 1; c < copies; c++) memcpy(w + c * stride, w, pb);
            for (int64_t i = 0; i < n_in; i++) x[i] = frand();
            double dec = 0, rd = 0, hot = 0;
            read_job rj = {.p = w, .bytes = stride * copies};
            const model_tensor *wp = &t;
            const void *first = w;
            for (int r = 0; r < reps; r++) {
                double t0 = now();
                for (size_t c = 0; c < copies; c++) {
                    const void *packed = w + c * stride;
                    cpu_matmul_multi(pool, 1, &wp, &packed, NULL, x, 1, &y, scratch, 0);
                }
                double t1 = now();
                cpu_threadpool_run(pool, 64, read_task, &rj);
                double t2 = now();
                for (int c = 0; c < 64; c++)
                    cpu_matmul_multi(pool, 1, &wp, &first, NULL, x, 1, &y, scratch, 0);
                double t3 = now();
                double g1 = (double)copies * (double)pb / (t1 - t0) * 1e-9,
                       g2 = (double)rj.bytes / (t2 - t1) * 1e-9,
                       g3 = 64.0 * (double)pb / (t3 - t2) * 1e-9;
                if (g1 > dec) dec = g1;
                if (g2 > rd) rd = g2;
                if (g3 > hot) hot = g3;
            }
            printf("| %s | %lld x %lld | %.1f | %.1f | %.2f | %.1f |\n", names[d], (long long)n_in,
                   (long long)n_out, dec, rd, dec / rd, hot);
            free(raw);
            free(w);
            free(x);
            free(y);
            free(scratch);
        }
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
    cpu_threadpool *pool;
    if (cpu_threadpool_create(threads, &pool) != DI_OK) return 1;
    const struct {
        int64_t n_in, n_out;
    } shapes[] = {{576, 49152}, {576, 1536}, {1536, 576}};
    const model_dtype types[] = {MODEL_DTYPE_F16, MODEL_DTYPE_BF16, MODEL_DTYPE_F32};
    printf("kernels: %s%s; %d threads\n", cpu_kernels_name(),
           cpu_has_avx512f() ? " + avx512f float tiles" : "", threads);
    printf("| dtype | n_in x n_out | decode GB/s | read GB/s | prefill 512 GFLOP/s | decode / "
           "read |\n|---|---|---|---|---|---|\n");
    for (size_t d = 0; d < sizeof types / sizeof types[0]; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t n_in = shapes[s].n_in, n_out = shapes[s].n_out, nt = 512;
            size_t wb = cpu_row_bytes((int)types[d], n_in) * (size_t)n_out;
            /* decode walks copies of the matrix totalling 128 MB or more, so its
             * weights come from memory, as in a model's decode */
            size_t stride = (wb + 4095) / 4096 * 4096, copies = ((size_t)128 << 20) / stride + 1;
            char *w = aligned_alloc(4096, stride * copies);
            float *x = malloc(sizeof(float) * (size_t)(n_in * nt));
            float *y = malloc(sizeof(float) * (size_t)(n_out * nt));
            void *scratch = malloc(cpu_matmul_scratch_bytes(types[d], n_in, nt));
            if (!w || !x || !y || !scratch) return 1;
            for (size_t i = 0; types[d] == MODEL_DTYPE_F32 && i < stride * copies / 4; i++)
                ((float *)w)[i] = frand();
            for (size_t i = 0; types[d] != MODEL_DTYPE_F32 && i < stride * copies / 2; i++) {
                uint16_t h = types[d] == MODEL_DTYPE_BF16 ? cpu_f32_to_bf16(frand())
                                                          : cpu_f32_to_fp16(frand());
                memcpy(w + 2 * i, &h, 2);
            }
            for (int64_t i = 0; i < n_in * nt; i++) x[i] = frand();
            model_tensor t = {.dtype = types[d], .data = w, .ne = {n_in, n_out}};
            model_tensor tc[64];
            size_t nc = copies < 64 ? copies : 64;
            for (size_t c = 0; c < nc; c++) {
                tc[c] = t;
                tc[c].data = w + c * (stride * copies / nc / 4096 * 4096);
            }
            double dec = 0, pre = 0, rd = 0;
            read_job rj = {.p = w, .bytes = stride * copies};
            for (int r = 0; r < reps; r++) {
                double t0 = now();
                for (size_t c = 0; c < nc; c++) cpu_matmul(pool, &tc[c], NULL, x, 1, y, scratch, 0);
                double t1 = now();
                cpu_threadpool_run(pool, 64, read_task, &rj);
                double t2 = now();
                cpu_matmul(pool, &t, NULL, x, nt, y, scratch, 0);
                double t3 = now();
                double g1 = (double)nc * (double)wb / (t1 - t0) * 1e-9,
                       g2 = (double)rj.bytes / (t2 - t1) * 1e-9;
                double f = 2.0 * (double)n_in * (double)n_out * (double)nt / (t3 - t2) * 1e-9;
                if (g1 > dec) dec = g1;
                if (g2 > rd) rd = g2;
                if (f > pre) pre = f;
            }
            printf("| %s | %lld x %lld | %.1f | %.1f | %.1f | %.2f |\n",
                   types[d] == MODEL_DTYPE_F16    ? "F16"
                   : types[d] == MODEL_DTYPE_BF16 ? "BF16"
                                                  : "F32",
                   (long long)n_in, (long long)n_out, dec, rd, pre, dec / rd);
            free(w);
            free(x);
            free(y);
            free(scratch);
        }
    packed_table(pool, reps);
    cpu_threadpool_free(pool);
    return 0;
}
