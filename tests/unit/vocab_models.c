/* Random test models in Hugging Face's layout (vocab_models.h). */
#include "vocab_models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Exits with what could not be done: these run before any test asserts. */
static void need(int ok, const char *what)
{
    if (ok) return;
    fprintf(stderr, "vocab_models: cannot write %s\n", what);
    exit(1);
}

/* f32 → f16 bits, round to nearest (normal range only: the values are small). */
static uint16_t f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xff, m = x & 0x7fffffu;
    if (e < 103) return (uint16_t)sign;
    int32_t he = (int32_t)e - 127 + 15;
    if (he <= 0) return (uint16_t)sign;
    return (uint16_t)(sign | ((uint32_t)he << 10) | ((m + 0x1000u) >> 13));
}

/* A Hugging Face directory (model.safetensors, config.json) holding the
 * tensors ts with seeded random weights and the given config. */
void write_hf_model(const char *dir, const hf_tensor *ts, int nt, const char *config)
{
    char header[32768];
    size_t hl = 0;
    int64_t off = 0;
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "{");
    for (int i = 0; i < nt; i++) {
        int64_t bytes = ts[i].rows * ts[i].cols * 2;
        if (ts[i].rows == 1)
            hl += (size_t)snprintf(header + hl, sizeof header - hl,
                                   "%s\"%s\":{\"dtype\":\"F16\",\"shape\":[%lld],"
                                   "\"data_offsets\":[%lld,%lld]}",
                                   i ? "," : "", ts[i].name, (long long)ts[i].cols, (long long)off,
                                   (long long)(off + bytes));
        else
            hl += (size_t)snprintf(header + hl, sizeof header - hl,
                                   "%s\"%s\":{\"dtype\":\"F16\",\"shape\":[%lld,%lld],"
                                   "\"data_offsets\":[%lld,%lld]}",
                                   i ? "," : "", ts[i].name, (long long)ts[i].rows,
                                   (long long)ts[i].cols, (long long)off, (long long)(off + bytes));
        need(hl < sizeof header - 16, "header");
        off += bytes;
    }
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "}");
    while (hl % 8) header[hl++] = ' ';
    char path[1024];
    need(dir[0] != 0 && strlen(dir) < sizeof path - 32, "a folder name (empty or too long)");
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    need(f != NULL, path);
    uint64_t n = hl;
    need(fwrite(&n, 8, 1, f) == 1 && fwrite(header, 1, hl, f) == hl, path);
    uint32_t x = 12345;
    for (int i = 0; i < nt; i++) {
        int64_t count = ts[i].rows * ts[i].cols;
        uint16_t *buf = malloc((size_t)count * 2);
        need(buf != NULL, "out of memory");
        for (int64_t k = 0; k < count; k++) {
            x = x * 1664525u + 1013904223u;
            float v = ts[i].rows == 1 ? 1.0f : ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.8f;
            buf[k] = f16(v);
        }
        need(fwrite(buf, 2, (size_t)count, f) == (size_t)count, path);
        free(buf);
    }
    need(fclose(f) == 0, path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    f = fopen(path, "w");
    need(f != NULL, path);
    need(fputs(config, f) >= 0, path);
    need(fclose(f) == 0, path);
}

void remove_hf_model(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}

/* A Qwen2 model with the DeepSeek-R1-distill vocabulary size and random
 * weights, written as a Hugging Face directory: tiny, but every token id the
 * R1 tokenizer makes is valid in it. */
void write_big_vocab_model(const char *dir)
{
    enum { VOCAB = 152064, E = 32, Q = 32, KV = 16, F = 64 };
    const hf_tensor ts[] = {
        {"model.embed_tokens.weight", VOCAB, E},
        {"model.norm.weight", 1, E},
        {"model.layers.0.input_layernorm.weight", 1, E},
        {"model.layers.0.post_attention_layernorm.weight", 1, E},
        {"model.layers.0.self_attn.q_proj.weight", Q, E},
        {"model.layers.0.self_attn.k_proj.weight", KV, E},
        {"model.layers.0.self_attn.v_proj.weight", KV, E},
        {"model.layers.0.self_attn.o_proj.weight", E, Q},
        {"model.layers.0.mlp.gate_proj.weight", F, E},
        {"model.layers.0.mlp.up_proj.weight", F, E},
        {"model.layers.0.mlp.down_proj.weight", E, F},
    };
    char config[1024];
    snprintf(config, sizeof config,
             "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\","
             "\"vocab_size\":%d,\"hidden_size\":%d,\"intermediate_size\":%d,"
             "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
             "\"max_position_embeddings\":512,\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,"
             "\"tie_word_embeddings\":true,\"hidden_act\":\"silu\",\"bos_token_id\":151646,"
             "\"eos_token_id\":151643}",
             VOCAB, E, F);
    write_hf_model(dir, ts, (int)(sizeof ts / sizeof ts[0]), config);
}

/* A DeepSeek-V3-shaped model with the DeepSeek V3 vocabulary (129280) and
 * random weights: MLA with q LoRA, a dense first layer, then DeepSeekMoE (4
 * routed experts in 2 groups, top-2, one shared expert, sigmoid routing with
 * the correction bias). */
void write_dsv3_vocab_model(const char *dir)
{
    enum { VOCAB = 129280, E = 32, H = 2, QL = 24, R = 16, ROPE = 8, NOPE = 8, VD = 8, F = 64 };
    enum { FE = 16, QD = H * (NOPE + ROPE), KVB = H * (NOPE + VD) };
#define ATTN(l)                                                                                    \
    {"model.layers." #l ".input_layernorm.weight", 1, E},                                          \
        {"model.layers." #l ".post_attention_layernorm.weight", 1, E},                             \
        {"model.layers." #l ".self_attn.q_a_proj.weight", QL, E},                                  \
        {"model.layers." #l ".self_attn.q_a_layernorm.weight", 1, QL},                             \
        {"model.layers." #l ".self_attn.q_b_proj.weight", QD, QL},                                 \
        {"model.layers." #l ".self_attn.kv_a_proj_with_mqa.weight", R + ROPE, E},                  \
        {"model.layers." #l ".self_attn.kv_a_layernorm.weight", 1, R},                             \
        {"model.layers." #l ".self_attn.kv_b_proj.weight", KVB, R},                                \
    {                                                                                              \
        "model.layers." #l ".self_attn.o_proj.weight", E, H *VD                                    \
    }
#define EXPERT(e)                                                                                  \
    {"model.layers.1.mlp.experts." #e ".gate_proj.weight", FE, E},                                 \
        {"model.layers.1.mlp.experts." #e ".up_proj.weight", FE, E},                               \
    {                                                                                              \
        "model.layers.1.mlp.experts." #e ".down_proj.weight", E, FE                                \
    }
    const hf_tensor ts[] = {
        {"model.embed_tokens.weight", VOCAB, E},
        {"model.norm.weight", 1, E},
        ATTN(0),
        {"model.layers.0.mlp.gate_proj.weight", F, E},
        {"model.layers.0.mlp.up_proj.weight", F, E},
        {"model.layers.0.mlp.down_proj.weight", E, F},
        ATTN(1),
        {"model.layers.1.mlp.gate.weight", 4, E},
        {"model.layers.1.mlp.gate.e_score_correction_bias", 1, 4},
        EXPERT(0),
        EXPERT(1),
        EXPERT(2),
        EXPERT(3),
        {"model.layers.1.mlp.shared_experts.gate_proj.weight", FE, E},
        {"model.layers.1.mlp.shared_experts.up_proj.weight", FE, E},
        {"model.layers.1.mlp.shared_experts.down_proj.weight", E, FE},
    };
#undef ATTN
#undef EXPERT
    char config[2048];
    snprintf(config, sizeof config,
             "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"model_type\":\"deepseek_v3\","
             "\"vocab_size\":%d,\"hidden_size\":%d,\"intermediate_size\":%d,"
             "\"moe_intermediate_size\":%d,\"num_hidden_layers\":2,\"num_attention_heads\":%d,"
             "\"num_key_value_heads\":%d,\"n_routed_experts\":4,\"n_shared_experts\":1,"
             "\"num_experts_per_tok\":2,\"n_group\":2,\"topk_group\":1,"
             "\"first_k_dense_replace\":1,\"norm_topk_prob\":true,"
             "\"routed_scaling_factor\":2.5,\"q_lora_rank\":%d,\"kv_lora_rank\":%d,"
             "\"qk_nope_head_dim\":%d,\"qk_rope_head_dim\":%d,\"v_head_dim\":%d,"
             "\"max_position_embeddings\":512,\"rms_norm_eps\":1e-6,"
             "\"rope_parameters\":{\"rope_theta\":10000.0,\"rope_type\":\"default\"},"
             "\"tie_word_embeddings\":true,\"hidden_act\":\"silu\",\"bos_token_id\":0,"
             "\"eos_token_id\":1}",
             VOCAB, E, F, FE, H, H, QL, R, NOPE, ROPE, VD);
    write_hf_model(dir, ts, (int)(sizeof ts / sizeof ts[0]), config);
}

/* A DeepSeek-V4-shaped model with the DeepSeek V4 vocabulary (129280) and
 * random weights, in transformers' layout: a sliding-window layer, a CSA layer
 * (rate 4, a 2-head indexer keeping 2 entries) and an HCA one (rate 8), mHC
 * with 2 streams, scored MoE (4 experts, top-2, a shared expert). */
void write_dsv4_vocab_model(const char *dir)
{
    enum { VOCAB = 129280, E = 32, H = 2, HD = 16, QL = 24, G = 2, RO = 8, HC = 2, MIX = 8 };
    enum { X = 4, FE = 16, IH = 2, IHD = 8 };
#define L_(l, name) "model.layers." #l "." name
#define COMMON(l)                                                                                  \
    {L_(l, "input_layernorm.weight"), 1, E}, {L_(l, "post_attention_layernorm.weight"), 1, E},     \
        {L_(l, "self_attn.q_a_proj.weight"), QL, E}, {L_(l, "self_attn.q_a_norm.weight"), 1, QL},  \
        {L_(l, "self_attn.q_b_proj.weight"), H * HD, QL},                                          \
        {L_(l, "self_attn.kv_proj.weight"), HD, E}, {L_(l, "self_attn.kv_norm.weight"), 1, HD},    \
        {L_(l, "self_attn.o_a_proj.weight"), G * RO, H * HD / G},                                  \
        {L_(l, "self_attn.o_b_proj.weight"), E, G * RO}, {L_(l, "self_attn.sinks"), 1, H},         \
        {L_(l, "attn_hc.fn"), MIX, HC * E}, {L_(l, "attn_hc.base"), 1, MIX},                       \
        {L_(l, "attn_hc.scale"), 1, 3}, {L_(l, "ffn_hc.fn"), MIX, HC * E},                         \
        {L_(l, "ffn_hc.base"), 1, MIX}, {L_(l, "ffn_hc.scale"), 1, 3},                             \
        {L_(l, "mlp.gate.weight"), X, E}, {L_(l, "mlp.gate.e_score_correction_bias"), 1, X},       \
        {L_(l, "mlp.shared_experts.gate_proj.weight"), FE, E},                                     \
        {L_(l, "mlp.shared_experts.up_proj.weight"), FE, E},                                       \
        {L_(l, "mlp.shared_experts.down_proj.weight"), E, FE}, EXPERT(l, 0), EXPERT(l, 1),         \
        EXPERT(l, 2), EXPERT(l, 3)
#define EXPERT(l, e)                                                                               \
    {L_(l, "mlp.experts." #e ".gate_proj.weight"), FE, E},                                         \
        {L_(l, "mlp.experts." #e ".up_proj.weight"), FE, E},                                       \
    {                                                                                              \
        L_(l, "mlp.experts." #e ".down_proj.weight"), E, FE                                        \
    }
#define COMPRESSOR(l, prefix, rate, width)                                                         \
    {L_(l, prefix ".kv_proj.weight"), width, E}, {L_(l, prefix ".gate_proj.weight"), width, E},    \
        {L_(l, prefix ".position_bias"), rate, width},                                             \
    {                                                                                              \
        L_(l, prefix ".kv_norm.weight"), 1, HD                                                     \
    }
    const hf_tensor ts[] = {
        {"model.embed_tokens.weight", VOCAB, E},
        {"model.norm.weight", 1, E},
        {"model.hc_head.hc_fn", HC, HC * E},
        {"model.hc_head.hc_base", 1, HC},
        {"model.hc_head.hc_scale", 1, 1},
        COMMON(0),
        COMMON(1),
        COMPRESSOR(1, "self_attn.compressor", 4, 2 * HD),
        {L_(1, "self_attn.compressor.indexer.kv_proj.weight"), 2 * IHD, E},
        {L_(1, "self_attn.compressor.indexer.gate_proj.weight"), 2 * IHD, E},
        {L_(1, "self_attn.compressor.indexer.position_bias"), 4, 2 * IHD},
        {L_(1, "self_attn.compressor.indexer.kv_norm.weight"), 1, IHD},
        {L_(1, "self_attn.compressor.indexer.q_b_proj.weight"), IH * IHD, QL},
        {L_(1, "self_attn.compressor.indexer.scorer.weights_proj.weight"), IH, E},
        COMMON(2),
        COMPRESSOR(2, "self_attn.compressor", 8, HD),
    };
#undef L_
#undef COMMON
#undef EXPERT
#undef COMPRESSOR
    char config[2048];
    snprintf(config, sizeof config,
             "{\"architectures\":[\"DeepseekV4ForCausalLM\"],\"model_type\":\"deepseek_v4\","
             "\"vocab_size\":%d,\"hidden_size\":%d,\"moe_intermediate_size\":%d,"
             "\"num_hidden_layers\":3,\"num_attention_heads\":%d,\"num_key_value_heads\":1,"
             "\"head_dim\":%d,\"q_lora_rank\":%d,\"partial_rotary_factor\":0.5,"
             "\"n_routed_experts\":%d,\"n_shared_experts\":1,\"num_experts_per_tok\":2,"
             "\"routed_scaling_factor\":1.5,\"scoring_func\":\"sqrtsoftplus\","
             "\"layer_types\":[\"sliding_attention\",\"compressed_sparse_attention\","
             "\"heavily_compressed_attention\"],\"num_hash_layers\":0,"
             "\"compress_rates\":{\"compressed_sparse_attention\":4,"
             "\"heavily_compressed_attention\":8},\"hc_mult\":%d,\"hc_sinkhorn_iters\":20,"
             "\"hc_eps\":1e-6,\"swiglu_limit\":10.0,\"sliding_window\":8,\"o_groups\":%d,"
             "\"o_lora_rank\":%d,\"index_n_heads\":%d,\"index_head_dim\":%d,"
             "\"index_topk\":2,\"max_position_embeddings\":512,\"rms_norm_eps\":1e-6,"
             "\"rope_theta\":10000.0,\"compress_rope_theta\":160000.0,"
             "\"tie_word_embeddings\":true,\"hidden_act\":\"silu\",\"bos_token_id\":0,"
             "\"eos_token_id\":1}",
             VOCAB, E, FE, H, HD, QL, X, HC, G, RO, IH, IHD);
    write_hf_model(dir, ts, (int)(sizeof ts / sizeof ts[0]), config);
}
