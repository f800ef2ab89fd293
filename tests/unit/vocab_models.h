/* Random test models in Hugging Face's layout (config.json, one f16
 * model.safetensors) whose vocabularies are the real tokenizers': tiny, but
 * every token id the tokenizer makes is valid, so protocol requests reach
 * them. Shared by the engine tests and write_vocab_model (the CLI tests). */
#ifndef DI_TESTS_VOCAB_MODELS_H
#define DI_TESTS_VOCAB_MODELS_H

#include <stdint.h>

/* One tensor of a random test model: [rows, cols] f16 (rows 1: a vector of
 * ones, as norms start). */
typedef struct hf_tensor {
    const char *name;
    int64_t rows, cols;
} hf_tensor;

/* A Hugging Face directory (model.safetensors, config.json) holding the
 * tensors ts with seeded random weights and the given config. Exits the
 * process with a message when it cannot write. */
void write_hf_model(const char *dir, const hf_tensor *ts, int nt, const char *config);
/* Removes what write_hf_model wrote, and the directory. */
void remove_hf_model(const char *dir);
/* Qwen2, the DeepSeek-R1-distill vocabulary (152064). */
void write_big_vocab_model(const char *dir);
/* DeepSeek-V3-shaped, the V3 vocabulary (129280). */
void write_dsv3_vocab_model(const char *dir);
/* DeepSeek-V4-shaped, the V4 vocabulary (129280). */
void write_dsv4_vocab_model(const char *dir);

#endif
