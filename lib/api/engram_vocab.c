/* The compressed vocabulary handed to an Engram model (engram_vocab.h). */
#include "api/engram_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

di_status api_engram_vocab(model *m, const di_tokenizer *tok, const char *model_path,
                           di_error **err)
{
    if (!model_engram_needs_vocab(m)) return DI_OK;
    di_tokenizer *own = NULL;
    if (!tok) {
        struct stat sb;
        char path[4096];
        if (!model_path || stat(model_path, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s: the model's Engram layers need its tokenizer (its compressed "
                                 "vocabulary): give the engine a tokenizer_path",
                                 model_path ? model_path : "the model");
        snprintf(path, sizeof path, "%s/tokenizer.json", model_path);
        if (stat(path, &sb) != 0)
            return di_error_setf(err, DI_ERR_MODEL_FORMAT,
                                 "%s is missing: the model's Engram layers need the tokenizer's "
                                 "compressed vocabulary",
                                 path);
        di_status st = di_tokenizer_load(path, &own, err);
        if (st != DI_OK) return st;
        tok = own;
    }
    int32_t *old2new = NULL, n_ids = 0, n_keys = 0;
    tok_error terr = {DI_OK, ""};
    di_status st = tok_compressed_vocab(tok, &old2new, &n_ids, &n_keys, &terr);
    if (st != DI_OK)
        st = di_error_setf(err, st, "Engram's compressed vocabulary: %s", terr.message);
    else
        st = model_set_engram_vocab(m, old2new, n_ids, n_keys, err);
    free(old2new);
    di_tokenizer_free(own);
    return st;
}
