/* Engine events (deepinfer.h, "Engine"): building them on the worker and the
 * public getters the host reads them through (event.h). */
#include "api/event.h"

#include <stdlib.h>
#include <string.h>

void event_free(di_event *ev)
{
    if (!ev) return;
    free(ev->text);
    free(ev->sse);
    free(ev->name);
    free(ev->tokens);
    free(ev->logprobs);
    free(ev->top_ids);
    free(ev->top_logprobs);
    free(ev->call_id);
    free(ev->call_name);
    free(ev->message);
    free(ev->finish_text);
    free(ev->response);
    free(ev);
}

char *event_strndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *event_strdup(const char *s)
{
    return s ? event_strndup(s, strlen(s)) : NULL;
}

di_event *event_new(event_list *l, uint64_t id, di_event_fn fn, void *user, di_event_kind kind)
{
    di_event *ev = calloc(1, sizeof *ev);
    if (!ev) {
        l->oom = 1;
        return NULL;
    }
    ev->kind = kind;
    ev->id = id;
    ev->fn = fn;
    ev->user = user;
    ev->call_index = -1;
    if (l->tail)
        l->tail->next = ev;
    else
        l->head = ev;
    l->tail = ev;
    return ev;
}

void event_text(event_list *l, uint64_t id, di_event_fn fn, void *user, di_event_kind kind,
                const char *t, size_t n)
{
    di_event *ev = event_new(l, id, fn, user, kind);
    if (!ev) return;
    ev->text = event_strndup(t, n);
    ev->text_len = n;
    if (!ev->text) l->oom = 1;
}

void collect_stream(event_list *l, uint64_t id, di_event_fn fn, void *user, di_stream *s,
                    char **finish_text)
{
    size_t n = di_stream_event_count(s);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *t = di_stream_event_text(s, i, &len);
        di_event_kind kind;
        switch (di_stream_event_kind_at(s, i)) {
        case DI_STREAM_REASONING: kind = DI_EVENT_REASONING; break;
        case DI_STREAM_TEXT: kind = DI_EVENT_TEXT; break;
        case DI_STREAM_TOOL_CALL_ARGUMENTS: kind = DI_EVENT_TOOL_CALL_DELTA; break;
        case DI_STREAM_TOOL_CALL_END: kind = DI_EVENT_TOOL_CALL; break;
        case DI_STREAM_FINISH:
            if (finish_text) {
                free(*finish_text);
                *finish_text = event_strndup(t, len);
            }
            continue;
        default: continue;
        }
        event_text(l, id, fn, user, kind, t, len);
        if (kind == DI_EVENT_TOOL_CALL_DELTA || kind == DI_EVENT_TOOL_CALL) {
            di_event *ev = l->tail;
            if (!ev || ev->kind != kind) continue;
            ev->call_index = di_stream_event_call_index(s, i);
            ev->call_id = event_strdup(di_stream_event_call_id(s, i));
            ev->call_name = event_strdup(di_stream_event_call_name(s, i));
        }
    }
    n = di_stream_chunk_count(s);
    for (size_t i = 0; i < n; i++) {
        di_event *ev = event_new(l, id, fn, user, DI_EVENT_CHUNK);
        if (!ev) return;
        size_t len;
        const char *json = di_stream_chunk_json(s, i, &len);
        if (json) {
            ev->text = event_strndup(json, len);
            ev->text_len = len;
        }
        const char *sse = di_stream_chunk_sse(s, i, &len);
        ev->sse = event_strndup(sse ? sse : "", sse ? len : 0);
        ev->sse_len = sse ? len : 0;
        ev->name = event_strdup(di_stream_chunk_event(s, i));
    }
}

/* ---- event getters ---- */

DI_API di_event_kind di_event_kind_of(const di_event *ev)
{
    return ev ? ev->kind : (di_event_kind)0;
}
DI_API uint32_t di_event_choice_index(const di_event *ev)
{
    return ev ? ev->choice : 0;
}
DI_API uint64_t di_event_request_id(const di_event *ev)
{
    return ev ? ev->id : 0;
}
DI_API const char *di_event_text(const di_event *ev, size_t *len)
{
    if (len) *len = 0;
    if (!ev) return NULL;
    switch (ev->kind) {
    case DI_EVENT_TEXT:
    case DI_EVENT_REASONING:
    case DI_EVENT_TOOL_CALL_DELTA:
    case DI_EVENT_TOOL_CALL:
    case DI_EVENT_CHUNK:
        if (len) *len = ev->text ? ev->text_len : 0;
        return ev->text;
    default: return "";
    }
}
DI_API const int32_t *di_event_tokens(const di_event *ev, size_t *n)
{
    if (n) *n = ev && ev->kind == DI_EVENT_TOKENS ? ev->n_tokens : 0;
    return ev && ev->kind == DI_EVENT_TOKENS ? ev->tokens : NULL;
}
DI_API const float *di_event_logprobs(const di_event *ev, size_t *n)
{
    int has = ev && ev->kind == DI_EVENT_TOKENS && ev->logprobs;
    if (n) *n = has ? ev->n_tokens : 0;
    return has ? ev->logprobs : NULL;
}
DI_API size_t di_event_top_logprobs(const di_event *ev, size_t i, const int32_t **ids,
                                    const float **logprobs)
{
    int has = ev && ev->kind == DI_EVENT_TOKENS && ev->top_ids && i < ev->n_tokens;
    if (ids) *ids = has ? ev->top_ids + i * ev->n_top : NULL;
    if (logprobs) *logprobs = has ? ev->top_logprobs + i * ev->n_top : NULL;
    return has ? ev->n_top : 0;
}
DI_API int32_t di_event_tool_call_index(const di_event *ev)
{
    return ev ? ev->call_index : -1;
}
DI_API const char *di_event_tool_call_id(const di_event *ev)
{
    return ev ? ev->call_id : NULL;
}
DI_API const char *di_event_tool_call_name(const di_event *ev)
{
    return ev ? ev->call_name : NULL;
}
DI_API const char *di_event_chunk_json(const di_event *ev, size_t *len)
{
    if (len) *len = 0;
    if (!ev || ev->kind != DI_EVENT_CHUNK) return NULL;
    if (len) *len = ev->text ? ev->text_len : 0;
    return ev->text;
}
DI_API const char *di_event_chunk_sse(const di_event *ev, size_t *len)
{
    if (len) *len = 0;
    if (!ev || ev->kind != DI_EVENT_CHUNK) return NULL;
    if (len) *len = ev->sse_len;
    return ev->sse;
}
DI_API const char *di_event_chunk_name(const di_event *ev)
{
    return ev && ev->kind == DI_EVENT_CHUNK ? ev->name : NULL;
}
DI_API const char *di_event_chunk_event_name(const di_event *ev)
{
    return di_event_chunk_name(ev);
}
DI_API const char *di_event_delta(const di_event *ev, size_t *len)
{
    if (len) *len = 0;
    if (!ev || (ev->kind != DI_EVENT_TEXT && ev->kind != DI_EVENT_REASONING)) return NULL;
    return di_event_text(ev, len);
}
DI_API const char *di_event_tool_call_arguments(const di_event *ev, size_t *len)
{
    if (len) *len = 0;
    if (!ev || (ev->kind != DI_EVENT_TOOL_CALL_DELTA && ev->kind != DI_EVENT_TOOL_CALL))
        return NULL;
    return di_event_text(ev, len);
}
DI_API const char *di_event_kind_name(di_event_kind kind)
{
    switch (kind) {
    case DI_EVENT_TOKENS: return "tokens";
    case DI_EVENT_TEXT: return "text";
    case DI_EVENT_REASONING: return "reasoning";
    case DI_EVENT_TOOL_CALL_DELTA: return "tool_call_delta";
    case DI_EVENT_TOOL_CALL: return "tool_call";
    case DI_EVENT_CHUNK: return "chunk";
    case DI_EVENT_DONE: return "done";
    }
    return NULL;
}
DI_API di_status di_event_status(const di_event *ev)
{
    return ev ? ev->status : DI_ERR_INVALID_ARGUMENT;
}
DI_API const char *di_event_message(const di_event *ev)
{
    return ev && ev->message ? ev->message : "";
}
DI_API di_finish di_event_finish_reason(const di_event *ev)
{
    return ev ? ev->finish : (di_finish)0;
}
DI_API const char *di_event_finish_text(const di_event *ev)
{
    return ev ? ev->finish_text : NULL;
}
DI_API uint32_t di_event_prompt_tokens(const di_event *ev)
{
    return ev ? ev->prompt_tokens : 0;
}
DI_API uint32_t di_event_draft_tokens(const di_event *ev)
{
    return ev && ev->kind == DI_EVENT_DONE ? ev->draft_tokens : 0;
}
DI_API uint32_t di_event_accepted_draft_tokens(const di_event *ev)
{
    return ev && ev->kind == DI_EVENT_DONE ? ev->accepted_draft_tokens : 0;
}
DI_API uint32_t di_event_prompt_cache_hit_tokens(const di_event *ev)
{
    return ev ? ev->prompt_cache_hit_tokens : 0;
}
DI_API uint32_t di_event_completion_tokens(const di_event *ev)
{
    return ev ? ev->completion_tokens : 0;
}
DI_API uint32_t di_event_reasoning_tokens(const di_event *ev)
{
    return ev ? ev->reasoning_tokens : 0;
}
DI_API const char *di_event_response_json(const di_event *ev, size_t *len)
{
    if (len) *len = ev && ev->response ? ev->response_len : 0;
    return ev ? ev->response : NULL;
}
