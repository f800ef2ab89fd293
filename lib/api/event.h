/* Engine events: what the worker builds from a step's output and di_poll hands
 * to the host's callbacks (deepinfer.h, "Engine"). An event owns copies of every
 * string it carries, so it outlives the request state it came from. */
#ifndef DI_API_EVENT_H
#define DI_API_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"

struct di_event {
    struct di_event *next;
    di_event_kind kind;
    uint64_t id;
    di_event_fn fn;
    void *user;
    char *text; /* TEXT, REASONING, TOOL_CALL(_DELTA), CHUNK json (NULL for [DONE]) */
    size_t text_len;
    char *sse, *name;
    size_t sse_len;
    int32_t *tokens;
    size_t n_tokens;
    /* TOKENS of a request with logprobs: [n_tokens] log probabilities, and
     * [n_tokens, n_top] alternatives (ids and log probabilities); NULL, 0 else */
    float *logprobs;
    int32_t *top_ids;
    float *top_logprobs;
    size_t n_top;
    int32_t call_index;
    char *call_id, *call_name;
    di_status status;
    char *message;
    di_finish finish;
    char *finish_text;
    uint32_t prompt_tokens, completion_tokens, reasoning_tokens, prompt_cache_hit_tokens;
    uint32_t draft_tokens, accepted_draft_tokens;
    char *response;
    size_t response_len;
    uint32_t choice; /* Chat `n`: the choice the event belongs to */
};

/* A list of events being built, appended to the engine's queue at once. oom is
 * set when an event (or one of its strings) could not be allocated. */
typedef struct event_list {
    di_event *head, *tail;
    int oom;
} event_list;

/* Append a new event of `kind` for request `id` (callback fn with user); NULL
 * (and l->oom set) when memory ran out. */
di_event *event_new(event_list *l, uint64_t id, di_event_fn fn, void *user, di_event_kind kind);
/* Append an event whose text is a copy of t[0, n). */
void event_text(event_list *l, uint64_t id, di_event_fn fn, void *user, di_event_kind kind,
                const char *t, size_t n);
/* Append the parsed events (TEXT, REASONING, TOOL_CALL_DELTA, TOOL_CALL) and the
 * protocol chunks (CHUNK) of the stream's last call, in that order. A tool call's
 * beginning gives no event of its own (its id and name ride on its deltas); the
 * finish event's word goes to *finish_text (replacing it) when finish_text is not
 * NULL. */
void collect_stream(event_list *l, uint64_t id, di_event_fn fn, void *user, di_stream *s,
                    char **finish_text);
void event_free(di_event *ev);
/* A NUL-terminated copy of s[0, n) / of s (NULL for NULL), or NULL when memory ran out. */
char *event_strndup(const char *s, size_t n);
char *event_strdup(const char *s);

#endif
