/* top_k and top_p's selection by buckets of logit distance (select.h). */
#include "sampler/select.h"

#include <math.h>
#include <string.h>

#include "sampler/exp_rows.h"

typedef sampler_candidate candidate;

/* The partial sums' loop unrolled: GCC keeps an array indexed by a loop
 * variable in memory, a chain through store and load (the scans' loops are
 * left to the vectorizer, which the unrolling would pre-empt). */
#define UNROLL _Pragma("GCC unroll 16")

/* Buckets: SPAN logits below the max in STEPS a logit, then one for the rest
 * (and for -inf and NaN). EXP_BLOCK: weights computed a block at a time.
 * SMALL: heads sorted by insertion. */
enum {
    SPAN = 64,
    STEPS = 16,
    BUCKETS = SPAN * STEPS + 1,
    EXP_BLOCK = 256,
    SMALL = 32,
    LANES = 8,    /* the total's partial sums */
    SCAN = 16,    /* the scans' blocks (a constant count: vectorized) */
    HEAP_K = 256, /* top_k up to this: a bounded heap; above, buckets */
};

double sampler_select_margin = 1e-9;

/* The bucket of a logit: monotone (a higher logit never has a later one),
 * as max - logit rounds monotonically and the product by STEPS is exact. */
static inline int bucket_of(float logit, float max)
{
    const float d = max - logit;
    return d < (float)SPAN ? (int)(d * (float)STEPS) : BUCKETS - 1;
}

/* The candidates' order: descending logit, then ascending id (a total order,
 * so what is kept never depends on how it was found). */
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
    double e[EXP_BLOCK], acc = 0.0;
    *reached = 1;
    for (int32_t i0 = 0; i0 < n; i0 += EXP_BLOCK) {
        const int32_t nb = n - i0 < EXP_BLOCK ? n - i0 : EXP_BLOCK;
        sampler_exp_candidates(s + i0, max, e, nb);
        for (int32_t j = 0; j < nb; j++) {
            acc += e[j];
            if (acc >= thr) return i0 + j + 1;
        }
    }
    *reached = 0;
    return n;
}

/* The total of exp(x[i] - max) over x[0, n) (select.h's order: LANES
 * partial sums, element i to sum i % LANES in id order, then added in pairs)
 * and each bucket's weight into mass. */
static double bucket_weights(const float *x, int32_t n, float max, double *mass)
{
    double e[EXP_BLOCK], part[LANES] = {0};
    int32_t b[EXP_BLOCK];
    for (int32_t i0 = 0; i0 < n; i0 += EXP_BLOCK) { /* (EXP_BLOCK a multiple of LANES) */
        const int32_t nb = n - i0 < EXP_BLOCK ? n - i0 : EXP_BLOCK;
        sampler_exp_shifted(x + i0, max, e, nb);
        for (int32_t j = 0; j < nb; j++) b[j] = bucket_of(x[i0 + j], max);
        int32_t j = 0;
        for (; j + LANES <= nb; j += LANES)
            UNROLL for (int l = 0; l < LANES; l++) part[l] += e[j + l];
        for (; j < nb; j++) part[j % LANES] += e[j];
        for (j = 0; j < nb; j++) mass[b[j]] += e[j];
    }
    return ((part[0] + part[1]) + (part[2] + part[3])) +
           ((part[4] + part[5]) + (part[6] + part[7]));
}

/* x[0, n)'s candidates of buckets up to last (all where last is the final
 * bucket) into buf, in id order; their count. Bucket <= last is
 * max - x < (last + 1) / STEPS: the product by STEPS is exact and the
 * truncation of a non-negative value is below last + 1 exactly then. */
static int32_t gather(const float *x, int32_t n, float max, int last, candidate *buf)
{
    int32_t m = 0;
    if (last == BUCKETS - 1) {
        for (int32_t i = 0; i < n; i++) buf[i] = (candidate){x[i], i};
        return n;
    }
    const float lim = (float)(last + 1) / (float)STEPS;
    int32_t i = 0;
    for (; i + SCAN <= n; i += SCAN) {
        int any = 0;
        for (int j = 0; j < SCAN; j++) any |= max - x[i + j] < lim;
        if (any)
            for (int j = 0; j < SCAN; j++)
                if (max - x[i + j] < lim) buf[m++] = (candidate){x[i + j], i + j};
    }
    for (; i < n; i++)
        if (max - x[i] < lim) buf[m++] = (candidate){x[i], i};
    return m;
}

/* Restore the heap property (the worst of the order at h[0]) below i. */
static void sift_worst(candidate *h, int32_t n, int32_t i)
{
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && before(&h[w], &h[l])) w = l;
        if (r < n && before(&h[w], &h[r])) w = r;
        if (w == i) return;
        candidate t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* x[at] into the heap buf[0, k) where it is better than the worst, while
 * *budget lasts: 0 once it has run out. */
static inline int heap_enter(const float *x, int32_t at, candidate *buf, int32_t k, int32_t *budget)
{
    if (!(x[at] > buf[0].logit)) return 1;
    if (--*budget < 0) return 0;
    buf[0] = (candidate){x[at], at};
    sift_worst(buf, k, 0);
    return 1;
}

/* The first k of the order among x[0, n) (0 < k < n) into buf[0, k), in no
 * order: a heap of the k best so far, its worst on top, and a scan in id
 * order that lets in a value above the worst (a later id at an equal value
 * comes after it), SCAN values compared at a time. A row whose values rise
 * with the id lets in nearly every one (O(n log k)): past n / 16 + k entries
 * it gives up and returns 0 (the buckets then), else 1. */
static int top_k_heap(const float *x, int32_t n, int32_t k, candidate *buf)
{
    for (int32_t i = 0; i < k; i++) buf[i] = (candidate){x[i], i};
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_worst(buf, k, i);
    int32_t i = k, budget = n / 16 + k;
    for (; i < n && i % SCAN; i++)
        if (!heap_enter(x, i, buf, k, &budget)) return 0;
    for (; i + SCAN <= n; i += SCAN) {
        const float worst = buf[0].logit;
        int any = 0;
        for (int j = 0; j < SCAN; j++) any |= x[i + j] > worst;
        if (any)
            for (int j = 0; j < SCAN; j++)
                if (!heap_enter(x, i + j, buf, k, &budget)) return 0;
    }
    for (; i < n; i++)
        if (!heap_enter(x, i, buf, k, &budget)) return 0;
    return 1;
}

int32_t sampler_select(const float *x, int32_t n, float max, int32_t top_k, float top_p,
                       candidate *buf, candidate *tmp, candidate **kept)
{
    const int use_k = top_k > 0 && top_k < n, use_p = top_p < 1.0f;
    int reached;
    if (use_k) {
        candidate *s;
        if (top_k <= HEAP_K && top_k_heap(x, n, top_k, buf)) {
            /* the heap, then its worst to the end in turn */
            for (int32_t end = top_k - 1; end > 0; end--) {
                candidate t = buf[0];
                buf[0] = buf[end];
                buf[end] = t;
                sift_worst(buf, end, 0);
            }
            s = buf;
        } else { /* the buckets that hold top_k, sorted */
            int32_t count[BUCKETS] = {0}, seen = 0;
            int last = BUCKETS - 1;
            for (int32_t i = 0; i < n; i++) count[bucket_of(x[i], max)]++;
            if (isfinite(max))
                for (last = 0; last < BUCKETS - 1 && (seen += count[last]) < top_k; last++)
                    continue;
            s = sort_head(buf, tmp, gather(x, n, max, last, buf));
        }
        *kept = s;
        if (!use_p) return top_k;
        double sum = 0.0; /* top_p over top_k's total */
        for (int32_t i = 0; i < top_k; i++) sum += exp((double)(s[i].logit - max));
        return head_reaching(s, top_k, max, (double)top_p * sum, &reached);
    }
    if (!use_p) { /* no limit: every candidate, in the order */
        *kept = sort_head(buf, tmp, gather(x, n, max, BUCKETS - 1, buf));
        return n;
    }
    /* top_p: the buckets that reach its weight (a margin for the summation
     * order), their head sorted; every bucket (last BUCKETS - 1) where max
     * is not finite and the distances mean nothing */
    double mass[BUCKETS] = {0}, acc = 0.0;
    const double total = bucket_weights(x, n, max, mass), thr = (double)top_p * total,
                 want = thr * (1.0 + sampler_select_margin);
    int last = BUCKETS - 1;
    if (isfinite(max))
        for (last = 0; last < BUCKETS - 1 && (acc += mass[last]) < want; last++) continue;
    for (;;) {
        const int32_t m = gather(x, n, max, last, buf);
        candidate *s = *kept = sort_head(buf, tmp, m);
        if (isnan(thr)) return m > 0 ? 1 : 0; /* (a +inf: the total is NaN; the heap kept one) */
        const int32_t k = head_reaching(s, m, max, thr, &reached);
        /* short of thr where the head's buckets reached it (rounding: the
         * buckets' sum is in another order), every bucket; short of it even
         * then, every candidate is kept, as a full sort keeps them */
        if (reached || last == BUCKETS - 1) return k;
        last = BUCKETS - 1;
    }
}
