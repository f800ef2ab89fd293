/* The attention ops alone over a short and a long context (the CPU-kernel
 * issue's long-prompt goal: tokens/s at 4,096 keys within 25 % of that at 256):
 *   GQA  cpu_attention at SmolLM2-135M's shape (9 query heads, 3 KV heads of
 *        64, a paged cache of 30 layers, each call the next layer, so the
 *        cache is read from memory as in the model), with the cache in f16,
 *        Q8_0 and Q4_0 (kv_cache_type) one after another;
 *   MLA  cpu_mla_attention (absorbed) at DeepSeek-V2-Lite's (16 heads, latent
 *        512 + rope 64, one layer's f32 latents).
 * Random values (the ops' time does not depend on them): decode (one token at
 * position n - 1), a prefill block (16 tokens at n - 16 .. n - 1) and a whole
 * prompt (n tokens from position 0), tokens/s of the best of `reps` wall
 * times; each with the AVX-512 row-per-lane tiles where the CPU has them and
 * with the AVX2 step (cpu_attention_avx2_only), interleaved (the outputs are
 * bit-identical), the ratio beside.
 *
 *     attention_bench [threads (2)] [contexts (256,4096)] [reps (5)]
 *                     [ops (f16,q8_0,q4_0,mla): GQA's caches, MLA]
 *                     [steps (decode,block,whole); the others print 0]
 *                     [GQA shape layers:heads:kv_heads:head_dim (30:9:3:64);
 *                      the 7B-like 6:16:2:128, Llama-3-8B's 32:32:8:128]
 * Ratios last: long / short, decode and prefill, per op. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/bench_clock.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/attention_mla.h"
#include "backend/cpu/quant.h"

enum { H = 16, NOPE = 128, ROPE = 64, V = 128, R = 512, D = R + ROPE, QD = NOPE + ROPE };

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

/* Best tokens/s of n_tokens tokens ending at position ctx - 1. */
static double mla_rate(cpu_threadpool *pool, const cpu_mla_shape *sh, const float *q,
                       const float *kv, const float *w, float *out, float *scratch, int64_t ctx,
                       int64_t n_tokens, int reps)
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

/* One context's best rates, [0] with the AVX-512 tiles where they run, [1]
 * with the AVX2 step. */
typedef struct rates {
    double dec[2], pre[2], whole[2];
} rates;

static void record(rates *r, int w, double dec, double pre, double whole)
{
    r->dec[w] = dec > r->dec[w] ? dec : r->dec[w];
    r->pre[w] = pre > r->pre[w] ? pre : r->pre[w];
    r->whole[w] = whole > r->whole[w] ? whole : r->whole[w];
}

/* a / b, or 0 where b is (a step not timed). */
static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0;
}

static void print_rates(int64_t ctx, const rates *r)
{
    printf("context %6lld: decode %8.1f tok/s (avx2 %8.1f: %.2fx), prefill block of 16 %8.1f "
           "(avx2 %8.1f: %.2fx), whole prompt %8.1f (avx2 %8.1f: %.2fx)\n",
           (long long)ctx, r->dec[0], r->dec[1], ratio(r->dec[0], r->dec[1]), r->pre[0], r->pre[1],
           ratio(r->pre[0], r->pre[1]), r->whole[0], r->whole[1], ratio(r->whole[0], r->whole[1]));
}

static void print_ratio(const char *op, const int64_t *ctxs, int n_ctx, const rates *r)
{
    const rates *a = &r[n_ctx - 1], *b = &r[0];
    printf("%s ratio at %lld / at %lld: decode %.3f, prefill block %.3f, whole prompt %.3f\n", op,
           (long long)ctxs[n_ctx - 1], (long long)ctxs[0], ratio(a->dec[0], b->dec[0]),
           ratio(a->pre[0], b->pre[0]), ratio(a->whole[0], b->whole[0]));
}

/* Which of the three each table times (the fifth argument; the others
 * print 0). */
static int run_decode = 1, run_block = 1, run_whole = 1;

/* The GQA shape (the sixth argument; SmolLM2-135M's by default). */
static struct {
    int layers, heads, kv, hd;
} gqa_shape = {30, 9, 3, 64};

enum { GQA_BLOCK = 16 };

/* GQA: best tokens/s of n_tokens tokens ending at ctx - 1, layer after layer. */
static double gqa_rate(cpu_threadpool *pool, const cpu_kv_cache *c, const cpu_kv_seq *s,
                       const float *q, float *out, float *scratch, int64_t max_ctx, int64_t ctx,
                       int64_t n_tokens, int reps)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        for (int l = 0; l < gqa_shape.layers; l++)
            cpu_attention(pool, c, s, l, q, gqa_shape.heads, ctx - n_tokens, n_tokens, 0.125f, out,
                          scratch, max_ctx, 0);
        double tps = (double)n_tokens / (now() - t0); /* through all the layers */
        best = tps > best ? tps : best;
    }
    return best;
}

/* The GQA table; 0 on success. */
static int gqa(cpu_threadpool *pool, int threads, const int64_t *ctxs, int n_ctx, int64_t max_ctx,
               int reps, model_dtype dtype, const char *name)
{
    cpu_kv_cache c;
    const int64_t kvw = (int64_t)gqa_shape.kv * gqa_shape.hd,
                  qw = (int64_t)gqa_shape.heads * gqa_shape.hd;
    const int32_t n_blocks = (int32_t)((max_ctx + GQA_BLOCK - 1) / GQA_BLOCK);
    if (cpu_kv_cache_init(&c, dtype, gqa_shape.layers, gqa_shape.kv, gqa_shape.hd, GQA_BLOCK,
                          n_blocks) != DI_OK)
        return 1;
    int32_t *table = malloc(sizeof(int32_t) * (size_t)n_blocks);
    float *kv = malloc(sizeof(float) * (size_t)(max_ctx * kvw));
    float *q = malloc(sizeof(float) * (size_t)(max_ctx * qw));
    float *out = malloc(sizeof(float) * (size_t)(max_ctx * qw));
    float *scratch = malloc(sizeof(float) * (size_t)threads * (size_t)max_ctx * 4);
    if (!table || !kv || !q || !out || !scratch) return 1;
    for (int32_t b = 0; b < n_blocks; b++) table[b] = b;
    cpu_kv_seq s = {table, n_blocks, n_blocks, max_ctx, 0};
    unsigned seed = 7;
    for (int64_t i = 0; i < max_ctx * kvw; i++) kv[i] = frand(&seed);
    for (int64_t i = 0; i < max_ctx * qw; i++) q[i] = frand(&seed);
    for (int l = 0; l < gqa_shape.layers; l++) cpu_kv_store(&c, &s, l, 0, max_ctx, kv, kv);
    rates r[8];
    memset(r, 0, sizeof r);
    printf("GQA, %d heads, %d KV heads of %d, %s cache: %zu bytes a token, %d layers, %d "
           "threads; the flash path's chunk step with AVX-512 (where this CPU has it) and with "
           "AVX2, interleaved (bit-identical results)\n",
           gqa_shape.heads, gqa_shape.kv, gqa_shape.hd, name, cpu_kv_cache_bytes_per_token(&c),
           gqa_shape.layers, threads);
    for (int i = 0; i < n_ctx; i++) {
        for (int rep = 0; rep < reps; rep++)
            for (int w = 0; w < 2; w++) {
                cpu_attention_avx2_only = w;
                record(&r[i], w,
                       run_decode ? gqa_rate(pool, &c, &s, q, out, scratch, max_ctx, ctxs[i], 1, 1)
                                  : 0,
                       run_block ? gqa_rate(pool, &c, &s, q, out, scratch, max_ctx, ctxs[i], 16, 1)
                                 : 0,
                       run_whole
                           ? gqa_rate(pool, &c, &s, q, out, scratch, max_ctx, ctxs[i], ctxs[i], 1)
                           : 0);
            }
        cpu_attention_avx2_only = 0;
        print_rates(ctxs[i], &r[i]);
    }
    char op[32];
    snprintf(op, sizeof op, "GQA %s", name);
    print_ratio(op, ctxs, n_ctx, r);
    cpu_kv_cache_free(&c);
    free(table), free(kv), free(q), free(out), free(scratch);
    return 0;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 3 ? atoi(argv[3]) : 5;
    const char *list = argc > 2 ? argv[2] : "256,4096";
    int64_t ctxs[8];
    int n_ctx = 0;
    for (const char *p = list; *p; n_ctx++) { /* each at least a prefill block's 16 */
        char *e;
        const long long n = strtoll(p, &e, 10);
        if (n_ctx == 8 || e == p || (*e != ',' && *e != '\0') || n < 16) {
            fprintf(stderr,
                    "attention_bench: contexts '%s': expected up to 8 numbers of 16 or "
                    "more, comma-separated\n",
                    list);
            return 2;
        }
        ctxs[n_ctx] = n;
        p = *e ? e + 1 : e;
    }
    int end = 0;
    if (argc > 6 &&
        (sscanf(argv[6], "%d:%d:%d:%d%n", &gqa_shape.layers, &gqa_shape.heads, &gqa_shape.kv,
                &gqa_shape.hd, &end) != 4 ||
         argv[6][end] != '\0' || gqa_shape.layers < 1 || gqa_shape.kv < 1 ||
         gqa_shape.heads < gqa_shape.kv || gqa_shape.heads % gqa_shape.kv != 0 ||
         gqa_shape.hd < 8 || gqa_shape.hd % 8 != 0 || gqa_shape.hd > CPU_ATTENTION_MAX_HEAD_DIM)) {
        fprintf(stderr,
                "attention_bench: shape '%s': expected layers:heads:kv_heads:head_dim, heads a "
                "multiple of kv_heads, head_dim a multiple of 8 up to %d (Q8_0 and Q4_0 caches: "
                "of 32)\n",
                argv[6], (int)CPU_ATTENTION_MAX_HEAD_DIM);
        return 2;
    }
    if (threads < 1 || reps < 1 || n_ctx < 1) {
        fprintf(stderr, "usage: attention_bench [threads] [contexts,..] [reps] [ops,..] "
                        "[steps,..] [layers:heads:kv_heads:head_dim]\n");
        return 2;
    }
    int64_t max_ctx = 0;
    for (int i = 0; i < n_ctx; i++) max_ctx = ctxs[i] > max_ctx ? ctxs[i] : max_ctx;
    const cpu_mla_shape sh = {H, NOPE, ROPE, V, R};
    unsigned seed = 1;
    float *w = malloc(sizeof(float) * H * (NOPE + V) * R),
          *q = malloc(sizeof(float) * (size_t)max_ctx * H * QD);
    float *kv = malloc(sizeof(float) * (size_t)max_ctx * D),
          *out = malloc(sizeof(float) * (size_t)max_ctx * H * V);
    float *scratch = malloc(sizeof(float) * (size_t)cpu_mla_scratch_floats(&sh, max_ctx, threads));
    cpu_threadpool *pool = NULL;
    if (!w || !q || !kv || !out || !scratch || cpu_threadpool_create(threads, &pool) != DI_OK) {
        fprintf(stderr, "attention_bench: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < (int64_t)H * (NOPE + V) * R; i++) w[i] = frand(&seed) * 0.1f;
    for (int64_t i = 0; i < max_ctx * H * QD; i++) q[i] = frand(&seed);
    for (int64_t i = 0; i < max_ctx * D; i++) kv[i] = frand(&seed);
    const char *types = argc > 4 ? argv[4] : "f16,q8_0,q4_0,mla";
    if (argc > 5) {
        run_decode = strstr(argv[5], "decode") != NULL;
        run_block = strstr(argv[5], "block") != NULL;
        run_whole = strstr(argv[5], "whole") != NULL;
    }
    static const struct {
        const char *name;
        model_dtype dtype;
    } caches[] = {{"f16", MODEL_DTYPE_F16}, {"q8_0", MODEL_DTYPE_Q8_0}, {"q4_0", MODEL_DTYPE_Q4_0}};
    for (size_t i = 0; i < sizeof caches / sizeof caches[0]; i++) {
        if (!strstr(types, caches[i].name)) continue;
        if (gqa(pool, threads, ctxs, n_ctx, max_ctx, reps, caches[i].dtype, caches[i].name) != 0) {
            fprintf(stderr,
                    "attention_bench: a %s cache of %d layers, %d KV heads of %d refused (Q8_0 "
                    "and Q4_0: head_dim a multiple of 32), or out of memory\n",
                    caches[i].name, gqa_shape.layers, gqa_shape.kv, gqa_shape.hd);
            return 1;
        }
    }
    if (!strstr(types, "mla")) {
        cpu_threadpool_free(pool);
        free(w), free(q), free(kv), free(out), free(scratch);
        return 0;
    }
    rates r[8];
    memset(r, 0, sizeof r);
    printf("MLA absorbed, DeepSeek-V2-Lite shape (16 heads, latent 512 + rope 64), %d threads; "
           "the latent tiles with AVX-512 (where this CPU has it) and with AVX2, interleaved "
           "(bit-identical results)\n",
           threads);
    for (int i = 0; i < n_ctx; i++) {
        for (int rep = 0; rep < reps; rep++)
            for (int v = 0; v < 2; v++) {
                cpu_attention_avx2_only = v;
                record(&r[i], v,
                       run_decode ? mla_rate(pool, &sh, q, kv, w, out, scratch, ctxs[i], 1, 1) : 0,
                       run_block ? mla_rate(pool, &sh, q, kv, w, out, scratch, ctxs[i], 16, 1) : 0,
                       run_whole ? mla_rate(pool, &sh, q, kv, w, out, scratch, ctxs[i], ctxs[i], 1)
                                 : 0);
            }
        cpu_attention_avx2_only = 0;
        print_rates(ctxs[i], &r[i]);
    }
    print_ratio("MLA", ctxs, n_ctx, r);
    cpu_threadpool_free(pool);
    free(w), free(q), free(kv), free(out), free(scratch);
    return 0;
}
