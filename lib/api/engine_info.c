/* Model introspection (deepinfer.h, "Engine": di_engine_model_info,
 * di_engine_served_model_name, di_encoding_name): what the engine loaded,
 * gathered once at di_engine_create into one JSON object the engine owns. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/engine_internal.h"
#include "recipe/sampling.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/utf8.h"

DI_API const char *di_encoding_name(int32_t encoding)
{
    switch (encoding) {
    case DI_ENCODING_DSV4: return "dsv4";
    case DI_ENCODING_DSV41: return "dsv41";
    case DI_ENCODING_DSV3: return "dsv3";
    case DI_ENCODING_R1: return "r1";
    case DI_ENCODING_CHATML: return "chatml";
    default: return NULL;
    }
}

static const char *family_name(const model_config *c)
{
    switch (c->arch) {
    case MODEL_ARCH_LLAMA: return "llama";
    case MODEL_ARCH_QWEN2: return "qwen2";
    case MODEL_ARCH_DEEPSEEK_V3: return "deepseek_v3";
    case MODEL_ARCH_DEEPSEEK_V2: return "deepseek_v2";
    case MODEL_ARCH_DEEPSEEK_V4: return c->v4.v41 ? "deepseek_v41" : "deepseek_v4";
    }
    return "?";
}

static int64_t n_elements(const model_tensor *t)
{
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

/* A block-scale tensor (fp8's weight_scale_inv or the release's X.scale,
 * MXFP4's scales) is metadata of its weight, not parameters of the model: the
 * loader hangs it on the weight (model_tensor.scale, or its stored form's when
 * it widened the weight), or, for stacked fp8 experts, names it "X_scale_inv". */
static int is_scale(const model_weights *w, const model_tensor *s)
{
    size_t n = strlen(s->name);
    if (n > 9 && strcmp(s->name + n - 9, "scale_inv") == 0) return 1;
    for (size_t i = 0; i < model_weights_file_count(w); i++) {
        const model_tensor *t = model_weights_at(w, i);
        if (t->scale == s || (t->stored && t->stored->scale == s)) return 1;
    }
    return 0;
}

/* {"F32": {"tensors", "parameters", "bytes"}, …} and the parameter count. */
static json_t *formats(const model_weights *w, int64_t *params)
{
    json_t *out = json_object();
    *params = 0;
    for (size_t i = 0; out && i < model_weights_file_count(w); i++) {
        const model_tensor *t = model_weights_at(w, i);
        if (is_scale(w, t)) continue;
        if (t->stored) t = t->stored; /* as the file stores it */
        const char *name = model_dtype_name(t->dtype);
        json_t *f = json_object_get(out, name);
        if (!f) {
            f = json_pack("{s:I,s:I,s:I}", "tensors", (json_int_t)0, "parameters", (json_int_t)0,
                          "bytes", (json_int_t)0);
            if (!f || json_object_set_new(out, name, f) != 0) {
                json_decref(out);
                return NULL;
            }
        }
        int64_t n = n_elements(t);
        *params += n;
        json_object_set_new(f, "tensors",
                            json_integer(json_integer_value(json_object_get(f, "tensors")) + 1));
        json_object_set_new(
            f, "parameters",
            json_integer(json_integer_value(json_object_get(f, "parameters")) + (json_int_t)n));
        json_object_set_new(
            f, "bytes",
            json_integer(json_integer_value(json_object_get(f, "bytes")) + (json_int_t)t->n_bytes));
    }
    return out;
}

/* A JSON string, or null for NULL (or text that is not UTF-8). */
static json_t *string_or_null(const char *s)
{
    json_t *v = s ? json_string(s) : NULL;
    return v ? v : json_null();
}

/* {"id", "text"} of a special token, or null. */
static json_t *token(const di_engine *e, int32_t id)
{
    if (id < 0 || id >= e->n_vocab) return json_null();
    char *text = NULL;
    size_t len = 0;
    json_t *t = NULL;
    if (e->tok && di_tokenizer_decode(e->tok, &id, 1, 0, &text, &len, NULL) == DI_OK)
        t = json_stringn(text, len);
    di_text_free(text);
    return json_pack("{s:i,s:o}", "id", (int)id, "text", t ? t : json_null());
}

/* The file's or folder's name, without .gguf (malloc'd): for a path ending in
 * "." or ".." the folder it names ("models/x/." is x), and ill-formed UTF-8
 * replaced by U+FFFD, as the name is JSON text in every response. */
static char *path_stem(const char *path)
{
    char *raw = di_path_name(path);
    if (!raw) return NULL;
    size_t len = strlen(raw);
    const uint8_t *s = (const uint8_t *)raw;
    char *out = malloc(len * 3 + 1); /* one byte becomes at most U+FFFD's three */
    size_t o = 0;
    for (size_t i = 0; out && i < len;) {
        size_t k = di_utf8_sequence_length(s + i, len - i);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += di_utf8_ill_formed_length(s + i, len - i);
        }
    }
    if (out) out[o] = 0;
    free(raw);
    return out;
}

di_status engine_info_build(di_engine *e, const char *model_path, const char *served,
                            const char *chat_template, di_error **err)
{
    const model_weights *w = model_get_weights(e->m);
    const model_config *c = model_get_config(e->m);
    const char *name = model_weights_name(w);
    e->served_name = served ? strdup(served) : path_stem(model_path);
    if (!e->served_name) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    /* The V4 encodings answer with the body's model name: it selects their
     * rules (DeepSeek-V4-Pro or V4.1-Flash), as deepseek-recipe echoes it. */
    if (e->codec && e->encoding != DI_ENCODING_DSV4 && e->encoding != DI_ENCODING_DSV41 &&
        rc_codec_set_served_name(e->codec, e->served_name) != 0)
        return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    int64_t params = 0;
    json_t *fmt = formats(w, &params);
    json_t *eos = json_array();
    for (int i = 0; eos && i < e->n_eos; i++) json_array_append_new(eos, token(e, e->eos[i]));
    int32_t bos = c->bos_token_id >= 0 ? c->bos_token_id : e->tok ? e->tok->bos_id : -1;
    const char *enc = di_encoding_name(e->encoding);
    json_t *info = json_pack(
        "{s:o,s:o,s:o,s:s,s:I,s:o,s:I,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:i,s:i,s:o,s:o,s:{s:o,"
        "s:o}}",
        "name", string_or_null(name), "served_model_name", string_or_null(e->served_name),
        "architecture", string_or_null(model_weights_architecture(w)), "family", family_name(c),
        "parameters", (json_int_t)params, "formats", fmt ? fmt : json_null(), "context_length",
        (json_int_t)e->n_ctx, "training_context_length", (int)c->n_ctx_train, "vocab_size",
        (int)e->n_vocab, "layers", (int)c->n_layer, "embedding_length", (int)c->n_embd, "heads",
        (int)c->n_head, "kv_heads", (int)c->n_head_kv, "experts", (int)c->n_expert, "experts_used",
        (int)c->n_expert_used, "kv_bytes_per_token", (json_int_t)model_kv_bytes_per_token(e->m),
        "mtp_layers", model_mtp_layers(e->m), "dspark_block_size", model_dspark_block(e->m),
        "encoding", string_or_null(enc), "chat_template", string_or_null(chat_template),
        "special_tokens", "bos", token(e, bos), "eos", eos ? eos : json_null());
    if (!info) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    e->info_json = json_dumps(info, JSON_PRESERVE_ORDER | JSON_COMPACT);
    json_decref(info);
    if (!e->info_json) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    e->info_len = strlen(e->info_json);
    return DI_OK;
}

DI_API const char *di_engine_model_info(const di_engine *e, size_t *len)
{
    if (len) *len = e ? e->info_len : 0;
    return e ? e->info_json : NULL;
}

DI_API const char *di_engine_served_model_name(const di_engine *e)
{
    return e ? e->served_name : NULL;
}

DI_API di_encoding di_engine_prompt_encoding(const di_engine *e)
{
    return e ? (di_encoding)e->encoding : DI_ENCODING_NONE;
}
