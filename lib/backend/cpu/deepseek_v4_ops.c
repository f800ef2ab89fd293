/* DeepSeek-V4's operations on the CPU (deepseek_v4_ops.h has the math). */
#include "backend/cpu/deepseek_v4_ops.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kv_cache.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include "backend/cpu/avx2_math.h"
#    define V4_AVX2 1
#endif

/* QROT_MAX: the most query values (heads x head_dim) the indexer rotates on
 * the stack for a rotated cache (V4-Flash: 64 x 128); past it, each key is
 * rotated back instead. */
enum { HC_MAX = 16, HEAD_MAX = 1024, QROT_MAX = 16384 };

/* x86-64: an AVX2 clone (x86-64-v3) of the per-row tasks picked at load by
 * the dynamic linker, as attention_mla.c does; both compute the same sums in
 * the same order (explicit partial sums, no contraction under ISO C). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) &&       \
    !defined(__SANITIZE_THREAD__)
#    define V4_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#    define V4_CLONES
#endif

static inline __attribute__((always_inline)) float dot(const float *a, const float *b, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    for (; i < n; i++) acc[i & 7] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* One row's mappings from its mix m: pre[hc]; with post != NULL also post[hc]
 * and comb[hc, hc] (softmax rows + eps, then Sinkhorn). */
static void hc_maps(const float *m, const float *base, const float *scale, int hc,
                    int sinkhorn_iters, float eps, float *pre, float *post, float *comb)
{
    for (int j = 0; j < hc; j++) pre[j] = sigmoidf(m[j] * scale[0] + base[j]) + eps;
    if (!post) return;
    for (int j = 0; j < hc; j++) post[j] = 2.0f * sigmoidf(m[hc + j] * scale[1] + base[hc + j]);
    float *c = comb;
    /* softmax over k of each row j, + eps */
    for (int j = 0; j < hc; j++) {
        float *row = c + (ptrdiff_t)j * hc, mx = -INFINITY, sum = 0.0f;
        for (int k = 0; k < hc; k++) {
            row[k] = m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
            if (row[k] > mx) mx = row[k];
        }
        for (int k = 0; k < hc; k++) sum += row[k] = expf(row[k] - mx);
        for (int k = 0; k < hc; k++) row[k] = row[k] / sum + eps;
    }
    /* Sinkhorn-Knopp: columns, then (iters - 1) x (rows, columns) */
    for (int it = 0; it < sinkhorn_iters; it++) {
        if (it > 0)
            for (int j = 0; j < hc; j++) {
                float s = 0.0f;
                for (int k = 0; k < hc; k++) s += c[j * hc + k];
                for (int k = 0; k < hc; k++) c[j * hc + k] /= s + eps;
            }
        for (int k = 0; k < hc; k++) {
            float s = 0.0f;
            for (int j = 0; j < hc; j++) s += c[j * hc + k];
            for (int j = 0; j < hc; j++) c[j * hc + k] /= s + eps;
        }
    }
}

/* y = sum_j pre[j] x[j] over the hc streams of one row. */
static void hc_collapse(const float *pre, int hc, const float *xt, int64_t n_embd, float *y)
{
    for (int64_t i = 0; i < n_embd; i++) {
        float s = 0.0f;
        for (int j = 0; j < hc; j++) s += pre[j] * xt[j * n_embd + i];
        y[i] = s;
    }
}

void cpu_hc_pre(const float *mix, const float *base, const float *scale, int hc, int sinkhorn_iters,
                float eps, const float *x, int64_t n_embd, int64_t n, float *collapsed, float *post,
                float *comb)
{
    const int n_mix = post ? (2 + hc) * hc : hc;
    for (int64_t t = 0; t < n; t++) {
        float pre[HC_MAX];
        hc_maps(mix + t * n_mix, base, scale, hc, sinkhorn_iters, eps, pre,
                post ? post + t * hc : NULL, post ? comb + t * hc * hc : NULL);
        hc_collapse(pre, hc, x + t * hc * n_embd, n_embd, collapsed + t * n_embd);
    }
}

void cpu_hc_pre_shifted(const float *mix, const float *base, const float *scale, int hc,
                        int sinkhorn_iters, float eps, const float *x, int64_t n_embd, int64_t n,
                        const float *pre_in, float *collapsed, float *pre_out, float *post,
                        float *comb)
{
    const int n_mix = (2 + hc) * hc;
    for (int64_t t = 0; t < n; t++) {
        float first[HC_MAX] = {1.0f}; /* the first block reads stream 0 */
        hc_collapse(pre_in ? pre_in + t * hc : first, hc, x + t * hc * n_embd, n_embd,
                    collapsed + t * n_embd);
        if (mix)
            hc_maps(mix + t * n_mix, base, scale, hc, sinkhorn_iters, eps, pre_out + t * hc,
                    post + t * hc, comb + t * hc * hc);
    }
}

void cpu_hc_post(const float *x, const float *y, const float *post, const float *comb, int hc,
                 int64_t n_embd, int64_t n, float *out)
{
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * hc * n_embd, *yt = y + t * n_embd, *c = comb + t * hc * hc;
        for (int k = 0; k < hc; k++) {
            float *o = out + (t * hc + k) * n_embd, pk = post[t * hc + k];
            for (int64_t i = 0; i < n_embd; i++) {
                float s = 0.0f;
                for (int j = 0; j < hc; j++) s += c[j * hc + k] * xt[j * n_embd + i];
                o[i] = pk * yt[i] + s;
            }
        }
    }
}

void cpu_hc_mean(const float *x, int hc, int64_t n_embd, int64_t n, float *out, int64_t out_stride)
{
    const float r = 1.0f / (float)hc;
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * hc * n_embd;
        float *o = out + t * out_stride;
        for (int64_t i = 0; i < n_embd; i++) {
            float s = xt[i];
            for (int k = 1; k < hc; k++) s += xt[k * n_embd + i];
            o[i] = s * r;
        }
    }
}

void cpu_engram_gate(float *x, const float *kv, const float *wh, const float *we, int hc,
                     int64_t n_embd, int64_t n, float eps)
{
    const float scale = 1.0f / sqrtf((float)n_embd);
    for (int64_t t = 0; t < n; t++) {
        const float *v = kv + (t * (hc + 1) + hc) * n_embd;
        for (int j = 0; j < hc; j++) {
            float *xj = x + (t * hc + j) * n_embd;
            const float *k = kv + (t * (hc + 1) + j) * n_embd, *a = wh + j * n_embd,
                        *b = we + j * n_embd;
            float sx = 0.0f, sk = 0.0f, dot = 0.0f;
            for (int64_t i = 0; i < n_embd; i++) {
                sx += xj[i] * xj[i];
                sk += k[i] * k[i];
                dot += xj[i] * a[i] * k[i] * b[i];
            }
            float rx = 1.0f / sqrtf(sx / (float)n_embd + eps);
            float rk = 1.0f / sqrtf(sk / (float)n_embd + eps);
            float d = dot * rx * rk * scale, mag = sqrtf(fmaxf(fabsf(d), 1e-6f));
            float s = d > 0.0f ? mag : d < 0.0f ? -mag : 0.0f;
            float g = 1.0f / (1.0f + expf(-s));
            for (int64_t i = 0; i < n_embd; i++) xj[i] += g * v[i];
        }
    }
}

void cpu_compress_pool(const float *kv, const float *gate, int64_t ring, int64_t row_stride,
                       const float *bias, int rate, int64_t width, int overlap, int64_t e0,
                       int64_t n, float *out, int64_t out_stride)
{
    const int64_t bias_stride = overlap ? 2 * width : width;
    for (int64_t e = e0; e < e0 + n; e++) {
        float *o = out + (e - e0) * out_stride;
        for (int64_t c = 0; c < width; c++) {
            /* slots: (overlap) the previous window's first halves, then this
             * window's rows (second halves under overlap) */
            float mx = -INFINITY;
            for (int pass = 0; pass < 2; pass++) {
                double sum = 0.0, acc = 0.0;
                for (int half = overlap ? 0 : 1; half < 2; half++) {
                    int64_t w = half == 0 ? e - 1 : e;
                    if (w < 0) continue;
                    int64_t ch = half == 1 && overlap ? width + c : c;
                    for (int j = 0; j < rate; j++) {
                        int64_t row = ((w * rate + j) % ring) * row_stride;
                        float g = gate[row + ch] + (bias ? bias[(int64_t)j * bias_stride + ch] : 0);
                        if (pass == 0) {
                            if (g > mx) mx = g;
                        } else {
                            float p = expf(g - mx);
                            sum += p;
                            acc += (double)p * kv[row + ch];
                        }
                    }
                }
                if (pass == 1) o[c] = (float)(acc / sum);
            }
        }
    }
}

void cpu_v4_rows_store(model_dtype dtype, void *dst, const float *src, int64_t src_stride,
                       int64_t width, int64_t n)
{
    const size_t rb = cpu_row_bytes((int)dtype, width);
    const int rotated = cpu_kv_rotates(dtype, width);
    for (int64_t r = 0; r < n; r++)
        cpu_kv_store_row(dtype, rotated, src + r * src_stride, (char *)dst + (size_t)r * rb, width);
}

/* A cache row of n values converted to f32 into buf as stored (a rotated
 * row stays rotated): AVX2 and F16C where the CPU has them, the same values
 * (the conversions are exact). */
typedef void (*row_load_fn)(model_dtype dtype, const void *row, int64_t n, float *buf);

static void row_load_ref(model_dtype dtype, const void *row, int64_t n, float *buf)
{
    cpu_dequantize_row((int)dtype, row, buf, n);
}

#ifdef V4_AVX2
AVX2 static void row_load_avx2(model_dtype dtype, const void *row, int64_t n, float *buf)
{
    load_kv_row(dtype, row, n, buf);
}
#endif

static row_load_fn row_loader(model_dtype dtype, int64_t n)
{
#ifdef V4_AVX2
    if (cpu_has_avx2() && n % 8 == 0 && dtype != MODEL_DTYPE_F32) return row_load_avx2;
#endif
    (void)n;
    return dtype == MODEL_DTYPE_F32 ? NULL : row_load_ref;
}

/* A cache row (v4_rows_store's) of n values as f32: an f32 row in place
 * (load NULL), else converted by load into buf and, with unrotate, rotated
 * back. */
static inline const float *row_f32(const char *row, row_load_fn load, model_dtype dtype,
                                   int unrotate, int64_t n, float *buf)
{
    if (!load) return (const float *)row;
    load(dtype, row, n, buf);
    if (unrotate) cpu_kv_rotate(buf, n);
    return buf;
}

/* Keys a chunk of the tiled indexer scores (IDX_CHUNK where they exist). */
enum { IDX_CHUNK_FLOATS = 16 };

typedef struct indexer_ctx {
    const float *q, *w;
    const char *keys;
    model_dtype dtype;
    row_load_fn load; /* NULL: f32 keys, read in place */
    size_t key_bytes;
    int rotated, n_head, rate, k;
    int tiled; /* indexer_scores_avx2 applies */
    int64_t head_dim, n_keys, scratch_stride;
    const int64_t *pos;
    float scale, w_scale;
    int32_t *sel;
    const backend_index_candidates *cand; /* NULL: none */
    float *scratch;
    cpu_threadpool *pool; /* its scratch: each thread's workspace (indexer_ws_floats) */
} indexer_ctx;

#ifdef V4_AVX2
/* IDX_MAX_D: the widest key the tiled scores take (V4-Flash: 128). */
enum { IDX_CHUNK = IDX_CHUNK_FLOATS, IDX_MAX_D = 256 };

/* The indexer's scores of entries [0, lim) for one query row (qt: its heads'
 * rows of head_dim, a multiple of 8, rotated as the keys are), with AVX2 and
 * FMA: 16 keys at a time converted and transposed once, scored four heads at
 * a time as 16-wide products (scores4x16), ReLU'd and weighted into 16
 * sums. Each score is its own (its dimensions summed in order, then its heads
 * in order), whatever the batch. ws: the chunk's keys and their K^T,
 * [IDX_CHUNK][head_dim] f32 each, 32-byte aligned. With `kept`, keep has
 * flags of blocks of `block` entries, and a chunk holding no kept block is
 * not scored (its scores NaN). */
AVX2 static void indexer_scores_avx2(const indexer_ctx *c, const float *qt, const float *wt,
                                     int64_t lim, float *score, float *ws, int kept_only,
                                     const float *keep, int block)
{
    _Alignas(32) float sc[4 * IDX_CHUNK];
    const int64_t d = c->head_dim;
    float *kc = ws, *kt = ws + IDX_CHUNK * d;
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t s0 = 0; s0 < lim; s0 += IDX_CHUNK) {
        const int len = lim - s0 < IDX_CHUNK ? (int)(lim - s0) : IDX_CHUNK;
        int kept = !kept_only;
        for (int64_t b = s0 / block; !kept && b <= (s0 + len - 1) / block; b++)
            kept = keep[b] != 0.0f;
        if (!kept) {
            for (int j = 0; j < len; j++) score[s0 + j] = NAN;
            continue;
        }
        for (int j = 0; j < len; j++)
            load_kv_row(c->dtype, c->keys + (size_t)(s0 + j) * c->key_bytes, d,
                        kc + (ptrdiff_t)j * d);
        if (len < IDX_CHUNK)
            memset(kc + (ptrdiff_t)len * d, 0, sizeof(float) * (size_t)((IDX_CHUNK - len) * d));
        transpose_chunk16(kc, d, d, kt);
        __m256 t0 = zero, t1 = zero;
        for (int h0 = 0; h0 < c->n_head; h0 += 4) {
            const int nr = c->n_head - h0 < 4 ? c->n_head - h0 : 4;
            scores4x16(kt, qt + (ptrdiff_t)h0 * d, d, nr, d, c->scale, sc);
            for (int r = 0; r < nr; r++) {
                const __m256 wh = _mm256_set1_ps(wt[h0 + r] * c->w_scale);
                const float *row = sc + (ptrdiff_t)r * IDX_CHUNK;
                t0 = _mm256_add_ps(t0, _mm256_mul_ps(_mm256_max_ps(_mm256_load_ps(row), zero), wh));
                t1 = _mm256_add_ps(t1,
                                   _mm256_mul_ps(_mm256_max_ps(_mm256_load_ps(row + 8), zero), wh));
            }
        }
        _Alignas(32) float tot[IDX_CHUNK];
        _mm256_store_ps(tot, t0);
        _mm256_store_ps(tot + 8, t1);
        for (int j = 0; j < len; j++) score[s0 + j] = tot[j];
    }
}
#endif

/* Whether entry a ranks below entry b: a lower score, or an equal one at a
 * higher index. */
static inline int ranks_below(const float *score, int32_t a, int32_t b)
{
    return score[a] < score[b] || (score[a] == score[b] && a > b);
}

/* Heap h[0, n) (the lowest-ranked entry on top): entry i moved down to its place. */
static void sift_down(const float *score, int32_t *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && ranks_below(score, h[l], h[m])) m = l;
        if (r < n && ranks_below(score, h[r], h[m])) m = r;
        if (m == i) return;
        int32_t x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
}

/* sel[0, k) = the k best entries of score[0, lim) (NaN ones skipped), the
 * best first and the lower index first among equals; -1 where fewer. One
 * pass with a heap of k in sel itself, then heapsort in place: O(lim log k)
 * where picking the best k times was O(k lim) (22 % of a V4 prefill of 8,192
 * tokens with k 128). */
static void topk_select(const float *score, int64_t lim, int k, int32_t *sel)
{
    int n = 0;
    for (int64_t s = 0; s < lim; s++) {
        if (isnan(score[s])) continue;
        if (n < k) { /* the new entry sifted up */
            int i = n++;
            sel[i] = (int32_t)s;
            while (i > 0 && ranks_below(score, sel[i], sel[(i - 1) / 2])) {
                int32_t x = sel[i];
                sel[i] = sel[(i - 1) / 2];
                sel[(i - 1) / 2] = x;
                i = (i - 1) / 2;
            }
        } else if (k > 0 && ranks_below(score, sel[0], (int32_t)s)) {
            sel[0] = (int32_t)s;
            sift_down(score, sel, n, 0);
        }
    }
    for (int m = n; m > 1; m--) { /* the lowest-ranked left goes last */
        int32_t x = sel[0];
        sel[0] = sel[m - 1];
        sel[m - 1] = x;
        sift_down(score, sel, m - 1, 0);
    }
    for (int i = n; i < k; i++) sel[i] = -1;
}

/* The indexer's workspace a thread (f32, every part a multiple of 16 floats:
 * 64-byte aligned): the query rotated [QROT_MAX at most], then
 * indexer_scores_avx2's. */
static int64_t indexer_qrot_floats(const indexer_ctx *c)
{
    const int64_t nq = c->n_head * c->head_dim;
    return c->rotated && nq <= QROT_MAX ? (nq + 15) / 16 * 16 : 0;
}

static int64_t indexer_ws_floats(const indexer_ctx *c)
{
    return indexer_qrot_floats(c) + (c->tiled ? c->head_dim * 2 * IDX_CHUNK_FLOATS : 0);
}

/* DeepSeek-V4.1's candidate blocks (backend_index_candidates) of row t. A
 * later layer's: flags of its blocks [0, ceil(lim / block)) into keep, 1 for
 * a candidate, and returns 1; 0 for a source's row (or no candidates). */
static int candidate_flags(const indexer_ctx *c, int64_t t, int64_t lim, float *keep)
{
    const backend_index_candidates *cd = c->cand;
    if (!cd || cd->out) return 0;
    const int32_t *blocks = cd->in + t * cd->n_blocks;
    const int64_t nb = (lim + cd->block - 1) / cd->block;
    for (int64_t b = 0; b < nb; b++) keep[b] = 0.0f;
    for (int j = 0; j < cd->n_blocks; j++)
        if (blocks[j] >= 0 && blocks[j] < nb) keep[blocks[j]] = 1.0f;
    return 1;
}

/* After row t's scores of entries [0, lim): a later layer's entries outside
 * its candidate blocks (kept_only: the flags in bs) made NaN, which
 * topk_select skips; a source's
 * best blocks into cand->out (block scores in bs: the maximum of a block's
 * entries, capped at the largest finite bf16 as candidate_block_max_ref
 * does, the last visible block +inf so it is always a candidate). */
static void candidate_blocks(const indexer_ctx *c, int64_t t, float *score, int64_t lim,
                             int kept_only, float *bs)
{
    const backend_index_candidates *cd = c->cand;
    const int B = cd->block;
    if (kept_only) {
        for (int64_t e = 0; e < lim; e++)
            if (bs[e / B] == 0.0f) score[e] = NAN;
        return;
    }
    const float bf16_max = 3.38953139e38f;
    const int64_t nb = (lim + B - 1) / B;
    for (int64_t b = 0; b < nb; b++) {
        float m = -INFINITY;
        const int64_t e1 = (b + 1) * B < lim ? (b + 1) * B : lim;
        for (int64_t e = b * B; e < e1; e++)
            if (score[e] > m) m = score[e];
        bs[b] = m > bf16_max ? bf16_max : m;
    }
    if (nb > 0) bs[nb - 1] = INFINITY;
    topk_select(bs, nb, cd->n_blocks, cd->out + t * cd->n_blocks);
}

V4_CLONES static void indexer_row(void *p, int64_t t, int thread)
{
    const indexer_ctx *c = p;
    float *score = c->scratch + thread * c->scratch_stride, kf[HEAD_MAX];
    float *qrot = cpu_threadpool_scratch(c->pool, thread);
    float *bs = score + c->n_keys + 1; /* (the candidate blocks': cpu_indexer_topk) */
    int64_t lim = (c->pos[t] + 1) / c->rate;
    if (lim > c->n_keys) lim = c->n_keys;
    /* a later layer's row scores only its candidate blocks' entries */
    const int kept_only = candidate_flags(c, t, lim, bs);
    const int block = c->cand ? c->cand->block : 1;
    const float *qt = c->q + t * c->n_head * c->head_dim, *wt = c->w + t * c->n_head;
    /* a rotated cache: q H . k H = q . k, so q is rotated once rather than
     * every key back (kv_cache.h) */
    int unrotate_keys = c->rotated;
    const int64_t nq = c->n_head * c->head_dim;
    if (c->rotated && nq <= QROT_MAX) {
        memcpy(qrot, qt, sizeof(float) * (size_t)nq);
        for (int64_t i = 0; i < nq; i += c->head_dim) cpu_kv_rotate(qrot + i, c->head_dim);
        qt = qrot;
        unrotate_keys = 0;
    }
#ifdef V4_AVX2
    if (c->tiled && !unrotate_keys) {
        indexer_scores_avx2(c, qt, wt, lim, score,
                            (float *)cpu_threadpool_scratch(c->pool, thread) +
                                indexer_qrot_floats(c),
                            kept_only, bs, block);
        if (c->cand) candidate_blocks(c, t, score, lim, kept_only, bs);
        topk_select(score, lim, c->k, c->sel + t * c->k);
        return;
    }
#endif
    for (int64_t s = 0; s < lim; s++) {
        if (kept_only && bs[s / block] == 0.0f) continue; /* (made NaN below) */
        const float *ks = row_f32(c->keys + (size_t)s * c->key_bytes, c->load, c->dtype,
                                  unrotate_keys, c->head_dim, kf);
        float total = 0.0f;
        for (int h = 0; h < c->n_head; h++) {
            float d = dot(qt + h * c->head_dim, ks, c->head_dim);
            total += (d > 0.0f ? d * c->scale : 0.0f) * (wt[h] * c->w_scale);
        }
        score[s] = total;
    }
    if (c->cand) candidate_blocks(c, t, score, lim, kept_only, bs);
    topk_select(score, lim, c->k, c->sel + t * c->k);
}

di_status cpu_indexer_topk(cpu_threadpool *pool, const float *q, const float *w, int n_head,
                           int64_t head_dim, int64_t n, const int64_t *pos, const void *keys,
                           model_dtype dtype, int64_t n_keys, int rate, float scale, float w_scale,
                           int k, int32_t *sel, const backend_index_candidates *cand,
                           float *scratch, int64_t scratch_stride)
{
    if (head_dim > HEAD_MAX) return DI_ERR_INVALID_ARGUMENT; /* checked at load */
    indexer_ctx c = {.q = q,
                     .w = w,
                     .keys = keys,
                     .dtype = dtype,
                     .load = row_loader(dtype, head_dim),
                     .key_bytes = cpu_row_bytes((int)dtype, head_dim),
                     .rotated = cpu_kv_rotates(dtype, head_dim),
                     .n_head = n_head,
                     .rate = rate,
                     .k = k,
#ifdef V4_AVX2
                     .tiled = cpu_has_avx2() && head_dim % 8 == 0 && head_dim <= IDX_MAX_D,
#endif
                     .head_dim = head_dim,
                     .n_keys = n_keys,
                     .scratch_stride = scratch_stride,
                     .pos = pos,
                     .scale = scale,
                     .w_scale = w_scale,
                     .sel = sel,
                     .cand = cand,
                     .scratch = scratch,
                     .pool = pool};
    if (cand && (cand->block < 1 || scratch_stride < n_keys + 2 + n_keys / cand->block))
        return DI_ERR_INVALID_ARGUMENT;
    di_status st = cpu_threadpool_reserve(pool, (size_t)indexer_ws_floats(&c) * sizeof(float));
    if (st != DI_OK) return st;
    cpu_threadpool_run(pool, n, indexer_row, &c);
    return DI_OK;
}

typedef struct sink_ctx {
    const float *q, *sinks;
    const char *win, *comp; /* rows of head_dim, row_bytes apart */
    model_dtype dtype;
    row_load_fn load; /* the per-head walk's conversion; NULL: f32 rows in place */
    size_t row_bytes;
    int rotated, n_head, window, rate, k;
    int64_t head_dim, win_ring, n_comp;
    const int64_t *pos, *last; /* last NULL: pos */
    const int32_t *sel;
    float scale;
    float *out;
    cpu_threadpool *pool; /* its scratch: each thread's workspace (sink_ws_floats) */
} sink_ctx;

enum { KEY_TILE = 64, CONV_TILE = 8 };

/* The online softmax over tiles of keys (FlashAttention's recurrence): the
 * tile's scores, its max, the running sums rescaled once per tile. A tile is
 * up to cap keys: KEY_TILE rows read in place (f32), or CONV_TILE rows
 * converted into conv. acc [head_dim] and conv [CONV_TILE][head_dim]: the
 * thread's workspace. */
typedef struct sink_state {
    float m, l;
    float *acc;
    const float *key[KEY_TILE];
    int n, cap;
    float *conv;
} sink_state;

static inline __attribute__((always_inline)) void tile_flush(sink_state *st, const float *qh,
                                                             int64_t d, float scale)
{
    float s[KEY_TILE], mt = -INFINITY;
    for (int j = 0; j < st->n; j++) {
        s[j] = dot(qh, st->key[j], d) * scale;
        if (s[j] > mt) mt = s[j];
    }
    if (mt > st->m) {
        float r = expf(st->m - mt);
        for (int64_t i = 0; i < d; i++) st->acc[i] *= r;
        st->l *= r;
        st->m = mt;
    }
    /* (every score so far -inf: weights e^(-inf - 0) = 0, not NaN) */
    const float shift = st->m == -INFINITY ? 0.0f : st->m;
    for (int j = 0; j < st->n; j++) {
        float p = expf(s[j] - shift);
        const float *v = st->key[j];
        st->l += p;
        for (int64_t i = 0; i < d; i++) st->acc[i] += p * v[i];
    }
    st->n = 0;
}

static inline __attribute__((always_inline)) void tile_add(sink_state *st, const float *key,
                                                           const float *qh, int64_t d, float scale)
{
    st->key[st->n++] = key;
    if (st->n == st->cap) tile_flush(st, qh, d, scale);
}

/* The key rows a query sees, in the order sink_head adds them: its window
 * (oldest first), then its compressed entries (the indexer's choice when sel,
 * else every entry complete by pos). */
typedef struct sink_cursor {
    int64_t kp, end; /* the next window position, the last it sees */
    int64_t e, n_e;  /* the next entry (or sel slot), their end */
} sink_cursor;

static sink_cursor sink_begin(const sink_ctx *c, int64_t t)
{
    const int64_t pos = c->pos[t];
    sink_cursor u = {pos - c->window + 1 > 0 ? pos - c->window + 1 : 0, c->last ? c->last[t] : pos,
                     0, 0};
    if (c->comp && c->sel) {
        u.n_e = c->k;
    } else if (c->comp) {
        u.n_e = (pos + 1) / c->rate;
        if (u.n_e > c->n_comp) u.n_e = c->n_comp;
    }
    return u;
}

/* The next key row (as stored), or NULL after the last. */
static const char *sink_next(const sink_ctx *c, int64_t t, sink_cursor *u)
{
    if (u->kp <= u->end) return c->win + (size_t)(u->kp++ % c->win_ring) * c->row_bytes;
    while (u->e < u->n_e) {
        int64_t e = u->e++;
        if (c->sel) e = c->sel[t * c->k + e];
        if (e >= 0 && e < c->n_comp) return c->comp + (size_t)e * c->row_bytes;
    }
    return NULL;
}

/* The sink joins row h's softmax denominator only; o = acc / l. */
static void sink_finish(float sink, float m, float l, const float *acc, int64_t d, float *o)
{
    float r = 1.0f;
    if (sink > m) {
        r = expf(m - sink);
        l *= r;
        m = sink;
    }
    l += expf(sink - m);
    for (int64_t i = 0; i < d; i++) o[i] = acc[i] * r / l;
}

V4_CLONES static void sink_head(void *p, int64_t task, int thread)
{
    const sink_ctx *c = p;
    const int64_t t = task / c->n_head, h = task % c->n_head, d = c->head_dim;
    const float *qh = c->q + (t * c->n_head + h) * d;
    sink_state st;
    st.acc = cpu_threadpool_scratch(c->pool, thread);
    st.conv = st.acc + (d + 15) / 16 * 16;
    st.m = -INFINITY;
    st.l = 0.0f;
    st.n = 0;
    st.cap = c->dtype == MODEL_DTYPE_F32 ? KEY_TILE : CONV_TILE;
    memset(st.acc, 0, (size_t)d * sizeof *st.acc);
    sink_cursor u = sink_begin(c, t);
    for (const char *row; (row = sink_next(c, t, &u));)
        tile_add(&st, row_f32(row, c->load, c->dtype, c->rotated, d, st.conv + (ptrdiff_t)st.n * d),
                 qh, d, c->scale);
    if (st.n) tile_flush(&st, qh, d, c->scale);
    sink_finish(c->sinks[h], st.m, st.l, st.acc, d, c->out + (t * c->n_head + h) * d);
}

#ifdef V4_AVX2

/* The heads of one token in tiles of up to SINK_TILE with AVX2 and FMA, where
 * head_dim is a multiple of 32 up to SINK_MAX_D (V4-Flash: 512; one key-value head that
 * every query head reads): each chunk of 16 keys gathered and transposed once
 * for the tile, the scores of four heads at a time as 16-wide products, the
 * online softmax (softmax_step16), then P V two heads at a time with each key
 * load shared. A row's arithmetic is its own (the same whatever the tile or
 * the batch); its sums are in another order than sink_head's. */
enum { SINK_TILE = 16, SINK_CHUNK = 16, SINK_MAX_D = 512 };

/* ws: the thread's workspace, 64-byte aligned: the chunk's keys
 * [SINK_CHUNK][d], their K^T [d][SINK_CHUNK] and the tile's queries rotated
 * [SINK_TILE][d], f32. */
AVX2 static void sink_tile_avx2(const sink_ctx *c, int64_t t, int h0, int rows, float *ws)
{
    const int64_t d = c->head_dim;
    float *kc = ws, *kt = ws + SINK_CHUNK * d, *qrot = kt + SINK_CHUNK * d;
    const float *qa = c->q + (t * c->n_head + h0) * d;
    if (c->rotated) { /* q H . k H = q . k; the output, a sum of rotated values, rotated back */
        memcpy(qrot, qa, sizeof(float) * (size_t)rows * (size_t)d);
        for (int r = 0; r < rows; r++) cpu_kv_rotate(qrot + (ptrdiff_t)r * d, d);
        qa = qrot;
    }
    float *out = c->out + (t * c->n_head + h0) * d;
    _Alignas(32) float sc[SINK_TILE * SINK_CHUNK], p[SINK_TILE * SINK_CHUNK];
    float m[SINK_TILE], l[SINK_TILE], corr[SINK_TILE];
    for (int r = 0; r < rows; r++) m[r] = -INFINITY, l[r] = 0.0f;
    memset(out, 0, sizeof(float) * (size_t)rows * (size_t)d);
    sink_cursor u = sink_begin(c, t);
    for (;;) {
        int len = 0;
        for (const char *key; len < SINK_CHUNK && (key = sink_next(c, t, &u)); len++) {
            load_kv_row(c->dtype, key, d, kc + (ptrdiff_t)len * d);
        }
        if (len == 0) break;
        if (len < SINK_CHUNK)
            memset(kc + (ptrdiff_t)len * d, 0, sizeof(float) * (size_t)((SINK_CHUNK - len) * d));
        transpose_chunk16(kc, d, d, kt);
        for (ptrdiff_t r0 = 0; r0 < rows; r0 += 4)
            scores4x16(kt, qa + r0 * d, d, rows - r0 < 4 ? (int)(rows - r0) : 4, d, c->scale,
                       sc + r0 * SINK_CHUNK);
        softmax_pv16(sc, len, rows, m, l, corr, p, out, d, kc, d, d);
    }
    for (int r = 0; r < rows; r++) {
        sink_finish(c->sinks[h0 + r], m[r], l[r], out + (ptrdiff_t)r * d, d,
                    out + (ptrdiff_t)r * d);
        if (c->rotated) cpu_kv_rotate(out + (ptrdiff_t)r * d, d);
    }
}

/* A task is one token's heads [h0, h0 + SINK_TILE). */
static void sink_tile_task(void *p, int64_t task, int thread)
{
    const sink_ctx *c = p;
    const int tiles = (c->n_head + SINK_TILE - 1) / SINK_TILE;
    const int64_t t = task / tiles;
    const int h0 = (int)(task % tiles) * SINK_TILE;
    const int rows = c->n_head - h0 < SINK_TILE ? c->n_head - h0 : SINK_TILE;
    sink_tile_avx2(c, t, h0, rows, cpu_threadpool_scratch(c->pool, thread));
}

static int sink_tile_applies(int64_t head_dim)
{
    return cpu_has_avx2() && head_dim % 32 == 0 && head_dim <= SINK_MAX_D;
}
#endif

/* The sink attention's workspace a thread, floats: sink_tile_avx2's where
 * the tile applies, else sink_head's acc (whole 64-byte lines) and conv. */
static int64_t sink_ws_floats(int64_t head_dim)
{
#ifdef V4_AVX2
    if (sink_tile_applies(head_dim)) return (2 * SINK_CHUNK + SINK_TILE) * head_dim;
#endif
    return (head_dim + 15) / 16 * 16 + CONV_TILE * head_dim;
}

size_t cpu_v4_scratch_bytes(void)
{
    /* the sink tile at SINK_MAX_D, the per-head walk at HEAD_MAX; the
     * indexer's rotated query and tiled chunks */
    int64_t most = (int64_t)HEAD_MAX + (int64_t)CONV_TILE * HEAD_MAX, indexer = QROT_MAX;
#ifdef V4_AVX2
    if ((2 * SINK_CHUNK + SINK_TILE) * (int64_t)SINK_MAX_D > most)
        most = (2 * SINK_CHUNK + SINK_TILE) * (int64_t)SINK_MAX_D;
    indexer += (int64_t)2 * IDX_CHUNK * IDX_MAX_D;
#endif
    return (size_t)(most > indexer ? most : indexer) * sizeof(float);
}

di_status cpu_sink_attention(cpu_threadpool *pool, const float *q, int n_head, int64_t head_dim,
                             int64_t n, const int64_t *pos, const int64_t *last, const void *win,
                             int64_t win_ring, int window, const void *comp, int64_t n_comp,
                             int rate, const int32_t *sel, int k, model_dtype dtype,
                             const float *sinks, float scale, float *out)
{
    if (head_dim > HEAD_MAX) return DI_ERR_INVALID_ARGUMENT; /* checked at load */
    sink_ctx c = {.q = q,
                  .sinks = sinks,
                  .win = win,
                  .comp = comp,
                  .dtype = dtype,
                  .load = row_loader(dtype, head_dim),
                  .row_bytes = cpu_row_bytes((int)dtype, head_dim),
                  .rotated = cpu_kv_rotates(dtype, head_dim),
                  .n_head = n_head,
                  .window = window,
                  .rate = rate,
                  .k = k,
                  .head_dim = head_dim,
                  .win_ring = win_ring,
                  .n_comp = n_comp,
                  .pos = pos,
                  .last = last,
                  .sel = sel,
                  .scale = scale,
                  .out = out,
                  .pool = pool};
    di_status st = cpu_threadpool_reserve(pool, (size_t)sink_ws_floats(head_dim) * sizeof(float));
    if (st != DI_OK) return st;
#ifdef V4_AVX2
    if (sink_tile_applies(head_dim)) {
        const int tiles = (n_head + SINK_TILE - 1) / SINK_TILE;
        cpu_threadpool_run(pool, n * tiles, sink_tile_task, &c);
        return DI_OK;
    }
#endif
    cpu_threadpool_run(pool, n * n_head, sink_head, &c);
    return DI_OK;
}
