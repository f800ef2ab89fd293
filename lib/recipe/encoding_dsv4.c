/* The DeepSeek V4 and V4.1 prompt encodings, byte-exact with deepseek-recipe
 * 0.2.0's DeepseekV4Encoding / DeepseekV41Encoding (docs/recipe-spec.md §9–§10;
 * the fixtures in tests/fixtures/codec are the ground truth). */
#include <stdlib.h>
#include <string.h>

#include "recipe/encoding.h"

const char *const rc_special_spelling[RC_N_SPECIAL] = {
    [RC_BOS] = "<｜begin▁of▁sentence｜>",
    [RC_EOS] = "<｜end▁of▁sentence｜>",
    [RC_SYSTEM_TOKEN] = "<｜System｜>",
    [RC_USER_TOKEN] = "<｜User｜>",
    [RC_ASSISTANT_TOKEN] = "<｜Assistant｜>",
    [RC_REMINDER_TOKEN] = "<｜latest_reminder｜>",
    [RC_THINK] = "<think>",
    [RC_THINK_END] = "</think>",
    [RC_DSML] = "｜DSML｜",
    [RC_IMAGE] = "<｜image｜>",
    [RC_TOOL_CALLS_BEGIN] = "<｜tool▁calls▁begin｜>",
    [RC_TOOL_CALL_BEGIN] = "<｜tool▁call▁begin｜>",
    [RC_TOOL_SEP] = "<｜tool▁sep｜>",
    [RC_TOOL_CALL_END] = "<｜tool▁call▁end｜>",
    [RC_TOOL_CALLS_END] = "<｜tool▁calls▁end｜>",
    [RC_TOOL_OUTPUTS_BEGIN] = "<｜tool▁outputs▁begin｜>",
    [RC_TOOL_OUTPUT_BEGIN] = "<｜tool▁output▁begin｜>",
    [RC_TOOL_OUTPUT_END] = "<｜tool▁output▁end｜>",
    [RC_TOOL_OUTPUTS_END] = "<｜tool▁outputs▁end｜>",
    [RC_IM_START] = "<|im_start|>",
    [RC_IM_END] = "<|im_end|>",
    [RC_HERMES_CALL] = "<tool_call>",
    [RC_HERMES_CALL_END] = "</tool_call>",
    [RC_HERMES_RESPONSE] = "<tool_response>",
    [RC_HERMES_RESPONSE_END] = "</tool_response>",
};

static const char effort_high[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";
static const char effort_max[] =
    "Reasoning Effort: Beyond maximum \xe2\x80\x94 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every "
    "causal chain to its root, and resolve the underlying cause rather than any surface "
    "symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n";

/* The tools head; {C} {I} {P} stand for the DSML tag words of the encoding
 * ("tool_calls"/"invoke"/"parameter" in V4, " calls"/" invoke"/" parameter" in V4.1). */
static const char tools_head[] =
    "\n\n## Tools\n\nYou have access to a set of tools to help answer the user's question. You "
    "can invoke tools by writing a \"<｜DSML｜{C}>\" block like the following:\n\n"
    "<｜DSML｜{C}>\n<｜DSML｜{I} name=\"$TOOL_NAME\">\n<｜DSML｜{P} name=\"$PARAMETER_NAME\" "
    "string=\"true|false\">$PARAMETER_VALUE</｜DSML｜{P}>\n...\n</｜DSML｜{I}>\n"
    "<｜DSML｜{I} name=\"$TOOL_NAME2\">\n...\n</｜DSML｜{I}>\n</｜DSML｜{C}>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other "
    "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
    "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
static const char tools_tail[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

typedef struct renderer {
    const rc_conversation *conv;
    rc_encoding enc;
    rc_prompt *out;
} renderer;

static void push_segment(rc_prompt *p, int special, size_t start, size_t len)
{
    if (p->oom || len == 0) return;
    if (special < 0 && p->n_segments && p->segments[p->n_segments - 1].special < 0) {
        p->segments[p->n_segments - 1].len += len; /* merge adjacent text */
        return;
    }
    if (p->n_segments == p->cap_segments) {
        size_t cap = p->cap_segments ? p->cap_segments * 2 : 64;
        rc_segment *s = realloc(p->segments, cap * sizeof *s);
        if (!s) {
            p->oom = 1;
            return;
        }
        p->segments = s;
        p->cap_segments = cap;
    }
    p->segments[p->n_segments++] = (rc_segment){special, start, len};
}

void rc_prompt_special(rc_prompt *p, rc_special s)
{
    size_t start = p->text.len;
    rc_buf_adds(&p->text, rc_special_spelling[s]);
    push_segment(p, (int)s, start, p->text.len - start);
}

void rc_prompt_text(rc_prompt *p, const char *s, size_t n)
{
    size_t start = p->text.len;
    rc_buf_add(&p->text, s, n);
    push_segment(p, -1, start, n);
}

static void special(renderer *r, rc_special s)
{
    rc_prompt_special(r->out, s);
}

/* Plain text written by the user: never special, except the image mark. */
static void text(renderer *r, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const char *mark = memchr(s + i, RC_IMAGE_MARK, n - i);
        size_t end = mark ? (size_t)(mark - s) : n;
        size_t start = r->out->text.len;
        rc_buf_add(&r->out->text, s + i, end - i);
        push_segment(r->out, -1, start, end - i);
        if (!mark) break;
        special(r, RC_IMAGE);
        i = end + 1;
    }
}

static void texts(renderer *r, const char *s)
{
    text(r, s, strlen(s));
}

/* Template text: the spellings of ｜DSML｜, <think> and </think> in it are special
 * tokens; {C} {I} {P} expand to the encoding's DSML tag words. */
static void template(renderer *r, const char *s)
{
    static const char *words[2][3] = {{"tool_calls", "invoke", "parameter"},
                                      {" calls", " invoke", " parameter"}};
    const char *dsml = rc_special_spelling[RC_DSML];
    size_t dl = strlen(dsml);
    while (*s) {
        if (strncmp(s, dsml, dl) == 0) {
            special(r, RC_DSML);
            s += dl;
        } else if (strncmp(s, "</think>", 8) == 0) {
            special(r, RC_THINK_END);
            s += 8;
        } else if (strncmp(s, "<think>", 7) == 0) {
            special(r, RC_THINK);
            s += 7;
        } else if (s[0] == '{' && (s[1] == 'C' || s[1] == 'I' || s[1] == 'P') && s[2] == '}') {
            texts(r, words[r->enc][s[1] == 'C' ? 0 : s[1] == 'I' ? 1 : 2]);
            s += 3;
        } else {
            size_t n = 1;
            while (s[n] && s[n] != '{' && s[n] != '<' && strncmp(s + n, dsml, dl) != 0) n++;
            text(r, s, n);
            s += n;
        }
    }
}

static rc_float_style float_style(const renderer *r)
{
    return r->enc == RC_ENCODING_V4 ? RC_FLOAT_V4 : RC_FLOAT_V41;
}

static void tool_line(renderer *r, const rc_tool *t)
{
    rc_buf b = {0};
    json_t *name = json_string(t->name);
    json_t *desc = json_string(t->description ? t->description : "");
    rc_buf_adds(&b, "{\"name\": ");
    rc_pyjson(&b, name, float_style(r));
    rc_buf_adds(&b, ", \"description\": ");
    rc_pyjson(&b, desc, float_style(r));
    rc_buf_adds(&b, ", \"parameters\": ");
    rc_pyjson(&b, t->parameters, float_style(r));
    rc_buf_adds(&b, "}");
    json_decref(name);
    json_decref(desc);
    if (b.oom || !name || !desc)
        r->out->oom = 1;
    else
        text(r, b.s, b.len);
    free(b.s);
}

static void tools_block(renderer *r)
{
    size_t shown = 0;
    for (size_t i = 0; i < r->conv->n_tools; i++) {
        if (r->conv->tools[i].deferred) continue;
        if (shown++ == 0)
            template(r, tools_head);
        else
            texts(r, "\n");
        tool_line(r, &r->conv->tools[i]);
    }
    if (shown) texts(r, tools_tail);
}

static void format_block(renderer *r)
{
    const rc_conversation *c = r->conv;
    if (c->format == RC_FORMAT_JSON_OBJECT && r->enc == RC_ENCODING_V4) {
        texts(r, "\n\nYou are a helpful assistant designed to output JSON.\n## Response Format:\n\n"
                 "Reply with JSON object ONLY.");
    } else if (c->format == RC_FORMAT_JSON_OBJECT) {
        texts(r, "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
                 "reply:\n{\"type\": \"json_object\"}");
    } else if (c->format == RC_FORMAT_JSON_SCHEMA) {
        rc_buf b = {0};
        rc_pyjson(&b, c->schema, float_style(r));
        texts(r, "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
                 "reply:\n");
        if (b.oom)
            r->out->oom = 1;
        else
            text(r, b.s, b.len);
        free(b.s);
    }
}

static void effort_header(renderer *r)
{
    if (!r->conv->thinking) return;
    if (r->enc == RC_ENCODING_V4) {
        if (r->conv->effort == RC_EFFORT_MAX)
            texts(r, effort_max);
        else if (r->conv->effort != RC_EFFORT_LOW)
            texts(r, effort_high);
        return;
    }
    int n = r->conv->effort == RC_EFFORT_LOW ? 50 : r->conv->effort == RC_EFFORT_MAX ? 100 : 75;
    texts(r, n == 50   ? "Reasoning Effort: 50"
             : n == 75 ? "Reasoning Effort: 75"
                       : "Reasoning Effort: 100");
    texts(r, " (range 1-100, the higher the value, the more thorough the reasoning)\n\n");
}

/* The order calls are rendered in: V4 sorts them by id, V4.1 keeps request order. */
static void call_order(const renderer *r, const rc_message *m, size_t *order)
{
    for (size_t i = 0; i < m->n_calls; i++) order[i] = i;
    if (r->enc != RC_ENCODING_V4) return;
    for (size_t i = 1; i < m->n_calls; i++)
        for (size_t j = i; j > 0 && strcmp(m->calls[order[j - 1]].id, m->calls[order[j]].id) > 0;
             j--) {
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

static void dsml_tag(renderer *r, const char *open, const char *word)
{
    texts(r, open);
    special(r, RC_DSML);
    template(r, word);
}

static void dsml_calls(renderer *r, const rc_message *m)
{
    size_t *order = malloc((m->n_calls + 1) * sizeof *order);
    if (!order) {
        r->out->oom = 1;
        return;
    }
    call_order(r, m, order);
    dsml_tag(r, "<", "{C}>\n");
    for (size_t k = 0; k < m->n_calls; k++) {
        const rc_call *c = &m->calls[order[k]];
        dsml_tag(r, "<", "{I} name=\"");
        texts(r, c->name);
        texts(r, "\">\n");
        char jmsg[160];
        json_t *args = rc_json_parse(c->arguments, strlen(c->arguments), 127, jmsg, sizeof jmsg);
        size_t params = 0;
        if (json_is_object(args)) {
            const char *key;
            json_t *value;
            json_object_foreach(args, key, value)
            {
                params++;
                dsml_tag(r, "<", "{P} name=\"");
                texts(r, key);
                int is_text = rc_json_is_text(value);
                texts(r, is_text ? "\" string=\"true\">" : "\" string=\"false\">");
                if (is_text) {
                    text(r, json_string_value(value), json_string_length(value));
                } else {
                    rc_buf b = {0};
                    rc_pyjson(&b, value, float_style(r));
                    if (b.oom)
                        r->out->oom = 1;
                    else
                        text(r, b.s, b.len);
                    free(b.s);
                }
                dsml_tag(r, "</", "{P}>\n");
            }
        } else {
            dsml_tag(r, "<", "{P} name=\"arguments\" string=\"true\">");
            texts(r, c->arguments);
            dsml_tag(r, "</", "{P}>\n");
            params = 1;
        }
        json_decref(args);
        if (params == 0 && r->enc == RC_ENCODING_V41) texts(r, "\n");
        dsml_tag(r, "</", "{I}>\n");
    }
    dsml_tag(r, "</", "{C}>");
    free(order);
}

static void system_message(renderer *r, const rc_message *m, int first)
{
    special(r, RC_SYSTEM_TOKEN);
    if (first) effort_header(r);
    text(r, m->content, m->content_len);
    if (first) {
        tools_block(r);
        format_block(r);
    }
    if (m->n_updated) {
        texts(r, "\n\n### Updated Tool Schemas\n\n");
        for (size_t i = 0; i < m->n_updated; i++) {
            if (i) texts(r, "\n");
            tool_line(r, &m->updated_tools[i]);
        }
    }
}

static void assistant_turn(renderer *r, const rc_message *m, int last)
{
    const rc_conversation *c = r->conv;
    special(r, RC_ASSISTANT_TOKEN);
    if (last && m->prefix) {
        if (c->thinking) {
            special(r, RC_THINK);
            texts(r, m->reasoning ? m->reasoning : "");
            if (m->content_len) {
                special(r, RC_THINK_END);
                text(r, m->content, m->content_len);
            }
        } else {
            special(r, RC_THINK_END);
            text(r, m->content, m->content_len);
        }
        return;
    }
    if (c->n_tools > 0 && m->reasoning) {
        special(r, RC_THINK);
        texts(r, m->reasoning);
    }
    special(r, RC_THINK_END);
    text(r, m->content, m->content_len);
    if (m->n_calls) {
        texts(r, "\n\n");
        dsml_calls(r, m);
    }
    special(r, RC_EOS);
}

/* A run of tool messages, in the order of the preceding assistant's calls. */
static size_t tool_results(renderer *r, size_t i, const rc_message *caller)
{
    size_t end = i;
    while (end < r->conv->n_messages && r->conv->messages[end].role == RC_TOOL) end++;
    size_t n = end - i, done = 0;
    size_t *order = malloc((caller ? caller->n_calls : 0) * sizeof *order + 1);
    unsigned char *used = calloc(n + 1, 1);
    if (!order || !used) {
        r->out->oom = 1;
        free(order);
        free(used);
        return end;
    }
    if (caller) call_order(r, caller, order);
    for (size_t k = 0; caller && k < caller->n_calls; k++)
        for (size_t j = 0; j < n; j++) {
            const rc_message *t = &r->conv->messages[i + j];
            if (used[j] || strcmp(t->tool_call_id, caller->calls[order[k]].id) != 0) continue;
            if (done++) texts(r, "\n\n");
            texts(r, "<tool_result>");
            text(r, t->content, t->content_len);
            texts(r, "</tool_result>");
            used[j] = 1;
            break;
        }
    for (size_t j = 0; j < n; j++) /* results with no matching call (not from the protocols) */
        if (!used[j]) {
            if (done++) texts(r, "\n\n");
            texts(r, "<tool_result>");
            text(r, r->conv->messages[i + j].content, r->conv->messages[i + j].content_len);
            texts(r, "</tool_result>");
        }
    free(order);
    free(used);
    return end;
}

di_status rc_render(const rc_conversation *conv, rc_encoding enc, rc_prompt *out)
{
    memset(out, 0, sizeof *out);
    renderer r = {conv, enc, out};
    int v41 = enc == RC_ENCODING_V41;
    special(&r, RC_BOS);
    if (!v41) {
        /* V4: one system text up front, from every non-empty system message. */
        effort_header(&r);
        int any = 0;
        for (size_t i = 0; i < conv->n_messages; i++) {
            const rc_message *m = &conv->messages[i];
            if (m->role != RC_SYSTEM || !m->content_len) continue;
            if (any++) texts(&r, "\n\n");
            text(&r, m->content, m->content_len);
        }
        tools_block(&r);
        format_block(&r);
    } else {
        int first_is_system = conv->n_messages && conv->messages[0].role == RC_SYSTEM;
        int need = conv->thinking || conv->format == RC_FORMAT_JSON_OBJECT ||
                   conv->format == RC_FORMAT_JSON_SCHEMA;
        for (size_t i = 0; i < conv->n_tools && !need; i++) need = !conv->tools[i].deferred;
        if (!first_is_system && need) {
            special(&r, RC_SYSTEM_TOKEN);
            effort_header(&r);
            tools_block(&r);
            format_block(&r);
        }
    }
    int user_open = 0, after_tools = 0, has_text = 0;
    const rc_message *last_assistant = NULL;
    for (size_t i = 0; i < conv->n_messages; i++) {
        const rc_message *m = &conv->messages[i];
        int last = i + 1 == conv->n_messages;
        switch (m->role) {
        case RC_SYSTEM:
            if (!v41) break;
            system_message(&r, m, i == 0);
            user_open = after_tools = 0;
            break;
        case RC_USER:
            if (!user_open) {
                special(&r, RC_USER_TOKEN);
                text(&r, m->content, m->content_len);
                user_open = 1;
                has_text = m->content_len != 0;
            } else if (v41 || after_tools) {
                /* V4.1 joins every merged user message; after tool results the
                 * separator is written even for an empty text (which V4 then
                 * does not count as text to separate from) */
                texts(&r, "\n\n");
                text(&r, m->content, m->content_len);
                has_text = v41 || m->content_len != 0;
            } else if (m->content_len) { /* V4 skips empty contents when merging */
                if (has_text) texts(&r, "\n\n");
                text(&r, m->content, m->content_len);
                has_text = 1;
            }
            after_tools = 0;
            break;
        case RC_TOOL:
            if (user_open && v41) {
                texts(&r, "\n\n");
            } else {
                special(&r, RC_USER_TOKEN);
            }
            i = tool_results(&r, i, last_assistant) - 1;
            user_open = after_tools = has_text = 1;
            break;
        case RC_REMINDER:
            if (v41 && i > 0 && conv->messages[i - 1].role == RC_REMINDER) break;
            special(&r, RC_REMINDER_TOKEN);
            text(&r, m->content, m->content_len);
            user_open = after_tools = 0;
            break;
        case RC_ASSISTANT:
            assistant_turn(&r, m, last);
            last_assistant = m;
            user_open = after_tools = 0;
            break;
        }
    }
    const rc_message *tail = conv->n_messages ? &conv->messages[conv->n_messages - 1] : NULL;
    if (!(tail && tail->role == RC_ASSISTANT && tail->prefix)) {
        special(&r, RC_ASSISTANT_TOKEN);
        special(&r, conv->thinking ? RC_THINK : RC_THINK_END);
        if (conv->tool_choice == RC_CHOICE_REQUIRED && conv->n_tools) {
            texts(&r, "\n\n");
            dsml_tag(&r, "<", "{C}>\n");
        }
    }
    if (out->oom || out->text.oom) {
        rc_prompt_free(out);
        return DI_ERR_OUT_OF_MEMORY;
    }
    return DI_OK;
}

void rc_prompt_free(rc_prompt *p)
{
    free(p->text.s);
    free(p->segments);
    memset(p, 0, sizeof *p);
}
