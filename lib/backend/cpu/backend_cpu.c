/* The CPU backend: backend.h's table over the kernels of backend/cpu/ (a
 * thread pool, AVX2/AVX512-VNNI dot products on the stored blocks with scalar
 * references, the paged KV cache, GQA and MLA attention, DeepSeekMoE).
 *
 * Weights stay where the loader put them (the file's memory map): a
 * backend_matrix only names the model_tensor. Scratch (the quantized
 * activations of the matrix products, attention scores, the latent rows of
 * one layer, the gathered rows of an expert) is sized while the model loads,
 * from the weights and caches it creates and the options' max_rows and
 * max_ctx, so no operation allocates. The kernels' per-task tiles (K/V
 * staging, K^T, softmax states) live in the thread pool's per-thread scratch,
 * reserved here for every shape they take, not on the stack: the caller's
 * thread, a host's with perhaps 64 KiB, runs tasks too. */
#include "backend/cpu/backend_cpu.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/attention_mla.h"
#include "backend/cpu/deepseek_v4_ops.h"
#include "backend/cpu/huge_pages.h"
#include "backend/cpu/kv_cache.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_amx.h"
#include "backend/cpu/matmul_packed.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/threadpool.h"
#include "util/error.h"

struct backend_matrix {
    const model_tensor *t;
    /* MLA's kv_b from llama.cpp's split form (be_mla_kv_b_join): k_b and v_b
     * as stored, for the absorbed products; NULL otherwise. */
    const model_tensor *k_b, *v_b;
    /* t's rows interleaved for the packed kernels (matmul_packed.h), owned by
     * the backend; NULL where t is used as stored. */
    const void *packed;
};

struct backend_rope {
    cpu_rope r;
};

struct backend_kv {
    cpu_kv_cache c;
    int mla, naive;
    cpu_mla_shape shape;
};

struct backend_moe {
    int32_t n_expert;
    cpu_expert_matrix *gate, *up, *down; /* [n_expert] each, with their packed copies */
    float swiglu_limit;                  /* > 0: the clipped SwiGLU (DeepSeek-V4) */
};

/* A growable f32 or byte buffer, grown only while loading. */
typedef struct grow_buf {
    void *p;
    size_t bytes;
} grow_buf;

typedef struct cpu_backend {
    backend base;
    backend_options opt;
    cpu_threadpool *pool;
    void **owned; /* everything handed out, freed with the backend */
    size_t n_owned, cap_owned;
    cpu_arena packed; /* the matrices' packed copies, on huge pages (huge_pages.h) */
    backend_kv **caches;
    size_t n_caches, cap_caches;
    grow_buf act;      /* quantized activations of cpu_matmul */
    grow_buf scores;   /* GQA attention: f32 [n_threads, max_ctx] */
    grow_buf kv_f32;   /* MLA: one layer's latent rows as f32 [max_ctx, R + rope] */
    grow_buf mla;      /* MLA: f32 [cpu_mla_scratch_floats] */
    grow_buf kv_full;  /* naive MLA: f32 [max_ctx, H (nope + v)] */
    grow_buf lat_rows; /* naive MLA: f32 [max_ctx, R] */
    grow_buf xe, ye;   /* MoE: f32 [max_rows, n_embd] */
    grow_buf gate, up; /* MoE: f32 [max_rows, n_ff] */
    cpu_route_scratch *rs;
    float *index_scores; /* the lightning indexer: f32 [n_threads, INDEX_STRIDE(max_ctx)] */
} cpu_backend;

static cpu_backend *cpu(backend *be)
{
    return (cpu_backend *)be;
}

static int grow(grow_buf *b, size_t bytes)
{
    if (bytes <= b->bytes) return 1;
    void *p = realloc(b->p, bytes);
    if (!p) return 0;
    b->p = p;
    b->bytes = bytes;
    return 1;
}

static void *own(cpu_backend *c, void *p)
{
    if (!p) return NULL;
    if (c->n_owned == c->cap_owned) {
        size_t cap = c->cap_owned ? 2 * c->cap_owned : 64;
        void **n = realloc(c->owned, cap * sizeof *n);
        if (!n) {
            free(p);
            return NULL;
        }
        c->owned = n;
        c->cap_owned = cap;
    }
    c->owned[c->n_owned++] = p;
    return p;
}

static void be_free(backend *be)
{
    cpu_backend *c = cpu(be);
    for (size_t i = 0; i < c->n_caches; i++) cpu_kv_cache_free(&c->caches[i]->c);
    for (size_t i = 0; i < c->n_owned; i++) free(c->owned[i]);
    free(c->owned);
    cpu_arena_free(&c->packed);
    free(c->caches);
    grow_buf *bufs[] = {&c->act,      &c->scores, &c->kv_f32, &c->mla,  &c->kv_full,
                        &c->lat_rows, &c->xe,     &c->ye,     &c->gate, &c->up};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]->p);
    free(c->rs);
    free(c->index_scores);
    cpu_threadpool_free(c->pool);
    free(c);
}

static float *be_alloc(backend *be, int64_t n)
{
    return own(cpu(be), malloc((size_t)(n > 0 ? n : 1) * sizeof(float)));
}

static float *be_realloc(backend *be, float *p, int64_t n)
{
    cpu_backend *c = cpu(be);
    if (!p) return be_alloc(be, n);
    for (size_t i = c->n_owned; i-- > 0;)
        if (c->owned[i] == p) {
            float *q = realloc(p, (size_t)(n > 0 ? n : 1) * sizeof *q);
            if (q) c->owned[i] = q;
            return q;
        }
    return NULL;
}

static di_status be_vector(backend *be, const model_tensor *t, const float **out, di_error **err)
{
    /* f32, f16, bf16, or a ggml block type whole blocks of it (a quantizer may
     * turn a 2-D bias table such as DeepSeek-V4's compressor position bias
     * into Q8_0); scaled formats (fp8, MXFP4) need their scales */
    int block = cpu_dtype_block_elems((int)t->dtype);
    if (block == 0 || t->dtype == MODEL_DTYPE_FP8_E4M3 || t->dtype == MODEL_DTYPE_MXFP4 ||
        t->ne[0] % block != 0)
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: a norm or bias must be f32, f16, bf16 or whole blocks of a "
                             "ggml quantized type",
                             t->name);
    float *v = be_alloc(be, t->ne[0]);
    if (!v) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", t->name);
    cpu_dequantize_row((int)t->dtype, t->data, v, t->ne[0]);
    *out = v;
    return DI_OK;
}

static di_status wrap(cpu_backend *c, const model_tensor *t, const backend_matrix **out,
                      di_error **err)
{
    struct backend_matrix *m = own(c, calloc(1, sizeof *m));
    if (!m) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", t->name);
    m->t = t;
    *out = m;
    return DI_OK;
}

static di_status be_matrix(backend *be, const model_tensor *t, const backend_matrix **out,
                           di_error **err)
{
    cpu_backend *c = cpu(be);
    if (!cpu_matmul_supported(t->dtype, t->ne[0]) ||
        ((t->dtype == MODEL_DTYPE_FP8_E4M3 || t->dtype == MODEL_DTYPE_MXFP4) && !t->scale))
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: the CPU backend has no matrix product for its dtype (%d) with "
                             "rows of %lld elements",
                             t->name, (int)t->dtype, (long long)t->ne[0]);
    if (!grow(&c->act, cpu_matmul_scratch_bytes(t->dtype, t->ne[0], c->opt.max_rows)))
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the activations of %s",
                             t->name);
    di_status st = wrap(c, t, out, err);
    if (st != DI_OK || c->opt.use_ref || !cpu_pack_supported(t)) return st;
    void *packed = cpu_arena_alloc(&c->packed, cpu_pack_bytes(t));
    if (!packed)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory repacking %s", t->name);
    cpu_pack(t, packed);
    ((struct backend_matrix *)*out)->packed = packed;
    return DI_OK;
}

/* DI_OK when cpu_dequantize_row reads t's rows (its dtype has a block layout
 * and the rows are whole blocks; fp8 needs its block scales, which it lacks). */
static di_status dequantizable(const model_tensor *t, di_error **err)
{
    int block = cpu_dtype_block_elems((int)t->dtype);
    if (block == 0 || t->dtype == MODEL_DTYPE_FP8_E4M3 || t->dtype == MODEL_DTYPE_MXFP4 ||
        t->ne[0] % block != 0)
        return di_error_setf(err, DI_ERR_UNSUPPORTED, "%s: unsupported dtype %d", t->name,
                             (int)t->dtype);
    return DI_OK;
}

static di_status be_embedding(backend *be, const model_tensor *t, const backend_matrix **out,
                              di_error **err)
{
    di_status st = dequantizable(t, err);
    return st != DI_OK ? st : wrap(cpu(be), t, out, err);
}

static di_status be_matrix_f32(backend *be, const backend_matrix *w, const float **out,
                               di_error **err)
{
    const model_tensor *t = w->t;
    int64_t n_in = t->ne[0], n_out = t->ne[1];
    float *y = be_alloc(be, n_in * n_out);
    if (!y) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", t->name);
    size_t row = cpu_row_bytes((int)t->dtype, n_in);
    for (int64_t o = 0; o < n_out; o++) {
        float *yr = y + o * n_in;
        const char *src = (const char *)t->data + (size_t)o * row;
        if (t->dtype == MODEL_DTYPE_FP8_E4M3) {
            /* DeepSeek's fp8 checkpoints: weight ~ fp8 * scale_inv per 128x128 block */
            const float *sc = (const float *)t->scale->data + (o / 128) * t->scale->ne[0];
            for (int64_t i = 0; i < n_in; i++)
                yr[i] = cpu_fp8_e4m3_to_f32((uint8_t)src[i]) * sc[i / 128];
        } else if (t->dtype == MODEL_DTYPE_MXFP4) { /* each 32 of a row times its scale */
            const float *sc = (const float *)t->scale->data + o * t->scale->ne[0];
            cpu_dequantize_row((int)t->dtype, src, yr, n_in);
            for (int64_t i = 0; i < n_in; i++) yr[i] *= sc[i / 32];
        } else {
            cpu_dequantize_row((int)t->dtype, src, yr, n_in);
        }
    }
    *out = y;
    return DI_OK;
}

static di_status be_mla_kv_b_join(backend *be, const model_tensor *k_b, const model_tensor *v_b,
                                  const float **kv_b, const backend_matrix **kv_b_w, di_error **err)
{
    const int64_t nope = k_b->ne[0], R = k_b->ne[1], H = k_b->ne[2], vd = v_b->ne[1];
    di_status st;
    if ((st = dequantizable(k_b, err)) != DI_OK || (st = dequantizable(v_b, err)) != DI_OK)
        return st;
    float *w = be_alloc(be, H * (nope + vd) * R), *row = be_alloc(be, nope > R ? nope : R);
    model_tensor *t = own(cpu(be), calloc(1, sizeof *t));
    if (!w || !row || !t)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory joining %s", k_b->name);
    const size_t kb_row = cpu_row_bytes((int)k_b->dtype, nope),
                 vb_row = cpu_row_bytes((int)v_b->dtype, R);
    for (int64_t h = 0; h < H; h++) {
        float *rows = w + h * (nope + vd) * R;
        for (int64_t r = 0; r < R; r++) { /* k_b[h] is [R, nope]: its transpose */
            cpu_dequantize_row((int)k_b->dtype,
                               (const char *)k_b->data + (size_t)(h * R + r) * kb_row, row, nope);
            for (int64_t i = 0; i < nope; i++) rows[i * R + r] = row[i];
        }
        for (int64_t j = 0; j < vd; j++)
            cpu_dequantize_row((int)v_b->dtype,
                               (const char *)v_b->data + (size_t)(h * vd + j) * vb_row,
                               rows + (nope + j) * R, R);
    }
    *t = (model_tensor){.name = v_b->name,
                        .dtype = MODEL_DTYPE_F32,
                        .n_dims = 2,
                        .ne = {R, H * (nope + vd), 1, 1},
                        .data = w,
                        .n_bytes = (size_t)(R * H * (nope + vd)) * sizeof(float)};
    *kv_b = w;
    if ((st = be_matrix(be, t, kv_b_w, err)) != DI_OK) return st;
    /* The absorbed attention multiplies k_b and v_b as stored (llama.cpp's
     * way: int8 products, and a fraction of the f32 join's bytes per step)
     * when the CPU has products for their types and rows. */
    if (cpu_matmul_supported(k_b->dtype, nope) && cpu_matmul_supported(v_b->dtype, R) &&
        k_b->dtype != MODEL_DTYPE_FP8_E4M3 && v_b->dtype != MODEL_DTYPE_FP8_E4M3) {
        struct backend_matrix *m = (struct backend_matrix *)*kv_b_w;
        m->k_b = k_b;
        m->v_b = v_b;
    }
    return DI_OK;
}

static di_status be_rope_create(backend *be, const backend_rope_params *p, const backend_rope **out,
                                di_error **err)
{
    struct backend_rope *r = own(cpu(be), malloc(sizeof *r));
    if (!r) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the RoPE table");
    di_status st = cpu_rope_init(&r->r, p);
    if (st != DI_OK)
        return di_error_setf(err, st, "a head dimension of %u is not supported by RoPE",
                             p->head_dim);
    *out = r;
    return DI_OK;
}

static di_status be_moe_create(backend *be, int32_t n_expert, const backend_matrix *const *gate,
                               const backend_matrix *const *up, const backend_matrix *const *down,
                               float swiglu_limit, const backend_moe **out, di_error **err)
{
    cpu_backend *c = cpu(be);
    struct backend_moe *m = own(c, calloc(1, sizeof *m));
    const size_t n_t = 3 * (size_t)(n_expert > 0 ? n_expert : 1);
    cpu_expert_matrix *t = own(c, calloc(n_t, sizeof *t));
    if (!m || !t || n_expert <= 0)
        return di_error_setf(err, n_expert <= 0 ? DI_ERR_INVALID_ARGUMENT : DI_ERR_OUT_OF_MEMORY,
                             "cannot hold %d experts", (int)n_expert);
    m->n_expert = n_expert;
    m->swiglu_limit = swiglu_limit;
    m->gate = t;
    m->up = t + n_expert;
    m->down = t + 2 * (ptrdiff_t)n_expert;
    for (int32_t e = 0; e < n_expert; e++) {
        m->gate[e] = (cpu_expert_matrix){gate[e]->t, gate[e]->packed};
        m->up[e] = (cpu_expert_matrix){up[e]->t, up[e]->packed};
        m->down[e] = (cpu_expert_matrix){down[e]->t, down[e]->packed};
    }
    const size_t rows = (size_t)c->opt.max_rows, E = (size_t)gate[0]->t->ne[0],
                 F = (size_t)gate[0]->t->ne[1];
    if (!grow(&c->xe, rows * E * sizeof(float)) || !grow(&c->ye, rows * E * sizeof(float)) ||
        !grow(&c->gate, rows * F * sizeof(float)) || !grow(&c->up, rows * F * sizeof(float)) ||
        (!c->rs && !(c->rs = calloc(1, sizeof *c->rs))))
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the experts' buffers");
    *out = m;
    return DI_OK;
}

static void be_embed(backend *be, const backend_matrix *table, const int32_t *tokens, int64_t n,
                     float *x, int64_t x_stride)
{
    (void)be;
    const model_tensor *t = table->t;
    const int64_t E = t->ne[0];
    size_t erow = cpu_row_bytes((int)t->dtype, E);
    for (int64_t i = 0; i < n; i++)
        cpu_dequantize_row((int)t->dtype, (const char *)t->data + (size_t)tokens[i] * erow,
                           x + i * x_stride, E);
}

/* The element-wise steps of a prefill (RMSNorm rows, SiLU-gated products,
 * residual adds) over the pool in chunks of about ELEMWISE_CHUNK elements:
 * with the products on AMX they were a third of a 2-thread prefill, run on
 * one thread. Each element's arithmetic is the same whatever the chunk, so
 * results do not change. Small steps (decode) stay on the calling thread. */
enum { ELEMWISE_CHUNK = 16384 };

typedef struct elemwise_job {
    int op; /* 0 RMSNorm rows, 1 SiLU x up, 2 add */
    float *y;
    const float *x, *w;
    int64_t x_stride, y_stride, n, per_task, total;
    float eps;
} elemwise_job;

static void elemwise_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    const elemwise_job *j = ctx;
    int64_t a = task * j->per_task, b = a + j->per_task < j->total ? a + j->per_task : j->total;
    if (j->op == 0) {
        for (int64_t t = a; t < b; t++)
            cpu_rmsnorm(j->x + t * j->x_stride, j->w, j->y + t * j->y_stride, 1, j->n, j->eps);
    } else if (j->op == 1) {
        cpu_silu_mul(j->y + a, j->x + a, b - a);
    } else {
        for (int64_t i = a; i < b; i++) j->y[i] += j->x[i];
    }
}

/* Run j over total items of `item` elements each: on the pool when there are
 * several chunks. */
static void elemwise_run(cpu_backend *c, elemwise_job *j, int64_t total, int64_t item)
{
    j->total = total;
    j->per_task = ELEMWISE_CHUNK / item > 0 ? ELEMWISE_CHUNK / item : 1;
    int64_t n_tasks = (total + j->per_task - 1) / j->per_task;
    if (n_tasks > 1 && cpu_threadpool_size(c->pool) > 1) {
        cpu_threadpool_run(c->pool, n_tasks, elemwise_task, j);
        return;
    }
    j->per_task = total;
    elemwise_task(j, 0, 0);
}

static void be_rmsnorm(backend *be, const float *x, int64_t x_stride, const float *w, float *y,
                       int64_t y_stride, int64_t n_rows, int64_t n, float eps)
{
    elemwise_job j = {.op = 0,
                      .y = y,
                      .x = x,
                      .w = w,
                      .x_stride = x_stride,
                      .y_stride = y_stride,
                      .n = n,
                      .eps = eps};
    elemwise_run(cpu(be), &j, n_rows, n);
}

static void be_matmul(backend *be, int n_parts, const backend_matrix *const *w,
                      const float *const *bias, const float *x, int64_t n_rows, float *const *y)
{
    cpu_backend *c = cpu(be);
    const model_tensor *t[CPU_MATMUL_MAX_PARTS];
    const void *packed[CPU_MATMUL_MAX_PARTS];
    int share = n_parts > 1;
    for (int p = 0; p < n_parts; p++) {
        t[p] = w[p]->t;
        packed[p] = w[p]->packed;
        if (p > 0 && !cpu_matmul_can_share(t[0], t[p])) share = 0;
    }
    if (share) {
        cpu_matmul_multi(c->pool, n_parts, t, packed, bias, x, n_rows, y, c->act.p, c->opt.use_ref);
        return;
    }
    for (int p = 0; p < n_parts; p++)
        cpu_matmul_multi(c->pool, 1, &t[p], &packed[p], bias ? &bias[p] : NULL, x, n_rows, &y[p],
                         c->act.p, c->opt.use_ref);
}

static void be_add(backend *be, float *x, const float *y, int64_t n)
{
    elemwise_job j = {.op = 2, .y = x, .x = y};
    elemwise_run(cpu(be), &j, n, 1);
}

static void be_silu_mul(backend *be, float *gate, const float *up, int64_t n)
{
    elemwise_job j = {.op = 1, .y = gate, .x = up};
    elemwise_run(cpu(be), &j, n, 1);
}

static void be_rope(backend *be, const backend_rope *r, float *x, int64_t n_rows,
                    int64_t row_stride, int n_heads, int64_t head_stride, const int64_t *pos)
{
    (void)be;
    for (int64_t t = 0; t < n_rows; t++) {
        float *row = x + t * row_stride;
        if (head_stride == r->r.head_dim) {
            cpu_rope_apply(&r->r, row, n_heads, pos[t]);
        } else {
            for (int h = 0; h < n_heads; h++)
                cpu_rope_apply(&r->r, row + h * head_stride, 1, pos[t]);
        }
    }
}

static di_status be_kv_create(backend *be, model_dtype dtype, int n_layer, int n_head_kv,
                              int head_dim, int block_size, int32_t n_blocks,
                              const backend_mla_shape *mla, int mla_naive, backend_kv **out,
                              di_error **err)
{
    cpu_backend *c = cpu(be);
    if (c->n_caches == c->cap_caches) {
        size_t cap = c->cap_caches ? 2 * c->cap_caches : 4;
        backend_kv **n = realloc(c->caches, cap * sizeof(backend_kv *));
        if (!n) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for a KV cache");
        c->caches = n;
        c->cap_caches = cap;
    }
    backend_kv *kv = own(c, calloc(1, sizeof *kv));
    if (!kv) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for a KV cache");
    const size_t threads = (size_t)c->opt.n_threads, ctx = (size_t)c->opt.max_ctx;
    di_status st;
    int ok = 1;
    if (mla) {
        const int D = mla->kv_lora_rank + mla->rope;
        st = cpu_kv_cache_init_latent(&kv->c, dtype, n_layer, D, block_size, n_blocks);
        kv->mla = 1;
        kv->naive = mla_naive;
        kv->shape = (cpu_mla_shape){mla->n_head, mla->nope, mla->rope, mla->v, mla->kv_lora_rank};
        if (st == DI_OK) {
            ok = grow(&c->kv_f32, ctx * (size_t)D * sizeof(float)) &&
                 grow(&c->mla,
                      (size_t)cpu_mla_scratch_floats(&kv->shape, (int64_t)ctx, (int)threads) *
                          sizeof(float));
            if (ok && mla_naive) {
                const size_t full = (size_t)mla->n_head * (size_t)(mla->nope + mla->v),
                             R = (size_t)mla->kv_lora_rank;
                ok = grow(&c->kv_full, ctx * full * sizeof(float)) &&
                     grow(&c->lat_rows, ctx * R * sizeof(float));
                /* the naive form multiplies every cached latent by kv_b, whatever its dtype */
                for (int dt = MODEL_DTYPE_F32; ok && dt <= MODEL_DTYPE_FP8_E4M3; dt++)
                    if (cpu_matmul_supported((model_dtype)dt, (int64_t)R))
                        ok = grow(&c->act, cpu_matmul_scratch_bytes((model_dtype)dt, (int64_t)R,
                                                                    (int64_t)ctx));
            }
        }
    } else {
        if (head_dim > CPU_ATTENTION_MAX_HEAD_DIM)
            return di_error_setf(err, DI_ERR_UNSUPPORTED,
                                 "a head dimension of %d is over the CPU backend's %d", head_dim,
                                 (int)CPU_ATTENTION_MAX_HEAD_DIM);
        st = cpu_kv_cache_init(&kv->c, dtype, n_layer, n_head_kv, head_dim, block_size, n_blocks);
        if (st == DI_OK) ok = grow(&c->scores, threads * ctx * sizeof(float));
    }
    if (st != DI_OK || !ok) {
        if (st == DI_OK) cpu_kv_cache_free(&kv->c);
        return di_error_setf(err, st != DI_OK ? st : DI_ERR_OUT_OF_MEMORY,
                             "cannot allocate a KV cache of %d blocks of %d tokens", (int)n_blocks,
                             block_size);
    }
    c->caches[c->n_caches++] = kv;
    *out = kv;
    return DI_OK;
}

static size_t be_kv_bytes_per_token(const backend_kv *kv)
{
    return cpu_kv_cache_bytes_per_token(&kv->c);
}
static int32_t be_kv_blocks_total(const backend_kv *kv)
{
    return kv->c.n_blocks;
}
static size_t be_kv_block_bytes(const backend_kv *kv)
{
    return cpu_kv_block_bytes(&kv->c);
}
static void be_kv_block_read(backend *be, const backend_kv *kv, int32_t block, void *dst)
{
    (void)be;
    cpu_kv_block_read(&kv->c, block, dst);
}
static void be_kv_block_write(backend *be, backend_kv *kv, int32_t block, const void *src)
{
    (void)be;
    cpu_kv_block_write(&kv->c, block, src);
}
static void be_kv_store(backend *be, backend_kv *kv, const backend_kv_seq *s, int l, int64_t pos0,
                        int64_t n, const float *k, const float *v)
{
    (void)be;
    cpu_kv_store(&kv->c, s, l, pos0, n, k, v);
}

static void be_attention(backend *be, const backend_kv *kv, const backend_kv_seq *s, int l,
                         const float *q, int n_head, int64_t pos0, int64_t n, float scale,
                         float *out)
{
    cpu_backend *c = cpu(be);
    cpu_attention(c->pool, &kv->c, s, l, q, n_head, pos0, n, scale, out, c->scores.p,
                  c->opt.max_ctx, c->opt.use_ref);
}

static void be_mla_attention(backend *be, const backend_kv *kv, const backend_kv_seq *s, int l,
                             const float *q, int64_t pos0, int64_t n, const float *kv_b,
                             const backend_matrix *kv_b_w, float scale, float *out)
{
    cpu_backend *c = cpu(be);
    const int64_t R = kv->shape.kv_lora_rank, D = R + kv->shape.rope, n_kv = pos0 + n;
    float *kv_f32 = c->kv_f32.p;
    /* The layer's cache as f32 rows (read once per layer, shared by all heads). */
    for (int64_t j = 0; j < n_kv; j++) {
        cpu_dequantize_row((int)kv->c.dtype, cpu_kv_k(&kv->c, s, l, j), kv_f32 + j * D, D);
        if (kv->c.rotated) cpu_kv_rotate(kv_f32 + j * D, D); /* stored rotated (kv_cache.h) */
    }
    if (!kv->naive && kv_b_w->k_b) {
        cpu_mla_attention_split(c->pool, &kv->shape, q, n, pos0, kv_f32, kv_b_w->k_b, kv_b_w->v_b,
                                scale, out, c->mla.p, c->opt.max_ctx, c->opt.use_ref);
        return;
    }
    if (!kv->naive) {
        cpu_mla_attention(c->pool, &kv->shape, q, n, pos0, kv_f32, kv_b, scale, out, c->mla.p,
                          c->opt.max_ctx);
        return;
    }
    float *lat = c->lat_rows.p, *full = c->kv_full.p;
    for (int64_t j = 0; j < n_kv; j++) memcpy(lat + j * R, kv_f32 + j * D, (size_t)R * sizeof *lat);
    cpu_matmul(c->pool, kv_b_w->t, NULL, lat, n_kv, full, c->act.p, c->opt.use_ref);
    cpu_mla_attention_naive(c->pool, &kv->shape, q, n, pos0, kv_f32, full, scale, out, c->mla.p,
                            c->opt.max_ctx);
}

static void be_moe_route(backend *be, const backend_route_params *p, const float *bias,
                         const float *logits, int64_t n, int32_t *sel, float *weight)
{
    cpu_backend *c = cpu(be);
    const int64_t k = p->n_expert_used;
    for (int64_t t = 0; t < n; t++)
        cpu_moe_route(p, bias, logits + t * p->n_expert, sel + t * k, weight + t * k, c->rs);
}

static void be_moe_experts(backend *be, const backend_moe *moe, const float *x, int64_t n,
                           const int32_t *sel, const float *weight, int32_t k, float *out,
                           int accumulate)
{
    cpu_backend *c = cpu(be);
    cpu_moe_scratch s = {c->xe.p, c->ye.p, c->gate.p, c->up.p, c->act.p};
    cpu_moe_experts(c->pool, moe->n_expert, moe->gate, moe->up, moe->down, x, n, sel, weight, k,
                    out, accumulate, &s, c->opt.use_ref, moe->swiglu_limit);
}

static void be_copy_rows(backend *be, float *dst, int64_t dst_stride, const float *src,
                         int64_t src_stride, int64_t width, int64_t n)
{
    (void)be;
    for (int64_t t = 0; t < n; t++)
        memcpy(dst + t * dst_stride, src + t * src_stride, (size_t)width * sizeof *dst);
}

static void be_silu_mul_clamp(backend *be, float *gate, const float *up, int64_t n, float limit)
{
    (void)be;
    if (limit > 0.0f)
        cpu_silu_mul_clamp(gate, up, n, limit);
    else
        cpu_silu_mul(gate, up, n);
}

static void be_hc_pre(backend *be, const float *mix, const float *base, const float *scale, int hc,
                      int sinkhorn_iters, float eps, const float *x, int64_t n_embd, int64_t n,
                      float *collapsed, float *post, float *comb)
{
    (void)be;
    cpu_hc_pre(mix, base, scale, hc, sinkhorn_iters, eps, x, n_embd, n, collapsed, post, comb);
}

static void be_hc_pre_shifted(backend *be, const float *mix, const float *base, const float *scale,
                              int hc, int sinkhorn_iters, float eps, const float *x, int64_t n_embd,
                              int64_t n, const float *pre_in, float *collapsed, float *pre_out,
                              float *post, float *comb)
{
    (void)be;
    cpu_hc_pre_shifted(mix, base, scale, hc, sinkhorn_iters, eps, x, n_embd, n, pre_in, collapsed,
                       pre_out, post, comb);
}

static void be_hc_post(backend *be, const float *x, const float *y, const float *post,
                       const float *comb, int hc, int64_t n_embd, int64_t n, float *out)
{
    (void)be;
    cpu_hc_post(x, y, post, comb, hc, n_embd, n, out);
}

static void be_engram_gate(backend *be, float *x, const float *kv, const float *wh, const float *we,
                           int hc, int64_t n_embd, int64_t n, float eps)
{
    (void)be;
    cpu_engram_gate(x, kv, wh, we, hc, n_embd, n, eps);
}

static void be_hc_mean(backend *be, const float *x, int hc, int64_t n_embd, int64_t n, float *out,
                       int64_t out_stride)
{
    (void)be;
    cpu_hc_mean(x, hc, n_embd, n, out, out_stride);
}

static void be_compress_pool(backend *be, const float *kv, const float *gate, int64_t ring,
                             int64_t row_stride, const float *bias, int rate, int64_t width,
                             int overlap, int64_t e0, int64_t n, float *out, int64_t out_stride)
{
    (void)be;
    cpu_compress_pool(kv, gate, ring, row_stride, bias, rate, width, overlap, e0, n, out,
                      out_stride);
}

static void be_v4_rows_store(backend *be, model_dtype dtype, void *dst, const float *src,
                             int64_t src_stride, int64_t width, int64_t n)
{
    (void)be;
    cpu_v4_rows_store(dtype, dst, src, src_stride, width, n);
}

/* The indexer's scratch row: the scores of max_ctx entries and the
 * candidate blocks' (V4.1: blocks of at least 8 entries, config_dsv41.c). */
#define INDEX_STRIDE(max_ctx) ((max_ctx) + 2 + (max_ctx) / 8)

static void be_indexer_topk(backend *be, const float *q, const float *w, int n_head,
                            int64_t head_dim, int64_t n, const int64_t *pos, const void *keys,
                            model_dtype kv_dtype, int64_t n_keys, int rate, float scale,
                            float w_scale, int k, int32_t *sel,
                            const backend_index_candidates *cand)
{
    cpu_backend *c = cpu(be);
    if (n_keys > c->opt.max_ctx) n_keys = c->opt.max_ctx; /* entries never outnumber tokens */
    /* (its scratch was reserved with the backend: it cannot fail here) */
    (void)cpu_indexer_topk(c->pool, q, w, n_head, head_dim, n, pos, keys, kv_dtype, n_keys, rate,
                           scale, w_scale, k, sel, cand, c->index_scores,
                           INDEX_STRIDE(c->opt.max_ctx));
}

static void be_sink_attention(backend *be, const float *q, int n_head, int64_t head_dim, int64_t n,
                              const int64_t *pos, const int64_t *last, const void *win,
                              int64_t win_ring, int window, const void *comp, int64_t n_comp,
                              int rate, const int32_t *sel, int k, model_dtype kv_dtype,
                              const float *sinks, float scale, float *out)
{
    /* (its scratch was reserved with the backend: it cannot fail here) */
    (void)cpu_sink_attention(cpu(be)->pool, q, n_head, head_dim, n, pos, last, win, win_ring,
                             window, comp, n_comp, rate, sel, k, kv_dtype, sinks, scale, out);
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .free = be_free,
    .alloc = be_alloc,
    .realloc = be_realloc,
    .vector = be_vector,
    .matrix = be_matrix,
    .embedding = be_embedding,
    .matrix_f32 = be_matrix_f32,
    .mla_kv_b_join = be_mla_kv_b_join,
    .rope_create = be_rope_create,
    .moe_create = be_moe_create,
    .embed = be_embed,
    .rmsnorm = be_rmsnorm,
    .matmul = be_matmul,
    .add = be_add,
    .silu_mul = be_silu_mul,
    .rope = be_rope,
    .kv_create = be_kv_create,
    .kv_bytes_per_token = be_kv_bytes_per_token,
    .kv_blocks_total = be_kv_blocks_total,
    .kv_block_bytes = be_kv_block_bytes,
    .kv_block_read = be_kv_block_read,
    .kv_block_write = be_kv_block_write,
    .kv_store = be_kv_store,
    .attention = be_attention,
    .mla_attention = be_mla_attention,
    .moe_route = be_moe_route,
    .moe_experts = be_moe_experts,
    .copy_rows = be_copy_rows,
    .silu_mul_clamp = be_silu_mul_clamp,
    .hc_pre = be_hc_pre,
    .hc_pre_shifted = be_hc_pre_shifted,
    .hc_post = be_hc_post,
    .engram_gate = be_engram_gate,
    .hc_mean = be_hc_mean,
    .compress_pool = be_compress_pool,
    .v4_rows_store = be_v4_rows_store,
    .indexer_topk = be_indexer_topk,
    .sink_attention = be_sink_attention,
};

di_status backend_cpu_create(const backend_options *opt, backend **out, di_error **err)
{
    if (!opt || opt->n_threads < 1 || opt->max_rows < 1 || opt->max_ctx < 1)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "backend_cpu_create: invalid options");
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the CPU backend");
    c->base.ops = &cpu_ops;
    c->opt = *opt;
    if (c->opt.use_ref) c->opt.n_threads = 1;
    di_status st = cpu_threadpool_create(c->opt.n_threads, &c->pool);
    if (st != DI_OK) {
        int n = c->opt.n_threads;
        free(c);
        return di_error_setf(err, st, "cannot start %d threads", n);
    }
    c->index_scores = malloc((size_t)cpu_threadpool_size(c->pool) *
                             (size_t)INDEX_STRIDE(c->opt.max_ctx) * sizeof(float));
    /* the kernels' per-thread workspace (threadpool.h), for every shape they
     * take, so no operation allocates (address space: pages are touched
     * only by the shapes that run) */
    size_t ws = cpu_attention_scratch_bytes(CPU_ATTENTION_MAX_HEAD_DIM);
    if (cpu_v4_scratch_bytes() > ws) ws = cpu_v4_scratch_bytes();
    if ((size_t)CPU_AMX_WIDE_BYTES > ws) ws = CPU_AMX_WIDE_BYTES;
    if (!c->index_scores || cpu_threadpool_reserve(c->pool, ws) != DI_OK) {
        be_free(&c->base);
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the CPU backend");
    }
    *out = &c->base;
    return DI_OK;
}
