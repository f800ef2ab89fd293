/* Reading a Hugging Face config.json (weights_hf.c; DeepSeek-V4's fields in
 * config_dsv4.c): typed getters whose errors name the file and the key.
 * Internal to lib/model/. */
#ifndef DI_MODEL_CONFIG_JSON_H
#define DI_MODEL_CONFIG_JSON_H

#include <jansson.h>
#include <stdint.h>

#include "model/weights.h"
#include "util/error.h"

typedef struct cfg_ctx {
    const char *file; /* "<dir>/config.json", for messages */
    json_t *root;
    di_error **err;
} cfg_ctx;

/* A required positive integer of the root that fits uint32
 * (DI_ERR_MODEL_FORMAT when missing or not one). */
di_status cfg_need_uint(cfg_ctx *c, const char *key, uint32_t *out);
/* Optional: absent or null leaves *out; anything but the type asked for is
 * DI_ERR_MODEL_FORMAT. A positive integer of obj; a number of obj; a
 * non-negative integer in [0, 2^20] of the root. */
di_status cfg_opt_uint(cfg_ctx *c, json_t *obj, const char *key, uint32_t *out);
di_status cfg_opt_float(cfg_ctx *c, json_t *obj, const char *key, float *out);
di_status cfg_opt_count(cfg_ctx *c, const char *key, uint32_t *out);

/* DeepSeek-V4's fields (config_dsv4.c): transformers 5.24's DeepseekV4Config,
 * or DeepSeek's release layout that config folds in (compress_ratios,
 * num_hash_layers, qk_rope_head_dim, compress_rate_csa/hca, a flat
 * rope_scaling). A value this code cannot run (a layer type or scoring
 * function it lacks) is DI_ERR_UNSUPPORTED naming the field. */
di_status cfg_read_deepseek_v4(cfg_ctx *c, model_config *m);
/* DeepSeek-V4.1's (DeepInfer 0.1.0's hugging_face/config.py): c->root is the
 * text_config, top the whole config.json (model_type, quantization_config).
 * Errors as cfg_read_deepseek_v4; what V4.1 has and deepinfer does not run yet
 * (Engram, the candidate-block top-k, unshifted mHC) is DI_ERR_UNSUPPORTED
 * naming the field. */
di_status cfg_read_deepseek_v41(cfg_ctx *c, model_config *m, json_t *top);
/* A DSpark draft head's fields (config_dsv4.c), its `stages` after m's main
 * layers: dspark_block_size, dspark_target_layer_ids, dspark_noise_token_id;
 * with v41 also DeepSeek-V4.1's dspark_n_routed_experts,
 * dspark_num_experts_per_tok, dspark_markov_rank and dspark_target_attn_input
 * (true or absent, as DeepInfer asserts), the stages' compress_ratios not
 * read (DeepInfer builds every stage as a sliding-window layer). Errors as
 * cfg_read_deepseek_v4, the field named. */
di_status cfg_read_dspark(cfg_ctx *c, model_config *m, uint32_t stages, int v41);

#endif
