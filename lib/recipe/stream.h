/* The output side of the codec: the stream parser (generated text → reasoning,
 * answer and tool-call pieces) and the protocol writers (pieces → Chat
 * Completions chunks, Messages events, Responses events, and the complete
 * response), as deepseek-recipe 0.2.0's StreamProcessor and chunk generators
 * behave (docs/stream.md). One stream is driven by one thread at a time. */
#ifndef DI_RECIPE_STREAM_H
#define DI_RECIPE_STREAM_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "recipe/conversation.h"

/* Where parsing starts (deepseek-recipe's ThinkingInitialStage; NONE when
 * thinking mode is off). */
typedef enum rc_stage {
    RC_STAGE_NONE,
    RC_STAGE_REASONING_START,
    RC_STAGE_REASONING_CONTINUATION,
    RC_STAGE_CONTENT_CONTINUATION
} rc_stage;

/* What the output side needs to know of a request, captured at render time. */
typedef struct rc_reply {
    di_protocol protocol;
    rc_model model;
    char *model_name; /* the request's `model` */
    int thinking;
    int parse_tool_calls;     /* tools declared and tool_choice is not none */
    int starts_in_tool_calls; /* tool_choice required: the prompt opened the block */
    int parse_json_output;    /* response_format json_object / json_schema */
    rc_stage stage;
    int prefix_content; /* the request continues a prefix's answer (writer shapes) */
    /* the tool-call format: DeepSeek V4 DSML, or the V3 / V3.1 / R1 tool-call
     * tokens (<｜tool▁calls▁begin｜>…) of the chat-template encodings, or
     * ChatML's Hermes-style <tool_call>{…}</tool_call> blocks */
    enum { RC_TOOLS_DSML = 0, RC_TOOLS_V3 = 1, RC_TOOLS_HERMES = 2 } tool_format;
    int leading_think; /* a "<think>" the model writes first is dropped (R1) */
    /* Hermes: the call text the prompt wrote after the <tool_call> it opened (a
     * named tool_choice: {"name": …, "arguments": ), read before the output;
     * NULL when none */
    char *call_prefix;
    char **stops;
    size_t n_stops;
    json_t *request; /* the request body (Responses echoes its settings); owned reference */
} rc_reply;

void rc_reply_free(rc_reply *r);
/* Deep copy; returns 0, or 1 when out of memory (dst is then freeable). */
int rc_reply_copy(rc_reply *dst, const rc_reply *src);
/* Replace the parsing settings (a host's override); returns 1 when out of memory. */
int rc_reply_override(rc_reply *r, int parse_tool_calls, int starts_in_tool_calls,
                      int parse_json_output, rc_stage stage, const char *const *stops,
                      size_t n_stops);
/* Capture what the output side needs from a converted request (codec.c). */
int rc_reply_from(rc_reply *r, di_protocol protocol, const rc_conversation *conv, json_t *request);
/* What the output side needs for a prompt of the chat-template encodings:
 * Chat Completions; the V3 tool-call tokens and R1 thinking (dsv3, r1), or
 * Hermes tool calls (chatml). parse_tools: tool calls are parsed; required: the
 * prompt opened a call block, so the output starts inside it. */
typedef enum rc_template_kind { RC_KIND_V3, RC_KIND_R1, RC_KIND_CHATML } rc_template_kind;
int rc_reply_from_template(rc_reply *r, rc_template_kind kind, int parse_tools, int required,
                           const char *call_prefix, json_t *request);
/* The reply facts of a rendered prompt. */
const rc_reply *rc_prompt_reply(const di_prompt *p);

/* ---- parser ------------------------------------------------------------ */

/* Classes of parsed pieces. Pieces of one class that come from the same push
 * and follow each other are merged into one delta, as the reference does. */
typedef enum rc_piece_class {
    RC_PIECE_REASONING,
    RC_PIECE_CONTENT,
    RC_PIECE_CALL_BEGIN,   /* text: the function name */
    RC_PIECE_ARGS_OPEN,    /* "{" (or "{}" for a call without parameters) */
    RC_PIECE_ARGS_KEY,     /* the quoted parameter name */
    RC_PIECE_ARGS_COLON,   /* ": " */
    RC_PIECE_ARGS_QUOTE,   /* the quote opening a string value */
    RC_PIECE_ARGS_VALUE,   /* value text (JSON-escaped for string values) */
    RC_PIECE_ARGS_UNQUOTE, /* the quote closing a string value */
    RC_PIECE_ARGS_COMMA,   /* ", " between parameters */
    RC_PIECE_ARGS_CLOSE,   /* "}" */
    RC_PIECE_CALL_END
} rc_piece_class;

typedef struct rc_piece {
    rc_piece_class cls;
    uint32_t push; /* the push the piece's text came from */
    int call;      /* tool-call index, -1 for reasoning/content */
    rc_buf text;
    rc_buf raw; /* ARGS_VALUE of a string value: the text before JSON escaping */
} rc_piece;

typedef struct rc_pieces {
    rc_piece *v;
    size_t n, cap;
    int oom;
} rc_pieces;

void rc_pieces_clear(rc_pieces *p);
void rc_pieces_free(rc_pieces *p);

typedef struct rc_parser rc_parser;

/* A parser for `reply`'s options (borrowed: it must outlive the parser). */
rc_parser *rc_parser_new(const rc_reply *reply);
void rc_parser_free(rc_parser *p);
/* Feed one push of UTF-8 text; decided pieces are appended to out. Returns 0, or
 * -1 when out of memory. */
int rc_parser_push(rc_parser *p, const char *text, size_t len, rc_pieces *out);
/* As rc_parser_push, for the text of one added token (a token push): stop
 * sequences never match into it, as the reference treats it. */
int rc_parser_push_atomic(rc_parser *p, const char *text, size_t len, rc_pieces *out);
/* The end of the output: release what is held (pieces appended to out). */
int rc_parser_finish(rc_parser *p, rc_pieces *out);
/* 1 once a stop sequence matched, or (Hermes) text that is no call followed the
 * calls: output after it is ignored. */
int rc_parser_stopped(const rc_parser *p);
/* The stop sequence that matched, or NULL. */
const char *rc_parser_stop_sequence(const rc_parser *p);
/* 1 once a reasoning piece was emitted (tool-call ids carry "ET_" until then). */
int rc_parser_reasoning_emitted(const rc_parser *p);
/* Tool calls begun so far. */
int rc_parser_n_calls(const rc_parser *p);
/* The number the next push will have (rc_piece.push of its pieces). */
uint32_t rc_parser_next_push(const rc_parser *p);

/* ---- writers ----------------------------------------------------------- */

typedef enum rc_finish {
    RC_FINISH_STOP = 1,
    RC_FINISH_LENGTH,
    RC_FINISH_CONTENT_FILTER,
    RC_FINISH_UNKNOWN /* no reason given: "stop" whatever the output */
} rc_finish;

/* One protocol chunk: compact JSON, the SSE event name (NULL for Chat), and the
 * SSE message. json NULL marks Chat's final "data: [DONE]". */
typedef struct rc_chunk {
    char *json, *event, *sse;
    size_t json_len, sse_len;
} rc_chunk;

typedef struct rc_chunks {
    rc_chunk *v;
    size_t n, cap;
    int oom;
} rc_chunks;

void rc_chunks_clear(rc_chunks *c);

/* A tool call as the writers know it. */
typedef struct rc_out_call {
    char id[40];
    char *name; /* NUL-terminated; may hold U+0000: name_len is its length */
    size_t name_len;
    rc_buf arguments;
} rc_out_call;

/* The state shared by the writers of one response. */
typedef struct rc_writer {
    const rc_reply *reply;
    char *id, *model, *signature, *fingerprint;
    int64_t created; /* 0: the clock */
    int64_t t_created, t_completed;
    uint32_t prompt_tokens, cache_hit_tokens;
    uint32_t completion_tokens, reasoning_tokens;
    int has_tokenizer; /* reasoning tokens can be counted */
    int started;       /* opening chunks written */
    int finished;      /* final chunks written */
    /* the accumulated response */
    rc_buf reasoning, content;
    rc_out_call *calls;
    size_t n_calls;
    /* protocol state */
    int block;        /* Messages: open content block kind (0 none, 1 thinking, 2 text, 3 tool) */
    int n_blocks;     /* Messages: blocks opened; Responses: output items */
    int pinged;       /* Messages: the ping was sent */
    int seq;          /* Responses: sequence_number */
    int item;         /* Responses: the open output item's kind (0 none) */
    int item_call;    /* Responses: the open call item's call index */
    rc_buf item_text; /* Responses: the open item's text / custom input */
    rc_buf items;     /* Responses: the done items, comma-separated JSON */
    int custom_mode;  /* Responses: apply_patch input state */
    rc_buf custom_key, custom_pending;
    uint64_t rng;
    /* log probabilities of token pushes (di_stream_push_tokens_logprobs): per
     * parser push, its tokens' entries (OpenAI's token / logprob / bytes /
     * top_logprobs objects, comma-separated), taken by the first reasoning or
     * content piece written from that push, as the reference attaches them */
    struct rc_lp_push {
        uint32_t push;
        rc_buf entries;
    } * lp;
    size_t n_lp, cap_lp;
    rc_buf lp_cur;                   /* the entries taken by the piece being written */
    const rc_buf *piece_lp;          /* &lp_cur while a piece with entries is written */
    rc_buf lp_content, lp_reasoning; /* Chat: every entry written, per class */
    int lp_content_set, lp_reasoning_set;
    rc_buf item_lp;            /* Responses: the open message item's entries */
    const char *finish_reason; /* the protocol's word */
    const char *stop_sequence;
    char *response; /* the complete response JSON after finish */
    /* Chat `n` (rc_stream_set_choice): this writer's choice, and 1 when the
     * request has several — its finish chunk then carries no usage and no
     * [DONE], and `response` is its choice object; rc_chat_join writes the
     * request's last chunk and whole response */
    uint32_t choice;
    int multi;
} rc_writer;

/* Write the chunks of one batch of pieces (a push), then — when `finish` is
 * nonzero — the final ones for `reason`. Returns 0 or -1 (out of memory). */
int rc_write_start(rc_writer *w, rc_chunks *out);
int rc_write_pieces(rc_writer *w, const rc_pieces *pieces, rc_chunks *out);
int rc_write_finish(rc_writer *w, rc_finish reason, rc_chunks *out);
/* Record the log-probability entries of parser push `push` (entries: len bytes
 * of comma-separated JSON objects). Returns 0, or -1 when out of memory. */
int rc_writer_add_logprobs(rc_writer *w, uint32_t push, const char *entries, size_t len);
void rc_writer_free(rc_writer *w);

/* The n choices of one Chat request (their writers finished, multi set):
 * appends to out the request's last chunk — choices [] and the usage, the
 * completion and reasoning tokens summed over the choices (OpenAI's usage for
 * n > 1) — and [DONE]; *response gets the complete chat.completion with every
 * choice object in index order (malloc'd). 0, or -1 when out of memory. */
int rc_chat_join(rc_writer *const *ws, size_t n, rc_chunks *out, char **response);
/* Make stream s choice `index` of a Chat request with several (before
 * di_stream_ready): its chunks carry that index, and it takes the response id
 * and creation time of `first` (choice 0's stream; NULL for choice 0 itself).
 * 0, or -1 when out of memory. */
int rc_stream_set_choice(di_stream *s, uint32_t index, const di_stream *first);
/* The end of a Chat request with several choices, every stream finished:
 * s[0]'s chunks become the request's last chunk and [DONE] (its events are
 * cleared), and its response the whole chat.completion (rc_chat_join). 0, or
 * -1 when out of memory. */
int rc_stream_join(di_stream *const *s, size_t n);

#endif
