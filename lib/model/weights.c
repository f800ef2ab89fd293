/* model_weights: the tensor table, lookups and the checks every model passes
 * (see weights.h). The loaders live in weights_gguf.c and weights_hf.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <sys/stat.h>

#include "util/error.h"
#include "util/file.h"
#include "model/weights_internal.h"

void mw_config_defaults(model_config *c)
{
    memset(c, 0, sizeof *c);
    c->rope_theta = 10000.0f;
    c->rope_scaling = MODEL_ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    c->yarn_beta_fast = 32.0f;
    c->yarn_beta_slow = 1.0f;
    c->yarn_mscale = 1.0f;
    c->yarn_mscale_all_dim = 0.0f;
    c->yarn_attn_factor = 1.0f;
    c->yarn_truncate = 1;
    c->llama3_low_freq_factor = 1.0f;
    c->llama3_high_freq_factor = 4.0f;
    c->bos_token_id = -1;
    c->eos_token_id = -1;
}

di_status mw_add_tensor(model_weights *w, const char *file, const char *name, size_t name_len,
                        model_dtype dtype, uint32_t n_dims, const int64_t ne[4], const void *data,
                        size_t n_bytes, di_error **err)
{
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 256;
        model_tensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", file);
        w->tensors = t;
        w->cap_tensors = cap;
    }
    if (name_len > 1024)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: tensor name of %zu bytes is too long",
                             file, name_len);
    int put = di_bytes_map_put(&w->by_name, name, name_len, (int32_t)w->n_tensors);
    if (put < 0) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", file);
    if (put == 1)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: tensor '%.*s' appears twice", file,
                             (int)name_len, name);
    char *copy = malloc(name_len + 1);
    if (!copy) return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory loading %s", file);
    memcpy(copy, name, name_len);
    copy[name_len] = '\0';
    model_tensor *t = &w->tensors[w->n_tensors++];
    t->name = copy;
    t->dtype = dtype;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = ne[d];
    t->data = data;
    t->n_bytes = n_bytes;
    t->scale = NULL;
    t->stored = NULL;
    return DI_OK;
}

static const char *dims_str(char *buf, size_t size, uint32_t n_dims, const int64_t *ne)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t d = 0; d < n_dims && used < size; d++) {
        int n = snprintf(buf + used, size - used, "%s%lld", d ? ", " : "{", (long long)ne[d]);
        if (n < 0) break;
        used += (size_t)n;
    }
    if (used < size) snprintf(buf + used, size - used, "}");
    return buf;
}

di_status model_weights_require(const model_weights *w, const char *name, uint32_t n_dims,
                                const int64_t *ne, const model_tensor **out, di_error **err)
{
    *out = NULL;
    const model_tensor *t = model_weights_get(w, name);
    if (!t) return di_error_setf(err, DI_ERR_MODEL_FORMAT, "tensor '%s' is missing", name);
    int same = t->n_dims == n_dims;
    for (uint32_t d = 0; same && d < n_dims; d++) same = t->ne[d] == ne[d];
    if (!same) {
        char want[96], got[96];
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "tensor '%s' has shape %s, expected %s",
                             name, dims_str(got, sizeof got, t->n_dims, t->ne),
                             dims_str(want, sizeof want, n_dims, ne));
    }
    *out = t;
    return DI_OK;
}

static di_status require(const model_weights *w, const char *path, const char *name,
                         uint32_t n_dims, int64_t ne0, int64_t ne1, di_error **err)
{
    const model_tensor *t;
    const int64_t ne[4] = {ne0, ne1, 1, 1};
    di_error *e = NULL;
    if (model_weights_require(w, name, n_dims, ne, &t, &e) == DI_OK) return DI_OK;
    di_status st = di_error_setf(err, di_error_status(e), "%s: %s", path, di_error_message(e));
    di_error_free(e);
    return st;
}

di_status mw_check_moe(model_config *m, const char *file, di_error **err)
{
    if (m->n_expert) {
        if (!m->n_ff_exp || !m->n_expert_used || m->n_expert_used > m->n_expert || !m->n_group ||
            m->n_expert % m->n_group != 0 || !m->topk_group || m->topk_group > m->n_group ||
            m->n_expert > 4096 || m->n_expert_used > 64)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: the MoE fields are inconsistent (n_routed_experts %u, "
                                 "num_experts_per_tok %u, n_group %u, topk_group %u, "
                                 "moe_intermediate_size %u)",
                                 file, m->n_expert, m->n_expert_used, m->n_group, m->topk_group,
                                 m->n_ff_exp);
        if (m->topk_method == MODEL_TOPK_NOAUX_TC &&
            (m->n_expert / m->n_group < 2 ||
             (uint64_t)m->n_expert_used > (uint64_t)m->topk_group * (m->n_expert / m->n_group)))
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: noaux_tc routing needs at least 2 experts per group and "
                                 "num_experts_per_tok <= topk_group * experts per group",
                                 file);
    }
    if (m->n_layer_dense_lead > m->n_layer || !m->n_expert) m->n_layer_dense_lead = m->n_layer;
    return DI_OK;
}

di_status mw_validate(model_weights *w, const char *path, di_error **err)
{
    model_config *c = &w->config;
    if (!c->head_dim && c->n_head) c->head_dim = c->n_embd / c->n_head;
    if (!c->n_head_kv) c->n_head_kv = c->n_head;
    struct {
        const char *what;
        uint32_t v, max;
    } limits[] = {
        {"vocabulary size", c->n_vocab, 1u << 24},
        {"hidden size", c->n_embd, 1u << 17},
        {"layer count", c->n_layer, 4096},
        {"attention head count", c->n_head, 4096},
        {"key/value head count", c->n_head_kv, 4096},
        {"head dimension", c->head_dim, 4096},
        {"feed-forward size", c->n_ff, 1u << 20},
    };
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
        if (limits[i].v == 0 || limits[i].v > limits[i].max)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: %s %u is out of range (1 to %u)",
                                 path, limits[i].what, limits[i].v, limits[i].max);
    if (c->n_head % c->n_head_kv != 0)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: %u attention heads is not a multiple of %u key/value heads", path,
                             c->n_head, c->n_head_kv);
    if (c->head_dim % 2 != 0)
        return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                             "%s: head dimension %u is odd (RoPE needs pairs)", path, c->head_dim);
    if (!(c->rms_norm_eps > 0.0f && c->rms_norm_eps < 1.0f))
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: rms_norm_eps %g is out of range (0, 1)",
                             path, (double)c->rms_norm_eps);
    if (!(c->rope_theta > 0.0f))
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: rope_theta %g is not positive", path,
                             (double)c->rope_theta);
    if (!(c->rope_factor > 0.0f))
        return di_error_setf(err, DI_ERR_MODEL_FORMAT, "%s: rope scaling factor %g is not positive",
                             path, (double)c->rope_factor);

    const int64_t embd = c->n_embd, vocab = c->n_vocab, ff = c->n_ff;
    const int64_t q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
    /* A layer the config does not count would be dropped without a word (a
     * num_hidden_layers or block_count below the file's): refused, named. */
    for (size_t i = 0; i < w->n_tensors; i++) {
        const char *name = w->tensors[i].name;
        if (strncmp(name, "blk.", 4) != 0 || name[4] < '0' || name[4] > '9') continue;
        char *end;
        unsigned long layer = strtoul(name + 4, &end, 10);
        if (*end == '.' && layer >= (unsigned long)c->n_layer + c->n_nextn_layer)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: tensor %s is in layer %u, past the %u layers (and %u MTP "
                                 "layers) the config declares",
                                 path, name, (unsigned)layer, c->n_layer, c->n_nextn_layer);
    }
    c->tie_embeddings = model_weights_get(w, "output.weight") == NULL;
    di_status st;
    /* a DSpark GGUF (llama.cpp's dflash) reads its model's embedding and LM
     * head: deepseek_v4_dspark.c requires its own tensors when it attaches */
    if (strcmp(w->architecture, "dflash") == 0) return DI_OK;
    if ((st = require(w, path, "token_embd.weight", 2, embd, vocab, err)) != DI_OK) return st;
    if ((st = require(w, path, "output_norm.weight", 1, embd, 1, err)) != DI_OK) return st;
    if (!c->tie_embeddings &&
        (st = require(w, path, "output.weight", 2, embd, vocab, err)) != DI_OK)
        return st;
    /* DeepSeek layers differ per layer (dense or MoE, with or without q LoRA):
     * deepseek_v3.c requires each tensor with its shape when it loads. */
    int dense_llama = c->arch == MODEL_ARCH_LLAMA || c->arch == MODEL_ARCH_QWEN2;
    for (uint32_t l = 0; dense_llama && l < c->n_layer; l++) {
        static const struct {
            const char *name;
            int kind; /* 0 {embd}, 1 {embd,q}, 2 {embd,kv}, 3 {q,embd}, 4 {embd,ff}, 5 {ff,embd},
                         6 {q}, 7 {kv} */
            int bias;
        } per_layer[] = {
            {"attn_norm.weight", 0, 0}, {"attn_q.weight", 1, 0},      {"attn_k.weight", 2, 0},
            {"attn_v.weight", 2, 0},    {"attn_output.weight", 3, 0}, {"ffn_norm.weight", 0, 0},
            {"ffn_gate.weight", 4, 0},  {"ffn_up.weight", 4, 0},      {"ffn_down.weight", 5, 0},
            {"attn_q.bias", 6, 1},      {"attn_k.bias", 7, 1},        {"attn_v.bias", 7, 1},
        };
        for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
            if (per_layer[i].bias && !c->attn_qkv_bias) continue;
            char name[64];
            snprintf(name, sizeof name, "blk.%u.%s", l, per_layer[i].name);
            int64_t shapes[8][3] = {{1, embd, 1},  {2, embd, q},  {2, embd, kv}, {2, q, embd},
                                    {2, embd, ff}, {2, ff, embd}, {1, q, 1},     {1, kv, 1}};
            const int64_t *s = shapes[per_layer[i].kind];
            if ((st = require(w, path, name, (uint32_t)s[0], s[1], s[2], err)) != DI_OK) return st;
        }
    }
    /* fp8 weights need their block scales. */
    for (size_t i = 0; i < w->n_tensors; i++) {
        const model_tensor *t = &w->tensors[i];
        if (t->dtype != MODEL_DTYPE_FP8_E4M3) continue;
        if (!t->scale)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: fp8 tensor '%s' has no weight_scale_inv", path, t->name);
    }
    return DI_OK;
}

/* 1 (with the error set) when path is a file of a Hugging Face folder —
 * config.json or a safetensors shard or index beside a config.json — which a
 * user may name instead of the folder the model is. */
static int hf_folder_file(const char *path, di_error **err)
{
    size_t n = strlen(path);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    static const char *const ends[] = {".safetensors", ".safetensors.index.json"};
    int hf = strcmp(base, "config.json") == 0;
    for (size_t i = 0; i < 2 && !hf; i++)
        hf = n > strlen(ends[i]) && strcmp(path + n - strlen(ends[i]), ends[i]) == 0;
    if (!hf) return 0;
    size_t dir_len = (size_t)(base - path);
    char config[4096];
    struct stat sb;
    if (snprintf(config, sizeof config, "%.*sconfig.json", (int)dir_len, path) >=
            (int)sizeof config ||
        stat(config, &sb) != 0)
        return 0;
    di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                  "%s is a file of a Hugging Face folder: name the folder (%.*s) as the model",
                  path, dir_len ? (int)dir_len - 1 : 1, dir_len ? path : ".");
    return 1;
}

di_status model_weights_open(const char *path, model_weights **out, di_error **err)
{
    if (out) *out = NULL;
    if (!path || !out)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "model_weights_open: NULL %s",
                             path ? "out" : "path");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return di_error_setf(err, DI_ERR_IO, "%s: cannot open: no such file or directory", path);
    model_weights *w = calloc(1, sizeof *w);
    if (!w || di_bytes_map_init(&w->by_name, 512) != 0) {
        free(w);
        return di_error_setf(err, DI_ERR_OUT_OF_MEMORY, "out of memory opening %s", path);
    }
    mw_config_defaults(&w->config);
    di_status st = S_ISDIR(sb.st_mode)         ? mw_open_hf(w, path, err)
                   : hf_folder_file(path, err) ? DI_ERR_INVALID_ARGUMENT
                                               : mw_open_gguf(w, path, err);
    if (st == DI_OK) st = mw_validate(w, path, err);
    if (st != DI_OK) {
        model_weights_close(w);
        return st;
    }
    if (!w->name[0]) { /* the file's or folder's own name, without .gguf */
        char *name = di_path_name(path);
        if (name) mw_copy_name(w->name, sizeof w->name, name, strlen(name));
        free(name);
    }
    *out = w;
    return DI_OK;
}

void model_weights_close(model_weights *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_tensors; i++) free((char *)w->tensors[i].name);
    free(w->tensors);
    di_bytes_map_free(&w->by_name);
    gguf_close(w->gguf);
    for (size_t i = 0; i < w->n_shards; i++) {
        safetensors_close(w->shards[i]);
        free(w->shard_paths[i]);
    }
    free(w->shard_paths);
    free(w->shards);
    for (size_t i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    free(w);
}

const model_config *model_weights_config(const model_weights *w)
{
    return &w->config;
}

void mw_copy_name(char *dst, size_t size, const char *s, size_t n)
{
    const char *nul = memchr(s, 0, n);
    if (nul) n = (size_t)(nul - s);
    size_t m = n < size - 1 ? n : size - 1;
    /* a continuation byte right after the cut: back off to its lead byte */
    while (m > 0 && m < n && ((unsigned char)s[m] & 0xC0) == 0x80) m--;
    memcpy(dst, s, m);
    dst[m] = 0;
}

const char *model_weights_name(const model_weights *w)
{
    return w->name;
}

const char *model_weights_architecture(const model_weights *w)
{
    return w->architecture;
}

size_t model_weights_count(const model_weights *w)
{
    return w->n_tensors;
}

size_t model_weights_file_count(const model_weights *w)
{
    return w->n_file_tensors;
}

const model_tensor *model_weights_at(const model_weights *w, size_t i)
{
    return i < w->n_tensors ? &w->tensors[i] : NULL;
}

const char *model_dtype_name(model_dtype t)
{
    static const char *const names[] = {
        [MODEL_DTYPE_F32] = "F32",       [MODEL_DTYPE_F16] = "F16",
        [MODEL_DTYPE_BF16] = "BF16",     [MODEL_DTYPE_Q8_0] = "Q8_0",
        [MODEL_DTYPE_Q4_0] = "Q4_0",     [MODEL_DTYPE_Q4_1] = "Q4_1",
        [MODEL_DTYPE_Q4_K] = "Q4_K",     [MODEL_DTYPE_Q5_K] = "Q5_K",
        [MODEL_DTYPE_Q6_K] = "Q6_K",     [MODEL_DTYPE_FP8_E4M3] = "FP8_E4M3",
        [MODEL_DTYPE_Q5_0] = "Q5_0",     [MODEL_DTYPE_Q5_1] = "Q5_1",
        [MODEL_DTYPE_Q2_K] = "Q2_K",     [MODEL_DTYPE_Q3_K] = "Q3_K",
        [MODEL_DTYPE_IQ4_NL] = "IQ4_NL", [MODEL_DTYPE_IQ4_XS] = "IQ4_XS",
        [MODEL_DTYPE_I32] = "I32",       [MODEL_DTYPE_I64] = "I64",
        [MODEL_DTYPE_E8M0] = "E8M0",     [MODEL_DTYPE_MXFP4] = "MXFP4",
        [MODEL_DTYPE_I8] = "I8",         [MODEL_DTYPE_MXFP4_GGML] = "MXFP4",
    };
    return (unsigned)t < sizeof names / sizeof names[0] && names[t] ? names[t] : "?";
}

uint64_t model_weights_digest(const model_weights *w)
{
    enum { EDGE = 4096 };
    uint64_t h = XXH3_64bits(&w->n_tensors, sizeof w->n_tensors);
    for (size_t i = 0; i < w->n_tensors; i++) {
        const model_tensor *t = &w->tensors[i];
        uint64_t meta[7] = {(uint64_t)t->dtype,
                            (uint64_t)t->ne[0],
                            (uint64_t)t->ne[1],
                            (uint64_t)t->ne[2],
                            (uint64_t)t->ne[3],
                            (uint64_t)t->n_bytes,
                            XXH3_64bits(t->name, strlen(t->name))};
        h = XXH3_64bits_withSeed(meta, sizeof meta, h);
        size_t head = t->n_bytes < EDGE ? t->n_bytes : EDGE;
        h = XXH3_64bits_withSeed(t->data, head, h);
        if (t->n_bytes > (size_t)2 * EDGE)
            h = XXH3_64bits_withSeed((const char *)t->data + t->n_bytes - EDGE, EDGE, h);
    }
    return h;
}

uint64_t model_weights_content_digest(const model_weights *w)
{
    uint64_t h = model_weights_digest(w);
    for (size_t i = 0; i < w->n_tensors; i++)
        h = XXH3_64bits_withSeed(w->tensors[i].data, w->tensors[i].n_bytes, h);
    return h;
}

const model_tensor *model_weights_get(const model_weights *w, const char *name)
{
    int32_t i = di_bytes_map_get(&w->by_name, name, strlen(name));
    return i < 0 ? NULL : &w->tensors[i];
}
