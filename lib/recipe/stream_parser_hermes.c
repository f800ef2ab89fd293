/* The stream parser's Hermes-style tool calls (ChatML: SmolLM2, Qwen2).
 *
 * A call is <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>, as
 * Qwen2's chat templates teach it (vLLM's and llama.cpp's "hermes" parsers read
 * the same). A block is held until it closes and then emitted whole: ARGS
 * (an object, or a string holding JSON) becomes the arguments JSON, written
 * with ", " and ": " separators as Python's json.dumps writes it. A block that is not
 * such an object is answer text, tags included. Text between calls is skipped. */
#include <stdlib.h>
#include <string.h>

#include "recipe/stream_parser_impl.h"

/* The call a block's text holds: {"name": string, "arguments": object or string}
 * ("parameters" read as well; no arguments: {}); NULL when it is not one. */
static json_t *hermes_parse(const char *s, size_t n, json_t **name, json_t **args)
{
    char msg[8];
    json_t *root = rc_json_parse(s, n, 64, msg, sizeof msg);
    *name = json_object_get(root, "name");
    *args = json_object_get(root, "arguments");
    if (!*args) *args = json_object_get(root, "parameters");
    if (json_is_object(root) && rc_json_is_text(*name) &&
        (!*args || json_is_object(*args) || rc_json_is_text(*args)))
        return root;
    json_decref(root);
    return NULL;
}

static size_t skip_ws(const char *s, size_t i, size_t n)
{
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) i++;
    return i;
}

/* The head of a call block that is not whole JSON: `{"name": NAME` with NAME a
 * complete JSON string, then optionally `, "arguments": ` (or "parameters").
 * Returns NAME (a new reference), with *args_at the offset where the arguments
 * begin (n when the head ends before them); NULL when the text does not open
 * with a complete name. */
static json_t *hermes_head(const char *s, size_t n, size_t *args_at)
{
    size_t i = skip_ws(s, 0, n);
    if (i >= n || s[i] != '{') return NULL;
    i = skip_ws(s, i + 1, n);
    if (n - i < 6 || memcmp(s + i, "\"name\"", 6) != 0) return NULL;
    i = skip_ws(s, i + 6, n);
    if (i >= n || s[i] != ':') return NULL;
    i = skip_ws(s, i + 1, n);
    if (i >= n || s[i] != '"') return NULL;
    size_t end = i + 1;
    while (end < n && s[end] != '"') end += s[end] == '\\' ? 2 : 1;
    if (end >= n) return NULL; /* the name is cut short */
    char msg[8];
    json_t *name = rc_json_parse(s + i, end + 1 - i, 2, msg, sizeof msg);
    if (!rc_json_is_text(name)) {
        json_decref(name);
        return NULL;
    }
    *args_at = n;
    i = skip_ws(s, end + 1, n);
    if (i < n && s[i] == ',') {
        i = skip_ws(s, i + 1, n);
        static const char *const keys[] = {"\"arguments\"", "\"parameters\""};
        for (size_t k = 0; k < 2; k++) {
            size_t m = strlen(keys[k]);
            if (n - i < m || memcmp(s + i, keys[k], m) != 0) continue;
            size_t j = skip_ws(s, i + m, n);
            if (j < n && s[j] == ':') *args_at = skip_ws(s, j + 1, n);
        }
    }
    return name;
}

/* A call block that is no whole call but opens with its name: a call with the
 * arguments as written, as the reference returns a DSML call the output ended
 * inside — the name and the arguments so far, no markup; such a call is not
 * ended (the writers close it at the finish). `closed`: the block ended with
 * </tool_call> (the prompt wrote its head): the arguments are trimmed and,
 * when they are JSON only without it, the object's closing brace left out. Returns 0 when the block
 * has no name (it is dropped, as the reference drops a DSML invoke cut before its name). */
static int hermes_partial_call(rc_parser *p, rc_pieces *out, const char *s, size_t n, int closed)
{
    size_t at;
    json_t *name = hermes_head(s, n, &at);
    if (!name) return 0;
    p->n_calls++;
    sp_add_piece(p, out, RC_PIECE_CALL_BEGIN, p->push, p->n_calls - 1, json_string_value(name),
                 json_string_length(name));
    json_decref(name);
    size_t len = n - at;
    const char *a = s + at;
    if (closed) {
        while (len && (a[len - 1] == ' ' || a[len - 1] == '\n' || a[len - 1] == '\t' ||
                       a[len - 1] == '\r'))
            len--;
        char msg[8];
        json_t *v = rc_json_parse(a, len, 64, msg, sizeof msg);
        if (!v && len && a[len - 1] == '}' &&
            (v = rc_json_parse(a, len - 1, 64, msg, sizeof msg)) != NULL)
            len--;
        json_decref(v);
    }
    if (len) sp_add_piece(p, out, RC_PIECE_ARGS_VALUE, p->push, p->n_calls - 1, a, len);
    if (closed) sp_add_piece(p, out, RC_PIECE_CALL_END, p->push, p->n_calls - 1, "", 0);
    return 1;
}

static void hermes_call(rc_parser *p, rc_pieces *out, const char *s, size_t n, int closed)
{
    json_t *name, *args, *root = hermes_parse(s, n, &name, &args);
    /* the output ended inside the block (a call cut short), or the block the
     * prompt opened with a named function's head is no whole call: never
     * markup or prompt text in the answer */
    if (!root && (!closed || (p->h_prompt_open && p->reply->call_prefix))) {
        hermes_partial_call(p, out, s, n, closed);
        return;
    }
    if (!root) {
        /* not a call: the block is answer text */
        rc_buf raw = {0};
        if (!p->h_prompt_open) rc_buf_adds(&raw, H_CALL_BEGIN);
        rc_buf_add(&raw, s, n);
        if (closed) rc_buf_adds(&raw, H_CALL_END);
        if (raw.oom) out->oom = 1;
        if (raw.s) sp_add_piece(p, out, RC_PIECE_CONTENT, p->push, -1, raw.s, raw.len);
        free(raw.s);
        return;
    }
    p->n_calls++;
    sp_add_piece(p, out, RC_PIECE_CALL_BEGIN, p->push, p->n_calls - 1, json_string_value(name),
                 json_string_length(name));
    rc_buf b = {0};
    if (!args) {
        rc_buf_adds(&b, "{}");
    } else if (json_is_object(args)) {
        rc_pyjson(&b, args, RC_FLOAT_V4);
    } else {
        rc_buf_add(&b, json_string_value(args), json_string_length(args));
    }
    if (b.oom) out->oom = 1;
    if (b.s) sp_add_piece(p, out, RC_PIECE_ARGS_VALUE, p->push, p->n_calls - 1, b.s, b.len);
    free(b.s);
    sp_add_piece(p, out, RC_PIECE_CALL_END, p->push, p->n_calls - 1, "", 0);
    json_decref(root);
}

void sp_hermes_process(rc_parser *p, rc_pieces *out)
{
    while (p->state == P_TOOLS && p->buf.len > 0) {
        if (!p->h_body) {
            /* between blocks: whitespace, then another <tool_call>, or the end of
             * the calls — after a call, text that is none ends the output (the
             * model should have ended its turn); after blocks that were not
             * calls, it is answer text again */
            size_t ws = 0;
            while (ws < p->buf.len && (p->buf.s[ws] == ' ' || p->buf.s[ws] == '\n' ||
                                       p->buf.s[ws] == '\t' || p->buf.s[ws] == '\r'))
                ws++;
            if (ws == p->buf.len) return; /* held: what follows decides */
            size_t m = strlen(H_CALL_BEGIN), left = p->buf.len - ws, k = left < m ? left : m;
            if (memcmp(p->buf.s + ws, H_CALL_BEGIN, k) == 0) {
                if (k < m) return; /* perhaps the next call */
                sp_consume(p, ws + m);
                p->h_body = 1;
                continue;
            }
            if (p->n_calls > 0) {
                p->h_done = 1;
                sp_consume(p, p->buf.len);
            } else {
                p->state = P_CONTENT;
            }
            return;
        }
        /* only the new bytes are searched (and the tag's length before them):
         * a block that never closes costs linear time */
        size_t from = p->h_scanned;
        const char *end = sp_find(p->buf.s + from, p->buf.len - from, H_CALL_END);
        if (!end) {
            size_t keep = strlen(H_CALL_END) - 1;
            p->h_scanned = p->buf.len > keep ? p->buf.len - keep : 0;
            return;
        }
        p->h_scanned = 0;
        hermes_call(p, out, p->buf.s, (size_t)(end - p->buf.s), 1);
        p->h_prompt_open = 0;
        sp_consume(p, (size_t)(end - p->buf.s) + strlen(H_CALL_END));
        p->h_body = 0;
    }
}

void sp_hermes_finish(rc_parser *p, rc_pieces *out)
{
    if (!p->h_body || !p->buf.len) return;
    /* a block the output ended inside: a call when its JSON is whole, a
     * closing tag cut short after it ignored */
    size_t n = p->buf.len, cut = n;
    for (size_t k = strlen(H_CALL_END) - 1; k > 0 && cut == n; k--)
        if (n >= k && memcmp(p->buf.s + n - k, H_CALL_END, k) == 0) cut = n - k;
    json_t *name, *args, *whole = cut < n ? hermes_parse(p->buf.s, cut, &name, &args) : NULL;
    json_decref(whole);
    hermes_call(p, out, p->buf.s, whole ? cut : n, 0);
}
