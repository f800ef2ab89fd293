/* The attention kernels' chunk step with a row in each AVX-512 lane
 * (attention_flash_rows512.c's prefill tiles, attention_mla.c's latent tiles): for a
 * chunk of 16 keys and up to ROWS512_TILES tiles of up to 16 rows (query heads
 * x tokens), the scores S^T (a vector over a tile's rows for each key) from
 * the rows' queries held transposed, each key's values broadcast once for all
 * the tiles; then for each tile the online softmax down the keys (max, e^x and
 * softmax_step16's sum tree on vectors: no horizontal step, one e^x for 16
 * rows' rescales) and O = O corr + P V, each V load shared by up to six rows.
 * Each row's operations and their order are the AVX2 step's (avx2_math.h: a
 * score's fused multiply-adds over the dimensions then the scale,
 * softmax_step16, O's multiply-adds over the keys), so the results are
 * bit-identical to it and a caller may take either for any row. Why tiles
 * together and groups of six: on the Xeons measured (bench/README.md,
 * attention_bench, session 49) FMAs that each need a load of their own (a
 * broadcast or a vector) ran at about half the FMA ports' rate, so each load
 * feeds two or more FMAs here. x86-64 with GCC or Clang; callers check for
 * AVX-512F (cpu_has_avx512_vnni implies it). */
#ifndef DI_BACKEND_CPU_AVX512_ROWS_H
#define DI_BACKEND_CPU_AVX512_ROWS_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include "backend/cpu/avx2_math.h"

#    define AVX512 __attribute__((target("avx2,fma,f16c,avx512f")))

/* ROWS512_SCORES: the floats of rows_chunk512's scores buffer, [tile][key][16]. */
enum { ROWS512_KEYS = 16, ROWS512_TILES = 4, ROWS512_SCORES = ROWS512_TILES * ROWS512_KEYS * 16 };

/* e^x for 16 lanes: exp_ps's steps lane for lane. */
AVX512 static inline __m512 exp512(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.3f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_max_ps(lo, x); /* (x second: a NaN lane stays NaN) */
    x = _mm512_min_ps(_mm512_set1_ps(88.3f), x);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

/* Rows' o[0, 16 nv) = o corr + sum_i p[i ps] v[i ld + (0, 16 nv)] over i < valid
 * (nr rows of the same valid count, nr nv <= 24 registers), in key order, each
 * V load shared by the rows. */
AVX512 __attribute__((always_inline)) static inline void pv512(float *const *o, const float *corr,
                                                               const float *const *p, ptrdiff_t ps,
                                                               const float *v, ptrdiff_t ld,
                                                               int valid, int nr, int nv)
{
    __m512 acc[24];
    UNROLL for (int r = 0; r < 6; r++) if (r < nr)
    {
        const __m512 c = _mm512_set1_ps(corr[r]);
        UNROLL for (int k = 0; k < 8; k++) if (k < nv) acc[r * nv + k] =
            _mm512_mul_ps(_mm512_loadu_ps(o[r] + (ptrdiff_t)16 * k), c);
    }
    for (ptrdiff_t i = 0; i < valid; i++) {
        __m512 vv[8];
        UNROLL for (int k = 0; k < 8; k++) if (k < nv) vv[k] =
            _mm512_loadu_ps(v + i * ld + (ptrdiff_t)16 * k);
        UNROLL for (int r = 0; r < 6; r++) if (r < nr)
        {
            const __m512 pi = _mm512_set1_ps(p[r][i * ps]);
            UNROLL for (int k = 0; k < 8; k++) if (k < nv) acc[r * nv + k] =
                _mm512_fmadd_ps(pi, vv[k], acc[r * nv + k]);
        }
    }
    UNROLL for (int r = 0; r < 6; r++) if (r < nr) UNROLL for (int k = 0; k < 8; k++) if (k < nv)
        _mm512_storeu_ps(o[r] + (ptrdiff_t)16 * k, acc[r * nv + k]);
}

/* Each P V shape its own function, not inlined into the chunk step: the
 * shapes' accumulators never share one frame, so a sanitizer build (which
 * keeps every inlined array's stack slot apart: 58 KiB for the chunk step
 * with them inlined) stays within a small host stack
 * (tests/unit/test_small_host_stack.c). */
#    define PV512_SHAPE(nr, nv_)                                                                   \
        AVX512 __attribute__((noinline)) static void pv512_##nr##x##nv_(                           \
            float *const *o, const float *corr, const float *const *p, ptrdiff_t ps,               \
            const float *v, ptrdiff_t ld, int valid)                                               \
        {                                                                                          \
            pv512(o, corr, p, ps, v, ld, valid, nr, nv_);                                          \
        }
PV512_SHAPE(6, 4)
PV512_SHAPE(6, 2)
PV512_SHAPE(6, 1)
PV512_SHAPE(5, 4)
PV512_SHAPE(5, 2)
PV512_SHAPE(5, 1)
PV512_SHAPE(4, 4)
PV512_SHAPE(4, 2)
PV512_SHAPE(4, 1)
PV512_SHAPE(3, 4)
PV512_SHAPE(3, 2)
PV512_SHAPE(3, 1)
PV512_SHAPE(2, 8)
PV512_SHAPE(2, 4)
PV512_SHAPE(2, 2)
PV512_SHAPE(2, 1)
PV512_SHAPE(1, 8)
PV512_SHAPE(1, 4)
PV512_SHAPE(1, 2)
PV512_SHAPE(1, 1)
#    undef PV512_SHAPE

/* O = O corr + P V for up to 16 rows (row r's output at o + r ostride, its
 * weight for key i at p[r pr + i ps], its keys valid[r]: none, row left
 * alone): a run of rows with the same keys in groups of at most six, as even
 * as they come (15: 5, 5, 5), each V load shared by a group; as many of the
 * hd dims (a multiple of 16) a pass as the registers hold (8 vectors for one
 * or two rows, 4 for three to six). */
AVX512 static inline void pv_rows512(float *o0, ptrdiff_t ostride, int rows, const int *valid,
                                     const float *corr, const float *p, ptrdiff_t ps, ptrdiff_t pr,
                                     const float *v, ptrdiff_t ld, ptrdiff_t hd)
{
    for (ptrdiff_t r = 0; r < rows;) {
        if (valid[r] <= 0) {
            r++;
            continue;
        }
        int run = 1; /* rows from r with its keys */
        while (r + run < rows && valid[r + run] == valid[r]) run++;
        const int groups = (run + 5) / 6, n = (run + groups - 1) / groups;
        float *o[6];
        const float *pp[6];
        float cr[6];
        for (int k = 0; k < n; k++)
            o[k] = o0 + (r + k) * ostride, pp[k] = p + (r + k) * pr, cr[k] = corr[r + k];
        for (ptrdiff_t d0 = 0; d0 < hd;) {
            float *od[6];
            for (int k = 0; k < 6; k++) od[k] = k < n ? o[k] + d0 : NULL;
            const ptrdiff_t left = (hd - d0) / 16;
            const int nv = left >= 8 && n <= 2 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
            switch (n * 16 + nv) { /* each shape its own code */
#    define PV512_CASE(nr, nv_)                                                                    \
    case (nr)*16 + (nv_): pv512_##nr##x##nv_(od, cr, pp, ps, v + d0, ld, valid[r]); break
                PV512_CASE(6, 4);
                PV512_CASE(6, 2);
                PV512_CASE(6, 1);
                PV512_CASE(5, 4);
                PV512_CASE(5, 2);
                PV512_CASE(5, 1);
                PV512_CASE(4, 4);
                PV512_CASE(4, 2);
                PV512_CASE(4, 1);
                PV512_CASE(3, 4);
                PV512_CASE(3, 2);
                PV512_CASE(3, 1);
                PV512_CASE(2, 8);
                PV512_CASE(2, 4);
                PV512_CASE(2, 2);
                PV512_CASE(2, 1);
                PV512_CASE(1, 8);
                PV512_CASE(1, 4);
                PV512_CASE(1, 2);
#    undef PV512_CASE
            default: pv512_1x1(od, cr, pp, ps, v + d0, ld, valid[r]); break;
            }
            d0 += (ptrdiff_t)16 * nv;
        }
        r += n;
    }
}

/* The scores of nt tiles for a chunk of 16 keys: s[t 16 + i] = scale
 * (qt[t] . krow[i]) over the d dims in order, kq keys a pass (nt kq <= 24
 * registers), so that each key's value broadcast serves nt tiles. */
AVX512 __attribute__((always_inline)) static inline void scores512(const float *const *krow,
                                                                   ptrdiff_t d,
                                                                   const float *const *qt, int nt,
                                                                   int kq, __m512 sv, __m512 *s)
{
    for (int k0 = 0; k0 < ROWS512_KEYS; k0 += kq) {
        __m512 acc[24];
        UNROLL for (int t = 0; t < ROWS512_TILES; t++) if (t < nt)
            UNROLL for (int k = 0; k < 8; k++) if (k < kq) acc[t * kq + k] = _mm512_setzero_ps();
        for (ptrdiff_t d0 = 0; d0 < d; d0 += 4) {
            UNROLL for (int e = 0; e < 4; e++)
            {
                __m512 qd[ROWS512_TILES];
                UNROLL for (int t = 0; t < ROWS512_TILES; t++) if (t < nt) qd[t] =
                    _mm512_loadu_ps(qt[t] + (d0 + e) * 16);
                UNROLL for (int k = 0; k < 8; k++) if (k < kq)
                {
                    const __m512 b = _mm512_set1_ps(krow[k0 + k][d0 + e]);
                    UNROLL for (int t = 0; t < ROWS512_TILES; t++) if (t < nt) acc[t * kq + k] =
                        _mm512_fmadd_ps(b, qd[t], acc[t * kq + k]);
                }
            }
        }
        UNROLL for (int t = 0; t < ROWS512_TILES; t++) if (t < nt)
            UNROLL for (int k = 0; k < 8; k++) if (k < kq) s[t * ROWS512_KEYS + k0 + k] =
                _mm512_mul_ps(acc[t * kq + k], sv);
    }
}

/* Each tile count its own function, for P V's reason above. */
#    define SCORES512_SHAPE(nt, kq)                                                                \
        AVX512 __attribute__((noinline)) static void scores512_##nt(                               \
            const float *const *krow, ptrdiff_t d, const float *const *qt, __m512 sv, __m512 *s)   \
        {                                                                                          \
            scores512(krow, d, qt, nt, kq, sv, s);                                                 \
        }
SCORES512_SHAPE(4, 4)
SCORES512_SHAPE(3, 8)
SCORES512_SHAPE(2, 8)
SCORES512_SHAPE(1, 8)
#    undef SCORES512_SHAPE

/* One tile's online-softmax step and P V for a chunk of 16 keys, from its
 * scores s[16] (a vector over the rows for each key, 64-byte aligned memory;
 * they become the weights P): valid[r] the keys row r
 * sees (the chunk's first valid[r]; 0: its state stays, and for the lanes
 * past the tile's rows), *m and *l the rows' running max and sum (a lane a
 * row); row r's unnormalized output O (hd dims at o + r ostride) becomes
 * O e^(m - m') + P V over v's rows (ld floats apart). */
AVX512 static inline void rows_softmax_pv512(__m512 *s, const int *valid, __m512 *m, __m512 *l,
                                             float *o, ptrdiff_t ostride, const float *v,
                                             ptrdiff_t ld, ptrdiff_t hd)
{
    const __m512i vv = _mm512_loadu_si512(valid);
    const __mmask16 act = _mm512_cmpgt_epi32_mask(vv, _mm512_setzero_si512());
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    __mmask16 nan = _mm512_cmp_ps_mask(*m, *m, _CMP_UNORD_Q);
    UNROLL for (int n = 0; n < ROWS512_KEYS; n++)
    {
        s[n] = _mm512_mask_mov_ps(ninf, _mm512_cmpgt_epi32_mask(vv, _mm512_set1_epi32(n)), s[n]);
        mx = _mm512_max_ps(mx, s[n]);
        nan |= _mm512_cmp_ps_mask(s[n], s[n], _CMP_UNORD_Q);
    }
    /* (rows that see no key: -inf, unused); a NaN score, now or before: NaN,
     * as softmax_step16 */
    const __m512 mnew = _mm512_mask_mov_ps(_mm512_max_ps(mx, *m), nan, _mm512_set1_ps(NAN));
    /* rows whose scores so far are all -inf: x - 0, as softmax_step16 */
    const __m512 shift =
        _mm512_mask_mov_ps(mnew, _mm512_cmp_ps_mask(mnew, ninf, _CMP_EQ_OQ), _mm512_setzero_ps());
    const __m512 corr = exp512(_mm512_sub_ps(*m, shift));
    _Alignas(64) float cr[16];
    __m512 w[8];
    UNROLL for (int n = 0; n < ROWS512_KEYS; n++) s[n] = exp512(_mm512_sub_ps(s[n], shift));
    /* softmax_step16's tree: v_i = p_i + p_i+8, t_i = v_i + v_i+4,
     * (t_0 + t_2) + (t_1 + t_3) */
    UNROLL for (int i = 0; i < 8; i++) w[i] = _mm512_add_ps(s[i], s[i + 8]);
    UNROLL for (int i = 0; i < 4; i++) w[i] = _mm512_add_ps(w[i], w[i + 4]);
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(w[0], w[2]), _mm512_add_ps(w[1], w[3]));
    *l = _mm512_mask_mov_ps(*l, act, _mm512_add_ps(_mm512_mul_ps(*l, corr), sum));
    *m = _mm512_mask_mov_ps(*m, act, mnew);
    _mm512_store_ps(cr, corr);
    pv_rows512(o, ostride, 16, valid, cr, (const float *)s, 16, 1, v, ld, hd); /* P: s now */
}

/* One chunk of 16 keys for nt (1 to ROWS512_TILES) tiles of up to 16 rows
 * each: krow[i] key i's d values (d a multiple of 4; finite, zeros past the
 * keys), qt[t] [d][16] tile t's queries transposed (zero past its rows), then
 * tile t's rows_softmax_pv512 with valid[t], m[t], l[t] and o[t]. The scores
 * of the tiles come from one walk of the keys (scores512), each key's values
 * broadcast once for all of them, into sc (ROWS512_SCORES floats, 64-byte
 * aligned: the caller's workspace, not the stack, which a host thread may
 * keep small). */
AVX512 static inline void rows_chunk512(const float *const *krow, ptrdiff_t d,
                                        const float *const *qt, int nt, float scale,
                                        const int *const *valid, __m512 *m, __m512 *l,
                                        float *const *o, ptrdiff_t ostride, const float *v,
                                        ptrdiff_t ld, ptrdiff_t hd, float *sc)
{
    __m512 *s = (__m512 *)sc;
    const __m512 sv = _mm512_set1_ps(scale);
    switch (nt) {
    case 4: scores512_4(krow, d, qt, sv, s); break;
    case 3: scores512_3(krow, d, qt, sv, s); break;
    case 2: scores512_2(krow, d, qt, sv, s); break;
    default: scores512_1(krow, d, qt, sv, s); break;
    }
    for (int t = 0; t < nt; t++)
        rows_softmax_pv512(s + (ptrdiff_t)t * ROWS512_KEYS, valid[t], &m[t], &l[t], o[t], ostride,
                           v, ld, hd);
}

/* qt [d][16] = the rows' queries q[r] (d values each) transposed, zero past
 * `rows`. */
static inline void rows_transpose_queries(const float *const *q, int rows, ptrdiff_t d, float *qt)
{
    for (ptrdiff_t e = 0; e < d; e++)
        for (int r = 0; r < 16; r++) qt[e * 16 + r] = r < rows ? q[r][e] : 0.0f;
}

#endif

#endif
