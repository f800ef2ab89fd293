/* AMX-BF16 products for BF16 weights (matmul_amx.h). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "backend/cpu/matmul_amx.h"
#include "backend/cpu/quant.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#    include <cpuid.h>
#    include <immintrin.h>

#    include "backend/cpu/matmul_amx_tiles.h"

/* the AMX-INT8 kernels' target (matmul_amx_tiles.h) plus AMX-BF16: a CPU with
 * AMX-BF16 that passes cpu_amx_possible has them all */
#    define AMXBF                                                                                  \
        __attribute__((target("amx-tile,amx-int8,amx-bf16,avx2,fma,f16c,avx512f,avx512vl,"         \
                              "avx512bw,avx512dq,avx512vnni")))

enum {
    KB = 32,
    PARTS = 3,
    GROUP = CPU_AMX_BF16_TOKENS,
    PANEL = 16,
    MAX_UNITS = 4,
    DECODE_UNITS = 2,
    LOOKAHEAD = 4
};

static int bf16_tiles_offered(void)
{
    unsigned a, b, c, d;
    return cpu_amx_possible() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22));
}

int cpu_amx_bf16_possible(void)
{
    static int known; /* a machine constant: 0 unknown, 1 no, 2 yes */
    int v = __atomic_load_n(&known, __ATOMIC_ACQUIRE);
    if (v == 0) {
        v = bf16_tiles_offered() ? 2 : 1;
        __atomic_store_n(&known, v, __ATOMIC_RELEASE);
    }
    return v == 2;
}

int cpu_has_amx_bf16(void)
{
    return cpu_amx_bf16_possible() && cpu_has_amx();
}

size_t cpu_amx_bf16_act_bytes(int64_t n_in, int64_t n_tokens)
{
    size_t groups = (size_t)((n_tokens + GROUP - 1) / GROUP);
    return groups * (size_t)((n_in + KB - 1) / KB) * CPU_AMX_BF16_TILE_BYTES;
}

/* x rounded to bf16 (nearest even, as cpu_f32_to_bf16; NaN made quiet), as
 * 16-bit values in 32-bit lanes. */
AMXBF static inline __m512i round_bf16(__m512i bits)
{
    __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    r = _mm512_mask_or_epi32(r, nan, bits, _mm512_set1_epi32(0x00400000));
    return _mm512_srli_epi32(r, 16);
}

/* x = hi + mid + lo exactly (each remainder is exact in f32 and the last fits
 * in bf16's 8 bits), 16 at a time; mid and lo 0 where x is not finite, so an
 * infinity stays one. A finite x that would round to infinity (from
 * 0x7f7f8000, 3.3961776e38, up) takes hi truncated instead (bf16's largest
 * finite value), so it stays finite and exact. */
AMXBF static inline void split16(__m512 x, __m256i part[3])
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i bits = _mm512_castps_si512(x);
    const __mmask16 finite = _mm512_cmplt_epi32_mask(_mm512_and_si512(bits, abs_mask), inf);
    __m512 rest = x;
    for (int k = 0; k < 3; k++) {
        __m512i b = round_bf16(_mm512_castps_si512(rest));
        if (k == 0) { /* finite x rounded up to infinity: truncate */
            __mmask16 up = _mm512_mask_cmpge_epi32_mask(
                finite, _mm512_and_si512(_mm512_slli_epi32(b, 16), abs_mask), inf);
            b = _mm512_mask_mov_epi32(b, up, _mm512_srli_epi32(bits, 16));
        } else {
            b = _mm512_maskz_mov_epi32(finite, b);
        }
        part[k] = _mm512_cvtepi32_epi16(b);
        rest = _mm512_sub_ps(rest, _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)));
    }
}

AMXBF void cpu_amx_bf16_pack_token(const float *x, int64_t n_in, int64_t t, char *act)
{
    const int64_t nkb = (n_in + KB - 1) / KB;
    char *dst = act + (size_t)(t / GROUP) * (size_t)nkb * CPU_AMX_BF16_TILE_BYTES +
                (size_t)(t % GROUP) * (size_t)(4 * PARTS);
    for (int64_t kb = 0; kb < nkb; kb++, dst += CPU_AMX_BF16_TILE_BYTES) {
        _Alignas(64) float v[KB];
        _Alignas(32) uint16_t h[PARTS][KB];
        int64_t len = x ? (n_in - kb * KB < KB ? n_in - kb * KB : KB) : 0;
        for (int64_t i = 0; i < KB; i++) v[i] = i < len ? x[kb * KB + i] : 0.0f;
        for (int i = 0; i < KB; i += 16) {
            __m256i part[PARTS];
            split16(_mm512_load_ps(v + i), part);
            for (int k = 0; k < PARTS; k++) _mm256_store_si256((__m256i *)(h[k] + i), part[k]);
        }
        /* row kp, this token's three columns: each part's elements 2kp, 2kp+1;
         * the group's last token also zeroes the tile's unused 16th column */
        const int last = t % GROUP == GROUP - 1;
        for (ptrdiff_t kp = 0; kp < KB / 2; kp++) {
            uint16_t q[2 * PARTS];
            for (ptrdiff_t k = 0; k < PARTS; k++) {
                q[2 * k] = h[k][2 * kp];
                q[2 * k + 1] = h[k][2 * kp + 1];
            }
            memcpy(dst + (size_t)kp * 64, q, sizeof q);
            if (last) memset(dst + (size_t)kp * 64 + sizeof q, 0, 4);
        }
    }
}

/* Tiles 0-3: four sums (16 rows x 16 columns f32); 4-7: weight blocks (16 rows
 * x 32 bf16) and activation blocks (16 pairs x 16 columns). */
AMXBF static void load_config(void)
{
    const uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
    const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    amx_load_config(colsb, rows, 8);
}

/* Block kb of the nr (<= 16) weight rows at w: in place when whole, else
 * copied with zeros after the rows' ends and below the last row into pad. */
static inline const void *weight_block(const char *w, size_t w_row, int64_t n_in, int nr,
                                       int64_t kb, uint16_t *pad, size_t *stride)
{
    const int64_t k0 = kb * KB;
    if (nr == PANEL && k0 + KB <= n_in) {
        *stride = w_row;
        return w + (size_t)k0 * 2;
    }
    memset(pad, 0, CPU_AMX_BF16_TILE_BYTES);
    const int64_t len = n_in - k0 < KB ? n_in - k0 : KB;
    for (int r = 0; r < nr; r++)
        memcpy(pad + (ptrdiff_t)r * KB, w + (size_t)r * w_row + (size_t)k0 * 2, (size_t)len * 2);
    *stride = 64;
    return pad;
}

#    define TILE_STEP(C, TA, TB, B)                                                                \
        do {                                                                                       \
            _tile_loadd(TB, B, 64);                                                                \
            _tile_dpbf16ps(C, TA, TB);                                                             \
        } while (0)
#    define TILE_STEP_A(C, TA, A, A_STRIDE)                                                        \
        do {                                                                                       \
            _tile_loadd(TA, A, A_STRIDE);                                                          \
            _tile_dpbf16ps(C, TA, 7);                                                              \
        } while (0)

/* One output per (row, token): its hi column's sum plus its mid column's,
 * plus its lo column's; an infinite hi sum as it is (an infinite weight
 * times an activation's zero mid or lo part is NaN in those columns, where
 * the f32 product is the hi column's infinity: an infinite product's sign is
 * its weight's times its activation's, which hi carries). */
static inline void finish(const float (*c)[PANEL][PANEL], int units, const int64_t *o,
                          const int *nr, const int64_t *tg, const int *nt, float *y,
                          int64_t y_stride)
{
    for (int u = 0; u < units; u++)
        for (int k = 0; k < nt[u]; k++)
            for (int r = 0; r < nr[u]; r++) {
                const float *s = &c[u][r][(ptrdiff_t)PARTS * k];
                y[(tg[u] + k) * y_stride + o[u] + r] = isinf(s[0]) ? s[0] : s[0] + s[1] + s[2];
            }
}

AMXBF void cpu_amx_bf16_rows(int64_t n_in, const void *w, size_t w_row, int64_t n_rows,
                             const char *act, int64_t n_tok, float *y, int64_t y_stride, void *ws)
{
    const int64_t nkb = (n_in + KB - 1) / KB, n_groups = (n_tok + GROUP - 1) / GROUP;
    uint16_t(*pad)[CPU_AMX_BF16_TILE_BYTES / 2] = ws; /* [MAX_UNITS] */
    float(*c)[PANEL][PANEL] =
        (void *)((char *)ws + (ptrdiff_t)MAX_UNITS * CPU_AMX_BF16_TILE_BYTES); /* [MAX_UNITS] */
    load_config();
    /* work units of (a panel of 16 rows, a group of 5 tokens): up to four
     * groups of one panel at a time (prefill: the weight block loaded once
     * for them) or, for a single group, two panels (decode: the activation
     * block loaded once; two measured faster than four, whose 64 row streams
     * the prefetch kept up with less well). Each sum is its own chain over the
     * blocks in order, from zero, so a (row, token) result does not depend on
     * the units beside it. */
    const int64_t n_panels = (n_rows + PANEL - 1) / PANEL;
    for (int64_t p0 = 0; p0 < n_panels;) {
        const int by_group = n_groups > 1;
        int64_t o[MAX_UNITS], tg[MAX_UNITS];
        int nr[MAX_UNITS], nt[MAX_UNITS];
        for (int64_t g0 = 0; g0 < n_groups;) {
            int units = 0;
            while (units < (by_group ? MAX_UNITS : DECODE_UNITS) &&
                   (by_group ? g0 + units < n_groups : p0 + units < n_panels)) {
                int64_t p = by_group ? p0 : p0 + units, g = by_group ? g0 + units : g0;
                o[units] = p * PANEL;
                nr[units] = (int)(n_rows - o[units] < PANEL ? n_rows - o[units] : PANEL);
                tg[units] = g * GROUP;
                nt[units] = (int)(n_tok - tg[units] < GROUP ? n_tok - tg[units] : GROUP);
                units++;
            }
            /* decode's prefetch: the rows after these units, spread over the steps */
            const char *next = (const char *)w + (size_t)(o[units - 1] + PANEL) * w_row;
            const size_t end = (size_t)n_rows * w_row,
                         from = (size_t)(o[units - 1] + PANEL) * w_row;
            const size_t ahead = from < end ? (end - from < (size_t)units * PANEL * w_row
                                                   ? end - from
                                                   : (size_t)units * PANEL * w_row)
                                            : 0;
            const size_t step = ((size_t)units * PANEL * w_row / (size_t)nkb + 64) / 64 * 64;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t kb = 0; kb < nkb; kb++) {
                const void *a[MAX_UNITS] = {0}, *b[MAX_UNITS] = {0};
                size_t as[MAX_UNITS] = {0};
                for (int u = 0; u < units; u++) {
                    if (by_group && u > 0) {
                        a[u] = a[0];
                        as[u] = as[0];
                    } else {
                        a[u] = weight_block((const char *)w + (size_t)o[u] * w_row, w_row, n_in,
                                            nr[u], kb, pad[u], &as[u]);
                    }
                    b[u] = act + ((size_t)(tg[u] / GROUP) * (size_t)nkb + (size_t)kb) *
                                     CPU_AMX_BF16_TILE_BYTES;
                }
                if (by_group) { /* one weight block, four activation blocks */
                    _tile_loadd(4, a[0], as[0]);
                    _tile_loadd(5, b[0], 64);
                    _tile_dpbf16ps(0, 4, 5);
                    if (units > 1) TILE_STEP(1, 4, 6, b[1]);
                    if (units > 2) TILE_STEP(2, 4, 7, b[2]);
                    if (units > 3) TILE_STEP(3, 4, 5, b[3]);
                } else { /* one activation block, four weight blocks */
                    _tile_loadd(7, b[0], 64);
                    _tile_loadd(4, a[0], as[0]);
                    _tile_dpbf16ps(0, 4, 7);
                    if (units > 1) TILE_STEP_A(1, 5, a[1], as[1]);
                    if (units > 2) TILE_STEP_A(2, 6, a[2], as[2]);
                    if (units > 3) TILE_STEP_A(3, 4, a[3], as[3]);
                    /* the next panels' weights, one step's share at a time:
                     * the tile loads walk 16 x units rows at once, more
                     * streams than the hardware prefetcher follows */
                    for (size_t off = (size_t)kb * step; off < (size_t)(kb + 1) * step; off += 64)
                        if (off < ahead) _mm_prefetch(next + off, _MM_HINT_T1);
                    if (kb + LOOKAHEAD < nkb) /* and these rows' blocks a few steps on */
                        for (int u = 0; u < units; u++)
                            for (int r = 0; r < nr[u]; r++)
                                _mm_prefetch((const char *)w + (size_t)(o[u] + r) * w_row +
                                                 (size_t)(kb + LOOKAHEAD) * KB * 2,
                                             _MM_HINT_T0);
                }
            }
            _tile_stored(0, c[0], 64);
            if (units > 1) _tile_stored(1, c[1], 64);
            if (units > 2) _tile_stored(2, c[2], 64);
            if (units > 3) _tile_stored(3, c[3], 64);
            finish((const float(*)[PANEL][PANEL])c, units, o, nr, tg, nt, y, y_stride);
            if (by_group) {
                g0 += units;
            } else {
                g0 = n_groups;
                p0 += units;
            }
        }
        if (by_group) p0++;
    }
    _tile_release();
}

#else

int cpu_amx_bf16_possible(void)
{
    return 0;
}
int cpu_has_amx_bf16(void)
{
    return 0;
}
size_t cpu_amx_bf16_act_bytes(int64_t n_in, int64_t n_tokens)
{
    (void)n_in;
    (void)n_tokens;
    return 0;
}
void cpu_amx_bf16_pack_token(const float *x, int64_t n_in, int64_t t, char *act)
{
    (void)x;
    (void)n_in;
    (void)t;
    (void)act;
}
void cpu_amx_bf16_rows(int64_t n_in, const void *w, size_t w_row, int64_t n_rows, const char *act,
                       int64_t n_tok, float *y, int64_t y_stride, void *ws)
{
    (void)n_in;
    (void)w;
    (void)w_row;
    (void)n_rows;
    (void)act;
    (void)n_tok;
    (void)y;
    (void)y_stride;
    (void)ws;
}

#endif
