/* di_stream_*: the public face of the output side (deepinfer.h). A stream owns a
 * parser, a writer, and the events and chunks of its last call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/struct_size.h"
#include "recipe/sampling.h"
#include "recipe/stream.h"
#include "recipe/writer.h"
#include "tokenizer/tokenizer.h"
#include "util/utf8.h"

typedef struct stream_event {
    di_stream_event_kind kind;
    int call;
    char *text;
    size_t len;
} stream_event;

struct di_stream {
    rc_reply reply;
    rc_parser *parser;
    rc_writer w;
    const di_tokenizer *tok;
    /* token pushes: ids of ordinary tokens not yet decoded (a character still
     * incomplete), and which ids are added tokens (decoded on their own) */
    int32_t *group;
    size_t n_group, cap_group;
    uint8_t *added;  /* bitmap over the vocabulary, built on the first token push */
    rc_buf group_lp; /* the held group's log-probability entries (comma-separated JSON) */
    rc_pieces pieces;
    rc_chunks chunks;
    stream_event *events;
    size_t n_events, cap_events;
    int ready, finished;
};

/* The first release's di_stream_options ends at `n_stop_sequences`. */
_Static_assert(sizeof(di_stream_options) ==
                   DI_STRUCT_SIZE_UNTIL(di_stream_options, n_stop_sequences),
               "di_stream_options has trailing padding");

/* The size the exported di_stream_options_init writes: the struct of the
 * release that added di_stream_options_init_size. Frozen: binaries compiled
 * before the di_stream_options_init macro pass a struct no larger, so a field
 * appended later must not change it (it names today's last field, not sizeof). */
#define STREAM_OPTIONS_INIT_SIZE DI_STRUCT_SIZE_UNTIL(di_stream_options, n_stop_sequences)
_Static_assert(STREAM_OPTIONS_INIT_SIZE <= sizeof(di_stream_options),
               "di_stream_options_init's frozen size is a release of the struct");

DI_API void di_stream_options_init_size(di_stream_options *opts, size_t struct_size)
{
    di_struct_init(opts, struct_size); /* every default is zero */
}

DI_API void(di_stream_options_init)(di_stream_options *opts)
{
    di_stream_options_init_size(opts, STREAM_OPTIONS_INIT_SIZE);
}

static char *dup_or_null(const char *s, int *oom)
{
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = 1;
    return d;
}

static void clear_events(di_stream *s)
{
    for (size_t i = 0; i < s->n_events; i++) free(s->events[i].text);
    s->n_events = 0;
}

static int add_event(di_stream *s, di_stream_event_kind kind, int call, const char *text,
                     size_t len)
{
    if (s->n_events == s->cap_events) {
        size_t cap = s->cap_events ? s->cap_events * 2 : 16;
        stream_event *v = realloc(s->events, cap * sizeof *v);
        if (!v) return -1;
        s->events = v;
        s->cap_events = cap;
    }
    char *t = malloc(len + 1);
    if (!t) return -1;
    if (len) memcpy(t, text, len);
    t[len] = '\0';
    s->events[s->n_events++] = (stream_event){kind, call, t, len};
    return 0;
}

/* Parsed pieces → public events. */
static int pieces_to_events(di_stream *s)
{
    for (size_t i = 0; i < s->pieces.n; i++) {
        const rc_piece *pc = &s->pieces.v[i];
        const char *t = pc->text.s ? pc->text.s : "";
        int r = 0;
        switch (pc->cls) {
        case RC_PIECE_REASONING: r = add_event(s, DI_STREAM_REASONING, -1, t, pc->text.len); break;
        case RC_PIECE_CONTENT: r = add_event(s, DI_STREAM_TEXT, -1, t, pc->text.len); break;
        case RC_PIECE_CALL_BEGIN:
            r = add_event(s, DI_STREAM_TOOL_CALL_BEGIN, pc->call, t, pc->text.len);
            break;
        case RC_PIECE_CALL_END: {
            const rc_buf *a = &s->w.calls[pc->call].arguments;
            r = add_event(s, DI_STREAM_TOOL_CALL_END, pc->call, a->s ? a->s : "", a->len);
            break;
        }
        default: r = add_event(s, DI_STREAM_TOOL_CALL_ARGUMENTS, pc->call, t, pc->text.len); break;
        }
        if (r != 0) return -1;
    }
    return 0;
}

static void begin_call(di_stream *s)
{
    clear_events(s);
    rc_chunks_clear(&s->chunks);
    rc_pieces_clear(&s->pieces);
}

DI_API di_status di_stream_create(const di_prompt *prompt, const di_tokenizer *tok,
                                  const di_stream_options *opts, di_stream **out, di_error **err)
{
    if (!prompt || !out)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "prompt and out must not be NULL");
    *out = NULL;
    di_stream_options o;
    di_stream_options_init(&o);
    if (opts) {
        const char *why = NULL;
        if (di_struct_copy_in(&o, sizeof o, opts,
                              DI_STRUCT_SIZE_UNTIL(di_stream_options, n_stop_sequences),
                              &why) != DI_OK)
            return di_error_set(err, DI_ERR_INVALID_ARGUMENT, why);
        if (o.override_parsing != 0 && o.override_parsing != 1)
            return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "override_parsing must be 0 or 1");
        if (o.thinking_stage < DI_THINKING_OFF ||
            o.thinking_stage > DI_THINKING_CONTENT_CONTINUATION)
            return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "thinking_stage: unknown value");
        if (o.reserved != 0)
            return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "reserved must be 0");
        if (o.n_stop_sequences && !o.stop_sequences)
            return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                                "stop_sequences must not be NULL when n_stop_sequences > 0");
        for (size_t i = 0; i < o.n_stop_sequences; i++) {
            const char *q = o.stop_sequences[i];
            if (!q || !q[0])
                return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                                    "a stop sequence is NULL or empty");
            di_utf8_scan sc = di_utf8_scan_bytes((const uint8_t *)q, strlen(q));
            if (sc.state != DI_UTF8_VALID)
                return di_error_set(err, DI_ERR_INVALID_UTF8, "a stop sequence is not valid UTF-8");
        }
    }
    const rc_reply *src = rc_prompt_reply(prompt);
    if (!src) return di_error_set(err, DI_ERR_INTERNAL, "the prompt carries no request facts");
    di_stream *s = calloc(1, sizeof *s);
    if (!s) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    int oom = rc_reply_copy(&s->reply, src);
    if (!oom && o.override_parsing)
        oom = rc_reply_override(&s->reply, o.parse_tool_calls != 0, o.starts_in_tool_calls != 0,
                                o.parse_json_output != 0, (rc_stage)o.thinking_stage,
                                o.stop_sequences, o.n_stop_sequences);
    s->tok = tok;
    s->w.reply = &s->reply;
    s->w.created = o.created;
    s->w.t_created = o.created ? o.created : rc_now(); /* when the generator is made */
    s->w.has_tokenizer = tok != NULL;
    rc_seed(&s->w, o.seed);
    if (o.response_id) {
        s->w.id = dup_or_null(o.response_id, &oom);
    } else {
        char id[64];
        const char *prefix = s->reply.protocol == DI_PROTOCOL_CHAT       ? "chatcmpl-"
                             : s->reply.protocol == DI_PROTOCOL_MESSAGES ? "msg_"
                                                                         : "resp_";
        rc_random_id(&s->w, prefix, id, sizeof id);
        s->w.id = dup_or_null(id, &oom);
    }
    s->w.model = dup_or_null(o.model ? o.model : s->reply.model_name, &oom);
    s->w.signature = dup_or_null(o.signature ? o.signature : s->w.id, &oom);
    s->parser = oom ? NULL : rc_parser_new(&s->reply);
    if (oom || !s->parser) {
        di_stream_free(s);
        return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *out = s;
    return DI_OK;
}

static di_status fail_oom(di_stream *s, di_error **err)
{
    s->finished = 1;
    return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
}

DI_API di_status di_stream_ready(di_stream *s, uint32_t prompt_tokens,
                                 uint32_t prompt_cache_hit_tokens, const char *system_fingerprint,
                                 di_error **err)
{
    if (!s) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "stream must not be NULL");
    begin_call(s); /* every call's outputs replace the last call's, failed calls too */
    if (s->finished) return di_error_set(err, DI_ERR_INVALID_STATE, "the stream has finished");
    if (s->ready || s->w.started) return DI_OK; /* as the reference: ignored */
    s->ready = 1;
    s->w.prompt_tokens = prompt_tokens;
    s->w.cache_hit_tokens = prompt_cache_hit_tokens;
    int oom = 0;
    s->w.fingerprint = dup_or_null(system_fingerprint, &oom);
    if (oom || rc_write_start(&s->w, &s->chunks) != 0) return fail_oom(s, err);
    return DI_OK;
}

static di_status finish_now(di_stream *s, di_finish reason, di_error **err);

static di_status push_text(di_stream *s, const char *text, size_t len, uint32_t n_tokens,
                           di_error **err)
{
    begin_call(s);
    s->n_group = 0; /* a text push discards token ids held for an incomplete character */
    s->group_lp.len = 0;
    s->w.completion_tokens += n_tokens;
    if (rc_parser_push(s->parser, text, len, &s->pieces) != 0) return fail_oom(s, err);
    /* a stop sequence ends the stream in the push that completes it */
    if (rc_parser_stopped(s->parser)) return finish_now(s, DI_FINISH_STOP, err);
    if (rc_write_pieces(&s->w, &s->pieces, &s->chunks) != 0 || pieces_to_events(s) != 0)
        return fail_oom(s, err);
    return DI_OK;
}

DI_API di_status di_stream_push_text(di_stream *s, const char *text, size_t len, uint32_t n_tokens,
                                     di_error **err)
{
    if (!s) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "stream must not be NULL");
    begin_call(s);
    if (!text && len) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "text must not be NULL");
    if (s->finished) return di_error_set(err, DI_ERR_INVALID_STATE, "the stream has finished");
    di_utf8_scan scan = di_utf8_scan_bytes((const uint8_t *)text, len);
    if (scan.state != DI_UTF8_VALID) {
        char msg[96];
        snprintf(msg, sizeof msg, "text is not valid UTF-8 at byte offset %zu", scan.valid);
        return di_error_set(err, DI_ERR_INVALID_UTF8, msg);
    }
    return push_text(s, text ? text : "", len, n_tokens, err);
}

/* Decode ids [0, n) of the group as one text (HF decode: invalid UTF-8 becomes
 * U+FFFD). */
static int decode_ids(const di_stream *s, const int32_t *ids, size_t n, char **text, size_t *len)
{
    return di_tokenizer_decode(s->tok, ids, n, 0, text, len, NULL) == DI_OK ? 0 : -1;
}

/* Push decoded token text as its own piece, counting its ids; an added token's
 * text is atomic (stop sequences do not match into it). lp: the ids'
 * log-probability entries (NULL: none), recorded for the push. */
static di_status push_decoded(di_stream *s, const int32_t *ids, size_t n, int added,
                              const rc_buf *lp, di_error **err)
{
    char *text;
    size_t len;
    if (lp && lp->len &&
        rc_writer_add_logprobs(&s->w, rc_parser_next_push(s->parser), lp->s, lp->len) != 0)
        return fail_oom(s, err);
    if (decode_ids(s, ids, n, &text, &len) != 0) return fail_oom(s, err);
    s->w.completion_tokens += (uint32_t)n;
    int r = added ? rc_parser_push_atomic(s->parser, text, len, &s->pieces)
                  : rc_parser_push(s->parser, text, len, &s->pieces);
    di_text_free(text);
    return r != 0 ? fail_oom(s, err) : DI_OK;
}

static int build_added(di_stream *s)
{
    const di_tokenizer_impl *t = (const di_tokenizer_impl *)s->tok;
    int32_t vocab = di_tokenizer_vocab_size(s->tok);
    s->added = calloc(((size_t)vocab + 7) / 8, 1);
    if (!s->added) return -1;
    for (size_t i = 0; i < t->n_added; i++) {
        int32_t id = t->added[i].id;
        if (id >= 0 && id < vocab) s->added[id >> 3] |= (uint8_t)(1u << (id & 7));
    }
    return 0;
}

/* The log probabilities of a token push (di_stream_push_tokens_logprobs). */
typedef struct push_lp {
    const float *lp;
    const int32_t *top_ids;
    const float *top;
    size_t n_top;
} push_lp;

/* A token's text for a log-probability entry: its bytes when they are UTF-8,
 * else every byte as a "\xNN" escape, as the reference writes them. */
static void lp_token(rc_buf *b, const uint8_t *bytes, size_t n)
{
    di_utf8_scan scan = di_utf8_scan_bytes(bytes, n);
    if (scan.state == DI_UTF8_VALID) {
        rc_json_string(b, (const char *)bytes, n);
        return;
    }
    rc_buf esc = {0};
    for (size_t i = 0; i < n; i++) {
        char t[8];
        snprintf(t, sizeof t, "\\x%02x", bytes[i]);
        rc_buf_adds(&esc, t);
    }
    if (esc.oom) b->oom = 1;
    rc_json_string(b, esc.s ? esc.s : "", esc.len);
    free(esc.s);
}

/* `"token":…,"logprob":…,"bytes":[…]` of token id with log probability lp. */
static void lp_fields(const di_stream *s, rc_buf *b, int32_t id, float lp)
{
    const uint8_t *bytes = NULL;
    size_t n = 0;
    tok_error terr;
    if (tok_token_bytes((const di_tokenizer_impl *)s->tok, id, &bytes, &n, &terr) != DI_OK) n = 0;
    rc_buf_adds(b, "\"token\":");
    lp_token(b, bytes, n);
    rc_buf_adds(b, ",\"logprob\":");
    rc_json_f32(b, lp);
    rc_buf_adds(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) rc_buf_adds(b, ",");
        rc_json_u64(b, bytes[i]);
    }
    rc_buf_adds(b, "]");
}

/* Append the entry of token i of the push to b (comma-separated). */
static void lp_entry(const di_stream *s, rc_buf *b, const int32_t *ids, size_t i, const push_lp *l)
{
    if (b->len) rc_buf_adds(b, ",");
    rc_buf_adds(b, "{");
    lp_fields(s, b, ids[i], l->lp[i]);
    rc_buf_adds(b, ",\"top_logprobs\":[");
    for (size_t k = 0; k < l->n_top; k++) {
        if (k) rc_buf_adds(b, ",");
        rc_buf_adds(b, "{");
        lp_fields(s, b, l->top_ids[i * l->n_top + k], l->top[i * l->n_top + k]);
        rc_buf_adds(b, "}");
    }
    rc_buf_adds(b, "]}");
}

static di_status push_tokens(di_stream *s, const int32_t *ids, size_t n_ids, const push_lp *l,
                             di_error **err);

DI_API di_status di_stream_push_tokens(di_stream *s, const int32_t *ids, size_t n_ids,
                                       di_error **err)
{
    return push_tokens(s, ids, n_ids, NULL, err);
}

DI_API di_status di_stream_push_tokens_logprobs(di_stream *s, const int32_t *ids, size_t n_ids,
                                                const float *logprobs, size_t n_logprobs,
                                                const int32_t *top_ids, const float *top_logprobs,
                                                size_t n_top, di_error **err)
{
    if (!s) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "stream must not be NULL");
    begin_call(s);
    if (n_logprobs != n_ids)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "invalid log probabilities: %zu log probabilities for %zu token IDs",
                             n_logprobs, n_ids);
    if (!logprobs && n_logprobs)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "logprobs must not be NULL");
    if (n_top > 20) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "n_top: at most 20");
    if (n_top && n_ids && (!top_ids || !top_logprobs))
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "top_ids and top_logprobs must not be NULL when n_top > 0");
    int32_t vocab = s->tok ? di_tokenizer_vocab_size(s->tok) : 0;
    for (size_t i = 0; s->tok && i < n_ids * n_top; i++)
        if (top_ids[i] < 0 || top_ids[i] >= vocab)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "top_ids[%zu] = %d is outside the vocabulary [0, %d)", i,
                                 (int)top_ids[i], (int)vocab);
    push_lp l = {logprobs, top_ids, top_logprobs, n_top};
    return push_tokens(s, ids, n_ids, &l, err);
}

static di_status push_tokens(di_stream *s, const int32_t *ids, size_t n_ids, const push_lp *l,
                             di_error **err)
{
    if (!s) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "stream must not be NULL");
    begin_call(s);
    if (!ids && n_ids) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "ids must not be NULL");
    if (s->finished) return di_error_set(err, DI_ERR_INVALID_STATE, "the stream has finished");
    if (!s->tok)
        return di_error_set(err, DI_ERR_INVALID_STATE,
                            "the stream was created without a tokenizer: push text instead");
    int32_t vocab = di_tokenizer_vocab_size(s->tok);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= vocab) {
            char msg[128];
            snprintf(msg, sizeof msg, "ids[%zu] = %d is outside the vocabulary [0, %d)", i,
                     (int)ids[i], (int)vocab);
            return di_error_set(err, DI_ERR_INVALID_ARGUMENT, msg);
        }
    if (n_ids == 0) return DI_OK; /* nothing to decode: no output, as the reference */
    if (!s->added && build_added(s) != 0) return fail_oom(s, err);
    if (s->n_group + n_ids > s->cap_group) {
        size_t cap = s->cap_group ? s->cap_group : 16;
        while (cap < s->n_group + n_ids) cap *= 2;
        int32_t *v = realloc(s->group, cap * sizeof *v);
        if (!v) return fail_oom(s, err);
        s->group = v;
        s->cap_group = cap;
    }
    begin_call(s);
    /* as the reference decodes: ordinary ids in groups, an added token alone (its
     * text a piece of its own), and a group whose text ends in an incomplete
     * character held whole until the next token push */
    for (size_t i = 0; i < n_ids; i++) {
        int32_t id = ids[i];
        if (s->added[id >> 3] & (1u << (id & 7))) {
            di_status st;
            if (s->n_group) {
                st = push_decoded(s, s->group, s->n_group, 0, &s->group_lp, err);
                s->n_group = 0;
                s->group_lp.len = 0;
                if (st != DI_OK) return st;
                if (rc_parser_stopped(s->parser)) return finish_now(s, DI_FINISH_STOP, err);
            }
            rc_buf one = {0};
            if (l) lp_entry(s, &one, ids, i, l);
            if (one.oom) {
                free(one.s);
                return fail_oom(s, err);
            }
            st = push_decoded(s, &id, 1, 1, l ? &one : NULL, err);
            free(one.s);
            if (st != DI_OK) return st;
            if (rc_parser_stopped(s->parser)) return finish_now(s, DI_FINISH_STOP, err);
        } else {
            s->group[s->n_group++] = id;
            if (l) lp_entry(s, &s->group_lp, ids, i, l);
            if (s->group_lp.oom) return fail_oom(s, err);
        }
    }
    if (s->n_group) {
        char *text;
        size_t len;
        if (decode_ids(s, s->group, s->n_group, &text, &len) != 0) return fail_oom(s, err);
        int incomplete = len >= 3 && memcmp(text + len - 3, "\xEF\xBF\xBD", 3) == 0;
        di_text_free(text);
        if (!incomplete) {
            di_status st = push_decoded(s, s->group, s->n_group, 0, &s->group_lp, err);
            s->n_group = 0;
            s->group_lp.len = 0;
            if (st != DI_OK) return st;
            if (rc_parser_stopped(s->parser)) return finish_now(s, DI_FINISH_STOP, err);
        }
    }
    if (rc_write_pieces(&s->w, &s->pieces, &s->chunks) != 0 || pieces_to_events(s) != 0)
        return fail_oom(s, err);
    return DI_OK;
}

/* Reasoning tokens: the reasoning text encoded with the stream's tokenizer and its full
 * vocabulary (added tokens included), as the reference counts them. */
static uint32_t count_reasoning_tokens(const di_stream *s)
{
    if (!s->tok || s->w.reasoning.len == 0 || s->reply.stage == RC_STAGE_NONE) return 0;
    int32_t *ids = NULL;
    size_t n = 0;
    if (di_tokenizer_encode(s->tok, s->w.reasoning.s, s->w.reasoning.len,
                            DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED, &ids, &n, NULL) != DI_OK)
        return 0;
    di_tokens_free(ids);
    return (uint32_t)n;
}

DI_API di_status di_stream_finish(di_stream *s, di_finish reason, di_error **err)
{
    if (!s) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "stream must not be NULL");
    begin_call(s);
    if (reason < DI_FINISH_STOP || reason > DI_FINISH_UNKNOWN)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "reason: unknown value");
    if (s->finished) return DI_OK; /* a second finish produces nothing */
    return finish_now(s, reason, err);
}

/* Release what is held, close the response, write the final chunks. The pieces
 * of the current call (if any) are still to be written. */
static di_status finish_now(di_stream *s, di_finish reason, di_error **err)
{
    s->n_group = 0; /* ids held for an incomplete character are dropped, as the reference does */
    s->group_lp.len = 0;
    if (rc_parser_finish(s->parser, &s->pieces) != 0) return fail_oom(s, err);
    if (rc_write_pieces(&s->w, &s->pieces, &s->chunks) != 0) return fail_oom(s, err);
    s->w.stop_sequence = rc_parser_stop_sequence(s->parser);
    s->w.reasoning_tokens = count_reasoning_tokens(s);
    s->finished = 1;
    if (rc_write_finish(&s->w, (rc_finish)reason, &s->chunks) != 0 || pieces_to_events(s) != 0)
        return fail_oom(s, err);
    if (add_event(s, DI_STREAM_FINISH, -1, s->w.finish_reason, strlen(s->w.finish_reason)) != 0)
        return fail_oom(s, err);
    return DI_OK;
}

int rc_stream_set_choice(di_stream *s, uint32_t index, const di_stream *first)
{
    s->w.choice = index;
    s->w.multi = 1;
    if (!first) return 0;
    char *id = strdup(first->w.id ? first->w.id : "");
    if (!id) return -1;
    free(s->w.id);
    s->w.id = id;
    s->w.t_created = first->w.t_created;
    return 0;
}

int rc_stream_join(di_stream *const *s, size_t n)
{
    rc_writer *ws[RC_MAX_N];
    if (n == 0 || n > RC_MAX_N) return -1;
    for (size_t i = 0; i < n; i++) ws[i] = &s[i]->w;
    begin_call(s[0]);
    char *response;
    int r = rc_chat_join(ws, n, &s[0]->chunks, &response);
    free(s[0]->w.response);
    s[0]->w.response = response;
    return r;
}

DI_API const char *di_stream_stop_sequence(const di_stream *s)
{
    return s && s->finished ? rc_parser_stop_sequence(s->parser) : NULL;
}

DI_API di_status di_stream_options_from_prompt(const di_prompt *prompt, di_stream_options *opts)
{
    const rc_reply *r = prompt ? rc_prompt_reply(prompt) : NULL;
    /* the fields it fills are the first release's: a struct of any later
     * release, or of this one, holds them */
    if (!r || !opts ||
        opts->struct_size < DI_STRUCT_SIZE_UNTIL(di_stream_options, n_stop_sequences))
        return DI_ERR_INVALID_ARGUMENT;
    opts->override_parsing = 1;
    opts->parse_tool_calls = r->parse_tool_calls;
    opts->starts_in_tool_calls = r->starts_in_tool_calls;
    opts->parse_json_output = r->parse_json_output;
    opts->thinking_stage = (int32_t)r->stage;
    opts->stop_sequences = (const char *const *)r->stops;
    opts->n_stop_sequences = r->n_stops;
    return DI_OK;
}

DI_API int di_stream_finished(const di_stream *s)
{
    return s ? s->finished : 0;
}

DI_API size_t di_stream_event_count(const di_stream *s)
{
    return s ? s->n_events : 0;
}

DI_API di_stream_event_kind di_stream_event_kind_at(const di_stream *s, size_t i)
{
    return s && i < s->n_events ? s->events[i].kind : (di_stream_event_kind)0;
}

DI_API const char *di_stream_event_text(const di_stream *s, size_t i, size_t *len)
{
    if (!s || i >= s->n_events) {
        if (len) *len = 0;
        return "";
    }
    if (len) *len = s->events[i].len;
    return s->events[i].text;
}

DI_API int di_stream_event_call_index(const di_stream *s, size_t i)
{
    return s && i < s->n_events ? s->events[i].call : -1;
}

DI_API const char *di_stream_event_call_id(const di_stream *s, size_t i)
{
    if (!s || i >= s->n_events || s->events[i].call < 0) return NULL;
    return s->w.calls[s->events[i].call].id;
}

DI_API const char *di_stream_event_call_name(const di_stream *s, size_t i)
{
    if (!s || i >= s->n_events || s->events[i].call < 0) return NULL;
    return s->w.calls[s->events[i].call].name;
}

DI_API size_t di_stream_chunk_count(const di_stream *s)
{
    return s ? s->chunks.n : 0;
}

DI_API const char *di_stream_chunk_json(const di_stream *s, size_t i, size_t *len)
{
    if (!s || i >= s->chunks.n) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = s->chunks.v[i].json_len;
    return s->chunks.v[i].json;
}

DI_API const char *di_stream_chunk_event(const di_stream *s, size_t i)
{
    return s && i < s->chunks.n ? s->chunks.v[i].event : NULL;
}

DI_API const char *di_stream_chunk_event_name(const di_stream *s, size_t i)
{
    return di_stream_chunk_event(s, i);
}

DI_API const char *di_stream_event_kind_name(di_stream_event_kind kind)
{
    switch (kind) {
    case DI_STREAM_REASONING: return "reasoning";
    case DI_STREAM_TEXT: return "text";
    case DI_STREAM_TOOL_CALL_BEGIN: return "tool_call_begin";
    case DI_STREAM_TOOL_CALL_ARGUMENTS: return "tool_call_arguments";
    case DI_STREAM_TOOL_CALL_END: return "tool_call_end";
    case DI_STREAM_FINISH: return "finish";
    }
    return NULL;
}

DI_API const char *di_stream_chunk_sse(const di_stream *s, size_t i, size_t *len)
{
    if (!s || i >= s->chunks.n) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = s->chunks.v[i].sse_len;
    return s->chunks.v[i].sse;
}

DI_API const char *di_stream_response_json(const di_stream *s, size_t *len)
{
    if (!s || !s->w.response) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = strlen(s->w.response);
    return s->w.response;
}

DI_API void di_stream_usage(const di_stream *s, uint32_t *completion_tokens,
                            uint32_t *reasoning_tokens)
{
    if (completion_tokens) *completion_tokens = s ? s->w.completion_tokens : 0;
    if (reasoning_tokens) *reasoning_tokens = s ? s->w.reasoning_tokens : 0;
}

DI_API void di_stream_free(di_stream *s)
{
    if (!s) return;
    clear_events(s);
    free(s->events);
    rc_chunks_clear(&s->chunks);
    free(s->chunks.v);
    rc_pieces_free(&s->pieces);
    rc_parser_free(s->parser);
    free(s->group);
    free(s->group_lp.s);
    free(s->added);
    rc_writer_free(&s->w);
    rc_reply_free(&s->reply);
    free(s);
}
