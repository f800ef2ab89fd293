/* Prompt encodings: a conversation rendered as the text a DeepSeek model reads,
 * cut into plain-text segments and special tokens (docs/recipe-spec.md §9–§12). */
#ifndef DI_RECIPE_ENCODING_H
#define DI_RECIPE_ENCODING_H

#include "recipe/conversation.h"

typedef enum rc_special {
    RC_BOS,
    RC_EOS,
    RC_SYSTEM_TOKEN,
    RC_USER_TOKEN,
    RC_ASSISTANT_TOKEN,
    RC_REMINDER_TOKEN,
    RC_THINK,
    RC_THINK_END,
    RC_DSML,
    RC_IMAGE,
    /* the tool-call tokens of the R1 and V3 chat templates */
    RC_TOOL_CALLS_BEGIN,
    RC_TOOL_CALL_BEGIN,
    RC_TOOL_SEP,
    RC_TOOL_CALL_END,
    RC_TOOL_CALLS_END,
    RC_TOOL_OUTPUTS_BEGIN,
    RC_TOOL_OUTPUT_BEGIN,
    RC_TOOL_OUTPUT_END,
    RC_TOOL_OUTPUTS_END,
    /* ChatML turns, and the Hermes tool-call tags (tokens in Qwen2's vocabulary,
     * text in SmolLM2's) */
    RC_IM_START,
    RC_IM_END,
    RC_HERMES_CALL,
    RC_HERMES_CALL_END,
    RC_HERMES_RESPONSE,
    RC_HERMES_RESPONSE_END,
    RC_N_SPECIAL
} rc_special;

/* The spellings of the special tokens, as deepseek-recipe writes them. */
extern const char *const rc_special_spelling[RC_N_SPECIAL];

typedef struct rc_segment {
    int special;       /* rc_special, or -1 for plain text */
    size_t start, len; /* bytes of the prompt text */
} rc_segment;

typedef struct rc_prompt {
    rc_buf text;
    rc_segment *segments;
    size_t n_segments, cap_segments;
    int oom;
} rc_prompt;

typedef enum rc_encoding { RC_ENCODING_V4 = 0, RC_ENCODING_V41 = 1 } rc_encoding;

/* Render conv. Returns DI_OK or DI_ERR_OUT_OF_MEMORY. */
di_status rc_render(const rc_conversation *conv, rc_encoding enc, rc_prompt *out);

/* The chat templates of the DeepSeek-R1 distills and of DeepSeek V3
 * (encoding_template.c), applied to a Chat Completions request's messages as
 * transformers' apply_chat_template renders them (add_generation_prompt=True).
 * DI_ERR_INVALID_REQUEST, with a message in msg, where the template cannot render
 * the messages. */
typedef enum rc_template { RC_TEMPLATE_R1, RC_TEMPLATE_V3 } rc_template;
di_status rc_render_template(json_t *root, rc_template tpl, rc_prompt *out, char *msg,
                             size_t msg_size);

/* Whether the output of a chat-template prompt is parsed for tool calls: 1 in
 * *parse_tools when the request declares tools (a non-empty `tools` array) and
 * `tool_choice` is not "none" — otherwise the tool-call tokens the model may
 * still write stay answer text, as deepseek-recipe keeps DSML as text when a
 * request declares no tools. `tool_choice` must be absent, null, "none",
 * "auto", "required" or {"type": "function", "function": {"name": STRING}};
 * "required" or a named function without tools, or a name that is not a
 * declared tool, is DI_ERR_INVALID_REQUEST with a message naming the field in
 * msg (the templates render neither tools nor tool_choice, so the call itself
 * is not forced). */
di_status rc_template_parse_tools(json_t *root, int *parse_tools, char *msg, size_t msg_size);

/* ChatML (encoding_chatml.c): a Chat Completions request's messages, tools and
 * tool_choice rendered as docs/codec.md ("ChatML") describes, with
 * `default_system` (NULL: none) as the system turn of a conversation that opens
 * without one. *parse_tools gets 1 when tools are declared and tool_choice is not
 * "none"; *required 1 when the prompt opened a <tool_call> block (tool_choice
 * "required" or a named function); call_prefix gets the call text the prompt
 * wrote after it (a named function: `\n{"name": NAME, "arguments": `; the caller
 * frees call_prefix->s). DI_ERR_INVALID_REQUEST, with a message naming
 * the field in msg, for what cannot be rendered. */
di_status rc_render_chatml(json_t *root, const char *default_system, rc_prompt *out,
                           int *parse_tools, int *required, rc_buf *call_prefix, char *msg,
                           size_t msg_size);

/* A Messages or Responses request, converted to a conversation (under the
 * V4-Pro rules, which write an image as the text "[Unsupported Image]"), as the
 * Chat Completions body the chatml encoding renders: messages (roles, text
 * content, tool calls, tool results; reasoning dropped), tools as functions and
 * tool_choice. NULL with a message when out of memory. */
json_t *rc_chatml_chat_body(const rc_conversation *conv, char *msg, size_t msg_size);

/* The default system prompt a ChatML chat template (jinja source, n bytes)
 * writes for a conversation without one: the literal text between
 * "<|im_start|>system\n" and "<|im_end|>" (SmolLM2: "You are a helpful AI
 * assistant named SmolLM, trained by Hugging Face"), when the template holds
 * such a literal. A new string (free), or NULL when there is none (or out of
 * memory). */
char *rc_chatml_default_system(const char *tpl, size_t n);

/* Shared by the renderers: append a special token or plain text to a prompt. */
void rc_prompt_special(rc_prompt *p, rc_special s);
void rc_prompt_text(rc_prompt *p, const char *s, size_t n);
void rc_prompt_free(rc_prompt *p);

#endif
