/* AMX-INT8 prefill kernels (matmul_amx.h). */
#define _DEFAULT_SOURCE /* syscall */
#include "backend/cpu/matmul_amx.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

static int blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; /* isspace */
}

int cpu_amx_env_off(const char *value)
{
    if (!value) return 0;
    while (blank(*value)) value++; /* " off" as "off" */
    size_t n = strlen(value);
    while (n > 0 && blank(value[n - 1])) n--;
    static const char *const off[] = {"0", "off", "false", "no"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (n == strlen(off[i]) && strncasecmp(value, off[i], n) == 0) return 1;
    return 0;
}

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#    include <cpuid.h>
#    include <immintrin.h>
#    include <sys/syscall.h>
#    include <unistd.h>

enum {
    ARCH_REQ_XCOMP_PERM = 0x1023, /* <asm/prctl.h> */
    XFEATURE_XTILEDATA = 18,
    BLOCK = 32,
};

/* What the CPU and OS offer, without asking for anything. */
static int detect_amx(void)
{
    if (cpu_amx_env_off(getenv("DI_CPU_AMX"))) return 0;
    if (!cpu_has_avx512_vnni()) return 0; /* the scaling steps are AVX-512 */
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return 0;               /* AMX-TILE, AMX-INT8 */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & (3u << 17)) == (3u << 17); /* XTILECFG, XTILEDATA */
}

/* A machine constant, computed once: 0 unknown, 1 no, 2 yes (racing callers
 * compute the same answer). */
static int cached(int *known, int (*compute)(void))
{
    int v = __atomic_load_n(known, __ATOMIC_ACQUIRE);
    if (v == 0) {
        v = compute() ? 2 : 1;
        __atomic_store_n(known, v, __ATOMIC_RELEASE);
    }
    return v == 2;
}

int cpu_amx_possible(void)
{
    static int known;
    return cached(&known, detect_amx);
}

/* Linux >= 5.16 hands the tile data to a process only on request; it
 * refuses (ENOSPC) when a thread's alternate signal stack is too small for
 * the larger signal frame. */
static int request_amx(void)
{
    return cpu_amx_possible() &&
           syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

size_t cpu_amx_tiles_bytes(int act_type, int64_t n_in, int64_t n_tokens)
{
    size_t tiles = (size_t)(n_tokens / CPU_AMX_TOKENS);
    if (act_type == CPU_DTYPE_Q8_K) return tiles * (size_t)(n_in / QK_K) * CPU_AMX_K_TILE_BYTES;
    return tiles * (size_t)(n_in / BLOCK) * CPU_AMX_TILE_BYTES;
}

static int amx_granted; /* cpu_has_amx's answer: 0 not asked yet, 1 no, 2 yes */

int cpu_has_amx(void)
{
    return cached(&amx_granted, request_amx);
}

int cpu_amx_asked(void)
{
    int v = __atomic_load_n(&amx_granted, __ATOMIC_ACQUIRE);
    return v == 0 ? -1 : v == 2;
}

#    include "backend/cpu/matmul_amx_tiles.h"

/* Block b of the 16 rows as B's 8 rows of 64 signed bytes: row k holds
 * elements 4k..4k+3 of each row. Q8_0: its bytes (stored as q ^ 0x80);
 * nibble kinds: row k (k < 4) the low nibbles of chunk k, row 4 + k the high
 * ones (elements 16 + 4k..), Q5's fifth bits or'ed in, minus the format's
 * offset (8 Q4_0, 16 Q5_0), IQ4_NL's codebook looked up. The products are then
 * signed x signed with no correction term. */
INLINE void widen_block(const uint8_t *g0, const uint8_t *g1, size_t sb, int kind, __m512i codebook,
                        uint8_t *out)
{
    /* the 16 rows' scales (and mins) as f32 after the bytes */
    _mm512_store_ps(out + 512,
                    _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128((const void *)g1),
                                                     _mm_loadu_si128((const void *)g0))));
    if (kind == 2 || kind == 4)
        _mm512_store_ps(
            out + 576, _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128((const void *)(g1 + 16)),
                                                        _mm_loadu_si128((const void *)(g0 + 16)))));
    if (kind == 0) {
        UNROLL for (int c = 0; c < 8; c++) _mm512_store_si512(
            out + (ptrdiff_t)c * 64, _mm512_xor_si512(both_groups(g0, g1, sb + (size_t)c * 32),
                                                      _mm512_set1_epi8((char)0x80)));
        return;
    }
    const int five = kind == 3 || kind == 4;
    const int off = kind == 1 ? 8 : kind == 3 ? 16 : 0;
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512i h = five ? both_groups(g0, g1, sb + 128) : _mm512_setzero_si512();
    UNROLL for (int k = 0; k < 4; k++)
    {
        __m512i v = both_groups(g0, g1, sb + (size_t)k * 32);
        __m512i lo = _mm512_and_si512(v, low4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        if (five) {
            lo = _mm512_or_si512(lo, fifth512(h, 2 * k));
            hi = _mm512_or_si512(hi, fifth512(h, 2 * k + 1));
        }
        if (kind == 5) {
            lo = _mm512_shuffle_epi8(codebook, lo);
            hi = _mm512_shuffle_epi8(codebook, hi);
        } else if (off) {
            lo = _mm512_sub_epi8(lo, _mm512_set1_epi8((char)off));
            hi = _mm512_sub_epi8(hi, _mm512_set1_epi8((char)off));
        }
        _mm512_store_si512(out + (ptrdiff_t)k * 64, lo);
        _mm512_store_si512(out + 256 + (ptrdiff_t)k * 64, hi);
    }
}

/* The float steps of one block for the 16 tokens (a: their tile block, w:
 * the widened weights), the reference's per (row, token): (dw * dy) * isum
 * (+ mw * sy), added to the row's sum in block order. */
INLINE void scale_block(const char *a, const uint8_t *w, int32_t (*sums)[CPU_AMX_ROWS],
                        const int has_min, __m512 *acc)
{
    const __m512 dw = _mm512_load_ps(w + 512);
    const float *dy = (const float *)(a + 512), *sy = dy + CPU_AMX_TOKENS;
    UNROLL for (int t = 0; t < CPU_AMX_TOKENS; t++)
    {
        __m512 isum = _mm512_cvtepi32_ps(_mm512_load_si512(sums[t]));
        __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(dy[t]));
        __m512 p;
        if (has_min) /* (dx * dy) * sumi + mx * sy */
            p = _mm512_add_ps(_mm512_mul_ps(d, isum),
                              _mm512_mul_ps(_mm512_load_ps(w + 576), _mm512_set1_ps(sy[t])));
        else /* sumi * (dx * dy) */
            p = _mm512_mul_ps(isum, d);
        acc[t] = _mm512_add_ps(acc[t], p);
    }
}

enum { WIDE_BYTES = 640, WIDE_BLOCKS = 32 }; /* the weights widened at a time: 20 KiB */
_Static_assert(CPU_AMX_WIDE_BYTES >= WIDE_BLOCKS * WIDE_BYTES, "the widened weights fit");

/* n blocks of one token tile (a: its first block) with their widened
 * weights wide[n]: software-pipelined, block i's tiles (TMUL) going while
 * block i - 1's sums are scaled (AVX-512), alternate blocks in their own
 * tiles. */
INLINE void token_tile(const char *a, int64_t n, uint8_t (*wide)[WIDE_BYTES], const int has_min,
                       __m512 *acc)
{
    _Alignas(64) int32_t sums[2][CPU_AMX_TOKENS][CPU_AMX_ROWS];
    BLOCK_SUMS(a, BLOCK, wide[0], 0, 2, 4, sums[0]);
    for (int64_t i = 1; i < n; i += 2) {
        BLOCK_SUMS(a + i * CPU_AMX_TILE_BYTES, BLOCK, wide[i], 1, 3, 5, sums[1]);
        scale_block(a + (i - 1) * CPU_AMX_TILE_BYTES, wide[i - 1], sums[0], has_min, acc);
        if (i + 1 < n)
            BLOCK_SUMS(a + (i + 1) * CPU_AMX_TILE_BYTES, BLOCK, wide[i + 1], 0, 2, 4, sums[0]);
        scale_block(a + i * CPU_AMX_TILE_BYTES, wide[i], sums[1], has_min, acc);
    }
    if (n % 2) /* the last block's sums are the even set's */
        scale_block(a + (n - 1) * CPU_AMX_TILE_BYTES, wide[n - 1], sums[0], has_min, acc);
}

/* kind: matmul_packed_pass.inc's (0 Q8_0, 1 Q4_0, 2 Q4_1, 3 Q5_0, 4 Q5_1,
 * 5 IQ4_NL). The weights are widened WIDE_BLOCKS blocks at a time (their
 * stores long done when the tiles load them) and used by every token tile; a
 * row's partial sums wait in y between chunks (no change to the order of the
 * additions). */
INLINE void amx_rows(int64_t n_in, const uint8_t *w, size_t group_bytes, const char *tiles,
                     int64_t n_tok, float *y, int64_t y_stride, void *wide_ws, const int kind)
{
    const int has_min = kind == 2 || kind == 4, five = kind == 3 || kind == 4;
    const size_t sb = has_min ? 32 : 16, gb = sb + (kind == 0 ? 256 : five ? 160 : 128);
    const int64_t nb = n_in / BLOCK;
    const __m512i codebook =
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)cpu_iq4nl_values));
    uint8_t(*wide)[WIDE_BYTES] = __builtin_assume_aligned(wide_ws, 64); /* [WIDE_BLOCKS] */
    amx_load_tiles(BLOCK);
    for (int64_t kb = 0; kb < nb; kb += WIDE_BLOCKS) {
        int64_t n = nb - kb < WIDE_BLOCKS ? nb - kb : WIDE_BLOCKS;
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *g0 = w + (size_t)(kb + i) * gb;
            widen_block(g0, g0 + group_bytes, sb, kind, codebook, wide[i]);
        }
        for (int64_t t0 = 0; t0 < n_tok; t0 += CPU_AMX_TOKENS) {
            __m512 acc[CPU_AMX_TOKENS];
            UNROLL for (int t = 0; t < CPU_AMX_TOKENS; t++) acc[t] =
                kb == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (t0 + t) * y_stride);
            const char *a = tiles + ((size_t)(t0 / CPU_AMX_TOKENS) * (size_t)nb + (size_t)kb) *
                                        CPU_AMX_TILE_BYTES;
            token_tile(a, n, wide, has_min, acc);
            UNROLL for (int t = 0; t < CPU_AMX_TOKENS; t++)
                _mm512_storeu_ps(y + (t0 + t) * y_stride, acc[t]);
        }
    }
    _tile_release();
}

void cpu_amx_pack_token(int act_type, const void *act_row, int64_t n_in, int64_t t, char *tiles)
{
    if (act_type == CPU_DTYPE_Q8_K) {
        cpu_amx_pack_token_k(act_row, n_in, t, tiles);
        return;
    }
    const int64_t nb = n_in / BLOCK;
    const ptrdiff_t r = (ptrdiff_t)(t % CPU_AMX_TOKENS);
    char *dst = tiles + (size_t)(t / CPU_AMX_TOKENS) * (size_t)nb * CPU_AMX_TILE_BYTES;
    for (int64_t b = 0; b < nb; b++, dst += CPU_AMX_TILE_BYTES) {
        const int8_t *qs;
        float d, s = 0;
        if (act_type == CPU_DTYPE_Q8_1) {
            const block_q8_1 *x = (const block_q8_1 *)act_row + b;
            qs = x->qs;
            d = cpu_fp16_to_f32(x->d);
            s = cpu_fp16_to_f32(x->s);
        } else {
            const block_q8_0 *x = (const block_q8_0 *)act_row + b;
            qs = x->qs;
            d = cpu_fp16_to_f32(x->d);
        }
        memcpy(dst + r * BLOCK, qs, BLOCK);
        memcpy(dst + 512 + r * 4, &d, 4);
        memcpy(dst + 576 + r * 4, &s, 4);
    }
}

#    define KERNEL(NAME, KIND) AMX_KERNEL(NAME, amx_rows, KIND)

KERNEL(q8_0_amx, 0)
KERNEL(q4_0_amx, 1)
KERNEL(q4_1_amx, 2)
KERNEL(q5_0_amx, 3)
KERNEL(q5_1_amx, 4)
KERNEL(iq4_nl_amx, 5)

cpu_amx_fn cpu_amx_kernel(model_dtype dtype)
{
    if (!cpu_has_amx()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_Q8_0: return q8_0_amx;
    case MODEL_DTYPE_Q4_0: return q4_0_amx;
    case MODEL_DTYPE_Q4_1: return q4_1_amx;
    case MODEL_DTYPE_Q5_0: return q5_0_amx;
    case MODEL_DTYPE_Q5_1: return q5_1_amx;
    case MODEL_DTYPE_IQ4_NL: return iq4_nl_amx;
    default: return cpu_amx_k_kernel(dtype);
    }
}

#else

int cpu_amx_possible(void)
{
    return 0;
}

int cpu_has_amx(void)
{
    return 0;
}

int cpu_amx_asked(void)
{
    return 0;
}

size_t cpu_amx_tiles_bytes(int act_type, int64_t n_in, int64_t n_tokens)
{
    (void)act_type;
    (void)n_in;
    (void)n_tokens;
    return 0;
}

void cpu_amx_pack_token(int act_type, const void *act_row, int64_t n_in, int64_t t, char *tiles)
{
    (void)act_type;
    (void)act_row;
    (void)n_in;
    (void)t;
    (void)tiles;
}

cpu_amx_fn cpu_amx_kernel(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}

#endif
