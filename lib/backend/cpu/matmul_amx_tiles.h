/* What the AMX kernels (matmul_amx.c, matmul_amx_k.c) share: their target
 * attributes, the tile configuration and the step of one block. Internal to
 * lib/backend/cpu/; included only on x86-64 with GCC or Clang, after
 * <immintrin.h>.
 *
 * Tiles (one configuration a call, K the elements of one block or sub-block,
 * 32 or 16): 0 and 1 the sums (16 tokens x 16 rows of int32) of even and odd
 * blocks, 2 and 3 their tokens' bytes (16 x K), 4 and 5 their weight bytes
 * (K / 4 rows of four elements of the 16 rows: K / 4 x 64). */
#ifndef DI_BACKEND_CPU_MATMUL_AMX_TILES_H
#define DI_BACKEND_CPU_MATMUL_AMX_TILES_H

#include <stdint.h>
#include <string.h>

#define AMX                                                                                        \
    __attribute__((                                                                                \
        target("amx-tile,amx-int8,avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define INLINE AMX __attribute__((always_inline)) static inline
#define UNROLL _Pragma("GCC unroll 16")

typedef struct amx_tile_config {
    _Alignas(64) uint8_t palette;
    uint8_t start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tile_config;

/* Load palette 1 with tiles 0..n-1 of rows[t] rows of colsb[t] bytes (the
 * rest unused). */
INLINE void amx_load_config(const uint16_t *colsb, const uint8_t *rows, int n)
{
    amx_tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < n; t++) {
        cfg.colsb[t] = colsb[t];
        cfg.rows[t] = rows[t];
    }
    /* not _tile_loadconfig: GCC 12's declares an 8-byte operand, and the
     * compiler then drops the stores to the rest of cfg */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

/* Load the configuration above for blocks of k (32 or 16) elements. */
INLINE void amx_load_tiles(int k)
{
    uint16_t colsb[6];
    uint8_t rows[6];
    for (int t = 0; t < 6; t++) {
        colsb[t] = (uint16_t)(t == 2 || t == 3 ? k : 64);
        rows[t] = (uint8_t)(t == 4 || t == 5 ? k / 4 : 16);
    }
    amx_load_config(colsb, rows, 6);
}

/* Bit 4 of every byte of the nibbles (matmul_packed_pass.inc's FIFTH). */
INLINE __m512i fifth512(__m512i h, int bit)
{
    __m512i s = bit <= 4 ? _mm512_slli_epi16(h, 4 - bit) : _mm512_srli_epi16(h, bit - 4);
    return _mm512_and_si512(s, _mm512_set1_epi8(0x10));
}

/* The same 32 bytes of the two packed groups' blocks g0 and g1 (at offset
 * off), as one vector: 4 elements of rows 0..7, then of rows 8..15. */
INLINE __m512i both_groups(const uint8_t *g0, const uint8_t *g1, size_t off)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const void *)(g0 + off))),
                              _mm256_loadu_si256((const void *)(g1 + off)), 1);
}

/* One block's exact integer sums (16 tokens x 16 rows) into tile C, from the
 * tokens' bytes at A (rows a_stride apart; tile TA) and the widened weights
 * W (tile TB), then to sums[16 tokens][16 rows]. */
#define BLOCK_SUMS(A, A_STRIDE, W, C, TA, TB, SUMS)                                                \
    do {                                                                                           \
        _tile_zero(C);                                                                             \
        _tile_loadd(TA, A, A_STRIDE);                                                              \
        _tile_loadd(TB, W, 64);                                                                    \
        _tile_dpbssd(C, TA, TB);                                                                   \
        _tile_stored(C, &(SUMS)[0][0], 64);                                                        \
    } while (0)

/* A cpu_amx_fn for one format: ROWS (the file's kernel body, inlined) with
 * the format's KIND constant, so its branches fold. */
#define AMX_KERNEL(NAME, ROWS, KIND)                                                               \
    AMX static void NAME(int64_t n_in, const void *w, size_t group_bytes, const char *tiles,       \
                         int64_t n_tok, float *y, int64_t y_stride, void *wide)                    \
    {                                                                                              \
        ROWS(n_in, w, group_bytes, tiles, n_tok, y, y_stride, wide, KIND);                         \
    }

#endif
