/* The CPU backend's block formats: dequantization against gguf-py (an
 * independent implementation, tests/oracle/make_dequant_fixtures.py), the
 * f16/bf16 conversions against their definitions, and the activation
 * quantizers against the properties ggml's define. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/cpu/quant.h"

static int dtype_of_ggml(uint32_t t)
{
    switch (t) {
    case 0: return MODEL_DTYPE_F32;
    case 1: return MODEL_DTYPE_F16;
    case 2: return MODEL_DTYPE_Q4_0;
    case 3: return MODEL_DTYPE_Q4_1;
    case 6: return MODEL_DTYPE_Q5_0;
    case 7: return MODEL_DTYPE_Q5_1;
    case 8: return MODEL_DTYPE_Q8_0;
    case 10: return MODEL_DTYPE_Q2_K;
    case 11: return MODEL_DTYPE_Q3_K;
    case 12: return MODEL_DTYPE_Q4_K;
    case 13: return MODEL_DTYPE_Q5_K;
    case 14: return MODEL_DTYPE_Q6_K;
    case 20: return MODEL_DTYPE_IQ4_NL;
    case 23: return MODEL_DTYPE_IQ4_XS;
    case 30: return MODEL_DTYPE_BF16;
    default: return -1;
    }
}

static void test_dequantize_matches_gguf_py(void **state)
{
    (void)state;
    FILE *f = fopen(DI_FIXTURE_DIR "/cpu/dequant.bin", "rb");
    assert_non_null(f);
    int n_records = 0;
    uint32_t hdr[3];
    while (fread(hdr, sizeof hdr, 1, f) == 1) {
        int dtype = dtype_of_ggml(hdr[0]);
        assert_true(dtype >= 0);
        uint8_t *raw = malloc(hdr[2]);
        float *want = malloc(hdr[1] * sizeof *want), *got = malloc(hdr[1] * sizeof *got);
        assert_non_null(raw);
        assert_non_null(want);
        assert_non_null(got);
        assert_int_equal(fread(raw, 1, hdr[2], f), hdr[2]);
        assert_int_equal(fread(want, sizeof *want, hdr[1], f), hdr[1]);
        assert_int_equal(cpu_row_bytes(dtype, hdr[1]), hdr[2]);
        cpu_dequantize_row(dtype, raw, got, hdr[1]);
        for (uint32_t i = 0; i < hdr[1]; i++) {
            /* gguf-py multiplies in f32 too, sometimes in another order: one ulp-ish */
            float tol = 1e-6f * fmaxf(1.0f, fabsf(want[i]));
            if (fabsf(got[i] - want[i]) > tol) {
                fail_msg("ggml type %u element %u: got %g, gguf-py %g", hdr[0], i, (double)got[i],
                         (double)want[i]);
            }
        }
        free(raw);
        free(want);
        free(got);
        n_records++;
    }
    fclose(f);
    assert_int_equal(n_records, 14);
}

static void test_fp16_conversion_round_trips_every_value(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = cpu_fp16_to_f32((uint16_t)h);
        if (isnan(f)) {
            assert_true(((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff));
            continue;
        }
        assert_int_equal(cpu_f32_to_fp16(f), h);
    }
    /* halfway cases round to even; overflow to inf */
    assert_int_equal(cpu_f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(cpu_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(cpu_f32_to_fp16(65520.0f), 0x7c00);
    assert_int_equal(cpu_f32_to_fp16(65519.0f), 0x7bff);
    assert_int_equal(cpu_f32_to_fp16(0x1p-25f), 0x0000);
    assert_int_equal(cpu_f32_to_fp16(0x1.8p-25f), 0x0001);
    /* NaN as vcvtps2ph: quiet, sign and the payload's top 10 bits kept */
    static const uint32_t nans[][2] = {{0x7fc00000u, 0x7e00u},
                                       {0xffc12345u, 0xfe09u},
                                       {0x7f800001u, 0x7e00u},
                                       {0x7fbfe000u, 0x7fffu},
                                       {0x7f802000u, 0x7e01u}};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        float f;
        memcpy(&f, &nans[i][0], sizeof f);
        assert_int_equal(cpu_f32_to_fp16(f), nans[i][1]);
    }
}

static void test_bf16_conversion_rounds_to_nearest_even(void **state)
{
    (void)state;
    assert_true(cpu_bf16_to_f32(0x3f80) == 1.0f);
    assert_int_equal(cpu_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie, even stays */
    assert_int_equal(cpu_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie, odd rounds up */
    assert_int_equal(cpu_f32_to_bf16(-2.5f), 0xc020);
}

static void test_fp8_e4m3_decodes_by_definition(void **state)
{
    (void)state;
    assert_true(cpu_fp8_e4m3_to_f32(0x38) == 1.0f);   /* 0.0111.000 */
    assert_true(cpu_fp8_e4m3_to_f32(0x7e) == 448.0f); /* the largest finite */
    assert_true(cpu_fp8_e4m3_to_f32(0x01) == 0x1p-9f);
    assert_true(cpu_fp8_e4m3_to_f32(0xc4) == -3.0f);
    assert_true(isnan(cpu_fp8_e4m3_to_f32(0x7f)));
}

static float frand(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void test_activation_quantizers_bound_the_error(void **state)
{
    (void)state;
    enum { N = 512 };
    float x[N], y[N];
    unsigned seed = 7;
    for (int i = 0; i < N; i++) x[i] = frand(&seed) * 3.0f;
    x[5] = 0; /* and one block of zeros for Q8_0 */
    for (int i = 64; i < 96; i++) x[i] = 0;
    const int types[] = {MODEL_DTYPE_Q8_0, CPU_DTYPE_Q8_1, CPU_DTYPE_Q8_K, MODEL_DTYPE_F16,
                         MODEL_DTYPE_BF16};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        _Alignas(64) uint8_t buf[N * 4];
        cpu_quantize_row_ref(types[k], x, buf, N);
        cpu_dequantize_row(types[k], buf, y, N);
        int be = cpu_dtype_block_elems(types[k]);
        for (int b = 0; b < N / be; b++) {
            float amax = 0;
            for (int i = 0; i < be; i++) amax = fmaxf(amax, fabsf(x[b * be + i]));
            /* half a quantization step, plus 127 times the f16 rounding of the scale */
            float tol = be == 1 ? fabsf(x[b]) * 0x1p-7f
                                : amax / 127.0f * (0.5f + 127.0f * 0x1p-11f) + 1e-7f;
            for (int i = 0; i < be; i++) assert_true(fabsf(y[b * be + i] - x[b * be + i]) <= tol);
        }
    }
    /* Q8_1's s is d * sum(q); Q8_K's bsums are the sums of 16 */
    block_q8_1 q1[N / 32];
    cpu_quantize_row_ref(CPU_DTYPE_Q8_1, x, q1, N);
    for (int b = 0; b < N / 32; b++) {
        int sum = 0;
        for (int i = 0; i < 32; i++) sum += q1[b].qs[i];
        assert_true(fabsf(cpu_fp16_to_f32(q1[b].s) - (float)sum * cpu_fp16_to_f32(q1[b].d)) <=
                    fabsf((float)sum * cpu_fp16_to_f32(q1[b].d)) * 1e-3f + 1e-6f);
    }
    block_q8_K qk[N / QK_K];
    cpu_quantize_row_ref(CPU_DTYPE_Q8_K, x, qk, N);
    for (int b = 0; b < N / QK_K; b++)
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += qk[b].qs[j * 16 + i];
            assert_int_equal(qk[b].bsums[j], sum);
        }
}

/* A NaN or an infinity in an activation block (corrupt weights upstream) makes
 * the block's scale NaN and its values 0, and the rest of the row quantizes as
 * usual: a product with the block is NaN, never a silent zero (the int8
 * conversion of NaN is undefined behaviour). */
static void test_non_finite_activations_quantize_to_nan_blocks(void **state)
{
    (void)state;
    const int types[] = {MODEL_DTYPE_Q8_0, CPU_DTYPE_Q8_1, CPU_DTYPE_Q8_K};
    const float bad[] = {NAN, INFINITY, -INFINITY};
    enum { N = 512 };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int be = cpu_dtype_block_elems(types[k]);
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            float x[N], y[N];
            for (int i = 0; i < N; i++) x[i] = sinf((float)i);
            x[be + 3] = bad[b]; /* in the second block */
            uint8_t q[4096];
            cpu_quantize_row(types[k], x, q, N);
            cpu_dequantize_row(types[k], q, y, N);
            for (int i = 0; i < N; i++) {
                int in_bad_block = i / be == 1;
                if (in_bad_block ? !isnan(y[i]) : !(fabsf(y[i] - x[i]) < 0.05f))
                    fail_msg("type %d, bad value %g: element %d dequantizes to %g", types[k],
                             (double)bad[b], i, (double)y[i]);
            }
        }
    }
}

/* A block whose largest magnitude is tiny (subnormal, or a normal float near
 * FLT_MIN) has an f16 scale of 0, so it quantizes as a zero block does, in the
 * reference and the SIMD versions alike. Its multiplier (127 / amax, 1 / d)
 * overflowed to infinity: the values became NaN or infinite and their integer
 * conversion was undefined (Q4_0 then shifted INT_MIN). Q8_0 and Q4_0 are the
 * KV cache's types (docs/kv-cache.md), where a head's rotated row of small
 * values reaches them. */
static void test_tiny_blocks_quantize_as_zero_blocks(void **state)
{
    (void)state;
    const int types[] = {MODEL_DTYPE_Q8_0, CPU_DTYPE_Q8_1, MODEL_DTYPE_Q4_0};
    const float tiny[] = {1e-39f, 1e-38f}; /* subnormal, normal */
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        for (size_t m = 0; m < sizeof tiny / sizeof tiny[0]; m++) {
            float x[32], zero[32] = {0}, y[32];
            for (int i = 0; i < 32; i++) x[i] = tiny[m] * (float)(i % 3) * (i % 2 ? -0.5f : 1.0f);
            uint8_t want[64], ref[64], got[64];
            size_t bytes = cpu_row_bytes(types[k], 32);
            cpu_quantize_row_ref(types[k], zero, want, 32);
            cpu_quantize_row_ref(types[k], x, ref, 32);
            cpu_quantize_row(types[k], x, got, 32);
            assert_memory_equal(ref, want, bytes);
            assert_memory_equal(got, want, bytes);
            cpu_dequantize_row(types[k], got, y, 32);
            for (int i = 0; i < 32; i++) assert_true(y[i] == 0.0f);
        }
}

/* The SIMD activation quantizers give the reference's bytes: random rows of
 * several magnitudes, ties at .5 after scaling, zero blocks, a block whose
 * largest magnitude appears with both signs (Q8_K keeps the first), and a
 * block with a NaN. */
static void test_simd_quantizers_equal_the_reference(void **state)
{
    (void)state;
    const int types[] = {MODEL_DTYPE_Q8_0, CPU_DTYPE_Q8_1, CPU_DTYPE_Q8_K, MODEL_DTYPE_F16};
    enum { N = 2048 };
    unsigned seed = 7;
    float x[N];
    for (int i = 0; i < N; i++) x[i] = frand(&seed) * (i < 512 ? 1.0f : i < 1024 ? 1e-3f : 300.0f);
    for (int i = 1024; i < 1280; i++) x[i] = 0; /* a zero Q8_K block, zero Q8_0 blocks */
    for (int i = 1280; i < 1312; i++) x[i] = (float)(i % 5) * 0.5f - 1.0f; /* ties */
    x[1312] = 2.0f; /* the Q8_K block 5's largest magnitude, both signs */
    x[1400] = -2.0f;
    x[1800] = NAN;
    /* f16's edges: overflow, its largest and smallest values, subnormals and
     * their halfway points, signed zero, infinities, NaNs with payloads (quiet
     * and signalling, both signs) */
    static const uint32_t edges[] = {
        0x477ff000u, 0x477fefffu, 0x477fe000u, 0x38800000u, 0x387fffffu, 0x33800000u,
        0x33c00000u, 0x33000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
        0x7fc12345u, 0xffc00001u, 0x7f800001u, 0xff80abcdu, 0x7fbfffffu, 0x00000001u};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        memcpy(&x[1900 + i], &edges[i], sizeof(float));
    int ran = 0;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        uint8_t want[N * 2], got[N * 2];
        size_t bytes = cpu_row_bytes(types[k], N);
        memset(want, 0xa5, sizeof want);
        memset(got, 0xa5, sizeof got);
        cpu_quantize_row_ref(types[k], x, want, N);
        if (!cpu_quantize_row_avx2(types[k], x, got, N)) continue;
        ran++;
        for (size_t i = 0; i < bytes; i++)
            if (want[i] != got[i])
                fail_msg("type %d: byte %zu is %u, the reference's %u", types[k], i, got[i],
                         want[i]);
    }
    printf("SIMD quantizers compared: %d of 4 (%s)\n", ran, ran ? "avx2, f16c" : "no avx2 here");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simd_quantizers_equal_the_reference),
        cmocka_unit_test(test_dequantize_matches_gguf_py),
        cmocka_unit_test(test_fp16_conversion_round_trips_every_value),
        cmocka_unit_test(test_bf16_conversion_rounds_to_nearest_even),
        cmocka_unit_test(test_fp8_e4m3_decodes_by_definition),
        cmocka_unit_test(test_activation_quantizers_bound_the_error),
        cmocka_unit_test(test_non_finite_activations_quantize_to_nan_blocks),
        cmocka_unit_test(test_tiny_blocks_quantize_as_zero_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
