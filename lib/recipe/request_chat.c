/* OpenAI Chat Completions request → conversation, as deepseek-recipe converts it
 * (docs/recipe-spec.md §3, §4, §6). Errors name the field; the wording is ours,
 * the accept/reject decision follows the reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/request_common.h"

/* Join the parts of a content value (string or array of parts) with "\n\n". */
static int chat_content(rc_err *e, rc_conversation *conv, json_t *content, const char *path,
                        int assistant, char **out, size_t *out_len)
{
    rc_buf b = {0};
    if (rc_json_is_text(content)) {
        rc_buf_add(&b, json_string_value(content), json_string_length(content));
    } else if (json_is_array(content)) {
        for (size_t i = 0; i < json_array_size(content); i++) {
            json_t *part = json_array_get(content, i);
            const char *type = NULL;
            char p[96];
            snprintf(p, sizeof p, "%s[%zu].", path, i);
            if (!json_is_object(part)) {
                free(b.s);
                return rc_fail(e, "%s[%zu]: expected a content part object", path, i);
            }
            if (rc_get_string(e, part, "type", p, &type) <= 0) {
                free(b.s);
                return rc_fail(e, "%stype: missing", p);
            }
            if (i) rc_buf_add(&b, "\n\n", 2);
            if (strcmp(type, "text") == 0) {
                const char *text = NULL;
                if (rc_get_string(e, part, "text", p, &text) <= 0) {
                    free(b.s);
                    return rc_fail(e, "%stext: missing", p);
                }
                rc_buf_add(&b, text, json_string_length(json_object_get(part, "text")));
            } else if (strcmp(type, "image_url") == 0 || strcmp(type, "file") == 0) {
                json_t *inner = NULL;
                if (rc_get_object(e, part, type, p, &inner) <= 0) {
                    free(b.s);
                    return rc_fail(e, "%s%s: missing", p, type);
                }
                const char *detail = NULL;
                if (strcmp(type, "image_url") == 0) {
                    char pi[112];
                    snprintf(pi, sizeof pi, "%simage_url.", p);
                    const char *url = NULL;
                    if (rc_get_string(e, inner, "url", pi, &url) <= 0) {
                        free(b.s);
                        return rc_fail(e, "%surl: missing", pi);
                    }
                    if (rc_get_string(e, inner, "detail", pi, &detail) < 0 ||
                        (detail && !rc_streq(detail, "low") && !rc_streq(detail, "high") &&
                         !rc_streq(detail, "original") && !rc_streq(detail, "auto"))) {
                        free(b.s);
                        return rc_fail(e, "%sdetail: expected low, high, original or auto", pi);
                    }
                    if (conv->model == RC_MODEL_V41_FLASH && !assistant &&
                        rc_check_image_url(e, url, pi) < 0) {
                        free(b.s);
                        return -1;
                    }
                }
                if (conv->model == RC_MODEL_V41_FLASH) {
                    if (assistant || strcmp(type, "file") == 0) {
                        free(b.s);
                        return rc_fail(e,
                                       assistant
                                           ? "%s: images in assistant messages are not supported"
                                           : "%s: file parts are not supported by this model",
                                       path);
                    }
                    rc_buf_add(&b, "\xff", 1); /* where the <｜image｜> token goes */
                    const char *url = json_string_value(json_object_get(inner, "url"));
                    if (url && rc_add_image(conv, url) < 0) {
                        free(b.s);
                        return rc_fail(e, "out of memory");
                    }
                } else {
                    rc_buf_adds(&b, "[Unsupported Image]");
                }
            } else {
                free(b.s);
                return rc_fail(e, "%stype: unknown content part type \"%.40s\"", p, type);
            }
        }
    } else {
        return rc_fail(e, "%s: expected a string or an array of content parts", path);
    }
    *out_len = b.len;
    *out = rc_buf_take(&b);
    return *out ? 0 : rc_fail(e, "out of memory");
}

static int parse_tools(rc_err *e, json_t *root, rc_conversation *conv, int *any_strict)
{
    json_t *tools = NULL;
    if (rc_get_array(e, root, "tools", "", &tools) <= 0) return e->status ? -1 : 0;
    conv->tools = calloc(json_array_size(tools) + 1, sizeof *conv->tools);
    if (!conv->tools) return rc_fail(e, "out of memory");
    int strict_seen = 0, loose_seen = 0;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i), *fn = NULL, *params;
        char p[64], pf[80];
        snprintf(p, sizeof p, "tools[%zu].", i);
        snprintf(pf, sizeof pf, "tools[%zu].function.", i);
        const char *type = NULL, *name = NULL, *desc = NULL;
        int strict = 0;
        if (!json_is_object(t)) return rc_fail(e, "tools[%zu]: expected an object", i);
        if (rc_get_string(e, t, "type", p, &type) <= 0) return rc_fail(e, "%stype: missing", p);
        if (strcmp(type, "function") != 0)
            return rc_fail(e, "%stype: unknown tool type \"%.40s\" (only function)", p, type);
        if (rc_get_object(e, t, "function", p, &fn) <= 0)
            return rc_fail(e, "%sfunction: missing", p);
        if (rc_get_string(e, fn, "name", pf, &name) <= 0) return rc_fail(e, "%sname: missing", pf);
        if (rc_get_string(e, fn, "description", pf, &desc) < 0) return -1;
        if (rc_get_bool(e, fn, "strict", pf, &strict) < 0) return -1;
        char np[96];
        snprintf(np, sizeof np, "%sname", pf);
        if (rc_check_tool_name(e, name, np) < 0) return -1;
        for (size_t j = 0; j < conv->n_tools; j++)
            if (conv->tools[j].name && strcmp(conv->tools[j].name, name) == 0)
                return rc_fail(e, "tools: tool names must be unique");
        params = json_object_get(fn, "parameters");
        if (!params || json_is_null(params)) params = NULL;
        if (params && rc_check_parameters(e, params, name) < 0) return -1;
        json_t *shown = NULL;
        if (strict) {
            strict_seen = 1;
            if (!(shown = rc_strict_parameters(e, params, name))) return -1;
        } else {
            loose_seen = 1;
            shown = params ? json_incref(params) : json_object();
        }
        rc_tool *tool = &conv->tools[conv->n_tools++];
        tool->name = rc_strdup(name);
        tool->description = desc ? rc_strdup(desc) : NULL;
        tool->parameters = shown;
        if (!tool->name || (desc && !tool->description) || !tool->parameters)
            return rc_fail(e, "out of memory");
    }
    if (strict_seen && loose_seen)
        return rc_fail(e, "tools: strict and non-strict tools cannot be mixed");
    *any_strict = strict_seen;
    return 0;
}

static int parse_tool_calls(rc_err *e, json_t *calls, rc_message *m, const char *path)
{
    if (json_array_size(calls) == 0) return rc_fail(e, "%stool_calls: empty array", path);
    m->calls = calloc(json_array_size(calls), sizeof *m->calls);
    if (!m->calls) return rc_fail(e, "out of memory");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *c = json_array_get(calls, i), *fn = NULL;
        char p[96], pf[112];
        snprintf(p, sizeof p, "%stool_calls[%zu].", path, i);
        snprintf(pf, sizeof pf, "%sfunction.", p);
        const char *id = NULL, *type = NULL, *name = NULL, *args = NULL;
        if (!json_is_object(c)) return rc_fail(e, "%stool_calls[%zu]: expected an object", path, i);
        if (rc_get_string(e, c, "id", p, &id) <= 0) return rc_fail(e, "%sid: missing", p);
        if (rc_get_string(e, c, "type", p, &type) <= 0) return rc_fail(e, "%stype: missing", p);
        if (strcmp(type, "function") != 0) return rc_fail(e, "%stype: expected \"function\"", p);
        if (rc_get_object(e, c, "function", p, &fn) <= 0)
            return rc_fail(e, "%sfunction: missing", p);
        if (rc_get_string(e, fn, "name", pf, &name) <= 0) return rc_fail(e, "%sname: missing", pf);
        if (rc_get_string(e, fn, "arguments", pf, &args) <= 0)
            return rc_fail(e, "%sarguments: missing (a JSON string)", pf);
        for (size_t j = 0; j < m->n_calls; j++)
            if (m->calls[j].id && strcmp(m->calls[j].id, id) == 0)
                return rc_fail(e, "%sid: duplicate tool_call_id \"%.60s\"", p, id);
        rc_call *call = &m->calls[m->n_calls++];
        call->id = rc_strdup(id);
        call->name = rc_strdup(name);
        call->arguments = rc_strdup(args);
        if (!call->id || !call->name || !call->arguments) return rc_fail(e, "out of memory");
    }
    return 0;
}

static int parse_messages(rc_err *e, json_t *messages, rc_conversation *conv)
{
    static const char *roles[] = {"system", "user", "assistant", "tool", "latest_reminder"};
    static const rc_role role_of[] = {RC_SYSTEM, RC_USER, RC_ASSISTANT, RC_TOOL, RC_REMINDER};
    size_t n = json_array_size(messages);
    if (n == 0) return rc_fail(e, "messages: empty array (at least one message is required)");
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(messages, i);
        char p[48];
        snprintf(p, sizeof p, "messages[%zu].", i);
        const char *role = NULL;
        if (!json_is_object(msg)) return rc_fail(e, "messages[%zu]: expected an object", i);
        if (rc_get_string(e, msg, "role", p, &role) <= 0) return rc_fail(e, "%srole: missing", p);
        size_t r = 0;
        while (r < 5 && strcmp(role, roles[r]) != 0) r++;
        if (r == 5) return rc_fail(e, "%srole: unknown role \"%.40s\"", p, role);
        json_t *content = json_object_get(msg, "content");
        if (json_is_null(content)) content = NULL;
        char path[64];
        snprintf(path, sizeof path, "%scontent", p);
        int prefix = 0;
        if (rc_get_bool(e, msg, "prefix", p, &prefix) < 0) return -1;
        rc_message *m = NULL;
        if (role_of[r] == RC_ASSISTANT) {
            json_t *calls = NULL;
            const char *reasoning = NULL;
            if (rc_get_array(e, msg, "tool_calls", p, &calls) < 0) return -1;
            if (rc_get_string(e, msg, "reasoning_content", p, &reasoning) < 0) return -1;
            if (!content && !calls)
                return rc_fail(e, "%s: an assistant message needs content or tool_calls", p);
            if (!(m = rc_add_message(conv, RC_ASSISTANT))) return rc_fail(e, "out of memory");
            if (content) {
                if (chat_content(e, conv, content, path, 1, &m->content, &m->content_len) < 0)
                    return -1;
            } else if (!(m->content = rc_strdup(""))) {
                return rc_fail(e, "out of memory");
            }
            if (calls && parse_tool_calls(e, calls, m, p) < 0) return -1;
            if (conv->thinking && !(m->reasoning = rc_strdup(reasoning ? reasoning : "")))
                return rc_fail(e, "out of memory");
            m->prefix = prefix;
            if (prefix && i + 1 != n)
                return rc_fail(e, "%sprefix: only the final message may be a prefix", p);
            continue;
        }
        if (!content) return rc_fail(e, "%scontent: missing", p);
        if (role_of[r] == RC_REMINDER && !rc_json_is_text(content))
            return rc_fail(e, "%scontent: expected a string", p);
        char *text = NULL;
        size_t text_len = 0;
        if (chat_content(e, conv, content, path, 0, &text, &text_len) < 0) return -1;
        if (role_of[r] == RC_SYSTEM && text_len == 0) { /* an empty system message is dropped */
            free(text);
            continue;
        }
        if (!(m = rc_add_message(conv, role_of[r]))) {
            free(text);
            return rc_fail(e, "out of memory");
        }
        m->content = text;
        m->content_len = text_len;
        if (role_of[r] == RC_TOOL) {
            const char *id = NULL;
            if (rc_get_string(e, msg, "tool_call_id", p, &id) <= 0)
                return rc_fail(e, "%stool_call_id: missing", p);
            if (!(m->tool_call_id = rc_strdup(id))) return rc_fail(e, "out of memory");
        }
    }
    return 0;
}

/* Every assistant tool call is answered by the tool messages right after it, and
 * every tool message answers a pending call (§6.3). */
static int check_tool_pairing(rc_err *e, const rc_conversation *conv)
{
    for (size_t i = 0; i < conv->n_messages; i++) {
        const rc_message *m = &conv->messages[i];
        if (m->role == RC_TOOL)
            return rc_fail(e, "messages: a tool message must answer a preceding assistant "
                              "message's tool_calls");
        if (m->role != RC_ASSISTANT || m->n_calls == 0) continue;
        size_t j = i + 1, answered = 0;
        unsigned char seen[1024] = {0};
        for (; j < conv->n_messages && conv->messages[j].role == RC_TOOL; j++) {
            size_t k = 0;
            while (k < m->n_calls && strcmp(m->calls[k].id, conv->messages[j].tool_call_id) != 0)
                k++;
            if (k == m->n_calls)
                return rc_fail(e,
                               "messages: tool message answers \"%.60s\", which the assistant "
                               "message did not call",
                               conv->messages[j].tool_call_id);
            if (k < sizeof seen && seen[k])
                return rc_fail(e, "messages: a tool message must answer a preceding assistant "
                                  "message's tool_calls");
            if (k < sizeof seen) seen[k] = 1;
            answered++;
        }
        if (answered < m->n_calls)
            return rc_fail(e, "messages: an assistant message with tool_calls must be followed by "
                              "tool messages answering each tool_call_id");
        i = j - 1;
    }
    return 0;
}

di_status rc_convert_chat(json_t *root, rc_conversation *conv, char *msg, size_t msg_size)
{
    rc_err e = {DI_OK, msg, msg_size};
    msg[0] = 0;
    if (!json_is_object(root)) {
        rc_fail(&e, "request: expected a JSON object");
        return e.status;
    }
    json_t *messages = NULL, *format = NULL, *choice;
    int any_strict = 0;
    if (rc_parse_model(&e, root, conv) < 0) goto done;
    if (rc_get_array(&e, root, "messages", "", &messages) <= 0) {
        rc_fail(&e, "messages: missing");
        goto done;
    }
    if (rc_parse_thinking_and_effort(&e, root, root, "reasoning_effort", "reasoning_effort", 1,
                                     conv) < 0)
        goto done;
    if (rc_check_temperature_top_p(&e, root, conv) < 0) goto done;

    /* the other sampling and length fields: types and ranges (§3.4–3.6) */
    double x = 0;
    unsigned long long u;
    int flag, r;
    static const char *penalties[] = {"frequency_penalty", "presence_penalty"};
    for (int k = 0; k < 2; k++) {
        if ((r = rc_get_number(&e, root, penalties[k], "", &x)) < 0) goto done;
        if (r > 0 && (x < -2 || x > 2)) {
            rc_fail(&e, "%s: must be in [-2, 2]", penalties[k]);
            goto done;
        }
    }
    if ((r = rc_get_uint(&e, root, "n", "", 255, &u)) < 0) goto done;
    if (r > 0 && u != 1 && !conv->allow_n) {
        rc_fail(&e, "n: only n = 1 is supported");
        goto done;
    }
    if (rc_get_uint(&e, root, "seed", "", UINT64_MAX, &u) < 0) goto done;
    int logprobs = 0;
    if (rc_get_bool(&e, root, "logprobs", "", &logprobs) < 0) goto done;
    if ((r = rc_get_uint(&e, root, "top_logprobs", "", 255, &u)) < 0) goto done;
    if (r > 0 && u > 20) {
        rc_fail(&e, "top_logprobs: must be in [0, 20]");
        goto done;
    }
    if (r > 0 && !logprobs) {
        rc_fail(&e, "top_logprobs: requires logprobs: true");
        goto done;
    }
    if ((r = rc_get_uint(&e, root, "max_tokens", "", UINT32_MAX, &u)) < 0) goto done;
    if (r > 0 && (u < 1 || u > 393216)) {
        rc_fail(&e, "max_tokens: must be in [1, 393216]");
        goto done;
    }
    if (r > 0) conv->max_tokens = (int)u;
    if (rc_get_bool(&e, root, "parallel_tool_calls", "", &flag) < 0) goto done;
    if (rc_get_bool(&e, root, "stream", "", &conv->stream) < 0) goto done;
    json_t *stream_options = NULL;
    if (rc_get_object(&e, root, "stream_options", "", &stream_options) < 0) goto done;
    if (stream_options && !conv->stream) {
        rc_fail(&e, "stream_options: requires stream: true");
        goto done;
    }
    json_t *stop = json_object_get(root, "stop");
    if (stop && !json_is_null(stop)) {
        if (rc_json_is_text(stop)) {
            if (json_string_length(stop) && rc_add_stop(conv, json_string_value(stop)) < 0) {
                rc_fail(&e, "out of memory");
                goto done;
            }
            if (json_string_length(stop) == 0) {
                rc_fail(&e, "stop: empty string");
                goto done;
            }
        } else if (json_is_array(stop)) {
            if (json_array_size(stop) > 16) {
                rc_fail(&e, "stop: more than 16 sequences");
                goto done;
            }
            for (size_t i = 0; i < json_array_size(stop); i++) {
                json_t *s = json_array_get(stop, i);
                if (!rc_json_is_text(s)) {
                    rc_fail(&e, "stop[%zu]: expected a string", i);
                    goto done;
                }
                if (json_string_length(s) == 0) {
                    rc_fail(&e, "stop[%zu]: empty string", i);
                    goto done;
                }
                if (rc_add_stop(conv, json_string_value(s)) < 0) {
                    rc_fail(&e, "out of memory");
                    goto done;
                }
            }
        } else {
            rc_fail(&e, "stop: expected a string or an array of strings");
            goto done;
        }
    }

    if (parse_tools(&e, root, conv, &any_strict) < 0) goto done;
    if (rc_get_object(&e, root, "response_format", "", &format) < 0) goto done;
    if (format) {
        const char *type = NULL;
        if (rc_get_string(&e, format, "type", "response_format.", &type) <= 0) {
            rc_fail(&e, "response_format.type: missing");
            goto done;
        }
        if (strcmp(type, "text") == 0)
            conv->format = RC_FORMAT_TEXT;
        else if (strcmp(type, "json_object") == 0)
            conv->format = RC_FORMAT_JSON_OBJECT;
        else if (strcmp(type, "regex") == 0) {
            const char *re = NULL;
            if (rc_get_string(&e, format, "regex", "response_format.", &re) <= 0) {
                rc_fail(&e, "response_format.regex: missing");
                goto done;
            }
            conv->format = RC_FORMAT_REGEX;
        } else if (strcmp(type, "json_schema") == 0) {
            json_t *js = NULL, *schema;
            if (rc_get_object(&e, format, "json_schema", "response_format.", &js) <= 0) {
                rc_fail(&e, "response_format.json_schema: missing");
                goto done;
            }
            schema = json_object_get(js, "schema");
            if (!schema) {
                rc_fail(&e, "response_format.json_schema.schema: missing");
                goto done;
            }
            int strict = 0;
            if (rc_get_bool(&e, js, "strict", "response_format.json_schema.", &strict) < 0)
                goto done;
            if (strict) { /* validated like a strict tool; the prompt shows it as given */
                json_t *checked = rc_strict_parameters(&e, schema, "response_format");
                if (!checked) goto done;
                json_decref(checked);
            }
            conv->format = RC_FORMAT_JSON_SCHEMA;
            conv->schema = json_incref(schema);
        } else {
            rc_fail(&e, "response_format.type: unknown value \"%.40s\"", type);
            goto done;
        }
    }
    choice = json_object_get(root, "tool_choice");
    const char *choice_kind = "auto", *choice_name = NULL;
    if (choice && !json_is_null(choice)) {
        if (rc_json_is_text(choice)) {
            choice_kind = json_string_value(choice);
            if (!rc_streq(choice_kind, "auto") && !rc_streq(choice_kind, "none") &&
                !rc_streq(choice_kind, "required")) {
                rc_fail(&e, "tool_choice: unknown value \"%.40s\"", choice_kind);
                goto done;
            }
        } else if (json_is_object(choice)) {
            const char *type = NULL;
            json_t *fn = NULL;
            if (rc_get_string(&e, choice, "type", "tool_choice.", &type) <= 0 ||
                !rc_streq(type, "function")) {
                rc_fail(&e, "tool_choice.type: expected \"function\"");
                goto done;
            }
            if (rc_get_object(&e, choice, "function", "tool_choice.", &fn) <= 0 ||
                rc_get_string(&e, fn, "name", "tool_choice.function.", &choice_name) <= 0) {
                rc_fail(&e, "tool_choice.function.name: missing");
                goto done;
            }
            choice_kind = "function";
        } else {
            rc_fail(&e, "tool_choice: expected a string or an object");
            goto done;
        }
    }
    int declared_tools = conv->n_tools > 0;
    if (rc_apply_tool_choice(&e, conv, choice_kind, choice_name) < 0) goto done;

    if (parse_messages(&e, messages, conv) < 0) goto done;
    if (check_tool_pairing(&e, conv) < 0) goto done;
    int prefix = conv->n_messages && conv->messages[conv->n_messages - 1].prefix;
    if (prefix) {
        int calls = 0;
        for (size_t i = 0; i < conv->n_messages; i++) calls |= conv->messages[i].n_calls > 0;
        if (declared_tools || calls) {
            rc_fail(&e, "messages: a prefix message cannot be used with tools");
            goto done;
        }
        if (conv->format == RC_FORMAT_JSON_OBJECT) {
            rc_fail(&e, "response_format: json_object cannot be used with a prefix message");
            goto done;
        }
    }
    if (any_strict && format && conv->tool_choice != RC_CHOICE_NONE) {
        rc_fail(&e, "response_format: cannot be used with strict tools");
        goto done;
    }
    if (conv->format == RC_FORMAT_JSON_OBJECT && !rc_any_content_mentions_json(conv))
        rc_fail(&e, "response_format: json_object needs the word 'json' in some message");
done:
    return e.status;
}
