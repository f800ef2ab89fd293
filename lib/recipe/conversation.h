/* The conversation: the protocol-neutral middle of the codec, as deepseek-recipe
 * models it (docs/recipe-spec.md §1). Requests of every protocol convert into it
 * (request_*.c) and the prompt encodings render it (encoding_dsv4.c).
 *
 * Strings are owned, NUL-terminated UTF-8. In message contents the byte 0xFF
 * (never part of UTF-8) stands for an image: the V4.1
 * encoding renders it as the <｜image｜> special token. A conversation is built by
 * one thread and then read-only. */
#ifndef DI_RECIPE_CONVERSATION_H
#define DI_RECIPE_CONVERSATION_H

#include <jansson.h>
#include <stddef.h>

#include "deepinfer/deepinfer.h"

#define RC_IMAGE_MARK '\xff'

typedef enum rc_role { RC_SYSTEM, RC_USER, RC_ASSISTANT, RC_TOOL, RC_REMINDER } rc_role;
typedef enum rc_effort {
    RC_EFFORT_NONE,
    RC_EFFORT_LOW,
    RC_EFFORT_HIGH,
    RC_EFFORT_XHIGH,
    RC_EFFORT_MAX
} rc_effort;
typedef enum rc_tool_choice { RC_CHOICE_AUTO, RC_CHOICE_NONE, RC_CHOICE_REQUIRED } rc_tool_choice;
typedef enum rc_format {
    RC_FORMAT_TEXT,
    RC_FORMAT_JSON_OBJECT,
    RC_FORMAT_JSON_SCHEMA,
    RC_FORMAT_REGEX
} rc_format;
typedef enum rc_model { RC_MODEL_V4_PRO, RC_MODEL_V41_FLASH } rc_model;

typedef struct rc_tool {
    char *name;
    char *description;  /* NULL renders as "" */
    json_t *parameters; /* owned reference */
    int deferred;
} rc_tool;

typedef struct rc_call {
    char *id, *name, *arguments;
} rc_call;

typedef struct rc_message {
    rc_role role;
    char *content;
    size_t content_len; /* bytes (content may hold U+0000) */
    char *reasoning;    /* assistant: NULL when thinking is off */
    rc_call *calls;
    size_t n_calls;
    char *tool_call_id;
    int prefix;
    rc_tool *updated_tools; /* system (V4.1): tools announced here */
    size_t n_updated;
} rc_message;

typedef struct rc_conversation {
    rc_model model;
    rc_message *messages;
    size_t n_messages, cap_messages;
    int thinking;
    rc_effort effort;
    rc_tool *tools;
    size_t n_tools;
    rc_tool_choice tool_choice;
    rc_format format;
    json_t *schema; /* json_schema format, owned */
    int stream;
    int max_tokens; /* 0 when absent */
    int has_temperature, has_top_p;
    float temperature, top_p; /* as requested (float32, as the reference stores them) */
    char **stops;             /* stop sequences */
    size_t n_stops;
    char **images; /* image sources (URLs or data URLs), in the order of their <｜image｜> tokens */
    size_t n_images;
    /* Set by the caller before rc_convert_chat: 1 lets Chat `n` be any value
     * of its type (the engine serves n choices, rc_sampling.n); 0 keeps
     * deepseek-recipe's rule that n is 1. */
    int allow_n;
} rc_conversation;

/* Append a stop sequence / image source (copied); -1 when out of memory. */
int rc_add_stop(rc_conversation *c, const char *s);
int rc_add_image(rc_conversation *c, const char *url);

void rc_conversation_free(rc_conversation *c);
/* Append a message (zeroed, with role); NULL when out of memory. */
rc_message *rc_add_message(rc_conversation *c, rc_role role);
void rc_tool_clear(rc_tool *t);

/* A growable string. */
typedef struct rc_buf {
    char *s;
    size_t len, cap;
    int oom;
} rc_buf;
void rc_buf_add(rc_buf *b, const char *s, size_t n);
void rc_buf_adds(rc_buf *b, const char *s);
char *rc_buf_take(rc_buf *b); /* the string (NUL-terminated), or NULL when out of memory */

/* pyjson (docs/recipe-spec.md §5): `", "` / `": "` separators, insertion order,
 * raw UTF-8, floats in the V4 (ryu-like) or V4.1 (Python repr) style. A NULL v
 * (a failed json_* allocation) marks b out of memory. */
typedef enum rc_float_style { RC_FLOAT_V4, RC_FLOAT_V41 } rc_float_style;
void rc_pyjson(rc_buf *b, const json_t *v, rc_float_style style);
/* The compact form (',' and ':' separators) the reference uses inside tool-search
 * results and arguments (docs/recipe-spec.md §8.6). */
void rc_compact_json(rc_buf *b, const json_t *v);

/* A JSON string as serde_json (and Python's json.dumps(ensure_ascii=False)) writes
 * it, quotes included: raw UTF-8, the short escapes, other controls as \u00XX. */
void rc_json_string(rc_buf *b, const char *s, size_t n);

/* A float32 as serde_json writes it (ryu's shortest round-trip digits: 0.7, 2.0,
 * 1e-7). */
void rc_json_f32(rc_buf *b, float x);

/* Parse JSON with serde_json's semantics (json_parse.c): NULL with a message on
 * error. max_depth counts nested arrays and objects, the root being 1. */
json_t *rc_json_parse(const char *s, size_t n, int max_depth, char *msg, size_t msg_size);
/* A u64 above INT64_MAX, kept as a marked string by rc_json_parse. */
int rc_json_is_bignum(const json_t *v);

/** True when v is a JSON string that came from the request as a string: the
 *  parser keeps integers beyond 64 bits as 0xFF-marked strings (see
 *  rc_json_is_bignum), and those must be rejected wherever a string is
 *  required, as deepseek-recipe's serde models do. */
static inline int rc_json_is_text(const json_t *v)
{
    return json_is_string(v) && !rc_json_is_bignum(v);
}

/* Convert a Chat Completions request into *conv. On failure returns
 * DI_ERR_INVALID_REQUEST (or DI_ERR_OUT_OF_MEMORY) with a message naming the field
 * in msg. */
di_status rc_convert_chat(json_t *root, rc_conversation *conv, char *msg, size_t msg_size);
/* The same for Anthropic Messages requests (request_messages.c). */
di_status rc_convert_messages(json_t *root, rc_conversation *conv, char *msg, size_t msg_size);
/* The same for OpenAI Responses requests (request_responses.c). */
di_status rc_convert_responses(json_t *root, rc_conversation *conv, char *msg, size_t msg_size);

#endif
