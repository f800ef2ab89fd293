/* Matrix products over stored weights (matmul.h). */
#include "backend/cpu/matmul.h"

#include <string.h>

#include "backend/cpu/matmul_amx.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/vec_dot.h"

/* Tiles: 16 weight rows x 32 tokens for prefill (64 where AMX-INT8 runs: a
 * task widens its rows' weights once for all its tokens; 20 for BF16 on
 * AMX-BF16: four groups of 5 tokens share each weight block). At decode a 16-row task is
 * well under a microsecond, so the shared task counter would cost as much as
 * the work: each thread then gets about four tasks per product instead. */
enum {
    ROWS_PER_TILE = 16,
    TOKENS_PER_TILE = 32,
    AMX_TOKENS_PER_TILE = 64,
    TASKS_PER_THREAD = 4,
    /* the packed 16-row kernels from this many tokens a tile (prefill); one or
     * two (decode, a short draft) stay on the 8-row ones (faster there:
     * matmul_packed.h) */
    PACKED16_MIN_TOKENS = 3,
    FP8_BLOCK = 128
};

/* The scratch: the quantized rows, then (from a 64-byte boundary) the packed
 * kernels' side data. */
static size_t act_bytes(int act_type, int64_t n_in, int64_t n_tokens)
{
    return (cpu_row_bytes(act_type, n_in) * (size_t)n_tokens + 63) / 64 * 64;
}

/* The AMX kernels' copy of the activations (matmul_amx.h), after the side
 * data from a 64-byte boundary: where this process may run them for act
 * (sizing: asks Linux for nothing) or runs them (a product: asks, the first
 * time). */
static size_t amx_bytes(int act, int64_t n_in, int64_t n_tokens, int sizing)
{
    if (act != MODEL_DTYPE_Q8_0 && act != CPU_DTYPE_Q8_1 && act != CPU_DTYPE_Q8_K) return 0;
    if (n_tokens < CPU_AMX_TOKENS || !(sizing ? cpu_amx_possible() : cpu_has_amx())) return 0;
    return cpu_amx_tiles_bytes(act, n_in, n_tokens) + 64;
}

size_t cpu_matmul_scratch_bytes(model_dtype dtype, int64_t n_in, int64_t n_tokens)
{
    int act = cpu_vec_dot_type(dtype);
    size_t info =
        act == MODEL_DTYPE_Q8_0 || act == CPU_DTYPE_Q8_1 ? cpu_pack_info_bytes(n_in, n_tokens) : 0;
    size_t bf16 = dtype == MODEL_DTYPE_BF16 && cpu_amx_bf16_possible()
                      ? cpu_amx_bf16_act_bytes(n_in, n_tokens) + 64
                      : 0;
    return act_bytes(act, n_in, n_tokens) + info + amx_bytes(act, n_in, n_tokens, 1) + bf16 + 64;
}

int cpu_matmul_supported(model_dtype dtype, int64_t n_in)
{
    int be = cpu_dtype_block_elems((int)dtype);
    return be > 0 && n_in > 0 && n_in % be == 0 && cpu_vec_dot_ref(dtype) != NULL;
}

typedef struct matmul_part {
    const model_tensor *w;
    const float *bias;
    float *y;
    int64_t n_out;
    size_t w_row;
    cpu_vec_dot_fn dot;
    cpu_vec_dot4_fn dot4;           /* NULL: one token at a time */
    cpu_vec_dot2x4_fn dot2x4;       /* NULL: one weight row at a time */
    cpu_vec_dot_mxfp4_fn dot_mxfp4; /* MXFP4 weights: rows with their scales, else NULL */
    cpu_vec_dot_tile_fn tile;       /* F32/F16/BF16 on AVX-512: 4 rows x 4 tokens, else NULL */
    int amx_bf16;                   /* BF16 on AMX-BF16 tiles (matmul_amx.h) */
    const char *packed;             /* interleaved rows (matmul_packed.h), or NULL */
    cpu_packed_fn packed_fn;
    cpu_packed16_fn packed16_fn; /* 16 rows at a time at prefill (AVX512-VNNI), or NULL */
    cpu_amx_fn amx_fn;           /* prefill tiles of 16 rows x 16 tokens on AMX, or NULL */
    size_t group_bytes;
    int64_t first_task, n_row_tiles, rows_per_tile;
} matmul_part;

typedef struct matmul_job {
    matmul_part parts[CPU_MATMUL_MAX_PARTS];
    int n_parts;
    const float *x;
    int64_t n_tokens, n_in;
    const char *act; /* the activations multiplied: x itself or the quantized scratch */
    char *scratch;
    size_t act_row;
    int act_type;
    char *info; /* the packed kernels' side data per token, or NULL */
    size_t info_row;
    char *amx_tiles; /* the AMX kernels' copy of the first n_amx tokens, or NULL */
    int64_t n_amx;
    cpu_threadpool *pool;    /* its scratch: the AMX kernels' widened weights */
    char *bf16_act;          /* the AMX-BF16 kernel's activation tiles, or NULL */
    int64_t bf16_tile_bytes; /* of a group of CPU_AMX_BF16_TOKENS tokens */
    int64_t n_tok_tiles, tokens_per_tile;
} matmul_job;

static void bf16_pack_task(void *ctx, int64_t t, int thread)
{
    (void)thread;
    const matmul_job *j = ctx;
    cpu_amx_bf16_pack_token(j->x + t * j->n_in, j->n_in, t, j->bf16_act);
}

static void quantize_task(void *ctx, int64_t t, int thread)
{
    (void)thread;
    matmul_job *j = ctx;
    char *row = j->scratch + (size_t)t * j->act_row;
    cpu_quantize_row(j->act_type, j->x + t * j->n_in, row, j->n_in);
    if (j->info) cpu_pack_info(j->act_type, row, j->n_in, j->info + (size_t)t * j->info_row);
    if (j->amx_tiles && t < j->n_amx)
        cpu_amx_pack_token(j->act_type, row, j->n_in, t, j->amx_tiles);
}

/* Row o of an fp8 weight . f32 activations: each 128x128 block's unscaled
 * product times its scale. */
static float dot_scaled_row(const matmul_job *j, const matmul_part *pt, int64_t o, const char *wrow,
                            const char *arow)
{
    const model_tensor *sc = pt->w->scale;
    const float *row_scales = (const float *)sc->data + o / FP8_BLOCK * sc->ne[0];
    float sum = 0;
    for (int64_t i = 0; i < j->n_in; i += FP8_BLOCK) {
        int64_t len = j->n_in - i < FP8_BLOCK ? j->n_in - i : FP8_BLOCK;
        float s;
        pt->dot(len, &s, wrow + i, arow + i * (int64_t)sizeof(float));
        sum += s * row_scales[i / FP8_BLOCK];
    }
    return sum;
}

/* An MXFP4 weight's row o times tokens [t0, t1): four at a time, then one
 * at a time, through the one scaled kernel (batch-invariant). */
static void mxfp4_rows(const matmul_job *j, const matmul_part *pt, int64_t o, int64_t t0,
                       int64_t t1)
{
    const model_tensor *sc = pt->w->scale;
    const float *row_scales = (const float *)sc->data + o * sc->ne[0];
    const char *wrow = (const char *)pt->w->data + (size_t)o * pt->w_row;
    float b = pt->bias ? pt->bias[o] : 0.0f;
    for (int64_t t = t0; t < t1;) {
        int n = t1 - t >= 4 ? 4 : 1;
        float s4[4];
        pt->dot_mxfp4(j->n_in, s4, wrow, row_scales, j->act + (size_t)t * j->act_row, j->act_row,
                      n);
        for (int r = 0; r < n; r++) pt->y[(t + r) * pt->n_out + o] = s4[r] + b;
        t += n;
    }
}

/* F32/F16/BF16 rows [o0, o1) times tokens [t0, t1) in register tiles of 4 x
 * 4 (prefill) or 4 x 1 (decode), the rest 1 x 4 or 1 x 1: every sum is the
 * one-row kernel's, so the tiling changes no result. Four tokens at a time
 * over all the rows, so the four activation rows stay in L1. */
static void float_tiles(const matmul_job *j, const matmul_part *pt, int64_t o0, int64_t o1,
                        int64_t t0, int64_t t1)
{
    const char *wdata = pt->w->data;
    for (int64_t t = t0; t < t1;) {
        int nt = t1 - t >= 4 ? 4 : 1;
        for (int64_t o = o0; o < o1;) {
            int nr = o1 - o >= 4 ? 4 : 1;
            float s16[16];
            pt->tile(j->n_in, s16, wdata + (size_t)o * pt->w_row, pt->w_row, nr,
                     j->act + (size_t)t * j->act_row, j->act_row, nt);
            for (int r = 0; r < nr; r++) {
                float b = pt->bias ? pt->bias[o + r] : 0.0f;
                for (int k = 0; k < nt; k++)
                    pt->y[(t + k) * pt->n_out + o + r] = s16[r * 4 + k] + b;
            }
            o += nr;
        }
        t += nt;
    }
}

static void matmul_task(void *ctx, int64_t task, int thread)
{
    const matmul_job *j = ctx;
    const matmul_part *pt = &j->parts[0];
    for (int p = 1; p < j->n_parts && task >= j->parts[p].first_task; p++) pt = &j->parts[p];
    task -= pt->first_task;
    int64_t rt = task / j->n_tok_tiles, tt = task % j->n_tok_tiles;
    int64_t o0 = rt * pt->rows_per_tile, o1 = o0 + pt->rows_per_tile;
    int64_t t0 = tt * j->tokens_per_tile, t1 = t0 + j->tokens_per_tile;
    if (o1 > pt->n_out) o1 = pt->n_out;
    if (t1 > j->n_tokens) t1 = j->n_tokens;
    if (pt->packed) { /* o0 and the tile's rows are multiples of CPU_PACK_ROWS */
        const char *info = j->info ? j->info + (size_t)t0 * j->info_row : NULL;
        const char *act = j->act + (size_t)t0 * j->act_row;
        /* AMX takes whole 16 x 16 tiles; the 16-row kernels (AVX512-VNNI) the
         * tokens after them where three or more are left and 16 rows are; the
         * 8-row kernels the rest. All give the reference's sums, so a row's
         * result does not depend on which.
         * (t0 is a multiple of the tile.) */
        int64_t t_amx = pt->amx_fn && j->n_amx < t1 ? j->n_amx : t1;
        int64_t n_amx = pt->amx_fn && t_amx > t0 ? t_amx - t0 : 0;
        const char *tiles =
            n_amx ? j->amx_tiles + cpu_amx_tiles_bytes(j->act_type, j->n_in, t0) : NULL;
        for (int64_t o = o0; o < o1;) {
            const char *g = pt->packed + (size_t)(o / CPU_PACK_ROWS) * pt->group_bytes;
            float *y = pt->y + t0 * pt->n_out + o;
            int64_t rows = CPU_PACK_ROWS, from = 0;
            if (n_amx > 0 && o + CPU_AMX_ROWS <= o1) {
                pt->amx_fn(j->n_in, g, pt->group_bytes, tiles, n_amx, y, pt->n_out,
                           cpu_threadpool_scratch(j->pool, thread));
                rows = CPU_AMX_ROWS;
                from = n_amx;
            }
            if (pt->packed16_fn && o + CPU_PACK16_ROWS <= o1 &&
                t1 - t0 - from >= PACKED16_MIN_TOKENS) {
                pt->packed16_fn(j->n_in, g, pt->group_bytes, act + (size_t)from * j->act_row,
                                j->act_row, info ? info + (size_t)from * j->info_row : NULL,
                                j->info_row, t1 - t0 - from, y + from * pt->n_out, pt->n_out);
                rows = CPU_PACK16_ROWS;
                from = t1 - t0;
            }
            for (int64_t r = 0; r < rows && from < t1 - t0; r += CPU_PACK_ROWS)
                pt->packed_fn(j->n_in, g + (size_t)(r / CPU_PACK_ROWS) * pt->group_bytes,
                              act + (size_t)from * j->act_row, j->act_row,
                              info ? info + (size_t)from * j->info_row : NULL, j->info_row,
                              t1 - t0 - from, y + from * pt->n_out + r, pt->n_out);
            if (pt->bias)
                for (int64_t t = t0; t < t1; t++)
                    for (int64_t r = 0; r < rows; r++)
                        pt->y[t * pt->n_out + o + r] += pt->bias[o + r];
            o += rows;
        }
        return;
    }
    if (pt->amx_bf16) { /* t0 is a multiple of the tile, so of a group */
        float *y = pt->y + t0 * pt->n_out + o0;
        cpu_amx_bf16_rows(j->n_in, (const char *)pt->w->data + (size_t)o0 * pt->w_row, pt->w_row,
                          o1 - o0, j->bf16_act + (t0 / CPU_AMX_BF16_TOKENS) * j->bf16_tile_bytes,
                          t1 - t0, y, pt->n_out, cpu_threadpool_scratch(j->pool, thread));
        if (pt->bias)
            for (int64_t t = t0; t < t1; t++)
                for (int64_t o = o0; o < o1; o++) pt->y[t * pt->n_out + o] += pt->bias[o];
        return;
    }
    if (pt->tile) {
        float_tiles(j, pt, o0, o1, t0, t1);
        return;
    }
    const char *wdata = pt->w->data;
    int fp8 = pt->w->dtype == MODEL_DTYPE_FP8_E4M3;
    if (pt->dot2x4 && t1 - t0 >= 4) { /* prefill: 2 rows x 4 tokens, then what is left */
        int64_t o = o0;
        for (; o + 2 <= o1; o += 2) {
            const char *wrow = wdata + (size_t)o * pt->w_row;
            float b0 = pt->bias ? pt->bias[o] : 0.0f, b1 = pt->bias ? pt->bias[o + 1] : 0.0f;
            int64_t t = t0;
            for (; t + 4 <= t1; t += 4) {
                float s8[8];
                pt->dot2x4(j->n_in, s8, wrow, pt->w_row, j->act + (size_t)t * j->act_row,
                           j->act_row);
                for (int r = 0; r < 4; r++) {
                    pt->y[(t + r) * pt->n_out + o] = s8[r] + b0;
                    pt->y[(t + r) * pt->n_out + o + 1] = s8[4 + r] + b1;
                }
            }
            for (; t < t1; t++) {
                const char *arow = j->act + (size_t)t * j->act_row;
                float v0, v1;
                pt->dot(j->n_in, &v0, wrow, arow);
                pt->dot(j->n_in, &v1, wrow + pt->w_row, arow);
                pt->y[t * pt->n_out + o] = v0 + b0;
                pt->y[t * pt->n_out + o + 1] = v1 + b1;
            }
        }
        o0 = o;
    }
    /* Four tokens at a time over all the tile's rows, so the four activation
     * rows stay in L1 while the weight rows stream past (row by row, every
     * weight row re-read the whole token tile from L2); the order of the calls
     * does not change any sum. */
    const int64_t t4 = t0 + (t1 - t0) / 4 * 4;
    if (pt->dot_mxfp4) { /* four at a time, then one at a time (mxfp4_rows) */
        for (int64_t t = t0; t < t4; t += 4)
            for (int64_t o = o0; o < o1; o++) mxfp4_rows(j, pt, o, t, t + 4);
        for (int64_t o = o0; o < o1; o++) mxfp4_rows(j, pt, o, t4, t1);
        return;
    }
    int64_t rest = t0;
    if (pt->dot4 && !fp8) {
        for (int64_t t = t0; t < t4; t += 4)
            for (int64_t o = o0; o < o1; o++) {
                float s4[4], b = pt->bias ? pt->bias[o] : 0.0f;
                pt->dot4(j->n_in, s4, wdata + (size_t)o * pt->w_row,
                         j->act + (size_t)t * j->act_row, j->act_row);
                for (int r = 0; r < 4; r++) pt->y[(t + r) * pt->n_out + o] = s4[r] + b;
            }
        rest = t4;
        /* Two or three tokens left (an expert's share of a prefill): one
         * more four-row product over the tile's last four, its earlier
         * rows computed twice. A row's sum does not depend on its
         * neighbours (dot4 is bit-identical to dot), so neither do the
         * results. */
        if (t1 - t4 >= 2 && t1 - t0 >= 4) {
            const int64_t from = t1 - 4;
            for (int64_t o = o0; o < o1; o++) {
                float s4[4], b = pt->bias ? pt->bias[o] : 0.0f;
                pt->dot4(j->n_in, s4, wdata + (size_t)o * pt->w_row,
                         j->act + (size_t)from * j->act_row, j->act_row);
                for (int64_t t = t4; t < t1; t++) pt->y[t * pt->n_out + o] = s4[t - from] + b;
            }
            rest = t1;
        }
    }
    for (int64_t o = o0; o < o1; o++) {
        const char *wrow = wdata + (size_t)o * pt->w_row;
        float b = pt->bias ? pt->bias[o] : 0.0f;
        for (int64_t t = rest; t < t1; t++) {
            const char *arow = j->act + (size_t)t * j->act_row;
            float v;
            if (fp8)
                v = dot_scaled_row(j, pt, o, wrow, arow);
            else
                pt->dot(j->n_in, &v, wrow, arow);
            pt->y[t * pt->n_out + o] = v + b;
        }
    }
}

void cpu_matmul_multi(cpu_threadpool *pool, int n, const model_tensor *const *w,
                      const void *const *packed, const float *const *bias, const float *x,
                      int64_t n_tokens, float *const *y, void *scratch, int use_ref)
{
    matmul_job j = {
        .n_parts = n,
        .x = x,
        .n_tokens = n_tokens,
        .n_in = w[0]->ne[0],
        .act = scratch,
        .scratch = scratch,
        .act_type = cpu_vec_dot_type(w[0]->dtype),
        .pool = pool,
    };
    j.act_row = cpu_row_bytes(j.act_type, j.n_in);
    size_t amx = use_ref ? 0 : amx_bytes(j.act_type, j.n_in, n_tokens, 0);
    /* the AMX kernels' widened weights: the pool's per-thread scratch (no
     * pool, or no memory for it: the packed kernels, the same sums) */
    if (amx && cpu_threadpool_reserve(pool, CPU_AMX_WIDE_BYTES) != DI_OK) amx = 0;
    /* BF16 weights on AMX-BF16, at decode too (one arithmetic for every
     * batch); its activation tiles after the rest of the scratch */
    int amx_bf16 = 0;
    for (int p = 0; p < n; p++) amx_bf16 |= w[p]->dtype == MODEL_DTYPE_BF16;
    if (amx_bf16 && (use_ref || !cpu_has_amx_bf16() ||
                     cpu_threadpool_reserve(pool, CPU_AMX_BF16_WS_BYTES) != DI_OK))
        amx_bf16 = 0;
    if (amx_bf16) {
        size_t at = act_bytes(j.act_type, j.n_in, n_tokens);
        j.bf16_act = (char *)scratch + (at + 63) / 64 * 64;
        j.bf16_tile_bytes = (int64_t)cpu_amx_bf16_act_bytes(j.n_in, CPU_AMX_BF16_TOKENS);
    }
    /* AMX tasks take more tokens: each widens its rows' weights once */
    j.tokens_per_tile = amx        ? AMX_TOKENS_PER_TILE
                        : amx_bf16 ? 4 * CPU_AMX_BF16_TOKENS /* four groups a weight block */
                                   : TOKENS_PER_TILE;
    j.n_tok_tiles = (n_tokens + j.tokens_per_tile - 1) / j.tokens_per_tile;
    int64_t n_tasks = 0;
    for (int p = 0; p < n; p++) {
        matmul_part *pt = &j.parts[p];
        pt->w = w[p];
        pt->bias = bias ? bias[p] : NULL;
        pt->y = y[p];
        pt->n_out = w[p]->ne[1];
        pt->w_row = cpu_row_bytes((int)w[p]->dtype, j.n_in);
        pt->dot = use_ref ? cpu_vec_dot_ref(w[p]->dtype) : cpu_vec_dot(w[p]->dtype);
        pt->dot4 = use_ref ? NULL : cpu_vec_dot4(w[p]->dtype);
        pt->dot2x4 = use_ref ? NULL : cpu_vec_dot2x4_vnni(w[p]->dtype);
        pt->tile = use_ref ? NULL : cpu_vec_dot_tile_avx512(w[p]->dtype);
        pt->amx_bf16 = amx_bf16 && w[p]->dtype == MODEL_DTYPE_BF16;
        pt->dot_mxfp4 = w[p]->dtype != MODEL_DTYPE_MXFP4 ? NULL
                        : use_ref                        ? cpu_vec_dot_mxfp4_ref()
                                                         : cpu_vec_dot_mxfp4();
        pt->packed = packed && !use_ref ? packed[p] : NULL;
        if (pt->packed) {
            pt->packed_fn = cpu_packed_kernel(w[p]->dtype);
            pt->packed16_fn = cpu_packed16_kernel(w[p]->dtype);
            pt->amx_fn = amx ? cpu_amx_kernel(w[p]->dtype) : NULL;
            pt->group_bytes = cpu_pack_group_bytes(w[p]->dtype, j.n_in);
            if (j.act_type == MODEL_DTYPE_Q8_0 || j.act_type == CPU_DTYPE_Q8_1) {
                j.info = (char *)scratch + act_bytes(j.act_type, j.n_in, n_tokens);
                j.info_row = cpu_pack_info_bytes(j.n_in, 1);
            }
            if (pt->amx_fn && !j.amx_tiles) {
                size_t at = act_bytes(j.act_type, j.n_in, n_tokens) +
                            (j.info ? cpu_pack_info_bytes(j.n_in, n_tokens) : 0);
                j.amx_tiles = (char *)scratch + (at + 63) / 64 * 64;
                j.n_amx = n_tokens / CPU_AMX_TOKENS * CPU_AMX_TOKENS;
            }
        }
        /* AMX-BF16 prefill: four panels a task, so each token group's
         * activation tiles (three bf16 parts of every element) are read from
         * memory once for 64 rows and from L2 for the other 48 */
        pt->rows_per_tile = pt->amx_bf16 ? 4 * ROWS_PER_TILE : ROWS_PER_TILE;
        /* decode: about four tasks a thread; one for AMX-BF16, whose tasks
         * start cold (their first panels' 32 row streams unprefetched): two
         * threads' decode read 0.86-0.89 of the bandwidth with four, 0.92-1.08
         * with one (bench/matmul_bench) */
        if ((n_tokens < 4 || (pt->amx_bf16 && n_tokens <= CPU_AMX_BF16_TOKENS)) && !use_ref) {
            int64_t want =
                (int64_t)cpu_threadpool_size(pool) * (pt->amx_bf16 ? 1 : TASKS_PER_THREAD);
            int64_t rows = (pt->n_out + want - 1) / want;
            rows = (rows + ROWS_PER_TILE - 1) / ROWS_PER_TILE * ROWS_PER_TILE;
            if (rows > pt->rows_per_tile) pt->rows_per_tile = rows;
        }
        pt->n_row_tiles = (pt->n_out + pt->rows_per_tile - 1) / pt->rows_per_tile;
        pt->first_task = n_tasks;
        n_tasks += pt->n_row_tiles * j.n_tok_tiles;
    }
    if (j.bf16_act) { /* the tokens' columns, zeros after the last */
        int64_t padded =
            (n_tokens + CPU_AMX_BF16_TOKENS - 1) / CPU_AMX_BF16_TOKENS * CPU_AMX_BF16_TOKENS;
        if (padded > n_tokens) /* the last group's columns, zero before its tokens go in */
            memset(j.bf16_act + (n_tokens / CPU_AMX_BF16_TOKENS) * j.bf16_tile_bytes, 0,
                   (size_t)j.bf16_tile_bytes);
        if (n_tokens < CPU_AMX_BF16_TOKENS)
            for (int64_t t = 0; t < n_tokens; t++) bf16_pack_task(&j, t, 0);
        else
            cpu_threadpool_run(pool, n_tokens, bf16_pack_task, &j);
    }
    if (j.act_type == MODEL_DTYPE_F32) {
        j.act = (const char *)x; /* used as it is */
    } else if (use_ref) {
        for (int64_t t = 0; t < n_tokens; t++)
            cpu_quantize_row_ref(j.act_type, x + t * j.n_in,
                                 (char *)scratch + (size_t)t * j.act_row, j.n_in);
    } else {
        cpu_threadpool_run(pool, n_tokens, quantize_task, &j);
    }
    if (use_ref) {
        for (int64_t t = 0; t < n_tasks; t++) matmul_task(&j, t, 0);
    } else {
        cpu_threadpool_run(pool, n_tasks, matmul_task, &j);
    }
}

void cpu_matmul(cpu_threadpool *pool, const model_tensor *w, const float *bias, const float *x,
                int64_t n_tokens, float *y, void *scratch, int use_ref)
{
    cpu_matmul_multi(pool, 1, &w, NULL, &bias, x, n_tokens, &y, scratch, use_ref);
}

int cpu_matmul_can_share(const model_tensor *a, const model_tensor *b)
{
    return a->ne[0] == b->ne[0] && cpu_vec_dot_type(a->dtype) == cpu_vec_dot_type(b->dtype);
}
