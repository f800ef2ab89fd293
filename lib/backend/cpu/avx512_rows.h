/* The attention kernels' chunk step with a row in each AVX-512 lane
 * (attention_flash.c's prefill tiles, attention_mla.c's latent tiles): for a
 * chunk of 16 keys and up to 16 rows (query heads x tokens), the scores S^T
 * (a vector over the rows for each key) from the rows' queries held
 * transposed, the online softmax down the keys (max, e^x and softmax_step16's
 * sum tree on vectors: no horizontal step, one e^x for 16 rows' rescales), then
 * O = O corr + P V. Each row's operations and their order are the AVX2 step's
 * (avx2_math.h: a score's fused multiply-adds over the dimensions then the
 * scale, softmax_step16, O's multiply-adds over the keys), so the results are
 * bit-identical to it and a caller may take either for any row. x86-64 with
 * GCC or Clang; callers check for AVX-512F (cpu_has_avx512_vnni implies it). */
#ifndef DI_BACKEND_CPU_AVX512_ROWS_H
#define DI_BACKEND_CPU_AVX512_ROWS_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include "backend/cpu/avx2_math.h"

#    define AVX512 __attribute__((target("avx2,fma,f16c,avx512f")))

enum { ROWS512_KEYS = 16 };

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
 * (nr rows of the same valid count, nr nv <= 16 registers), in key order, each
 * V load shared by the rows. */
AVX512 __attribute__((always_inline)) static inline void pv512(float *const *o, const float *corr,
                                                               const float *const *p, ptrdiff_t ps,
                                                               const float *v, ptrdiff_t ld,
                                                               int valid, int nr, int nv)
{
    __m512 acc[16];
    UNROLL for (int r = 0; r < 4; r++) if (r < nr)
    {
        const __m512 c = _mm512_set1_ps(corr[r]);
        UNROLL for (int k = 0; k < 8; k++) if (k < nv) acc[r * nv + k] =
            _mm512_mul_ps(_mm512_loadu_ps(o[r] + (ptrdiff_t)16 * k), c);
    }
    for (ptrdiff_t i = 0; i < valid; i++) {
        __m512 vv[8];
        UNROLL for (int k = 0; k < 8; k++) if (k < nv) vv[k] =
            _mm512_loadu_ps(v + i * ld + (ptrdiff_t)16 * k);
        UNROLL for (int r = 0; r < 4; r++) if (r < nr)
        {
            const __m512 pi = _mm512_set1_ps(p[r][i * ps]);
            UNROLL for (int k = 0; k < 8; k++) if (k < nv) acc[r * nv + k] =
                _mm512_fmadd_ps(pi, vv[k], acc[r * nv + k]);
        }
    }
    UNROLL for (int r = 0; r < 4; r++) if (r < nr) UNROLL for (int k = 0; k < 8; k++) if (k < nv)
        _mm512_storeu_ps(o[r] + (ptrdiff_t)16 * k, acc[r * nv + k]);
}

/* O = O corr + P V for up to 16 rows (row r's output at o + r ostride, its
 * weight for key i at p[r pr + i ps], its keys valid[r]: none, row left
 * alone): rows with the same keys four or two at a time, else one, each V
 * load shared by them; as many of the hd dims (a multiple of 16) a pass as
 * 16 registers hold (8 for one or two rows). */
AVX512 static inline void pv_rows512(float *o0, ptrdiff_t ostride, int rows, const int *valid,
                                     const float *corr, const float *p, ptrdiff_t ps, ptrdiff_t pr,
                                     const float *v, ptrdiff_t ld, ptrdiff_t hd)
{
    for (ptrdiff_t r = 0; r < rows;) {
        if (valid[r] <= 0) {
            r++;
            continue;
        }
        int n = 1; /* rows from r with its keys: 4, 2 or 1 at a time */
        while (n < 4 && r + n < rows && valid[r + n] == valid[r]) n++;
        n = n == 3 ? 2 : n;
        float *o[4];
        const float *pp[4];
        float cr[4];
        for (int k = 0; k < n; k++)
            o[k] = o0 + (r + k) * ostride, pp[k] = p + (r + k) * pr, cr[k] = corr[r + k];
        for (ptrdiff_t d0 = 0; d0 < hd;) {
            float *od[4] = {o[0] + d0, n > 1 ? o[1] + d0 : NULL, n > 2 ? o[2] + d0 : NULL,
                            n > 2 ? o[3] + d0 : NULL};
            const ptrdiff_t left = (hd - d0) / 16;
            const int nv = left >= 8 && n == 1 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
            switch (n * 16 + nv) { /* each shape its own code */
            case 4 * 16 + 4: pv512(od, cr, pp, ps, v + d0, ld, valid[r], 4, 4); break;
            case 4 * 16 + 2: pv512(od, cr, pp, ps, v + d0, ld, valid[r], 4, 2); break;
            case 4 * 16 + 1: pv512(od, cr, pp, ps, v + d0, ld, valid[r], 4, 1); break;
            case 2 * 16 + 4: pv512(od, cr, pp, ps, v + d0, ld, valid[r], 2, 4); break;
            case 2 * 16 + 2: pv512(od, cr, pp, ps, v + d0, ld, valid[r], 2, 2); break;
            case 2 * 16 + 1: pv512(od, cr, pp, ps, v + d0, ld, valid[r], 2, 1); break;
            case 1 * 16 + 8: pv512(od, cr, pp, ps, v + d0, ld, valid[r], 1, 8); break;
            case 1 * 16 + 4: pv512(od, cr, pp, ps, v + d0, ld, valid[r], 1, 4); break;
            case 1 * 16 + 2: pv512(od, cr, pp, ps, v + d0, ld, valid[r], 1, 2); break;
            default: pv512(od, cr, pp, ps, v + d0, ld, valid[r], 1, 1); break;
            }
            d0 += (ptrdiff_t)16 * nv;
        }
        r += n;
    }
}

/* One chunk of 16 keys for up to 16 rows: krow[i] key i's d values (d a
 * multiple of 8; finite, zeros past the keys), qt [d][16] the rows' queries
 * transposed (zero past `rows`), valid[r] the keys row r sees (the chunk's
 * first valid[r]; 0: its state stays), *m and *l the rows' running max and
 * sum (a lane a row); row r's unnormalized output O (hd dims at
 * o + r ostride) becomes O e^(m - m') + P V over v's rows (ld floats apart). */
AVX512 static inline void rows_chunk512(const float *const *krow, ptrdiff_t d, const float *qt,
                                        float scale, int rows, const int *valid, __m512 *m,
                                        __m512 *l, float *o, ptrdiff_t ostride, const float *v,
                                        ptrdiff_t ld, ptrdiff_t hd)
{
    __m512 s[ROWS512_KEYS];
    const __m512 sv = _mm512_set1_ps(scale);
    for (int kb = 0; kb < ROWS512_KEYS; kb += 8) {
        __m512 acc[8];
        UNROLL for (int i = 0; i < 8; i++) acc[i] = _mm512_setzero_ps();
        for (ptrdiff_t d0 = 0; d0 < d; d0 += 8) {
            __m512 qd[8];
            UNROLL for (int e = 0; e < 8; e++) qd[e] = _mm512_loadu_ps(qt + (d0 + e) * 16);
            UNROLL for (int i = 0; i < 8; i++)
            {
                const float *k = krow[kb + i] + d0;
                UNROLL for (int e = 0; e < 8; e++) acc[i] =
                    _mm512_fmadd_ps(_mm512_set1_ps(k[e]), qd[e], acc[i]);
            }
        }
        UNROLL for (int i = 0; i < 8; i++) s[kb + i] = _mm512_mul_ps(acc[i], sv);
    }
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
    const __m512 corr = exp512(_mm512_sub_ps(*m, mnew));
    _Alignas(64) float pt[ROWS512_KEYS * 16], cr[16];
    __m512 w[8];
    UNROLL for (int n = 0; n < ROWS512_KEYS; n++)
    {
        __m512 e = exp512(_mm512_sub_ps(s[n], mnew));
        _mm512_store_ps(pt + (ptrdiff_t)n * 16, e);
        s[n] = e;
    }
    /* softmax_step16's tree: v_i = p_i + p_i+8, t_i = v_i + v_i+4,
     * (t_0 + t_2) + (t_1 + t_3) */
    UNROLL for (int i = 0; i < 8; i++) w[i] = _mm512_add_ps(s[i], s[i + 8]);
    UNROLL for (int i = 0; i < 4; i++) w[i] = _mm512_add_ps(w[i], w[i + 4]);
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(w[0], w[2]), _mm512_add_ps(w[1], w[3]));
    *l = _mm512_mask_mov_ps(*l, act, _mm512_add_ps(_mm512_mul_ps(*l, corr), sum));
    *m = _mm512_mask_mov_ps(*m, act, mnew);
    _mm512_store_ps(cr, corr);
    pv_rows512(o, ostride, rows, valid, cr, pt, 16, 1, v, ld, hd);
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
