/* Model weights and configuration, whatever file they came from.
 *
 * A model is opened from a GGUF file or a Hugging Face directory (config.json and
 * one or more *.safetensors files, sharded through model.safetensors.index.json).
 * Either way the forward pass sees the same thing: a model_config and tensors
 * named as GGUF names them (llama.cpp's tensor names: "token_embd.weight",
 * "blk.0.attn_q.weight", "output_norm.weight", …), with ggml's dimension order
 * (ne[0] is the fastest-varying dimension: a linear layer's weight is
 * ne = {in_features, out_features}), data used in place from the memory map.
 *
 * Loading is where untrusted bytes enter: every header, name, dtype, shape and
 * offset is validated before a tensor is handed out, and a tensor the
 * architecture needs but the file lacks, or has with the wrong shape, is an
 * error naming it.
 *
 * What the loaders decide, so the forward pass need not:
 * - tie_embeddings is 1 exactly when there is no "output.weight" (a Hugging Face
 *   model with tie_word_embeddings true has its lm_head.weight ignored, as
 *   transformers ties it);
 * - attn_qkv_bias is 1 exactly when "blk.0.attn_q.bias" exists;
 * - every tensor a Llama/Qwen2 layer uses is present with its shape (checked at
 *   open): token_embd {n_embd, n_vocab}, output_norm {n_embd}, output (untied)
 *   {n_embd, n_vocab}, blk.N.attn_norm / ffn_norm {n_embd}, attn_q {n_embd,
 *   n_head*head_dim}, attn_k / attn_v {n_embd, n_head_kv*head_dim}, attn_output
 *   {n_head*head_dim, n_embd}, ffn_gate / ffn_up {n_embd, n_ff}, ffn_down {n_ff,
 *   n_embd}, and the q/k/v biases when attn_qkv_bias;
 * - data is aligned to its element size (safetensors does not promise it: a
 *   misaligned tensor is copied); GGUF data is aligned to general.alignment.
 * Other tensors of the file are kept under their names (GGUF names as written;
 * Hugging Face names not in the mapping unchanged), e.g. a Llama GGUF's
 * "rope_freqs.weight" (llama3 RoPE scaling, which a GGUF stores as per-dimension
 * frequency divisors rather than as rope.scaling keys).
 *
 * A model_weights is immutable after model_weights_open: reads are thread-safe. */
#ifndef DI_MODEL_WEIGHTS_H
#define DI_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/types.h"
#include "deepinfer/deepinfer.h"

typedef enum model_arch {
    MODEL_ARCH_LLAMA = 0,
    MODEL_ARCH_QWEN2 = 1,
    MODEL_ARCH_DEEPSEEK_V3 = 2, /* MLA + DeepSeekMoE, sigmoid routing (deepseek_v3.c) */
    MODEL_ARCH_DEEPSEEK_V2 = 3, /* the same layers with softmax routing */
    MODEL_ARCH_DEEPSEEK_V4 = 4, /* hybrid CSA/HCA attention, mHC, hash MoE (deepseek_v4.c) */
} model_arch;

/* DeepSeek-V4's attention per layer (transformers' layer_types): a sliding
 * window only, or the window plus compressed sparse attention (CSA: entries
 * of compress_rate_csa tokens, the lightning indexer's top-k of them) or
 * heavily compressed attention (HCA: every entry of compress_rate_hca). */
typedef enum model_v4_attention {
    MODEL_V4_SLIDING = 0,
    MODEL_V4_CSA = 1,
    MODEL_V4_HCA = 2,
} model_v4_attention;

enum { MODEL_V4_MAX_LAYERS = 256 };

/* DeepSeek-V4's own fields (config.json's names, transformers' DeepseekV4Config). */
typedef struct model_config_v4 {
    uint8_t attention[MODEL_V4_MAX_LAYERS]; /* model_v4_attention of each layer */
    uint8_t hash_moe[MODEL_V4_MAX_LAYERS];  /* 1: the layer routes by tid2eid[token] */
    uint32_t sliding_window;                /* keys (pos - sliding_window, pos] */
    uint32_t compress_rate_csa, compress_rate_hca;
    float compress_rope_theta;           /* the compressed branches' RoPE base (its scaling in
                                            model_config's rope_* fields); the main one is
                                            rope_theta, unscaled */
    uint32_t hc_mult, hc_sinkhorn_iters; /* mHC streams and Sinkhorn rounds */
    float hc_eps;
    float swiglu_limit; /* the SwiGLU's clip (0: none) */
    uint32_t o_groups, o_lora_rank;
    uint32_t index_n_heads, index_head_dim, index_topk;
    /* DeepSeek-V4.1 (DeepseekV41ForCausalLM; docs/deepseek-v41.md): compressed
     * layers of ratio 1 or 2 (rate; 0 a window only; attention MODEL_V4_CSA or
     * _SLIDING), without overlap or position bias, indexer keys from the
     * compressed entries (KProject), the sources each layer takes its
     * compressed entries, indexer keys and top-k from (itself when not
     * shared), the first YOCO consumer (n_prefill_layer: the compressed-KV
     * sources from it on project its normed input), shifted mHC (no HC head),
     * and fp8 weights in fp8_block x fp8_block blocks (0: 128). */
    uint8_t v41;
    uint8_t rate[MODEL_V4_MAX_LAYERS];
    uint8_t kv_src[MODEL_V4_MAX_LAYERS], index_src[MODEL_V4_MAX_LAYERS],
        index_k_src[MODEL_V4_MAX_LAYERS];
    uint32_t n_prefill_layer;
    uint32_t fp8_block;
    /* The candidate-block top-k (candidate_source_layer_id cand_src;
     * cand_blocks 0: none): layer cand_src's indexer also picks cand_blocks
     * blocks of cand_block entries a row, within which every later top-k
     * source scores (backend_index_candidates). */
    uint32_t cand_src, cand_blocks, cand_block;
    /* Engram (V4.1; model/engram.h): the layers it runs before (engram_layer[k]
     * for k < n_engram, ascending as the config lists them), n-grams of 2 ..
     * engram_max_ngram tokens, engram_heads tables a size of engram_table_vocab
     * rows (before the primes), rows of engram_head_dim values; the compressed
     * vocabulary's size the config declares and the raw pad token ID. */
    uint32_t n_engram;
    uint8_t engram_layer[MODEL_V4_MAX_LAYERS];
    uint32_t engram_max_ngram, engram_heads, engram_head_dim, engram_table_vocab;
    uint32_t engram_compressed_vocab, engram_pad;
    /* DeepSeek-V4's DSpark draft head (DeepSeek-V4-Flash-DSpark, as llama.cpp's
     * dflash graph runs it; docs/deepseek-v4.md): n_dspark stages stored after
     * the main layers (mtp.K.*, sliding-window layers with scored MoE; 0: no
     * DSpark), blocks of dspark_block tokens (the anchor, then the noise token
     * dspark_noise), the streams after the main layers dspark_target[k] for k
     * < n_dspark_target (their mean over the mHC streams, concatenated) as the
     * target's features. DeepSeek-V4.1's (docs/deepseek-v41.md, as DeepInfer
     * runs it) takes each target layer's attention input instead, and its
     * stages route among dspark_n_expert experts, dspark_n_expert_used a
     * token (0: the main layers' counts), its Markov head of rank
     * dspark_markov_rank (0: read from the tensor). */
    uint32_t n_dspark, dspark_block, dspark_noise, n_dspark_target;
    uint8_t dspark_target[MODEL_V4_MAX_LAYERS];
    uint32_t dspark_n_expert, dspark_n_expert_used, dspark_markov_rank;
} model_config_v4;

/* How RoPE pairs the dimensions of a head: NORM rotates (x[2i], x[2i+1]) —
 * llama.cpp's LLAMA_ROPE_TYPE_NORM, used by Llama GGUFs, whose Q/K weights the
 * converter permuted; NEOX rotates (x[i], x[i + d/2]) — transformers'
 * rotate_half, used by Qwen2 everywhere and by Llama safetensors. */
typedef struct model_config {
    model_arch arch;
    uint32_t n_vocab;
    uint32_t n_embd; /* hidden size */
    uint32_t n_layer;
    uint32_t n_head;      /* query heads */
    uint32_t n_head_kv;   /* key/value heads (GQA) */
    uint32_t head_dim;    /* usually n_embd / n_head */
    uint32_t n_ff;        /* MLP intermediate size */
    uint32_t n_ctx_train; /* max_position_embeddings / context_length */
    float rms_norm_eps;
    float rope_theta; /* rope base frequency */
    model_rope_style rope_style;
    model_rope_scaling rope_scaling;
    float rope_factor;      /* scaling factor (1 when none) */
    uint32_t rope_orig_ctx; /* original_max_position_embeddings (YaRN, llama3) */
    float yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim;
    /* YaRN only: the factor cos and sin are multiplied by, always set by the
     * loader — config.json's attention_factor, else derived from rope_factor,
     * mscale and mscale_all_dim as transformers' _compute_yarn_parameters does
     * (0.1 ln(factor) + 1 unless both mscale and mscale_all_dim are given); in a
     * GGUF, rope.scaling.attn_factor (default 1) × (0.1 ln(factor) + 1), as
     * llama.cpp's rope applies it. 1 when rope_scaling is not YARN. */
    float yarn_attn_factor;
    /* YaRN only: 1 when the correction range [low, high] is rounded to whole
     * dimensions (floor, ceil) — transformers' "truncate", default true, and
     * llama.cpp's ggml_rope_yarn_corr_dims always. */
    int yarn_truncate;
    float llama3_low_freq_factor, llama3_high_freq_factor;
    int attn_qkv_bias;                  /* 1: q/k/v projections have biases (Qwen2) */
    int tie_embeddings;                 /* 1: no output.weight; the LM head is token_embd.weight */
    int32_t bos_token_id, eos_token_id; /* -1 when unknown */

    /* DeepSeek-V2/V3 (MODEL_ARCH_DEEPSEEK_V2/V3) only; zero otherwise. Names are
     * config.json's (transformers' DeepseekV3Config). head_dim is then
     * qk_nope_head_dim + qk_rope_head_dim and n_head_kv = n_head. */
    uint32_t q_lora_rank;         /* 0: queries from one projection (attn_q), no LoRA */
    uint32_t kv_lora_rank;        /* width of the compressed latent c_kv the cache holds */
    uint32_t qk_nope_head_dim;    /* per-head query/key dims without RoPE */
    uint32_t qk_rope_head_dim;    /* per-head query dims with RoPE; the rope key is shared */
    uint32_t v_head_dim;          /* per-head value dims */
    uint32_t n_expert;            /* n_routed_experts (0: every layer dense) */
    uint32_t n_expert_shared;     /* n_shared_experts: one MLP of n_expert_shared * n_ff_exp */
    uint32_t n_expert_used;       /* num_experts_per_tok (top-k) */
    uint32_t n_ff_exp;            /* moe_intermediate_size */
    uint32_t n_group, topk_group; /* group-limited routing: experts in n_group groups, the
                                     top topk_group groups kept (1, 1: no limit) */
    uint32_t n_layer_dense_lead;  /* first_k_dense_replace: layers [0, k) have a dense MLP */
    uint32_t n_nextn_layer;       /* num_nextn_predict_layers (MTP), stored after n_layer */
    float routed_scaling_factor;  /* multiplies the routed experts' weights */
    int norm_topk_prob;           /* 1: top-k weights renormalised to sum 1 (V3 only) */
    model_expert_gating expert_gating;
    model_topk_method topk_method;
    /* DeepSeek-V4 (MODEL_ARCH_DEEPSEEK_V4) only; also q_lora_rank,
     * qk_rope_head_dim (the rotated tail of each head), head_dim, n_head_kv 1,
     * and the MoE fields above (NOAUX_TC in one group; the hash layers HASH). */
    model_config_v4 v4;
} model_config;

typedef struct model_weights model_weights;

/* Open `path`: a .gguf file, or a directory holding config.json and safetensors.
 * Errors: DI_ERR_IO (cannot open/map), DI_ERR_MODEL_FORMAT (corrupt, truncated,
 * inconsistent: the message names the file, tensor or field, and the byte offset
 * where one applies), DI_ERR_UNSUPPORTED (an architecture or dtype deepinfer does
 * not run), DI_ERR_OUT_OF_MEMORY; *err gets a di_error (lib/util/error.h) when err
 * is not NULL. */
di_status model_weights_open(const char *path, model_weights **out, di_error **err);
void model_weights_close(model_weights *w);

const model_config *model_weights_config(const model_weights *w);
/* XXH3-64 of what identifies the weights without reading them all: every
 * tensor's name, dtype, shape and size, and its first and last 4 KiB. */
uint64_t model_weights_digest(const model_weights *w);
/* XXH3-64 of every byte of every tensor (and model_weights_digest): one pass
 * over the weights, for what must tell apart models that differ anywhere (the
 * prefix cache's disk tier). */
uint64_t model_weights_content_digest(const model_weights *w);
/* The model's name: a GGUF's general.name, a Hugging Face folder's
 * config.json _name_or_path, else the file's or folder's name; "" when none. */
const char *model_weights_name(const model_weights *w);
/* The architecture as the file names it: a GGUF's general.architecture
 * ("llama", "qwen2", "deepseek2"), a folder's architectures[0]. */
const char *model_weights_architecture(const model_weights *w);
/* The tensors, in file order: count, and tensor i (NULL past the end). The
 * first model_weights_file_count are the file's own; the rest are views the
 * loader derived from them (a GGUF's stacked experts split per expert). */
size_t model_weights_count(const model_weights *w);
size_t model_weights_file_count(const model_weights *w);
const model_tensor *model_weights_at(const model_weights *w, size_t i);
/* The storage type's name, as ggml spells it ("Q4_1", "F16", "FP8_E4M3"). */
const char *model_dtype_name(model_dtype t);
/* The tensor named `name` (GGUF naming), or NULL. */
const model_tensor *model_weights_get(const model_weights *w, const char *name);
/* As model_weights_get, but a missing tensor or one whose shape differs from
 * ne[0..n_dims) is DI_ERR_MODEL_FORMAT with a message naming it. */
di_status model_weights_require(const model_weights *w, const char *name, uint32_t n_dims,
                                const int64_t *ne, const model_tensor **out, di_error **err);

#endif
