/* The request facts the output side needs (rc_reply), captured when a request
 * is rendered: how the reference sets its ParsingOptions from a converted
 * request (docs/stream.md, "Parsing options"). */
#include <stdlib.h>
#include <string.h>

#include "recipe/stream.h"

void rc_reply_free(rc_reply *r)
{
    free(r->model_name);
    free(r->call_prefix);
    for (size_t i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->stops);
    json_decref(r->request);
    memset(r, 0, sizeof *r);
}

static int copy_stops(rc_reply *dst, const char *const *stops, size_t n)
{
    if (!n) return 0;
    dst->stops = calloc(n, sizeof *dst->stops);
    if (!dst->stops) return 1;
    for (size_t i = 0; i < n; i++) {
        dst->stops[i] = strdup(stops[i]);
        if (!dst->stops[i]) return 1;
        dst->n_stops = i + 1;
    }
    return 0;
}

int rc_reply_copy(rc_reply *dst, const rc_reply *src)
{
    *dst = *src;
    dst->model_name = NULL;
    dst->call_prefix = NULL;
    dst->stops = NULL;
    dst->n_stops = 0;
    json_incref(dst->request);
    dst->model_name = strdup(src->model_name ? src->model_name : "");
    if (!dst->model_name) return 1;
    if (src->call_prefix && !(dst->call_prefix = strdup(src->call_prefix))) return 1;
    return copy_stops(dst, (const char *const *)src->stops, src->n_stops);
}

int rc_reply_override(rc_reply *r, int parse_tool_calls, int starts_in_tool_calls,
                      int parse_json_output, rc_stage stage, const char *const *stops,
                      size_t n_stops)
{
    r->parse_tool_calls = parse_tool_calls;
    r->starts_in_tool_calls = starts_in_tool_calls;
    r->parse_json_output = parse_json_output;
    r->stage = stage;
    for (size_t i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->stops);
    r->stops = NULL;
    r->n_stops = 0;
    return copy_stops(r, stops, n_stops);
}

int rc_reply_from(rc_reply *r, di_protocol protocol, const rc_conversation *conv, json_t *request)
{
    memset(r, 0, sizeof *r);
    r->protocol = protocol;
    r->model = conv->model;
    r->thinking = conv->thinking;
    r->parse_tool_calls = conv->n_tools > 0 && conv->tool_choice != RC_CHOICE_NONE;
    r->starts_in_tool_calls = conv->n_tools > 0 && conv->tool_choice == RC_CHOICE_REQUIRED;
    r->parse_json_output = conv->format == RC_FORMAT_JSON_OBJECT;
    const rc_message *last = conv->n_messages ? &conv->messages[conv->n_messages - 1] : NULL;
    int prefix = last && last->role == RC_ASSISTANT && last->prefix;
    /* a prefix message continues its answer, or its reasoning; else a new turn */
    r->prefix_content = conv->thinking && prefix && last->content_len > 0;
    int prefix_reasoning =
        conv->thinking && prefix && !r->prefix_content && last->reasoning && last->reasoning[0];
    r->stage = !conv->thinking     ? RC_STAGE_NONE
               : r->prefix_content ? RC_STAGE_CONTENT_CONTINUATION
               : prefix_reasoning  ? RC_STAGE_REASONING_CONTINUATION
                                   : RC_STAGE_REASONING_START;
    const json_t *model = json_object_get(request, "model");
    r->model_name = strdup(json_is_string(model) ? json_string_value(model) : "");
    r->request = json_incref(request);
    if (!r->model_name) return 1;
    return copy_stops(r, (const char *const *)conv->stops, conv->n_stops);
}

int rc_reply_from_template(rc_reply *r, rc_template_kind kind, int parse_tools, int required,
                           const char *call_prefix, json_t *request)
{
    memset(r, 0, sizeof *r);
    int r1 = kind == RC_KIND_R1;
    r->protocol = DI_PROTOCOL_CHAT;
    r->model = RC_MODEL_V4_PRO;
    r->thinking = r1;
    r->stage = r1 ? RC_STAGE_REASONING_START : RC_STAGE_NONE;
    r->parse_tool_calls = parse_tools;
    r->starts_in_tool_calls = required;
    r->tool_format = kind == RC_KIND_CHATML ? RC_TOOLS_HERMES : RC_TOOLS_V3;
    r->leading_think = r1;
    /* the request's model, or the family's name (the template requests need none) */
    const json_t *model = json_object_get(request, "model");
    r->model_name = strdup(json_is_string(model) ? json_string_value(model)
                           : r1                  ? "deepseek-r1"
                           : kind == RC_KIND_V3  ? "deepseek-v3"
                                                 : "chatml");
    r->request = json_incref(request);
    if (!r->model_name) return 1;
    if (call_prefix && !(r->call_prefix = strdup(call_prefix))) return 1;
    /* the request's stop sequences: a string or an array of strings */
    const json_t *stop = json_object_get(request, "stop");
    const char *one[1];
    const char **list = NULL;
    size_t n = 0;
    if (json_is_string(stop)) {
        one[0] = json_string_value(stop);
        list = one;
        n = 1;
    } else if (json_is_array(stop)) {
        list = calloc(json_array_size(stop) + 1, sizeof *list);
        if (!list) return 1;
        for (size_t i = 0; i < json_array_size(stop); i++)
            if (json_is_string(json_array_get(stop, i)))
                list[n++] = json_string_value(json_array_get(stop, i));
    }
    int oom = copy_stops(r, list, n);
    if (list != one) free(list);
    return oom;
}
