/* AMX-INT8 prefill tiles for the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and
 * IQ4_XS (matmul_amx.h).
 * Per super-block of 256 and sub-block j (32 elements, Q2_K's, Q3_K's and Q6_K's 16), one
 * TDPBSSD of the 16 tokens' Q8_K bytes by the 16 rows' quants widened to
 * signed bytes (Q6_K's q - 32, Q3_K's q - 4, IQ4_XS's codebook values) gives the exact sub-block
 * sums, which the reference's integer steps take in AVX-512: sumi += sc_j * isum_j, and for
 * Q2_K/Q4_K/Q5_K the mins' sum over the activations' 32-element sums (two per
 * vpdpwssd); then its float steps once a super-block (matmul_packed_pass.inc's
 * K pass, vec_dot_ref.c), so results are the reference's bit for bit. */
#include "backend/cpu/matmul_amx.h"

#include <string.h>

#include "backend/cpu/quant.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#    include <immintrin.h>

#    include "backend/cpu/matmul_amx_tiles.h"

/* One super-block of the 16 rows widened (WIDE_*: byte offsets): the B tiles
 * of its sub-blocks (4,096 bytes either way), the sub-block scales as int32
 * [sub-block][row], Q2_K/Q4_K/Q5_K's mins as int16 pairs [pair of sub-blocks][row]
 * (vpdpwssd's operand), the rows' d and dmin as f32. */
enum {
    WIDE_SC = 4096,
    WIDE_M = WIDE_SC + 16 * 64,
    WIDE_D = WIDE_M + 8 * 64,
    WIDE_DMIN = WIDE_D + 64,
    WIDE_BYTES = WIDE_DMIN + 64,
    WIDE_SUPER = 4, /* super-blocks widened at a time: 22 KiB */
};
_Static_assert(CPU_AMX_WIDE_BYTES >= WIDE_SUPER * WIDE_BYTES, "the widened weights fit");

/* The Q8_K tile of a super-block (CPU_AMX_K_TILE_BYTES): 16 tokens x 256
 * quants, their d as f32, their 32-element sums as int16 [token][8], their
 * 16-element sums (Q8_K's bsums) as int16 [token][16]. */
enum { TILE_D = 4096, TILE_BS = TILE_D + 64, TILE_BS16 = TILE_BS + 256 };

/* kind: matmul_packed_pass.inc's K kinds (0 Q4_K, 1 Q6_K, 2 Q5_K, 3 IQ4_XS, 4 Q3_K,
 * 5 Q2_K); g0, g1
 * the two groups' packed super-blocks (matmul_packed.c's pack_k_block). */
INLINE void widen_super(const uint8_t *g0, const uint8_t *g1, int kind, uint8_t *out)
{
    const __m512i low4 = _mm512_set1_epi8(0x0f), two = _mm512_set1_epi8(0x30);
    const __m512i codebook =
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)cpu_iq4nl_values));
    _mm512_store_ps(out + WIDE_D,
                    _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128((const void *)g1),
                                                     _mm_loadu_si128((const void *)g0))));
    if (kind == 4 || kind == 5) { /* Q3_K, Q2_K: 2-bit planes (matmul_packed.c's pack_low_bits) */
        const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
        const size_t at = kind == 4 ? 16 : 32; /* Q3_K: int8 scales; Q2_K: scale | min << 4 */
        const size_t vo = at + 128;
        UNROLL for (ptrdiff_t j = 0; j < 16; j++)
        {
            __m128i s = _mm_unpacklo_epi64(_mm_loadl_epi64((const void *)(g0 + at + 8 * j)),
                                           _mm_loadl_epi64((const void *)(g1 + at + 8 * j)));
            __m512i sc = kind == 4
                             ? _mm512_cvtepi8_epi32(s)
                             : _mm512_and_si512(_mm512_cvtepu8_epi32(s), _mm512_set1_epi32(15));
            _mm512_store_si512(out + WIDE_SC + 64 * j, sc);
        }
        if (kind == 5) {
            _mm512_store_ps(out + WIDE_DMIN, _mm512_cvtph_ps(_mm256_set_m128i(
                                                 _mm_loadu_si128((const void *)(g1 + 16)),
                                                 _mm_loadu_si128((const void *)(g0 + 16)))));
            int16_t *m = (int16_t *)(out + WIDE_M);
            for (ptrdiff_t jp = 0; jp < 8; jp++)
                for (ptrdiff_t r = 0; r < 16; r++) {
                    const uint8_t *g = r < 8 ? g0 : g1;
                    m[32 * jp + 2 * r] = (int16_t)(g[32 + 8 * (2 * jp) + r % 8] >> 4);
                    m[32 * jp + 2 * r + 1] = (int16_t)(g[32 + 8 * (2 * jp + 1) + r % 8] >> 4);
                }
        }
        for (ptrdiff_t j = 0; j < 16; j++) {
            size_t pair = vo + (size_t)96 * (size_t)(j / 2);
            size_t l =
                kind == 5 ? vo + (size_t)32 * (size_t)j : pair + (size_t)32 * (size_t)(j % 2);
            __m512i v = both_groups(g0, g1, l);
            __m512i h = kind == 4 ? both_groups(g0, g1, pair + 64) : _mm512_setzero_si512();
            UNROLL for (int f = 0; f < 4; f++)
            {
                __m512i u = _mm512_and_si512(_mm512_srli_epi16(v, 2 * f), three);
                if (kind == 4) { /* bit f + 4 (j % 2) of h to bit 2; the values are u - 4 */
                    int sh = f + 4 * (int)(j % 2);
                    __m512i hs = sh >= 2 ? _mm512_srli_epi16(h, (unsigned)(sh - 2))
                                         : _mm512_slli_epi16(h, (unsigned)(2 - sh));
                    u = _mm512_sub_epi8(_mm512_or_si512(u, _mm512_and_si512(hs, four)), four);
                }
                _mm512_store_si512(out + 256 * j + (ptrdiff_t)64 * f, u);
            }
        }
        return;
    }
    if (kind == 1) { /* Q6_K: int8 scales at 16, 16 sub-blocks of 96 bytes at 144 */
        UNROLL for (ptrdiff_t j = 0; j < 16; j++)
        {
            __m128i s = _mm_unpacklo_epi64(_mm_loadl_epi64((const void *)(g0 + 16 + 8 * j)),
                                           _mm_loadl_epi64((const void *)(g1 + 16 + 8 * j)));
            _mm512_store_si512(out + WIDE_SC + 64 * j, _mm512_cvtepi8_epi32(s));
        }
        for (ptrdiff_t j = 0; j < 16; j++) {
            size_t sub = 144 + (size_t)j * 96;
            __m512i v0 = both_groups(g0, g1, sub), v1 = both_groups(g0, g1, sub + 32);
            __m512i h = both_groups(g0, g1, sub + 64);
            __m512i u[4] = {
                _mm512_or_si512(_mm512_and_si512(v0, low4),
                                _mm512_and_si512(_mm512_slli_epi16(h, 4), two)),
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v0, 4), low4),
                                _mm512_and_si512(_mm512_slli_epi16(h, 2), two)),
                _mm512_or_si512(_mm512_and_si512(v1, low4), _mm512_and_si512(h, two)),
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v1, 4), low4),
                                _mm512_and_si512(_mm512_srli_epi16(h, 2), two)),
            };
            UNROLL for (ptrdiff_t f = 0; f < 4; f++) _mm512_store_si512(
                out + 256 * j + 64 * f, _mm512_sub_epi8(u[f], _mm512_set1_epi8(32)));
        }
        return;
    }
    const size_t sub_bytes = kind == 2 ? 160 : 128, vo = kind == 3 ? 80 : 160;
    if (kind == 3) { /* IQ4_XS: int8 scales at 16, 8 sub-blocks of codebook indices at 80 */
        UNROLL for (ptrdiff_t j = 0; j < 8; j++)
        {
            __m128i s = _mm_unpacklo_epi64(_mm_loadl_epi64((const void *)(g0 + 16 + 8 * j)),
                                           _mm_loadl_epi64((const void *)(g1 + 16 + 8 * j)));
            _mm512_store_si512(out + WIDE_SC + 64 * j, _mm512_cvtepi8_epi32(s));
        }
    } else {
        /* Q4_K/Q5_K: dmin at 16, scales and mins as bytes at 32 and 96, 8
         * sub-blocks of 128 (Q5_K: 160) bytes at 160 */
        _mm512_store_ps(out + WIDE_DMIN, _mm512_cvtph_ps(_mm256_set_m128i(
                                             _mm_loadu_si128((const void *)(g1 + 16)),
                                             _mm_loadu_si128((const void *)(g0 + 16)))));
        UNROLL for (ptrdiff_t j = 0; j < 8; j++)
        {
            __m128i s = _mm_unpacklo_epi64(_mm_loadl_epi64((const void *)(g0 + 32 + 8 * j)),
                                           _mm_loadl_epi64((const void *)(g1 + 32 + 8 * j)));
            _mm512_store_si512(out + WIDE_SC + 64 * j, _mm512_cvtepu8_epi32(s));
        }
        int16_t *m = (int16_t *)(out + WIDE_M);
        for (ptrdiff_t jp = 0; jp < 4; jp++)
            for (ptrdiff_t r = 0; r < 16; r++) {
                const uint8_t *g = r < 8 ? g0 : g1;
                m[32 * jp + 2 * r] = g[96 + 8 * (2 * jp) + r % 8];
                m[32 * jp + 2 * r + 1] = g[96 + 8 * (2 * jp + 1) + r % 8];
            }
    }
    for (ptrdiff_t j = 0; j < 8; j++) {
        size_t sub = vo + (size_t)j * sub_bytes;
        __m512i h = kind == 2 ? both_groups(g0, g1, sub + 128) : _mm512_setzero_si512();
        UNROLL for (ptrdiff_t kk = 0; kk < 4; kk++)
        {
            __m512i v = both_groups(g0, g1, sub + (size_t)kk * 32);
            __m512i lo = _mm512_and_si512(v, low4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            if (kind == 2) {
                lo = _mm512_or_si512(lo, fifth512(h, (int)(2 * kk)));
                hi = _mm512_or_si512(hi, fifth512(h, (int)(2 * kk + 1)));
            }
            if (kind == 3) { /* IQ4_XS: the codebook's values */
                lo = _mm512_shuffle_epi8(codebook, lo);
                hi = _mm512_shuffle_epi8(codebook, hi);
            }
            _mm512_store_si512(out + 512 * j + 128 * kk, lo);
            _mm512_store_si512(out + 512 * j + 128 * kk + 64, hi);
        }
    }
}

/* sumi[t] += sc * (sub-block sums of token t), for the 16 tokens. */
INLINE void add_scaled(int32_t (*sums)[CPU_AMX_ROWS], const uint8_t *sc, __m512i *sumi)
{
    const __m512i s = _mm512_load_si512(sc);
    UNROLL for (int t = 0; t < CPU_AMX_TOKENS; t++) sumi[t] =
        _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(_mm512_load_si512(sums[t]), s));
}

/* One super-block for one token tile (a: its Q8_K tile, w: its widened
 * weights): the sub-blocks' sums software-pipelined (sub-block j on the TMUL
 * while j - 1's are scaled), then the float steps into acc[token][row]. */
INLINE void super_block(const char *a, const uint8_t *w, const int kind, float (*acc)[CPU_AMX_ROWS])
{
    const ptrdiff_t n_sub = kind == 1 || kind >= 4 ? 16 : 8, k = QK_K / n_sub,
                    b_bytes = 4096 / n_sub;
    _Alignas(64) int32_t sums[2][CPU_AMX_TOKENS][CPU_AMX_ROWS];
    __m512i sumi[CPU_AMX_TOKENS];
    UNROLL for (int t = 0; t < CPU_AMX_TOKENS; t++) sumi[t] = _mm512_setzero_si512();
    BLOCK_SUMS(a, QK_K, w, 0, 2, 4, sums[0]);
    for (ptrdiff_t j = 1; j < n_sub; j += 2) { /* n_sub is even */
        BLOCK_SUMS(a + j * k, QK_K, w + j * b_bytes, 1, 3, 5, sums[1]);
        add_scaled(sums[0], w + WIDE_SC + 64 * (j - 1), sumi);
        if (j + 1 < n_sub)
            BLOCK_SUMS(a + (j + 1) * k, QK_K, w + (j + 1) * b_bytes, 0, 2, 4, sums[0]);
        add_scaled(sums[1], w + WIDE_SC + 64 * j, sumi);
    }
    const __m512 dw = _mm512_load_ps(w + WIDE_D);
    const float *dy = (const float *)(a + TILE_D);
    if (kind == 1 || kind == 3 || kind == 4) { /* dx * dy * sumi */
        UNROLL for (int t = 0; t < CPU_AMX_TOKENS; t++)
        {
            __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(dy[t]));
            _mm512_store_ps(acc[t], _mm512_add_ps(_mm512_load_ps(acc[t]),
                                                  _mm512_mul_ps(d, _mm512_cvtepi32_ps(sumi[t]))));
        }
        return;
    }
    /* d * sumi - dmin * summ, summ the mins times the activations' sums */
    const __m512 dmw = _mm512_load_ps(w + WIDE_DMIN);
    /* [token][pair of sub-blocks]: Q2_K's sub-blocks of 16, the others' of 32 */
    const ptrdiff_t n_pairs = kind == 5 ? 8 : 4;
    const int32_t *bs = (const int32_t *)(a + (kind == 5 ? TILE_BS16 : TILE_BS));
    UNROLL for (int t = 0; t < CPU_AMX_TOKENS; t++)
    {
        __m512i summ = _mm512_setzero_si512();
        UNROLL for (ptrdiff_t jp = 0; jp < n_pairs; jp++) summ = _mm512_dpwssd_epi32(
            summ, _mm512_load_si512(w + WIDE_M + 64 * jp), _mm512_set1_epi32(bs[n_pairs * t + jp]));
        __m512 y = _mm512_set1_ps(dy[t]);
        __m512 p = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(dw, y), _mm512_cvtepi32_ps(sumi[t])),
                                 _mm512_mul_ps(_mm512_mul_ps(dmw, y), _mm512_cvtepi32_ps(summ)));
        _mm512_store_ps(acc[t], _mm512_add_ps(_mm512_load_ps(acc[t]), p));
    }
}

/* The weights widened WIDE_SUPER super-blocks at a time, used by every token
 * tile; a row's partial sums wait in y between chunks. */
INLINE void amx_k_rows(int64_t n_in, const uint8_t *w, size_t group_bytes, const char *tiles,
                       int64_t n_tok, float *y, int64_t y_stride, void *wide_ws, const int kind)
{
    const int64_t nsb = n_in / QK_K;
    const size_t gb = kind == 1   ? 144 + 1536
                      : kind == 2 ? 160 + 1280
                      : kind == 3 ? 80 + 1024
                      : kind == 4 ? 144 + 768
                      : kind == 5 ? 160 + 512
                                  : 160 + 1024;
    uint8_t(*wide)[WIDE_BYTES] = __builtin_assume_aligned(wide_ws, 64); /* [WIDE_SUPER] */
    _Alignas(64) float acc[CPU_AMX_TOKENS][CPU_AMX_ROWS];
    amx_load_tiles(kind == 1 || kind >= 4 ? 16 : 32);
    for (int64_t ks = 0; ks < nsb; ks += WIDE_SUPER) {
        int64_t n = nsb - ks < WIDE_SUPER ? nsb - ks : WIDE_SUPER;
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *g0 = w + (size_t)(ks + i) * gb;
            widen_super(g0, g0 + group_bytes, kind, wide[i]);
        }
        for (int64_t t0 = 0; t0 < n_tok; t0 += CPU_AMX_TOKENS) {
            for (int t = 0; t < CPU_AMX_TOKENS; t++)
                if (ks == 0)
                    memset(acc[t], 0, sizeof acc[t]);
                else
                    memcpy(acc[t], y + (t0 + t) * y_stride, sizeof acc[t]);
            const char *a = tiles + ((size_t)(t0 / CPU_AMX_TOKENS) * (size_t)nsb + (size_t)ks) *
                                        CPU_AMX_K_TILE_BYTES;
            for (int64_t i = 0; i < n; i++)
                super_block(a + (size_t)i * CPU_AMX_K_TILE_BYTES, wide[i], kind, acc);
            for (int t = 0; t < CPU_AMX_TOKENS; t++)
                memcpy(y + (t0 + t) * y_stride, acc[t], sizeof acc[t]);
        }
    }
    _tile_release();
}

#    define KERNEL(NAME, KIND) AMX_KERNEL(NAME, amx_k_rows, KIND)

KERNEL(q4_K_amx, 0)
KERNEL(q6_K_amx, 1)
KERNEL(q5_K_amx, 2)
KERNEL(iq4_xs_amx, 3)
KERNEL(q3_K_amx, 4)
KERNEL(q2_K_amx, 5)

cpu_amx_fn cpu_amx_k_kernel(model_dtype dtype)
{
    switch (dtype) {
    case MODEL_DTYPE_Q4_K: return q4_K_amx;
    case MODEL_DTYPE_Q5_K: return q5_K_amx;
    case MODEL_DTYPE_Q6_K: return q6_K_amx;
    case MODEL_DTYPE_IQ4_XS: return iq4_xs_amx;
    case MODEL_DTYPE_Q3_K: return q3_K_amx;
    case MODEL_DTYPE_Q2_K: return q2_K_amx;
    default: return NULL;
    }
}

void cpu_amx_pack_token_k(const void *act_row, int64_t n_in, int64_t t, char *tiles)
{
    const int64_t nsb = n_in / QK_K;
    const ptrdiff_t r = (ptrdiff_t)(t % CPU_AMX_TOKENS);
    char *dst = tiles + (size_t)(t / CPU_AMX_TOKENS) * (size_t)nsb * CPU_AMX_K_TILE_BYTES;
    for (int64_t b = 0; b < nsb; b++, dst += CPU_AMX_K_TILE_BYTES) {
        const block_q8_K *x = (const block_q8_K *)act_row + b;
        memcpy(dst + r * QK_K, x->qs, QK_K);
        memcpy(dst + TILE_D + r * 4, &x->d, 4);
        for (ptrdiff_t j = 0; j < 8; j++) {
            int16_t s = (int16_t)(x->bsums[2 * j] + x->bsums[2 * j + 1]);
            memcpy(dst + TILE_BS + r * 16 + j * 2, &s, 2);
        }
        memcpy(dst + TILE_BS16 + r * 32, x->bsums, 32);
    }
}

#else

cpu_amx_fn cpu_amx_k_kernel(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}

void cpu_amx_pack_token_k(const void *act_row, int64_t n_in, int64_t t, char *tiles)
{
    (void)act_row;
    (void)n_in;
    (void)t;
    (void)tiles;
}

#endif
