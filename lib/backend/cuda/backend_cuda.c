/* The CUDA backend: backend.h's table over the kernels of kernels/, for the
 * dense Llama/Qwen2 path (docs/cuda.md). One CUDA stream per backend; every
 * operation enqueues its kernels on it and returns, in call order.
 *
 * Weights are copied to device memory once, in their stored formats, and
 * dequantized in registers by the kernels. Activations are device memory from
 * alloc. The seam with host memory is here, not in lib/model/: token ids,
 * positions and block tables (host arrays by the interface) are copied to
 * device scratch before the kernels that read them, and a matmul whose output
 * (or input) is not device memory — the logits the model writes into its
 * caller's array — goes through a device staging buffer, copied back before
 * the call returns. Scratch is sized while the model loads (from max_rows,
 * max_ctx and the matrices made), so no operation allocates.
 *
 * Operations cannot fail by the interface's contract: a CUDA error inside one
 * (a launch failing, a device fault reported at a copy) ends the process with
 * the CUDA error string on stderr, as llama.cpp's CUDA_CHECK does; silently
 * continuing would hand garbage logits to the sampler. The operations this
 * backend does not implement yet (MLA, MoE, DeepSeek-V4's) are refused at load,
 * by the creating calls those models make (kv_create with an MLA shape,
 * mla_kv_b_join, moe_create), with DI_ERR_UNSUPPORTED naming the operation. */
#include "backend/cuda/backend_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "kernels.h"

struct backend_matrix {
    int dtype;
    int64_t n_in, n_out;
    size_t row_bytes;
    void *d; /* device, n_out * row_bytes */
};

struct backend_rope {
    di_cuda_rope_table r; /* r.inv_freq in device memory */
};

struct backend_kv {
    di_cuda_kv c;
    size_t elem; /* bytes per cached element */
};

typedef struct dev_buf {
    void *p;
    size_t bytes;
} dev_buf;

typedef struct cuda_backend {
    backend base;
    const backend_module_host *host;
    backend_options opt;
    int device;
    cudaStream_t stream;
    dev_buf *dev; /* device memory handed out or used as scratch, freed with the backend */
    size_t n_dev, cap_dev;
    void **hst; /* host structs handed out */
    size_t n_hst, cap_hst;
    int32_t *d_tokens; /* int32 [max_rows] */
    int64_t *d_pos;    /* int64 [max_rows] */
    int32_t *d_table;  /* int32 [table_cap] */
    int64_t table_cap;
    float *d_stage_in, *d_stage_out; /* f32 [stage_in], [stage_out] */
    int64_t stage_in, stage_out;
} cuda_backend;

static cuda_backend *cb(backend *be)
{
    return (cuda_backend *)be;
}

/* An operation's CUDA call failing: the process ends (see the top of the file). */
static void check_op(int e, const char *op)
{
    if (e == 0) return;
    fprintf(stderr, "deepinfer cuda backend: %s: %s (%s)\n", op, cudaGetErrorName((cudaError_t)e),
            cudaGetErrorString((cudaError_t)e));
    abort();
}

static void check_cuda(cudaError_t e, const char *op)
{
    check_op((int)e, op);
}

/* A precondition of an operation broken (the caller's bug): the process ends. */
static void check_arg(int ok, const char *op, const char *what)
{
    if (ok) return;
    fprintf(stderr, "deepinfer cuda backend: %s: %s\n", op, what);
    abort();
}

/* An operation the backend refuses at load, reached anyway: a bug. */
static void unreachable_op(const char *op)
{
    fprintf(stderr,
            "deepinfer cuda backend: %s called, but it is not implemented and models needing "
            "it are refused at load\n",
            op);
    abort();
}

/* n bytes of device memory owned by the backend, or NULL (*e the error). */
static void *dev_alloc(cuda_backend *c, size_t n, cudaError_t *e)
{
    if (c->n_dev == c->cap_dev) {
        size_t cap = c->cap_dev ? 2 * c->cap_dev : 64;
        dev_buf *l = realloc(c->dev, cap * sizeof *l);
        if (!l) {
            *e = cudaErrorMemoryAllocation;
            return NULL;
        }
        c->dev = l;
        c->cap_dev = cap;
    }
    void *p = NULL;
    *e = cudaMalloc(&p, n ? n : 1);
    if (*e != cudaSuccess) return NULL;
    c->dev[c->n_dev++] = (dev_buf){p, n ? n : 1};
    return p;
}

static void *host_own(cuda_backend *c, void *p)
{
    if (!p) return NULL;
    if (c->n_hst == c->cap_hst) {
        size_t cap = c->cap_hst ? 2 * c->cap_hst : 64;
        void **l = realloc(c->hst, cap * sizeof *l);
        if (!l) {
            free(p);
            return NULL;
        }
        c->hst = l;
        c->cap_hst = cap;
    }
    c->hst[c->n_hst++] = p;
    return p;
}

static di_status cuda_fail(cuda_backend *c, di_error **err, cudaError_t e, const char *what,
                           const char *name)
{
    return cuda_errorf(c->host, err,
                       e == cudaErrorMemoryAllocation ? DI_ERR_OUT_OF_MEMORY : DI_ERR_BACKEND,
                       "cuda backend: %s%s%s: %s (%s)", what, name ? " " : "", name ? name : "",
                       cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Grow a device scratch buffer to want elements of elem bytes (load time only). */
static di_status grow_scratch(cuda_backend *c, void **p, int64_t *have, int64_t want, size_t elem,
                              di_error **err)
{
    if (want <= *have) return DI_OK;
    cudaError_t e;
    void *n = dev_alloc(c, (size_t)want * elem, &e);
    if (!n) return cuda_fail(c, err, e, "allocating scratch", NULL);
    *p = n; /* the old buffer stays tracked and is freed with the backend */
    *have = want;
    return DI_OK;
}

/* Whether p points into device memory (an allocation of this backend, or any
 * device memory the runtime knows), rather than host memory. */
static int is_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* older runtimes: unregistered host memory is an error */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static void set_device(cuda_backend *c)
{
    /* one thread drives the backend at a time, not always the same one */
    check_cuda(cudaSetDevice(c->device), "cudaSetDevice");
}

static void be_free(backend *be)
{
    cuda_backend *c = cb(be);
    (void)cudaSetDevice(c->device);
    if (c->stream) (void)cudaStreamSynchronize(c->stream);
    for (size_t i = 0; i < c->n_dev; i++) (void)cudaFree(c->dev[i].p);
    for (size_t i = 0; i < c->n_hst; i++) free(c->hst[i]);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    free(c->dev);
    free(c->hst);
    free(c);
}

static float *be_alloc(backend *be, int64_t n)
{
    cuda_backend *c = cb(be);
    set_device(c);
    cudaError_t e;
    return dev_alloc(c, (size_t)(n > 0 ? n : 1) * sizeof(float), &e);
}

static float *be_realloc(backend *be, float *p, int64_t n)
{
    cuda_backend *c = cb(be);
    if (!p) return be_alloc(be, n);
    size_t i = c->n_dev;
    while (i > 0 && c->dev[i - 1].p != (void *)p) i--;
    if (i == 0) return NULL;
    set_device(c);
    const size_t old = c->dev[i - 1].bytes, want = (size_t)(n > 0 ? n : 1) * sizeof(float);
    void *q = NULL;
    if (cudaMalloc(&q, want) != cudaSuccess) return NULL;
    check_cuda(cudaMemcpyAsync(q, p, old < want ? old : want, cudaMemcpyDeviceToDevice, c->stream),
               "realloc");
    check_cuda(cudaStreamSynchronize(c->stream), "realloc");
    (void)cudaFree(p);
    c->dev[i - 1] = (dev_buf){q, want};
    return q;
}

/* A host copy of t's n elements as f32 (f32, f16, bf16 or whole blocks of a
 * ggml type the CPU dequantizes) in *out (the caller frees it). */
static di_status host_f32(cuda_backend *c, const model_tensor *t, int64_t n, float **out,
                          di_error **err)
{
    int block = cpu_dtype_block_elems((int)t->dtype);
    if (block == 0 || t->dtype == MODEL_DTYPE_FP8_E4M3 || t->dtype == MODEL_DTYPE_MXFP4 ||
        n % block != 0)
        return cuda_errorf(c->host, err, DI_ERR_UNSUPPORTED,
                           "%s: a norm or bias must be f32, f16, bf16 or whole blocks of a ggml "
                           "quantized type",
                           t->name);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return cuda_errorf(c->host, err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", t->name);
    cpu_dequantize_row((int)t->dtype, t->data, v, n);
    *out = v;
    return DI_OK;
}

static di_status be_vector(backend *be, const model_tensor *t, const float **out, di_error **err)
{
    cuda_backend *c = cb(be);
    set_device(c);
    float *h = NULL;
    di_status st = host_f32(c, t, t->ne[0], &h, err);
    if (st != DI_OK) return st;
    cudaError_t e;
    float *d = dev_alloc(c, (size_t)t->ne[0] * sizeof(float), &e);
    if (d) e = cudaMemcpy(d, h, (size_t)t->ne[0] * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    if (e != cudaSuccess) return cuda_fail(c, err, e, "uploading", t->name);
    *out = d;
    return DI_OK;
}

/* t's rows uploaded as stored, for the matrix products or embedding rows. */
static di_status upload_matrix(cuda_backend *c, const model_tensor *t, const char *use,
                               const backend_matrix **out, di_error **err)
{
    const int64_t n_in = t->ne[0], n_out = t->ne[1] * t->ne[2] * t->ne[3];
    if (!di_cuda_dtype_supported((int)t->dtype, n_in))
        return cuda_errorf(c->host, err, DI_ERR_UNSUPPORTED,
                           "%s: the CUDA backend has no %s for its dtype (%d) with rows of %lld "
                           "elements (it takes f32, f16, bf16, Q8_0, Q4_0, Q4_1, Q4_K and Q6_K)",
                           t->name, use, (int)t->dtype, (long long)n_in);
    const size_t row = di_cuda_row_bytes((int)t->dtype, n_in);
    if ((size_t)n_out * row > t->n_bytes)
        return cuda_errorf(c->host, err, DI_ERR_INVALID_ARGUMENT,
                           "%s: %zu bytes hold less than %lld rows of %zu bytes", t->name,
                           t->n_bytes, (long long)n_out, row);
    struct backend_matrix *m = host_own(c, calloc(1, sizeof *m));
    if (!m)
        return cuda_errorf(c->host, err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", t->name);
    cudaError_t e;
    m->d = dev_alloc(c, (size_t)n_out * row, &e);
    if (m->d) e = cudaMemcpy(m->d, t->data, (size_t)n_out * row, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return cuda_fail(c, err, e, "uploading", t->name);
    m->dtype = (int)t->dtype;
    m->n_in = n_in;
    m->n_out = n_out;
    m->row_bytes = row;
    *out = m;
    return DI_OK;
}

static di_status be_matrix(backend *be, const model_tensor *t, const backend_matrix **out,
                           di_error **err)
{
    cuda_backend *c = cb(be);
    set_device(c);
    di_status st = upload_matrix(c, t, "matrix product", out, err);
    if (st != DI_OK) return st;
    /* staging for a product read from or written to host memory (the logits) */
    const int64_t R = c->opt.max_rows;
    if ((st = grow_scratch(c, (void **)&c->d_stage_in, &c->stage_in, R * t->ne[0], sizeof(float),
                           err)) != DI_OK ||
        (st = grow_scratch(c, (void **)&c->d_stage_out, &c->stage_out, R * (*out)->n_out,
                           sizeof(float), err)) != DI_OK)
        return st;
    return DI_OK;
}

static di_status be_embedding(backend *be, const model_tensor *t, const backend_matrix **out,
                              di_error **err)
{
    cuda_backend *c = cb(be);
    set_device(c);
    return upload_matrix(c, t, "embedding lookup", out, err);
}

static di_status be_matrix_f32(backend *be, const backend_matrix *w, const float **out,
                               di_error **err)
{
    cuda_backend *c = cb(be);
    set_device(c);
    cudaError_t e;
    float *d = dev_alloc(c, (size_t)(w->n_in * w->n_out) * sizeof(float), &e);
    if (!d) return cuda_fail(c, err, e, "dequantizing a matrix", NULL);
    e = (cudaError_t)di_cuda_dequant_rows(c->stream, w->dtype, w->d, w->row_bytes, w->n_in, NULL,
                                          w->n_out, d, w->n_in);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) return cuda_fail(c, err, e, "dequantizing a matrix", NULL);
    *out = d;
    return DI_OK;
}

static di_status be_mla_kv_b_join(backend *be, const model_tensor *k_b, const model_tensor *v_b,
                                  const float **kv_b, const backend_matrix **kv_b_w, di_error **err)
{
    (void)k_b, (void)v_b, (void)kv_b, (void)kv_b_w;
    return cuda_errorf(cb(be)->host, err, DI_ERR_UNSUPPORTED,
                       "cuda backend: mla_attention not implemented yet (DeepSeek MLA models run "
                       "on DI_DEVICE_CPU; docs/cuda.md)");
}

static di_status be_rope_create(backend *be, const backend_rope_params *p, const backend_rope **out,
                                di_error **err)
{
    cuda_backend *c = cb(be);
    set_device(c);
    cpu_rope r;
    if (cpu_rope_init(&r, p) != DI_OK)
        return cuda_errorf(c->host, err, DI_ERR_UNSUPPORTED,
                           "a head dimension of %u is not supported by RoPE", p->head_dim);
    struct backend_rope *br = host_own(c, calloc(1, sizeof *br));
    if (!br) return cuda_errorf(c->host, err, DI_ERR_OUT_OF_MEMORY, "out of memory for RoPE");
    cudaError_t e;
    float *inv = dev_alloc(c, (size_t)(r.head_dim / 2) * sizeof(float), &e);
    if (inv)
        e = cudaMemcpy(inv, r.inv_freq, (size_t)(r.head_dim / 2) * sizeof(float),
                       cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return cuda_fail(c, err, e, "uploading the RoPE table", NULL);
    br->r = (di_cuda_rope_table){r.head_dim,
                                 r.style == MODEL_ROPE_NEOX,
                                 r.ggml_angles,
                                 r.theta_scale,
                                 r.freq_scale,
                                 r.mscale,
                                 inv};
    *out = br;
    return DI_OK;
}

static di_status be_moe_create(backend *be, int32_t n_expert, const backend_matrix *const *gate,
                               const backend_matrix *const *up, const backend_matrix *const *down,
                               float swiglu_limit, const backend_moe **out, di_error **err)
{
    (void)n_expert, (void)gate, (void)up, (void)down, (void)swiglu_limit, (void)out;
    return cuda_errorf(cb(be)->host, err, DI_ERR_UNSUPPORTED,
                       "cuda backend: moe_experts not implemented yet (MoE models run on "
                       "DI_DEVICE_CPU; docs/cuda.md)");
}

static void be_embed(backend *be, const backend_matrix *table, const int32_t *tokens, int64_t n,
                     float *x, int64_t x_stride)
{
    cuda_backend *c = cb(be);
    set_device(c);
    check_arg(n <= c->opt.max_rows, "embed", "more rows than max_rows");
    for (int64_t i = 0; i < n; i++)
        check_arg(tokens[i] >= 0 && tokens[i] < table->n_out, "embed", "a token id out of range");
    check_cuda(cudaMemcpyAsync(c->d_tokens, tokens, (size_t)n * sizeof *tokens,
                               cudaMemcpyHostToDevice, c->stream),
               "embed");
    check_op(di_cuda_dequant_rows(c->stream, table->dtype, table->d, table->row_bytes, table->n_in,
                                  c->d_tokens, n, x, x_stride),
             "embed");
}

static void be_rmsnorm(backend *be, const float *x, int64_t x_stride, const float *w, float *y,
                       int64_t y_stride, int64_t n_rows, int64_t n, float eps)
{
    cuda_backend *c = cb(be);
    set_device(c);
    check_op(di_cuda_rmsnorm(c->stream, x, x_stride, w, y, y_stride, n_rows, n, eps), "rmsnorm");
}

static void be_matmul(backend *be, int n_parts, const backend_matrix *const *w,
                      const float *const *bias, const float *x, int64_t n_rows, float *const *y)
{
    cuda_backend *c = cb(be);
    set_device(c);
    check_arg(n_rows <= c->opt.max_rows, "matmul", "more rows than max_rows");
    const float *xd = x;
    if (!is_device(x)) { /* host activations: staged in */
        xd = c->d_stage_in;
        check_cuda(cudaMemcpyAsync(c->d_stage_in, x, (size_t)(n_rows * w[0]->n_in) * sizeof(float),
                                   cudaMemcpyHostToDevice, c->stream),
                   "matmul");
    }
    for (int p = 0; p < n_parts; p++) {
        const backend_matrix *m = w[p];
        check_arg(m->n_in == w[0]->n_in, "matmul", "parts of different row lengths");
        const int host_out = !is_device(y[p]);
        float *yd = host_out ? c->d_stage_out : y[p];
        check_op(di_cuda_matvec(c->stream, m->dtype, m->d, m->row_bytes, m->n_in, m->n_out, xd,
                                n_rows, bias ? bias[p] : NULL, yd),
                 "matmul");
        if (host_out) { /* the logits: copied back before the call returns */
            check_cuda(cudaMemcpyAsync(y[p], yd, (size_t)(n_rows * m->n_out) * sizeof(float),
                                       cudaMemcpyDeviceToHost, c->stream),
                       "matmul");
            check_cuda(cudaStreamSynchronize(c->stream), "matmul");
        }
    }
}

static void be_add(backend *be, float *x, const float *y, int64_t n)
{
    cuda_backend *c = cb(be);
    set_device(c);
    check_op(di_cuda_add(c->stream, x, y, n), "add");
}

static void be_silu_mul(backend *be, float *gate, const float *up, int64_t n)
{
    cuda_backend *c = cb(be);
    set_device(c);
    check_op(di_cuda_silu_mul(c->stream, gate, up, n), "silu_mul");
}

static void be_rope(backend *be, const backend_rope *r, float *x, int64_t n_rows,
                    int64_t row_stride, int n_heads, int64_t head_stride, const int64_t *pos)
{
    cuda_backend *c = cb(be);
    set_device(c);
    check_arg(n_rows <= c->opt.max_rows, "rope", "more rows than max_rows");
    check_cuda(cudaMemcpyAsync(c->d_pos, pos, (size_t)n_rows * sizeof *pos, cudaMemcpyHostToDevice,
                               c->stream),
               "rope");
    check_op(di_cuda_rope(c->stream, &r->r, x, n_rows, row_stride, n_heads, head_stride, c->d_pos),
             "rope");
}

static di_status be_kv_create(backend *be, model_dtype dtype, int n_layer, int n_head_kv,
                              int head_dim, int block_size, int32_t n_blocks,
                              const backend_mla_shape *mla, int mla_naive, backend_kv **out,
                              di_error **err)
{
    cuda_backend *c = cb(be);
    (void)mla_naive;
    set_device(c);
    if (mla)
        return cuda_errorf(c->host, err, DI_ERR_UNSUPPORTED,
                           "cuda backend: mla_attention not implemented yet (DeepSeek MLA models "
                           "run on DI_DEVICE_CPU; docs/cuda.md)");
    if (dtype == MODEL_DTYPE_Q8_0 || dtype == MODEL_DTYPE_Q4_0)
        return cuda_errorf(c->host, err, DI_ERR_UNSUPPORTED,
                           "kv_cache_type %s: the cuda backend keeps the KV cache in f16 or f32 "
                           "(docs/cuda.md)",
                           dtype == MODEL_DTYPE_Q8_0 ? "q8_0" : "q4_0");
    if ((dtype != MODEL_DTYPE_F32 && dtype != MODEL_DTYPE_F16) || n_layer < 1 || n_head_kv < 1 ||
        head_dim < 1 || block_size < 1 || n_blocks < 1)
        return cuda_errorf(c->host, err, DI_ERR_INVALID_ARGUMENT,
                           "cuda backend: a KV cache of dtype %d, %d layers, %d heads of %d, "
                           "%d blocks of %d tokens",
                           (int)dtype, n_layer, n_head_kv, head_dim, (int)n_blocks, block_size);
    if (head_dim > 256)
        return cuda_errorf(c->host, err, DI_ERR_UNSUPPORTED,
                           "a head dimension of %d is over the CUDA backend's 256", head_dim);
    struct backend_kv *kv = host_own(c, calloc(1, sizeof *kv));
    if (!kv) return cuda_errorf(c->host, err, DI_ERR_OUT_OF_MEMORY, "out of memory for a KV cache");
    kv->elem = dtype == MODEL_DTYPE_F16 ? 2 : 4;
    kv->c = (di_cuda_kv){NULL,      NULL,     dtype == MODEL_DTYPE_F16, n_layer,
                         n_head_kv, head_dim, n_head_kv * head_dim,     block_size,
                         n_blocks};
    const size_t bytes =
        (size_t)n_layer * (size_t)n_blocks * (size_t)block_size * (size_t)kv->c.kv_dim * kv->elem;
    cudaError_t e;
    if (!(kv->c.k = dev_alloc(c, bytes, &e)) || !(kv->c.v = dev_alloc(c, bytes, &e)))
        return cuda_fail(c, err, e, "allocating the KV cache", NULL);
    /* a sequence holds at most max_ctx tokens: its block table's entries */
    const int64_t entries = (c->opt.max_ctx + block_size - 1) / block_size + 1;
    di_status st =
        grow_scratch(c, (void **)&c->d_table, &c->table_cap, entries, sizeof(int32_t), err);
    if (st != DI_OK) return st;
    *out = kv;
    return DI_OK;
}

static size_t be_kv_bytes_per_token(const backend_kv *kv)
{
    return 2 * (size_t)kv->c.n_layer * (size_t)kv->c.kv_dim * kv->elem;
}
static int32_t be_kv_blocks_total(const backend_kv *kv)
{
    return kv->c.n_blocks;
}
static size_t be_kv_block_bytes(const backend_kv *kv)
{
    return (size_t)kv->c.block_size * be_kv_bytes_per_token(kv);
}

/* Keys of every layer, then values (the CPU backend's block layout). */
static void kv_block_copy(cuda_backend *c, const backend_kv *kv, int32_t block, void *host,
                          int to_host)
{
    set_device(c);
    check_arg(block >= 0 && block < kv->c.n_blocks, "kv_block_read/write", "block out of range");
    const size_t layer_bytes = (size_t)kv->c.block_size * (size_t)kv->c.kv_dim * kv->elem;
    char *h = host;
    for (int kvi = 0; kvi < 2; kvi++)
        for (int l = 0; l < kv->c.n_layer; l++) {
            char *d = (char *)(kvi ? kv->c.v : kv->c.k) +
                      ((size_t)l * (size_t)kv->c.n_blocks + (size_t)block) * layer_bytes;
            check_cuda(to_host
                           ? cudaMemcpyAsync(h, d, layer_bytes, cudaMemcpyDeviceToHost, c->stream)
                           : cudaMemcpyAsync(d, h, layer_bytes, cudaMemcpyHostToDevice, c->stream),
                       "kv_block_read/write");
            h += layer_bytes;
        }
    check_cuda(cudaStreamSynchronize(c->stream), "kv_block_read/write");
}
static void be_kv_block_read(backend *be, const backend_kv *kv, int32_t block, void *dst)
{
    kv_block_copy(cb(be), kv, block, dst, 1);
}
static void be_kv_block_write(backend *be, backend_kv *kv, int32_t block, const void *src)
{
    kv_block_copy(cb(be), kv, block, (void *)src, 0);
}

/* The first blocks of s's table covering tokens [0, end), copied to device
 * scratch (bounds checked: every entry a block of the cache). */
static const int32_t *upload_table(cuda_backend *c, const backend_kv *kv, const backend_kv_seq *s,
                                   int64_t end, const char *op)
{
    const int64_t nb = (end + kv->c.block_size - 1) / kv->c.block_size;
    check_arg(nb <= s->n_blocks && nb <= c->table_cap, op, "positions beyond the reserved blocks");
    for (int64_t i = 0; i < nb; i++)
        check_arg(s->block_table[i] >= 0 && s->block_table[i] < kv->c.n_blocks, op,
                  "a block table entry out of range");
    check_cuda(cudaMemcpyAsync(c->d_table, s->block_table, (size_t)nb * sizeof(int32_t),
                               cudaMemcpyHostToDevice, c->stream),
               op);
    return c->d_table;
}

static void be_kv_store(backend *be, backend_kv *kv, const backend_kv_seq *s, int l, int64_t pos0,
                        int64_t n, const float *k, const float *v)
{
    cuda_backend *c = cb(be);
    set_device(c);
    check_arg(l >= 0 && l < kv->c.n_layer && pos0 >= 0, "kv_store", "layer or position");
    const int32_t *t = upload_table(c, kv, s, pos0 + n, "kv_store");
    check_op(di_cuda_kv_store(c->stream, &kv->c, t, l, pos0, n, k, v), "kv_store");
}

static void be_attention(backend *be, const backend_kv *kv, const backend_kv_seq *s, int l,
                         const float *q, int n_head, int64_t pos0, int64_t n, float scale,
                         float *out)
{
    cuda_backend *c = cb(be);
    set_device(c);
    check_arg(l >= 0 && l < kv->c.n_layer && pos0 >= 0 && n_head % kv->c.n_head_kv == 0,
              "attention", "layer, position or head count");
    const int32_t *t = upload_table(c, kv, s, pos0 + n, "attention");
    check_op(di_cuda_attention(c->stream, &kv->c, t, l, q, n_head, pos0, n, scale, out),
             "attention");
}

/* --- not implemented yet: the models using them are refused at load --- */
static void be_mla_attention(backend *be, const backend_kv *kv, const backend_kv_seq *s, int l,
                             const float *q, int64_t pos0, int64_t n, const float *kv_b,
                             const backend_matrix *kv_b_w, float scale, float *out)
{
    (void)be, (void)kv, (void)s, (void)l, (void)q, (void)pos0, (void)n, (void)kv_b, (void)kv_b_w,
        (void)scale, (void)out;
    unreachable_op("mla_attention");
}
static void be_moe_route(backend *be, const backend_route_params *p, const float *bias,
                         const float *logits, int64_t n, int32_t *sel, float *weight)
{
    (void)be, (void)p, (void)bias, (void)logits, (void)n, (void)sel, (void)weight;
    unreachable_op("moe_route");
}
static void be_moe_experts(backend *be, const backend_moe *moe, const float *x, int64_t n,
                           const int32_t *sel, const float *weight, int32_t k, float *out,
                           int accumulate)
{
    (void)be, (void)moe, (void)x, (void)n, (void)sel, (void)weight, (void)k, (void)out,
        (void)accumulate;
    unreachable_op("moe_experts");
}
static void be_copy_rows(backend *be, float *dst, int64_t dst_stride, const float *src,
                         int64_t src_stride, int64_t width, int64_t n)
{
    cuda_backend *c = cb(be);
    set_device(c);
    if (n <= 0 || width <= 0) return;
    check_cuda(cudaMemcpy2DAsync(dst, (size_t)dst_stride * sizeof(float), src,
                                 (size_t)src_stride * sizeof(float), (size_t)width * sizeof(float),
                                 (size_t)n, cudaMemcpyDefault, c->stream),
               "copy_rows");
}
static void be_silu_mul_clamp(backend *be, float *gate, const float *up, int64_t n, float limit)
{
    (void)be, (void)gate, (void)up, (void)n, (void)limit;
    unreachable_op("silu_mul_clamp");
}
static void be_hc_pre(backend *be, const float *mix, const float *base, const float *scale, int hc,
                      int sinkhorn_iters, float eps, const float *x, int64_t n_embd, int64_t n,
                      float *collapsed, float *post, float *comb)
{
    (void)be, (void)mix, (void)base, (void)scale, (void)hc, (void)sinkhorn_iters, (void)eps,
        (void)x, (void)n_embd, (void)n, (void)collapsed, (void)post, (void)comb;
    unreachable_op("hc_pre");
}
static void be_hc_pre_shifted(backend *be, const float *mix, const float *base, const float *scale,
                              int hc, int sinkhorn_iters, float eps, const float *x, int64_t n_embd,
                              int64_t n, const float *pre_in, float *collapsed, float *pre_out,
                              float *post, float *comb)
{
    (void)be, (void)mix, (void)base, (void)scale, (void)hc, (void)sinkhorn_iters, (void)eps,
        (void)x, (void)n_embd, (void)n, (void)pre_in, (void)collapsed, (void)pre_out, (void)post,
        (void)comb;
    unreachable_op("hc_pre_shifted");
}
static void be_hc_post(backend *be, const float *x, const float *y, const float *post,
                       const float *comb, int hc, int64_t n_embd, int64_t n, float *out)
{
    (void)be, (void)x, (void)y, (void)post, (void)comb, (void)hc, (void)n_embd, (void)n, (void)out;
    unreachable_op("hc_post");
}

static void be_engram_gate(backend *be, float *x, const float *kv, const float *wh, const float *we,
                           int hc, int64_t n_embd, int64_t n, float eps)
{
    (void)be, (void)x, (void)kv, (void)wh, (void)we, (void)hc, (void)n_embd, (void)n, (void)eps;
    unreachable_op("engram_gate");
}
static void be_hc_mean(backend *be, const float *x, int hc, int64_t n_embd, int64_t n, float *out,
                       int64_t out_stride)
{
    (void)be, (void)x, (void)hc, (void)n_embd, (void)n, (void)out, (void)out_stride;
    unreachable_op("hc_mean");
}
static void be_compress_pool(backend *be, const float *kv, const float *gate, int64_t ring,
                             int64_t row_stride, const float *bias, int rate, int64_t width,
                             int overlap, int64_t e0, int64_t n, float *out, int64_t out_stride)
{
    (void)be, (void)kv, (void)gate, (void)ring, (void)row_stride, (void)bias, (void)rate,
        (void)width, (void)overlap, (void)e0, (void)n, (void)out, (void)out_stride;
    unreachable_op("compress_pool");
}
static void be_v4_rows_store(backend *be, model_dtype dtype, void *dst, const float *src,
                             int64_t src_stride, int64_t width, int64_t n)
{
    (void)be, (void)dtype, (void)dst, (void)src, (void)src_stride, (void)width, (void)n;
    unreachable_op("v4_rows_store");
}
static void be_indexer_topk(backend *be, const float *q, const float *w, int n_head,
                            int64_t head_dim, int64_t n, const int64_t *pos, const void *keys,
                            model_dtype kv_dtype, int64_t n_keys, int rate, float scale,
                            float w_scale, int k, int32_t *sel,
                            const backend_index_candidates *cand)
{
    (void)be, (void)q, (void)w, (void)n_head, (void)head_dim, (void)n, (void)pos, (void)keys,
        (void)kv_dtype, (void)n_keys, (void)rate, (void)scale, (void)w_scale, (void)k, (void)sel,
        (void)cand;
    unreachable_op("indexer_topk");
}
static void be_sink_attention(backend *be, const float *q, int n_head, int64_t head_dim, int64_t n,
                              const int64_t *pos, const int64_t *last, const void *win,
                              int64_t win_ring, int window, const void *comp, int64_t n_comp,
                              int rate, const int32_t *sel, int k, model_dtype kv_dtype,
                              const float *sinks, float scale, float *out)
{
    (void)be, (void)q, (void)n_head, (void)head_dim, (void)n, (void)pos, (void)last, (void)win,
        (void)win_ring, (void)window, (void)comp, (void)n_comp, (void)rate, (void)sel, (void)k,
        (void)kv_dtype, (void)sinks, (void)scale, (void)out;
    unreachable_op("sink_attention");
}

static const backend_ops cuda_ops = {
    .name = "cuda",
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

di_status backend_cuda_new(const backend_module_host *host, int device, const backend_options *opt,
                           backend **out, di_error **err)
{
    *out = NULL;
    if (opt->max_rows < 1 || opt->max_ctx < 1)
        return cuda_errorf(host, err, DI_ERR_INVALID_ARGUMENT,
                           "cuda backend: max_rows and max_ctx must be at least 1");
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) return cuda_errorf(host, err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    c->base.ops = &cuda_ops;
    c->host = host;
    c->opt = *opt;
    c->device = device;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    di_status st;
    if (e != cudaSuccess) {
        st = cuda_fail(c, err, e, "creating a stream on device", "0");
        goto fail;
    }
    int64_t have_tok = 0, have_pos = 0;
    if ((st = grow_scratch(c, (void **)&c->d_tokens, &have_tok, opt->max_rows, sizeof(int32_t),
                           err)) != DI_OK ||
        (st = grow_scratch(c, (void **)&c->d_pos, &have_pos, opt->max_rows, sizeof(int64_t),
                           err)) != DI_OK)
        goto fail;
    *out = &c->base;
    return DI_OK;
fail:
    be_free(&c->base);
    return st;
}
