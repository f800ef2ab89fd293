/* The routed-expert product alone (cpu_moe_experts) at DeepSeek-V2-Lite's shape
 * as llama.cpp's Q4_K_M makes it: 64 experts of 2048 -> 1408 -> 2048, top-6,
 * gate and up Q4_K, down Q5_0 (its rows of 1408 are not whole Q4_K blocks).
 * One layer, random weights and routing (the time does not depend on the
 * values), the same tokens each way:
 *   rows    each expert's matrices through the row-at-a-time kernels (what
 *           the experts ran before they read the packed copies);
 *   packed  through the interleaved copies the dense products read
 *           (matmul_packed.h).
 * Tokens/s of the best of `reps` wall times for a step of n tokens: 1 (one
 * decoding request), 8 (eight at once), 64 and 512 (prefill chunks).
 *
 *     moe_bench [threads (2)] [reps (5)]
 * Ratio last: packed / rows. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/bench_clock.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

enum { N_EXPERT = 64, K = 6, E = 2048, F = 1408, MAX_TOKENS = 512 };

static unsigned rng = 12345u;
static unsigned rnd(void)
{
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}
static float frand(void)
{
    return (float)(rnd() & 0xffff) / 65536.0f - 0.5f;
}

/* rows x n random weights of dt (Q4_K or Q5_0): random quants, small scales. */
static void *random_weights(model_dtype dt, int64_t rows, int64_t n)
{
    size_t bytes = cpu_row_bytes((int)dt, n) * (size_t)rows, bb = cpu_dtype_block_bytes((int)dt);
    uint8_t *w = malloc(bytes);
    if (!w) return NULL;
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    for (size_t b = 0; b < bytes / bb; b++) {
        uint16_t d = cpu_f32_to_fp16(frand() * 0.01f), m = cpu_f32_to_fp16(frand() * 0.01f);
        memcpy(w + b * bb, &d, 2);
        if (dt == MODEL_DTYPE_Q4_K) memcpy(w + b * bb + 2, &m, 2);
    }
    return w;
}

static double rate(cpu_threadpool *pool, const cpu_expert_matrix *m, const float *x, int64_t n,
                   const int32_t *sel, const float *wt, float *out, const cpu_moe_scratch *s,
                   int reps)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        cpu_moe_experts(pool, N_EXPERT, m, m + N_EXPERT, m + 2 * N_EXPERT, x, n, sel, wt, K, out, 0,
                        s, 0, 0.0f);
        double tps = (double)n / (now() - t0);
        best = tps > best ? tps : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "usage: moe_bench [threads] [reps]\n");
        return 2;
    }
    cpu_threadpool *pool = NULL;
    if (threads > 1 && cpu_threadpool_create(threads, &pool) != DI_OK) return 1;
    static model_tensor t[3 * N_EXPERT];
    static cpu_expert_matrix rows[3 * N_EXPERT], packed[3 * N_EXPERT];
    for (int p = 0; p < 3; p++)
        for (int e = 0; e < N_EXPERT; e++) {
            int i = p * N_EXPERT + e;
            model_dtype dt = p == 2 ? MODEL_DTYPE_Q5_0 : MODEL_DTYPE_Q4_K;
            int64_t n_in = p == 2 ? F : E, n_out = p == 2 ? E : F;
            t[i] = (model_tensor){
                .name = "expert", .dtype = dt, .n_dims = 2, .ne = {n_in, n_out, 1, 1}};
            t[i].data = random_weights(dt, n_out, n_in);
            void *pk = cpu_pack_supported(&t[i]) ? malloc(cpu_pack_bytes(&t[i])) : NULL;
            if (!t[i].data || (cpu_pack_supported(&t[i]) && !pk)) return 1;
            if (pk) cpu_pack(&t[i], pk);
            rows[i] = (cpu_expert_matrix){&t[i], NULL};
            packed[i] = (cpu_expert_matrix){&t[i], pk};
        }
    if (!packed[0].packed) {
        fprintf(stderr, "moe_bench: this CPU has no packed kernels (AVX2)\n");
        return 1;
    }
    size_t act = cpu_matmul_scratch_bytes(MODEL_DTYPE_Q4_K, E, MAX_TOKENS),
           act2 = cpu_matmul_scratch_bytes(MODEL_DTYPE_Q5_0, F, MAX_TOKENS);
    cpu_moe_scratch s = {malloc(sizeof(float) * MAX_TOKENS * E),
                         malloc(sizeof(float) * MAX_TOKENS * E),
                         malloc(sizeof(float) * MAX_TOKENS * F),
                         malloc(sizeof(float) * MAX_TOKENS * F), malloc(act > act2 ? act : act2)};
    float *x = malloc(sizeof(float) * MAX_TOKENS * E),
          *out = malloc(sizeof(float) * MAX_TOKENS * E);
    float *wt = malloc(sizeof(float) * MAX_TOKENS * K);
    int32_t *sel = malloc(sizeof(int32_t) * MAX_TOKENS * K);
    if (!s.xe || !s.ye || !s.gate || !s.up || !s.act || !x || !out || !wt || !sel) return 1;
    for (int64_t i = 0; i < (int64_t)MAX_TOKENS * E; i++) x[i] = frand();
    for (int64_t t0 = 0; t0 < MAX_TOKENS; t0++) { /* K distinct experts a token */
        unsigned char taken[N_EXPERT] = {0};
        for (int k = 0; k < K; k++) {
            int e = (int)(rnd() % N_EXPERT);
            while (taken[e]) e = (e + 1) % N_EXPERT;
            taken[e] = 1;
            sel[t0 * K + k] = e;
            wt[t0 * K + k] = 1.0f / K;
        }
    }
    printf("routed experts, DeepSeek-V2-Lite shape (64 x %d -> %d -> %d, top-%d, Q4_K/Q5_0), "
           "%d thread(s), best of %d; kernels: %s\n",
           E, F, E, K, threads, reps, cpu_has_avx512_vnni() ? "avx512-vnni" : "avx2");
    printf("| tokens | rows (tok/s) | packed (tok/s) | packed / rows |\n|---|---|---|---|\n");
    const int64_t steps[] = {1, 8, 64, 512};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int64_t n = steps[i];
        double a = 0, b = 0;
        for (int round = 0; round < 2; round++) { /* alternated: the machine's drift in both */
            double ra = rate(pool, rows, x, n, sel, wt, out, &s, reps);
            double rb = rate(pool, packed, x, n, sel, wt, out, &s, reps);
            a = ra > a ? ra : a;
            b = rb > b ? rb : b;
        }
        printf("| %lld | %.1f | %.1f | %.2f |\n", (long long)n, a, b, b / a);
    }
    for (int i = 0; i < 3 * N_EXPERT; i++) {
        free((void *)t[i].data);
        free((void *)packed[i].packed);
    }
    free(s.xe);
    free(s.ye);
    free(s.gate);
    free(s.up);
    free(s.act);
    free(x);
    free(out);
    free(wt);
    free(sel);
    cpu_threadpool_free(pool);
    return 0;
}
