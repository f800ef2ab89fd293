/* CPU kernels: every SIMD kernel against its scalar reference on random input,
 * the references against the dequantized weights (so the dot products and the
 * block layouts agree), and the row-wise ops against their defining properties. */
#include <float.h>
#include <fenv.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/attention_mla.h"
#include "backend/cpu/deepseek_v4_ops.h"
#include "backend/cpu/kv_cache.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_amx.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/threadpool.h"
#include "backend/cpu/vec_dot.h"

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}
static float frand(void)
{
    return (float)(rnd() & 0xffffff) / (float)0x800000 - 1.0f;
}

static const model_dtype weight_types[] = {
    MODEL_DTYPE_F32,   MODEL_DTYPE_F16,  MODEL_DTYPE_BF16,   MODEL_DTYPE_Q8_0,
    MODEL_DTYPE_Q4_0,  MODEL_DTYPE_Q4_1, MODEL_DTYPE_Q5_0,   MODEL_DTYPE_Q5_1,
    MODEL_DTYPE_Q4_K,  MODEL_DTYPE_Q5_K, MODEL_DTYPE_Q6_K,   MODEL_DTYPE_FP8_E4M3,
    MODEL_DTYPE_Q2_K,  MODEL_DTYPE_Q3_K, MODEL_DTYPE_IQ4_NL, MODEL_DTYPE_IQ4_XS,
    MODEL_DTYPE_MXFP4,
};

/* n elements of random weights of dtype: random bits with finite, small scales. */
static void *random_weights(model_dtype dt, int64_t rows, int64_t n)
{
    size_t rb = cpu_row_bytes((int)dt, n);
    uint8_t *w = malloc(rb * (size_t)rows);
    assert_non_null(w);
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = (uint8_t)rnd();
    int be = cpu_dtype_block_elems((int)dt);
    size_t bb = cpu_dtype_block_bytes((int)dt);
    int64_t nb = (int64_t)rows * n / be;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = w + (size_t)b * bb;
        uint16_t s1 = cpu_f32_to_fp16(frand() * 0.05f), s2 = cpu_f32_to_fp16(frand() * 0.05f);
        switch (dt) {
        case MODEL_DTYPE_F32: {
            float v = frand();
            memcpy(blk, &v, 4);
            break;
        }
        case MODEL_DTYPE_F16: memcpy(blk, &s1, 2); break;
        case MODEL_DTYPE_BF16: {
            uint16_t v = cpu_f32_to_bf16(frand());
            memcpy(blk, &v, 2);
            break;
        }
        case MODEL_DTYPE_Q6_K: memcpy(blk + 208, &s1, 2); break;
        case MODEL_DTYPE_Q3_K: memcpy(blk + 108, &s1, 2); break;
        case MODEL_DTYPE_Q2_K:
            memcpy(blk + 80, &s1, 2);
            memcpy(blk + 82, &s2, 2);
            break;
        case MODEL_DTYPE_FP8_E4M3:
            if ((blk[0] & 0x7f) == 0x7f) blk[0] ^= 1; /* not NaN */
            break;
        case MODEL_DTYPE_Q4_1:
        case MODEL_DTYPE_Q5_1:
        case MODEL_DTYPE_Q4_K:
        case MODEL_DTYPE_Q5_K:
            memcpy(blk, &s1, 2);
            memcpy(blk + 2, &s2, 2);
            break;
        default: memcpy(blk, &s1, 2); break;
        }
    }
    return w;
}

static void test_simd_dot_matches_reference(void **state)
{
    (void)state;
    if (!cpu_has_avx2()) skip();
    enum { N = 1024 };
    float x[N];
    for (size_t k = 0; k < sizeof weight_types / sizeof weight_types[0]; k++) {
        model_dtype dt = weight_types[k];
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < N; i++) x[i] = frand() * (rep % 3 == 0 ? 10.0f : 1.0f);
            void *w = random_weights(dt, 1, N);
            int at = cpu_vec_dot_type(dt);
            void *a = malloc(cpu_row_bytes(at, N));
            assert_non_null(a);
            cpu_quantize_row_ref(at, x, a, N);
            float ref, fast;
            cpu_vec_dot_ref(dt)(N, &ref, w, a);
            cpu_vec_dot_avx2(dt)(N, &fast, w, a);
            /* the same exact integer sums, summed in another order */
            float wd[N], ad[N];
            cpu_dequantize_row((int)dt, w, wd, N);
            cpu_dequantize_row(at, a, ad, N);
            double mag = 0;
            for (int i = 0; i < N; i++) mag += fabs((double)wd[i] * ad[i]);
            if (fabs((double)ref - fast) > 1e-5 * mag + 1e-6)
                fail_msg("dtype %d: reference %g, AVX2 %g (magnitude %g)", dt, (double)ref,
                         (double)fast, mag);
            free(w);
            free(a);
        }
    }
}

static void test_four_row_dot_is_bit_identical(void **state)
{
    (void)state;
    if (!cpu_has_avx2()) skip();
    enum { N = 512 };
    int n_checked = 0;
    for (size_t k = 0; k < sizeof weight_types / sizeof weight_types[0]; k++) {
        model_dtype dt = weight_types[k];
        cpu_vec_dot4_fn dot4 = cpu_vec_dot4_avx2(dt);
        if (!dot4) continue;
        n_checked++;
        int at = cpu_vec_dot_type(dt);
        size_t rb = cpu_row_bytes(at, N);
        char *a = malloc(4 * rb);
        float x[N];
        assert_non_null(a);
        for (int r = 0; r < 4; r++) {
            for (int i = 0; i < N; i++) x[i] = frand() * (float)(r + 1);
            cpu_quantize_row(at, x, a + (size_t)r * rb, N);
        }
        void *w = random_weights(dt, 1, N);
        float s4[4];
        dot4(N, s4, w, a, rb);
        for (int r = 0; r < 4; r++) {
            float s1;
            cpu_vec_dot(dt)(N, &s1, w, a + (size_t)r * rb);
            if (memcmp(&s1, &s4[r], sizeof s1) != 0)
                fail_msg("dtype %d row %d: four-row %.9g, one-row %.9g", dt, r, (double)s4[r],
                         (double)s1);
        }
        free(w);
        free(a);
    }
    assert_int_equal(n_checked, 9); /* F32, F16, BF16, Q8_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K */
}

static void test_vnni_dot_is_bit_identical_to_avx2(void **state)
{
    (void)state;
    if (!cpu_has_avx512_vnni()) skip();
    enum { N = 1024 };
    int n_checked = 0;
    for (size_t k = 0; k < sizeof weight_types / sizeof weight_types[0]; k++) {
        model_dtype dt = weight_types[k];
        cpu_vec_dot_fn v1 = cpu_vec_dot_vnni(dt);
        cpu_vec_dot4_fn v4 = cpu_vec_dot4_vnni(dt);
        if (!v1) continue;
        n_checked++;
        int at = cpu_vec_dot_type(dt);
        size_t rb = cpu_row_bytes(at, N);
        char *a = malloc(4 * rb);
        float x[N];
        assert_non_null(a);
        for (int r = 0; r < 4; r++) {
            for (int i = 0; i < N; i++) x[i] = frand() * 4.0f;
            cpu_quantize_row(at, x, a + (size_t)r * rb, N);
        }
        void *w = random_weights(dt, 1, N);
        float s4[4] = {0}, want;
        if (v4) v4(N, s4, w, a, rb);
        for (int r = 0; r < 4; r++) {
            float got;
            cpu_vec_dot_avx2(dt)(N, &want, w, a + (size_t)r * rb);
            v1(N, &got, w, a + (size_t)r * rb);
            assert_memory_equal(&got, &want, sizeof got);
            if (v4) assert_memory_equal(&s4[r], &want, sizeof want);
        }
        free(w);
        free(a);
    }
    assert_int_equal(n_checked, 3); /* Q8_0, Q4_0, Q4_1 */
    /* the 2x4 tile */
    cpu_vec_dot2x4_fn d24 = cpu_vec_dot2x4_vnni(MODEL_DTYPE_Q4_1);
    assert_non_null(d24);
    int at = cpu_vec_dot_type(MODEL_DTYPE_Q4_1);
    size_t rb = cpu_row_bytes(at, N), wb = cpu_row_bytes(MODEL_DTYPE_Q4_1, N);
    char *a = malloc(4 * rb);
    float x[N];
    assert_non_null(a);
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < N; i++) x[i] = frand();
        cpu_quantize_row(at, x, a + (size_t)r * rb, N);
    }
    char *w = random_weights(MODEL_DTYPE_Q4_1, 2, N);
    float s8[8];
    d24(N, s8, w, wb, a, rb);
    for (int r = 0; r < 2; r++)
        for (int t = 0; t < 4; t++) {
            float want;
            cpu_vec_dot_avx2(MODEL_DTYPE_Q4_1)(N, &want, w + (size_t)r * wb, a + (size_t)t * rb);
            assert_memory_equal(&s8[r * 4 + t], &want, sizeof want);
        }
    free(w);
    free(a);
}

/* The AVX-512F register tiles for F32/F16/BF16 weights (4 rows x 4 tokens
 * and its 4x1, 1x4, 1x1 shapes), and every product cpu_matmul makes with them
 * (decode, prefill, row and token remainders, a bias), against the AVX2
 * one-row kernel: bit for bit, tails (n % 16) and inf/NaN weights included. */
static void test_avx512_float_tiles_are_the_avx2_path(void **state)
{
    (void)state;
    if (!cpu_has_avx512f()) {
        printf("float weight tiles: no avx512f on this CPU, skipped (avx2 kernels run)\n");
        skip();
    }
    const model_dtype types[] = {MODEL_DTYPE_F32, MODEL_DTYPE_F16, MODEL_DTYPE_BF16};
    const int64_t lens[] = {576, 1000, 16, 15, 1536};
    const int shapes[4][2] = {{4, 4}, {4, 1}, {1, 4}, {1, 1}};
    for (size_t d = 0; d < 3; d++) {
        model_dtype dt = types[d];
        cpu_vec_dot_tile_fn tile = cpu_vec_dot_tile_avx512(dt);
        assert_non_null(tile);
        assert_ptr_equal(cpu_vec_dot(dt), cpu_vec_dot_avx512(dt));
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int64_t n = lens[li];
            size_t wb = cpu_row_bytes((int)dt, n), ab = sizeof(float) * (size_t)n;
            char *w = random_weights(dt, 4, n);
            float *a = malloc(4 * ab);
            assert_non_null(a);
            for (int64_t i = 0; i < 4 * n; i++) a[i] = frand() * (i % 7 == 0 ? 30.0f : 1.0f);
            if (li == 0) { /* an infinity in row 2, a NaN in row 3 */
                uint16_t inf16 = dt == MODEL_DTYPE_BF16 ? 0x7f80 : 0x7c00;
                uint16_t nan16 = dt == MODEL_DTYPE_BF16 ? 0x7fc1 : 0x7e01;
                float inf32 = INFINITY, nan32 = NAN;
                if (dt == MODEL_DTYPE_F32) {
                    memcpy(w + 2 * wb + 40, &inf32, 4);
                    memcpy(w + 3 * wb + 8, &nan32, 4);
                } else {
                    memcpy(w + 2 * wb + 40, &inf16, 2);
                    memcpy(w + 3 * wb + 8, &nan16, 2);
                }
            }
            for (int k = 0; k < 4; k++) {
                int nr = shapes[k][0], nt = shapes[k][1];
                float s16[16];
                tile(n, s16, w, wb, nr, a, ab, nt);
                for (int r = 0; r < nr; r++)
                    for (int t = 0; t < nt; t++) {
                        float want;
                        cpu_vec_dot_avx2(dt)(n, &want, w + (size_t)r * wb,
                                             (const char *)a + t * ab);
                        if (memcmp(&want, &s16[r * 4 + t], sizeof want) != 0)
                            fail_msg("dtype %d n %lld tile %dx%d (%d, %d): %.9g, avx2 %.9g", dt,
                                     (long long)n, nr, nt, r, t, (double)s16[r * 4 + t],
                                     (double)want);
                    }
            }
            free(w);
            free(a);
        }
        /* through cpu_matmul: 70 rows (17 tiles of 4 and 2 single rows), 1 to
         * 33 tokens, 3 threads (BF16 where AMX-BF16 does not take it) */
        if (dt == MODEL_DTYPE_BF16 && cpu_has_amx_bf16()) continue;
        cpu_threadpool *pool;
        assert_int_equal(cpu_threadpool_create(3, &pool), DI_OK);
        enum { N_IN = 520, N_OUT = 70, MAX_T = 33 };
        model_tensor mw = {.name = "w", .dtype = dt, .n_dims = 2, .ne = {N_IN, N_OUT, 1, 1}};
        void *mdata = random_weights(dt, N_OUT, N_IN);
        mw.data = mdata;
        size_t wb = cpu_row_bytes((int)dt, N_IN);
        float bias[N_OUT], *x = malloc(sizeof(float) * N_IN * MAX_T),
                           *y = malloc(sizeof(float) * N_OUT * MAX_T);
        void *scratch = malloc(cpu_matmul_scratch_bytes(dt, N_IN, MAX_T));
        assert_non_null(x);
        assert_non_null(y);
        assert_non_null(scratch);
        for (int i = 0; i < N_OUT; i++) bias[i] = frand();
        for (int i = 0; i < N_IN * MAX_T; i++) x[i] = frand();
        const int64_t toks[] = {1, 2, 3, 4, 5, 9, MAX_T};
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
            cpu_matmul(pool, &mw, bias, x, toks[ti], y, scratch, 0);
            for (int64_t t = 0; t < toks[ti]; t++)
                for (int64_t o = 0; o < N_OUT; o++) {
                    float want;
                    cpu_vec_dot_avx2(dt)(N_IN, &want, (const char *)mw.data + (size_t)o * wb,
                                         x + t * N_IN);
                    want += bias[o];
                    if (memcmp(&want, &y[t * N_OUT + o], sizeof want) != 0)
                        fail_msg("dtype %d, %lld tokens, row %lld token %lld: %.9g, avx2 %.9g", dt,
                                 (long long)toks[ti], (long long)o, (long long)t,
                                 (double)y[t * N_OUT + o], (double)want);
                }
        }
        free(mdata);
        free(x);
        free(y);
        free(scratch);
        cpu_threadpool_free(pool);
    }
    printf(
        "float weight tiles: avx512f 4x4/4x1/1x4/1x1 ran (F32, F16, BF16; cpu_matmul's BF16 %s), "
        "bit-identical to the avx2 kernels\n",
        cpu_has_amx_bf16() ? "on amx-bf16 instead" : "too");
}

/* BF16 weights on AMX-BF16 (matmul_amx.h) through cpu_matmul: within float
 * rounding of a double product of the same values (the activations split
 * into two bf16 halves keep about 16 bits), a token's outputs the same bits
 * alone, in a batch of 5 and in one of 33 (batch invariance: decode and
 * prefill take one arithmetic), an infinite activation an infinite output, a
 * NaN a NaN; ragged rows (70) and rows of 520 (not whole blocks of 32). */
static void test_amx_bf16_matmul(void **state)
{
    (void)state;
    if (!cpu_has_amx_bf16()) {
        printf("amx-bf16: not on this CPU/OS, or DI_CPU_AMX=0, skipped\n");
        skip();
    }
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    assert_int_equal(cpu_threadpool_reserve(pool, CPU_AMX_WIDE_BYTES), DI_OK);
    enum { N_OUT = 70, MAX_T = 33 };
    const int64_t lens[] = {576, 520};
    for (size_t li = 0; li < 2; li++) {
        const int64_t n_in = lens[li];
        model_tensor w = {
            .name = "w", .dtype = MODEL_DTYPE_BF16, .n_dims = 2, .ne = {n_in, N_OUT, 1, 1}};
        void *wdata = random_weights(MODEL_DTYPE_BF16, N_OUT, n_in);
        w.data = wdata;
        float bias[N_OUT], *x = malloc(sizeof(float) * (size_t)(n_in * MAX_T));
        float *y = malloc(sizeof(float) * N_OUT * MAX_T), *y1 = malloc(sizeof(float) * N_OUT * 5);
        size_t sb = cpu_matmul_scratch_bytes(MODEL_DTYPE_BF16, n_in, MAX_T);
        void *scratch = malloc(sb);
        assert_non_null(x);
        assert_non_null(y);
        assert_non_null(y1);
        assert_non_null(scratch);
        memset(scratch, 0xff, sb); /* NaNs wherever the kernel would read unwritten columns */
        for (int i = 0; i < N_OUT; i++) bias[i] = frand();
        for (int64_t i = 0; i < n_in * MAX_T; i++) x[i] = frand() * (i % 5 == 0 ? 40.0f : 1.0f);
        cpu_matmul(pool, &w, bias, x, MAX_T, y, scratch, 0);
        float wd[576];
        double worst = 0;
        for (int64_t o = 0; o < N_OUT; o++) {
            cpu_dequantize_row(MODEL_DTYPE_BF16, (const char *)wdata + (size_t)(o * n_in * 2), wd,
                               n_in);
            for (int64_t t = 0; t < MAX_T; t++) {
                double ref = bias[o], mag = fabs(bias[o]);
                for (int64_t i = 0; i < n_in; i++) {
                    ref += (double)wd[i] * x[t * n_in + i];
                    mag += fabs((double)wd[i] * x[t * n_in + i]);
                }
                double e = fabs(y[t * N_OUT + o] - ref) / mag;
                if (e > worst) worst = e;
                if (fabs(y[t * N_OUT + o] - ref) > 1e-6 * mag)
                    fail_msg("n_in %lld row %lld token %lld: %.9g, double %.9g (magnitude %g)",
                             (long long)n_in, (long long)o, (long long)t, (double)y[t * N_OUT + o],
                             ref, mag);
            }
        }
        printf("amx-bf16: n_in %lld, max |y - double| %.2e of the magnitude sum\n", (long long)n_in,
               worst);
        /* the same bits alone and in a batch of 5 */
        const int64_t starts[] = {0, 7, 13, 28};
        for (size_t si = 0; si < 4; si++) {
            for (int64_t nt = 1; nt <= 5; nt += 4) {
                cpu_matmul(pool, &w, bias, x + starts[si] * n_in, nt, y1, scratch, 0);
                if (memcmp(y1, y + starts[si] * N_OUT, sizeof(float) * (size_t)(nt * N_OUT)) != 0)
                    fail_msg(
                        "n_in %lld: tokens %lld.. in a batch of %lld differ from the batch of 33",
                        (long long)n_in, (long long)starts[si], (long long)nt);
            }
        }
        /* an infinity and a NaN in token 1's activations */
        x[n_in + 3] = INFINITY;
        x[2 * n_in + 5] = NAN;
        cpu_matmul(pool, &w, NULL, x, 3, y1, scratch, 0);
        for (int64_t o = 0; o < N_OUT; o++) {
            uint16_t w3;
            memcpy(&w3, (const char *)wdata + (size_t)(o * n_in + 3) * 2, 2);
            if ((w3 & 0x7fff) != 0 && !isinf(y1[N_OUT + o]))
                fail_msg("row %lld: an infinite activation gave %g", (long long)o,
                         (double)y1[N_OUT + o]);
            if (!isnan(y1[2 * N_OUT + o]))
                fail_msg("row %lld: a NaN activation gave %g", (long long)o,
                         (double)y1[2 * N_OUT + o]);
            if (!isfinite(y1[o])) fail_msg("row %lld: token 0 not finite", (long long)o);
        }
        free(wdata);
        free(x);
        free(y);
        free(y1);
        free(scratch);
    }
    /* the breaker's smallest inputs (n_in 1, one row, one token): an infinite
     * weight times 1 or 3 (was NaN: inf x the zero mid and lo parts), finite
     * activations near FLT_MAX (were infinite: hi rounded up), each the f32
     * product exactly */
    const struct {
        uint16_t w;
        float x, want;
    } edge[] = {
        {0x7f80, 1.0f, INFINITY},
        {0xff80, 3.0f, -INFINITY},
        {0x3a80, FLT_MAX, FLT_MAX / 1024.0f},
        {0x0000, FLT_MAX, 0.0f},
        {0x3f00, -FLT_MAX, -FLT_MAX / 2.0f},
        {0x3f80, 3.3961776e38f, 3.3961776e38f},
    };
    for (size_t e = 0; e < sizeof edge / sizeof edge[0]; e++) {
        uint16_t wv = edge[e].w;
        model_tensor w1 = {.name = "w", .dtype = MODEL_DTYPE_BF16, .n_dims = 2, .ne = {1, 1, 1, 1}};
        w1.data = &wv;
        char scratch1[8192];
        assert_true(cpu_matmul_scratch_bytes(MODEL_DTYPE_BF16, 1, 1) <= sizeof scratch1);
        float got;
        cpu_matmul(pool, &w1, NULL, &edge[e].x, 1, &got, scratch1, 0);
        if (memcmp(&got, &edge[e].want, sizeof got) != 0)
            fail_msg("bf16 weight 0x%04x x %g: %g, the f32 product %g", edge[e].w,
                     (double)edge[e].x, (double)got, (double)edge[e].want);
    }
    cpu_threadpool_free(pool);
    printf("amx-bf16: BF16 products on AMX-BF16 tiles ran (prefill and decode), batch-invariant\n");
}

static void test_reference_dot_matches_dequantized_product(void **state)
{
    (void)state;
    enum { N = 512 };
    float x[N], wd[N], ad[N];
    for (size_t k = 0; k < sizeof weight_types / sizeof weight_types[0]; k++) {
        model_dtype dt = weight_types[k];
        for (int rep = 0; rep < 10; rep++) {
            for (int i = 0; i < N; i++) x[i] = frand();
            void *w = random_weights(dt, 1, N);
            int at = cpu_vec_dot_type(dt);
            void *a = malloc(cpu_row_bytes(at, N));
            assert_non_null(a);
            cpu_quantize_row_ref(at, x, a, N);
            cpu_dequantize_row((int)dt, w, wd, N);
            cpu_dequantize_row(at, a, ad, N);
            double want = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                want += (double)wd[i] * ad[i];
                mag += fabs((double)wd[i] * ad[i]);
            }
            float got;
            cpu_vec_dot_ref(dt)(N, &got, w, a);
            /* Q8_1's s and the K-quants' mins use f16/f32 rounded partial sums */
            if (fabs(got - want) > 2e-3 * mag + 1e-5)
                fail_msg("dtype %d: dot %g, dequantized %g (magnitude %g)", dt, (double)got, want,
                         mag);
            free(w);
            free(a);
        }
    }
}

static void test_threaded_matmul_matches_reference(void **state)
{
    (void)state;
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(3, &pool), DI_OK);
    const int64_t n_in = 512, n_out = 70;
    const int64_t toks[] = {1, 5, 40};
    for (size_t k = 0; k < sizeof weight_types / sizeof weight_types[0]; k++) {
        model_dtype dt = weight_types[k];
        if (dt == MODEL_DTYPE_FP8_E4M3 || dt == MODEL_DTYPE_MXFP4)
            continue; /* needs block scales: its own test */
        model_tensor w = {.name = "w", .dtype = dt, .n_dims = 2, .ne = {n_in, n_out, 1, 1}};
        w.data = random_weights(dt, n_out, n_in);
        float bias[70];
        for (int i = 0; i < n_out; i++) bias[i] = frand();
        for (size_t ti = 0; ti < 3; ti++) {
            int64_t nt = toks[ti];
            float *x = malloc(sizeof(float) * (size_t)(nt * n_in));
            float *y = malloc(sizeof(float) * (size_t)(nt * n_out));
            float *yr = malloc(sizeof(float) * (size_t)(nt * n_out));
            void *scratch = malloc(cpu_matmul_scratch_bytes(dt, n_in, nt));
            assert_non_null(x);
            assert_non_null(y);
            assert_non_null(yr);
            assert_non_null(scratch);
            for (int64_t i = 0; i < nt * n_in; i++) x[i] = frand();
            cpu_matmul(pool, &w, bias, x, nt, y, scratch, 0);
            cpu_matmul(NULL, &w, bias, x, nt, yr, scratch, 1);
            /* the same block sums added in another order: bounded by the
             * magnitude sum |w| |x| of each output */
            float wd[512];
            for (int64_t o = 0; o < n_out; o++) {
                cpu_dequantize_row((int)dt, (const char *)w.data + o * cpu_row_bytes((int)dt, n_in),
                                   wd, n_in);
                for (int64_t t = 0; t < nt; t++) {
                    double mag = 0;
                    for (int64_t i = 0; i < n_in; i++) mag += fabs((double)wd[i] * x[t * n_in + i]);
                    int64_t e = t * n_out + o;
                    if (fabs(y[e] - yr[e]) > 1e-5 * mag + 1e-5)
                        fail_msg("dtype %d, %lld tokens, element %lld: %g vs %g (magnitude %g)", dt,
                                 (long long)nt, (long long)e, (double)y[e], (double)yr[e], mag);
                }
            }
            free(x);
            free(y);
            free(yr);
            free(scratch);
        }
        free((void *)w.data);
    }
    cpu_threadpool_free(pool);
}

/* The formats with packed (interleaved-row) weights. */
static const model_dtype packed_types[] = {MODEL_DTYPE_Q8_0,   MODEL_DTYPE_Q4_0, MODEL_DTYPE_Q4_1,
                                           MODEL_DTYPE_Q5_0,   MODEL_DTYPE_Q5_1, MODEL_DTYPE_Q4_K,
                                           MODEL_DTYPE_Q5_K,   MODEL_DTYPE_Q6_K, MODEL_DTYPE_IQ4_NL,
                                           MODEL_DTYPE_IQ4_XS, MODEL_DTYPE_Q2_K, MODEL_DTYPE_Q3_K};
#define N_PACKED_TYPES (sizeof packed_types / sizeof packed_types[0])

/* out[t * n_rows + r] against the scalar reference's row o0 + r . token t
 * (activation rows act + t * arow), bit for bit. */
static void expect_reference_rows(const char *kernel, const model_tensor *w, int64_t o0,
                                  int64_t n_rows, const char *act, size_t arow, int64_t nt,
                                  const float *out)
{
    model_dtype dt = w->dtype;
    int64_t n_in = w->ne[0];
    for (int64_t t = 0; t < nt; t++)
        for (int64_t r = 0; r < n_rows; r++) {
            float want;
            int64_t o = o0 + r;
            cpu_vec_dot_ref(dt)(n_in, &want,
                                (const char *)w->data + (size_t)o * cpu_row_bytes((int)dt, n_in),
                                act + (size_t)t * arow);
            if (memcmp(&out[t * n_rows + r], &want, sizeof want) != 0)
                fail_msg("%s kernel, dtype %d, %lld tokens, row %lld token %lld: %.9g vs %.9g",
                         kernel, dt, (long long)nt, (long long)o, (long long)t,
                         (double)out[t * n_rows + r], (double)want);
        }
}

/* cpu_matmul_multi over w's packed copy (into y) against the scalar
 * reference (into yr), nt tokens of x, bit for bit. */
static void expect_product_is_reference(const char *what, cpu_threadpool *pool,
                                        const model_tensor *w, const void *packed,
                                        const float *bias, const float *x, int64_t nt, float *y,
                                        float *yr, void *scratch)
{
    cpu_matmul_multi(pool, 1, &w, &packed, &bias, x, nt, &y, scratch, 0);
    cpu_matmul(NULL, w, bias, x, nt, yr, scratch, 1);
    for (int64_t e = 0; e < nt * w->ne[1]; e++)
        if (memcmp(&y[e], &yr[e], sizeof(float)) != 0)
            fail_msg("%s, dtype %d, %lld tokens, element %lld: %.9g vs reference %.9g", what,
                     w->dtype, (long long)nt, (long long)e, (double)y[e], (double)yr[e]);
}

/* Packed (interleaved-row) products: the whole cpu_matmul_multi path (tiles,
 * threads, bias) and each instruction set's kernel on its own give the
 * scalar reference's sums bit for bit, for every token count (a token's
 * result does not depend on how many share its pass). */
static void test_packed_matmul_is_the_reference_bit_for_bit(void **state)
{
    (void)state;
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    const model_dtype *types = packed_types;
    /* 40 rows: two 16-row tiles and a last one of 8 */
    const int64_t n_out = 40, max_tok = 41;
    int ran = 0, amx_ran = 0, ran16 = 0;
    for (size_t k = 0; k < N_PACKED_TYPES; k++) {
        model_dtype dt = types[k];
        const int64_t n_in = cpu_dtype_block_elems((int)dt) == QK_K ? 768 : 320;
        model_tensor w = {.name = "w", .dtype = dt, .n_dims = 2, .ne = {n_in, n_out, 1, 1}};
        w.data = random_weights(dt, n_out, n_in);
        if (!cpu_pack_supported(&w)) { /* no AVX2 here */
            free((void *)w.data);
            continue;
        }
        ran++;
        void *packed = malloc(cpu_pack_bytes(&w));
        float *x = malloc(sizeof(float) * (size_t)(max_tok * n_in));
        float *y = malloc(sizeof(float) * (size_t)(max_tok * n_out));
        float *yr = malloc(sizeof(float) * (size_t)(max_tok * n_out));
        void *scratch = malloc(cpu_matmul_scratch_bytes(dt, n_in, max_tok));
        assert_non_null(packed);
        assert_non_null(x);
        assert_non_null(y);
        assert_non_null(yr);
        assert_non_null(scratch);
        cpu_pack(&w, packed);
        float bias[48];
        for (int i = 0; i < n_out; i++) bias[i] = frand();
        for (int64_t i = 0; i < max_tok * n_in; i++) x[i] = frand();
        const model_tensor *wp = &w;
        const void *pp = packed;
        const float *bp = bias;
        for (int64_t nt = 1; nt <= max_tok; nt += nt < 9 ? 1 : 32) {
            expect_product_is_reference("packed", pool, wp, pp, bp, x, nt, y, yr, scratch);
        }
        /* each kernel on its own (the AVX2 one also where VNNI runs) */
        cpu_packed_fn fns[2] = {cpu_packed_kernel(dt), cpu_packed_kernel_avx2(dt)};
        int act = cpu_vec_dot_type(dt);
        size_t arow = cpu_row_bytes(act, n_in), irow = cpu_pack_info_bytes(n_in, 1);
        char *info = malloc(irow * (size_t)max_tok + 1);
        assert_non_null(info);
        for (int64_t t = 0; t < max_tok; t++) {
            cpu_quantize_row_ref(act, x + t * n_in, (char *)scratch + (size_t)t * arow, n_in);
            if (act != CPU_DTYPE_Q8_K)
                cpu_pack_info(act, (char *)scratch + (size_t)t * arow, n_in,
                              info + (size_t)t * irow);
        }
        size_t gb = cpu_pack_group_bytes(dt, n_in);
        for (int f = 0; f < 2; f++) {
            if (!fns[f]) continue;
            for (int64_t nt = 1; nt <= 9; nt++) {
                for (int64_t g = 0; g < n_out / CPU_PACK_ROWS; g++) {
                    float out[9 * CPU_PACK_ROWS];
                    fns[f](n_in, (const char *)packed + (size_t)g * gb, scratch, arow, info, irow,
                           nt, out, CPU_PACK_ROWS);
                    expect_reference_rows(f ? "avx2" : "chosen", &w, g * CPU_PACK_ROWS,
                                          CPU_PACK_ROWS, scratch, arow, nt, out);
                }
            }
        }
        /* the 16-row kernel on its own (AVX512-VNNI): two groups at once */
        cpu_packed16_fn k16 = cpu_packed16_kernel(dt);
        if (k16) {
            ran16++;
            for (int64_t nt = 1; nt <= 9; nt++)
                for (int64_t g = 0; g + 1 < n_out / CPU_PACK_ROWS; g++) { /* every pair */
                    float out[9 * CPU_PACK16_ROWS];
                    k16(n_in, (const char *)packed + (size_t)g * gb, gb, scratch, arow, info, irow,
                        nt, out, CPU_PACK16_ROWS);
                    expect_reference_rows("16-row", &w, g * CPU_PACK_ROWS, CPU_PACK16_ROWS, scratch,
                                          arow, nt, out);
                }
        }
        /* the AMX kernel on its own: 16-row tiles of 16 and 32 tokens */
        cpu_amx_fn amx = cpu_amx_kernel(dt);
        char *tiles = malloc(cpu_amx_tiles_bytes(act, n_in, max_tok) + 1);
        void *wide = aligned_alloc(64, CPU_AMX_WIDE_BYTES);
        assert_non_null(tiles);
        assert_non_null(wide);
        for (int64_t t = 0; t < max_tok / CPU_AMX_TOKENS * CPU_AMX_TOKENS; t++)
            cpu_amx_pack_token(act, (char *)scratch + (size_t)t * arow, n_in, t, tiles);
        if (amx) {
            amx_ran++;
            for (int64_t nt = CPU_AMX_TOKENS; nt <= 2 * CPU_AMX_TOKENS; nt += CPU_AMX_TOKENS)
                for (int64_t g = 0; g < n_out / CPU_AMX_ROWS; g++) {
                    float out[2 * CPU_AMX_TOKENS * CPU_AMX_ROWS];
                    amx(n_in, (const char *)packed + (size_t)(2 * g) * gb, gb, tiles, nt, out,
                        CPU_AMX_ROWS, wide);
                    expect_reference_rows("amx", &w, g * CPU_AMX_ROWS, CPU_AMX_ROWS, scratch, arow,
                                          nt, out);
                }
        }
        free(tiles);
        free(wide);
        free(info);
        free(packed);
        free(x);
        free(y);
        free(yr);
        free(scratch);
        free((void *)w.data);
    }
    printf("packed kernels: %s\n", ran ? (cpu_has_avx512_vnni() ? "avx512-vnni and avx2" : "avx2")
                                       : "none (no avx2 on this CPU)");
    printf("16-row packed kernels: %s\n",
           ran16 ? "ran (avx512-vnni, two groups a pass)" : "not run (no avx512-vnni here)");
    if (cpu_has_avx512_vnni()) assert_int_equal(ran16, (int)(N_PACKED_TYPES));
    printf("amx kernels: %s\n", cpu_has_amx() ? "ran (amx-int8 prefill tiles)"
                                              : "not run (no amx-int8 here, or DI_CPU_AMX=0)");
    if (cpu_has_amx()) assert_int_equal(amx_ran, 12); /* every packed format */
    if (cpu_has_avx2()) assert_int_equal(ran, (int)(N_PACKED_TYPES));
    cpu_threadpool_free(pool);
}

/* The AMX tiles through the whole product (cpu_matmul_multi: tasks of
 * several tiles, the tokens after the last whole tile and the rows after
 * the last 16 on the 8-row kernels, weights widened in chunks of 32 blocks
 * or 4 super-blocks,
 * bias): every output the scalar reference's bit for bit. Says whether AMX
 * ran (machines differ). */
static void test_amx_matmul_is_the_reference_bit_for_bit(void **state)
{
    (void)state;
    if (!cpu_has_amx()) {
        printf("amx: not run (no amx-int8 on this CPU, or DI_CPU_AMX=0)\n");
        return;
    }
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    const model_dtype *types = packed_types;
    /* 41 blocks of 32 (chunks of 32 and an odd 9) or 5 of 256: more than one
     * chunk of widened weights */
    const int64_t n_out = 40, toks[] = {16, 17, 79, 130};
    for (size_t k = 0; k < N_PACKED_TYPES; k++) {
        model_dtype dt = types[k];
        const int64_t n_in = cpu_dtype_block_elems((int)dt) == QK_K ? 1280 : 1312;
        model_tensor w = {.name = "w", .dtype = dt, .n_dims = 2, .ne = {n_in, n_out, 1, 1}};
        w.data = random_weights(dt, n_out, n_in);
        assert_true(cpu_pack_supported(&w));
        assert_non_null(cpu_amx_kernel(dt));
        void *packed = malloc(cpu_pack_bytes(&w));
        float *x = malloc(sizeof(float) * (size_t)(130 * n_in));
        float *y = malloc(sizeof(float) * (size_t)(130 * n_out));
        float *yr = malloc(sizeof(float) * (size_t)(130 * n_out));
        void *scratch = malloc(cpu_matmul_scratch_bytes(dt, n_in, 130));
        assert_true(packed && x && y && yr && scratch);
        cpu_pack(&w, packed);
        float bias[40];
        for (int i = 0; i < n_out; i++) bias[i] = frand();
        for (int64_t i = 0; i < 130 * n_in; i++) x[i] = frand();
        const model_tensor *wp = &w;
        const void *pp = packed;
        const float *bp = bias;
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
            int64_t nt = toks[ti];
            expect_product_is_reference("amx", pool, wp, pp, bp, x, nt, y, yr, scratch);
        }
        free(packed);
        free(x);
        free(y);
        free(yr);
        free(scratch);
        free((void *)w.data);
    }
    printf("amx: ran (amx-int8 tiles of Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/Q2_K/Q3_K/Q4_K/Q5_K/"
           "Q6_K/IQ4_XS)\n");
    cpu_threadpool_free(pool);
}

/* The routed experts read their matrices' interleaved copies (as the dense
 * products do): every token's output is the scalar reference's bit for bit,
 * for any number of tokens. The row-at-a-time kernels the experts ran before
 * sum Q4_K/Q6_K blocks in another order and fail this. */
static void test_moe_experts_read_the_packed_copies(void **state)
{
    (void)state;
    enum { NE = 4, K = 2, E = 256, F = 256, MAXT = 19 };
    const model_dtype gu[2] = {MODEL_DTYPE_Q4_K, MODEL_DTYPE_Q8_0},
                      dn[2] = {MODEL_DTYPE_Q6_K, MODEL_DTYPE_Q5_0};
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    float *x = malloc(sizeof(float) * MAXT * E), *out = malloc(sizeof(float) * MAXT * E),
          *want = malloc(sizeof(float) * MAXT * E), weight[MAXT * K];
    int32_t sel[MAXT * K];
    size_t act = 0;
    for (int v = 0; v < 2; v++) {
        size_t a = cpu_matmul_scratch_bytes(gu[v], E, MAXT),
               b = cpu_matmul_scratch_bytes(dn[v], F, MAXT);
        act = a > act ? a : act;
        act = b > act ? b : act;
    }
    cpu_moe_scratch s = {malloc(sizeof(float) * MAXT * E), malloc(sizeof(float) * MAXT * E),
                         malloc(sizeof(float) * MAXT * F), malloc(sizeof(float) * MAXT * F),
                         malloc(act)};
    assert_non_null(x);
    assert_non_null(out);
    assert_non_null(want);
    assert_non_null(s.xe);
    assert_non_null(s.ye);
    assert_non_null(s.gate);
    assert_non_null(s.up);
    assert_non_null(s.act);
    for (int v = 0; v < 2; v++) {
        model_tensor t[3][NE];
        cpu_expert_matrix m[3][NE];
        for (int p = 0; p < 3; p++)
            for (int e = 0; e < NE; e++) {
                model_dtype dt = p == 2 ? dn[v] : gu[v];
                int64_t n_in = p == 2 ? F : E, n_out = p == 2 ? E : F;
                t[p][e] = (model_tensor){
                    .name = "expert", .dtype = dt, .n_dims = 2, .ne = {n_in, n_out, 1, 1}};
                t[p][e].data = random_weights(dt, n_out, n_in);
                void *packed = NULL;
                if (cpu_pack_supported(&t[p][e])) {
                    packed = malloc(cpu_pack_bytes(&t[p][e]));
                    assert_non_null(packed);
                    cpu_pack(&t[p][e], packed);
                }
                m[p][e] = (cpu_expert_matrix){&t[p][e], packed};
            }
        printf("moe experts %d/%d: %s\n", gu[v], dn[v],
               m[0][0].packed ? "packed kernels" : "no packed kernels on this CPU (no avx2)");
        for (int64_t i = 0; i < MAXT * E; i++) x[i] = frand();
        for (int i = 0; i < MAXT * K; i++) {
            /* two distinct experts a token */
            sel[i] = i % K == 1 ? (sel[i - 1] + 1 + (int32_t)(rnd() % (NE - 1))) % NE
                                : (int32_t)(rnd() % NE);
            weight[i] = frand();
        }
        for (int64_t n = 1; n <= MAXT; n += n < 5 ? 1 : 7) {
            for (int ref = 0; ref < 2; ref++)
                cpu_moe_experts(pool, NE, m[0], m[1], m[2], x, n, sel, weight, K, ref ? want : out,
                                0, &s, ref, 0.0f);
            for (int64_t i = 0; i < n * E; i++)
                if (memcmp(&out[i], &want[i], sizeof(float)) != 0)
                    fail_msg("experts %d/%d, %lld tokens, element %lld: %.9g vs reference %.9g",
                             gu[v], dn[v], (long long)n, (long long)i, (double)out[i],
                             (double)want[i]);
        }
        for (int p = 0; p < 3; p++)
            for (int e = 0; e < NE; e++) {
                free((void *)m[p][e].packed);
                free((void *)t[p][e].data);
            }
    }
    free(x);
    free(out);
    free(want);
    free(s.xe);
    free(s.ye);
    free(s.gate);
    free(s.up);
    free(s.act);
    cpu_threadpool_free(pool);
}

/* n rows of width random values stored as a DeepSeek-V4 cache of dtype
 * (cpu_v4_rows_store) into *stored, and what a reader sees of them (each row
 * dequantized and rotated back) returned as f32; the stored values are
 * checked to be the originals within the type's rounding. */
static float *v4_cache_rows(model_dtype dtype, int64_t n, int64_t width, void **stored)
{
    float *x = malloc(sizeof(float) * (size_t)(n * width)),
          *seen = malloc(sizeof(float) * (size_t)(n * width));
    const size_t rb = cpu_row_bytes((int)dtype, width);
    *stored = malloc(rb * (size_t)n);
    assert_non_null(x);
    assert_non_null(seen);
    assert_non_null(*stored);
    for (int64_t i = 0; i < n * width; i++) x[i] = frand();
    cpu_v4_rows_store(dtype, *stored, x, width, width, n);
    const double tol[] = {[MODEL_DTYPE_F32] = 0,
                          [MODEL_DTYPE_F16] = 1e-3,
                          [MODEL_DTYPE_Q8_0] = 0.03,
                          [MODEL_DTYPE_Q4_0] = 0.6};
    for (int64_t r = 0; r < n; r++) {
        float *row = seen + r * width;
        cpu_dequantize_row((int)dtype, (const char *)*stored + (size_t)r * rb, row, width);
        if (cpu_kv_rotates(dtype, width)) cpu_kv_rotate(row, width);
        for (int64_t i = 0; i < width; i++)
            if (fabs(row[i] - x[r * width + i]) > tol[dtype])
                fail_msg("dtype %d, width %lld: row %lld value %lld stored as %g, was %g", dtype,
                         (long long)width, (long long)r, (long long)i, row[i], x[r * width + i]);
    }
    free(x);
    return seen;
}

/* DeepSeek-V4's attention with sinks against double arithmetic over the
 * values the cache holds: the window ring wrapping, the indexer's choice
 * with unused (-1) slots, then every complete entry; with block, every row
 * sees the window up to the last row's position (DSpark's non-causal block,
 * the ring's 12 rows all read by the first); each token alone equal to its
 * row in the batch, bit for bit. */
static void check_sink_attention(cpu_threadpool *pool, int64_t d, int use_sel, int block,
                                 model_dtype dtype, int overflow)
{
    enum { NH = 5, N = 6, WINDOW = 7, RING = 12, NCOMP = 9, K = 4, RATE = 4 };
    float *q = malloc(sizeof(float) * (size_t)(N * NH * d)),
          *out = malloc(sizeof(float) * (size_t)(N * NH * d)),
          *one = malloc(sizeof(float) * (size_t)(NH * d)), sinks[NH];
    double *o = malloc(sizeof(double) * (size_t)d);
    assert_non_null(q);
    assert_non_null(out);
    assert_non_null(one);
    assert_non_null(o);
    void *win_rows, *comp_rows;
    float *win = v4_cache_rows(dtype, RING, d, &win_rows),
          *comp = v4_cache_rows(dtype, NCOMP, d, &comp_rows);
    int64_t pos[N], last[N];
    int32_t sel[N * K];
    for (int64_t i = 0; i < N * NH * d; i++) q[i] = frand();
    for (int h = 0; h < NH; h++) sinks[h] = frand() * 2.0f;
    if (overflow) { /* scores -inf in f32: -6e38 in dimension 0 (-2 exact in f16, 0 elsewhere) */
        assert_true(dtype == MODEL_DTYPE_F32 || dtype == MODEL_DTYPE_F16); /* (stored as seen) */
        for (int i = 0; i < N * NH; i++) q[i * d] = 3e38f;
        for (int r = 0; r < RING; r++) win[r * d] = -2.0f;
        for (int r = 0; r < NCOMP; r++) comp[r * d] = overflow == 1 || r == 0 ? -2.0f : 0.0f;
        cpu_v4_rows_store(dtype, win_rows, win, d, d, RING);
        cpu_v4_rows_store(dtype, comp_rows, comp, d, d, NCOMP);
    }
    for (int t = 0; t < N; t++) {
        pos[t] = 10 + t; /* ring rows wrap past 12 */
        last[t] = 10 + N - 1;
        for (int i = 0; i < K; i++) sel[t * K + i] = i == K - 1 && t % 2 ? -1 : (t + 3 * i) % NCOMP;
    }
    const float scale = 0.3f;
    cpu_sink_attention(pool, q, NH, d, N, pos, block ? last : NULL, win_rows, RING, WINDOW,
                       comp_rows, NCOMP, RATE, use_sel ? sel : NULL, K, dtype, sinks, scale, out);
    double worst = 0;
    for (int t = 0; t < N; t++)
        for (int h = 0; h < NH; h++) {
            const float *keys[WINDOW + N + NCOMP];
            int nk = 0;
            for (int64_t p = pos[t] - WINDOW + 1; p <= (block ? last[t] : pos[t]); p++)
                keys[nk++] = win + (p % RING) * d;
            if (use_sel) {
                for (int i = 0; i < K; i++)
                    if (sel[t * K + i] >= 0) keys[nk++] = comp + sel[t * K + i] * d;
            } else {
                for (int64_t e = 0; e < (pos[t] + 1) / RATE && e < NCOMP; e++)
                    keys[nk++] = comp + e * d;
            }
            const float *qh = q + (t * NH + h) * d;
            double sc[WINDOW + N + NCOMP], m = sinks[h], l = 0;
            memset(o, 0, sizeof(double) * (size_t)d);
            for (int j = 0; j < nk; j++) {
                sc[j] = 0;
                for (int64_t i = 0; i < d; i++) sc[j] += (double)qh[i] * keys[j][i];
                sc[j] *= scale;
                if (sc[j] > m) m = sc[j];
            }
            l = exp(sinks[h] - m);
            for (int j = 0; j < nk; j++) {
                double pj = exp(sc[j] - m);
                l += pj;
                for (int64_t i = 0; i < d; i++) o[i] += pj * keys[j][i];
            }
            for (int64_t i = 0; i < d; i++) {
                double diff = fabs(o[i] / l - out[(t * NH + h) * d + i]);
                worst = diff > worst || isnan(diff) ? diff : worst; /* (NaN stays) */
            }
        }
    printf("sink attention, %s cache%s, head_dim %lld, %s%s%s: max |diff| from double %.2e\n",
           dtype == MODEL_DTYPE_F32    ? "f32"
           : dtype == MODEL_DTYPE_F16  ? "f16"
           : dtype == MODEL_DTYPE_Q8_0 ? "q8_0"
                                       : "q4_0",
           cpu_kv_rotates(dtype, d) ? " (rotated)" : "", (long long)d,
           use_sel ? "the indexer's entries" : "every entry", block ? ", a block" : "",
           overflow == 1   ? ", every score -inf"
           : overflow == 2 ? ", the first 8 keys' scores -inf"
                           : "",
           worst);
    if (!(worst < 1e-5)) fail_msg("dtype %d: max |diff| %g", dtype, worst);
    for (int t = 0; t < N; t++) {
        cpu_sink_attention(pool, q + t * NH * d, NH, d, 1, pos + t, block ? last + t : NULL,
                           win_rows, RING, WINDOW, comp_rows, NCOMP, RATE,
                           use_sel ? sel + t * K : NULL, K, dtype, sinks, scale, one);
        assert_memory_equal(one, out + t * NH * d, sizeof(float) * (size_t)(NH * d));
    }
    free(q);
    free(out);
    free(one);
    free(o);
    free(win);
    free(comp);
    free(win_rows);
    free(comp_rows);
}

/* Every cache type on every path: head_dim 64 (the AVX2 tile where it runs;
 * quantized rows rotated), 96 (the tile; not rotated), 48 (the per-head walk,
 * f32 and f16: no whole blocks), 544 (the walk past the tile's 512; not
 * rotated) and 576 (the walk, rotated). */
static void test_sink_attention_matches_double(void **state)
{
    (void)state;
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(3, &pool), DI_OK);
    printf("sink attention kernels: %s\n", cpu_has_avx2()
                                               ? "avx2 tile (head_dim 64, 96), per-head walk "
                                                 "(48, 544, 576)"
                                               : "per-head walk");
    static const model_dtype types[] = {MODEL_DTYPE_F32, MODEL_DTYPE_F16, MODEL_DTYPE_Q8_0,
                                        MODEL_DTYPE_Q4_0};
    static const int64_t dims[] = {64, 96, 48, 544, 576};
    for (int ti = 0; ti < 4; ti++)
        for (int di = 0; di < 5; di++) {
            if (dims[di] % 32 && types[ti] != MODEL_DTYPE_F32 && types[ti] != MODEL_DTYPE_F16)
                continue;
            for (int use_sel = 0; use_sel < 2; use_sel++)
                check_sink_attention(pool, dims[di], use_sel, 0, types[ti], 0);
            check_sink_attention(pool, dims[di], 0, 1, types[ti], 0);
        }
    /* scores that overflow to -inf weigh nothing (the tile and the walk took
     * e^(-inf + inf), NaN): with every one of them the sink takes all the
     * weight, 0 as in double; with the window's and the first entry's, an f16
     * cache's walk sees a first tile of 8 at -inf and then finite keys */
    for (int di = 0; di < 5; di++) {
        check_sink_attention(pool, dims[di], 0, 0, MODEL_DTYPE_F32, 1);
        check_sink_attention(pool, dims[di], 0, 0, MODEL_DTYPE_F16, 2);
    }
    cpu_threadpool_free(pool);
}

/* The lightning indexer reads its keys in the cache's type: the same choice
 * as over the f32 values the cache holds (a rotated cache's rows rotated
 * back), for every type; 3 heads of 128 (q rotated once for a rotated
 * cache), 130 of 128 (past QROT_MAX: every key rotated back instead) and 3
 * of 36 (f16 only: the reference conversion, not whole vectors of 8). */
static void check_indexer(cpu_threadpool *pool, int nh, int64_t d, model_dtype dtype)
{
    enum { N = 5, NK = 40, RATE = 4, K = 6 };
    float *q = malloc(sizeof(float) * (size_t)(N * nh * d)), *w = malloc(sizeof(float) * N * nh),
          *scratch = malloc(sizeof(float) * 2 * (NK + 1));
    assert_non_null(q);
    assert_non_null(w);
    assert_non_null(scratch);
    int64_t pos[N];
    for (int64_t i = 0; i < N * nh * d; i++) q[i] = frand();
    for (int i = 0; i < N * nh; i++) w[i] = frand();
    for (int t = 0; t < N; t++) pos[t] = 100 + 17 * t; /* past NK * RATE: every key */
    pos[0] = 30;                                       /* only the first 7 */
    void *stored;
    float *seen = v4_cache_rows(dtype, NK, d, &stored);
    int32_t got[N * K], want[N * K];
    cpu_indexer_topk(pool, q, w, nh, d, N, pos, stored, dtype, NK, RATE, 0.1f, 0.5f, K, got, NULL,
                     scratch, NK + 1);
    cpu_indexer_topk(pool, q, w, nh, d, N, pos, seen, MODEL_DTYPE_F32, NK, RATE, 0.1f, 0.5f, K,
                     want, NULL, scratch, NK + 1);
    assert_memory_equal(got, want, sizeof got);
    for (int i = 0; i < K; i++) assert_in_range(got[i], 0, 6); /* row 0 sees 7 keys */
    free(seen);
    free(stored);
    free(q);
    free(w);
    free(scratch);
}

/* The indexer's top-k: the best first, equal scores by the lower index, -1
 * past the visible entries. Small integers make every score exact (and many
 * equal: ReLU's zeros), so the order is known: checked against a sort. */
static void test_indexer_topk_order_and_ties(void **state)
{
    (void)state;
    enum { NH = 2, D = 8, NK = 300, RATE = 1 };
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    float q[NH * D], w[NH] = {1.0f, 1.0f}, keys[NK * D], score[NK];
    float *scratch = malloc(sizeof(float) * 2 * (NK + 1));
    assert_non_null(scratch);
    for (int i = 0; i < NH * D; i++) q[i] = (float)((int)(rnd() % 5) - 2);
    for (int i = 0; i < NK * D; i++) keys[i] = (float)((int)(rnd() % 5) - 2);
    for (int s = 0; s < NK; s++) {
        score[s] = 0;
        for (int h = 0; h < NH; h++) {
            float d = 0;
            for (int i = 0; i < D; i++) d += q[h * D + i] * keys[s * D + i];
            score[s] += d > 0 ? d : 0;
        }
    }
    static const int ks[] = {1, 7, 64, 250, 299, 300, 310};
    static const int64_t visible[] = {300, 300, 300, 300, 300, 300, 300, 40};
    for (size_t c = 0; c < sizeof ks / sizeof ks[0] + 1; c++) {
        const int k = c < sizeof ks / sizeof ks[0] ? ks[c] : 64;
        const int64_t pos = visible[c] - 1; /* entries s < (pos + 1) / RATE */
        int32_t got[310], want[310];
        cpu_indexer_topk(pool, q, w, NH, D, 1, &pos, keys, MODEL_DTYPE_F32, NK, RATE, 1.0f, 1.0f, k,
                         got, NULL, scratch, NK + 1);
        /* the reference: selection by repeated maxima, the lower index first */
        int taken[NK] = {0};
        for (int i = 0; i < k; i++) {
            int best = -1;
            for (int s = 0; s < visible[c]; s++)
                if (!taken[s] && (best < 0 || score[s] > score[best])) best = s;
            want[i] = best;
            if (best >= 0) taken[best] = 1;
        }
        if (memcmp(got, want, sizeof(int32_t) * (size_t)k) != 0)
            fail_msg("k %d of %lld visible: the selections differ", k, (long long)visible[c]);
    }
    free(scratch);
    cpu_threadpool_free(pool);
}

/* DeepSeek-V4.1's candidate blocks (backend_index_candidates): a source row's
 * blocks are the best by their entries' maximum, the last visible block
 * always one, the lower index among equals, -1 where fewer; a later layer's
 * top-k is the best of its entries inside them. Small integers make every
 * score exact and many equal, so the order is known: checked by repeated
 * maxima; rows at many positions (fewer blocks than asked, and more); head
 * dims the AVX2 tiles take (16) and the scalar step's (12). */
static void check_candidate_blocks(cpu_threadpool *pool, int D)
{
    enum { NH = 2, DMAX = 16, NK = 100, BLOCK = 8, NB = 3, K = 5, N = 6 };
    /* queries [2][N, NH, D]: the source's, then a later layer's */
    float q[2 * N * NH * DMAX], w[N * NH], keys[NK * DMAX];
    const int64_t stride = NK + 2 + NK / BLOCK;
    float *scratch = malloc(sizeof(float) * 2 * (size_t)stride);
    assert_non_null(scratch);
    for (int i = 0; i < 2 * N * NH * D; i++) q[i] = (float)((int)(rnd() % 5) - 2);
    for (int i = 0; i < N * NH; i++) w[i] = (float)(1 + rnd() % 2);
    for (int i = 0; i < NK * D; i++) keys[i] = (float)((int)(rnd() % 5) - 2);
    const int64_t pos[N] = {0, 9, 23, 40, 71, 99}; /* 1 to 13 blocks of 8 */
    int32_t blocks[N * NB], sel[N * K], dense[N * K];
    backend_index_candidates src = {NULL, blocks, NB, BLOCK}, later = {blocks, NULL, NB, BLOCK};
    assert_int_equal(cpu_indexer_topk(pool, q, w, NH, D, N, pos, keys, MODEL_DTYPE_F32, NK, 1, 1.0f,
                                      1.0f, K, dense, &src, scratch, stride),
                     DI_OK);
    assert_int_equal(cpu_indexer_topk(pool, q + N * NH * D, w, NH, D, N, pos, keys, MODEL_DTYPE_F32,
                                      NK, 1, 1.0f, 1.0f, K, sel, &later, scratch, stride),
                     DI_OK);
    /* a scratch row too short for the blocks' scores: refused */
    assert_int_equal(cpu_indexer_topk(pool, q, w, NH, D, N, pos, keys, MODEL_DTYPE_F32, NK, 1, 1.0f,
                                      1.0f, K, dense, &src, scratch, NK + 1),
                     DI_ERR_INVALID_ARGUMENT);
    int restricted = 0;
    for (int t = 0; t < N; t++) {
        const int lim = (int)pos[t] + 1, nb = (lim + BLOCK - 1) / BLOCK;
        float score[2][NK], bscore[NK / BLOCK + 1];
        for (int l = 0; l < 2; l++)
            for (int s = 0; s < lim; s++) {
                score[l][s] = 0;
                for (int h = 0; h < NH; h++) {
                    const float *qh = q + ((l * N + t) * NH + h) * D;
                    float d = 0;
                    for (int i = 0; i < D; i++) d += qh[i] * keys[s * D + i];
                    score[l][s] += (d > 0 ? d : 0) * w[t * NH + h];
                }
            }
        /* the source's blocks: repeated maxima of the block scores (the last
         * block's +inf), the lower index first */
        for (int b = 0; b < nb; b++) {
            bscore[b] = -INFINITY;
            for (int s = b * BLOCK; s < lim && s < (b + 1) * BLOCK; s++)
                bscore[b] = fmaxf(bscore[b], score[0][s]);
        }
        bscore[nb - 1] = INFINITY;
        int is_cand[NK / BLOCK + 1] = {0};
        for (int j = 0; j < NB; j++) {
            int best = -1;
            for (int b = 0; b < nb; b++)
                if (!is_cand[b] && (best < 0 || bscore[b] > bscore[best])) best = b;
            if (best >= 0) is_cand[best] = 1;
            assert_int_equal(blocks[t * NB + j], best);
        }
        restricted += nb > NB;
        /* the later layer: repeated maxima over its candidates' entries */
        int taken[NK] = {0};
        for (int i = 0; i < K; i++) {
            int best = -1;
            for (int s = 0; s < lim; s++)
                if (is_cand[s / BLOCK] && !taken[s] && (best < 0 || score[1][s] > score[1][best]))
                    best = s;
            if (best >= 0) taken[best] = 1;
            assert_int_equal(sel[t * K + i], best);
        }
    }
    assert_true(restricted >= 2);
    free(scratch);
}

static void test_indexer_candidate_blocks(void **state)
{
    (void)state;
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    check_candidate_blocks(pool, 16);
    check_candidate_blocks(pool, 12);
    printf("indexer candidate blocks: head_dim 16 on the %s step, 12 on the scalar one\n",
           cpu_has_avx2() ? "AVX2 tiled" : "scalar");
    cpu_threadpool_free(pool);
}

static void test_indexer_reads_every_cache_type(void **state)
{
    (void)state;
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    static const model_dtype types[] = {MODEL_DTYPE_F16, MODEL_DTYPE_Q8_0, MODEL_DTYPE_Q4_0};
    for (int ti = 0; ti < 3; ti++) {
        check_indexer(pool, 3, 128, types[ti]);
        check_indexer(pool, 130, 128, types[ti]);
    }
    check_indexer(pool, 3, 36, MODEL_DTYPE_F16);
    cpu_threadpool_free(pool);
}

static void test_multi_matmul_equals_separate_products(void **state)
{
    (void)state;
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    enum { NI = 256, NT = 6 };
    const int64_t outs[3] = {48, 16, 33};
    const model_dtype types[3] = {MODEL_DTYPE_Q4_K, MODEL_DTYPE_Q4_K, MODEL_DTYPE_Q6_K};
    model_tensor w[3];
    const model_tensor *wp[3];
    float bias[3][48], *y[3], *want[3], x[NT * NI];
    const float *bp[3];
    for (int p = 0; p < 3; p++) {
        w[p] =
            (model_tensor){.name = "w", .dtype = types[p], .n_dims = 2, .ne = {NI, outs[p], 1, 1}};
        w[p].data = random_weights(types[p], outs[p], NI);
        wp[p] = &w[p];
        for (int i = 0; i < 48; i++) bias[p][i] = frand();
        bp[p] = p == 1 ? NULL : bias[p];
        y[p] = malloc(sizeof(float) * NT * 48);
        want[p] = malloc(sizeof(float) * NT * 48);
        assert_non_null(y[p]);
        assert_non_null(want[p]);
    }
    assert_true(cpu_matmul_can_share(&w[0], &w[2]));
    for (int i = 0; i < NT * NI; i++) x[i] = frand();
    void *scratch = malloc(cpu_matmul_scratch_bytes(MODEL_DTYPE_Q4_K, NI, NT));
    assert_non_null(scratch);
    cpu_matmul_multi(pool, 3, wp, NULL, bp, x, NT, y, scratch, 0);
    for (int p = 0; p < 3; p++) {
        cpu_matmul(pool, &w[p], bp[p], x, NT, want[p], scratch, 0);
        assert_memory_equal(y[p], want[p], sizeof(float) * (size_t)(NT * outs[p]));
        free(y[p]);
        free(want[p]);
        free((void *)w[p].data);
    }
    free(scratch);
    cpu_threadpool_free(pool);
}

static void test_simd_fp8_decodes_every_value(void **state)
{
    (void)state;
    if (!cpu_has_avx2()) skip();
    uint8_t w[256];
    float a[256] = {0};
    for (int i = 0; i < 256; i++) w[i] = (uint8_t)((i & 0x7f) == 0x7f ? 0 : i); /* no NaN */
    cpu_vec_dot_fn dot = cpu_vec_dot_avx2(MODEL_DTYPE_FP8_E4M3);
    assert_non_null(dot);
    for (int i = 0; i < 256; i++) {
        a[i] = 1.0f;
        float got;
        dot(256, &got, w, a);
        a[i] = 0.0f;
        if (got != cpu_fp8_e4m3_to_f32(w[i]))
            fail_msg("fp8 0x%02x: SIMD %g, definition %g", w[i], (double)got,
                     (double)cpu_fp8_e4m3_to_f32(w[i]));
    }
}

static void test_fp8_matmul_applies_block_scales(void **state)
{
    (void)state;
    /* 2 output rows, 256 inputs: two 128-wide scale blocks per row */
    enum { NI = 256, NO = 2 };
    uint8_t wq[NO * NI];
    float x[NI], y[NO], scales[2] = {0.5f, 3.0f};
    for (int i = 0; i < NO * NI; i++) wq[i] = (uint8_t)(rnd() & 0x77); /* finite values */
    for (int i = 0; i < NI; i++) x[i] = frand();
    model_tensor sc = {
        .name = "s", .dtype = MODEL_DTYPE_F32, .n_dims = 2, .ne = {2, 1, 1, 1}, .data = scales};
    model_tensor w = {.name = "w",
                      .dtype = MODEL_DTYPE_FP8_E4M3,
                      .n_dims = 2,
                      .ne = {NI, NO, 1, 1},
                      .data = wq,
                      .scale = &sc};
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    cpu_matmul(pool, &w, NULL, x, 1, y, NULL, 0);
    for (int o = 0; o < NO; o++) {
        double want = 0;
        for (int i = 0; i < NI; i++)
            want += (double)cpu_fp8_e4m3_to_f32(wq[o * NI + i]) * scales[i / 128] * x[i];
        assert_true(fabs(y[o] - want) < 1e-3 * (1 + fabs(want)));
    }
    cpu_threadpool_free(pool);
}

/* MXFP4 by its definition (OCP MX: e2m1 codes, two a byte with the low nibble
 * first, each 32 values of a row times its scale), through cpu_matmul with the
 * reference and the SIMD kernels: every code of both nibbles, scales 2^-3..2^3. */
static void test_mxfp4_matmul_applies_row_scales(void **state)
{
    (void)state;
    static const float e2m1[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                                   -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    enum { NI = 128, NO = 3 };
    uint8_t wq[NO * NI / 2];
    float x[NI], y[NO], scales[NO * NI / 32];
    for (int i = 0; i < NO * NI / 2; i++) wq[i] = (uint8_t)(i < 256 ? (uint32_t)i : rnd());
    for (int i = 0; i < NO * NI / 32; i++) scales[i] = ldexpf(1.0f, (int)(rnd() % 7) - 3);
    for (int i = 0; i < NI; i++) x[i] = frand();
    model_tensor sc = {.name = "s",
                       .dtype = MODEL_DTYPE_F32,
                       .n_dims = 2,
                       .ne = {NI / 32, NO, 1, 1},
                       .data = scales};
    model_tensor w = {.name = "w",
                      .dtype = MODEL_DTYPE_MXFP4,
                      .n_dims = 2,
                      .ne = {NI, NO, 1, 1},
                      .data = wq,
                      .scale = &sc};
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    for (int use_ref = 0; use_ref < 2; use_ref++) {
        cpu_matmul(pool, &w, NULL, x, 1, y, NULL, use_ref);
        for (int o = 0; o < NO; o++) {
            double want = 0;
            for (int i = 0; i < NI; i++) {
                uint8_t b = wq[(o * NI + i) / 2];
                want +=
                    (double)e2m1[(i & 1) ? b >> 4 : b & 15] * scales[o * (NI / 32) + i / 32] * x[i];
            }
            if (fabs(y[o] - want) > 1e-5 * (1 + fabs(want)))
                fail_msg("row %d (%s): %g, definition %g", o, use_ref ? "reference" : "SIMD",
                         (double)y[o], want);
        }
    }
    /* Nine tokens at once (rows of four, then one at a time): each token's
     * outputs bit-identical to that token alone (batch invariance) */
    enum { NT = 9 };
    float xs[NT * NI], ys[NT * NO], y1[NO];
    for (int i = 0; i < NT * NI; i++) xs[i] = frand();
    cpu_matmul(pool, &w, NULL, xs, NT, ys, NULL, 0);
    for (int t = 0; t < NT; t++) {
        cpu_matmul(pool, &w, NULL, xs + t * NI, 1, y1, NULL, 0);
        for (int o = 0; o < NO; o++)
            if (memcmp(&ys[t * NO + o], &y1[o], sizeof(float)) != 0)
                fail_msg("token %d row %d: %a in a batch of %d, %a alone", t, o,
                         (double)ys[t * NO + o], NT, (double)y1[o]);
    }
    cpu_threadpool_free(pool);
}

static void count_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    __atomic_fetch_add(&((int *)ctx)[task], 1, __ATOMIC_RELAXED);
}

static void test_threadpool_runs_every_task_once(void **state)
{
    (void)state;
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(4, &pool), DI_OK);
    int counts[1000];
    for (int rep = 0; rep < 200; rep++) {
        int n = 1 + rep * 5;
        memset(counts, 0, sizeof counts);
        cpu_threadpool_run(pool, n, count_task, counts);
        for (int i = 0; i < n; i++) assert_int_equal(counts[i], 1);
    }
    cpu_threadpool_free(pool);
    assert_int_equal(cpu_threadpool_create(0, &pool), DI_ERR_INVALID_ARGUMENT);
}

/* Each task writes its thread's whole scratch: the buffers never overlap. */
typedef struct scratch_fill {
    cpu_threadpool *pool;
    size_t bytes;
} scratch_fill;

static void fill_scratch_task(void *ctx, int64_t task, int thread)
{
    (void)task;
    const scratch_fill *f = ctx;
    memset(cpu_threadpool_scratch(f->pool, thread), thread + 1, f->bytes);
}

/* The per-thread scratch: 64-byte aligned, at least the bytes reserved, one
 * buffer per thread index; a reservation that cannot be had is
 * DI_ERR_OUT_OF_MEMORY and leaves the scratch as it was; no pool,
 * DI_ERR_INVALID_ARGUMENT (and the kernels that need one say so or take
 * their reference path). */
static void test_threadpool_scratch_per_thread(void **state)
{
    (void)state;
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(3, &pool), DI_OK);
    assert_int_equal(cpu_threadpool_reserve(pool, 1000), DI_OK);
    assert_int_equal(cpu_threadpool_reserve(pool, 100), DI_OK); /* (smaller: kept) */
    scratch_fill f = {pool, 1000};
    for (int t = 0; t < 3; t++) memset(cpu_threadpool_scratch(pool, t), 0, f.bytes);
    cpu_threadpool_run(pool, 64, fill_scratch_task, &f); /* (a thread given no task: zeros) */
    for (int t = 0; t < 3; t++) {
        const unsigned char *p = cpu_threadpool_scratch(pool, t);
        assert_int_equal((uintptr_t)p % 64, 0);
        for (size_t i = 0; i < f.bytes; i++)
            if (p[i] != 0 && p[i] != t + 1)
                fail_msg("thread %d's scratch byte %zu: %d", t, i, p[i]);
    }
    assert_int_equal(cpu_threadpool_reserve(pool, SIZE_MAX / 2), DI_ERR_OUT_OF_MEMORY);
    cpu_threadpool_run(pool, 64, fill_scratch_task, &f); /* still the 1000 bytes */
    cpu_threadpool_free(pool);
    assert_int_equal(cpu_threadpool_reserve(NULL, 64), DI_ERR_INVALID_ARGUMENT);
    float q[64] = {0}, out[64];
    const float sinks[1] = {0};
    assert_int_equal(cpu_sink_attention(NULL, q, 1, 64, 1, (const int64_t[]){0}, NULL, q, 1, 1,
                                        NULL, 0, 4, NULL, 0, MODEL_DTYPE_F32, sinks, 1.0f, out),
                     DI_ERR_INVALID_ARGUMENT);
}

static void test_rmsnorm_gives_unit_rms(void **state)
{
    (void)state;
    float x[96], w[48], y[96];
    for (int i = 0; i < 96; i++) x[i] = frand() * 5;
    for (int i = 0; i < 48; i++) w[i] = 1.0f;
    cpu_rmsnorm(x, w, y, 2, 48, 0.0f);
    for (int t = 0; t < 2; t++) {
        double ss = 0;
        for (int i = 0; i < 48; i++) ss += (double)y[t * 48 + i] * y[t * 48 + i];
        assert_true(fabs(sqrt(ss / 48) - 1.0) < 1e-5);
        assert_true(y[t * 48 + 3] / x[t * 48 + 3] > 0);
    }
}

static backend_rope_params rope_config(model_rope_style style)
{
    backend_rope_params c = {0};
    c.head_dim = 64;
    c.rope_theta = 10000.0f;
    c.rope_style = style;
    c.rope_factor = 1.0f;
    c.n_ctx_train = 4096;
    c.yarn_truncate = 1; /* the loaders' default */
    return c;
}

static void test_rope_neox_is_norm_on_permuted_dims(void **state)
{
    (void)state;
    cpu_rope norm, neox;
    backend_rope_params c = rope_config(MODEL_ROPE_NORM);
    assert_int_equal(cpu_rope_init(&norm, &c), DI_OK);
    c.rope_style = MODEL_ROPE_NEOX;
    assert_int_equal(cpu_rope_init(&neox, &c), DI_OK);
    float a[128], b[128];
    for (int i = 0; i < 128; i++) a[i] = frand();
    /* b holds a's pairs (2i, 2i+1) at (i, i + 32) */
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 32; i++) {
            b[h * 64 + i] = a[h * 64 + 2 * i];
            b[h * 64 + i + 32] = a[h * 64 + 2 * i + 1];
        }
    double n0 = 0, n1 = 0;
    for (int i = 0; i < 128; i++) n0 += (double)a[i] * a[i];
    cpu_rope_apply(&norm, a, 2, 1234);
    cpu_rope_apply(&neox, b, 2, 1234);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 32; i++) {
            assert_true(fabsf(b[h * 64 + i] - a[h * 64 + 2 * i]) < 1e-6f);
            assert_true(fabsf(b[h * 64 + i + 32] - a[h * 64 + 2 * i + 1]) < 1e-6f);
        }
    for (int i = 0; i < 128; i++) n1 += (double)a[i] * a[i];
    assert_true(fabs(n0 - n1) < 1e-4 * n0); /* a rotation */
}

static void test_rope_rotates_by_position_times_frequency(void **state)
{
    (void)state;
    cpu_rope r;
    backend_rope_params c = rope_config(MODEL_ROPE_NEOX);
    assert_int_equal(cpu_rope_init(&r, &c), DI_OK);
    float x[64] = {0};
    x[5] = 1.0f; /* pair 5: (x[5], x[37]) */
    cpu_rope_apply(&r, x, 1, 7);
    double theta = 7.0 * pow(10000.0, -10.0 / 64.0);
    assert_true(fabs(x[5] - cos(theta)) < 1e-5 && fabs(x[37] - sin(theta)) < 1e-5);
    /* linear scaling by 4 at position 8 is position 2 unscaled */
    c.rope_scaling = MODEL_ROPE_SCALING_LINEAR;
    c.rope_factor = 4.0f;
    cpu_rope lin;
    assert_int_equal(cpu_rope_init(&lin, &c), DI_OK);
    float a[64], b[64];
    for (int i = 0; i < 64; i++) a[i] = b[i] = frand();
    cpu_rope_apply(&lin, a, 1, 8);
    cpu_rope_apply(&r, b, 1, 2);
    for (int i = 0; i < 64; i++) assert_true(fabsf(a[i] - b[i]) < 1e-5f);
    /* GGUF rope_freqs divide each angle: factors of 2 at position 8 are position 4
     * (ggml angles and inv_freq angles alike) */
    float factors[32];
    for (int i = 0; i < 32; i++) factors[i] = 2.0f;
    c.rope_scaling = MODEL_ROPE_SCALING_NONE;
    c.rope_factor = 1.0f;
    cpu_rope ff;
    assert_int_equal(cpu_rope_init(&ff, &c), DI_OK);
    ff.freq_factors = factors;
    for (int ga = 0; ga < 2; ga++) {
        ff.ggml_angles = ga;
        r.ggml_angles = ga;
        for (int i = 0; i < 64; i++) a[i] = b[i] = frand();
        cpu_rope_apply(&ff, a, 1, 8);
        cpu_rope_apply(&r, b, 1, 4);
        for (int i = 0; i < 64; i++) assert_true(fabsf(a[i] - b[i]) < 1e-5f);
    }
    r.ggml_angles = 0;
    /* llama3 keeps high frequencies and divides low ones by the factor */
    c.rope_scaling = MODEL_ROPE_SCALING_LLAMA3;
    c.rope_factor = 8.0f;
    c.rope_orig_ctx = 8192;
    c.rope_theta = 500000.0f;
    c.llama3_low_freq_factor = 1.0f;
    c.llama3_high_freq_factor = 4.0f;
    cpu_rope l3;
    assert_int_equal(cpu_rope_init(&l3, &c), DI_OK);
    assert_true(fabsf(l3.inv_freq[0] - 1.0f) < 1e-7f);
    assert_true(fabs(l3.inv_freq[31] - pow(500000.0, -62.0 / 64.0) / 8.0) < 1e-12);
    /* YaRN: the highest frequency is extrapolated, the lowest interpolated, mscale */
    c.rope_scaling = MODEL_ROPE_SCALING_YARN;
    c.rope_factor = 40.0f;
    c.rope_orig_ctx = 4096;
    c.rope_theta = 10000.0f;
    cpu_rope y;
    assert_int_equal(cpu_rope_init(&y, &c), DI_OK);
    assert_true(fabsf(y.inv_freq[0] - 1.0f) < 1e-7f);
    assert_true(fabs(y.inv_freq[31] - pow(10000.0, -62.0 / 64.0) / 40.0) < 1e-9);
    assert_true(fabs(y.mscale - (0.1 * log(40.0) + 1.0)) < 1e-6);
}

/* DI_CPU_AMX's words: 0, off, false and no, any case, spaces and line ends
 * around them ignored; anything else leaves AMX allowed. */
static void test_amx_env_words(void **state)
{
    (void)state;
    const char *off[] = {"0", "off", " off", "OFF\n", "\tfalse ", "No", " 0\r\n", "\v\fno"};
    const char *on[] = {"", " ", "1", "on", "of f", "offf", "nope", "0x"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (!cpu_amx_env_off(off[i])) fail_msg("DI_CPU_AMX=\"%s\" should turn AMX off", off[i]);
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
        if (cpu_amx_env_off(on[i])) fail_msg("DI_CPU_AMX=\"%s\" should leave AMX on", on[i]);
    assert_false(cpu_amx_env_off(NULL));
}

static void test_softmax_and_silu(void **state)
{
    (void)state;
    float x[3] = {1000.0f, 1000.0f, -INFINITY};
    cpu_softmax(x, 3);
    assert_true(fabsf(x[0] - 0.5f) < 1e-7f && x[2] == 0.0f);
    float g[2] = {0.0f, 2.0f}, u[2] = {3.0f, 1.0f};
    cpu_silu_mul(g, u, 2);
    assert_true(g[0] == 0.0f);
    assert_true(fabs(g[1] - 2.0 / (1.0 + exp(-2.0))) < 1e-6);
}

/* cpu_silu_mul and its clamped form against the formula in double, on a row
 * whose length is not a multiple of the vector width; every split of the row
 * gives the same bits (an element's result does not depend on where a thread's
 * share or a batch row starts); NaN and the limit as the scalar form. */
static void check_silu_rows(void)
{
    enum { N = 37 };
    float g[N], u[N], whole[N], part[N];
    for (int i = 0; i < N; i++) {
        g[i] = (float)(i - 18) * (i % 3 == 0 ? 5.5f : 0.37f); /* -99 .. 99 */
        u[i] = 1.0f + 0.25f * (float)(i % 7) - (i % 2 ? 2.0f : 0.0f);
    }
    memcpy(whole, g, sizeof g);
    cpu_silu_mul(whole, u, N);
    for (int i = 0; i < N; i++) {
        double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        assert_true(fabs(whole[i] - want) <= 1e-6 * fabs(want) + 1e-30);
    }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 27)
    /* the scalar formula's bits (its expf glibc's: cpu_exp_rows' arithmetic) */
    for (int i = 0; i < N; i++) {
        float want = g[i] / (1.0f + expf(-g[i])) * u[i];
        assert_memory_equal(&whole[i], &want, sizeof want);
    }
#endif
    for (int k = 1; k < N; k++) {
        memcpy(part, g, sizeof g);
        cpu_silu_mul(part, u, k);
        cpu_silu_mul(part + k, u + k, N - k);
        assert_memory_equal(part, whole, sizeof whole);
    }
    /* past exp's range, as expf: a gate below -88.3 gives -0, -inf NaN, +inf
     * +inf */
    float xg[3] = {-100.0f, -INFINITY, INFINITY}, xu[3] = {2.0f, 1.0f, 1.0f};
    cpu_silu_mul(xg, xu, 3);
    assert_true(xg[0] == 0.0f && signbit(xg[0]) && isnan(xg[1]) && isinf(xg[2]) && xg[2] > 0);
    /* clamped at 7 over 13 (the vector loop and the tail): g above it as 7, u
     * into [-7, 7], a NaN g as the limit, a NaN u NaN */
    enum { C = 13 };
    float cg[C], cu[C], in_g[C], in_u[C];
    for (int i = 0; i < C; i++) cg[i] = -12.0f + 2.1f * (float)i, cu[i] = 20.0f - 3.5f * (float)i;
    cg[4] = NAN, cu[9] = NAN;
    memcpy(in_g, cg, sizeof cg);
    memcpy(in_u, cu, sizeof cu);
    cpu_silu_mul_clamp(cg, cu, C, 7.0f);
    for (int k = 1; k < C; k++) { /* split anywhere: the same bits */
        float pg[C], pu[C];
        memcpy(pg, in_g, sizeof pg);
        memcpy(pu, in_u, sizeof pu);
        cpu_silu_mul_clamp(pg, pu, k, 7.0f);
        cpu_silu_mul_clamp(pg + k, pu + k, C - k, 7.0f);
        for (int i = 0; i < C; i++)
            assert_true(isnan(cg[i]) ? isnan(pg[i]) : memcmp(&pg[i], &cg[i], sizeof *cg) == 0);
    }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 27)
    for (int i = 0; i < C; i++) { /* the scalar clamp formula's bits */
        float gi = in_g[i] < 7.0f ? in_g[i] : 7.0f;
        float ui = in_u[i] < -7.0f ? -7.0f : in_u[i] > 7.0f ? 7.0f : in_u[i];
        float want = gi / (1.0f + expf(-gi)) * ui;
        assert_true(isnan(want) ? isnan(cg[i]) : memcmp(&cg[i], &want, sizeof want) == 0);
    }
#endif
    for (int i = 0; i < C; i++) {
        if (i == 9) {
            assert_true(isnan(cg[i]));
            continue;
        }
        double gi = isnan(in_g[i]) || in_g[i] > 7.0f ? 7.0 : in_g[i], ui = in_u[i] > 7.0f ? 7.0
                                                                           : in_u[i] < -7.0f
                                                                               ? -7.0
                                                                               : in_u[i];
        double want = gi / (1.0 + exp(-gi)) * ui;
        assert_true(fabs(cg[i] - want) <= 1e-6 * fabs(want) + 1e-30);
    }
}

/* ... with each exp form this CPU runs (the AVX-512 and AVX2 ones give the
 * same bits) */
static void test_silu_rows(void **state)
{
    (void)state;
    for (int level = cpu_has_avx512f() ? 2 : 1; level >= 1; level--) {
        cpu_exp_avx2_only = level == 1;
        check_silu_rows();
        cpu_exp_avx2_only = 0;
    }
}

/* cpu_exp_rows against the C library's expf, bit for bit where that is
 * glibc's (2.27 on: the function it reproduces), over every 1,021st float of
 * the 2^32 (a whole sweep, run once by hand, found none of the 2^32 apart) and
 * the edges: +-0, denormals, +-88 (where glibc's special cases begin), the
 * overflow and underflow bounds and their neighbours, +-inf and NaN. Elsewhere
 * within 1 ulp of expf (another library's rounding). Rows of every length to
 * 17, so the vector loop and the one-at-a-time tail both run. */
static void check_exp_rows(int exact);

static void test_exp_rows(void **state)
{
    (void)state;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 27)
    const int exact = 1;
#else
    const int exact = 0;
#endif
    for (int level = cpu_has_avx512f() ? 2 : 1; level >= 1; level--) {
        cpu_exp_avx2_only = level == 1;
        print_message("[ e^x rows: %s, checked %s ]\n",
                      level == 2       ? "AVX-512F, double lanes"
                      : cpu_has_avx2() ? "AVX2+FMA, double lanes"
                                       : "libm expf",
                      exact ? "bit for bit against glibc's expf" : "within 1 ulp of expf");
        check_exp_rows(exact);
        cpu_exp_avx2_only = 0;
    }
}

/* got against expf's want: the same bits (exact), else NaN for NaN, the same
 * infinity, or within 1 ulp. */
static int exp_agrees(int exact, float got, float want)
{
    if (isnan(want)) return isnan(got);
    if (exact) return memcmp(&got, &want, sizeof want) == 0;
    if (isinf(want) || isinf(got) || isnan(got)) return got == want;
    return fabsf(got - want) <= fabsf(nextafterf(want, INFINITY) - want);
}

static void check_exp_rows(int exact)
{
    enum { B = 4096 };
    static float x[B], y[B];
    const float edges[] = {0.0f,           -0.0f,          0x1p-149f,
                           -0x1p-149f,     0x1p-126f,      88.0f,
                           -88.0f,         0x1.5ffffep6f,  0x1.62e42ep6f,
                           0x1.62e430p6f,  0x1.62e42cp6f,  -0x1.5ffffep6f,
                           -0x1.9fe368p6f, -0x1.9fe36ap6f, -0x1.9fe366p6f,
                           -87.0f,         1.0f,           -1.0f,
                           INFINITY,       -INFINITY,      NAN};
    uint64_t next = 0;
    int n_edges = (int)(sizeof edges / sizeof *edges);
    while (next < (1ull << 32)) {
        int n = 0;
        for (; n < n_edges && next == 0; n++) x[n] = edges[n];
        for (; n < B && next < (1ull << 32); n++, next += 1021) {
            uint32_t b = (uint32_t)next;
            memcpy(&x[n], &b, sizeof b);
        }
        cpu_exp_rows(x, y, n);
        for (int i = 0; i < n; i++)
            if (!exp_agrees(exact, y[i], expf(x[i])))
                fail_msg("e^%a: %a, expf %a", (double)x[i], (double)y[i], (double)expf(x[i]));
    }
    /* no floating-point exception glibc's expf does not raise: +-inf and NaN
     * in the vector loop raise no FE_INVALID */
    float sx[8] = {INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 2.0f, 0.5f, -0.5f}, sy[8];
    feclearexcept(FE_ALL_EXCEPT);
    cpu_exp_rows(sx, sy, 8);
    assert_false(fetestexcept(FE_INVALID));
    assert_true(isinf(sy[0]) && sy[1] == 0.0f && isnan(sy[2]));
    /* each row length: the tail as the vector loop */
    for (int len = 1; len <= 17; len++) {
        for (int i = 0; i < len; i++) x[i] = -5.0f + 0.7f * (float)i;
        cpu_exp_rows(x, y, len);
        for (int i = 0; i < len; i++) assert_true(exp_agrees(exact, y[i], expf(x[i])));
    }
}

/* Attention over a paged cache whose blocks are handed out in a scrambled
 * order, against a direct computation over contiguous K/V in double. */
static void check_attention(model_dtype kv_type)
{
    enum { NH = 6, NKV = 2, HD = 64, NT = 37, CTX = 64 };
    cpu_kv_cache c;
    assert_int_equal(cpu_kv_cache_init(&c, kv_type, 2, NKV, HD, 8, 16), DI_OK);
    /* blocks of 8 tokens in a scrambled order (the block manager's choice) */
    int32_t table[CTX / 8] = {9, 3, 14, 0, 7, 12, 1, 5};
    cpu_kv_seq s = {table, 5, CTX / 8, NT, 0};
    static float k[NT * NKV * HD], v[NT * NKV * HD], q[NT * NH * HD];
    static float out[NT * NH * HD], out_ref[NT * NH * HD], scratch[4 * CTX];
    for (int i = 0; i < NT * NKV * HD; i++) {
        k[i] = frand();
        v[i] = frand();
        if (kv_type == MODEL_DTYPE_F16) { /* exact in f16 */
            k[i] = cpu_fp16_to_f32(cpu_f32_to_fp16(k[i]));
            v[i] = cpu_fp16_to_f32(cpu_f32_to_fp16(v[i]));
        }
    }
    for (int i = 0; i < NT * NH * HD; i++) q[i] = frand();
    /* the reference path with an f16 cache rounds q and the probabilities to f16
     * (llama.cpp's arithmetic); the tiled path stays f32 (where AVX2 runs) */
    const double tol = kv_type == MODEL_DTYPE_F16 ? 2e-3 : 1e-5;
    const double tol_fast = cpu_has_avx2() ? 1e-5 : tol;
    cpu_kv_store(&c, &s, 1, 0, NT, k, v);
    if (kv_type == MODEL_DTYPE_Q8_0 || kv_type == MODEL_DTYPE_Q4_0) {
        /* the values the cache holds, for the reference below: each row
         * dequantized and rotated back (head_dim 64: the cache is rotated);
         * they are the stored ones up to the blocks' rounding */
        assert_true(c.rotated);
        assert_int_equal(c.row_bytes, cpu_row_bytes((int)kv_type, NKV * HD));
        assert_int_equal(cpu_kv_cache_bytes_per_token(&c), 2 * 2 * c.row_bytes);
        const double bound = kv_type == MODEL_DTYPE_Q8_0 ? 0.04 : 0.6;
        for (int t = 0; t < NT; t++)
            for (int kv = 0; kv < 2; kv++) {
                float *row = (kv ? v : k) + t * NKV * HD, got[NKV * HD];
                cpu_dequantize_row((int)kv_type,
                                   kv ? cpu_kv_v(&c, &s, 1, t) : cpu_kv_k(&c, &s, 1, t), got,
                                   NKV * HD);
                cpu_kv_rotate(got, NKV * HD);
                for (int i = 0; i < NKV * HD; i++) {
                    assert_true(fabsf(got[i] - row[i]) < bound);
                    row[i] = got[i];
                }
            }
    }
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(4, &pool), DI_OK);
    /* last 5 tokens as a batch after 32 cached ones */
    float scale = 1.0f / 8.0f;
    cpu_attention(pool, &c, &s, 1, q, NH, 0, NT, scale, out, scratch, CTX, 0);
    cpu_attention(NULL, &c, &s, 1, q, NH, 0, NT, scale, out_ref, scratch, CTX, 1);
    for (int t = 0; t < NT; t++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            double sc[NT], mx = -1e30, sum = 0;
            for (int p = 0; p <= t; p++) {
                double d = 0;
                for (int i = 0; i < HD; i++)
                    d += (double)q[(t * NH + h) * HD + i] * k[(p * NKV + g) * HD + i];
                sc[p] = d * scale;
                mx = fmax(mx, sc[p]);
            }
            for (int p = 0; p <= t; p++) sum += (sc[p] = exp(sc[p] - mx));
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int p = 0; p <= t; p++) o += sc[p] / sum * v[(p * NKV + g) * HD + i];
                assert_true(fabs(out_ref[(t * NH + h) * HD + i] - o) < tol);
                assert_true(fabs(out[(t * NH + h) * HD + i] - o) < tol_fast);
            }
        }
    /* decode one token at position NT - 1 equals the batch's last row */
    float last[NH * HD];
    cpu_attention(pool, &c, &s, 1, q + (NT - 1) * NH * HD, NH, NT - 1, 1, scale, last, scratch, CTX,
                  0);
    for (int i = 0; i < NH * HD; i++) /* bit-identical: a row's sums do not depend on its tile */
        assert_memory_equal(&last[i], &out[(NT - 1) * NH * HD + i], sizeof(float));
    cpu_threadpool_free(pool);
    cpu_kv_cache_free(&c);
}

/* Long contexts: a row's keys are split into segments of 256 and their
 * softmax states folded in order, whether one task walks every segment (a
 * prefill tile) or each segment is its own task (flash-decoding: few rows, so
 * the keys are split over the threads). A decode row equals the batch's last
 * row bit for bit at 1 and 4 threads, and both equal a direct computation in
 * double over 700 keys (three segments). One shape of nh query heads over
 * nkv KV heads of hd, blocks of bs tokens. */
enum { LC_CTX = 700, LC_NT = 20, LC_MAX = 10 * 128 };
static void long_context_case(int nh, int nkv, int hd, int bs)
{
    const int nb = (LC_CTX + bs - 1) / bs;
    cpu_kv_cache c;
    assert_int_equal(cpu_kv_cache_init(&c, MODEL_DTYPE_F32, 1, nkv, hd, bs, nb), DI_OK);
    int32_t table[LC_CTX];
    for (int i = 0; i < nb; i++) table[i] = (i * 29 + 7) % nb; /* scrambled blocks */
    cpu_kv_seq s = {table, nb, nb, LC_CTX, 0};
    static float k[LC_CTX * LC_MAX], v[LC_CTX * LC_MAX], q[LC_NT * LC_MAX];
    static float batch[LC_NT * LC_MAX], last[LC_MAX], scratch[4 * LC_CTX];
    for (int i = 0; i < LC_CTX * nkv * hd; i++) k[i] = frand(), v[i] = frand();
    for (int i = 0; i < LC_NT * nh * hd; i++) q[i] = frand();
    cpu_kv_store(&c, &s, 0, 0, LC_CTX, k, v);
    const float scale = 1.0f / sqrtf((float)hd);
    const int64_t pos0 = LC_CTX - LC_NT;
    for (int threads = 1; threads <= 4; threads += 3) {
        cpu_threadpool *pool;
        assert_int_equal(cpu_threadpool_create(threads, &pool), DI_OK);
        cpu_attention(pool, &c, &s, 0, q, nh, pos0, LC_NT, scale, batch, scratch, LC_CTX, 0);
        cpu_attention(pool, &c, &s, 0, q + (LC_NT - 1) * nh * hd, nh, LC_CTX - 1, 1, scale, last,
                      scratch, LC_CTX, 0);
        assert_memory_equal(last, batch + (LC_NT - 1) * nh * hd, (size_t)(nh * hd) * sizeof *last);
        cpu_threadpool_free(pool);
    }
    if (cpu_has_avx2()) /* (without AVX2 the reference path ran: checked elsewhere) */
        for (int t = 0; t < LC_NT; t += 7)
            for (int h = 0; h < nh; h++) {
                int g = h / (nh / nkv);
                int64_t n = pos0 + t + 1;
                static double sc[LC_CTX];
                double mx = -1e30, sum = 0;
                for (int64_t p = 0; p < n; p++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++)
                        d += (double)q[(t * nh + h) * hd + i] * k[(p * nkv + g) * hd + i];
                    sc[p] = d * scale;
                    mx = fmax(mx, sc[p]);
                }
                for (int64_t p = 0; p < n; p++) sum += (sc[p] = exp(sc[p] - mx));
                for (int i = 0; i < hd; i++) {
                    double o = 0;
                    for (int64_t p = 0; p < n; p++) o += sc[p] / sum * v[(p * nkv + g) * hd + i];
                    if (fabs(batch[(t * nh + h) * hd + i] - o) >= 1e-5)
                        fail_msg(
                            "heads %d/%d of %d, blocks of %d: token %d head %d dim %d: %g vs %g",
                            nh, nkv, hd, bs, t, h, i, batch[(t * nh + h) * hd + i], o);
                }
            }
    cpu_kv_cache_free(&c);
}

/* The shapes: SmolLM2-like (the task's KV heads converted together in one
 * stage), five heads of 128 (two stages of four and one: 640 values a row
 * against the stage's 512) in blocks of 24 (a chunk's rows across two blocks),
 * and heads of 256 (two a stage). */
static void test_attention_long_context_segments(void **state)
{
    (void)state;
    long_context_case(6, 2, 64, 16);
    long_context_case(10, 5, 128, 24);
    long_context_case(4, 2, 256, 16);
}

/* Where AVX-512 runs, a prefill's tiles take the rows-in-lanes chunk step
 * (rows_chunk512 on up to four tiles at a time; eight tiles a task where the
 * threads get four tasks each, else four: both run here, e.g. SmolLM2's
 * shape takes eight on the 600-key prompt and four on the 70 tokens), and
 * decode rows on an f16, Q8_0 or Q4_0 cache the in-place one
 * (flash_chunk_cache, its P V on up to three rows a pass, or four to eight;
 * with AVX-512 off, on f16, flash_chunk_f16_avx2), else the staged AVX2 one:
 * every output must be the AVX2 path's bit for bit, or a sequence's logits
 * would depend on how its tokens were batched. Shapes: SmolLM2's (15 rows a
 * tile), groups of 7, 1, 5, 8, 2, 3 and 4, head_dim 40 to 1,040 (80: a P V
 * pass over three to eight rows ends on 16 dimensions), each cache type,
 * rotated and not; a whole prompt of 600 keys (three segments, a partial
 * last tile) and 70 tokens after 530; two threads. */
static void test_attention_avx512_tiles_are_the_avx2_path(void **state)
{
    (void)state;
    static const struct {
        int nh, nkv, hd;
        model_dtype dt;
    } shapes[] = {
        {9, 3, 64, MODEL_DTYPE_F16},    {14, 2, 64, MODEL_DTYPE_F16},
        {16, 16, 128, MODEL_DTYPE_F32}, {8, 1, 128, MODEL_DTYPE_Q8_0},
        {4, 2, 96, MODEL_DTYPE_F16},    {6, 2, 48, MODEL_DTYPE_F32},
        {4, 2, 256, MODEL_DTYPE_Q4_0},  {4, 4, 64, MODEL_DTYPE_F16},
        {10, 2, 64, MODEL_DTYPE_F16},   {4, 2, 96, MODEL_DTYPE_Q8_0},
        {6, 3, 160, MODEL_DTYPE_Q8_0},  {4, 2, 96, MODEL_DTYPE_Q4_0},
        {4, 2, 40, MODEL_DTYPE_F16},    {8, 2, 128, MODEL_DTYPE_F16},
        {2, 1, 1024, MODEL_DTYPE_F16},  {2, 1, 1040, MODEL_DTYPE_F16},
        {8, 2, 80, MODEL_DTYPE_F16},    {9, 3, 80, MODEL_DTYPE_F16},
    };
    enum { CTX = 600, MAXV = 16 * 256 };
    static float k[CTX * MAXV], v[CTX * MAXV], q[CTX * MAXV], a[CTX * MAXV], b[CTX * MAXV];
    static float scratch[2 * CTX];
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const int nh = shapes[i].nh, nkv = shapes[i].nkv, hd = shapes[i].hd;
        cpu_kv_cache c;
        assert_int_equal(cpu_kv_cache_init(&c, shapes[i].dt, 1, nkv, hd, 16, CTX / 16 + 1), DI_OK);
        int32_t table[CTX / 16 + 1];
        for (int t = 0; t < CTX / 16 + 1; t++) table[t] = (t * 7 + 3) % (CTX / 16 + 1);
        cpu_kv_seq sq = {table, CTX / 16 + 1, CTX / 16 + 1, CTX, 0};
        for (int t = 0; t < CTX * nkv * hd; t++) k[t] = frand(), v[t] = frand();
        for (int t = 0; t < CTX * nh * hd; t++) q[t] = 2.0f * frand();
        cpu_kv_store(&c, &sq, 0, 0, CTX, k, v);
        const float scale = 1.0f / sqrtf((float)hd);
        const int64_t starts[2] = {CTX - 70, 0}; /* (the whole prompt last: a keeps it) */
        for (int w = 0; w < 2; w++) {
            const int64_t n = CTX - starts[w];
            cpu_attention_avx2_only = 0;
            cpu_attention(pool, &c, &sq, 0, q, nh, starts[w], n, scale, a, scratch, CTX, 0);
            cpu_attention_avx2_only = 1;
            cpu_attention(pool, &c, &sq, 0, q, nh, starts[w], n, scale, b, scratch, CTX, 0);
            cpu_attention_avx2_only = 0;
            for (int64_t e = 0; e < n * nh * hd; e++)
                if (memcmp(&a[e], &b[e], sizeof *a) != 0)
                    fail_msg("heads %d/%d of %d, cache type %d, %lld tokens after %lld: output "
                             "%lld is %.9g on the wide path, %.9g on AVX2",
                             nh, nkv, hd, (int)shapes[i].dt, (long long)n, (long long)starts[w],
                             (long long)e, a[e], b[e]);
        }
        /* decode steps and small calls (flash_segment's keys-in-lanes step:
         * on an f16, Q8_0 or Q4_0 cache where AVX-512 runs, these tiles read
         * the cache in place, flash_chunk_cache, here 1-16 rows (two passes
         * of the scores past 8; P V on 1-3 rows a pass, or on 4-8, 5 and 7
         * of them ending on 16 dimensions at head_dim 80), head_dim 64 to
         * 1,024, rows that see none of a chunk's keys (30-31, 255-256)
         * skipped; with AVX-512 off, f16 tiles of up to 8 rows
         * flash_chunk_f16_avx2; else flash_chunk's staged rows; 1 and 3
         * threads, whole and split segments) give every row the whole
         * prompt's bits (a holds its output) on both paths */
        static const int64_t at[][2] = {
            {0, 1},   {1, 1},   {15, 1},  {16, 1},  {17, 1}, {255, 1}, {256, 1},
            {257, 1}, {511, 1}, {599, 1}, {297, 3}, {40, 7}, {100, 4}, {509, 2},
            {30, 2},  {30, 4},  {255, 2}, {31, 5},  {62, 3},
        };
        cpu_threadpool *pools[2] = {pool, NULL};
        assert_int_equal(cpu_threadpool_create(1, &pools[1]), DI_OK);
        for (size_t w = 0; w < sizeof at / sizeof *at; w++)
            for (int pi = 0; pi < 4; pi++) {
                const int64_t t = at[w][0], nt = at[w][1];
                cpu_attention_avx2_only = pi / 2;
                cpu_attention(pools[pi % 2], &c, &sq, 0, q + t * nh * hd, nh, t, nt, scale, b,
                              scratch, CTX, 0);
                cpu_attention_avx2_only = 0;
                for (int64_t e = 0; e < nt * nh * hd; e++)
                    if (memcmp(&b[e], &a[t * nh * hd + e], sizeof *b) != 0)
                        fail_msg("heads %d/%d of %d, cache type %d, %lld tokens at %lld (%s, %d "
                                 "threads): output %lld is %.9g, the whole prompt's %.9g",
                                 nh, nkv, hd, (int)shapes[i].dt, (long long)nt, (long long)t,
                                 pi / 2 ? "avx2" : "wide", pi % 2 ? 1 : 2, (long long)e, b[e],
                                 a[t * nh * hd + e]);
            }
        cpu_threadpool_free(pools[1]);
        cpu_kv_cache_free(&c);
    }
    cpu_threadpool_free(pool);
    printf("flash attention tiles: %s\n",
           cpu_has_avx512_vnni()
               ? "avx512 rows-in-lanes tiles and in-place decode steps (avx512; avx2 with "
                 "avx-512 off) ran, bit-identical to the staged avx2 path on every shape"
               : "avx2 only on this CPU (no avx-512 vnni): its in-place f16 decode steps ran, "
                 "bit-identical to the staged prompt's rows");
}

/* The edge-score checks' shape (one KV head, two query heads of 16, 300
 * keys: two segments) and their paths over keys k and values v: out[0] the
 * whole prompt on the wide path, [1] on AVX2, [2] and [3] decode steps on
 * each (an f16 cache's read in place), [4] the reference path. */
enum { EDGE_NKV = 1, EDGE_NH = 2, EDGE_HD = 16, EDGE_N = 300 };

static void edge_attention_paths(model_dtype dt, const float *k, const float *v, const float *q,
                                 float out[5][EDGE_N * EDGE_NH * EDGE_HD])
{
    enum { NH = EDGE_NH, HD = EDGE_HD, N = EDGE_N, BLOCKS = N / 16 + 1 };
    static float scratch[2 * N];
    cpu_kv_cache c;
    assert_int_equal(cpu_kv_cache_init(&c, dt, 1, EDGE_NKV, HD, 16, BLOCKS), DI_OK);
    int32_t table[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) table[i] = i;
    cpu_kv_seq sq = {table, BLOCKS, BLOCKS, N, 0};
    cpu_kv_store(&c, &sq, 0, 0, N, k, v);
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    for (int w = 0; w < 4; w++) {
        cpu_attention_avx2_only = w % 2;
        if (w < 2)
            cpu_attention(pool, &c, &sq, 0, q, NH, 0, N, 0.25f, out[w], scratch, N, 0);
        else
            for (int t = 0; t < N; t++)
                cpu_attention(pool, &c, &sq, 0, q + t * NH * HD, NH, t, 1, 0.25f,
                              out[w] + t * NH * HD, scratch, N, 0);
    }
    cpu_attention_avx2_only = 0;
    cpu_attention(NULL, &c, &sq, 0, q, NH, 0, N, 0.25f, out[4], scratch, N, 1);
    cpu_threadpool_free(pool);
    cpu_kv_cache_free(&c);
}

/* A NaN score (a NaN in the cache, or an f16 key past 65504 stored as inf
 * times a zero query element) makes every row that sees it NaN, as the
 * reference path's, on the AVX-512 prefill tiles, the AVX2 ones and decode
 * steps alike; the rows before it stay finite and bit-identical. (A breaker's
 * finding: the row-per-lane max dropped the keys before a NaN and gave NaN
 * where the AVX2 tree dropped the NaN and gave a finite row.) */
static void check_nan_key(model_dtype dt, int bad, float kval)
{
    enum { NKV = EDGE_NKV, NH = EDGE_NH, HD = EDGE_HD, N = EDGE_N };
    static float k[N * NKV * HD], v[N * NKV * HD], q[N * NH * HD], out[5][N * NH * HD];
    for (int i = 0; i < N * NKV * HD; i++) k[i] = frand(), v[i] = frand();
    for (int i = 0; i < N * NH * HD; i++) q[i] = i % HD == 0 ? 0.0f : frand();
    k[bad * NKV * HD] = kval;
    edge_attention_paths(dt, k, v, q, out);
    for (int t = 0; t < N; t++)
        for (int e = 0; e < NH * HD; e++)
            for (int w = 0; w < 5; w++) {
                float x = out[w][t * NH * HD + e];
                if (t >= bad ? !isnan(x) : !isfinite(x))
                    fail_msg("NaN key %d, cache type %d: path %d, token %d, output %d is %g", bad,
                             (int)dt, w, t, e, (double)x);
                if (t < bad && w < 4 && memcmp(&x, &out[0][t * NH * HD + e], sizeof x) != 0)
                    fail_msg("NaN key %d: path %d, token %d before it differs", bad, w, t);
            }
}

static void test_attention_nan_scores(void **state)
{
    (void)state;
    check_nan_key(MODEL_DTYPE_F32, 13, NAN); /* the last valid key of a chunk for token 13 */
    check_nan_key(MODEL_DTYPE_F32, 3, NAN);
    check_nan_key(MODEL_DTYPE_F16, 20, 1e5f); /* inf in the cache, times a zero: NaN */
    check_nan_key(MODEL_DTYPE_F32, 270, NAN); /* in the second segment */
}

/* Keys whose scores are -inf (an inf in the cache times a positive query
 * element) weigh nothing: a row that also sees a finite score is that
 * softmax's, finite and within 1e-5 of the reference path (1e-3 on an f16
 * cache, whose reference rounds q to f16), on the AVX-512
 * prefill tiles, the AVX2 ones and decode steps on both (an f16 cache's read
 * in place), bit-identical among them; a
 * row that sees only -inf is NaN on every path, as the reference's 0 / 0. (A
 * breaker's finding: when every key of a row's first chunk in a segment
 * scored -inf, the fast paths took e^(-inf + inf) and gave NaN.) Keys
 * [0, nbad) hold `kval` in dimension 0, where every query holds 1. */
static void check_ninf_keys(model_dtype dt, int nbad, float kval)
{
    enum { NKV = EDGE_NKV, NH = EDGE_NH, HD = EDGE_HD, N = EDGE_N };
    static float k[N * NKV * HD], v[N * NKV * HD], q[N * NH * HD], out[5][N * NH * HD];
    for (int i = 0; i < N * NKV * HD; i++) k[i] = frand(), v[i] = frand();
    for (int i = 0; i < N * NH * HD; i++) q[i] = i % HD == 0 ? 1.0f : frand();
    for (int t = 0; t < nbad; t++) k[t * NKV * HD] = kval;
    edge_attention_paths(dt, k, v, q, out);
    const float tol = dt == MODEL_DTYPE_F32 ? 1e-5f : 1e-3f;
    for (int t = 0; t < N; t++)
        for (int e = 0; e < NH * HD; e++) {
            const float ref = out[4][t * NH * HD + e];
            if (t < nbad ? !isnan(ref) : !isfinite(ref))
                fail_msg("-inf keys [0, %d), cache type %d: reference token %d, output %d is %g",
                         nbad, (int)dt, t, e, (double)ref);
            for (int w = 0; w < 4; w++) {
                const float x = out[w][t * NH * HD + e];
                if (t < nbad ? !isnan(x) : !(fabsf(x - ref) <= tol))
                    fail_msg("-inf keys [0, %d), cache type %d: path %d, token %d, output %d is "
                             "%g, the reference's %g",
                             nbad, (int)dt, w, t, e, (double)x, (double)ref);
                if (t >= nbad && memcmp(&x, &out[0][t * NH * HD + e], sizeof x) != 0)
                    fail_msg("-inf keys [0, %d): path %d, token %d differs from path 0", nbad, w,
                             t);
            }
        }
}

static void test_attention_ninf_scores(void **state)
{
    (void)state;
    check_ninf_keys(MODEL_DTYPE_F32, 16, -INFINITY);  /* the smallest: a whole first chunk */
    check_ninf_keys(MODEL_DTYPE_F32, 37, -INFINITY);  /* two chunks and part of a third */
    check_ninf_keys(MODEL_DTYPE_F16, 16, -1e5f);      /* past f16's range: stored as -inf */
    check_ninf_keys(MODEL_DTYPE_F32, 272, -INFINITY); /* the second segment's first chunk too */
}

static void test_attention_f32_cache(void **state)
{
    (void)state;
    check_attention(MODEL_DTYPE_F32);
}

static void test_attention_f16_cache(void **state)
{
    (void)state;
    check_attention(MODEL_DTYPE_F16);
}

/* The Q8_0 and Q4_0 caches (llama.cpp's --cache-type-k/v): both paths
 * dequantize a row exactly, so they match the double computation over the
 * values the blocks hold as closely as the f32 cache; and a head_dim that is
 * not whole blocks is refused. */
static void test_attention_q8_0_cache(void **state)
{
    (void)state;
    check_attention(MODEL_DTYPE_Q8_0);
}

static void test_attention_q4_0_cache(void **state)
{
    (void)state;
    check_attention(MODEL_DTYPE_Q4_0);
    cpu_kv_cache c;
    assert_int_equal(cpu_kv_cache_init(&c, MODEL_DTYPE_Q4_0, 1, 2, 48, 8, 4),
                     DI_ERR_INVALID_ARGUMENT);
    assert_int_equal(cpu_kv_cache_init(&c, MODEL_DTYPE_Q4_K, 1, 2, 256, 8, 4),
                     DI_ERR_INVALID_ARGUMENT);
}

/* Sizes whose product does not fit are out of memory, not a cache of the
 * wrapped size: n_head_kv x head_dim past an int; and a pool of 27905 layers
 * x 49477 blocks x 8681 tokens x 384773 f32 values = 4 (2^62 + 1) bytes, which
 * wrapped to 4 (2^62 + 1 = 27905 x 8681 x 49477 x 384773): the cache was made,
 * 4 bytes long, and the first store wrote past it. */
static void test_kv_cache_init_size_overflow(void **state)
{
    (void)state;
    cpu_kv_cache c;
    assert_int_equal(cpu_kv_cache_init(&c, MODEL_DTYPE_F32, 1, 65536, 65536, 16, 1),
                     DI_ERR_OUT_OF_MEMORY);
    assert_int_equal(cpu_kv_cache_init(&c, MODEL_DTYPE_F32, 27905, 1, 384773, 8681, 49477),
                     DI_ERR_OUT_OF_MEMORY);
    assert_int_equal(cpu_kv_cache_init(&c, MODEL_DTYPE_F16, 27905, 2, 384773, 8681, 49477),
                     DI_ERR_OUT_OF_MEMORY);
    /* a cache that fits still works */
    assert_int_equal(cpu_kv_cache_init(&c, MODEL_DTYPE_F32, 2, 2, 8, 16, 2), DI_OK);
    assert_int_equal(c.bytes, (size_t)2 * 2 * 16 * 2 * 8 * 4);
    cpu_kv_cache_free(&c);
}

/* MLA over a Q8_0 or Q4_0 latent cache, through the backend interface (the
 * path DeepSeek-V3/V2 take): rows of 64 (kv_lora_rank 48 + rope 16) are
 * rotated and quantized when stored and rotated back when read, so the
 * attention equals the f32 cache's over the values the blocks hold, and those
 * are the stored latents up to the blocks' rounding. */
static void test_mla_quantized_latent_cache(void **state)
{
    (void)state;
    enum { NH = 3, NOPE = 16, RP = 16, VD = 16, RK = 48, D = RK + RP, NT = 21, BS = 16, NB = 4 };
    backend_options bo = {2, 0, NT, 64, 0};
    backend *be = NULL;
    assert_int_equal(backend_create(&bo, &be, NULL), DI_OK);
    static float w[NH * (NOPE + VD) * RK], lat[NT * D], eff[NT * D], q[NT * NH * (NOPE + RP)];
    static float out_q[NT * NH * VD], out_f[NT * NH * VD];
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) w[i] = frand() * 0.2f;
    for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++) lat[i] = frand();
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) q[i] = frand();
    model_tensor t = {.name = "kv_b",
                      .dtype = MODEL_DTYPE_F32,
                      .n_dims = 2,
                      .ne = {RK, NH * (NOPE + VD), 1, 1},
                      .data = w,
                      .n_bytes = sizeof w};
    const backend_matrix *wm = NULL;
    assert_int_equal(be->ops->matrix(be, &t, &wm, NULL), DI_OK);
    const backend_mla_shape shape = {NH, NOPE, RP, VD, RK};
    int32_t table[NB] = {2, 0, 3, 1};
    backend_kv_seq s = {table, NB, NB, NT, 0};
    const model_dtype types[2] = {MODEL_DTYPE_Q8_0, MODEL_DTYPE_Q4_0};
    for (int k = 0; k < 2; k++) {
        backend_kv *kq = NULL, *kf = NULL;
        assert_int_equal(be->ops->kv_create(be, types[k], 1, 1, D, BS, NB, &shape, 0, &kq, NULL),
                         DI_OK);
        assert_int_equal(
            be->ops->kv_create(be, MODEL_DTYPE_F32, 1, 1, D, BS, NB, &shape, 0, &kf, NULL), DI_OK);
        assert_int_equal(be->ops->kv_bytes_per_token(kq), cpu_row_bytes((int)types[k], D));
        be->ops->kv_store(be, kq, &s, 0, 0, NT, lat, NULL);
        /* the values the blocks hold: each block's row read back, dequantized
         * and rotated back (cpu_kv_k reads the same memory the backend wrote) */
        size_t row = cpu_row_bytes((int)types[k], D);
        char *block = malloc(be->ops->kv_block_bytes(kq));
        assert_non_null(block);
        for (int b = 0; b < (NT + BS - 1) / BS; b++) {
            be->ops->kv_block_read(be, kq, table[b], block);
            for (int slot = 0; slot < BS && b * BS + slot < NT; slot++) {
                float *e = eff + (b * BS + slot) * D;
                cpu_dequantize_row((int)types[k], block + (size_t)slot * row, e, D);
                cpu_kv_rotate(e, D);
                for (int i = 0; i < D; i++)
                    assert_true(fabsf(e[i] - lat[(b * BS + slot) * D + i]) <
                                (k == 0 ? 0.04f : 0.6f));
            }
        }
        free(block);
        be->ops->kv_store(be, kf, &s, 0, 0, NT, eff, NULL);
        be->ops->mla_attention(be, kq, &s, 0, q, 0, NT, w, wm, 0.2f, out_q);
        be->ops->mla_attention(be, kf, &s, 0, q, 0, NT, w, wm, 0.2f, out_f);
        double worst = 0;
        for (int i = 0; i < NT * NH * VD; i++) worst = fmax(worst, fabs(out_q[i] - out_f[i]));
        printf("mla, %s latent cache vs f32 over the values it holds: max |diff| %.2e\n",
               k == 0 ? "q8_0" : "q4_0", worst);
        assert_true(worst < 1e-5);
    }
    backend_free(be);
}

/* MLA's absorbed form with k_b / v_b as llama.cpp stores them
 * (cpu_mla_attention_split) against the f32 absorbed form on the same weights
 * dequantized and joined (kv_b rows: each head's nope key rows, then its v value
 * rows): F32 storage gives the same sums up to their order, Q8_0 (activations
 * quantized to Q8_0, as llama.cpp does) stays within its rounding. */
static void test_mla_split_form_matches_the_f32_join(void **state)
{
    (void)state;
    enum { H = 2, NOPE = 32, ROPE = 8, V = 32, R = 64, D = R + ROPE, T = 5, POS0 = 3 };
    const cpu_mla_shape shape = {H, NOPE, ROPE, V, R};
    float kbf[H * R * NOPE], vbf[H * V * R], join[H * (NOPE + V) * R];
    for (int i = 0; i < H * R * NOPE; i++) kbf[i] = frand() * 0.3f;
    for (int i = 0; i < H * V * R; i++) vbf[i] = frand() * 0.3f;
    float q[T * H * (NOPE + ROPE)], kv[(POS0 + T) * D];
    for (int i = 0; i < T * H * (NOPE + ROPE); i++) q[i] = frand();
    for (int i = 0; i < (POS0 + T) * D; i++) kv[i] = frand();
    cpu_threadpool *pool;
    assert_int_equal(cpu_threadpool_create(2, &pool), DI_OK);
    const int64_t sf = cpu_mla_scratch_floats(&shape, POS0 + T, 2);
    float *scratch = malloc((size_t)sf * sizeof *scratch);
    assert_non_null(scratch);
    const model_dtype types[2] = {MODEL_DTYPE_F32, MODEL_DTYPE_Q8_0};
    for (int k = 0; k < 2; k++) {
        model_dtype dt = types[k];
        size_t kb_row = cpu_row_bytes((int)dt, NOPE), vb_row = cpu_row_bytes((int)dt, R);
        char *kb = malloc(kb_row * H * R), *vb = malloc(vb_row * H * V);
        assert_non_null(kb);
        assert_non_null(vb);
        for (int r = 0; r < H * R; r++)
            cpu_quantize_row_ref((int)dt, kbf + r * NOPE, kb + (size_t)r * kb_row, NOPE);
        for (int r = 0; r < H * V; r++)
            cpu_quantize_row_ref((int)dt, vbf + r * R, vb + (size_t)r * vb_row, R);
        /* the join of what is stored */
        for (int h = 0; h < H; h++) {
            float row[R > NOPE ? R : NOPE];
            for (int r = 0; r < R; r++) {
                cpu_dequantize_row((int)dt, kb + (size_t)(h * R + r) * kb_row, row, NOPE);
                for (int i = 0; i < NOPE; i++) join[(h * (NOPE + V) + i) * R + r] = row[i];
            }
            for (int i = 0; i < V; i++)
                cpu_dequantize_row((int)dt, vb + (size_t)(h * V + i) * vb_row,
                                   join + (h * (NOPE + V) + NOPE + i) * R, R);
        }
        model_tensor tk = {.name = "k_b",
                           .dtype = dt,
                           .n_dims = 3,
                           .ne = {NOPE, R, H, 1},
                           .data = kb,
                           .n_bytes = kb_row * H * R};
        model_tensor tv = {.name = "v_b",
                           .dtype = dt,
                           .n_dims = 3,
                           .ne = {R, V, H, 1},
                           .data = vb,
                           .n_bytes = vb_row * H * V};
        float want[T * H * V], got[T * H * V], ref[T * H * V];
        cpu_mla_attention(pool, &shape, q, T, POS0, kv, join, 0.125f, want, scratch, POS0 + T);
        cpu_mla_attention_split(pool, &shape, q, T, POS0, kv, &tk, &tv, 0.125f, got, scratch,
                                POS0 + T, 0);
        cpu_mla_attention_split(pool, &shape, q, T, POS0, kv, &tk, &tv, 0.125f, ref, scratch,
                                POS0 + T, 1);
        double tol = dt == MODEL_DTYPE_F32 ? 1e-5 : 3e-2, worst = 0;
        for (int i = 0; i < T * H * V; i++) {
            double d = fabs((double)got[i] - want[i]);
            worst = d > worst ? d : worst;
            if (d > tol * (1.0 + fabs((double)want[i])))
                fail_msg("dtype %d element %d: split %g, f32 join %g", dt, i, (double)got[i],
                         (double)want[i]);
            /* the SIMD and reference kernels: the same integer sums */
            if (fabs((double)got[i] - ref[i]) > 1e-5 * (1.0 + fabs((double)ref[i])))
                fail_msg("dtype %d element %d: SIMD %g, reference %g", dt, i, (double)got[i],
                         (double)ref[i]);
        }
        print_message("mla split form, dtype %d: max |diff| from the f32 join %.2e\n", dt, worst);
        free(kb);
        free(vb);
    }
    free(scratch);
    cpu_threadpool_free(pool);
}

/* MLA's tiled absorbed form against the naive reference (keys and values
 * expanded from the same W, cpu_softmax in double) on one shape: a context of
 * several 16-key chunks and 16-token blocks; a decode row (one token, tiles
 * of other sizes, 1 to 3 threads) bit-identical to the same row inside a
 * prefill. Scratch of exactly cpu_mla_scratch_floats (ASan sees past it). */
static void check_mla_tiled(int H, int NOPE, int ROPE, int V, int R, int T, int POS0, int ninf)
{
    const int D = R + ROPE, N = POS0 + T, QD = NOPE + ROPE, FULL = H * (NOPE + V);
    const cpu_mla_shape shape = {H, NOPE, ROPE, V, R};
    float *w = malloc(sizeof(float) * (size_t)(FULL * R)),
          *q = malloc(sizeof(float) * (size_t)(T * H * QD));
    float *kv = malloc(sizeof(float) * (size_t)(N * D)),
          *kv_full = malloc(sizeof(float) * (size_t)(N * FULL));
    float *want = malloc(sizeof(float) * (size_t)(T * H * V)),
          *got = malloc(sizeof(float) * (size_t)(T * H * V));
    float *one = malloc(sizeof(float) * (size_t)(H * V));
    assert_true(w && q && kv && kv_full && want && got && one);
    for (int i = 0; i < FULL * R; i++) w[i] = frand() * 0.4f;
    for (int i = 0; i < T * H * QD; i++) q[i] = frand() * 2.0f;
    for (int i = 0; i < N * D; i++) kv[i] = frand();
    if (ninf > 0) /* scores -inf: a -inf rope key, every rope query 1 */
        for (int i = 0; i < T * H; i++) q[i * QD + NOPE] = 1.0f;
    for (int j = 0; j < ninf; j++) kv[j * D + R] = -INFINITY;
    for (int j = 0; j < N; j++)
        for (int o = 0; o < FULL; o++) {
            double acc = 0;
            for (int r = 0; r < R; r++) acc += (double)w[o * R + r] * kv[j * D + r];
            kv_full[j * FULL + o] = (float)acc;
        }
    cpu_threadpool *pools[3];
    float *scratch[3];
    for (int k = 0; k < 3; k++) {
        assert_int_equal(cpu_threadpool_create(k + 1, &pools[k]), DI_OK);
        scratch[k] = malloc(sizeof(float) * (size_t)cpu_mla_scratch_floats(&shape, N, k + 1));
        assert_non_null(scratch[k]);
    }
    cpu_mla_attention_naive(pools[1], &shape, q, T, POS0, kv, kv_full, 0.2f, want, scratch[1], N);
    cpu_mla_attention(pools[1], &shape, q, T, POS0, kv, w, 0.2f, got, scratch[1], N);
    double worst = 0;
    for (int i = 0; i < T * H * V; i++) {
        double d = fabs((double)got[i] - want[i]);
        worst = d > worst ? d : worst;
        if (!(d <= 1e-4 * (1.0 + fabs((double)want[i])))) /* (NaN fails) */
            fail_msg("H %d R %d rope %d element %d: tiled %g, naive %g", H, R, ROPE, i,
                     (double)got[i], (double)want[i]);
    }
    /* the AVX-512 latent tiles (where they ran: tiles capped at 12 heads or
     * more, or at 8 or more past 768 keys) are
     * the AVX2 tiles' results bit for bit */
    cpu_attention_avx2_only = 1;
    cpu_mla_attention(pools[1], &shape, q, T, POS0, kv, w, 0.2f, want, scratch[1], N);
    cpu_attention_avx2_only = 0;
    if (memcmp(want, got, sizeof(float) * (size_t)(T * H * V)) != 0)
        fail_msg("H %d R %d rope %d: the AVX-512 latent tiles differ from the AVX2 ones", H, R,
                 ROPE);
    print_message("mla tiled vs naive, %d heads, R %d, rope %d, %d tokens after %d: max |diff| "
                  "%.2e\n",
                  H, R, ROPE, T, POS0, worst);
    for (int k = 0; k < 3; k++) /* decode rows: token t alone at position POS0 + t */
        for (int t = 0; t < T; t += 13) {
            cpu_mla_attention(pools[k], &shape, q + t * H * QD, 1, POS0 + t, kv, w, 0.2f, one,
                              scratch[k], N);
            if (memcmp(one, got + t * H * V, sizeof(float) * (size_t)(H * V)) != 0)
                fail_msg("token %d decoded alone (%d threads) differs from the prefill's row", t,
                         k + 1);
        }
    for (int k = 0; k < 3; k++) {
        cpu_threadpool_free(pools[k]);
        free(scratch[k]);
    }
    free(w), free(q), free(kv), free(kv_full), free(want), free(got), free(one);
}

static void test_mla_tiled_matches_naive(void **state)
{
    (void)state;
    check_mla_tiled(5, 16, 8, 16, 32, 40, 37, 0);    /* a partial tile, chunks and blocks */
    check_mla_tiled(17, 8, 0, 8, 12, 33, 0, 0);      /* more heads than a tile, no rope, odd R */
    check_mla_tiled(20, 16, 16, 16, 64, 45, 30, 0);  /* tiles of 16 and 4 heads (AVX-512, AVX2) */
    check_mla_tiled(16, 16, 16, 16, 64, 14, 770, 0); /* decode's 8-head tiles past 768 keys */
    check_mla_tiled(20, 16, 16, 16, 64, 14, 770, 0); /* and 10-head tiles */
    /* a group's four tokens crossing a chunk's first key at its last token
     * and at its second: one and three of them in a rows_chunk512 call */
    check_mla_tiled(20, 16, 16, 16, 64, 45, 33, 0);
    check_mla_tiled(20, 16, 16, 16, 64, 45, 35, 0);
    /* keys whose scores are -inf weigh nothing, a row's first chunk all of
     * them (the tiles took e^(-inf + inf), NaN): AVX-512 and AVX2 tiles, two
     * chunks on the scalar tile (D 20: no AVX2 tile), decode's tiles */
    check_mla_tiled(20, 16, 16, 16, 64, 45, 33, 16);
    check_mla_tiled(17, 8, 8, 8, 12, 33, 40, 32);
    check_mla_tiled(16, 16, 16, 16, 64, 14, 770, 16);
}

int main(void)
{
    /* Which SIMD kernels this machine runs (the tests of the others skip). */
    printf("kernels: %s\n", cpu_kernels_name());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simd_dot_matches_reference),
        cmocka_unit_test(test_four_row_dot_is_bit_identical),
        cmocka_unit_test(test_vnni_dot_is_bit_identical_to_avx2),
        cmocka_unit_test(test_avx512_float_tiles_are_the_avx2_path),
        cmocka_unit_test(test_reference_dot_matches_dequantized_product),
        cmocka_unit_test(test_threaded_matmul_matches_reference),
        cmocka_unit_test(test_multi_matmul_equals_separate_products),
        cmocka_unit_test(test_packed_matmul_is_the_reference_bit_for_bit),
        cmocka_unit_test(test_amx_matmul_is_the_reference_bit_for_bit),
        cmocka_unit_test(test_amx_bf16_matmul),
        cmocka_unit_test(test_moe_experts_read_the_packed_copies),
        cmocka_unit_test(test_sink_attention_matches_double),
        cmocka_unit_test(test_indexer_candidate_blocks),
        cmocka_unit_test(test_indexer_reads_every_cache_type),
        cmocka_unit_test(test_indexer_topk_order_and_ties),
        cmocka_unit_test(test_simd_fp8_decodes_every_value),
        cmocka_unit_test(test_fp8_matmul_applies_block_scales),
        cmocka_unit_test(test_mxfp4_matmul_applies_row_scales),
        cmocka_unit_test(test_threadpool_runs_every_task_once),
        cmocka_unit_test(test_threadpool_scratch_per_thread),
        cmocka_unit_test(test_rmsnorm_gives_unit_rms),
        cmocka_unit_test(test_rope_neox_is_norm_on_permuted_dims),
        cmocka_unit_test(test_rope_rotates_by_position_times_frequency),
        cmocka_unit_test(test_amx_env_words),
        cmocka_unit_test(test_softmax_and_silu),
        cmocka_unit_test(test_exp_rows),
        cmocka_unit_test(test_silu_rows),
        cmocka_unit_test(test_attention_f32_cache),
        cmocka_unit_test(test_attention_f16_cache),
        cmocka_unit_test(test_attention_q8_0_cache),
        cmocka_unit_test(test_attention_q4_0_cache),
        cmocka_unit_test(test_kv_cache_init_size_overflow),
        cmocka_unit_test(test_attention_long_context_segments),
        cmocka_unit_test(test_attention_avx512_tiles_are_the_avx2_path),
        cmocka_unit_test(test_attention_nan_scores),
        cmocka_unit_test(test_attention_ninf_scores),
        cmocka_unit_test(test_mla_split_form_matches_the_f32_join),
        cmocka_unit_test(test_mla_tiled_matches_naive),
        cmocka_unit_test(test_mla_quantized_latent_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
