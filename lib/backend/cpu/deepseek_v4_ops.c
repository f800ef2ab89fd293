/* DeepSeek-V4's operations on the CPU (deepseek_v4_ops.h has the math). */
#include "backend/cpu/deepseek_v4_ops.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

enum { HC_MAX = 16, HEAD_MAX = 1024 };

static float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

void cpu_hc_pre(const float *mix, const float *base, const float *scale, int hc, int sinkhorn_iters,
                float eps, const float *x, int64_t n_embd, int64_t n, float *collapsed, float *post,
                float *comb)
{
    const int n_mix = post ? (2 + hc) * hc : hc;
    for (int64_t t = 0; t < n; t++) {
        const float *m = mix + t * n_mix, *xt = x + t * hc * n_embd;
        float pre[HC_MAX];
        for (int j = 0; j < hc; j++) pre[j] = sigmoidf(m[j] * scale[0] + base[j]) + eps;
        float *y = collapsed + t * n_embd;
        for (int64_t i = 0; i < n_embd; i++) {
            float s = 0.0f;
            for (int j = 0; j < hc; j++) s += pre[j] * xt[j * n_embd + i];
            y[i] = s;
        }
        if (!post) continue;
        float *pt = post + t * hc, *c = comb + t * hc * hc;
        for (int j = 0; j < hc; j++) pt[j] = 2.0f * sigmoidf(m[hc + j] * scale[1] + base[hc + j]);
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
                        float g = gate[row + ch] + bias[(int64_t)j * bias_stride + ch];
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

typedef struct indexer_ctx {
    const float *q, *w, *keys;
    int n_head, rate, k;
    int64_t head_dim, n_keys, scratch_stride;
    const int64_t *pos;
    float scale, w_scale;
    int32_t *sel;
    float *scratch;
} indexer_ctx;

static void indexer_row(void *p, int64_t t, int thread)
{
    const indexer_ctx *c = p;
    float *score = c->scratch + thread * c->scratch_stride;
    int64_t lim = (c->pos[t] + 1) / c->rate;
    if (lim > c->n_keys) lim = c->n_keys;
    const float *qt = c->q + t * c->n_head * c->head_dim, *wt = c->w + t * c->n_head;
    for (int64_t s = 0; s < lim; s++) {
        const float *ks = c->keys + s * c->head_dim;
        float total = 0.0f;
        for (int h = 0; h < c->n_head; h++) {
            const float *qh = qt + h * c->head_dim;
            float d = 0.0f;
            for (int64_t i = 0; i < c->head_dim; i++) d += qh[i] * ks[i];
            total += (d > 0.0f ? d * c->scale : 0.0f) * (wt[h] * c->w_scale);
        }
        score[s] = total;
    }
    int32_t *sel = c->sel + t * c->k;
    for (int i = 0; i < c->k; i++) {
        int64_t best = -1;
        for (int64_t s = 0; s < lim; s++)
            if (!isnan(score[s]) && (best < 0 || score[s] > score[best])) best = s;
        sel[i] = (int32_t)best;
        if (best >= 0) score[best] = NAN; /* taken */
    }
}

void cpu_indexer_topk(cpu_threadpool *pool, const float *q, const float *w, int n_head,
                      int64_t head_dim, int64_t n, const int64_t *pos, const float *keys,
                      int64_t n_keys, int rate, float scale, float w_scale, int k, int32_t *sel,
                      float *scratch, int64_t scratch_stride)
{
    indexer_ctx c = {q,   w,     keys,    n_head, rate,   k, head_dim, n_keys, scratch_stride,
                     pos, scale, w_scale, sel,    scratch};
    cpu_threadpool_run(pool, n, indexer_row, &c);
}

typedef struct sink_ctx {
    const float *q, *win, *comp, *sinks;
    int n_head, window, rate, k;
    int64_t head_dim, win_ring, n_comp;
    const int64_t *pos;
    const int32_t *sel;
    float scale;
    float *out;
} sink_ctx;

/* One key into the online softmax: m the running max, l the sum, acc the
 * weighted values (rescaled when the max grows). */
static void online_add(const float *qh, const float *key, int64_t d, float scale, float *m,
                       float *l, float *acc)
{
    float s = 0.0f;
    for (int64_t i = 0; i < d; i++) s += qh[i] * key[i];
    s *= scale;
    if (s > *m) {
        float r = expf(*m - s);
        for (int64_t i = 0; i < d; i++) acc[i] *= r;
        *l *= r;
        *m = s;
    }
    float p = expf(s - *m);
    *l += p;
    for (int64_t i = 0; i < d; i++) acc[i] += p * key[i];
}

static void sink_head(void *p, int64_t task, int thread)
{
    (void)thread;
    const sink_ctx *c = p;
    const int64_t t = task / c->n_head, h = task % c->n_head, d = c->head_dim, pos = c->pos[t];
    const float *qh = c->q + (t * c->n_head + h) * d;
    float acc[HEAD_MAX], m = -INFINITY, l = 0.0f;
    memset(acc, 0, (size_t)d * sizeof *acc);
    int64_t first = pos - c->window + 1 > 0 ? pos - c->window + 1 : 0;
    for (int64_t kp = first; kp <= pos; kp++)
        online_add(qh, c->win + (kp % c->win_ring) * d, d, c->scale, &m, &l, acc);
    if (c->comp && c->sel) {
        for (int i = 0; i < c->k; i++) {
            int32_t e = c->sel[t * c->k + i];
            if (e >= 0 && e < c->n_comp)
                online_add(qh, c->comp + (int64_t)e * d, d, c->scale, &m, &l, acc);
        }
    } else if (c->comp) {
        int64_t lim = (pos + 1) / c->rate;
        if (lim > c->n_comp) lim = c->n_comp;
        for (int64_t e = 0; e < lim; e++) online_add(qh, c->comp + e * d, d, c->scale, &m, &l, acc);
    }
    /* the sink joins the softmax's denominator only */
    float sink = c->sinks[h];
    if (sink > m) {
        float r = expf(m - sink);
        for (int64_t i = 0; i < d; i++) acc[i] *= r;
        l *= r;
        m = sink;
    }
    l += expf(sink - m);
    float *o = c->out + (t * c->n_head + h) * d;
    for (int64_t i = 0; i < d; i++) o[i] = acc[i] / l;
}

void cpu_sink_attention(cpu_threadpool *pool, const float *q, int n_head, int64_t head_dim,
                        int64_t n, const int64_t *pos, const float *win, int64_t win_ring,
                        int window, const float *comp, int64_t n_comp, int rate, const int32_t *sel,
                        int k, const float *sinks, float scale, float *out)
{
    if (head_dim > HEAD_MAX) return; /* checked at load */
    sink_ctx c = {q,        win,      comp,   sinks, n_head, window, rate, k,
                  head_dim, win_ring, n_comp, pos,   sel,    scale,  out};
    cpu_threadpool_run(pool, n * n_head, sink_head, &c);
}
