/* DeepSeek-V4.1's Engram needs the tokenizer's compressed vocabulary before
 * the model runs (model.h: model_engram_needs_vocab); di_model_load and
 * di_engine_create hand it over here. */
#ifndef DI_API_ENGRAM_VOCAB_H
#define DI_API_ENGRAM_VOCAB_H

#include "deepinfer/deepinfer.h"
#include "model/model.h"

/* When m has Engram layers: build the compressed vocabulary of tok (or, tok
 * NULL, of model_path's tokenizer.json when model_path is a folder) and give
 * it to m. Nothing for any other model. Errors: DI_ERR_MODEL_FORMAT (no
 * tokenizer to build it from, or one whose compressed vocabulary disagrees
 * with the config: named), the tokenizer's load errors, DI_ERR_OUT_OF_MEMORY. */
di_status api_engram_vocab(model *m, const di_tokenizer *tok, const char *model_path,
                           di_error **err);

#endif
