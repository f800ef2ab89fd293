/* Multi-head Latent Attention, absorbed and naive (attention_mla.h). Plain
 * loops the compiler vectorises, an AVX2 latent tile, and where AVX-512 runs
 * tiles with a head in each lane (avx512_rows.h; the AVX2 tile's results bit
 * for bit): prefill, and decode where a tile has 12 heads or more, or 8 or
 * more past WIDE_HALF_TILE_KEYS keys. The absorbed forms' softmax is online (in tiles,
 * below); the naive reference's is cpu_softmax's (max-subtracted, sum in
 * double). */
#include "backend/cpu/attention_mla.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/attention.h"

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
    /* the absorbed forms' block: tokens [b0, b1); qa [.., n_head, D] and olat
     * [.., n_head, R] by (token - b0, head); tiles of `rows` heads */
    int64_t b0, b1;
    float *qa, *olat;
    int rows;
    int avx2; /* latent_tile_avx2 applies (the CPU and the shape) */
    int wide; /* and latent_tiles_rows512 applies (AVX-512) */
} mla_job;

/* The absorbed forms run a block of BLOCK_TOKENS tokens at a time in three
 * passes: q_abs of every (token, head) (a task per head: its W_UK read once a
 * block), the latent attention in tiles of up to TILE_ROWS heads of one token
 * walking the keys CHUNK at a time with an online softmax (FlashAttention's
 * recurrence: a chunk of latent rows is read once for every head of the tile,
 * where a task per (token, head) read the whole context per head, twice), and
 * out = W_UV o_lat (a task per head). */
enum { BLOCK_TOKENS = 16, TILE_ROWS = 16, CHUNK = 16 };

/* Floats of the block's q_abs and o_lat: [BLOCK_TOKENS, n_head, D] then
 * [BLOCK_TOKENS, n_head, R]. */
static int64_t block_floats(const cpu_mla_shape *s)
{
    return (int64_t)BLOCK_TOKENS * s->n_head * (2 * (int64_t)s->kv_lora_rank + s->rope);
}

/* Tokens a latent task takes where the AVX-512 tiles run (a chunk of latent
 * rows read once for all of them). */
enum { GROUP_TOKENS = 4 };

/* Tiles of 8 to 11 heads (a decode step's heads shared by two threads) take
 * the AVX-512 tiles, half their lanes idle, from this many keys on, the AVX2
 * tile below it: at DeepSeek-V2-Lite's shape, 2 threads, bench/attention_bench
 * (medians of 6 interleaved runs), AVX-512 / AVX2 0.92x at 256 keys, 0.96x at
 * 512, 1.16x at 1,024, 1.32x at 2,048, 1.38x at 4,096. */
enum { WIDE_HALF_TILE_KEYS = 768 };

/* One thread's share: the naive form's scores, or room for q_nope or o_lat
 * quantized (at most 4 bytes an element: F32 activations); then, from the
 * next 64-byte boundary (up to 16 floats of padding), the latent tiles'
 * workspace: the AVX-512 tiles' queries transposed, [GROUP_TOKENS][D][16],
 * and rows_chunk512's scores (TILES_SCORES floats), or the AVX2 tile's K^T,
 * [D][CHUNK] (the two never run in one pass). There, not on the stack: a host
 * thread with a small stack runs tasks too. */
enum { TILES_SCORES = GROUP_TOKENS * 16 * 16 };

static int64_t tiles_floats(const cpu_mla_shape *s)
{
    return (int64_t)GROUP_TOKENS * 16 * (s->kv_lora_rank + s->rope) + TILES_SCORES;
}

static int64_t share_floats(const cpu_mla_shape *s, int64_t ctx)
{
    return ctx + s->nope + s->kv_lora_rank + 16 + tiles_floats(s);
}

_Static_assert((int)GROUP_TOKENS * 16 >= (int)CHUNK, "the tiles' workspace holds a K^T");

/* Where a thread's latent-tile workspace starts in its share (64-byte
 * aligned). */
static float *share_qt(const mla_job *j, int thread)
{
    float *at = j->scratch + (thread + 1) * j->scratch_floats - tiles_floats(j->s) - 16;
    return at + (64 - (uintptr_t)at % 64) % 64 / sizeof *at;
}

int64_t cpu_mla_scratch_floats(const cpu_mla_shape *s, int64_t ctx, int n_threads)
{
    /* the threads' shares, then the absorbed forms' block */
    return (n_threads > 1 ? n_threads : 1) * share_floats(s, ctx) + block_floats(s);
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

/* Eight floats as one value (GCC/Clang vector extensions: one register in the
 * AVX2 clone, two SSE registers in the baseline; the same lane arithmetic). */
typedef float v8f __attribute__((vector_size(32)));
/* Loads go through memcpy into a local (no v8f crosses a function boundary:
 * the baseline clone has no AVX, and a vector argument or return would change
 * the ABI there). */
#define LOAD8(v, p) memcpy(&(v), (p), sizeof(v))

/* dot(a, b + k stride, n) for k < 4, each with dot's sums in dot's order (the
 * four chains are independent: four times the arithmetic in flight). */
static inline __attribute__((always_inline)) void dot4(const float *a, const float *b,
                                                       int64_t stride, int n, float *out)
{
    v8f acc[4] = {{0}};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f av;
        LOAD8(av, a + i);
        for (int j = 0; j < 4; j++) {
            v8f bv;
            LOAD8(bv, b + j * stride + i);
            acc[j] += av * bv;
        }
    }
    for (; i < n; i++)
        for (int j = 0; j < 4; j++) acc[j][i & 7] += a[i] * b[j * stride + i];
    for (int j = 0; j < 4; j++)
        out[j] = ((acc[j][0] + acc[j][4]) + (acc[j][1] + acc[j][5])) +
                 ((acc[j][2] + acc[j][6]) + (acc[j][3] + acc[j][7]));
}

/* axpy of x + k stride times a[k], k = 0..3 in turn: the same sums as four
 * axpy calls, y read and written once. */
static inline __attribute__((always_inline)) void axpy4(const float *a, const float *x,
                                                        int64_t stride, float *y, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f yv, x0, x1, x2, x3;
        LOAD8(yv, y + i);
        LOAD8(x0, x + i);
        LOAD8(x1, x + stride + i);
        LOAD8(x2, x + 2 * stride + i);
        LOAD8(x3, x + 3 * stride + i);
        yv = (((yv + a[0] * x0) + a[1] * x1) + a[2] * x2) + a[3] * x3;
        memcpy(y + i, &yv, sizeof yv);
    }
    for (; i < n; i++)
        y[i] = (((y[i] + a[0] * x[i]) + a[1] * x[stride + i]) + a[2] * x[2 * stride + i]) +
               a[3] * x[3 * stride + i];
}

/* q_abs = [q_nope W_UK_h, q_pe] of (token t, head h) into the block. */
static inline __attribute__((always_inline)) void q_absorb(const mla_job *j, int64_t t, int64_t h,
                                                           int thread)
{
    const cpu_mla_shape *s = j->s;
    const int R = s->kv_lora_rank, D = R + s->rope, qd = s->nope + s->rope;
    const float *q = j->q + (t * s->n_head + h) * qd;
    float *qa = j->qa + ((t - j->b0) * s->n_head + h) * D;
    if (j->k_b) { /* the stored-format kernels, q_nope quantized as theirs */
        char *act = (char *)(j->scratch + thread * j->scratch_floats);
        const size_t kb_row = cpu_row_bytes((int)j->k_b->dtype, s->nope);
        const char *kb = (const char *)j->k_b->data + (size_t)h * (size_t)R * kb_row;
        cpu_quantize_row(j->act_k, q, act, s->nope);
        for (int r = 0; r < R; r++) j->dot_k(s->nope, &qa[r], kb + (size_t)r * kb_row, act);
    } else {
        const float *wk = j->w + h * (int64_t)(s->nope + s->v) * R;
        for (int r = 0; r < R; r++) qa[r] = 0.0f;
        for (int i = 0; i < s->nope; i++) axpy(q[i], wk + (int64_t)i * R, qa, R);
    }
    for (int r = 0; r < s->rope; r++) qa[R + r] = q[s->nope + r];
}

/* out_h = W_UV_h o_lat of (token t, head h) from the block. */
static inline __attribute__((always_inline)) void v_project(const mla_job *j, int64_t t, int64_t h,
                                                            int thread)
{
    const cpu_mla_shape *s = j->s;
    const int R = s->kv_lora_rank;
    const float *olat = j->olat + ((t - j->b0) * s->n_head + h) * R;
    float *out = j->out + (t * s->n_head + h) * s->v;
    if (j->k_b) {
        char *act = (char *)(j->scratch + thread * j->scratch_floats);
        const size_t vb_row = cpu_row_bytes((int)j->v_b->dtype, R);
        const char *vb = (const char *)j->v_b->data + (size_t)h * (size_t)s->v * vb_row;
        cpu_quantize_row(j->act_v, olat, act, R);
        for (int i = 0; i < s->v; i++) j->dot_v(R, &out[i], vb + (size_t)i * vb_row, act);
    } else {
        const float *wv = j->w + h * (int64_t)(s->nope + s->v) * R + (int64_t)s->nope * R;
        for (int i = 0; i < s->v; i++) out[i] = dot(olat, wv + (int64_t)i * R, R);
    }
}

/* Pass 1 and 3: a task is one head over the block's tokens (its W_UK or
 * W_UV, 512 KB f32 for DeepSeek-V2/V3, read once a block and kept in cache). */
MLA_CLONES static void q_absorb_task(void *ctx, int64_t h, int thread)
{
    const mla_job *j = ctx;
    for (int64_t t = j->b0; t < j->b1; t++) q_absorb(j, t, h, thread);
}

MLA_CLONES static void v_project_task(void *ctx, int64_t h, int thread)
{
    const mla_job *j = ctx;
    for (int64_t t = j->b0; t < j->b1; t++) v_project(j, t, h, thread);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include "backend/cpu/avx2_math.h"

/* The latent tile with AVX2 and FMA, where D is a multiple of 8 up to
 * AVX2_MAX_D and R a multiple of 32 (DeepSeek-V2/V3: 576 and 512): each
 * chunk's keys transposed once for the tile so the scores of four rows at a
 * time are CHUNK-wide products (each K^T load shared), then P V two rows at a
 * time (each latent load shared). The recurrence of latent_tile_task, its sums
 * in another order; a row's arithmetic is still its own. */
enum { AVX2_MAX_D = 1024 };

/* kt: room for a chunk's K^T, [D][CHUNK] f32, 32-byte aligned. */
AVX2 static void latent_tile_avx2(const mla_job *j, int64_t t, int h0, int rows, float *kt)
{
    const cpu_mla_shape *s = j->s;
    const int R = s->kv_lora_rank, D = R + s->rope, H = s->n_head;
    const int64_t n_kv = j->pos0 + t + 1;
    const float *qa = j->qa + ((t - j->b0) * H + h0) * D;
    float *olat = j->olat + ((t - j->b0) * H + h0) * R;
    _Alignas(32) float sc[TILE_ROWS * CHUNK], p[TILE_ROWS * CHUNK];
    float m[TILE_ROWS], l[TILE_ROWS], corr[TILE_ROWS];
    for (int r = 0; r < rows; r++) m[r] = -INFINITY, l[r] = 0.0f;
    memset(olat, 0, sizeof(float) * (size_t)rows * (size_t)R);
    for (int64_t p0 = 0; p0 < n_kv; p0 += CHUNK) {
        const int len = n_kv - p0 < CHUNK ? (int)(n_kv - p0) : CHUNK;
        const float *c = j->kv + p0 * D;
        for (int i0 = 0; i0 < CHUNK; i0 += 8)
            for (ptrdiff_t d = 0; d < D; d += 8) {
                __m256 r8[8];
                UNROLL for (int i = 0; i < 8; i++) r8[i] =
                    i0 + i < len ? _mm256_loadu_ps(c + (ptrdiff_t)(i0 + i) * D + d)
                                 : _mm256_setzero_ps();
                transpose8(r8, kt + d * CHUNK + i0, CHUNK);
            }
        for (ptrdiff_t r0 = 0; r0 < rows; r0 += 4)
            scores4x16(kt, qa + r0 * D, D, rows - r0 < 4 ? (int)(rows - r0) : 4, D, j->scale,
                       sc + r0 * CHUNK);
        softmax_pv16(sc, len, rows, m, l, corr, p, olat, R, c, D, R);
    }
    for (ptrdiff_t r = 0; r < rows; r++) {
        const __m256 inv = _mm256_set1_ps(1.0f / l[r]);
        for (ptrdiff_t i = 0; i < R; i += 8)
            _mm256_storeu_ps(olat + r * R + i,
                             _mm256_mul_ps(_mm256_loadu_ps(olat + r * R + i), inv));
    }
}

static int avx2_tile_applies(const cpu_mla_shape *s)
{
    const int D = s->kv_lora_rank + s->rope;
    return cpu_has_avx2() && D % 8 == 0 && D <= AVX2_MAX_D && s->kv_lora_rank % 32 == 0;
}

#    include "backend/cpu/avx512_rows.h"

_Static_assert((int)GROUP_TOKENS <= (int)ROWS512_TILES, "a task's tokens in one rows_chunk512");
_Static_assert((int)TILES_SCORES >= (int)ROWS512_SCORES, "rows_chunk512's scores in the share");

/* Latent tiles with a head in each AVX-512 lane (avx512_rows.h): heads
 * [h0, h0 + rows) of the block's tokens [t0, t0 + nt), each token's absorbed
 * queries transposed once (qt: the thread's share), each chunk of latent rows
 * read once for all of them and in place (no K^T), the softmax down the keys;
 * latent_tile_avx2's results bit for bit. */
AVX512 static void latent_tiles_rows512(const mla_job *j, int64_t t0, int nt, int h0, int rows,
                                        float *qt)
{
    const cpu_mla_shape *s = j->s;
    const int R = s->kv_lora_rank, D = R + s->rope, H = s->n_head;
    static const float zero[AVX2_MAX_D]; /* the keys past the context */
    const float *krow[CHUNK];
    __m512 m[GROUP_TOKENS], l[GROUP_TOKENS];
    for (int i = 0; i < nt; i++) {
        const float *q[TILE_ROWS];
        for (int r = 0; r < rows; r++) q[r] = j->qa + ((t0 + i - j->b0) * H + h0 + r) * D;
        rows_transpose_queries(q, rows, D, qt + (ptrdiff_t)i * 16 * D);
        memset(j->olat + ((t0 + i - j->b0) * H + h0) * R, 0,
               sizeof(float) * (size_t)rows * (size_t)R);
        m[i] = _mm512_set1_ps(-INFINITY), l[i] = _mm512_setzero_ps();
    }
    const int64_t n_kv = j->pos0 + t0 + nt; /* the last token's */
    for (int64_t p0 = 0; p0 < n_kv; p0 += CHUNK) {
        const int len = n_kv - p0 < CHUNK ? (int)(n_kv - p0) : CHUNK;
        const float *c = j->kv + p0 * D;
        for (int k = 0; k < CHUNK; k++) krow[k] = k < len ? c + (ptrdiff_t)k * D : zero;
        /* the tokens that see a key of the chunk: from i0 on */
        _Alignas(64) int valid[GROUP_TOKENS][16];
        const int *vt[GROUP_TOKENS];
        const float *qti[GROUP_TOKENS];
        float *o[GROUP_TOKENS];
        int i0 = nt;
        for (int i = nt - 1; i >= 0; i--) {
            const int64_t seen = j->pos0 + t0 + i + 1 - p0; /* token t0 + i's keys here */
            if (seen <= 0) break;
            for (int r = 0; r < 16; r++) valid[i][r] = r >= rows ? 0 : seen < len ? (int)seen : len;
            vt[i] = valid[i], qti[i] = qt + (ptrdiff_t)i * 16 * D;
            o[i] = j->olat + ((t0 + i - j->b0) * H + h0) * R;
            i0 = i;
        }
        if (i0 < nt)
            rows_chunk512(krow, D, qti + i0, nt - i0, j->scale, vt + i0, m + i0, l + i0, o + i0, R,
                          c, D, R, qt + (ptrdiff_t)GROUP_TOKENS * 16 * D);
    }
    for (int i = 0; i < nt; i++) {
        _Alignas(64) float lv[16];
        _mm512_store_ps(lv, l[i]);
        float *olat = j->olat + ((t0 + i - j->b0) * H + h0) * R;
        for (ptrdiff_t r = 0; r < rows; r++) {
            const __m512 inv = _mm512_set1_ps(1.0f / lv[r]);
            for (ptrdiff_t e = 0; e < R; e += 16)
                _mm512_storeu_ps(olat + r * R + e,
                                 _mm512_mul_ps(_mm512_loadu_ps(olat + r * R + e), inv));
        }
    }
}

/* Pass 2 where the AVX-512 tiles run: a task is GROUP_TOKENS tokens' tiles of
 * the same heads. */
static void latent_group_task(void *ctx, int64_t task, int thread)
{
    const mla_job *j = ctx;
    const int H = j->s->n_head, tiles = (H + j->rows - 1) / j->rows;
    const int64_t t0 = j->b0 + task / tiles * GROUP_TOKENS;
    const int nt = j->b1 - t0 < GROUP_TOKENS ? (int)(j->b1 - t0) : GROUP_TOKENS;
    const int h0 = (int)(task % tiles) * j->rows;
    latent_tiles_rows512(j, t0, nt, h0, H - h0 < j->rows ? H - h0 : j->rows, share_qt(j, thread));
}
#else
static int avx2_tile_applies(const cpu_mla_shape *s)
{
    (void)s;
    return 0;
}
#endif

/* Pass 2: a task is one token's heads [h0, h0 + rows), every row seeing keys
 * [0, pos0 + t]. Each row's arithmetic is its own (a running max m, sum l and
 * unnormalized o_lat over CHUNK-key chunks at fixed positions), so a row's
 * result depends on its context alone, not on the tile or the batch:
 *   m' = max(m, max_k s_k), o = o e^(m - m') + sum_k e^(s_k - m') c_k, l alike. */
MLA_CLONES static void latent_tile_task(void *ctx, int64_t task, int thread)
{
    const mla_job *j = ctx;
    const cpu_mla_shape *s = j->s;
    const int R = s->kv_lora_rank, D = R + s->rope, H = s->n_head;
    const int tiles = (H + j->rows - 1) / j->rows;
    const int64_t t = j->b0 + task / tiles;
    const int h0 = (int)(task % tiles) * j->rows;
    const int rows = H - h0 < j->rows ? H - h0 : j->rows;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (j->avx2) {
        latent_tile_avx2(j, t, h0, rows, share_qt(j, thread));
        return;
    }
#endif
    const int64_t n_kv = j->pos0 + t + 1;
    const float *qa = j->qa + ((t - j->b0) * H + h0) * D;
    float *olat = j->olat + ((t - j->b0) * H + h0) * R;
    float m[TILE_ROWS], l[TILE_ROWS], e[TILE_ROWS][CHUNK];
    for (int r = 0; r < rows; r++) m[r] = -INFINITY, l[r] = 0.0f;
    for (int64_t i = 0; i < (int64_t)rows * R; i++) olat[i] = 0.0f;
    for (int64_t p0 = 0; p0 < n_kv; p0 += CHUNK) {
        const int len = n_kv - p0 < CHUNK ? (int)(n_kv - p0) : CHUNK;
        const float *c = j->kv + p0 * D;
        for (int r = 0; r < rows; r++) {
            float mx = m[r];
            int k = 0;
            for (; k + 4 <= len; k += 4)
                dot4(qa + (int64_t)r * D, c + (int64_t)k * D, D, D, e[r] + k);
            for (; k < len; k++) e[r][k] = dot(qa + (int64_t)r * D, c + (int64_t)k * D, D);
            for (k = 0; k < len; k++) {
                e[r][k] *= j->scale;
                mx = e[r][k] > mx ? e[r][k] : mx;
            }
            /* (e^0 is 1 exactly: nothing to rescale while the max stands) */
            const float corr = m[r] == -INFINITY ? 0.0f : m[r] == mx ? 1.0f : expf(m[r] - mx);
            /* (every score so far -inf: weights e^(-inf - 0) = 0, not NaN) */
            const float shift = mx == -INFINITY ? 0.0f : mx;
            float sum = 0.0f;
            for (k = 0; k < len; k++) sum += e[r][k] = expf(e[r][k] - shift);
            l[r] = l[r] * corr + sum;
            m[r] = mx;
            float *o = olat + (int64_t)r * R;
            if (corr != 1.0f)
                for (int i = 0; i < R; i++) o[i] *= corr;
            k = 0;
            for (; k + 4 <= len; k += 4) axpy4(e[r] + k, c + (int64_t)k * D, D, o, R);
            for (; k < len; k++) axpy(e[r][k], c + (int64_t)k * D, o, R);
        }
    }
    for (int r = 0; r < rows; r++) {
        const float inv = 1.0f / l[r];
        for (int i = 0; i < R; i++) olat[(int64_t)r * R + i] *= inv;
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
                     .scratch_floats = share_floats(s, scratch_ctx)};
}

/* The absorbed forms, block by block: q_abs, the latent attention, W_UV. */
static void run_absorbed(cpu_threadpool *pool, mla_job *j)
{
    const int H = j->s->n_head, threads = pool ? cpu_threadpool_size(pool) : 1;
    /* the block's buffers: after the threads' shares */
    j->qa = j->scratch + threads * j->scratch_floats;
    j->avx2 = avx2_tile_applies(j->s);
    j->wide = j->avx2 && cpu_has_avx512_vnni() && j->s->kv_lora_rank % 16 == 0 &&
              !cpu_attention_avx2_only;
    j->olat = j->qa + (int64_t)BLOCK_TOKENS * H * (j->s->kv_lora_rank + j->s->rope);
    for (j->b0 = 0; j->b0 < j->n_tokens; j->b0 = j->b1) {
        j->b1 = j->b0 + BLOCK_TOKENS < j->n_tokens ? j->b0 + BLOCK_TOKENS : j->n_tokens;
        const int64_t nt = j->b1 - j->b0;
        /* tiles of up to TILE_ROWS heads, smaller while the threads would idle
         * (decode: one token's heads shared out); each row's result is the same */
        int64_t rows = (H * nt + threads - 1) / threads;
        j->rows = (int)(rows < 1 ? 1 : rows > TILE_ROWS ? TILE_ROWS : rows);
        cpu_threadpool_run(pool, H, q_absorb_task, j);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (j->wide && (j->rows >= 12 || (j->rows >= 8 && j->pos0 + j->b1 >= WIDE_HALF_TILE_KEYS)))
            cpu_threadpool_run(
                pool, (nt + GROUP_TOKENS - 1) / GROUP_TOKENS * ((H + j->rows - 1) / j->rows),
                latent_group_task, j);
        else
#endif
            cpu_threadpool_run(pool, nt * ((H + j->rows - 1) / j->rows), latent_tile_task, j);
        cpu_threadpool_run(pool, H, v_project_task, j);
    }
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
