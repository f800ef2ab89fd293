/* OpenAI Responses stream events and the complete response object, as
 * deepseek-recipe's ResponsesChunkGenerator and ResponsesResponse write them
 * (docs/stream.md, "Responses"): a response object echoing the request's
 * settings, output items (reasoning, message, function_call, custom_tool_call)
 * opened and closed as the output moves on, and a sequence_number on every event. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/writer.h"

enum { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL, ITEM_CUSTOM };
enum { CUSTOM_UNDECIDED, CUSTOM_INPUT, CUSTOM_JSON, CUSTOM_DONE };

static const char *str_or_null(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return rc_json_is_text(v) ? json_string_value(v) : NULL;
}

/* A float setting as echoed: the request's value held as float32, or 1.0. */
static void echo_f32(rc_buf *b, const json_t *req, const char *key)
{
    const json_t *v = json_object_get(req, key);
    rc_json_f32(b, json_is_number(v) ? (float)json_number_value(v) : 1.0f);
}

static void echo_value_or_null(rc_buf *b, const json_t *v)
{
    if (v && !json_is_null(v))
        rc_compact_json(b, v);
    else
        rc_buf_adds(b, "null");
}

static void echo_function(rc_buf *b, const json_t *t)
{
    rc_buf_adds(b, "{\"type\":\"function\",\"name\":");
    rc_json_str0(b, str_or_null(t, "name"));
    rc_buf_adds(b, ",\"description\":");
    echo_value_or_null(b, json_object_get(t, "description"));
    rc_buf_adds(b, ",\"parameters\":");
    echo_value_or_null(b, json_object_get(t, "parameters"));
    rc_buf_adds(b, ",\"strict\":");
    echo_value_or_null(b, json_object_get(t, "strict"));
    rc_buf_adds(b, "}");
}

/* The request's tools as the reference echoes them: functions completed with
 * nulls, namespaces with their functions, custom tools by name, web_search with
 * its settings; other hosted tools left out. */
static void echo_tools(rc_buf *b, const json_t *req)
{
    const json_t *tools = json_object_get(req, "tools");
    rc_buf_adds(b, "[");
    int n = 0;
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        const char *type = str_or_null(t, "type");
        if (!type) continue;
        if (strcmp(type, "function") == 0) {
            if (n++) rc_buf_adds(b, ",");
            echo_function(b, t);
        } else if (strcmp(type, "namespace") == 0) {
            if (n++) rc_buf_adds(b, ",");
            rc_buf_adds(b, "{\"type\":\"namespace\",\"name\":");
            rc_json_str0(b, str_or_null(t, "name"));
            rc_buf_adds(b, ",\"description\":");
            echo_value_or_null(b, json_object_get(t, "description"));
            rc_buf_adds(b, ",\"tools\":[");
            size_t j;
            const json_t *f;
            int m = 0;
            json_array_foreach(json_object_get(t, "tools"), j, f)
            {
                if (m++) rc_buf_adds(b, ",");
                echo_function(b, f);
            }
            rc_buf_adds(b, "]}");
        } else if (strcmp(type, "custom") == 0) {
            if (n++) rc_buf_adds(b, ",");
            rc_buf_adds(b, "{\"type\":\"custom\",\"name\":");
            rc_json_str0(b, str_or_null(t, "name"));
            rc_buf_adds(b, "}");
        } else if (strcmp(type, "web_search") == 0) {
            if (n++) rc_buf_adds(b, ",");
            rc_buf_adds(b, "{\"type\":\"web_search\",\"search_context_size\":");
            echo_value_or_null(b, json_object_get(t, "search_context_size"));
            rc_buf_adds(b, ",\"user_location\":");
            const json_t *loc = json_object_get(t, "user_location");
            if (json_is_object(loc)) {
                static const char *const keys[] = {"city", "country", "region", "timezone"};
                for (int k = 0; k < 4; k++) {
                    rc_buf_adds(b, k ? ",\"" : "{\"");
                    rc_buf_adds(b, keys[k]);
                    rc_buf_adds(b, "\":");
                    echo_value_or_null(b, json_object_get(loc, keys[k]));
                }
                rc_buf_adds(b, "}");
            } else {
                rc_buf_adds(b, "null");
            }
            rc_buf_adds(b, "}");
        }
    }
    rc_buf_adds(b, "]");
}

static void echo_text(rc_buf *b, const json_t *req)
{
    const json_t *text = json_object_get(req, "text");
    const json_t *format = json_object_get(text, "format");
    const char *type = str_or_null(format, "type");
    rc_buf_adds(b, "{\"format\":");
    if (type && strcmp(type, "json_schema") == 0) {
        rc_buf_adds(b, "{\"type\":\"json_schema\",\"name\":");
        echo_value_or_null(b, json_object_get(format, "name"));
        rc_buf_adds(b, ",\"schema\":");
        echo_value_or_null(b, json_object_get(format, "schema"));
        rc_buf_adds(b, ",\"description\":");
        echo_value_or_null(b, json_object_get(format, "description"));
        rc_buf_adds(b, ",\"strict\":");
        echo_value_or_null(b, json_object_get(format, "strict"));
        rc_buf_adds(b, "}");
    } else if (type && strcmp(type, "json_object") == 0) {
        rc_buf_adds(b, "{\"type\":\"json_object\"}");
    } else {
        rc_buf_adds(b, "{\"type\":\"text\"}");
    }
    rc_buf_adds(b, ",\"verbosity\":");
    echo_value_or_null(b, json_object_get(text, "verbosity"));
    rc_buf_adds(b, "}");
}

static void echo_tool_choice(rc_buf *b, const json_t *req)
{
    const json_t *c = json_object_get(req, "tool_choice");
    if (rc_json_is_text(c)) {
        rc_json_str0(b, json_string_value(c));
    } else if (json_is_object(c)) {
        rc_buf_adds(b, "{\"type\":");
        rc_json_str0(b, str_or_null(c, "type"));
        rc_buf_adds(b, ",\"name\":");
        rc_json_str0(b, str_or_null(c, "name"));
        rc_buf_adds(b, "}");
    } else {
        rc_buf_adds(b, "\"auto\"");
    }
}

static void usage(const rc_writer *w, rc_buf *b)
{
    rc_buf_adds(b, "{\"input_tokens\":");
    rc_json_u64(b, w->prompt_tokens);
    rc_buf_adds(b, ",\"input_tokens_details\":{\"cached_tokens\":");
    rc_json_u64(b, w->cache_hit_tokens);
    rc_buf_adds(b, "},\"output_tokens\":");
    rc_json_u64(b, w->completion_tokens);
    rc_buf_adds(b, ",\"output_tokens_details\":{\"reasoning_tokens\":");
    rc_json_u64(b, w->reasoning_tokens);
    rc_buf_adds(b, "},\"total_tokens\":");
    rc_json_u64(b, (uint64_t)w->prompt_tokens + w->completion_tokens);
    rc_buf_adds(b, "}");
}

/* The response object; `status` "in_progress" before the end. */
static void response_object(const rc_writer *w, rc_buf *b, const char *status,
                            const char *incomplete_reason)
{
    const json_t *req = w->reply->request;
    int done = strcmp(status, "in_progress") != 0;
    rc_buf_adds(b, "{\"id\":");
    rc_json_str0(b, w->id);
    rc_buf_adds(b, ",\"object\":\"response\",\"created_at\":");
    rc_json_i64(b, w->t_created);
    rc_buf_adds(b, ",\"status\":\"");
    rc_buf_adds(b, status);
    rc_buf_adds(b, "\",\"background\":false,\"completed_at\":");
    if (done)
        rc_json_i64(b, w->t_completed);
    else
        rc_buf_adds(b, "null");
    rc_buf_adds(b, ",\"content_filters\":null,\"error\":null,\"frequency_penalty\":0.0,"
                   "\"incomplete_details\":");
    if (incomplete_reason) {
        rc_buf_adds(b, "{\"reason\":\"");
        rc_buf_adds(b, incomplete_reason);
        rc_buf_adds(b, "\"}");
    } else {
        rc_buf_adds(b, "null");
    }
    rc_buf_adds(b, ",\"instructions\":");
    rc_json_str0(b, str_or_null(req, "instructions"));
    rc_buf_adds(b, ",\"max_output_tokens\":");
    const json_t *mot = json_object_get(req, "max_output_tokens");
    if (json_is_integer(mot))
        rc_compact_json(b, mot);
    else
        rc_buf_adds(b, "null");
    rc_buf_adds(b, ",\"max_tool_calls\":null,\"model\":");
    rc_json_str0(b, w->model);
    rc_buf_adds(b, ",\"moderation\":null,\"output\":[");
    if (done && w->items.len) rc_buf_add(b, w->items.s, w->items.len);
    rc_buf_adds(b, "],\"parallel_tool_calls\":true,\"presence_penalty\":0.0,"
                   "\"previous_response_id\":null,\"prompt_cache_key\":null,"
                   "\"prompt_cache_retention\":null,\"reasoning\":{\"effort\":");
    const json_t *reasoning = json_object_get(req, "reasoning");
    rc_json_str0(b, str_or_null(reasoning, "effort"));
    rc_buf_adds(b, ",\"summary\":");
    rc_json_str0(b, str_or_null(reasoning, "summary"));
    rc_buf_adds(b, "},\"safety_identifier\":null,\"service_tier\":\"default\",\"store\":false,"
                   "\"temperature\":");
    echo_f32(b, req, "temperature");
    rc_buf_adds(b, ",\"text\":");
    echo_text(b, req);
    rc_buf_adds(b, ",\"tool_choice\":");
    echo_tool_choice(b, req);
    rc_buf_adds(b, ",\"tools\":");
    echo_tools(b, req);
    rc_buf_adds(b, ",\"top_logprobs\":");
    const json_t *tlp = json_object_get(req, "top_logprobs");
    if (json_is_integer(tlp))
        rc_compact_json(b, tlp);
    else
        rc_buf_adds(b, "0");
    rc_buf_adds(b, ",\"top_p\":");
    echo_f32(b, req, "top_p");
    rc_buf_adds(b, ",\"truncation\":\"disabled\",\"usage\":");
    if (done)
        usage(w, b);
    else
        rc_buf_adds(b, "null");
    rc_buf_adds(b, ",\"user\":");
    rc_json_str0(b, str_or_null(req, "user"));
    rc_buf_adds(b, ",\"metadata\":{}}");
}

/* Append ,"sequence_number":N} and emit the event. */
static void emit_event(rc_writer *w, rc_chunks *out, const char *type, rc_buf *b)
{
    rc_buf_adds(b, ",\"sequence_number\":");
    rc_json_u64(b, (uint64_t)w->seq++);
    rc_buf_adds(b, "}");
    rc_emit(out, type, b);
}

static void event_head(rc_buf *b, const char *type)
{
    rc_buf_adds(b, "{\"type\":\"");
    rc_buf_adds(b, type);
    rc_buf_adds(b, "\"");
}

static void item_id(const rc_writer *w, rc_buf *b, int kind, int index)
{
    static const char *const prefix[] = {"", "rs_", "msg_", "fc_", "ctc_"};
    char n[16];
    snprintf(n, sizeof n, "_%d", index);
    rc_buf_adds(b, "\"");
    rc_buf_adds(b, prefix[kind]);
    rc_buf b2 = {0};
    rc_json_str0(&b2, w->id); /* the id, escaped, without its quotes */
    if (b2.len >= 2) rc_buf_add(b, b2.s + 1, b2.len - 2);
    free(b2.s);
    rc_buf_adds(b, n);
    rc_buf_adds(b, "\"");
}

/* ,"item_id":…,"output_index":n */
static void item_ref(const rc_writer *w, rc_buf *b)
{
    int index = w->n_blocks - 1;
    rc_buf_adds(b, ",\"item_id\":");
    item_id(w, b, w->item, index);
    rc_buf_adds(b, ",\"output_index\":");
    rc_json_u64(b, (uint64_t)index);
}

/* A namespace function's (namespace, name) from the model's flattened name. */
static int split_namespace(const rc_writer *w, const char *name, const char **ns, size_t *ns_len,
                           const char **local)
{
    const char *sep = w->reply->model == RC_MODEL_V41_FLASH ? "::" : "__";
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(w->reply->request, "tools"), i, t)
    {
        const char *type = str_or_null(t, "type"), *n = str_or_null(t, "name");
        if (!type || !n || strcmp(type, "namespace") != 0) continue;
        size_t nl = strlen(n);
        if (strncmp(name, n, nl) != 0 || strncmp(name + nl, sep, 2) != 0) continue;
        size_t j;
        const json_t *f;
        json_array_foreach(json_object_get(t, "tools"), j, f)
        {
            const char *fn = str_or_null(f, "name");
            if (fn && strcmp(fn, name + nl + 2) == 0) {
                *ns = n;
                *ns_len = nl;
                *local = fn;
                return 1;
            }
        }
    }
    return 0;
}

static int is_custom_apply_patch(const rc_writer *w, const char *name)
{
    if (strcmp(name, "apply_patch") != 0) return 0;
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(w->reply->request, "tools"), i, t)
    {
        const char *type = str_or_null(t, "type"), *n = str_or_null(t, "name");
        if (type && n && strcmp(type, "custom") == 0 && strcmp(n, "apply_patch") == 0) return 1;
    }
    return 0;
}

/* The item JSON: `done` selects the final form (status, content). */
static void item_json(rc_writer *w, rc_buf *b, int done, const char *status, int call_follows)
{
    int index = w->n_blocks - 1;
    const char *text = w->item_text.s ? w->item_text.s : "";
    size_t len = w->item_text.len;
    if (w->item == ITEM_REASONING) {
        rc_buf_adds(b, "{\"type\":\"reasoning\",\"id\":");
        item_id(w, b, ITEM_REASONING, index);
        rc_buf_adds(b, ",\"status\":\"");
        rc_buf_adds(b, status);
        rc_buf_adds(b, "\",\"content\":[");
        if (done) {
            rc_buf_adds(b, "{\"type\":\"reasoning_text\",\"text\":");
            rc_json_string(b, text, len);
            rc_buf_adds(b, "}");
        }
        rc_buf_adds(b, "],\"summary\":[],\"encrypted_content\":");
        char n[24];
        snprintf(n, sizeof n, "-%d", index);
        rc_buf e = {0};
        rc_buf_adds(&e, w->id);
        rc_buf_adds(&e, n);
        rc_json_string(b, e.s ? e.s : "", e.len);
        free(e.s);
        rc_buf_adds(b, "}");
    } else if (w->item == ITEM_MESSAGE) {
        rc_buf_adds(b, "{\"type\":\"message\",\"id\":");
        item_id(w, b, ITEM_MESSAGE, index);
        rc_buf_adds(b, ",\"status\":\"");
        rc_buf_adds(b, status);
        rc_buf_adds(b, "\",\"role\":\"assistant\",\"phase\":\"");
        rc_buf_adds(b, call_follows ? "commentary" : "final_answer");
        rc_buf_adds(b, "\",\"content\":[");
        if (done) {
            rc_buf_adds(b, "{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[");
            rc_buf_add(b, w->item_lp.s ? w->item_lp.s : "", w->item_lp.len);
            rc_buf_adds(b, "],\"text\":");
            rc_json_string(b, text, len);
            rc_buf_adds(b, "}");
        }
        rc_buf_adds(b, "]}");
    } else {
        const rc_out_call *c = &w->calls[w->item_call];
        int custom = w->item == ITEM_CUSTOM;
        rc_buf_adds(b, custom ? "{\"type\":\"custom_tool_call\",\"id\":"
                              : "{\"type\":\"function_call\",\"id\":");
        item_id(w, b, w->item, index);
        rc_buf_adds(b, ",\"status\":\"");
        rc_buf_adds(b, status);
        rc_buf_adds(b, "\",\"call_id\":");
        rc_json_str0(b, c->id);
        const char *ns, *local;
        size_t ns_len;
        if (!custom && split_namespace(w, c->name, &ns, &ns_len, &local)) {
            rc_buf_adds(b, ",\"name\":");
            rc_json_str0(b, local);
            rc_buf_adds(b, ",\"namespace\":");
            rc_json_string(b, ns, ns_len);
        } else {
            rc_buf_adds(b, ",\"name\":");
            rc_json_string(b, c->name, c->name_len);
        }
        rc_buf_adds(b, custom ? ",\"input\":" : ",\"arguments\":");
        if (!done)
            rc_buf_adds(b, "\"\"");
        else if (custom)
            rc_json_string(b, text, len);
        else
            rc_json_string(b, c->arguments.s ? c->arguments.s : "", c->arguments.len);
        rc_buf_adds(b, "}");
    }
}

static void open_item(rc_writer *w, rc_chunks *out, int kind)
{
    w->item = kind;
    w->n_blocks++;
    w->item_text.len = 0;
    w->custom_mode = CUSTOM_UNDECIDED;
    w->custom_key.len = w->custom_pending.len = 0;
    w->item_lp.len = 0;
    rc_buf b = {0};
    event_head(&b, "response.output_item.added");
    rc_buf_adds(&b, ",\"item\":");
    item_json(w, &b, 0, "in_progress", 0);
    rc_buf_adds(&b, ",\"output_index\":");
    rc_json_u64(&b, (uint64_t)(w->n_blocks - 1));
    emit_event(w, out, "response.output_item.added", &b);
    if (kind == ITEM_REASONING || kind == ITEM_MESSAGE) {
        rc_buf p = {0};
        event_head(&p, "response.content_part.added");
        rc_buf_adds(&p, ",\"content_index\":0");
        item_ref(w, &p);
        rc_buf_adds(&p, kind == ITEM_REASONING
                            ? ",\"part\":{\"type\":\"reasoning_text\",\"text\":\"\"}"
                            : ",\"part\":{\"type\":\"output_text\",\"annotations\":[],"
                              "\"logprobs\":[],\"text\":\"\"}");
        emit_event(w, out, "response.content_part.added", &p);
    }
}

static void close_item(rc_writer *w, rc_chunks *out, const char *status, int call_follows)
{
    if (w->item == ITEM_NONE) return;
    const char *text = w->item_text.s ? w->item_text.s : "";
    rc_buf b = {0};
    if (w->item == ITEM_REASONING || w->item == ITEM_MESSAGE) {
        int r = w->item == ITEM_REASONING;
        const char *done = r ? "response.reasoning_text.done" : "response.output_text.done";
        event_head(&b, done);
        rc_buf_adds(&b, ",\"content_index\":0");
        if (r) {
            item_ref(w, &b);
        } else {
            rc_buf_adds(&b, ",\"item_id\":");
            item_id(w, &b, w->item, w->n_blocks - 1);
            rc_buf_adds(&b, ",\"logprobs\":[");
            rc_buf_add(&b, w->item_lp.s ? w->item_lp.s : "", w->item_lp.len);
            rc_buf_adds(&b, "],\"output_index\":");
            rc_json_u64(&b, (uint64_t)(w->n_blocks - 1));
        }
        rc_buf_adds(&b, ",\"sequence_number\":");
        rc_json_u64(&b, (uint64_t)w->seq++);
        rc_buf_adds(&b, ",\"text\":");
        rc_json_string(&b, text, w->item_text.len);
        rc_buf_adds(&b, "}");
        rc_emit(out, done, &b);
        rc_buf p = {0};
        event_head(&p, "response.content_part.done");
        rc_buf_adds(&p, ",\"content_index\":0");
        item_ref(w, &p);
        if (r) {
            rc_buf_adds(&p, ",\"part\":{\"type\":\"reasoning_text\",\"text\":");
        } else {
            rc_buf_adds(&p,
                        ",\"part\":{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[");
            rc_buf_add(&p, w->item_lp.s ? w->item_lp.s : "", w->item_lp.len);
            rc_buf_adds(&p, "],\"text\":");
        }
        rc_json_string(&p, text, w->item_text.len);
        rc_buf_adds(&p, "}");
        emit_event(w, out, "response.content_part.done", &p);
    } else {
        const rc_out_call *c = &w->calls[w->item_call];
        int custom = w->item == ITEM_CUSTOM;
        const char *done = custom ? "response.custom_tool_call_input.done"
                                  : "response.function_call_arguments.done";
        event_head(&b, done);
        if (custom) {
            rc_buf_adds(&b, ",\"input\":");
            rc_json_string(&b, text, w->item_text.len);
        } else {
            rc_buf_adds(&b, ",\"arguments\":");
            rc_json_string(&b, c->arguments.s ? c->arguments.s : "", c->arguments.len);
        }
        item_ref(w, &b);
        emit_event(w, out, done, &b);
    }
    rc_buf it = {0};
    item_json(w, &it, 1, status, call_follows);
    if (w->items.len) rc_buf_adds(&w->items, ",");
    rc_buf_add(&w->items, it.s ? it.s : "", it.len);
    if (it.oom) w->items.oom = 1;
    rc_buf d = {0};
    event_head(&d, "response.output_item.done");
    rc_buf_adds(&d, ",\"item\":");
    rc_buf_add(&d, it.s ? it.s : "", it.len);
    free(it.s);
    rc_buf_adds(&d, ",\"output_index\":");
    rc_json_u64(&d, (uint64_t)(w->n_blocks - 1));
    emit_event(w, out, "response.output_item.done", &d);
    w->item = ITEM_NONE;
}

int rc_responses_start(rc_writer *w, rc_chunks *out)
{
    static const char *const types[] = {"response.created", "response.in_progress"};
    for (int i = 0; i < 2; i++) {
        rc_buf b = {0};
        event_head(&b, types[i]);
        rc_buf_adds(&b, ",\"response\":");
        response_object(w, &b, "in_progress", NULL);
        emit_event(w, out, types[i], &b);
    }
    return out->oom ? -1 : 0;
}

static void delta_event(rc_writer *w, rc_chunks *out, const char *type, const char *s, size_t n)
{
    rc_buf b = {0};
    event_head(&b, type);
    int text = w->item == ITEM_REASONING || w->item == ITEM_MESSAGE;
    if (text) rc_buf_adds(&b, ",\"content_index\":0");
    rc_buf_adds(&b, ",\"delta\":");
    rc_json_string(&b, s, n);
    if (w->item == ITEM_MESSAGE) {
        rc_buf_adds(&b, ",\"item_id\":");
        item_id(w, &b, w->item, w->n_blocks - 1);
        /* the push's log probabilities (reasoning deltas carry none) */
        const rc_buf *lp = w->piece_lp;
        rc_buf_adds(&b, ",\"logprobs\":[");
        if (lp) {
            rc_buf_add(&b, lp->s ? lp->s : "", lp->len);
            if (w->item_lp.len && lp->len) rc_buf_adds(&w->item_lp, ",");
            rc_buf_add(&w->item_lp, lp->s ? lp->s : "", lp->len);
            if (w->item_lp.oom) b.oom = 1;
        }
        rc_buf_adds(&b, "],\"output_index\":");
        rc_json_u64(&b, (uint64_t)(w->n_blocks - 1));
    } else {
        item_ref(w, &b);
    }
    emit_event(w, out, type, &b);
}

/* apply_patch as a custom tool: its raw `input` parameter is the call's input;
 * when the first parameter is not `input`, the arguments JSON is. */
static void custom_piece(rc_writer *w, const rc_piece *pc, rc_chunks *out)
{
    const char *delta = "response.custom_tool_call_input.delta";
    const char *s = pc->text.s ? pc->text.s : "";
    switch (w->custom_mode) {
    case CUSTOM_UNDECIDED:
        if (pc->cls == RC_PIECE_ARGS_OPEN && pc->text.len == 1) {
            rc_buf_add(&w->custom_pending, s, pc->text.len);
            return;
        }
        if (pc->cls == RC_PIECE_ARGS_KEY) {
            rc_buf_add(&w->custom_key, s, pc->text.len);
            rc_buf_add(&w->custom_pending, s, pc->text.len);
            /* still possibly "input": wait; exactly it: the raw input follows */
            if (w->custom_key.len <= 7 &&
                memcmp(w->custom_key.s, "\"input\"", w->custom_key.len) == 0) {
                if (w->custom_key.len == 7) w->custom_mode = CUSTOM_INPUT;
                return;
            }
            w->custom_mode = CUSTOM_JSON;
            rc_buf_add(&w->item_text, w->custom_pending.s, w->custom_pending.len);
            delta_event(w, out, delta, w->custom_pending.s, w->custom_pending.len);
            return;
        }
        w->custom_mode = CUSTOM_JSON;
        if (w->custom_pending.len) {
            rc_buf_add(&w->item_text, w->custom_pending.s, w->custom_pending.len);
            delta_event(w, out, delta, w->custom_pending.s, w->custom_pending.len);
        }
        /* fall through */
    case CUSTOM_JSON:
        rc_buf_add(&w->item_text, s, pc->text.len);
        delta_event(w, out, delta, s, pc->text.len);
        return;
    case CUSTOM_INPUT:
        if (pc->cls == RC_PIECE_ARGS_VALUE) {
            const rc_buf *raw = pc->raw.s ? &pc->raw : &pc->text;
            rc_buf_add(&w->item_text, raw->s, raw->len);
            delta_event(w, out, delta, raw->s, raw->len);
        } else if (pc->cls == RC_PIECE_ARGS_UNQUOTE || pc->cls == RC_PIECE_ARGS_COMMA ||
                   pc->cls == RC_PIECE_ARGS_CLOSE) {
            w->custom_mode = CUSTOM_DONE;
        }
        return;
    default: return;
    }
}

int rc_responses_piece(rc_writer *w, const rc_piece *pc, rc_chunks *out)
{
    const char *s = pc->text.s ? pc->text.s : "";
    switch (pc->cls) {
    case RC_PIECE_REASONING:
        if (w->item != ITEM_REASONING) {
            close_item(w, out, "completed", 0);
            open_item(w, out, ITEM_REASONING);
        }
        rc_buf_add(&w->item_text, s, pc->text.len);
        delta_event(w, out, "response.reasoning_text.delta", s, pc->text.len);
        break;
    case RC_PIECE_CONTENT:
        if (w->item != ITEM_MESSAGE) {
            close_item(w, out, "completed", 0);
            open_item(w, out, ITEM_MESSAGE);
        }
        rc_buf_add(&w->item_text, s, pc->text.len);
        delta_event(w, out, "response.output_text.delta", s, pc->text.len);
        break;
    case RC_PIECE_CALL_BEGIN:
        close_item(w, out, "completed", 1);
        w->item_call = pc->call;
        open_item(w, out,
                  is_custom_apply_patch(w, w->calls[pc->call].name) ? ITEM_CUSTOM : ITEM_CALL);
        break;
    case RC_PIECE_CALL_END: break;
    default:
        if (w->item == ITEM_CUSTOM)
            custom_piece(w, pc, out);
        else
            delta_event(w, out, "response.function_call_arguments.delta", s, pc->text.len);
        break;
    }
    return out->oom || w->item_text.oom ? -1 : 0;
}

int rc_responses_finish(rc_writer *w, rc_finish reason, rc_chunks *out)
{
    const char *incomplete = reason == RC_FINISH_LENGTH           ? "max_output_tokens"
                             : reason == RC_FINISH_CONTENT_FILTER ? "content_filter"
                                                                  : NULL;
    close_item(w, out, incomplete ? "incomplete" : "completed", 0);
    const char *status = incomplete ? "incomplete" : "completed";
    w->finish_reason = status;
    const char *type = incomplete ? "response.incomplete" : "response.completed";
    rc_buf b = {0};
    event_head(&b, type);
    rc_buf_adds(&b, ",\"response\":");
    rc_buf r = {0};
    response_object(w, &r, status, incomplete);
    rc_buf_add(&b, r.s ? r.s : "", r.len);
    if (r.oom) b.oom = 1;
    emit_event(w, out, type, &b);
    w->response = rc_buf_take(&r);
    return out->oom || !w->response || w->items.oom ? -1 : 0;
}
