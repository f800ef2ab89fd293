/* Anthropic Messages stream events and the complete message object, as
 * deepseek-recipe's MessagesChunkGenerator and MessagesResponse write them
 * (docs/stream.md, "Messages"). */
#include <stdlib.h>
#include <string.h>

#include "recipe/writer.h"

enum { BLOCK_NONE, BLOCK_THINKING, BLOCK_TEXT, BLOCK_TOOL };

static void usage(const rc_writer *w, rc_buf *b, uint32_t output_tokens)
{
    rc_buf_adds(b, "{\"input_tokens\":");
    rc_json_u64(b, w->prompt_tokens > w->cache_hit_tokens ? w->prompt_tokens - w->cache_hit_tokens
                                                          : 0);
    rc_buf_adds(b, ",\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":");
    rc_json_u64(b, w->cache_hit_tokens);
    rc_buf_adds(b, ",\"output_tokens\":");
    rc_json_u64(b, output_tokens);
    rc_buf_adds(b, ",\"service_tier\":\"standard\"}");
}

static void block_start(rc_writer *w, rc_chunks *out, int kind, const rc_piece *pc)
{
    rc_buf b = {0};
    rc_buf_adds(&b, "{\"type\":\"content_block_start\",\"index\":");
    rc_json_u64(&b, (uint64_t)w->n_blocks);
    rc_buf_adds(&b, ",\"content_block\":");
    if (kind == BLOCK_THINKING)
        rc_buf_adds(&b, "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}");
    else if (kind == BLOCK_TEXT)
        rc_buf_adds(&b, "{\"type\":\"text\",\"text\":\"\"}");
    else {
        rc_buf_adds(&b, "{\"type\":\"tool_use\",\"id\":");
        rc_json_str0(&b, w->calls[pc->call].id);
        rc_buf_adds(&b, ",\"name\":");
        rc_json_string(&b, pc->text.s ? pc->text.s : "", pc->text.len);
        rc_buf_adds(&b, ",\"input\":{}}");
    }
    rc_buf_adds(&b, "}");
    rc_emit(out, "content_block_start", &b);
    w->block = kind;
    w->n_blocks++;
    if (!w->pinged) { /* once, after the first content_block_start */
        w->pinged = 1;
        rc_buf p = {0};
        rc_buf_adds(&p, "{\"type\":\"ping\"}");
        rc_emit(out, "ping", &p);
    }
}

static void block_delta(rc_writer *w, rc_chunks *out, const char *type, const char *field,
                        const char *s, size_t n)
{
    rc_buf b = {0};
    rc_buf_adds(&b, "{\"type\":\"content_block_delta\",\"index\":");
    rc_json_u64(&b, (uint64_t)(w->n_blocks - 1));
    rc_buf_adds(&b, ",\"delta\":{\"type\":\"");
    rc_buf_adds(&b, type);
    rc_buf_adds(&b, "\",\"");
    rc_buf_adds(&b, field);
    rc_buf_adds(&b, "\":");
    rc_json_string(&b, s, n);
    rc_buf_adds(&b, "}}");
    rc_emit(out, "content_block_delta", &b);
}

static void block_stop(rc_writer *w, rc_chunks *out)
{
    if (w->block == BLOCK_NONE) return;
    if (w->block == BLOCK_THINKING)
        block_delta(w, out, "signature_delta", "signature", w->signature, strlen(w->signature));
    rc_buf b = {0};
    rc_buf_adds(&b, "{\"type\":\"content_block_stop\",\"index\":");
    rc_json_u64(&b, (uint64_t)(w->n_blocks - 1));
    rc_buf_adds(&b, "}");
    rc_emit(out, "content_block_stop", &b);
    w->block = BLOCK_NONE;
}

int rc_messages_start(rc_writer *w, rc_chunks *out)
{
    rc_buf b = {0};
    rc_buf_adds(&b, "{\"type\":\"message_start\",\"message\":{\"id\":");
    rc_json_str0(&b, w->id);
    rc_buf_adds(&b, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    rc_json_str0(&b, w->model);
    rc_buf_adds(&b, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
    usage(w, &b, 0);
    rc_buf_adds(&b, "}}");
    rc_emit(out, "message_start", &b);
    if (w->reply->thinking || w->reply->stage != RC_STAGE_NONE)
        block_start(w, out, BLOCK_THINKING, NULL);
    return out->oom ? -1 : 0;
}

int rc_messages_piece(rc_writer *w, const rc_piece *pc, rc_chunks *out)
{
    const char *s = pc->text.s ? pc->text.s : "";
    switch (pc->cls) {
    case RC_PIECE_REASONING:
        if (w->block != BLOCK_THINKING) {
            block_stop(w, out);
            block_start(w, out, BLOCK_THINKING, pc);
        }
        block_delta(w, out, "thinking_delta", "thinking", s, pc->text.len);
        break;
    case RC_PIECE_CONTENT:
        if (w->block != BLOCK_TEXT) {
            block_stop(w, out);
            block_start(w, out, BLOCK_TEXT, pc);
        }
        block_delta(w, out, "text_delta", "text", s, pc->text.len);
        break;
    case RC_PIECE_CALL_BEGIN:
        block_stop(w, out);
        block_start(w, out, BLOCK_TOOL, pc);
        break;
    case RC_PIECE_CALL_END: break;
    default: block_delta(w, out, "input_json_delta", "partial_json", s, pc->text.len); break;
    }
    return out->oom ? -1 : 0;
}

static const char *stop_word(const rc_writer *w, rc_finish reason)
{
    if (reason == RC_FINISH_LENGTH) return "max_tokens";
    if (reason == RC_FINISH_CONTENT_FILTER) return "refusal";
    if (w->stop_sequence) return "stop_sequence";
    return w->n_calls && reason == RC_FINISH_STOP ? "tool_use" : "end_turn";
}

int rc_messages_finish(rc_writer *w, rc_finish reason, rc_chunks *out)
{
    block_stop(w, out);
    w->finish_reason = stop_word(w, reason);
    rc_buf b = {0};
    rc_buf_adds(&b, "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":");
    rc_json_str0(&b, w->finish_reason);
    rc_buf_adds(&b, ",\"stop_sequence\":");
    rc_json_str0(&b, w->stop_sequence);
    rc_buf_adds(&b, "},\"usage\":");
    usage(w, &b, w->completion_tokens);
    rc_buf_adds(&b, "}");
    rc_emit(out, "message_delta", &b);
    rc_buf e = {0};
    rc_buf_adds(&e, "{\"type\":\"message_stop\"}");
    rc_emit(out, "message_stop", &e);

    rc_buf r = {0};
    rc_buf_adds(&r, "{\"id\":");
    rc_json_str0(&r, w->id);
    rc_buf_adds(&r, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    rc_json_str0(&r, w->model);
    rc_buf_adds(&r, ",\"content\":[");
    int n = 0;
    if (w->reply->thinking || w->reply->stage != RC_STAGE_NONE) {
        rc_buf_adds(&r, "{\"type\":\"thinking\",\"thinking\":");
        rc_json_string(&r, w->reasoning.s ? w->reasoning.s : "", w->reasoning.len);
        rc_buf_adds(&r, ",\"signature\":");
        rc_json_str0(&r, w->signature);
        rc_buf_adds(&r, "}");
        n++;
    }
    if (w->content.len) {
        if (n++) rc_buf_adds(&r, ",");
        rc_buf_adds(&r, "{\"type\":\"text\",\"text\":");
        rc_json_string(&r, w->content.s, w->content.len);
        rc_buf_adds(&r, "}");
    }
    for (size_t i = 0; i < w->n_calls; i++) {
        if (n++) rc_buf_adds(&r, ",");
        rc_buf_adds(&r, "{\"type\":\"tool_use\",\"id\":");
        rc_json_str0(&r, w->calls[i].id);
        rc_buf_adds(&r, ",\"name\":");
        rc_json_string(&r, w->calls[i].name, w->calls[i].name_len);
        rc_buf_adds(&r, ",\"input\":");
        char msg[128];
        json_t *input = rc_json_parse(w->calls[i].arguments.s ? w->calls[i].arguments.s : "",
                                      w->calls[i].arguments.len, 128, msg, sizeof msg);
        if (input)
            rc_compact_json(&r, input);
        else
            rc_buf_adds(&r, "{}");
        json_decref(input);
        rc_buf_adds(&r, "}");
    }
    rc_buf_adds(&r, "],\"stop_reason\":");
    rc_json_str0(&r, w->finish_reason);
    rc_buf_adds(&r, ",\"stop_sequence\":");
    rc_json_str0(&r, w->stop_sequence);
    rc_buf_adds(&r, ",\"usage\":");
    usage(w, &r, w->completion_tokens);
    rc_buf_adds(&r, "}");
    w->response = rc_buf_take(&r);
    return out->oom || !w->response ? -1 : 0;
}
