/* ChatML, the turn format of SmolLM2 and the Qwen2 chat models:
 *
 *     <|im_start|>ROLE\nCONTENT<|im_end|>\n   … per message, then
 *     <|im_start|>assistant\n                 (the generation prompt)
 *
 * Without tools this is what SmolLM2's own chat template (its GGUF's
 * tokenizer.chat_template) renders, default system turn included; the tests
 * compare with jinja2's rendering of that template (tests/fixtures/codec/
 * chatml.json). Tools follow the Hermes convention that Qwen2's templates also
 * use: their schemas inside <tools></tools> in the system turn, each call a
 * <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call> block in the
 * assistant turn, tool results inside <tool_response></tool_response> in a user
 * turn (consecutive results share one turn). The instruction text around the
 * tool schemas is deepinfer's own (docs/codec.md, "ChatML"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/encoding.h"

typedef struct cstate {
    rc_prompt *out;
    char *msg;
    size_t msg_size;
} cstate;

/* "messages[INDEX].FIELD: WHAT" as the error message. */
static di_status fail(cstate *c, size_t i, const char *field, const char *what)
{
    snprintf(c->msg, c->msg_size, "messages[%zu].%s: %s", i, field, what);
    return DI_ERR_INVALID_REQUEST;
}

static void texts(cstate *c, const char *s)
{
    rc_prompt_text(c->out, s, strlen(s));
}

static void special(cstate *c, rc_special s)
{
    rc_prompt_special(c->out, s);
}

/* v is the JSON string `lit`, all of it (a U+0000 inside does not end it). */
static int str_is(const json_t *v, const char *lit)
{
    return rc_json_is_text(v) && json_string_length(v) == strlen(lit) &&
           memcmp(json_string_value(v), lit, json_string_length(v)) == 0;
}

/* A tool name: a non-empty string without U+0000. */
static int is_name(const json_t *v)
{
    return rc_json_is_text(v) && json_string_length(v) > 0 &&
           strlen(json_string_value(v)) == json_string_length(v);
}

/* Append b's text (a buffer built for the prompt) and free it. */
static void take_buf(cstate *c, rc_buf *b)
{
    if (b->oom) c->out->oom = 1;
    if (b->s) rc_prompt_text(c->out, b->s, b->len);
    free(b->s);
    *b = (rc_buf){0};
}

/* <tool_call>BODY</tool_call>, the body taken from b. */
static void call_tags(cstate *c, rc_buf *b)
{
    special(c, RC_HERMES_CALL);
    take_buf(c, b);
    special(c, RC_HERMES_CALL_END);
}

/* The text of a message's content: a string, null (nothing), or an array of
 * {"type": "text", "text": …} parts, joined. */
static di_status content_text(cstate *c, json_t *content, size_t i, rc_buf *b)
{
    if (!content || json_is_null(content)) return DI_OK;
    if (rc_json_is_text(content)) {
        rc_buf_add(b, json_string_value(content), json_string_length(content));
        return DI_OK;
    }
    if (!json_is_array(content))
        return fail(c, i, "content", "expected a string or an array of parts");
    for (size_t k = 0; k < json_array_size(content); k++) {
        json_t *part = json_array_get(content, k);
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!str_is(type, "text") || !rc_json_is_text(text)) {
            snprintf(c->msg, c->msg_size,
                     "messages[%zu].content[%zu]: the chatml encoding takes text parts only "
                     "({\"type\": \"text\", \"text\": …})",
                     i, k);
            return DI_ERR_INVALID_REQUEST;
        }
        rc_buf_add(b, json_string_value(text), json_string_length(text));
    }
    return DI_OK;
}

/* The tools section appended to the system turn. */
static void tools_section(cstate *c, json_t *tools, int has_system_text)
{
    if (has_system_text) texts(c, "\n\n");
    texts(c, "You can call the tools whose JSON schemas are listed inside <tools></tools>:\n"
             "<tools>\n");
    rc_buf b = {0};
    for (size_t k = 0; k < json_array_size(tools); k++) {
        rc_pyjson(&b, json_array_get(tools, k), RC_FLOAT_V4);
        rc_buf_adds(&b, "\n");
        take_buf(c, &b);
    }
    texts(c, "</tools>\nTo call a tool, write one block per call, each on its own, like this:\n");
    /* the example names the first tool and its parameters */
    json_t *fn = json_object_get(json_array_get(tools, 0), "function");
    json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
    json_t *name = json_object_get(fn, "name");
    rc_buf_adds(&b, "\n{\"name\": ");
    rc_json_string(&b, json_string_value(name), json_string_length(name));
    rc_buf_adds(&b, ", \"arguments\": {");
    const char *key;
    json_t *v;
    int k = 0;
    json_object_foreach(props, key, v)
    {
        if (k++) rc_buf_adds(&b, ", ");
        rc_json_string(&b, key, strlen(key));
        rc_buf_adds(&b, ": ...");
    }
    rc_buf_adds(&b, "}}\n");
    call_tags(c, &b);
    texts(c, "\nThe results come back inside ");
    special(c, RC_HERMES_RESPONSE);
    special(c, RC_HERMES_RESPONSE_END);
    texts(c, ".");
}

/* Check the tools array: each {"type": "function", "function": {"name": …}}. */
static di_status check_tools(cstate *c, json_t *tools)
{
    if (!json_is_array(tools)) {
        snprintf(c->msg, c->msg_size, "tools: expected an array of tools");
        return DI_ERR_INVALID_REQUEST;
    }
    for (size_t k = 0; k < json_array_size(tools); k++) {
        json_t *t = json_array_get(tools, k);
        json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        if (!str_is(type, "function") || !json_is_object(fn) ||
            !is_name(json_object_get(fn, "name"))) {
            snprintf(c->msg, c->msg_size,
                     "tools[%zu]: expected {\"type\": \"function\", \"function\": {\"name\": …}} "
                     "with a non-empty name",
                     k);
            return DI_ERR_INVALID_REQUEST;
        }
    }
    return DI_OK;
}

/* tool_choice: "none", "auto" (default), "required", or a named function
 * ({"type": "function", "function": {"name": …}}, one of the tools: the prompt
 * opens that call). */
static di_status tool_choice(cstate *c, json_t *root, json_t *tools, int *none, int *required,
                             const char **named)
{
    json_t *tc = json_object_get(root, "tool_choice");
    *none = *required = 0;
    *named = NULL;
    if (!tc || json_is_null(tc)) return DI_OK;
    if (rc_json_is_text(tc)) {
        const char *s = json_string_value(tc);
        if (str_is(tc, "none")) {
            *none = 1;
        } else if (str_is(tc, "required")) {
            *required = 1;
        } else if (!str_is(tc, "auto")) {
            snprintf(c->msg, c->msg_size,
                     "tool_choice: \"%.60s\" is not one of \"none\", \"auto\", \"required\"", s);
            return DI_ERR_INVALID_REQUEST;
        }
        return DI_OK;
    }
    json_t *name = json_object_get(json_object_get(tc, "function"), "name");
    if (!json_is_object(tc) || !str_is(json_object_get(tc, "type"), "function") || !is_name(name)) {
        snprintf(c->msg, c->msg_size,
                 "tool_choice: expected \"none\", \"auto\", \"required\" or {\"type\": "
                 "\"function\", \"function\": {\"name\": …}}");
        return DI_ERR_INVALID_REQUEST;
    }
    int declared = 0;
    for (size_t k = 0; k < json_array_size(tools) && !declared; k++)
        declared = json_equal(
            json_object_get(json_object_get(json_array_get(tools, k), "function"), "name"), name);
    if (!declared) {
        snprintf(c->msg, c->msg_size,
                 "tool_choice.function.name: \"%.60s\" is not one of the declared tools",
                 json_string_value(name));
        return DI_ERR_INVALID_REQUEST;
    }
    *required = 1;
    *named = json_string_value(name);
    return DI_OK;
}

/* One assistant call: <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>.
 * ARGS is the call's arguments string as it is when it holds JSON, else that
 * string as a JSON string. */
static di_status call_block(cstate *c, json_t *call, size_t i)
{
    json_t *fn = json_object_get(call, "function");
    json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    if (!rc_json_is_text(name) || !rc_json_is_text(args))
        return fail(c, i, "tool_calls",
                    "each call needs string function.name and function.arguments");
    rc_buf b = {0};
    rc_buf_adds(&b, "\n{\"name\": ");
    rc_json_string(&b, json_string_value(name), json_string_length(name));
    rc_buf_adds(&b, ", \"arguments\": ");
    char ignored[8];
    json_t *parsed = rc_json_parse(json_string_value(args), json_string_length(args), 64, ignored,
                                   sizeof ignored);
    if (parsed)
        rc_buf_add(&b, json_string_value(args), json_string_length(args));
    else
        rc_json_string(&b, json_string_value(args), json_string_length(args));
    json_decref(parsed);
    rc_buf_adds(&b, "}\n");
    call_tags(c, &b);
    return DI_OK;
}

static const char *role_name(json_t *m)
{
    return json_string_value(json_object_get(m, "role"));
}

di_status rc_render_chatml(json_t *root, const char *default_system, rc_prompt *out,
                           int *parse_tools, int *required, rc_buf *call_prefix, char *msg,
                           size_t msg_size)
{
    memset(out, 0, sizeof *out);
    *parse_tools = *required = 0;
    cstate c = {out, msg, msg_size};
    json_t *messages = json_object_get(root, "messages");
    if (!json_is_object(root) || !json_is_array(messages) || json_array_size(messages) == 0) {
        snprintf(msg, msg_size, "messages: expected a non-empty array of messages");
        return DI_ERR_INVALID_REQUEST;
    }
    json_t *tools = json_object_get(root, "tools");
    int none = 0;
    const char *named = NULL;
    di_status st;
    if (tools && !json_is_null(tools) && (st = check_tools(&c, tools)) != DI_OK) return st;
    if ((st = tool_choice(&c, root, tools, &none, required, &named)) != DI_OK) return st;
    int with_tools = tools && json_array_size(tools) > 0 && !none;
    if (*required && !with_tools) {
        snprintf(msg, msg_size, "tool_choice: a call is required but no tools are declared");
        return DI_ERR_INVALID_REQUEST;
    }
    *parse_tools = with_tools;

    size_t n = json_array_size(messages);
    rc_buf text = {0};
    int in_tool_turn = 0; /* consecutive tool results share one user turn */
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(messages, i);
        const char *role = role_name(m);
        if (!role) {
            free(text.s);
            return fail(&c, i, "role", "missing (expected a string)");
        }
        if (strlen(role) != json_string_length(json_object_get(m, "role"))) {
            free(text.s);
            return fail(&c, i, "role", "must not contain U+0000");
        }
        int is_system = strcmp(role, "system") == 0 || strcmp(role, "developer") == 0;
        int is_tool = strcmp(role, "tool") == 0;
        if (!is_system && !is_tool && strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0) {
            snprintf(msg, msg_size, "messages[%zu].role: unknown role \"%.40s\"", i, role);
            free(text.s);
            return DI_ERR_INVALID_REQUEST;
        }
        if (i == 0 && !is_system && (default_system || with_tools)) {
            /* the template's default system turn, carrying the tools */
            special(&c, RC_IM_START);
            texts(&c, "system\n");
            if (default_system) texts(&c, default_system);
            if (with_tools) tools_section(&c, tools, default_system && default_system[0]);
            special(&c, RC_IM_END);
            texts(&c, "\n");
        }
        if (in_tool_turn && !is_tool) {
            special(&c, RC_IM_END);
            texts(&c, "\n");
            in_tool_turn = 0;
        }
        text.len = 0;
        json_t *content = json_object_get(m, "content");
        if ((!content || json_is_null(content)) && strcmp(role, "assistant") != 0) {
            free(text.s);
            return fail(&c, i, "content", "missing (only an assistant message may omit it)");
        }
        if ((st = content_text(&c, content, i, &text)) != DI_OK) {
            free(text.s);
            return st;
        }
        if (text.oom) out->oom = 1;
        const char *body = text.s ? text.s : "";
        if (is_tool) {
            if (!in_tool_turn) {
                special(&c, RC_IM_START);
                texts(&c, "user\n");
            } else {
                texts(&c, "\n");
            }
            special(&c, RC_HERMES_RESPONSE);
            texts(&c, "\n");
            rc_prompt_text(out, body, text.len);
            texts(&c, "\n");
            special(&c, RC_HERMES_RESPONSE_END);
            in_tool_turn = 1;
            continue;
        }
        special(&c, RC_IM_START);
        texts(&c, is_system ? "system" : role);
        texts(&c, "\n");
        rc_prompt_text(out, body, text.len);
        if (is_system && i == 0 && with_tools) tools_section(&c, tools, text.len > 0);
        json_t *calls = json_object_get(m, "tool_calls");
        if (strcmp(role, "assistant") == 0 && calls && !json_is_null(calls)) {
            if (!json_is_array(calls)) {
                free(text.s);
                return fail(&c, i, "tool_calls", "expected an array of calls");
            }
            for (size_t k = 0; k < json_array_size(calls); k++) {
                if (text.len > 0 || k > 0) texts(&c, "\n");
                if ((st = call_block(&c, json_array_get(calls, k), i)) != DI_OK) {
                    free(text.s);
                    return st;
                }
            }
        }
        special(&c, RC_IM_END);
        texts(&c, "\n");
    }
    free(text.s);
    if (in_tool_turn) {
        special(&c, RC_IM_END);
        texts(&c, "\n");
    }
    special(&c, RC_IM_START);
    texts(&c, "assistant\n");
    if (*required) {
        /* the output starts inside the call block; a named function is written */
        special(&c, RC_HERMES_CALL);
        if (named) {
            rc_buf_adds(call_prefix, "\n{\"name\": ");
            rc_json_string(call_prefix, named, strlen(named));
            rc_buf_adds(call_prefix, ", \"arguments\": ");
            if (call_prefix->oom) out->oom = 1;
            if (call_prefix->s) rc_prompt_text(out, call_prefix->s, call_prefix->len);
        } else {
            texts(&c, "\n");
        }
    }
    if (out->oom || out->text.oom) {
        rc_prompt_free(out);
        snprintf(msg, msg_size, "out of memory rendering the prompt");
        return DI_ERR_OUT_OF_MEMORY;
    }
    return DI_OK;
}

char *rc_chatml_default_system(const char *tpl, size_t n)
{
    static const char *const openers[] = {"<|im_start|>system\n", "<|im_start|>system\\n"};
    for (int k = 0; k < 2; k++) {
        size_t m = strlen(openers[k]);
        for (size_t i = 0; i + m <= n; i++) {
            if (memcmp(tpl + i, openers[k], m) != 0) continue;
            const char *s = tpl + i + m;
            size_t len = 0;
            while (s + len < tpl + n && (size_t)(tpl + n - (s + len)) >= 10 &&
                   memcmp(s + len, "<|im_end|>", 10) != 0)
                len++;
            if ((size_t)(tpl + n - (s + len)) < 10 || len == 0) continue;
            /* literal text only: no template syntax, quotes or escapes inside */
            int literal = 1;
            for (size_t j = 0; j < len && literal; j++) literal = !strchr("{}'\"+\\", s[j]);
            if (!literal) continue;
            char *out = malloc(len + 1);
            if (!out) return NULL;
            memcpy(out, s, len);
            out[len] = 0;
            return out;
        }
    }
    return NULL;
}

json_t *rc_chatml_chat_body(const rc_conversation *conv, char *msg, size_t msg_size)
{
    static const char *const roles[] = {[RC_SYSTEM] = "system",
                                        [RC_USER] = "user",
                                        [RC_ASSISTANT] = "assistant",
                                        [RC_TOOL] = "tool",
                                        [RC_REMINDER] = "system"};
    json_t *body = json_object(), *messages = json_array(), *tools = json_array();
    int oom = !body || !messages || !tools;
    for (size_t i = 0; i < conv->n_messages && !oom; i++) {
        const rc_message *m = &conv->messages[i];
        /* consecutive user messages (the content blocks of one turn) are one
         * turn, joined by a blank line as the V4 encodings join them */
        json_t *last = json_array_get(messages, json_array_size(messages) - 1);
        if (m->role == RC_USER && last && i > 0 && conv->messages[i - 1].role == RC_USER) {
            json_t *prev = json_object_get(last, "content");
            rc_buf b = {0};
            rc_buf_add(&b, json_string_value(prev), json_string_length(prev));
            rc_buf_adds(&b, "\n\n");
            rc_buf_add(&b, m->content ? m->content : "", m->content ? m->content_len : 0);
            oom |= b.oom || json_object_set_new(last, "content", json_stringn(b.s, b.len)) != 0;
            free(b.s);
            continue;
        }
        json_t *o = json_object(), *calls = m->n_calls ? json_array() : NULL;
        oom |= !o || (m->n_calls && !calls);
        oom |= json_object_set_new(o, "role", json_string(roles[m->role])) != 0;
        oom |= json_object_set_new(o, "content",
                                   m->content ? json_stringn(m->content, m->content_len)
                                              : json_null()) != 0;
        for (size_t k = 0; k < m->n_calls && calls; k++)
            oom |= json_array_append_new(
                       calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id",
                                        m->calls[k].id ? m->calls[k].id : "", "type", "function",
                                        "function", "name", m->calls[k].name, "arguments",
                                        m->calls[k].arguments ? m->calls[k].arguments : "{}")) != 0;
        if (calls) oom |= json_object_set_new(o, "tool_calls", calls) != 0;
        oom |= json_array_append_new(messages, o) != 0;
    }
    for (size_t k = 0; k < conv->n_tools && !oom; k++) {
        const rc_tool *t = &conv->tools[k];
        json_t *fn = json_pack("{s:s}", "name", t->name);
        oom |= !fn;
        if (fn && t->description)
            oom |= json_object_set_new(fn, "description", json_string(t->description)) != 0;
        if (fn && t->parameters) oom |= json_object_set(fn, "parameters", t->parameters) != 0;
        oom |= json_array_append_new(
                   tools, json_pack("{s:s, s:o}", "type", "function", "function", fn)) != 0;
    }
    if (!oom) {
        oom |= json_object_set_new(body, "messages", messages) != 0;
        messages = NULL;
        if (conv->n_tools)
            oom |= json_object_set_new(body, "tools", tools) != 0;
        else
            json_decref(tools);
        tools = NULL;
        const char *choice = conv->tool_choice == RC_CHOICE_NONE       ? "none"
                             : conv->tool_choice == RC_CHOICE_REQUIRED ? "required"
                                                                       : NULL;
        /* a call required of the only tool (Messages' {"type": "tool", "name": N}
         * leaves just N) names it, so the prompt writes the name */
        if (conv->tool_choice == RC_CHOICE_REQUIRED && conv->n_tools == 1)
            oom |= json_object_set_new(body, "tool_choice",
                                       json_pack("{s:s, s:{s:s}}", "type", "function", "function",
                                                 "name", conv->tools[0].name)) != 0;
        else if (choice && conv->n_tools)
            oom |= json_object_set_new(body, "tool_choice", json_string(choice)) != 0;
    }
    if (oom) {
        snprintf(msg, msg_size, "out of memory rendering the prompt");
        json_decref(body);
        json_decref(messages);
        json_decref(tools);
        return NULL;
    }
    return body;
}
