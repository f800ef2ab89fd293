/* MLA attention (the absorbed form, cpu_mla_attention) at DeepSeek-V2-Lite's
 * shape over a short and a long context: the CPU-kernel issue's long-prompt
 * goal for MLA (tokens/s at 4,096 keys within 25 % of that at 256).
 *
 * Random f32 latents and weights (the op's time does not depend on their
 * values): decode (one token at position n - 1) and a prefill block (16
 * tokens at positions n - 16 .. n - 1), best of --reps, wall and CPU time.
 * The op alone, without the model around it: a layer's attention.
 *
 *     mla_attention_bench [threads (2)] [contexts (256,4096)] [reps (5)]
 * Ratios last: long / short tokens/s, decode and prefill. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/bench_clock.h"
#include "backend/cpu/attention_mla.h"

enum { H = 16, NOPE = 128, ROPE = 64, V = 128, R = 512, D = R + ROPE, QD = NOPE + ROPE };

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

/* Best tokens/s of n_tokens tokens ending at position ctx - 1. */
static double rate(cpu_threadpool *pool, const cpu_mla_shape *sh, const float *q, const float *kv,
                   const float *w, float *out, float *scratch, int64_t ctx, int64_t n_tokens,
                   int reps)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        cpu_mla_attention(pool, sh, q, n_tokens, ctx - n_tokens, kv, w, 0.1f, out, scratch, ctx);
        double t = now() - t0, tps = (double)n_tokens / t;
        best = tps > best ? tps : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 3 ? atoi(argv[3]) : 5;
    const char *list = argc > 2 ? argv[2] : "256,4096";
    int64_t ctxs[8];
    int n_ctx = 0;
    for (const char *p = list; *p && n_ctx < 8; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
        ctxs[n_ctx++] = atoll(p);
    if (threads < 1 || reps < 1 || n_ctx < 1) {
        fprintf(stderr, "usage: mla_attention_bench [threads] [contexts,..] [reps]\n");
        return 2;
    }
    int64_t max_ctx = 0;
    for (int i = 0; i < n_ctx; i++) max_ctx = ctxs[i] > max_ctx ? ctxs[i] : max_ctx;
    const cpu_mla_shape sh = {H, NOPE, ROPE, V, R};
    unsigned seed = 1;
    float *w = malloc(sizeof(float) * H * (NOPE + V) * R), *q = malloc(sizeof(float) * 16 * H * QD);
    float *kv = malloc(sizeof(float) * (size_t)max_ctx * D),
          *out = malloc(sizeof(float) * 16 * H * V);
    const int64_t sf = cpu_mla_scratch_floats(&sh, max_ctx);
    float *scratch = malloc(sizeof(float) * (size_t)(threads * sf));
    cpu_threadpool *pool = NULL;
    if (!w || !q || !kv || !out || !scratch || cpu_threadpool_create(threads, &pool) != DI_OK) {
        fprintf(stderr, "mla_attention_bench: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < (int64_t)H * (NOPE + V) * R; i++) w[i] = frand(&seed) * 0.1f;
    for (int64_t i = 0; i < 16 * H * QD; i++) q[i] = frand(&seed);
    for (int64_t i = 0; i < max_ctx * D; i++) kv[i] = frand(&seed);
    double dec[8], pre[8];
    printf("MLA absorbed, DeepSeek-V2-Lite shape (16 heads, latent 512 + rope 64), %d threads\n",
           threads);
    for (int i = 0; i < n_ctx; i++) {
        dec[i] = rate(pool, &sh, q, kv, w, out, scratch, ctxs[i], 1, reps);
        pre[i] = rate(pool, &sh, q, kv, w, out, scratch, ctxs[i], 16, reps);
        printf("context %6lld: decode %8.1f tok/s, prefill block %8.1f tok/s\n", (long long)ctxs[i],
               dec[i], pre[i]);
    }
    printf("ratio at %lld / at %lld: decode %.3f, prefill %.3f (goal >= 0.75 for the model)\n",
           (long long)ctxs[n_ctx - 1], (long long)ctxs[0], dec[n_ctx - 1] / dec[0],
           pre[n_ctx - 1] / pre[0]);
    cpu_threadpool_free(pool);
    free(w), free(q), free(kv), free(out), free(scratch);
    return 0;
}
