/* The data types the backend interface (backend/backend.h) takes, shared by the
 * loaders and architectures (lib/model/) and every device backend: the storage
 * types of weights, the descriptor of a weight as a file holds it, and the
 * RoPE and MoE routing variants. Plain data; nothing here allocates. */
#ifndef DI_BACKEND_TYPES_H
#define DI_BACKEND_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* Storage types of weights. Values are ours (not ggml's numbering). Block
 * layouts of the quantized ones are ggml's (docs/gguf.md, ggml-common.h). */
typedef enum model_dtype {
    MODEL_DTYPE_F32 = 0,
    MODEL_DTYPE_F16 = 1,
    MODEL_DTYPE_BF16 = 2,
    MODEL_DTYPE_Q8_0 = 3,     /* 32 elements: f16 scale + 32 int8 */
    MODEL_DTYPE_Q4_0 = 4,     /* 32 elements: f16 scale + 16 bytes of nibbles */
    MODEL_DTYPE_Q4_1 = 5,     /* 32 elements: f16 scale, f16 min + 16 bytes of nibbles */
    MODEL_DTYPE_Q4_K = 6,     /* 256 elements, 144 bytes */
    MODEL_DTYPE_Q5_K = 7,     /* 256 elements, 176 bytes */
    MODEL_DTYPE_Q6_K = 8,     /* 256 elements, 210 bytes */
    MODEL_DTYPE_FP8_E4M3 = 9, /* one byte each; block scales in model_tensor.scale */
    MODEL_DTYPE_Q5_0 = 10,    /* 32 elements: f16 scale, 4 bytes of fifth bits, 16 of nibbles */
    MODEL_DTYPE_Q5_1 = 11,    /* 32 elements: f16 scale, f16 min, fifth bits, nibbles */
    MODEL_DTYPE_Q2_K = 12,    /* 256 elements, 84 bytes */
    MODEL_DTYPE_Q3_K = 13,    /* 256 elements, 110 bytes */
    MODEL_DTYPE_IQ4_NL = 14,  /* 32 elements: f16 scale + 16 bytes of codebook indices */
    MODEL_DTYPE_IQ4_XS = 15,  /* 256 elements, 136 bytes */
    /* integer tables read on the host, never a matrix (DeepSeek-V4's tid2eid) */
    MODEL_DTYPE_I32 = 16,
    MODEL_DTYPE_I64 = 17,
    /* a block scale 2^(e - 127) per byte (255, NaN, is refused), DeepSeek-V4's
     * ue8m0; read on the host into f32 scales, never a matrix */
    MODEL_DTYPE_E8M0 = 18,
    /* 32 elements, 16 bytes: e2m1 codes (OCP MX FP4: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
     * their negatives), two a byte, the low nibble first; the per-row scales of
     * each 32 (E8M0 in the file) as f32 [rows, n / 32] in model_tensor.scale —
     * DeepSeek-V4's routed experts */
    MODEL_DTYPE_MXFP4 = 19,
    MODEL_DTYPE_I8 = 20, /* bytes, only as MXFP4's codes before their scales pair them */
    /* ggml's block_mxfp4 as a GGUF stores it (an E8M0 byte, then 16 bytes: low
     * nibbles values 0..15, high 16..31): a file's tensor only, repacked into
     * MXFP4 at load (weights_gguf_dsv4.c), never a matrix */
    MODEL_DTYPE_MXFP4_GGML = 21,
} model_dtype;

typedef struct model_tensor {
    const char *name; /* NUL-terminated, GGUF naming; owned by the model_weights */
    model_dtype dtype;
    uint32_t n_dims;
    int64_t ne[4];    /* elements per dimension, ne[0] fastest; unused dims are 1 */
    const void *data; /* in the memory map (or an owned copy where a conversion was needed) */
    size_t n_bytes;
    /* FP8_E4M3: the f32 inverse scales ("weight_scale_inv"), one per 128x128
     * block: ne = {ceil(ne[0]/128), ceil(ne[1]/128)}. MXFP4: one f32 scale per
     * 32 values of each row, ne = {ne[0]/32, ne[1]}. NULL otherwise. */
    const struct model_tensor *scale;
    /* NULL, or the tensor as the file stores it when the loader widened it
     * (DeepSeek-V4.1's fp8 in 32x32 blocks, read as BF16): its dtype, bytes and
     * scale, for what reports the file's formats (di_engine_model_info). */
    const struct model_tensor *stored;
} model_tensor;

typedef enum model_rope_style { MODEL_ROPE_NORM = 0, MODEL_ROPE_NEOX = 1 } model_rope_style;

typedef enum model_rope_scaling {
    MODEL_ROPE_SCALING_NONE = 0,
    MODEL_ROPE_SCALING_LINEAR = 1,
    MODEL_ROPE_SCALING_YARN = 2,
    MODEL_ROPE_SCALING_LLAMA3 = 3,
} model_rope_scaling;

/* How a DeepSeekMoE router turns logits into expert scores: softmax over the
 * experts (DeepSeek-V2) or an independent sigmoid per expert (DeepSeek-V3). */
typedef enum model_expert_gating {
    MODEL_EXPERT_GATING_SOFTMAX = 0,
    MODEL_EXPERT_GATING_SIGMOID = 1,
    /* sqrt(softplus(logit)) per expert (DeepSeek-V4's default scoring_func) */
    MODEL_EXPERT_GATING_SQRTSOFTPLUS = 2,
} model_expert_gating;

/* How the top-k experts are chosen (config.json's topk_method): GREEDY, top-k of
 * the scores; GROUP_LIMITED, top-k within the topk_group groups with the largest
 * maximum score (DeepSeek-V2); NOAUX_TC, top-k of score + e_score_correction_bias
 * within the topk_group groups with the largest sum of their two best biased
 * scores, the weights taken from the unbiased scores (DeepSeek-V3). */
typedef enum model_topk_method {
    MODEL_TOPK_GREEDY = 0,
    MODEL_TOPK_GROUP_LIMITED = 1,
    MODEL_TOPK_NOAUX_TC = 2,
    /* the experts are given (DeepSeek-V4's hash layers: tid2eid[token]): sel
     * is read, the weights are their scores divided by their sum + 1e-20 */
    MODEL_TOPK_HASH = 3,
} model_topk_method;

/* What RoPE rotates by: the config fields transformers' modeling_rope_utils
 * and llama.cpp's rope read (field names and defaults as model_config's, which
 * lib/model/ copies them from; head_dim is the rotated width). */
typedef struct backend_rope_params {
    uint32_t head_dim;
    uint32_t n_ctx_train;
    float rope_theta;
    model_rope_style rope_style;
    model_rope_scaling rope_scaling;
    float rope_factor;
    uint32_t rope_orig_ctx;
    float yarn_beta_fast, yarn_beta_slow, yarn_mscale, yarn_mscale_all_dim, yarn_attn_factor;
    int yarn_truncate;
    float llama3_low_freq_factor, llama3_high_freq_factor;
    /* 1: angles as ggml computes them (GGUF models, run against llama.cpp) where
     * the scaling has a ggml form (none, linear); 0: transformers'. */
    int ggml_angles;
} backend_rope_params;

/* DeepSeek-V4.1's candidate-block top-k (DeepInfer's index_attn.py, the
 * blocks of tilelang_ops/candidate_blocks.py) for the lightning indexer's
 * rows: the entries in blocks of `block`; a source row's n_blocks best blocks
 * (block score the maximum of its entries' scores, capped at the largest
 * finite bf16, the last visible block +inf; the best first, the lower index
 * among equals, -1 where fewer) into out [n, n_blocks] (host), or a later
 * layer's row scoring only its visible entries inside the blocks of in [n,
 * n_blocks] (host, -1 skipped). */
typedef struct backend_index_candidates {
    const int32_t *in;
    int32_t *out;
    int n_blocks, block;
} backend_index_candidates;

/* DeepSeekMoE routing (transformers' DeepseekV3TopkRouter / DeepseekV2's):
 * which of n_expert experts each token takes and their weights. */
typedef struct backend_route_params {
    int32_t n_expert;      /* routed experts, <= 4096 */
    int32_t n_expert_used; /* top-k, in [1, n_expert] */
    int32_t n_group;       /* experts in n_group equal groups (1: no groups) */
    int32_t topk_group;    /* groups kept */
    model_expert_gating gating;
    model_topk_method topk_method;
    int norm_topk_prob; /* 1: weights renormalised to sum 1 */
    float routed_scaling_factor;
} backend_route_params;

#endif
