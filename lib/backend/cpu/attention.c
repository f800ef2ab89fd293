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

static float dot_f16_ref(int n, const float *q, const void *k)
{
    const uint16_t *kk = k;
    float s = 0;
    for (int i = 0; i < n; i++) s += q[i] * cpu_fp16_to_f32(kk[i]);
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

AVX2 static float dot_f16_avx2(int n, const float *q, const void *k)
{
    const uint16_t *kk = k;
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8)
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

typedef struct attn_job {
    const cpu_kv_cache *c;
    const cpu_kv_seq *s;
    int layer, n_head, group;
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
    size_t goff = (size_t)g * (size_t)hd * c->elem_size;
    for (int64_t p = 0; p < n; p++)
        sc[p] = j->dot(hd, q, (const char *)cpu_kv_k(c, j->s, j->layer, p) + goff) * j->scale;
    cpu_softmax(sc, n);
    float *o = j->out + (t * j->n_head + h) * hd;
    memset(o, 0, (size_t)hd * sizeof *o);
    for (int64_t p = 0; p < n; p++)
        j->axpy(hd, sc[p], (const char *)cpu_kv_v(c, j->s, j->layer, p) + goff, o);
}

void cpu_attention(cpu_threadpool *pool, const cpu_kv_cache *c, const cpu_kv_seq *s, int layer,
                   const float *q, int n_head, int64_t pos0, int64_t n_tokens, float scale,
                   float *out, float *scratch, int64_t scratch_ctx, int use_ref)
{
    int f16 = c->dtype == MODEL_DTYPE_F16;
    attn_job j = {
        .c = c,
        .s = s,
        .layer = layer,
        .n_head = n_head,
        .group = n_head / c->n_head_kv,
        .q = q,
        .pos0 = pos0,
        .scale = scale,
        .out = out,
        .scratch = scratch,
        .scratch_ctx = scratch_ctx,
        .dot = f16 ? dot_f16_ref : dot_f32_ref,
        .axpy = f16 ? axpy_f16_ref : axpy_f32_ref,
    };
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (!use_ref && cpu_has_avx2()) {
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
