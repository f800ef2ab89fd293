/* The public codec API (deepinfer.h, "Codec"): request JSON → conversation →
 * prompt text and token IDs, with no model loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "recipe/encoding.h"
#include "recipe/sampling.h"
#include "recipe/stream.h"
#include "tokenizer/tokenizer.h"
#include "util/utf8.h"

struct di_codec {
    const di_tokenizer *tok; /* may be NULL: text only */
    di_encoding encoding;
    rc_encoding enc;
    char *default_system; /* ChatML: the system turn of a conversation without one */
    char *served_name; /* the `model` of template replies (rc_codec_set_served_name); NULL: none */
    int32_t special_id[RC_N_SPECIAL]; /* -1 when the tokenizer lacks the token */
};

struct di_prompt {
    rc_prompt p;
    /* what the request asks of generation (docs/recipe-spec.md §3.4–3.6) */
    int thinking, stream, effort_max, has_max_tokens;
    uint32_t max_tokens;
    float temperature, top_p;
    char **stops, **images;
    size_t n_stops, n_images;
    int32_t *ids;
    size_t n_ids;
    di_status tokens_status;
    char tokens_message[600];
    rc_reply reply; /* what the output side needs (protocol requests only) */
    int has_reply;
    rc_sampling smp; /* which sampling fields the body decided, and what it asks that is not
                        supported (sampling.h) */
};

DI_API di_status di_codec_create(const di_tokenizer *tok, di_encoding encoding, di_codec **out,
                                 di_error **err)
{
    if (!out) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "out must not be NULL");
    *out = NULL;
    if (encoding < DI_ENCODING_DSV4 || encoding > DI_ENCODING_CHATML)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "encoding: unknown value");
    di_codec *c = calloc(1, sizeof *c);
    if (!c) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    c->tok = tok;
    c->encoding = encoding;
    c->enc = encoding == DI_ENCODING_DSV41 ? RC_ENCODING_V41 : RC_ENCODING_V4;
    for (int s = 0; s < RC_N_SPECIAL; s++) {
        c->special_id[s] = -1;
        if (tok) {
            const char *sp = rc_special_spelling[s];
            int32_t id;
            if (di_tokenizer_token_id(tok, sp, strlen(sp), &id) == DI_OK) c->special_id[s] = id;
        }
    }
    *out = c;
    return DI_OK;
}

DI_API void di_codec_free(di_codec *codec)
{
    if (codec) {
        free(codec->default_system);
        free(codec->served_name);
    }
    free(codec);
}

DI_API di_status di_codec_set_default_system(di_codec *codec, const char *text, di_error **err)
{
    if (!codec || codec->encoding != DI_ENCODING_CHATML)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "codec: a default system prompt is a setting of the chatml encoding");
    di_utf8_scan scan = {0, DI_UTF8_VALID};
    if (text) scan = di_utf8_scan_bytes((const uint8_t *)text, strlen(text));
    if (scan.state != DI_UTF8_VALID)
        return di_error_setf(err, DI_ERR_INVALID_UTF8,
                             "text: invalid UTF-8 at byte %zu of the system prompt", scan.valid);
    char *copy = NULL;
    if (text && !(copy = strdup(text)))
        return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    free(codec->default_system);
    codec->default_system = copy;
    return DI_OK;
}

/* Encode a run of plain text (bytes [start, end) of the prompt) into ids. */
static int encode_run(const di_codec *c, di_prompt *p, size_t start, size_t end, tok_ids *ids)
{
    if (end <= start) return 0;
    tok_error e;
    if (tok_encode(c->tok, (const uint8_t *)p->p.text.s + start, end - start, 0, ids, &e) !=
        DI_OK) {
        p->tokens_status = e.status;
        snprintf(p->tokens_message, sizeof p->tokens_message, "%s", e.message);
        return -1;
    }
    return 0;
}

/* Special segments by their IDs; the text between them encoded as plain text (no
 * added vocabulary, §12). The chat-template encodings (dsv3, r1, chatml) also
 * write tool tokens some vocabularies lack (the R1 distills' has none, SmolLM2's
 * no <tool_call>): there, as in transformers, such a spelling is text, encoded
 * together with the text around it. The V4 encodings need every special token
 * they write. */
static void make_tokens(const di_codec *c, di_prompt *p)
{
    int lenient = c->encoding == DI_ENCODING_DSV3 || c->encoding == DI_ENCODING_R1 ||
                  c->encoding == DI_ENCODING_CHATML;
    tok_ids ids = {0};
    size_t run_start = 0, run_end = 0;
    for (size_t i = 0; i < p->p.n_segments; i++) {
        const rc_segment *s = &p->p.segments[i];
        int id = s->special >= 0 ? c->special_id[s->special] : -1;
        if (s->special < 0 || (id < 0 && lenient)) {
            if (run_end == run_start) run_start = s->start;
            run_end = s->start + s->len;
            continue;
        }
        if (id < 0) {
            p->tokens_status = DI_ERR_UNSUPPORTED;
            snprintf(p->tokens_message, sizeof p->tokens_message,
                     "the tokenizer has no token %s, which this encoding needs",
                     rc_special_spelling[s->special]);
            free(ids.ids);
            return;
        }
        if (encode_run(c, p, run_start, run_end, &ids) != 0) {
            free(ids.ids);
            return;
        }
        run_start = run_end = 0;
        if (tok_ids_push(&ids, id) != 0) goto oom;
    }
    if (encode_run(c, p, run_start, run_end, &ids) != 0) {
        free(ids.ids);
        return;
    }
    p->ids = ids.ids;
    p->n_ids = ids.n;
    p->tokens_status = DI_OK;
    return;
oom:
    free(ids.ids);
    p->tokens_status = DI_ERR_OUT_OF_MEMORY;
    snprintf(p->tokens_message, sizeof p->tokens_message, "out of memory encoding the prompt");
}

/* The generation settings the reference derives from the request (§3.4–3.6). */
static void take_facts(di_prompt *p, rc_conversation *c)
{
    p->thinking = c->thinking;
    p->stream = c->stream;
    p->effort_max = c->effort == RC_EFFORT_MAX;
    p->has_max_tokens = c->max_tokens > 0;
    p->max_tokens = (uint32_t)c->max_tokens;
    p->temperature = c->thinking ? 1.0f : c->has_temperature ? c->temperature : 1.0f;
    size_t tools = c->n_tools;
    if (c->model == RC_MODEL_V4_PRO)
        p->top_p = !c->thinking ? (c->has_top_p ? c->top_p : 1.0f) : tools ? 0.95f : 1.0f;
    else
        p->top_p = !c->thinking ? 1.0f : !c->has_top_p ? 1.0f : c->top_p < 0.95f ? 0.95f : c->top_p;
    p->smp.temperature = p->temperature;
    p->smp.top_p = p->top_p;
    p->smp.max_tokens = p->max_tokens;
    /* decided by the body: its own value, or a rule that fixes one (thinking's
     * temperature 1.0; V4.1-Flash's top_p; V4-Pro's top_p when thinking) */
    if (c->thinking || c->has_temperature) p->smp.set |= RC_SET_TEMPERATURE;
    if (c->model != RC_MODEL_V4_PRO || c->thinking || c->has_top_p) p->smp.set |= RC_SET_TOP_P;
    if (p->has_max_tokens) p->smp.set |= RC_SET_MAX_TOKENS;
    p->stops = c->stops;
    p->n_stops = c->n_stops;
    p->images = c->images;
    p->n_images = c->n_images;
    c->stops = c->images = NULL; /* moved into the prompt */
    c->n_stops = c->n_images = 0;
}

/* A reply whose encoding does not need the body's model name answers with the
 * served name, when the codec has one. */
static int name_reply(const di_codec *codec, rc_reply *r)
{
    if (!codec->served_name) return 0;
    char *copy = strdup(codec->served_name);
    if (!copy) return -1;
    free(r->model_name);
    r->model_name = copy;
    return 0;
}

/* The generation settings of a Chat body rendered with a chat template, which
 * the reference does not cover: the sampling fields as OpenAI defines them
 * (sampling.h), json_object mode, and what the engine cannot honour. R1
 * distills always reason; DeepSeek-V3's template and ChatML never do. */
static di_status template_facts(di_prompt *p, json_t *root, int r1, char *msg, size_t size)
{
    rc_conversation conv;
    memset(&conv, 0, sizeof conv);
    rc_err e = {DI_OK, msg, size};
    p->smp.temperature = 1.0f;
    p->smp.top_p = 1.0f;
    int r = rc_sampling_template(&e, root, &p->smp, &conv);
    p->temperature = p->smp.temperature;
    p->top_p = p->smp.top_p;
    p->has_max_tokens = (p->smp.set & RC_SET_MAX_TOKENS) != 0;
    p->max_tokens = p->smp.max_tokens;
    p->stops = conv.stops;
    p->n_stops = conv.n_stops;
    conv.stops = NULL;
    conv.n_stops = 0;
    rc_conversation_free(&conv);
    if (r < 0) return e.status;
    json_t *type = json_object_get(json_object_get(root, "response_format"), "type");
    p->reply.parse_json_output =
        json_is_string(type) && rc_streq(json_string_value(type), "json_object");
    rc_sampling_check_supported(root, DI_PROTOCOL_CHAT, r1, &p->smp);
    return DI_OK;
}

/* A Messages or Responses request with the chatml encoding: converted as the
 * reference converts it (its model rules need one of its model names, so the copy
 * converted is named DeepSeek-V4-Pro, with thinking off; the response echoes the
 * request's own name), then rendered as the Chat Completions body it amounts to.
 * Takes root. */
static void finish_prompt(const di_codec *codec, di_prompt *p);

/* A rendered prompt into *out (DI_OK), or freed with the error `st` and msg. */
static di_status hand_over(const di_codec *codec, di_prompt *p, di_status st, const char *msg,
                           di_prompt **out, di_error **err)
{
    if (st != DI_OK) {
        di_prompt_free(p);
        return di_error_set(err, st, st == DI_ERR_OUT_OF_MEMORY ? "out of memory" : msg);
    }
    finish_prompt(codec, p);
    *out = p;
    return DI_OK;
}

static di_status render_chatml_converted(const di_codec *codec, di_protocol protocol, json_t *root,
                                         di_prompt **out, di_error **err)
{
    char msg[512] = "";
    /* the conversion overrides the body's reasoning switches: check them first,
     * as the V4 encodings do, so that one of the wrong type is not replaced
     * unseen (check_reasoning refuses those asking to reason) */
    if (json_is_object(root)) {
        int msgs = protocol == DI_PROTOCOL_MESSAGES;
        rc_conversation scratch;
        memset(&scratch, 0, sizeof scratch);
        rc_err ce = {DI_OK, msg, sizeof msg};
        json_t *holder = NULL;
        int r = rc_get_object(&ce, root, msgs ? "output_config" : "reasoning", "", &holder);
        if (r >= 0)
            r = rc_parse_thinking_and_effort(&ce, root, holder, "effort",
                                             msgs ? "output_config.effort" : "reasoning.effort",
                                             msgs, &scratch);
        rc_conversation_free(&scratch);
        if (r < 0) {
            json_decref(root);
            return di_error_set(err, ce.status, msg);
        }
    }
    json_t *copy = json_is_object(root) ? json_copy(root) : json_incref(root);
    if (json_is_object(copy)) {
        json_object_set_new(copy, "model", json_string("DeepSeek-V4-Pro"));
        /* ChatML has no reasoning block: the conversion runs with thinking off */
        if (protocol == DI_PROTOCOL_MESSAGES) {
            json_object_set_new(copy, "thinking", json_pack("{s:s}", "type", "disabled"));
        } else {
            json_t *r = json_object_get(copy, "reasoning");
            r = json_is_object(r) ? json_copy(r) : json_object();
            json_object_set_new(r, "effort", json_string("none"));
            json_object_set_new(copy, "reasoning", r);
        }
    }
    rc_conversation conv;
    memset(&conv, 0, sizeof conv);
    di_status st = protocol == DI_PROTOCOL_MESSAGES
                       ? rc_convert_messages(copy, &conv, msg, sizeof msg)
                       : rc_convert_responses(copy, &conv, msg, sizeof msg);
    json_decref(copy);
    json_t *body = st == DI_OK ? rc_chatml_chat_body(&conv, msg, sizeof msg) : NULL;
    if (st == DI_OK && !body) st = DI_ERR_OUT_OF_MEMORY;
    di_prompt *p = st == DI_OK ? calloc(1, sizeof *p) : NULL;
    if (st == DI_OK && !p) st = DI_ERR_OUT_OF_MEMORY;
    rc_buf prefix = {0};
    int parse_tools = 0, required = 0;
    if (st == DI_OK)
        st = rc_render_chatml(body, codec->default_system, &p->p, &parse_tools, &required, &prefix,
                              msg, sizeof msg);
    if (st == DI_OK) {
        if (rc_reply_from(&p->reply, protocol, &conv, root) != 0 ||
            (prefix.s && !(p->reply.call_prefix = strdup(prefix.s)))) {
            st = DI_ERR_OUT_OF_MEMORY;
        } else {
            /* ChatML has no reasoning block; calls are Hermes blocks */
            p->has_reply = 1;
            p->reply.thinking = 0;
            p->reply.stage = RC_STAGE_NONE;
            p->reply.tool_format = RC_TOOLS_HERMES;
            p->reply.parse_tool_calls = parse_tools;
            p->reply.starts_in_tool_calls = required;
            if (name_reply(codec, &p->reply) != 0) st = DI_ERR_OUT_OF_MEMORY;
        }
    }
    if (p) {
        conv.thinking = 0;
        take_facts(p, &conv);
        rc_err e = {DI_OK, msg, sizeof msg};
        if (st == DI_OK && rc_sampling_extra(&e, root, protocol, &p->smp) < 0) st = e.status;
        if (st == DI_OK) rc_sampling_check_supported(root, protocol, 0, &p->smp);
    }
    free(prefix.s);
    json_decref(body);
    rc_conversation_free(&conv);
    json_decref(root);
    return hand_over(codec, p, st, msg, out, err);
}

/* Token IDs when the codec has a tokenizer, the reason why not otherwise. */
static void finish_prompt(const di_codec *codec, di_prompt *p)
{
    p->tokens_status = DI_ERR_INVALID_STATE;
    snprintf(p->tokens_message, sizeof p->tokens_message,
             "the codec was created without a tokenizer: it renders text only");
    if (codec->tok) make_tokens(codec, p);
}

static di_status render(const di_codec *codec, di_protocol protocol, const char *json, size_t len,
                        int allow_n, di_prompt **out, di_error **err);

DI_API di_status di_codec_render(const di_codec *codec, di_protocol protocol, const char *json,
                                 size_t len, di_prompt **out, di_error **err)
{
    return render(codec, protocol, json, len, 0, out, err);
}

di_status rc_codec_render_engine(const di_codec *codec, di_protocol protocol, const char *json,
                                 size_t len, di_prompt **out, di_error **err)
{
    return render(codec, protocol, json, len, 1, out, err);
}

static di_status render(const di_codec *codec, di_protocol protocol, const char *json, size_t len,
                        int allow_n, di_prompt **out, di_error **err)
{
    if (!codec || !json || !out)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "codec, json and out must not be NULL");
    *out = NULL;
    if (protocol != DI_PROTOCOL_CHAT && protocol != DI_PROTOCOL_MESSAGES &&
        protocol != DI_PROTOCOL_RESPONSES)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "protocol: unknown value");
    char msg[512];
    if (len > DI_CODEC_MAX_REQUEST_BYTES) {
        snprintf(msg, sizeof msg, "request: %zu bytes is more than the %u MiB a request may have",
                 len, (unsigned)(DI_CODEC_MAX_REQUEST_BYTES >> 20));
        return di_error_set(err, DI_ERR_INVALID_REQUEST, msg);
    }
    json_t *root = rc_json_parse(json, len, 127, msg, sizeof msg);
    if (!root) {
        char full[600];
        snprintf(full, sizeof full, "request: %s", msg);
        return di_error_set(err, DI_ERR_INVALID_REQUEST, full);
    }
    if (codec->encoding == DI_ENCODING_CHATML && protocol != DI_PROTOCOL_CHAT)
        return render_chatml_converted(codec, protocol, root, out, err);
    if (codec->encoding == DI_ENCODING_DSV3 || codec->encoding == DI_ENCODING_R1 ||
        codec->encoding == DI_ENCODING_CHATML) {
        if (protocol != DI_PROTOCOL_CHAT) {
            json_decref(root);
            return di_error_set(err, DI_ERR_UNSUPPORTED,
                                "the dsv3 and r1 chat templates take Chat Completions requests "
                                "(protocol chat)");
        }
        di_prompt *p = calloc(1, sizeof *p);
        if (!p) {
            json_decref(root);
            return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
        }
        int r1 = codec->encoding == DI_ENCODING_R1, chatml = codec->encoding == DI_ENCODING_CHATML;
        int parse_tools = 0, required = 0;
        rc_buf prefix = {0};
        di_status st = chatml ? rc_render_chatml(root, codec->default_system, &p->p, &parse_tools,
                                                 &required, &prefix, msg, sizeof msg)
                              : rc_render_template(root, r1 ? RC_TEMPLATE_R1 : RC_TEMPLATE_V3,
                                                   &p->p, msg, sizeof msg);
        if (st == DI_OK && !chatml)
            st = rc_template_parse_tools(root, &parse_tools, msg, sizeof msg);
        if (st == DI_OK) {
            rc_template_kind kind = chatml ? RC_KIND_CHATML : r1 ? RC_KIND_R1 : RC_KIND_V3;
            if (rc_reply_from_template(&p->reply, kind, parse_tools, required, prefix.s, root) !=
                    0 ||
                name_reply(codec, &p->reply) != 0)
                st = DI_ERR_OUT_OF_MEMORY;
            else
                p->has_reply = 1;
        }
        if (st == DI_OK) st = template_facts(p, root, r1, msg, sizeof msg);
        free(prefix.s);
        json_decref(root);
        return hand_over(codec, p, st, msg, out, err);
    }
    rc_conversation conv;
    memset(&conv, 0, sizeof conv);
    conv.allow_n = allow_n;
    di_status st = protocol == DI_PROTOCOL_CHAT ? rc_convert_chat(root, &conv, msg, sizeof msg)
                   : protocol == DI_PROTOCOL_MESSAGES
                       ? rc_convert_messages(root, &conv, msg, sizeof msg)
                       : rc_convert_responses(root, &conv, msg, sizeof msg);
    if (st != DI_OK) {
        json_decref(root);
        rc_conversation_free(&conv);
        return di_error_set(err, st, msg[0] ? msg : "out of memory");
    }
    di_prompt *p = calloc(1, sizeof *p);
    if (!p) {
        json_decref(root);
        rc_conversation_free(&conv);
        return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    }
    st = rc_render(&conv, codec->enc, &p->p);
    if (st == DI_OK) {
        if (rc_reply_from(&p->reply, protocol, &conv, root) != 0)
            st = DI_ERR_OUT_OF_MEMORY;
        else
            p->has_reply = 1;
    }
    take_facts(p, &conv);
    rc_conversation_free(&conv);
    rc_err e = {DI_OK, msg, sizeof msg};
    if (st == DI_OK && rc_sampling_extra(&e, root, protocol, &p->smp) < 0) {
        json_decref(root);
        di_prompt_free(p);
        return di_error_set(err, e.status, msg);
    }
    if (st == DI_OK) rc_sampling_check_supported(root, protocol, 2, &p->smp);
    json_decref(root);
    if (st != DI_OK) {
        di_prompt_free(p);
        return di_error_set(err, st, "out of memory rendering the prompt");
    }
    finish_prompt(codec, p);
    *out = p;
    return DI_OK;
}

DI_API const char *di_prompt_text(const di_prompt *prompt, size_t *len)
{
    if (!prompt) return NULL;
    if (len) *len = prompt->p.text.len;
    return prompt->p.text.s ? prompt->p.text.s : "";
}

DI_API di_status di_prompt_tokens(const di_prompt *prompt, const int32_t **ids, size_t *n_ids,
                                  di_error **err)
{
    if (!prompt || !ids || !n_ids)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "prompt, ids and n_ids must not be NULL");
    if (prompt->tokens_status != DI_OK)
        return di_error_set(err, prompt->tokens_status, prompt->tokens_message);
    *ids = prompt->ids;
    *n_ids = prompt->n_ids;
    return DI_OK;
}

DI_API int di_prompt_thinking(const di_prompt *prompt)
{
    return prompt ? prompt->thinking : 0;
}

DI_API int di_prompt_stream(const di_prompt *prompt)
{
    return prompt ? prompt->stream : 0;
}

DI_API float di_prompt_temperature(const di_prompt *prompt)
{
    return prompt ? prompt->temperature : 1.0f;
}

DI_API float di_prompt_top_p(const di_prompt *prompt)
{
    return prompt ? prompt->top_p : 1.0f;
}

DI_API size_t di_prompt_stop_count(const di_prompt *prompt)
{
    return prompt ? prompt->n_stops : 0;
}

DI_API const char *di_prompt_stop(const di_prompt *prompt, size_t i)
{
    return prompt && i < prompt->n_stops ? prompt->stops[i] : NULL;
}

DI_API size_t di_prompt_image_count(const di_prompt *prompt)
{
    return prompt ? prompt->n_images : 0;
}

DI_API const char *di_prompt_image_url(const di_prompt *prompt, size_t i)
{
    return prompt && i < prompt->n_images ? prompt->images[i] : NULL;
}

DI_API di_status di_prompt_max_tokens(const di_prompt *prompt, uint32_t prompt_tokens,
                                      uint32_t context_limit, uint32_t *max_tokens, di_error **err)
{
    if (!prompt || !max_tokens)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "prompt and max_tokens must not be NULL");
    uint64_t want = prompt->has_max_tokens ? prompt->max_tokens : 0;
    if ((uint64_t)prompt_tokens + want > context_limit) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "the model's context is %u tokens, but the request needs %llu (%u in the prompt, "
                 "%llu for the completion)",
                 context_limit, (unsigned long long)prompt_tokens + want, prompt_tokens,
                 (unsigned long long)want);
        return di_error_set(err, DI_ERR_CONTEXT_LENGTH, msg);
    }
    if (prompt->has_max_tokens) {
        *max_tokens = prompt->max_tokens;
        return DI_OK;
    }
    uint32_t dflt = !prompt->thinking ? 8192 : prompt->effort_max ? 131072 : 65536;
    uint32_t room = context_limit - prompt_tokens;
    *max_tokens = room < dflt ? (room ? room : 1) : dflt;
    return DI_OK;
}

DI_API void di_prompt_free(di_prompt *prompt)
{
    if (!prompt) return;
    for (size_t i = 0; i < prompt->n_stops; i++) free(prompt->stops[i]);
    free(prompt->stops);
    for (size_t i = 0; i < prompt->n_images; i++) free(prompt->images[i]);
    free(prompt->images);
    rc_prompt_free(&prompt->p);
    rc_reply_free(&prompt->reply);
    rc_sampling_free(&prompt->smp);
    free(prompt->ids);
    free(prompt);
}

const rc_reply *rc_prompt_reply(const di_prompt *p)
{
    return p && p->has_reply ? &p->reply : NULL;
}

const rc_sampling *rc_prompt_sampling(const di_prompt *p)
{
    return &p->smp;
}

int rc_codec_set_served_name(di_codec *codec, const char *name)
{
    char *copy = name ? strdup(name) : NULL;
    if (name && !copy) return -1;
    free(codec->served_name);
    codec->served_name = copy;
    return 0;
}
