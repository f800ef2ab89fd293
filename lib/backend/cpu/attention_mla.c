/* Multi-head Latent Attention, absorbed and naive (attention_mla.h). Plain
 * loops the compiler vectorises; the softmax is cpu_softmax's (max-subtracted,
 * sum in double). */
#include "backend/cpu/attention_mla.h"

#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

/* x86-64: an AVX2 clone of each task (x86-64-v3) chosen at load time by the
 * dynamic linker (ifunc), the baseline otherwise; both compute the same sums in
 * the same order (dot's partial sums are explicit), so results are identical.
 * Not under ThreadSanitizer: its runtime is not ready when ifunc resolvers run
 * during relocation (the test binaries crashed before main). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) &&       \
    !defined(__SANITIZE_THREAD__)
#    define MLA_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#    define MLA_CLONES
#endif

typedef struct mla_job {
    const cpu_mla_shape *s;
    const float *q, *kv, *w, *kv_full;
    int64_t pos0, n_tokens;
    float scale;
    float *out, *scratch;
    int64_t scratch_floats;
    /* the split form (cpu_mla_attention_split) */
    const model_tensor *k_b, *v_b;
    cpu_vec_dot_fn dot_k, dot_v;
    int act_k, act_v;
} mla_job;

int64_t cpu_mla_scratch_floats(const cpu_mla_shape *s, int64_t ctx)
{
    /* scores, q_abs, o_lat; then room for q_nope or o_lat quantized (at most
     * 4 bytes an element: F32 activations) */
    return ctx + 2 * (int64_t)s->kv_lora_rank + s->rope + s->nope + s->kv_lora_rank;
}

/* Eight independent partial sums (then a fixed tree), so the compiler can keep
 * them in one SIMD register: a single running sum is a dependency chain it may
 * not reorder. The order is fixed, so results do not depend on the target. */
static inline __attribute__((always_inline)) float dot(const float *a, const float *b, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    for (; i < n; i++) acc[i & 7] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static inline __attribute__((always_inline)) void axpy(float a, const float *x, float *y, int n)
{
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* The absorbed form's middle, for one (token, head) with q_abs in qa:
 * o_lat = sum_k softmax_k(scale * qa . row_k) c_k over the first n_kv rows. */
static inline __attribute__((always_inline)) void
latent_attend(const mla_job *j, const float *qa, int64_t n_kv, float *scores, float *olat)
{
    const int R = j->s->kv_lora_rank, D = R + j->s->rope;
    for (int64_t k = 0; k < n_kv; k++) scores[k] = j->scale * dot(qa, j->kv + k * D, D);
    cpu_softmax(scores, n_kv);
    for (int r = 0; r < R; r++) olat[r] = 0.0f;
    for (int64_t k = 0; k < n_kv; k++) axpy(scores[k], j->kv + k * D, olat, R);
}

/* One (token, head) of the absorbed form (attention_mla.h). */
static inline __attribute__((always_inline)) void absorbed_one(const mla_job *j, int64_t t,
                                                               int64_t h, int thread)
{
    const cpu_mla_shape *s = j->s;
    const int R = s->kv_lora_rank, D = R + s->rope, qd = s->nope + s->rope;
    const int64_t n_kv = j->pos0 + t + 1;
    const float *q = j->q + (t * s->n_head + h) * qd;
    const float *wk = j->w + h * (int64_t)(s->nope + s->v) * R, *wv = wk + (int64_t)s->nope * R;
    float *scores = j->scratch + thread * j->scratch_floats;
    float *qa = scores + n_kv, *olat = qa + D;
    /* q_abs = [q_nope W_UK_h, q_pe] */
    for (int r = 0; r < R; r++) qa[r] = 0.0f;
    for (int i = 0; i < s->nope; i++) axpy(q[i], wk + (int64_t)i * R, qa, R);
    for (int r = 0; r < s->rope; r++) qa[R + r] = q[s->nope + r];
    latent_attend(j, qa, n_kv, scores, olat);
    float *out = j->out + (t * s->n_head + h) * s->v;
    for (int i = 0; i < s->v; i++) out[i] = dot(olat, wv + (int64_t)i * R, R);
}

/* A task is one head over up to TOKENS_PER_TASK tokens: the head's W_UK and
 * W_UV (2 R (nope + v) f32, 512 KB for DeepSeek-V2/V3) are read from memory
 * once and stay in cache for the tokens after the first, where one task per
 * (token, head) read them again for every token. */
enum { TOKENS_PER_TASK = 8 };

/* One (token, head) of the split form: as absorbed_one, the two weight
 * products through the stored-format kernels. */
static inline __attribute__((always_inline)) void split_one(const mla_job *j, int64_t t, int64_t h,
                                                            int thread)
{
    const cpu_mla_shape *s = j->s;
    const int R = s->kv_lora_rank, D = R + s->rope, qd = s->nope + s->rope;
    const int64_t n_kv = j->pos0 + t + 1;
    const float *q = j->q + (t * s->n_head + h) * qd;
    float *scores = j->scratch + thread * j->scratch_floats;
    float *qa = scores + n_kv, *olat = qa + D;
    char *act = (char *)(olat + R); /* float-aligned: the kernels load unaligned */
    const size_t kb_row = cpu_row_bytes((int)j->k_b->dtype, s->nope);
    const size_t vb_row = cpu_row_bytes((int)j->v_b->dtype, R);
    const char *kb = (const char *)j->k_b->data + (size_t)h * (size_t)R * kb_row;
    const char *vb = (const char *)j->v_b->data + (size_t)h * (size_t)s->v * vb_row;
    cpu_quantize_row(j->act_k, q, act, s->nope);
    for (int r = 0; r < R; r++) j->dot_k(s->nope, &qa[r], kb + (size_t)r * kb_row, act);
    for (int r = 0; r < s->rope; r++) qa[R + r] = q[s->nope + r];
    latent_attend(j, qa, n_kv, scores, olat);
    cpu_quantize_row(j->act_v, olat, act, R);
    float *out = j->out + (t * s->n_head + h) * s->v;
    for (int i = 0; i < s->v; i++) j->dot_v(R, &out[i], vb + (size_t)i * vb_row, act);
}

MLA_CLONES static void absorbed_task(void *ctx, int64_t task, int thread)
{
    const mla_job *j = ctx;
    const int64_t h = task % j->s->n_head, t0 = task / j->s->n_head * TOKENS_PER_TASK;
    const int64_t t1 = t0 + TOKENS_PER_TASK < j->n_tokens ? t0 + TOKENS_PER_TASK : j->n_tokens;
    for (int64_t t = t0; t < t1; t++) {
        if (j->k_b)
            split_one(j, t, h, thread);
        else
            absorbed_one(j, t, h, thread);
    }
}

MLA_CLONES static void naive_task(void *ctx, int64_t task, int thread)
{
    const mla_job *j = ctx;
    const cpu_mla_shape *s = j->s;
    const int R = s->kv_lora_rank, D = R + s->rope, qd = s->nope + s->rope;
    const int64_t full = (int64_t)s->n_head * (s->nope + s->v);
    const int64_t t = task / s->n_head, h = task % s->n_head, n_kv = j->pos0 + t + 1;
    const float *q = j->q + (t * s->n_head + h) * qd;
    float *scores = j->scratch + thread * j->scratch_floats;
    for (int64_t k = 0; k < n_kv; k++) {
        const float *kn = j->kv_full + k * full + h * (s->nope + s->v);
        scores[k] = j->scale * (dot(q, kn, s->nope) + dot(q + s->nope, j->kv + k * D + R, s->rope));
    }
    cpu_softmax(scores, n_kv);
    float *out = j->out + (t * s->n_head + h) * s->v;
    for (int i = 0; i < s->v; i++) out[i] = 0.0f;
    for (int64_t k = 0; k < n_kv; k++)
        axpy(scores[k], j->kv_full + k * full + h * (s->nope + s->v) + s->nope, out, s->v);
}

/* The fields every form's job has. */
static mla_job make_job(const cpu_mla_shape *s, const float *q, int64_t n_tokens, int64_t pos0,
                        const float *kv, float scale, float *out, float *scratch,
                        int64_t scratch_ctx)
{
    return (mla_job){.s = s,
                     .q = q,
                     .kv = kv,
                     .pos0 = pos0,
                     .n_tokens = n_tokens,
                     .scale = scale,
                     .out = out,
                     .scratch = scratch,
                     .scratch_floats = cpu_mla_scratch_floats(s, scratch_ctx)};
}

static void run_absorbed(cpu_threadpool *pool, mla_job *j)
{
    int64_t chunks = (j->n_tokens + TOKENS_PER_TASK - 1) / TOKENS_PER_TASK;
    cpu_threadpool_run(pool, chunks * j->s->n_head, absorbed_task, j);
}

void cpu_mla_attention(cpu_threadpool *pool, const cpu_mla_shape *s, const float *q,
                       int64_t n_tokens, int64_t pos0, const float *kv, const float *kv_b,
                       float scale, float *out, float *scratch, int64_t scratch_ctx)
{
    mla_job j = make_job(s, q, n_tokens, pos0, kv, scale, out, scratch, scratch_ctx);
    j.w = kv_b;
    run_absorbed(pool, &j);
}

void cpu_mla_attention_split(cpu_threadpool *pool, const cpu_mla_shape *s, const float *q,
                             int64_t n_tokens, int64_t pos0, const float *kv,
                             const model_tensor *k_b, const model_tensor *v_b, float scale,
                             float *out, float *scratch, int64_t scratch_ctx, int use_ref)
{
    mla_job j = make_job(s, q, n_tokens, pos0, kv, scale, out, scratch, scratch_ctx);
    j.k_b = k_b;
    j.v_b = v_b;
    j.dot_k = use_ref ? cpu_vec_dot_ref(k_b->dtype) : cpu_vec_dot(k_b->dtype);
    j.dot_v = use_ref ? cpu_vec_dot_ref(v_b->dtype) : cpu_vec_dot(v_b->dtype);
    j.act_k = cpu_vec_dot_type(k_b->dtype);
    j.act_v = cpu_vec_dot_type(v_b->dtype);
    run_absorbed(pool, &j);
}

void cpu_mla_attention_naive(cpu_threadpool *pool, const cpu_mla_shape *s, const float *q,
                             int64_t n_tokens, int64_t pos0, const float *kv, const float *kv_full,
                             float scale, float *out, float *scratch, int64_t scratch_ctx)
{
    mla_job j = make_job(s, q, n_tokens, pos0, kv, scale, out, scratch, scratch_ctx);
    j.kv_full = kv_full;
    cpu_threadpool_run(pool, n_tokens * s->n_head, naive_task, &j);
}
