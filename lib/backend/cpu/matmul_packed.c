/* Interleaved-row weights and their kernels (matmul_packed.h). */
#include "backend/cpu/matmul_packed.h"

#include <string.h>

#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

enum { BLOCK = 32, TOKENS_PER_PASS = 4 };

/* Bytes before a group block's quants: d[8] (and m[8] / dmin[8]) as f16, and
 * for the K-quants the sub-block scales (and mins) as bytes [sub-block][row]. */
static size_t scales_bytes(model_dtype dtype)
{
    switch (dtype) {
    case MODEL_DTYPE_Q4_1:
    case MODEL_DTYPE_Q5_1: return 32;
    case MODEL_DTYPE_Q4_K:
    case MODEL_DTYPE_Q5_K: return 32 + 64 + 64;
    case MODEL_DTYPE_Q6_K: return 16 + 128;
    case MODEL_DTYPE_IQ4_XS: return 16 + 64;
    case MODEL_DTYPE_Q3_K: return 16 + 128;
    case MODEL_DTYPE_Q2_K: return 32 + 128;
    default: return 16;
    }
}

static size_t quants_bytes(model_dtype dtype)
{
    switch (dtype) {
    case MODEL_DTYPE_Q8_0: return 256;
    case MODEL_DTYPE_Q5_0:
    case MODEL_DTYPE_Q5_1: return 128 + 32;
    case MODEL_DTYPE_Q4_K:
    case MODEL_DTYPE_IQ4_XS: return 1024;
    case MODEL_DTYPE_Q5_K: return (size_t)8 * (128 + 32);
    case MODEL_DTYPE_Q6_K: return 1024 + 512;
    case MODEL_DTYPE_Q3_K: return 768;
    case MODEL_DTYPE_Q2_K: return 512;
    default: return 128;
    }
}

size_t cpu_pack_group_bytes(model_dtype dtype, int64_t n_in)
{
    return (size_t)(n_in / cpu_dtype_block_elems((int)dtype)) *
           (scales_bytes(dtype) + quants_bytes(dtype));
}

int cpu_pack_supported(const model_tensor *w)
{
    model_dtype dt = w->dtype;
    if (dt != MODEL_DTYPE_Q8_0 && dt != MODEL_DTYPE_Q4_0 && dt != MODEL_DTYPE_Q4_1 &&
        dt != MODEL_DTYPE_Q5_0 && dt != MODEL_DTYPE_Q5_1 && dt != MODEL_DTYPE_Q4_K &&
        dt != MODEL_DTYPE_Q5_K && dt != MODEL_DTYPE_Q6_K && dt != MODEL_DTYPE_IQ4_NL &&
        dt != MODEL_DTYPE_IQ4_XS && dt != MODEL_DTYPE_Q2_K && dt != MODEL_DTYPE_Q3_K)
        return 0;
    int be = cpu_dtype_block_elems((int)dt);
    return w->ne[0] > 0 && w->ne[0] % be == 0 && w->ne[1] > 0 && w->ne[1] % CPU_PACK_ROWS == 0 &&
           cpu_packed_kernel(dt) != NULL;
}

/* Element e (0..255) of a Q4_K block: its nibble. */
static int q4k_value(const block_q4_K *x, int e)
{
    int j = e / 32, l = e % 32;
    uint8_t b = x->qs[(j / 2) * 32 + l];
    return (j & 1) ? b >> 4 : b & 0xf;
}

/* Element e (0..255) of an IQ4_XS block: its codebook index. */
static int iq4xs_index(const block_iq4_xs *x, int e)
{
    int w = e % 32;
    uint8_t b = x->qs[(e / 32) * 16 + w % 16];
    return w < 16 ? b & 0xf : b >> 4;
}

/* Element e (0..255) of a Q2_K or Q3_K block (qs: their shared 2-bit
 * layout): its low two bits; and a Q3_K element's high bit. */
static int q2k_bits(const uint8_t *qs, int e)
{
    int j = e / 16, l = e % 16;
    return (qs[32 * (j / 8) + 16 * (j % 2) + l] >> (2 * ((j / 2) % 4))) & 3;
}

static int q3k_high(const block_q3_K *x, int e)
{
    int j = e / 16, l = e % 16;
    return (x->hmask[16 * (j % 2) + l] >> (j / 2)) & 1;
}

/* Q2_K / Q3_K: 16 vectors L_j of 2-bit values, row r's byte i of L_j holding
 * elements 16j + 4f + i (f = 0..3) in bits 2f; Q3_K's high bits in 8 vectors
 * H_p, element 16j + 4f + i of sub-blocks j = 2p, 2p + 1 in bit f + 4 (j % 2),
 * each after its two L (one ascending stream, as Q6_K's). */
static void pack_low_bits(model_dtype dt, const uint8_t *blk, int r, uint8_t *v)
{
    const uint8_t *qs =
        dt == MODEL_DTYPE_Q2_K ? ((const block_q2_K *)blk)->qs : ((const block_q3_K *)blk)->qs;
    for (int j = 0; j < 16; j++) {
        uint8_t *l = dt == MODEL_DTYPE_Q2_K ? v + (ptrdiff_t)32 * j
                                            : v + (ptrdiff_t)96 * (j / 2) + (ptrdiff_t)32 * (j % 2);
        for (int i = 0; i < 4; i++) {
            int bits = 0, high = 0;
            for (int f = 0; f < 4; f++) {
                int e = 16 * j + 4 * f + i;
                bits |= q2k_bits(qs, e) << (2 * f);
                if (dt == MODEL_DTYPE_Q3_K)
                    high |= q3k_high((const block_q3_K *)blk, e) << (f + 4 * (j % 2));
            }
            l[r * 4 + i] = (uint8_t)bits;
            if (dt == MODEL_DTYPE_Q3_K) {
                uint8_t *h = v + (ptrdiff_t)96 * (j / 2) + 64 + (ptrdiff_t)r * 4 + i;
                *h = (uint8_t)(j % 2 ? *h | high : high);
            }
        }
    }
}

/* Element e (0..255) of a Q6_K block as its unsigned 6 bits (q + 32), in the
 * reference's order (vec_dot_ref.c). */
static int q6k_value(const block_q6_K *x, int e)
{
    int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const uint8_t *ql = x->ql + (ptrdiff_t)64 * h, *qh = x->qh + (ptrdiff_t)32 * h;
    int lo = quarter == 0   ? ql[l] & 0xf
             : quarter == 1 ? ql[l + 32] & 0xf
             : quarter == 2 ? ql[l] >> 4
                            : ql[l + 32] >> 4;
    return lo | (((qh[l] >> (2 * quarter)) & 3) << 4);
}

/* A K-quant group block of 8 rows (blk[r]: row r's block). Quants: 32 vectors
 * V_k whose row r holds, for i = 0..3, elements 8k + i (low nibble) and
 * 8k + 4 + i (high nibble); Q6_K adds 16 vectors H_j of the high two bits,
 * element 16j + 4f + i in bits 2f and 2f + 1, each after the two V of its
 * sub-block, so the kernel reads one ascending stream (two streams 1 KiB apart
 * measured 3x slower from memory: the prefetcher lost them). */
static void pack_k_block(model_dtype dt, const uint8_t *const blk[CPU_PACK_ROWS], uint8_t *out)
{
    uint8_t *v = out + scales_bytes(dt);
    for (int r = 0; r < CPU_PACK_ROWS; r++) {
        if (dt == MODEL_DTYPE_Q5_K) {
            const block_q5_K *x = (const block_q5_K *)blk[r];
            memcpy(out + (ptrdiff_t)2 * r, &x->d, 2);
            memcpy(out + 16 + (ptrdiff_t)2 * r, &x->dmin, 2);
            uint8_t sc[8], m[8];
            cpu_k4_scales(x->scales, sc, m);
            for (int j = 0; j < 8; j++) {
                out[32 + j * 8 + r] = sc[j];
                out[96 + j * 8 + r] = m[j];
            }
            for (int j = 0; j < 8; j++) { /* V_4j..V_4j+3, H_j: 160 bytes a sub-block */
                uint8_t *sub = v + (ptrdiff_t)j * 160;
                for (int kk = 0; kk < 4; kk++)
                    for (int i = 0; i < 4; i++) {
                        int e = 32 * j + 8 * kk + i, l = e % 32;
                        uint8_t lo = x->qs[(j / 2) * 32 + l], hi = x->qs[(j / 2) * 32 + l + 4];
                        lo = (j & 1) ? lo >> 4 : lo & 0xf;
                        hi = (j & 1) ? hi >> 4 : hi & 0xf;
                        sub[kk * 32 + r * 4 + i] = (uint8_t)(lo | hi << 4);
                    }
                for (int i = 0; i < 4; i++) {
                    int h = 0;
                    for (int kk = 0; kk < 4; kk++) {
                        int l = 8 * kk + i;
                        h |= ((x->qh[l] >> j) & 1) << (2 * kk) | ((x->qh[l + 4] >> j) & 1)
                                                                     << (2 * kk + 1);
                    }
                    sub[128 + r * 4 + i] = (uint8_t)h;
                }
            }
        } else if (dt == MODEL_DTYPE_Q3_K) {
            const block_q3_K *x = (const block_q3_K *)blk[r];
            memcpy(out + (ptrdiff_t)2 * r, &x->d, 2);
            int8_t sc[16];
            cpu_k3_scales(x->scales, sc);
            for (int j = 0; j < 16; j++) out[16 + j * 8 + r] = (uint8_t)sc[j];
            pack_low_bits(dt, blk[r], r, v);
        } else if (dt == MODEL_DTYPE_Q2_K) {
            const block_q2_K *x = (const block_q2_K *)blk[r];
            memcpy(out + (ptrdiff_t)2 * r, &x->d, 2);
            memcpy(out + 16 + (ptrdiff_t)2 * r, &x->dmin, 2);
            for (int j = 0; j < 16; j++) out[32 + j * 8 + r] = x->scales[j]; /* scale | min << 4 */
            pack_low_bits(dt, blk[r], r, v);
        } else if (dt == MODEL_DTYPE_IQ4_XS) {
            const block_iq4_xs *x = (const block_iq4_xs *)blk[r];
            memcpy(out + (ptrdiff_t)2 * r, &x->d, 2);
            int8_t sc[8];
            cpu_iq4xs_scales(x, sc);
            for (int j = 0; j < 8; j++) out[16 + j * 8 + r] = (uint8_t)sc[j];
            for (int k = 0; k < 32; k++)
                for (int i = 0; i < 4; i++)
                    v[k * 32 + r * 4 + i] =
                        (uint8_t)(iq4xs_index(x, 8 * k + i) | iq4xs_index(x, 8 * k + 4 + i) << 4);
        } else if (dt == MODEL_DTYPE_Q4_K) {
            const block_q4_K *x = (const block_q4_K *)blk[r];
            memcpy(out + (ptrdiff_t)2 * r, &x->d, 2);
            memcpy(out + 16 + (ptrdiff_t)2 * r, &x->dmin, 2);
            uint8_t sc[8], m[8];
            cpu_k4_scales(x->scales, sc, m);
            for (int j = 0; j < 8; j++) {
                out[32 + j * 8 + r] = sc[j];
                out[96 + j * 8 + r] = m[j];
            }
            for (int k = 0; k < 32; k++)
                for (int i = 0; i < 4; i++)
                    v[k * 32 + r * 4 + i] =
                        (uint8_t)(q4k_value(x, 8 * k + i) | q4k_value(x, 8 * k + 4 + i) << 4);
        } else {
            const block_q6_K *x = (const block_q6_K *)blk[r];
            memcpy(out + (ptrdiff_t)2 * r, &x->d, 2);
            for (int j = 0; j < 16; j++) out[16 + j * 8 + r] = (uint8_t)x->scales[j];
            for (int j = 0; j < 16; j++) { /* V_2j, V_2j+1, H_j: 96 bytes a sub-block */
                uint8_t *sub = v + (ptrdiff_t)j * 96;
                for (int i = 0; i < 4; i++) {
                    int bits = 0;
                    for (int f = 0; f < 4; f++) {
                        int q = q6k_value(x, 16 * j + 4 * f + i);
                        bits |= (q >> 4) << (2 * f);
                        uint8_t *nib = sub + (ptrdiff_t)(f / 2) * 32 + (ptrdiff_t)r * 4 + i;
                        *nib = (uint8_t)(f % 2 ? (*nib & 0x0f) | (q & 0xf) << 4 : q & 0xf);
                    }
                    sub[64 + r * 4 + i] = (uint8_t)bits;
                }
            }
        }
    }
}
size_t cpu_pack_bytes(const model_tensor *w)
{
    return cpu_pack_group_bytes(w->dtype, w->ne[0]) * (size_t)(w->ne[1] / CPU_PACK_ROWS);
}

void cpu_pack(const model_tensor *w, void *dst)
{
    model_dtype dt = w->dtype;
    int64_t n_in = w->ne[0], n_groups = w->ne[1] / CPU_PACK_ROWS;
    int64_t nb = n_in / cpu_dtype_block_elems((int)dt);
    size_t row = cpu_row_bytes((int)dt, n_in), bb = cpu_dtype_block_bytes((int)dt);
    size_t gb = scales_bytes(dt) + quants_bytes(dt);
    for (int64_t g = 0; g < n_groups; g++) {
        const char *rows = (const char *)w->data + (size_t)(g * CPU_PACK_ROWS) * row;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *out = (uint8_t *)dst + ((size_t)g * (size_t)nb + (size_t)b) * gb;
            if (cpu_dtype_block_elems((int)dt) == QK_K) { /* the K-quants and IQ4_XS */
                const uint8_t *blk[CPU_PACK_ROWS];
                for (int r = 0; r < CPU_PACK_ROWS; r++)
                    blk[r] = (const uint8_t *)(rows + (size_t)r * row + (size_t)b * bb);
                pack_k_block(dt, blk, out);
                continue;
            }
            for (int r = 0; r < CPU_PACK_ROWS; r++) {
                const uint8_t *blk = (const uint8_t *)(rows + (size_t)r * row + (size_t)b * bb);
                memcpy(out + (ptrdiff_t)2 * r, blk, 2); /* d */
                int has_min = dt == MODEL_DTYPE_Q4_1 || dt == MODEL_DTYPE_Q5_1;
                if (has_min) memcpy(out + 16 + (ptrdiff_t)2 * r, blk + 2, 2); /* m */
                uint8_t *q = out + scales_bytes(dt);
                if (dt == MODEL_DTYPE_Q8_0) {
                    for (int c = 0; c < 8; c++)
                        for (int e = 0; e < 4; e++)
                            q[c * 32 + r * 4 + e] = (uint8_t)(blk[2 + c * 4 + e] ^ 0x80);
                } else if (dt == MODEL_DTYPE_Q4_0 || dt == MODEL_DTYPE_Q4_1 ||
                           dt == MODEL_DTYPE_IQ4_NL) { /* IQ4_NL: codebook indices */
                    const uint8_t *qs = blk + (has_min ? 4 : 2);
                    for (int k = 0; k < 4; k++)
                        memcpy(q + (ptrdiff_t)k * 32 + (ptrdiff_t)r * 4, qs + (ptrdiff_t)k * 4, 4);
                } else { /* Q5_0, Q5_1: the nibbles as Q4_0's, then their fifth bits */
                    const uint8_t *qh = blk + (has_min ? 4 : 2), *qs = qh + 4;
                    uint32_t bits;
                    memcpy(&bits, qh, 4);
                    for (int k = 0; k < 4; k++)
                        memcpy(q + (ptrdiff_t)k * 32 + (ptrdiff_t)r * 4, qs + (ptrdiff_t)k * 4, 4);
                    for (int i = 0; i < 4; i++) {
                        int h = 0;
                        for (int k = 0; k < 4; k++)
                            h |= (int)((bits >> (4 * k + i)) & 1) << (2 * k) |
                                 (int)((bits >> (16 + 4 * k + i)) & 1) << (2 * k + 1);
                        q[128 + r * 4 + i] = (uint8_t)h;
                    }
                }
            }
        }
    }
}

/* Side data of one token: f32 d[nb], f32 s[nb], i32 sum[nb]. */
static size_t info_row_bytes(int64_t n_in)
{
    return (size_t)(n_in / BLOCK) * 12;
}

size_t cpu_pack_info_bytes(int64_t n_in, int64_t n_tokens)
{
    return info_row_bytes(n_in) * (size_t)n_tokens;
}

void cpu_pack_info(int act_type, const void *act_row, int64_t n_in, void *info)
{
    int64_t nb = n_in / BLOCK;
    float *d = info, *s = d + nb;
    int32_t *sum = (int32_t *)(s + nb);
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *qs;
        if (act_type == CPU_DTYPE_Q8_1) {
            const block_q8_1 *y = (const block_q8_1 *)act_row + b;
            d[b] = cpu_fp16_to_f32(y->d);
            s[b] = cpu_fp16_to_f32(y->s);
            qs = y->qs;
        } else {
            const block_q8_0 *y = (const block_q8_0 *)act_row + b;
            d[b] = cpu_fp16_to_f32(y->d);
            s[b] = 0;
            qs = y->qs;
        }
        int32_t t = 0;
        for (int j = 0; j < BLOCK; j++) t += qs[j];
        sum[b] = t;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <immintrin.h>

#    define AVX2 __attribute__((target("avx2,fma,f16c"), always_inline)) static inline
#    define VNNI                                                                                   \
        __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"),               \
                       always_inline)) static inline

/* The integer block sums: acc += four-element products of unsigned u (weights)
 * and signed s (one token's four activations in every lane). */
VNNI __m256i madd_vnni(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_dpbusd_epi32(acc, u, s);
}

/* The same on two groups' rows (matmul_packed_pass.inc's 16-row pass). */
VNNI __m512i madd_vnni512(__m512i acc, __m512i u, __m512i s)
{
    return _mm512_dpbusd_epi32(acc, u, s);
}

AVX2 __m256i madd_avx2(__m256i acc, __m256i u, __m256i s)
{
    /* u <= 15 (nibbles): pair sums stay under 2 * 15 * 127, no saturation */
    __m256i pairs = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

/* Q8_0 on AVX2: the weights are q ^ 0x80; vpmaddubsw would saturate on them,
 * so take back the sign and multiply |q| by the activation carrying q's sign
 * (llama.cpp's AVX2 trick); the sum of the activations is then not needed. */
AVX2 __m256i madd_q8_avx2(__m256i acc, __m256i u, __m256i s)
{
    __m256i q = _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80));
    __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(s, q));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

static inline int32_t load4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The pass over a row group, once per instruction set (matmul_packed_pass.inc),
 * and over two groups at once in 512-bit vectors where AVX512-VNNI runs. */
#    define PASS_ROWS      8
#    define PASS_ATTR      VNNI
#    define PASS_NAME      pass_vnni
#    define PASS_K_NAME    pass_k_vnni
#    define PASS_MADD      madd_vnni
#    define PASS_MADD_Q8   madd_vnni
#    define PASS_Q8_OFFSET 128
#    include "backend/cpu/matmul_packed_pass.inc"

#    define PASS_ROWS      16
#    define PASS_ATTR      VNNI
#    define PASS_NAME      pass16_vnni
#    define PASS_K_NAME    pass16_k_vnni
#    define PASS_MADD      madd_vnni512
#    define PASS_MADD_Q8   madd_vnni512
#    define PASS_Q8_OFFSET 128
#    include "backend/cpu/matmul_packed_pass.inc"

#    define PASS_ROWS      8
#    define PASS_ATTR      AVX2
#    define PASS_NAME      pass_avx2
#    define PASS_K_NAME    pass_k_avx2
#    define PASS_MADD      madd_avx2
#    define PASS_MADD_Q8   madd_q8_avx2
#    define PASS_Q8_OFFSET 0
#    include "backend/cpu/matmul_packed_pass.inc"

/* A kernel: passes of up to four tokens, nt and the format constant in each
 * call so the pass's loops unroll and its accumulators stay in registers; gs
 * the second group's offset (the 16-row passes'; 0 for the 8-row ones). */
#    define KERNEL_LOOP(PASS, KIND, GS)                                                            \
        int64_t nb = n_in / BLOCK, t = 0;                                                          \
        for (; t + 4 <= n_tok; t += 4)                                                             \
            PASS(nb, w, act + t * act_row, act_row, info + t * info_row, info_row, 4, KIND,        \
                 y + t * y_stride, y_stride, GS);                                                  \
        const char *a = act + t * act_row, *i = info + t * info_row;                               \
        float *yt = y + t * y_stride;                                                              \
        switch (n_tok - t) {                                                                       \
        case 3: PASS(nb, w, a, act_row, i, info_row, 3, KIND, yt, y_stride, GS); break;            \
        case 2: PASS(nb, w, a, act_row, i, info_row, 2, KIND, yt, y_stride, GS); break;            \
        case 1: PASS(nb, w, a, act_row, i, info_row, 1, KIND, yt, y_stride, GS); break;            \
        default: break;                                                                            \
        }

/* The K-quants' activations are Q8_K blocks, which carry their f32 scale and
 * 16-element sums: no side data. */
#    define KERNEL_K_LOOP(PASS, KIND, GS)                                                          \
        (void)info;                                                                                \
        (void)info_row;                                                                            \
        int64_t nb = n_in / QK_K, t = 0;                                                           \
        for (; t + 4 <= n_tok; t += 4)                                                             \
            PASS(nb, w, act + t * act_row, act_row, 4, KIND, y + t * y_stride, y_stride, GS);      \
        const char *a = act + t * act_row;                                                         \
        float *yt = y + t * y_stride;                                                              \
        switch (n_tok - t) {                                                                       \
        case 3: PASS(nb, w, a, act_row, 3, KIND, yt, y_stride, GS); break;                         \
        case 2: PASS(nb, w, a, act_row, 2, KIND, yt, y_stride, GS); break;                         \
        case 1: PASS(nb, w, a, act_row, 1, KIND, yt, y_stride, GS); break;                         \
        default: break;                                                                            \
        }

#    define KERNEL_ARGS                                                                            \
        const char *act, size_t act_row, const char *info, size_t info_row, int64_t n_tok,         \
            float *y, int64_t y_stride
#    define KERNEL(NAME, PASS, KIND, TARGET)                                                       \
        __attribute__((target(TARGET))) static void NAME(int64_t n_in, const void *w, KERNEL_ARGS) \
        {                                                                                          \
            KERNEL_LOOP(PASS, KIND, 0)                                                             \
        }
#    define KERNEL_K(NAME, PASS, KIND, TARGET)                                                     \
        __attribute__((target(TARGET))) static void NAME(int64_t n_in, const void *w, KERNEL_ARGS) \
        {                                                                                          \
            KERNEL_K_LOOP(PASS, KIND, 0)                                                           \
        }
/* 16 rows: the groups at w and w + gs */
#    define KERNEL16(NAME, LOOP, PASS, KIND)                                                       \
        __attribute__((target(VNNI_TARGET))) static void NAME(int64_t n_in, const void *w,         \
                                                              size_t gs, KERNEL_ARGS)              \
        {                                                                                          \
            LOOP(PASS, KIND, gs)                                                                   \
        }

#    define VNNI_TARGET "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"
KERNEL_K(q4_K_vnni, pass_k_vnni, 0, VNNI_TARGET)
KERNEL_K(q6_K_vnni, pass_k_vnni, 1, VNNI_TARGET)
KERNEL_K(q5_K_vnni, pass_k_vnni, 2, VNNI_TARGET)
KERNEL_K(q5_K_avx2, pass_k_avx2, 2, "avx2,fma,f16c")
KERNEL_K(q4_K_avx2, pass_k_avx2, 0, "avx2,fma,f16c")
KERNEL_K(q6_K_avx2, pass_k_avx2, 1, "avx2,fma,f16c")
KERNEL_K(iq4_xs_vnni, pass_k_vnni, 3, VNNI_TARGET)
KERNEL_K(iq4_xs_avx2, pass_k_avx2, 3, "avx2,fma,f16c")
KERNEL_K(q3_K_vnni, pass_k_vnni, 4, VNNI_TARGET)
KERNEL_K(q3_K_avx2, pass_k_avx2, 4, "avx2,fma,f16c")
KERNEL_K(q2_K_vnni, pass_k_vnni, 5, VNNI_TARGET)
KERNEL_K(q2_K_avx2, pass_k_avx2, 5, "avx2,fma,f16c")
KERNEL(q8_0_vnni, pass_vnni, 0, VNNI_TARGET)
KERNEL(q4_0_vnni, pass_vnni, 1, VNNI_TARGET)
KERNEL(q4_1_vnni, pass_vnni, 2, VNNI_TARGET)
KERNEL(q5_0_vnni, pass_vnni, 3, VNNI_TARGET)
KERNEL(q5_1_vnni, pass_vnni, 4, VNNI_TARGET)
KERNEL(q8_0_avx2, pass_avx2, 0, "avx2,fma,f16c")
KERNEL(q4_0_avx2, pass_avx2, 1, "avx2,fma,f16c")
KERNEL(q4_1_avx2, pass_avx2, 2, "avx2,fma,f16c")
KERNEL(q5_0_avx2, pass_avx2, 3, "avx2,fma,f16c")
KERNEL(q5_1_avx2, pass_avx2, 4, "avx2,fma,f16c")
KERNEL(iq4_nl_vnni, pass_vnni, 5, VNNI_TARGET)
KERNEL(iq4_nl_avx2, pass_avx2, 5, "avx2,fma,f16c")
KERNEL16(q8_0_vnni16, KERNEL_LOOP, pass16_vnni, 0)
KERNEL16(q4_0_vnni16, KERNEL_LOOP, pass16_vnni, 1)
KERNEL16(q4_1_vnni16, KERNEL_LOOP, pass16_vnni, 2)
KERNEL16(q5_0_vnni16, KERNEL_LOOP, pass16_vnni, 3)
KERNEL16(q5_1_vnni16, KERNEL_LOOP, pass16_vnni, 4)
KERNEL16(iq4_nl_vnni16, KERNEL_LOOP, pass16_vnni, 5)
KERNEL16(q4_K_vnni16, KERNEL_K_LOOP, pass16_k_vnni, 0)
KERNEL16(q6_K_vnni16, KERNEL_K_LOOP, pass16_k_vnni, 1)
KERNEL16(q5_K_vnni16, KERNEL_K_LOOP, pass16_k_vnni, 2)
KERNEL16(iq4_xs_vnni16, KERNEL_K_LOOP, pass16_k_vnni, 3)
KERNEL16(q3_K_vnni16, KERNEL_K_LOOP, pass16_k_vnni, 4)
KERNEL16(q2_K_vnni16, KERNEL_K_LOOP, pass16_k_vnni, 5)

cpu_packed16_fn cpu_packed16_kernel(model_dtype dtype)
{
    if (!cpu_has_avx512_vnni()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_Q8_0: return q8_0_vnni16;
    case MODEL_DTYPE_Q4_0: return q4_0_vnni16;
    case MODEL_DTYPE_Q4_1: return q4_1_vnni16;
    case MODEL_DTYPE_Q5_0: return q5_0_vnni16;
    case MODEL_DTYPE_Q5_1: return q5_1_vnni16;
    case MODEL_DTYPE_Q4_K: return q4_K_vnni16;
    case MODEL_DTYPE_Q5_K: return q5_K_vnni16;
    case MODEL_DTYPE_Q6_K: return q6_K_vnni16;
    case MODEL_DTYPE_IQ4_NL: return iq4_nl_vnni16;
    case MODEL_DTYPE_IQ4_XS: return iq4_xs_vnni16;
    case MODEL_DTYPE_Q3_K: return q3_K_vnni16;
    case MODEL_DTYPE_Q2_K: return q2_K_vnni16;
    default: return NULL;
    }
}

cpu_packed_fn cpu_packed_kernel_avx2(model_dtype dtype)
{
    if (!cpu_has_avx2()) return NULL;
    switch (dtype) {
    case MODEL_DTYPE_Q8_0: return q8_0_avx2;
    case MODEL_DTYPE_Q4_0: return q4_0_avx2;
    case MODEL_DTYPE_Q4_1: return q4_1_avx2;
    case MODEL_DTYPE_Q5_0: return q5_0_avx2;
    case MODEL_DTYPE_Q5_1: return q5_1_avx2;
    case MODEL_DTYPE_Q4_K: return q4_K_avx2;
    case MODEL_DTYPE_Q5_K: return q5_K_avx2;
    case MODEL_DTYPE_Q6_K: return q6_K_avx2;
    case MODEL_DTYPE_IQ4_NL: return iq4_nl_avx2;
    case MODEL_DTYPE_IQ4_XS: return iq4_xs_avx2;
    case MODEL_DTYPE_Q3_K: return q3_K_avx2;
    case MODEL_DTYPE_Q2_K: return q2_K_avx2;
    default: return NULL;
    }
}

cpu_packed_fn cpu_packed_kernel(model_dtype dtype)
{
    if (!cpu_has_avx512_vnni()) return cpu_packed_kernel_avx2(dtype);
    switch (dtype) {
    case MODEL_DTYPE_Q8_0: return q8_0_vnni;
    case MODEL_DTYPE_Q4_0: return q4_0_vnni;
    case MODEL_DTYPE_Q4_1: return q4_1_vnni;
    case MODEL_DTYPE_Q5_0: return q5_0_vnni;
    case MODEL_DTYPE_Q5_1: return q5_1_vnni;
    case MODEL_DTYPE_Q4_K: return q4_K_vnni;
    case MODEL_DTYPE_Q5_K: return q5_K_vnni;
    case MODEL_DTYPE_Q6_K: return q6_K_vnni;
    case MODEL_DTYPE_IQ4_NL: return iq4_nl_vnni;
    case MODEL_DTYPE_IQ4_XS: return iq4_xs_vnni;
    case MODEL_DTYPE_Q3_K: return q3_K_vnni;
    case MODEL_DTYPE_Q2_K: return q2_K_vnni;
    default: return NULL;
    }
}

#else

cpu_packed16_fn cpu_packed16_kernel(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}

cpu_packed_fn cpu_packed_kernel_avx2(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}

cpu_packed_fn cpu_packed_kernel(model_dtype dtype)
{
    (void)dtype;
    return NULL;
}

#endif
