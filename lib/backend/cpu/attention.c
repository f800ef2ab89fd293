/* Causal GQA attention over the paged KV cache (attention.h): scores, a
 * softmax in f32 with the max subtracted and the sum in double, then the
 * weighted sum of the values. The K dot products and V accumulation have
 * F16C/AVX2 versions next to the scalar reference. */
#include "backend/cpu/attention.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

typedef float (*dot_kv_fn)(int n, const float *q, const void *k);
typedef void (*axpy_kv_fn)(int n, float a, const void *v, float *y);

static float dot_f32_ref(int n, const float *q, const void *k)
{
    const float *kk = k;
    float s = 0;
    for (int i = 0; i < n; i++) s += q[i] * kk[i];
    return s;
}

/* The f16 cache's products as llama.cpp's CPU backend sums them in its
 * portable x86-64 build (AVX2, F16C, FMA: the build the llama.cpp oracle runs
 * on every machine, scripts/oracle-venv.sh): its f16 GEMM, tinyBLAS, keeps
 * LANES = 8 accumulators (one __m256): element i goes to lane i % 8, lanes
 * accumulate in order, then halve 8 -> 4 -> 2 -> 1 (its hsum). Every f16 x f16
 * product is exact in f32, so this order makes the sums identical. (Its AVX-512
 * build keeps 16 lanes, and sums differently.) */
enum { LANES = 8 };

static float reduce_lanes(float *l)
{
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) l[i] += l[i + w];
    return l[0];
}

static float dot_f16_ref(int n, const float *q, const void *k)
{
    const uint16_t *kk = k;
    float lanes[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) lanes[l] += q[i + l] * cpu_fp16_to_f32(kk[i + l]);
    float s = reduce_lanes(lanes);
    for (; i < n; i++) s += q[i] * cpu_fp16_to_f32(kk[i]);
    return s;
}

static void axpy_f32_ref(int n, float a, const void *v, float *y)
{
    const float *vv = v;
    for (int i = 0; i < n; i++) y[i] += a * vv[i];
}

static void axpy_f16_ref(int n, float a, const void *v, float *y)
{
    const uint16_t *vv = v;
    for (int i = 0; i < n; i++) y[i] += a * cpu_fp16_to_f32(vv[i]);
}

/* The Q8_0 and Q4_0 caches' rows dequantized exactly to f32 (n <=
 * CPU_ATTENTION_MAX_HEAD_DIM), then the f32 products. */
static float dot_q8_0_ref(int n, const float *q, const void *k)
{
    float kk[CPU_ATTENTION_MAX_HEAD_DIM];
    cpu_dequantize_row(MODEL_DTYPE_Q8_0, k, kk, n);
    return dot_f32_ref(n, q, kk);
}

static float dot_q4_0_ref(int n, const float *q, const void *k)
{
    float kk[CPU_ATTENTION_MAX_HEAD_DIM];
    cpu_dequantize_row(MODEL_DTYPE_Q4_0, k, kk, n);
    return dot_f32_ref(n, q, kk);
}

static void axpy_q8_0_ref(int n, float a, const void *v, float *y)
{
    float vv[CPU_ATTENTION_MAX_HEAD_DIM];
    cpu_dequantize_row(MODEL_DTYPE_Q8_0, v, vv, n);
    axpy_f32_ref(n, a, vv, y);
}

static void axpy_q4_0_ref(int n, float a, const void *v, float *y)
{
    float vv[CPU_ATTENTION_MAX_HEAD_DIM];
    cpu_dequantize_row(MODEL_DTYPE_Q4_0, v, vv, n);
    axpy_f32_ref(n, a, vv, y);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <immintrin.h>
#    define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* dot_f16_ref's lane order: the 8 lanes in one register, then the same
 * halving tree (hsum8 halves 8 -> 4 -> 2 -> 1). */
AVX2 static float dot_f16_avx2(int n, const float *q, const void *k)
{
    const uint16_t *kk = k;
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i),
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kk + i))), acc);
    float s = hsum8(acc);
    for (; i < n; i++) s += q[i] * cpu_fp16_to_f32(kk[i]);
    return s;
}

AVX2 static float dot_f32_avx2(int n, const float *q, const void *k)
{
    const float *kk = k;
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kk + i), acc);
    float s = hsum8(acc);
    for (; i < n; i++) s += q[i] * kk[i];
    return s;
}

AVX2 static void axpy_f16_avx2(int n, float a, const void *v, float *y)
{
    const uint16_t *vv = v;
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            y + i, _mm256_fmadd_ps(va, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vv + i))),
                                   _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * cpu_fp16_to_f32(vv[i]);
}

AVX2 static void axpy_f32_avx2(int n, float a, const void *v, float *y)
{
    const float *vv = v;
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(vv + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * vv[i];
}
#endif

/* Softmax as llama.cpp's portable build sums it: exponentials in chunks of
 * LANES positions, each chunk's sum in f32 by the halving tree, the chunk sums
 * in double (the last chunk padded with the zeros of its masked positions). */
static void softmax_ggml(float *x, int64_t n)
{
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0;
    for (int64_t i = 0; i < n; i += LANES) {
        float lanes[LANES] = {0};
        for (int64_t l = 0; l < LANES && i + l < n; l++) lanes[l] = x[i + l] = expf(x[i + l] - max);
        sum += (double)reduce_lanes(lanes);
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* The first row of block bi of the sequence in layer l, in the K or V pool. */
static const char *kv_block(const cpu_kv_cache *c, const void *pool, const cpu_kv_seq *s, int l,
                            int64_t bi)
{
    return (const char *)pool + cpu_kv_block_offset(c, l, s->block_table[bi]);
}

typedef struct attn_job {
    const cpu_kv_cache *c;
    const cpu_kv_seq *s;
    int layer, n_head, group, f16;
    const float *q;
    int64_t pos0;
    float scale;
    float *out, *scratch;
    int64_t scratch_ctx;
    dot_kv_fn dot;
    axpy_kv_fn axpy;
} attn_job;

static void attn_task(void *ctx, int64_t task, int thread)
{
    const attn_job *j = ctx;
    const cpu_kv_cache *c = j->c;
    int hd = c->head_dim;
    int64_t t = task / j->n_head;
    int h = (int)(task % j->n_head), g = h / j->group;
    int64_t n = j->pos0 + t + 1;
    const float *q = j->q + (t * j->n_head + h) * hd;
    float *sc = j->scratch + (int64_t)thread * j->scratch_ctx;
    float q16[CPU_ATTENTION_MAX_HEAD_DIM];
    if (c->rotated) { /* q H . k H = q . k (kv_cache.h) */
        memcpy(q16, q, (size_t)hd * sizeof *q);
        cpu_kv_rotate(q16, hd);
        q = q16;
    }
    if (j->f16) { /* llama.cpp multiplies an f16 cache with q rounded to f16 */
        for (int i = 0; i < hd; i++) q16[i] = cpu_fp16_to_f32(cpu_f32_to_fp16(q[i]));
        q = q16;
    }
    size_t goff = (size_t)g * c->head_bytes;
    const size_t row = c->row_bytes;
    const int64_t bs = c->block_size;
    /* walk the block table block by block (no division per position) */
    for (int64_t p0 = 0, bi = 0; p0 < n; p0 += bs, bi++) {
        const char *k = kv_block(c, c->k, j->s, j->layer, bi) + goff;
        for (int64_t p = p0; p < p0 + bs && p < n; p++, k += row)
            sc[p] = j->dot(hd, q, k) * j->scale;
    }
    if (j->f16)
        softmax_ggml(sc, n);
    else
        cpu_softmax(sc, n);
    if (j->f16) /* ... and the probabilities rounded to f16 with the f16 V */
        for (int64_t p = 0; p < n; p++) sc[p] = cpu_fp16_to_f32(cpu_f32_to_fp16(sc[p]));
    float *o = j->out + (t * j->n_head + h) * hd;
    if (!j->f16) {
        memset(o, 0, (size_t)hd * sizeof *o);
        for (int64_t p0 = 0, bi = 0; p0 < n; p0 += bs, bi++) {
            const char *v = kv_block(c, c->v, j->s, j->layer, bi) + goff;
            for (int64_t p = p0; p < p0 + bs && p < n; p++, v += row) j->axpy(hd, sc[p], v, o);
        }
        if (c->rotated) cpu_kv_rotate(o, hd); /* a sum of rotated values, rotated back */
        return;
    }
    /* f16: position p accumulates into lane p % LANES, then the lanes halve */
    float acc[LANES * CPU_ATTENTION_MAX_HEAD_DIM];
    int n_lanes = n < LANES ? (int)n : LANES;
    memset(acc, 0, (size_t)n_lanes * (size_t)hd * sizeof *acc);
    for (int64_t p0 = 0, bi = 0; p0 < n; p0 += bs, bi++) {
        const char *v = kv_block(c, c->v, j->s, j->layer, bi) + goff;
        for (int64_t p = p0; p < p0 + bs && p < n; p++, v += row)
            j->axpy(hd, sc[p], v, acc + (p % LANES) * hd);
    }
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w && l + w < n_lanes; l++)
            for (int i = 0; i < hd; i++) acc[l * hd + i] += acc[(l + w) * hd + i];
    memcpy(o, acc, (size_t)hd * sizeof *o);
}

void cpu_attention(cpu_threadpool *pool, const cpu_kv_cache *c, const cpu_kv_seq *s, int layer,
                   const float *q, int n_head, int64_t pos0, int64_t n_tokens, float scale,
                   float *out, float *scratch, int64_t scratch_ctx, int use_ref)
{
    if (!use_ref && cpu_attention_flash(pool, c, s, layer, q, n_head, pos0, n_tokens, scale, out))
        return;
    int f16 = c->dtype == MODEL_DTYPE_F16;
    attn_job j = {
        .c = c,
        .s = s,
        .layer = layer,
        .n_head = n_head,
        .group = n_head / c->n_head_kv,
        .f16 = f16,
        .q = q,
        .pos0 = pos0,
        .scale = scale,
        .out = out,
        .scratch = scratch,
        .scratch_ctx = scratch_ctx,
        .dot = f16 ? dot_f16_ref : dot_f32_ref,
        .axpy = f16 ? axpy_f16_ref : axpy_f32_ref,
    };
    if (c->dtype == MODEL_DTYPE_Q8_0) j.dot = dot_q8_0_ref, j.axpy = axpy_q8_0_ref;
    if (c->dtype == MODEL_DTYPE_Q4_0) j.dot = dot_q4_0_ref, j.axpy = axpy_q4_0_ref;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (!use_ref && cpu_has_avx2() && (f16 || c->dtype == MODEL_DTYPE_F32)) {
        j.dot = f16 ? dot_f16_avx2 : dot_f32_avx2;
        j.axpy = f16 ? axpy_f16_avx2 : axpy_f32_avx2;
    }
#endif
    if (use_ref) {
        for (int64_t t = 0; t < n_tokens * n_head; t++) attn_task(&j, t, 0);
    } else {
        cpu_threadpool_run(pool, n_tokens * n_head, attn_task, &j);
    }
}
