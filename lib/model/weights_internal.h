/* What the two loaders (weights_gguf.c, weights_hf.c) share with weights.c: the
 * model_weights object, its tensor table and the checks every model passes. Not
 * for the forward pass: it reads model_weights through weights.h. */
#ifndef DI_MODEL_WEIGHTS_INTERNAL_H
#define DI_MODEL_WEIGHTS_INTERNAL_H

#include "util/error.h"
#include "model/gguf.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "util/hashmap.h"

struct model_weights {
    model_config config;
    model_tensor *tensors; /* [n_tensors]; names owned (malloc'd) */
    size_t n_tensors, cap_tensors;
    di_bytes_map by_name;      /* GGUF name -> index in tensors */
    gguf_file *gguf;           /* the GGUF file, when opened from one */
    safetensors_file **shards; /* the safetensors files, when opened from a directory */
    char **shard_paths;        /* [n_shards] their paths */
    size_t n_shards;
    void **owned; /* aligned copies of tensors whose data was misaligned in the map */
    size_t n_owned;
    size_t n_file_tensors; /* tensors [0, n) are the file's; later ones are views
                              the loader derived (a GGUF's split experts) */
    char name[128];        /* model_weights_name */
    char architecture[64]; /* model_weights_architecture */
};

/* Append a tensor named name[0, name_len) (a GGUF name). A name already present
 * is DI_ERR_MODEL_FORMAT naming `file`. ne[n_dims..4) must be 1. */
di_status mw_add_tensor(model_weights *w, const char *file, const char *name, size_t name_len,
                        model_dtype dtype, uint32_t n_dims, const int64_t ne[4], const void *data,
                        size_t n_bytes, di_error **err);

/* The configuration checks and the tensors every Llama/Qwen2 model needs, with
 * their shapes, checked after a loader filled w; `path` names the model in
 * messages. */
/* Copy s[0, n) into dst[size] as a C string, cut short at a character
 * boundary when it does not fit (a cut UTF-8 sequence would make the JSON of
 * di_engine_model_info drop the whole name). */
void mw_copy_name(char *dst, size_t size, const char *s, size_t n);
di_status mw_validate(model_weights *w, const char *path, di_error **err);

/* DeepSeek's MoE fields checked alike for both loaders (experts, top-k,
 * groups, noaux_tc's group rule; DI_ERR_MODEL_FORMAT naming `file`); a model
 * without routed experts gets every layer dense. */
di_status mw_check_moe(model_config *m, const char *file, di_error **err);
di_status mw_open_gguf(model_weights *w, const char *path, di_error **err);

/* The GGUF metadata key "<arch>.<key>" as an unsigned integer or a float:
 * DI_ERR_MODEL_FORMAT naming the key (and `path`) when it is missing or of
 * another type. */
di_status mw_gguf_need_u32(const gguf_file *f, const char *path, const char *arch, const char *key,
                           uint32_t *out, di_error **err);
di_status mw_gguf_need_f32(const gguf_file *f, const char *path, const char *arch, const char *key,
                           float *out, di_error **err);

/* llama.cpp's DeepSeek files hold each layer's routed experts stacked
 * ("blk.N.ffn_{gate,up,down}_exps.weight", ne = {n_in, n_out, n_expert}):
 * split for layers [first, end) into one 2-D tensor per expert, named by
 * expert_name (kind k: 0 gate, 1 up, 2 down) — views of the stacked rows, or,
 * for ggml's MXFP4 (MODEL_DTYPE_MXFP4_GGML), a repacked MODEL_DTYPE_MXFP4 copy
 * with its f32 scales ("<name>.scale") attached. A layer without them is
 * skipped unless required. Errors: DI_ERR_MODEL_FORMAT (a wrong shape, an
 * E8M0 NaN scale, a required tensor missing), DI_ERR_OUT_OF_MEMORY. */
typedef void (*mw_expert_name_fn)(char *out, size_t size, uint32_t layer, int kind, int64_t e);
di_status mw_gguf_split_experts(model_weights *w, const char *path, uint32_t first, uint32_t end,
                                int required, mw_expert_name_fn expert_name, di_error **err);

/* DeepSeek-V4's fields checked alike for both loaders (head layout, mHC,
 * compression, indexer and MoE ranges; DI_ERR_MODEL_FORMAT naming `file`),
 * then mw_check_moe. */
di_status mw_check_v4(model_config *m, const char *file, di_error **err);

/* llama.cpp's deepseek4 GGUFs (weights_gguf_dsv4.c). mw_gguf_dsv4_name: the
 * name deepseek_v4.c reads for the GGUF tensor name gguf[0, n) into out
 * (1), or 0 when the name is not renamed. mw_gguf_read_deepseek4: the
 * <arch>.* metadata into w's config (n_embd, n_layer, n_head, n_ctx_train
 * read before): arch "deepseek4", or "dflash" for a DSpark GGUF (its stages
 * as n_layer sliding layers, cfg.v4.n_dspark = n_layer and the DSpark keys
 * set). mw_gguf_dsv4_experts: mw_gguf_split_experts under
 * deepseek_v4.c's names (the main layers', or an MTP GGUF's NextN layer's:
 * convert_hf_to_gguf.py --mtp writes it alone), and MXFP4 refused anywhere
 * but the routed experts. */
int mw_gguf_dsv4_name(const char *gguf, size_t n, char *out, size_t size);
di_status mw_gguf_read_deepseek4(model_weights *w, const gguf_file *f, const char *path,
                                 const char *arch, di_error **err);
di_status mw_gguf_dsv4_experts(model_weights *w, const char *path, di_error **err);
di_status mw_open_hf(model_weights *w, const char *dir, di_error **err);

/* The config defaults before a loader reads the file: no RoPE scaling, factor 1,
 * YaRN betas 32/1 and mscale 1, llama3 factors 1/4, unknown BOS/EOS. */
void mw_config_defaults(model_config *c);

#endif
