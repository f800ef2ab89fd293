/* Chat Completions chunks and the complete chat.completion object, as
 * deepseek-recipe's ChatCompletionChunkGenerator and ChatCompletionResponse
 * write them (docs/stream.md, "Chat Completions"). */
#include <string.h>

#include "recipe/writer.h"

/* {"id":…,"object":"chat.completion.chunk",…,"choices":[{"index":0,"delta": */
static void chunk_head(const rc_writer *w, rc_buf *b)
{
    rc_buf_adds(b, "{\"id\":");
    rc_json_str0(b, w->id);
    rc_buf_adds(b, ",\"object\":\"chat.completion.chunk\",\"created\":");
    rc_json_i64(b, w->t_created);
    rc_buf_adds(b, ",\"model\":");
    rc_json_str0(b, w->model);
    rc_buf_adds(b, ",\"system_fingerprint\":");
    rc_json_str0(b, w->fingerprint);
    rc_buf_adds(b, ",\"choices\":[{\"index\":");
    rc_json_u64(b, w->choice);
    rc_buf_adds(b, ",\"delta\":");
}

/* Non-final chunks carry "usage":null when the request streams with
 * stream_options.include_usage, or does not stream; no usage key otherwise. */
static int usage_null(const rc_writer *w)
{
    const json_t *req = w->reply->request;
    if (!json_is_true(json_object_get(req, "stream"))) return 1;
    return json_is_true(json_object_get(json_object_get(req, "stream_options"), "include_usage"));
}

static void chunk_tail(const rc_writer *w, rc_buf *b, const char *finish_reason)
{
    rc_buf_adds(b, ",\"logprobs\":null,\"finish_reason\":");
    rc_json_str0(b, finish_reason);
    rc_buf_adds(b, "}]");
    if (!finish_reason && usage_null(w)) rc_buf_adds(b, ",\"usage\":null");
}

/* A text delta's tail: its push's log probabilities under the delta's key
 * ({"content": […]} or {"reasoning_content": […]}), kept for the complete
 * response too; null when the piece has none. */
static void text_tail(rc_writer *w, rc_buf *b, int reasoning)
{
    const rc_buf *lp = w->piece_lp;
    if (!lp) {
        chunk_tail(w, b, NULL);
        return;
    }
    rc_buf_adds(b, reasoning ? ",\"logprobs\":{\"reasoning_content\":["
                             : ",\"logprobs\":{\"content\":[");
    rc_buf_add(b, lp->s ? lp->s : "", lp->len);
    rc_buf_adds(b, "]},\"finish_reason\":null}]");
    if (usage_null(w)) rc_buf_adds(b, ",\"usage\":null");
    rc_buf *acc = reasoning ? &w->lp_reasoning : &w->lp_content;
    if (acc->len && lp->len) rc_buf_adds(acc, ",");
    rc_buf_add(acc, lp->s ? lp->s : "", lp->len);
    if (acc->oom) b->oom = 1;
    *(reasoning ? &w->lp_reasoning_set : &w->lp_content_set) = 1;
}

static void usage(const rc_writer *w, rc_buf *b)
{
    rc_buf_adds(b, "{\"prompt_tokens\":");
    rc_json_u64(b, w->prompt_tokens);
    rc_buf_adds(b, ",\"completion_tokens\":");
    rc_json_u64(b, w->completion_tokens);
    rc_buf_adds(b, ",\"total_tokens\":");
    rc_json_u64(b, (uint64_t)w->prompt_tokens + w->completion_tokens);
    rc_buf_adds(b, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    rc_json_u64(b, w->cache_hit_tokens);
    rc_buf_adds(b, "}");
    if (w->reply->thinking && w->reply->stage != RC_STAGE_NONE && w->has_tokenizer) {
        rc_buf_adds(b, ",\"completion_tokens_details\":{\"reasoning_tokens\":");
        rc_json_u64(b, w->reasoning_tokens);
        rc_buf_adds(b, "}");
    }
    rc_buf_adds(b, ",\"prompt_cache_hit_tokens\":");
    rc_json_u64(b, w->cache_hit_tokens);
    rc_buf_adds(b, ",\"prompt_cache_miss_tokens\":");
    rc_json_u64(b, w->prompt_tokens > w->cache_hit_tokens ? w->prompt_tokens - w->cache_hit_tokens
                                                          : 0);
    rc_buf_adds(b, "}");
}

static void text_delta(rc_writer *w, rc_chunks *out, const char *content, size_t content_len,
                       const char *reasoning, size_t reasoning_len)
{
    rc_buf b = {0};
    chunk_head(w, &b);
    rc_buf_adds(&b, "{\"content\":");
    if (content)
        rc_json_string(&b, content, content_len);
    else
        rc_buf_adds(&b, "null");
    if (w->reply->thinking) { /* the key exists only in thinking mode */
        rc_buf_adds(&b, ",\"reasoning_content\":");
        if (reasoning)
            rc_json_string(&b, reasoning, reasoning_len);
        else
            rc_buf_adds(&b, "null");
    }
    rc_buf_adds(&b, "}");
    text_tail(w, &b, reasoning != NULL);
    rc_buf_adds(&b, "}");
    rc_emit(out, NULL, &b);
}

int rc_chat_start(rc_writer *w, rc_chunks *out)
{
    rc_buf b = {0};
    chunk_head(w, &b);
    if (w->reply->thinking && w->reply->prefix_content)
        rc_buf_adds(&b, "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":null}");
    else if (w->reply->thinking)
        rc_buf_adds(&b, "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"\"}");
    else
        rc_buf_adds(&b, "{\"role\":\"assistant\",\"content\":\"\"}");
    chunk_tail(w, &b, NULL);
    rc_buf_adds(&b, "}");
    rc_emit(out, NULL, &b);
    return out->oom ? -1 : 0;
}

int rc_chat_piece(rc_writer *w, const rc_piece *pc, rc_chunks *out)
{
    const char *s = pc->text.s ? pc->text.s : "";
    rc_buf b = {0};
    switch (pc->cls) {
    case RC_PIECE_REASONING: text_delta(w, out, NULL, 0, s, pc->text.len); break;
    case RC_PIECE_CONTENT: text_delta(w, out, s, pc->text.len, NULL, 0); break;
    case RC_PIECE_CALL_BEGIN:
        chunk_head(w, &b);
        rc_buf_adds(&b, "{\"tool_calls\":[{\"index\":");
        rc_json_u64(&b, (uint64_t)pc->call);
        rc_buf_adds(&b, ",\"id\":");
        rc_json_str0(&b, w->calls[pc->call].id);
        rc_buf_adds(&b, ",\"type\":\"function\",\"function\":{\"name\":");
        rc_json_string(&b, s, pc->text.len);
        rc_buf_adds(&b, ",\"arguments\":\"\"}}]}");
        chunk_tail(w, &b, NULL);
        rc_buf_adds(&b, "}");
        rc_emit(out, NULL, &b);
        break;
    case RC_PIECE_CALL_END: break;
    default:
        chunk_head(w, &b);
        rc_buf_adds(&b, "{\"tool_calls\":[{\"index\":");
        rc_json_u64(&b, (uint64_t)pc->call);
        rc_buf_adds(&b, ",\"function\":{\"arguments\":");
        rc_json_string(&b, s, pc->text.len);
        rc_buf_adds(&b, "}}]}");
        chunk_tail(w, &b, NULL);
        rc_buf_adds(&b, "}");
        rc_emit(out, NULL, &b);
        break;
    }
    return out->oom ? -1 : 0;
}

static const char *finish_word(const rc_writer *w, rc_finish reason)
{
    if (reason == RC_FINISH_LENGTH) return "length";
    if (reason == RC_FINISH_CONTENT_FILTER) return "content_filter";
    return w->n_calls && reason == RC_FINISH_STOP ? "tool_calls" : "stop";
}

/* The choice object of the complete response:
 * {"index":…,"message":…,"logprobs":…,"finish_reason":…}. */
static void chat_choice(const rc_writer *w, rc_buf *r)
{
    rc_buf_adds(r, "{\"index\":");
    rc_json_u64(r, w->choice);
    rc_buf_adds(r, ",\"message\":{\"role\":\"assistant\",\"content\":");
    rc_json_string(r, w->content.s ? w->content.s : "", w->content.len);
    if (w->reply->thinking && !w->reply->prefix_content) {
        rc_buf_adds(r, ",\"reasoning_content\":");
        rc_json_string(r, w->reasoning.s ? w->reasoning.s : "", w->reasoning.len);
    }
    if (w->n_calls) {
        rc_buf_adds(r, ",\"tool_calls\":[");
        for (size_t i = 0; i < w->n_calls; i++) {
            if (i) rc_buf_adds(r, ",");
            rc_buf_adds(r, "{\"index\":");
            rc_json_u64(r, i);
            rc_buf_adds(r, ",\"id\":");
            rc_json_str0(r, w->calls[i].id);
            rc_buf_adds(r, ",\"type\":\"function\",\"function\":{\"name\":");
            rc_json_string(r, w->calls[i].name, w->calls[i].name_len);
            rc_buf_adds(r, ",\"arguments\":");
            rc_json_string(r, w->calls[i].arguments.s ? w->calls[i].arguments.s : "",
                           w->calls[i].arguments.len);
            rc_buf_adds(r, "}}");
        }
        rc_buf_adds(r, "]");
    }
    rc_buf_adds(r, "},\"logprobs\":");
    if (!w->lp_content_set && !w->lp_reasoning_set) {
        rc_buf_adds(r, "null");
    } else { /* as the reference's accumulator writes them: content first */
        rc_buf_adds(r, "{");
        if (w->lp_content_set) {
            rc_buf_adds(r, "\"content\":[");
            rc_buf_add(r, w->lp_content.s ? w->lp_content.s : "", w->lp_content.len);
            rc_buf_adds(r, "]");
        }
        if (w->lp_reasoning_set) {
            rc_buf_adds(r,
                        w->lp_content_set ? ",\"reasoning_content\":[" : "\"reasoning_content\":[");
            rc_buf_add(r, w->lp_reasoning.s ? w->lp_reasoning.s : "", w->lp_reasoning.len);
            rc_buf_adds(r, "]");
        }
        rc_buf_adds(r, "}");
    }
    rc_buf_adds(r, ",\"finish_reason\":");
    rc_json_str0(r, w->finish_reason);
    rc_buf_adds(r, "}");
}

/* {"id":…,"object":"chat.completion","created":…,"model":…,"choices":[ */
static void response_head(const rc_writer *w, rc_buf *r)
{
    rc_buf_adds(r, "{\"id\":");
    rc_json_str0(r, w->id);
    rc_buf_adds(r, ",\"object\":\"chat.completion\",\"created\":");
    rc_json_i64(r, w->t_created);
    rc_buf_adds(r, ",\"model\":");
    rc_json_str0(r, w->model);
    rc_buf_adds(r, ",\"choices\":[");
}

/* ],"usage":…,"system_fingerprint":…} */
static void response_tail(const rc_writer *w, rc_buf *r)
{
    rc_buf_adds(r, "],\"usage\":");
    usage(w, r);
    rc_buf_adds(r, ",\"system_fingerprint\":");
    rc_json_str0(r, w->fingerprint);
    rc_buf_adds(r, "}");
}

int rc_chat_finish(rc_writer *w, rc_finish reason, rc_chunks *out)
{
    w->finish_reason = finish_word(w, reason);
    rc_buf b = {0};
    chunk_head(w, &b);
    rc_buf_adds(&b, w->reply->thinking ? "{\"content\":\"\",\"reasoning_content\":null}"
                                       : "{\"content\":\"\"}");
    chunk_tail(w, &b, w->finish_reason);
    rc_buf r = {0};
    if (w->multi) { /* one choice of several: the usage comes in rc_chat_join's chunk */
        if (usage_null(w)) rc_buf_adds(&b, ",\"usage\":null");
        rc_buf_adds(&b, "}");
        rc_emit(out, NULL, &b);
        chat_choice(w, &r);
        w->response = rc_buf_take(&r);
        return out->oom || !w->response ? -1 : 0;
    }
    rc_buf_adds(&b, ",\"usage\":");
    usage(w, &b);
    rc_buf_adds(&b, "}");
    rc_emit(out, NULL, &b);
    rc_emit(out, NULL, NULL);

    /* the complete response */
    response_head(w, &r);
    chat_choice(w, &r);
    response_tail(w, &r);
    w->response = rc_buf_take(&r);
    return out->oom || !w->response ? -1 : 0;
}

int rc_chat_join(rc_writer *const *ws, size_t n, rc_chunks *out, char **response)
{
    *response = NULL;
    rc_writer u = *ws[0]; /* choice 0's facts, with the choices' tokens summed */
    u.completion_tokens = 0;
    u.reasoning_tokens = 0;
    for (size_t i = 0; i < n; i++) {
        u.completion_tokens += ws[i]->completion_tokens;
        u.reasoning_tokens += ws[i]->reasoning_tokens;
    }
    rc_buf b = {0};
    rc_buf_adds(&b, "{\"id\":");
    rc_json_str0(&b, u.id);
    rc_buf_adds(&b, ",\"object\":\"chat.completion.chunk\",\"created\":");
    rc_json_i64(&b, u.t_created);
    rc_buf_adds(&b, ",\"model\":");
    rc_json_str0(&b, u.model);
    rc_buf_adds(&b, ",\"system_fingerprint\":");
    rc_json_str0(&b, u.fingerprint);
    rc_buf_adds(&b, ",\"choices\":[],\"usage\":");
    usage(&u, &b);
    rc_buf_adds(&b, "}");
    rc_emit(out, NULL, &b);
    rc_emit(out, NULL, NULL);
    rc_buf r = {0};
    response_head(&u, &r);
    for (size_t i = 0; i < n; i++) {
        if (i) rc_buf_adds(&r, ",");
        rc_buf_adds(&r, ws[i]->response ? ws[i]->response : "null");
    }
    response_tail(&u, &r);
    *response = rc_buf_take(&r);
    return out->oom || !*response ? -1 : 0;
}
