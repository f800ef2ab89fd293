/* Dense Llama and Qwen2 forward pass (model.h), on the device behind
 * backend/backend.h; model_load and the sequence calls for every architecture.
 *
 * Per layer, as transformers' LlamaDecoderLayer / Qwen2DecoderLayer and
 * llama.cpp's llm_build_llama / llm_build_qwen2:
 *   h = RMSNorm(x) * attn_norm
 *   q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)      (biases: Qwen2)
 *   q, k = RoPE(q, pos), RoPE(k, pos)                 (NORM for Llama GGUFs, NEOX otherwise)
 *   x = x + Attention(q, K, V) Wo                     (causal, GQA, scale 1/sqrt(head_dim))
 *   h = RMSNorm(x) * ffn_norm
 *   x = x + (SiLU(h Wgate) * (h Wup)) Wdown
 * then logits = RMSNorm(x) * output_norm  Woutput (token_embd when tied). */
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "model/deepseek_v3.h"
#include "model/deepseek_v4.h"
#include "model/gguf.h"
#include "model/kv_pool.h"
#include "model/load.h"
#include "model/model.h"
#include "model/model_internal.h"
#include "util/error.h"

typedef struct layer {
    const backend_matrix *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
    const float *attn_norm, *ffn_norm; /* f32 [n_embd] in the backend */
    const float *bq, *bk, *bv;         /* f32 in the backend, or NULL */
} layer;

struct model {
    model_weights *w;
    model_config cfg;
    model_options opt;
    backend *be; /* the device; owns every weight, buffer and cache below */
    layer *layers;
    const backend_matrix *tok_embd, *output;
    const float *output_norm;
    const backend_rope *rope;
    backend_kv *kv;
    kv_pool pool;  /* which of kv's blocks hold what */
    model_seq seq; /* the default sequence of model_forward */
    /* activations in the backend, [n_batch, ...] */
    float *x, *h, *q, *k, *v, *attn, *gate, *up;
    int64_t *pos; /* host, [n_batch]: position of each row */
    dsv3 *ds;     /* a DeepSeek model: model_forward and the getters go there */
    dsv4 *v4;     /* a DeepSeek-V4 model: its default sequence only (deepseek_v4.h) */
    /* model_kv_set_hooks'; hook_buf: one block's contents */
    model_kv_hook hook_evicted, hook_published;
    void *hook_user, *hook_buf;
};

static di_status load_tensors(model *m, di_error **err)
{
    const model_config *c = &m->cfg;
    backend *be = m->be;
    const int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim,
                  KV = (int64_t)c->n_head_kv * c->head_dim, F = c->n_ff;
    char name[96];
    di_status st;
    if ((st = model_embedding(m->w, be, "token_embd.weight", E, c->n_vocab, &m->tok_embd, err)) !=
            DI_OK ||
        (st = model_matrix(m->w, be, c->tie_embeddings ? "token_embd.weight" : "output.weight", E,
                           c->n_vocab, &m->output, err)) != DI_OK ||
        (st = model_vector(m->w, be, "output_norm.weight", E, &m->output_norm, err)) != DI_OK)
        return st;
    m->layers = calloc(c->n_layer, sizeof *m->layers);
    if (!m->layers)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading the layers");
    for (uint32_t i = 0; i < c->n_layer; i++) {
        layer *L = &m->layers[i];
#define MAT(field, suffix, nin, nout)                                                              \
    snprintf(name, sizeof name, "blk.%u." suffix ".weight", i);                                    \
    if ((st = model_matrix(m->w, be, name, nin, nout, &L->field, err)) != DI_OK) return st
        MAT(wq, "attn_q", E, Q);
        MAT(wk, "attn_k", E, KV);
        MAT(wv, "attn_v", E, KV);
        MAT(wo, "attn_output", Q, E);
        MAT(w_gate, "ffn_gate", E, F);
        MAT(w_up, "ffn_up", E, F);
        MAT(w_down, "ffn_down", F, E);
#undef MAT
#define VEC(field, suffix, n)                                                                      \
    snprintf(name, sizeof name, "blk.%u." suffix, i);                                              \
    if ((st = model_vector(m->w, be, name, n, &L->field, err)) != DI_OK) return st
        VEC(attn_norm, "attn_norm.weight", E);
        VEC(ffn_norm, "ffn_norm.weight", E);
        if (c->attn_qkv_bias) {
            VEC(bq, "attn_q.bias", Q);
            VEC(bk, "attn_k.bias", KV);
            VEC(bv, "attn_v.bias", KV);
        }
#undef VEC
        if (m->opt.progress &&
            m->opt.progress(m->opt.progress_user, (float)(i + 1) / (float)c->n_layer) != 0)
            return di_error_setf(err, DI_ERR_CANCELLED, "the model load was cancelled by the host");
    }
    return DI_OK;
}

di_status model_load(const char *path, const model_options *opt, model **out, di_error **err)
{
    if (!path || !opt || !out || opt->n_threads < 1 || opt->n_ctx < 0 || opt->n_batch < 0 ||
        opt->n_kv_blocks < 0 ||
        (opt->kv_dtype != MODEL_DTYPE_F16 && opt->kv_dtype != MODEL_DTYPE_F32 &&
         opt->kv_dtype != MODEL_DTYPE_Q8_0 && opt->kv_dtype != MODEL_DTYPE_Q4_0))
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "model_load: invalid arguments");
    model *m = calloc(1, sizeof *m);
    if (!m) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", path);
    di_status st = model_weights_open(path, &m->w, err);
    if (st != DI_OK) goto fail;
    m->cfg = *model_weights_config(m->w);
    m->opt = *opt;
    const model_config *c = &m->cfg;
    if (m->opt.n_ctx == 0) m->opt.n_ctx = c->n_ctx_train < 4096 ? c->n_ctx_train : 4096;
    if (m->opt.n_ctx <= 0) m->opt.n_ctx = 4096;
    if (m->opt.n_batch == 0) m->opt.n_batch = 256;
    if (m->opt.n_batch > m->opt.n_ctx) m->opt.n_batch = m->opt.n_ctx;
    if (m->opt.use_ref) m->opt.n_threads = 1;
    if (c->arch != MODEL_ARCH_LLAMA && c->arch != MODEL_ARCH_QWEN2 &&
        c->arch != MODEL_ARCH_DEEPSEEK_V3 && c->arch != MODEL_ARCH_DEEPSEEK_V2 &&
        c->arch != MODEL_ARCH_DEEPSEEK_V4) {
        st = di_error_setf(err, DI_ERR_UNSUPPORTED, "%s: architecture %d is not supported", path,
                           (int)c->arch);
        goto fail;
    }
    backend_options bo = {m->opt.n_threads, m->opt.use_ref, m->opt.n_batch, m->opt.n_ctx,
                          m->opt.device};
    if ((st = backend_create(&bo, &m->be, err)) != DI_OK) goto fail;
    if (c->arch == MODEL_ARCH_DEEPSEEK_V3 || c->arch == MODEL_ARCH_DEEPSEEK_V2) {
        if ((st = dsv3_load(m->w, &m->opt, m->be, &m->ds, err)) != DI_OK) goto fail;
        *out = m;
        return DI_OK;
    }
    if (c->arch == MODEL_ARCH_DEEPSEEK_V4) {
        if (dsv4_weights_mtp_only(m->w)) {
            st = di_error_setf(err, DI_ERR_UNSUPPORTED,
                               "%s is an MTP GGUF (llama.cpp's convert_hf_to_gguf.py --mtp): it "
                               "holds the MTP layer alone; give it as the draft model of the "
                               "model it was converted with (draft_model_path)",
                               path);
            goto fail;
        }
        if (dsv4_weights_dspark_only(m->w)) {
            st = di_error_setf(err, DI_ERR_UNSUPPORTED,
                               "%s is a DSpark GGUF (llama.cpp's convert_hf_to_gguf.py --dspark): "
                               "it holds the DSpark draft head alone; give it as the draft model "
                               "of the model it was converted with (draft_model_path, the CLI's "
                               "--draft-model)",
                               path);
            goto fail;
        }
        if ((st = dsv4_load(m->w, &m->opt, m->be, &m->v4, err)) != DI_OK) goto fail;
        *out = m;
        return DI_OK;
    }
    if ((st = load_tensors(m, err)) != DI_OK) goto fail;
    /* A GGUF file (not a directory) runs against llama.cpp: its RoPE angles. */
    struct stat sb;
    int ggml_angles = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) &&
                      (c->rope_scaling == MODEL_ROPE_SCALING_NONE ||
                       c->rope_scaling == MODEL_ROPE_SCALING_LINEAR);
    backend_rope_params rp = model_rope_params(c, c->head_dim, ggml_angles);
    if ((st = m->be->ops->rope_create(m->be, &rp, &m->rope, err)) != DI_OK) goto fail;
    enum { BLOCK = MODEL_KV_BLOCK };
    int32_t n_blocks;
    if ((st = model_kv_dtype_check(m->opt.kv_dtype, c->head_dim, "head_dim", err)) != DI_OK)
        goto fail;
    int64_t block_bytes = (int64_t)2 * c->n_layer * c->n_head_kv * BLOCK *
                          model_kv_row_bytes(m->opt.kv_dtype, c->head_dim);
    if ((st = model_kv_block_count(&m->opt, block_bytes, &n_blocks, err)) != DI_OK) goto fail;
    if ((st = m->be->ops->kv_create(m->be, m->opt.kv_dtype, (int)c->n_layer, (int)c->n_head_kv,
                                    (int)c->head_dim, BLOCK, n_blocks, NULL, 0, &m->kv, err)) !=
        DI_OK)
        goto fail;
    if ((st = kv_pool_init(&m->pool, n_blocks, model_kv_fingerprint(m->w, &m->opt))) != DI_OK ||
        (st = kv_pool_seq_init(&m->pool, &m->seq.kv, m->opt.n_ctx)) != DI_OK) {
        st = di_error_setf(err, st, "cannot allocate the KV cache for %lld tokens",
                           (long long)m->opt.n_ctx);
        goto fail;
    }
    const int64_t B = m->opt.n_batch, E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim,
                  KV = (int64_t)c->n_head_kv * c->head_dim, F = c->n_ff;
    backend *be = m->be;
    m->x = be->ops->alloc(be, B * E);
    m->h = be->ops->alloc(be, B * (E > Q ? E : Q));
    m->q = be->ops->alloc(be, B * Q);
    m->k = be->ops->alloc(be, B * KV);
    m->v = be->ops->alloc(be, B * KV);
    m->attn = be->ops->alloc(be, B * Q);
    m->gate = be->ops->alloc(be, B * F);
    m->up = be->ops->alloc(be, B * F);
    m->pos = malloc((size_t)B * sizeof *m->pos);
    if (!m->pos || !m->x || !m->h || !m->q || !m->k || !m->v || !m->attn || !m->gate || !m->up) {
        st = di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the forward pass buffers");
        goto fail;
    }
    *out = m;
    return DI_OK;
fail:
    model_free(m);
    return st;
}

void model_free(model *m)
{
    if (!m) return;
    free(m->layers);
    free(m->hook_buf);
    kv_pool_seq_free(&m->pool, &m->seq.kv);
    kv_pool_free(&m->pool);
    free(m->pos);
    dsv3_free(m->ds);
    dsv4_free(m->v4);
    backend_free(m->be);
    model_weights_close(m->w);
    free(m);
}

/* The paged cache the sequences live in (the architecture's), and its blocks. */
static backend_kv *model_kv(const model *m)
{
    return m->ds ? dsv3_kv(m->ds) : m->kv;
}
static kv_pool *model_pool(model *m)
{
    if (m->v4) return dsv4_pool(m->v4);
    return m->ds ? dsv3_pool(m->ds) : &m->pool;
}
static const kv_pool *model_pool_c(const model *m)
{
    if (m->v4) return dsv4_pool(m->v4);
    return m->ds ? dsv3_pool(m->ds) : &m->pool;
}

const model_config *model_get_config(const model *m)
{
    return &m->cfg;
}
const model_weights *model_get_weights(const model *m)
{
    return m->w;
}
int64_t model_n_ctx(const model *m)
{
    return m->opt.n_ctx;
}
int64_t model_n_past(const model *m)
{
    if (m->v4) return dsv4_n_past(m->v4);
    return m->ds ? dsv3_n_past(m->ds) : m->seq.kv.n_tokens;
}
void model_reset(model *m)
{
    if (m->ds)
        dsv3_reset(m->ds);
    else if (m->v4)
        dsv4_reset(m->v4);
    else
        kv_pool_seq_reset(&m->pool, &m->seq.kv);
}
int model_mtp_layers(const model *m)
{
    if (m->v4) return dsv4_mtp_layers(m->v4);
    return m->ds ? dsv3_mtp_layers(m->ds) : 0;
}
int model_engram_needs_vocab(const model *m)
{
    return m && m->v4 && dsv4_engram_needs_vocab(m->v4);
}

di_status model_set_engram_vocab(model *m, const int32_t *old2new, int32_t n_tokens, int32_t n_keys,
                                 di_error **err)
{
    if (!m || !old2new)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "model_set_engram_vocab: NULL");
    return m->v4 ? dsv4_engram_set_vocab(m->v4, old2new, n_tokens, n_keys, err) : DI_OK;
}

/* A forward before Engram's vocabulary was handed over. */
static di_status engram_unready(di_error **err)
{
    return di_error_setf(err, DI_ERR_INVALID_STATE,
                         "the model's Engram layers need the tokenizer's compressed vocabulary, "
                         "which was not given (a model folder needs its tokenizer.json)");
}

int model_file_is_mtp(const char *path)
{
    /* the GGUF's header and tensor table only (no weights read: a draft model
     * given here is loaded afterwards, and a V4 one's experts repacked then) */
    gguf_file *f = NULL;
    char msg[8];
    if (!path || gguf_open(path, 0, &f, msg, sizeof msg) != DI_OK) return 0;
    const char *arch = NULL;
    size_t len = 0;
    uint32_t nextn = 0;
    int main_layers = 0, nextn_tensors = 0;
    if (gguf_get_string(f, "general.architecture", &arch, &len) && len == 9 &&
        memcmp(arch, "deepseek4", 9) == 0 &&
        gguf_get_u32(f, "deepseek4.nextn_predict_layers", &nextn))
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor_info *t = &f->tensors[i];
            main_layers |= t->name_len == 22 && memcmp(t->name, "blk.0.attn_norm.weight", 22) == 0;
            nextn_tensors |= t->name_len > 21 &&
                             memcmp(t->name + t->name_len - 21, ".nextn.eh_proj.weight", 21) == 0;
        }
    gguf_close(f);
    return nextn > 0 && nextn_tensors && !main_layers;
}
di_status model_attach_mtp(model *m, const char *path, di_error **err)
{
    if (!m || !path) return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "model_attach_mtp: NULL");
    if (!m->v4)
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: an MTP GGUF drafts for DeepSeek-V4 models only", path);
    model_weights *w = NULL;
    di_status st = model_weights_open(path, &w, err);
    if (st != DI_OK) return st;
    if (!dsv4_weights_mtp_only(w)) {
        model_weights_close(w);
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s is not an MTP GGUF (a deepseek4 file with nextn_predict_layers "
                             "and its NextN layer alone, as convert_hf_to_gguf.py --mtp writes)",
                             path);
    }
    if ((st = dsv4_mtp_attach(m->v4, w, path, err)) != DI_OK) model_weights_close(w);
    return st;
}
int model_file_is_dspark(const char *path)
{
    /* the GGUF's header only (as model_file_is_mtp) */
    gguf_file *f = NULL;
    char msg[8];
    if (!path || gguf_open(path, 0, &f, msg, sizeof msg) != DI_OK) return 0;
    const char *arch = NULL;
    size_t len = 0;
    uint32_t hc = 0;
    const int is = gguf_get_string(f, "general.architecture", &arch, &len) && len == 6 &&
                   memcmp(arch, "dflash", 6) == 0 &&
                   gguf_get_u32(f, "dflash.hyper_connection.count", &hc) && hc > 0;
    gguf_close(f);
    return is;
}
di_status model_attach_dspark(model *m, const char *path, di_error **err)
{
    if (!m || !path)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "model_attach_dspark: NULL");
    if (!m->v4)
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s: a DSpark GGUF drafts for DeepSeek-V4 models only", path);
    model_weights *w = NULL;
    di_status st = model_weights_open(path, &w, err);
    if (st != DI_OK) return st;
    if (!dsv4_weights_dspark_only(w)) {
        model_weights_close(w);
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "%s is not a DSpark GGUF (llama.cpp's dflash architecture over "
                             "DeepSeek-V4 stages, as convert_hf_to_gguf.py --dspark writes)",
                             path);
    }
    if ((st = dsv4_dspark_attach(m->v4, w, path, err)) != DI_OK) model_weights_close(w);
    return st;
}
int64_t model_mtp_hidden_width(const model *m)
{
    return m->v4 ? dsv4_mtp_hidden_width(m->v4) : (int64_t)m->cfg.n_embd;
}
const float *model_last_hidden(const model *m, int64_t *n_rows)
{
    *n_rows = 0;
    if (m->v4) return dsv4_last_hidden(m->v4, n_rows);
    return m->ds ? dsv3_last_hidden(m->ds, n_rows) : NULL;
}
di_status model_mtp_forward(model *m, const int32_t *tokens, int64_t n_tokens, const float *hidden,
                            float *logits, di_error **err)
{
    if (!m || !tokens || !hidden || n_tokens <= 0)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "model_mtp_forward: no tokens or hidden rows");
    if (!model_mtp_layers(m))
        return di_error_setf(err, DI_ERR_UNSUPPORTED, "the model has no MTP layer");
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= m->cfg.n_vocab)
            return di_error_setf(
                err, DI_ERR_INVALID_ARGUMENT,
                "tokens[%lld] = %d is not a token id of this model (vocabulary of %u)",
                (long long)i, (int)tokens[i], m->cfg.n_vocab);
    if (m->v4) return dsv4_mtp_forward(m->v4, tokens, n_tokens, hidden, logits, err);
    return dsv3_mtp_forward(m->ds, tokens, n_tokens, hidden, logits, err);
}
/* The pool counting the MTP sequences' tokens (NULL without MTP). */
static kv_pool *mtp_pool(model *m)
{
    if (m->v4) return dsv4_mtp_pool(m->v4);
    return m->ds ? dsv3_mtp_pool(m->ds) : NULL;
}
di_status model_mtp_seq_create(model *m, model_seq **out)
{
    *out = NULL;
    kv_pool *pool = mtp_pool(m);
    if (!pool) return DI_ERR_UNSUPPORTED;
    model_seq *s = calloc(1, sizeof *s);
    if (!s) return DI_ERR_OUT_OF_MEMORY;
    if (m->v4 ? dsv4_mtp_seq_init(m->v4, s) != DI_OK
              : kv_pool_seq_init(pool, &s->kv, m->opt.n_ctx) != DI_OK) {
        free(s);
        return DI_ERR_OUT_OF_MEMORY;
    }
    *out = s;
    return DI_OK;
}
void model_mtp_seq_free(model *m, model_seq *s)
{
    if (!s) return;
    if (m->v4)
        dsv4_mtp_seq_release(m->v4, s);
    else
        kv_pool_seq_free(dsv3_mtp_pool(m->ds), &s->kv);
    free(s);
}
void model_mtp_seq_reset(model *m, model_seq *s)
{
    kv_pool_seq_reset(mtp_pool(m), &s->kv);
}
di_status model_mtp_seq_reserve(model *m, model_seq *s, int64_t n_tokens)
{
    if (n_tokens > m->opt.n_ctx) return DI_ERR_CONTEXT_LENGTH;
    return kv_pool_seq_reserve(mtp_pool(m), &s->kv, n_tokens);
}
void model_mtp_seq_truncate(model *m, model_seq *s, int64_t n_tokens)
{
    if (m->v4)
        dsv4_mtp_seq_truncate(m->v4, s, n_tokens);
    else
        kv_pool_seq_truncate(dsv3_mtp_pool(m->ds), &s->kv, n_tokens);
}
int model_dspark_block(const model *m)
{
    return m && m->v4 ? dsv4_dspark_block(m->v4) : 0;
}
int64_t model_dspark_feature_width(const model *m)
{
    return model_dspark_block(m) ? dsv4_dspark_feature_width(m->v4) : 0;
}
const float *model_dspark_features(const model *m, int64_t *n_rows)
{
    *n_rows = 0;
    return model_dspark_block(m) ? dsv4_dspark_features(m->v4, n_rows) : NULL;
}
di_status model_dspark_seq_create(model *m, model_seq **out)
{
    *out = NULL;
    if (!model_dspark_block(m)) return DI_ERR_UNSUPPORTED;
    model_seq *s = calloc(1, sizeof *s);
    if (!s) return DI_ERR_OUT_OF_MEMORY;
    if (dsv4_dspark_seq_init(m->v4, s) != DI_OK) {
        free(s);
        return DI_ERR_OUT_OF_MEMORY;
    }
    *out = s;
    return DI_OK;
}
void model_dspark_seq_free(model *m, model_seq *s)
{
    if (!s) return;
    dsv4_dspark_seq_release(m->v4, s);
    free(s);
}
void model_dspark_seq_truncate(model *m, model_seq *s, int64_t n_tokens)
{
    dsv4_dspark_seq_truncate(m->v4, s, n_tokens);
}
/* Room in s's pool for n_tokens: DI_ERR_CONTEXT_LENGTH, DI_ERR_OUT_OF_MEMORY. */
static di_status dspark_room(model *m, model_seq *s, int64_t n_tokens, di_error **err)
{
    if (n_tokens > m->opt.n_ctx)
        return di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                             "DSpark: %lld tokens exceed the context of %lld", (long long)n_tokens,
                             (long long)m->opt.n_ctx);
    if (kv_pool_seq_reserve(dsv4_dspark_pool(m->v4), &s->kv, n_tokens) != DI_OK)
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY,
                             "DSpark: no free cache block for %lld tokens", (long long)n_tokens);
    return DI_OK;
}
di_status model_dspark_reserve(model *m, model_seq *s, di_error **err)
{
    const int block = model_dspark_block(m);
    if (!block) return di_error_setf(err, DI_ERR_UNSUPPORTED, "the model has no DSpark head");
    if (!s) return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "model_dspark_reserve: NULL");
    return dspark_room(m, s, s->kv.n_tokens + block, err);
}
di_status model_dspark_inject(model *m, model_seq *s, const float *features, int64_t n,
                              di_error **err)
{
    if (!model_dspark_block(m))
        return di_error_setf(err, DI_ERR_UNSUPPORTED, "the model has no DSpark head");
    if (!s || !features || n < 1)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "model_dspark_inject: no sequence or no features");
    di_status st = dspark_room(m, s, s->kv.n_tokens + n, err);
    if (st != DI_OK) return st;
    dsv4_dspark_inject(m->v4, s, features, n);
    return DI_OK;
}
di_status model_dspark_draft(model *m, model_seq *const *seqs, const int32_t *anchors, int n_items,
                             float *logits, float *confidence, int32_t *drafts, di_error **err)
{
    const int block = model_dspark_block(m);
    if (!block) return di_error_setf(err, DI_ERR_UNSUPPORTED, "the model has no DSpark head");
    if (!seqs || !anchors || n_items < 1 || !logits || !confidence || !drafts)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "model_dspark_draft: no sequences or no outputs");
    if (block > m->opt.n_batch)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "model_dspark_draft: n_batch %lld is below DSpark's block of %d "
                             "tokens (a block runs in one pass)",
                             (long long)m->opt.n_batch, block);
    for (int i = 0; i < n_items; i++) {
        if (!seqs[i])
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "model_dspark_draft: sequence %d is NULL", i);
        if (anchors[i] < 0 || anchors[i] >= (int32_t)m->cfg.n_vocab)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "model_dspark_draft: anchor %d of sequence %d is outside the "
                                 "vocabulary of %u",
                                 anchors[i], i, m->cfg.n_vocab);
        di_status st = dspark_room(m, seqs[i], seqs[i]->kv.n_tokens + block, err);
        if (st != DI_OK) return st;
    }
    dsv4_dspark_draft(m->v4, seqs, anchors, n_items, logits, confidence, drafts);
    return DI_OK;
}
di_status model_mtp_forward_batch(model *m, const model_mtp_item *items, int n_items,
                                  const float *hidden, float *logits, float *hidden_out,
                                  di_error **err)
{
    if (!model_mtp_layers(m))
        return di_error_setf(err, DI_ERR_UNSUPPORTED, "the model has no MTP layer");
    if (n_items < 1 || !items || !hidden)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "model_mtp_forward_batch: no items or hidden rows");
    int64_t n = 0;
    for (int i = 0; i < n_items; i++) {
        const model_mtp_item *it = &items[i];
        if (!it->seq || !it->tokens || it->n_tokens < 1 || it->pos0 < 1)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "items[%d]: an empty item or a position before 1", i);
        /* (the pairs' positions are their next tokens': n_ctx at most) */
        if (it->n_tokens > m->opt.n_batch || it->pos0 > m->opt.n_ctx - it->n_tokens + 1)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "items[%d]: %lld pairs at position %lld exceed n_batch %lld or "
                                 "the context of %lld",
                                 i, (long long)it->n_tokens, (long long)it->pos0,
                                 (long long)m->opt.n_batch, (long long)m->opt.n_ctx);
        if (it->seq->kv.n_tokens + it->n_tokens > (int64_t)it->seq->kv.n_blocks * MODEL_KV_BLOCK)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "items[%d]: %lld pairs after %lld exceed its reserved room", i,
                                 (long long)it->n_tokens, (long long)it->seq->kv.n_tokens);
        for (int64_t t = 0; t < it->n_tokens; t++)
            if (it->tokens[t] < 0 || (uint32_t)it->tokens[t] >= m->cfg.n_vocab)
                return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                     "items[%d].tokens[%lld] = %d is not a token id of this model",
                                     i, (long long)t, (int)it->tokens[t]);
        n += it->n_tokens;
    }
    if (n > m->opt.n_batch)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "%lld MTP pairs in one step exceed n_batch %lld", (long long)n,
                             (long long)m->opt.n_batch);
    if (m->v4)
        dsv4_mtp_forward_batch(m->v4, items, n_items, n, hidden, logits, hidden_out);
    else
        dsv3_mtp_forward_batch(m->ds, items, n_items, n, hidden, logits, hidden_out);
    return DI_OK;
}
di_status model_mtp_logits(model *m, const float *hidden, int64_t n, float *logits, di_error **err)
{
    if (!model_mtp_layers(m))
        return di_error_setf(err, DI_ERR_UNSUPPORTED, "the model has no MTP layer");
    if (!hidden || !logits || n < 1)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "model_mtp_logits: no rows");
    if (m->v4)
        dsv4_mtp_logits(m->v4, hidden, n, logits);
    else
        dsv3_mtp_logits(m->ds, hidden, n, logits);
    return DI_OK;
}
size_t model_kv_bytes_per_token(const model *m)
{
    if (m->v4) return dsv4_kv_bytes_per_token(m->v4);
    return m->ds ? dsv3_kv_bytes_per_token(m->ds) : m->be->ops->kv_bytes_per_token(m->kv);
}

di_status model_seq_create(model *m, model_seq **out)
{
    model_seq *s = calloc(1, sizeof *s);
    if (!s) return DI_ERR_OUT_OF_MEMORY;
    if (m->v4) {
        di_status st = dsv4_seq_init(m->v4, s);
        if (st != DI_OK) {
            free(s);
            return st;
        }
        *out = s;
        return DI_OK;
    }
    if (kv_pool_seq_init(model_pool(m), &s->kv, m->opt.n_ctx) != DI_OK) {
        free(s);
        return DI_ERR_OUT_OF_MEMORY;
    }
    *out = s;
    return DI_OK;
}

void model_seq_free(model *m, model_seq *s)
{
    if (!s) return;
    if (m->v4)
        dsv4_seq_release(m->v4, s);
    else
        kv_pool_seq_free(model_pool(m), &s->kv);
    free(s);
}

int64_t model_seq_n_past(const model_seq *s)
{
    return s->kv.n_tokens;
}

void model_seq_reset(model *m, model_seq *s)
{
    kv_pool_seq_reset(model_pool(m), &s->kv);
}

di_status model_seq_reserve(model *m, model_seq *s, int64_t n_tokens)
{
    if (n_tokens > m->opt.n_ctx) return DI_ERR_CONTEXT_LENGTH;
    if (m->v4) {
        di_status st = dsv4_seq_reserve(m->v4, s, n_tokens);
        if (st != DI_OK) return st;
    }
    return kv_pool_seq_reserve(model_pool(m), &s->kv, n_tokens);
}
void model_seq_truncate(model *m, model_seq *s, int64_t n_tokens)
{
    if (m->v4) {
        dsv4_seq_truncate(m->v4, s, n_tokens);
        return;
    }
    kv_pool_seq_truncate(model_pool(m), &s->kv, n_tokens);
}

int64_t model_prefix_probe(const model *m, const int32_t *tokens, int64_t n_tokens,
                           int32_t *n_cached_blocks)
{
    return kv_pool_probe(model_pool_c(m), tokens, n_tokens, n_cached_blocks);
}
int64_t model_seq_match_prefix(model *m, model_seq *s, const int32_t *tokens, int64_t n_tokens)
{
    return kv_pool_seq_match(model_pool(m), &s->kv, tokens, n_tokens);
}
int64_t model_seq_fork(model *m, model_seq *dst, const model_seq *src, int64_t n_tokens)
{
    if (m->v4) return 0;
    return kv_pool_seq_fork(model_pool(m), &dst->kv, &src->kv, n_tokens);
}
void model_seq_publish(model *m, model_seq *s, const int32_t *tokens)
{
    if (m->v4) return; /* a V4 cache is its sequence's own: nothing to match later */
    kv_pool_seq_publish(model_pool(m), &s->kv, tokens);
}
uint64_t model_kv_fingerprint_of(const model *m)
{
    return model_pool_c(m)->fingerprint;
}
uint64_t model_kv_disk_fingerprint(const model *m)
{
    uint64_t c = model_weights_content_digest(m->w);
    uint64_t k = model_kv_fingerprint_of(m) ^ (c << 17 | c >> 47);
    return k ? k : 1;
}
void model_prefix_keys(const model *m, const int32_t *tokens, int64_t n_blocks, uint64_t *keys)
{
    kv_pool_keys(model_pool_c(m), tokens, n_blocks, keys);
}
int model_prefix_has(const model *m, uint64_t key)
{
    return kv_pool_has(model_pool_c(m), key);
}
size_t model_kv_block_bytes(const model *m)
{
    return m->v4 ? 0 : m->be->ops->kv_block_bytes(model_kv(m));
}
int model_kv_adopt(model *m, uint64_t key, const void *data)
{
    if (m->v4) return -1;
    int32_t b = kv_pool_adopt(model_pool(m), key);
    if (b < 0) return -1;
    m->be->ops->kv_block_write(m->be, model_kv(m), b, data);
    return 0;
}
/* The pool's callbacks: the block's contents read into the model's staging
 * buffer, handed to the host's hook. */
static void on_evict(void *user, int32_t block, uint64_t key)
{
    model *m = user;
    m->be->ops->kv_block_read(m->be, model_kv(m), block, m->hook_buf);
    m->hook_evicted(m->hook_user, key, m->hook_buf);
}
static void on_publish(void *user, int32_t block, uint64_t key)
{
    model *m = user;
    m->be->ops->kv_block_read(m->be, model_kv(m), block, m->hook_buf);
    m->hook_published(m->hook_user, key, m->hook_buf);
}
di_status model_kv_set_hooks(model *m, model_kv_hook evicted, model_kv_hook published, void *user)
{
    kv_pool *p = model_pool(m);
    free(m->hook_buf);
    m->hook_buf = NULL;
    p->on_evict = p->on_publish = NULL;
    if (!evicted && !published) return DI_OK;
    if (m->v4) return DI_ERR_UNSUPPORTED; /* no blocks to move (deepseek_v4.h) */
    if (!(m->hook_buf = malloc(model_kv_block_bytes(m)))) return DI_ERR_OUT_OF_MEMORY;
    m->hook_evicted = evicted;
    m->hook_published = published;
    m->hook_user = user;
    p->on_evict = evicted ? on_evict : NULL;
    p->on_publish = published ? on_publish : NULL;
    p->evict_user = m;
    return DI_OK;
}
int32_t model_kv_blocks_cached(const model *m)
{
    return kv_pool_cached(model_pool_c(m));
}
int64_t model_kv_blocks_evicted(const model *m)
{
    return model_pool_c(m)->n_evicted;
}

int32_t model_kv_blocks_total(const model *m)
{
    if (m->v4) return dsv4_pool(m->v4)->n_blocks;
    return m->be->ops->kv_blocks_total(model_kv(m));
}
int32_t model_kv_blocks_free(const model *m)
{
    return kv_pool_available(model_pool_c(m));
}
int32_t model_kv_blocks_for(int64_t n_tokens)
{
    return (int32_t)((n_tokens + MODEL_KV_BLOCK - 1) / MODEL_KV_BLOCK);
}
int64_t model_n_batch(const model *m)
{
    return m->opt.n_batch;
}

/* One step: the items' tokens stacked as rows [0, n) (n <= n_batch), item i at
 * rows [row0_i, row0_i + n_tokens_i) with positions n_past_i... Logits: one row
 * per item with want_logits, or with all_logits (a single item) every row. */
static void forward_step(model *m, const model_batch_item *items, int n_items, int64_t n,
                         float *logits, int all_logits)
{
    const model_config *c = &m->cfg;
    const int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim,
                  KV = (int64_t)c->n_head_kv * c->head_dim, F = c->n_ff;
    backend *be = m->be;
    const backend_ops *op = be->ops;
    int64_t row = 0;
    for (int i = 0; i < n_items; i++) {
        op->embed(be, m->tok_embd, items[i].tokens, items[i].n_tokens, m->x + row * E, E);
        for (int64_t t = 0; t < items[i].n_tokens; t++, row++)
            m->pos[row] = items[i].seq->kv.n_tokens + t;
    }
    const float scale = 1.0f / sqrtf((float)c->head_dim), eps = c->rms_norm_eps;
    const int hd = (int)c->head_dim;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        const layer *L = &m->layers[l];
        op->rmsnorm(be, m->x, E, L->attn_norm, m->h, E, n, E, eps);
        const backend_matrix *wqkv[3] = {L->wq, L->wk, L->wv};
        const float *bqkv[3] = {L->bq, L->bk, L->bv};
        float *qkv[3] = {m->q, m->k, m->v};
        op->matmul(be, 3, wqkv, bqkv, m->h, n, qkv);
        op->rope(be, m->rope, m->q, n, Q, (int)c->n_head, hd, m->pos);
        op->rope(be, m->rope, m->k, n, KV, (int)c->n_head_kv, hd, m->pos);
        int64_t r0 = 0;
        for (int i = 0; i < n_items; i++) {
            backend_kv_seq *s = &items[i].seq->kv;
            int64_t nt = items[i].n_tokens;
            op->kv_store(be, m->kv, s, (int)l, s->n_tokens, nt, m->k + r0 * KV, m->v + r0 * KV);
            op->attention(be, m->kv, s, (int)l, m->q + r0 * Q, (int)c->n_head, s->n_tokens, nt,
                          scale, m->attn + r0 * Q);
            r0 += nt;
        }
        op->matmul(be, 1, &L->wo, NULL, m->attn, n, &m->h);
        op->add(be, m->x, m->h, n * E);
        op->rmsnorm(be, m->x, E, L->ffn_norm, m->h, E, n, E, eps);
        const backend_matrix *wgu[2] = {L->w_gate, L->w_up};
        float *gu[2] = {m->gate, m->up};
        op->matmul(be, 2, wgu, NULL, m->h, n, gu);
        op->silu_mul(be, m->gate, m->up, n * F);
        op->matmul(be, 1, &L->w_down, NULL, m->gate, n, &m->h);
        op->add(be, m->x, m->h, n * E);
    }
    for (int i = 0; i < n_items; i++) items[i].seq->kv.n_tokens += items[i].n_tokens;
    if (logits)
        model_logits(be, m->output, m->output_norm, eps, E, m->x, m->h, items, n_items, n, logits,
                     all_logits);
}

di_status model_forward_batch(model *m, const model_batch_item *items, int n_items, float *logits,
                              di_error **err)
{
    if (!m || !items || n_items <= 0)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "model_forward_batch: no items");
    if (model_engram_needs_vocab(m)) return engram_unready(err);
    int64_t total = 0;
    for (int i = 0; i < n_items; i++) {
        const model_batch_item *it = &items[i];
        if (!it->seq || !it->tokens || it->n_tokens <= 0)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "items[%d]: no tokens", i);
        if (it->want_logits < 0 || it->want_logits > it->n_tokens)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "items[%d]: want_logits %d is not in [0, %lld]", i,
                                 it->want_logits, (long long)it->n_tokens);
        for (int j = 0; j < i; j++)
            if (items[j].seq == it->seq)
                return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                     "items[%d]: its sequence is also "
                                     "items[%d]'s",
                                     i, j);
        for (int64_t t = 0; t < it->n_tokens; t++)
            if (it->tokens[t] < 0 || (uint32_t)it->tokens[t] >= m->cfg.n_vocab)
                return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                     "items[%d].tokens[%lld] = %d is not a token id of this model "
                                     "(vocabulary of %u)",
                                     i, (long long)t, (int)it->tokens[t], m->cfg.n_vocab);
        int64_t end = it->seq->kv.n_tokens + it->n_tokens;
        /* the last block may have slots past n_ctx: the context is the limit */
        if (end > m->opt.n_ctx)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "items[%d]: %lld tokens exceed the context of %lld", i,
                                 (long long)end, (long long)m->opt.n_ctx);
        if (model_kv_blocks_for(end) > it->seq->kv.n_blocks)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "items[%d]: no KV cache blocks reserved for %lld tokens", i,
                                 (long long)end);
        total += it->n_tokens;
    }
    if (total > m->opt.n_batch)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "%lld tokens in one step exceed n_batch %lld", (long long)total,
                             (long long)m->opt.n_batch);
    if (m->ds)
        dsv3_forward_batch(m->ds, items, n_items, total, logits);
    else if (m->v4)
        dsv4_forward_batch(m->v4, items, n_items, total, logits);
    else
        forward_step(m, items, n_items, total, logits, 0);
    return DI_OK;
}

static void step_dense(void *arch, const model_batch_item *items, int n_items, int64_t n,
                       float *logits, int all_logits)
{
    forward_step(arch, items, n_items, n, logits, all_logits);
}

di_status model_forward(model *m, const int32_t *tokens, int64_t n_tokens, float *logits,
                        int all_logits, di_error **err)
{
    if (!m || (!tokens && n_tokens > 0))
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "model_forward: NULL argument");
    if (n_tokens <= 0) return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "no tokens to run");
    if (model_engram_needs_vocab(m)) return engram_unready(err);
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= m->cfg.n_vocab)
            return di_error_setf(
                err, DI_ERR_INVALID_ARGUMENT,
                "tokens[%lld] = %d is not a token id of this model (vocabulary of %u)",
                (long long)i, (int)tokens[i], m->cfg.n_vocab);
    if (m->ds) return dsv3_forward(m->ds, tokens, n_tokens, logits, all_logits, err);
    if (m->v4) return dsv4_forward(m->v4, tokens, n_tokens, logits, all_logits, err);
    return model_forward_chunked(&m->pool, &m->seq, &m->opt, m->cfg.n_vocab, tokens, n_tokens,
                                 logits, all_logits, step_dense, m, err);
}
