/* top_k and top_p's selection by buckets of logit distance (select.h). */
#include "sampler/select.h"

#include <math.h>
#include <string.h>

#include "sampler/exp_rows.h"

typedef sampler_candidate candidate;

/* Buckets: SPAN logits below the max in STEPS a logit, then one for the rest
 * (and for -inf and NaN). EXP_BLOCK: weights computed a block at a time.
 * SMALL: heads sorted by insertion. */
enum { SPAN = 64, STEPS = 16, BUCKETS = SPAN * STEPS + 1, EXP_BLOCK = 256, SMALL = 32 };

double sampler_select_margin = 1e-9;

/* The bucket of a logit: monotone (a higher logit never has a later one),
 * as max - logit rounds monotonically and the product by STEPS is exact. */
static inline int bucket_of(float logit, float max)
{
    const float d = max - logit;
    return d < (float)SPAN ? (int)(d * (float)STEPS) : BUCKETS - 1;
}

/* The order `before` in sampler.c: descending logit, then ascending id. */
static inline int before(const candidate *a, const candidate *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* A key whose ascending order is the logits' descending one: -0 as +0 (they
 * tie), NaN last. */
static inline uint32_t order_key(float f)
{
    if (f != f) return UINT32_MAX;
    if (f == 0.0f) f = 0.0f;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = u >> 31 ? ~u : u | 0x80000000u; /* ascending with the float */
    return ~u;
}

/* a[0, n) in the order; tmp: n more. Stable LSD radix over the keys' 32 bits
 * in digits of 11, 11 and 10 (a pass whose digit every key shares skipped),
 * so ties keep a's order: ascending id where a is in id order. Returns
 * whichever of a and tmp holds the result. */
static candidate *sort_head(candidate *a, candidate *tmp, int32_t n)
{
    if (n <= SMALL) {
        for (int32_t i = 1; i < n; i++) {
            candidate x = a[i];
            int32_t j = i;
            for (; j > 0 && before(&x, &a[j - 1]); j--) a[j] = a[j - 1];
            a[j] = x;
        }
        return a;
    }
    static const int shift[3] = {0, 11, 22};
    for (int pass = 0; pass < 3; pass++) {
        uint32_t count[2048] = {0};
        const int s = shift[pass];
        for (int32_t i = 0; i < n; i++) count[(order_key(a[i].logit) >> s) & 2047]++;
        if (count[(order_key(a[0].logit) >> s) & 2047] == (uint32_t)n) continue;
        uint32_t at = 0;
        for (int d = 0; d < 2048; d++) {
            uint32_t c = count[d];
            count[d] = at;
            at += c;
        }
        for (int32_t i = 0; i < n; i++) tmp[count[(order_key(a[i].logit) >> s) & 2047]++] = a[i];
        candidate *t = a;
        a = tmp, tmp = t;
    }
    return a;
}

/* How many of s[0, n) (in the order) the weights exp(logit - max), summed
 * in order, take to reach thr: *reached 1 and that count, or 0 and n (NaN
 * never reaches). */
static int32_t head_reaching(const candidate *s, int32_t n, float max, double thr, int *reached)
{
    float d[EXP_BLOCK];
    double e[EXP_BLOCK], acc = 0.0;
    *reached = 1;
    for (int32_t i0 = 0; i0 < n; i0 += EXP_BLOCK) {
        const int32_t nb = n - i0 < EXP_BLOCK ? n - i0 : EXP_BLOCK;
        for (int32_t j = 0; j < nb; j++) d[j] = s[i0 + j].logit - max;
        sampler_exp_rows(d, e, nb);
        for (int32_t j = 0; j < nb; j++) {
            acc += e[j];
            if (acc >= thr) return i0 + j + 1;
        }
    }
    *reached = 0;
    return n;
}

/* The sum of exp(logit - max) over c[0, n) in order, and each bucket's. */
static double bucket_weights(const candidate *c, int32_t n, float max, double *mass)
{
    float d[EXP_BLOCK];
    double e[EXP_BLOCK], total = 0.0;
    for (int32_t i0 = 0; i0 < n; i0 += EXP_BLOCK) {
        const int32_t nb = n - i0 < EXP_BLOCK ? n - i0 : EXP_BLOCK;
        for (int32_t j = 0; j < nb; j++) d[j] = c[i0 + j].logit - max;
        sampler_exp_rows(d, e, nb);
        for (int32_t j = 0; j < nb; j++) {
            total += e[j];
            mass[bucket_of(c[i0 + j].logit, max)] += e[j];
        }
    }
    return total;
}

int32_t sampler_select(const candidate *c, int32_t n, float max, int32_t top_k, float top_p,
                       candidate *buf, candidate *tmp, candidate **kept)
{
    const int use_k = top_k > 0 && top_k < n, use_p = top_p < 1.0f;
    /* last: the deepest bucket gathered (BUCKETS - 1: every candidate, where
     * max is not finite and the distances mean nothing) */
    int last = BUCKETS - 1;
    double total = 0.0;
    if (use_k) {
        int32_t count[BUCKETS] = {0}, seen = 0;
        for (int32_t i = 0; i < n; i++) count[bucket_of(c[i].logit, max)]++;
        if (isfinite(max))
            for (last = 0; last < BUCKETS - 1 && (seen += count[last]) < top_k; last++) continue;
    } else if (use_p) {
        double mass[BUCKETS] = {0}, acc = 0.0;
        total = bucket_weights(c, n, max, mass);
        const double want = (double)top_p * total * (1.0 + sampler_select_margin);
        if (isfinite(max))
            for (last = 0; last < BUCKETS - 1 && (acc += mass[last]) < want; last++) continue;
    }
    for (;;) {
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (last == BUCKETS - 1 || bucket_of(c[i].logit, max) <= last) buf[m++] = c[i];
        candidate *s = sort_head(buf, tmp, m);
        *kept = s;
        int reached;
        if (use_k) { /* top_k, then top_p over its total */
            if (!use_p) return top_k;
            double sum = 0.0;
            for (int32_t i = 0; i < top_k; i++) sum += exp((double)(s[i].logit - max));
            return head_reaching(s, top_k, max, (double)top_p * sum, &reached);
        }
        if (!use_p) return m;
        const double thr = (double)top_p * total;
        if (isnan(thr)) return m > 0 ? 1 : 0; /* (NaN logits: the first, as the heap did) */
        const int32_t k = head_reaching(s, m, max, thr, &reached);
        /* short of thr where the head's buckets reached it (rounding: the
         * buckets' sum is in another order), every bucket; short of it even
         * then, every candidate is kept, as the heap kept them */
        if (reached || last == BUCKETS - 1) return k;
        last = BUCKETS - 1;
    }
}
