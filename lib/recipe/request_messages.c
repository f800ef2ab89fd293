/* Anthropic Messages request → conversation, as deepseek-recipe converts it
 * (docs/recipe-spec.md §3, §4, §7). Errors name the field; the accept/reject
 * decision follows the reference, the wording is ours. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "recipe/request_common.h"

static const char *const image_media_types[] = {"image/jpeg", "image/jpg", "image/png", "image/gif",
                                                "image/webp"};

/* One image block → "[Unsupported Image]" (V4-Pro) or the <｜image｜> token (V4.1). */
static int image_block(rc_err *e, rc_conversation *conv, json_t *block, const char *p,
                       int assistant, rc_buf *b)
{
    json_t *src = NULL;
    const char *type = NULL;
    if (rc_get_object(e, block, "source", p, &src) <= 0) return rc_fail(e, "%ssource: missing", p);
    if (rc_get_string(e, src, "type", p, &type) <= 0)
        return rc_fail(e, "%ssource.type: missing", p);
    char url[256];
    if (strcmp(type, "base64") == 0) {
        const char *mt = NULL, *data = NULL;
        if (rc_get_string(e, src, "media_type", p, &mt) <= 0)
            return rc_fail(e, "%ssource.media_type: missing", p);
        if (rc_get_string(e, src, "data", p, &data) <= 0)
            return rc_fail(e, "%ssource.data: missing", p);
        size_t k = 0;
        while (k < 5 && strcmp(mt, image_media_types[k]) != 0) k++;
        if (k == 5) return rc_fail(e, "%ssource.media_type: unsupported \"%.40s\"", p, mt);
        if (conv->model == RC_MODEL_V41_FLASH && !assistant) {
            size_t n = strlen(mt) + strlen(data) + 16;
            char *dataurl = malloc(n);
            if (!dataurl) return rc_fail(e, "out of memory");
            snprintf(dataurl, n, "data:%s;base64,%s", mt, data);
            int r = rc_check_image_url(e, dataurl, p);
            free(dataurl);
            if (r < 0) return -1;
        }
    } else if (strcmp(type, "url") == 0) {
        const char *u = NULL;
        if (rc_get_string(e, src, "url", p, &u) <= 0) return rc_fail(e, "%ssource.url: missing", p);
        snprintf(url, sizeof url, "%ssource.", p);
        if (conv->model == RC_MODEL_V41_FLASH && !assistant && rc_check_image_url(e, u, url) < 0)
            return -1;
    } else if (strcmp(type, "file") == 0) {
        const char *id = NULL;
        if (rc_get_string(e, src, "file_id", p, &id) <= 0)
            return rc_fail(e, "%ssource.file_id: missing", p);
        if (conv->model == RC_MODEL_V41_FLASH)
            return rc_fail(e, "%s: file_id images are not supported; pass a base64 data URL", p);
    } else {
        return rc_fail(e, "%ssource.type: unknown value \"%.40s\"", p, type);
    }
    if (conv->model == RC_MODEL_V41_FLASH) {
        if (assistant) return rc_fail(e, "%s: images in assistant messages are not supported", p);
        rc_buf_add(b, "\xff", 1);
        int added;
        if (strcmp(type, "base64") == 0) {
            const char *mt = json_string_value(json_object_get(src, "media_type"));
            const char *data = json_string_value(json_object_get(src, "data"));
            rc_buf u = {0};
            rc_buf_adds(&u, "data:");
            rc_buf_adds(&u, mt ? mt : "");
            rc_buf_adds(&u, ";base64,");
            rc_buf_adds(&u, data ? data : "");
            char *data_url = rc_buf_take(&u);
            added = data_url ? rc_add_image(conv, data_url) : -1;
            free(data_url);
        } else {
            added = rc_add_image(conv, json_string_value(json_object_get(src, "url")));
        }
        if (added < 0) return rc_fail(e, "out of memory");
    } else {
        rc_buf_adds(b, "[Unsupported Image]");
    }
    return 0;
}

/* Text of a list of blocks where only text (and, in tool results, images and tool
 * references) may appear, joined with "\n\n". */
static int text_blocks(rc_err *e, rc_conversation *conv, json_t *blocks, const char *path,
                       int in_tool_result, rc_buf *b, json_t *refs)
{
    if (rc_json_is_text(blocks)) {
        rc_buf_add(b, json_string_value(blocks), json_string_length(blocks));
        return 0;
    }
    if (!json_is_array(blocks))
        return rc_fail(e, "%s: expected a string or an array of blocks", path);
    for (size_t i = 0; i < json_array_size(blocks); i++) {
        json_t *blk = json_array_get(blocks, i);
        char p[256];
        snprintf(p, sizeof p, "%s[%zu].", path, i);
        const char *type = NULL;
        if (!json_is_object(blk) || rc_get_string(e, blk, "type", p, &type) <= 0)
            return rc_fail(e, "%stype: missing", p);
        if (i) rc_buf_add(b, "\n\n", 2);
        if (strcmp(type, "text") == 0) {
            const char *t = NULL;
            if (rc_get_string(e, blk, "text", p, &t) <= 0) return rc_fail(e, "%stext: missing", p);
            rc_buf_add(b, t, json_string_length(json_object_get(blk, "text")));
        } else if (in_tool_result && strcmp(type, "image") == 0) {
            if (image_block(e, conv, blk, p, 0, b) < 0) return -1;
        } else if (in_tool_result && strcmp(type, "tool_reference") == 0) {
            const char *name = NULL;
            if (rc_get_string(e, blk, "tool_name", p, &name) <= 0)
                return rc_fail(e, "%stool_name: missing", p);
            int known = 0;
            for (size_t k = 0; k < conv->n_tools; k++) known |= rc_streq(conv->tools[k].name, name);
            if (!known)
                return rc_fail(e, "%stool_name: tool reference '%.60s' not found in tools", p,
                               name);
            rc_buf_adds(b, name);
            if (refs) json_array_append_new(refs, json_string(name));
        } else if (in_tool_result && strcmp(type, "document") == 0) {
            rc_buf_adds(b, "[Unsupported document type: ");
            const char *mt =
                json_string_value(json_object_get(json_object_get(blk, "source"), "media_type"));
            rc_buf_adds(b, mt ? mt : "unknown");
            rc_buf_adds(b, "]");
        } else {
            return rc_fail(e, "%stype: \"%.40s\" is not allowed here", p, type);
        }
    }
    return 0;
}

static int parse_tools(rc_err *e, json_t *root, rc_conversation *conv)
{
    json_t *tools = NULL;
    if (rc_get_array(e, root, "tools", "", &tools) <= 0) return e->status ? -1 : 0;
    conv->tools = calloc(json_array_size(tools) + 1, sizeof *conv->tools);
    if (!conv->tools) return rc_fail(e, "out of memory");
    size_t deferred = 0;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i), *schema;
        char p[48];
        snprintf(p, sizeof p, "tools[%zu].", i);
        const char *name = NULL, *desc = NULL;
        int strict = 0, defer = 0;
        if (!json_is_object(t)) return rc_fail(e, "tools[%zu]: expected an object", i);
        if (json_object_get(t, "type")) {
            /* the reference's message; a Chat Completions tool sent as a
             * Messages one gets told what it is */
            int chat_shape = json_is_object(json_object_get(t, "function")) &&
                             !json_object_get(t, "input_schema");
            return rc_fail(e, "tools[%zu]: server tools are not supported%s", i,
                           chat_shape ? " (this is a Chat Completions tool, {\"type\": "
                                        "\"function\", \"function\": {...}}: a Messages tool "
                                        "is {\"name\", \"description\", \"input_schema\"})"
                                      : "");
        }
        if (rc_get_string(e, t, "name", p, &name) <= 0) return rc_fail(e, "%sname: missing", p);
        if (rc_get_string(e, t, "description", p, &desc) < 0) return -1;
        if (rc_get_bool(e, t, "strict", p, &strict) < 0) return -1;
        if (rc_get_bool(e, t, "defer_loading", p, &defer) < 0) return -1;
        schema = json_object_get(t, "input_schema");
        if (!schema) return rc_fail(e, "%sinput_schema: missing", p);
        char np[64];
        snprintf(np, sizeof np, "%sname", p);
        if (rc_check_tool_name(e, name, np) < 0) return -1;
        for (size_t j = 0; j < conv->n_tools; j++)
            if (conv->tools[j].name && strcmp(conv->tools[j].name, name) == 0)
                return rc_fail(e, "tools: tool names must be unique");
        if (rc_check_parameters(e, schema, name) < 0) return -1;
        rc_tool *tool = &conv->tools[conv->n_tools++];
        tool->name = rc_strdup(name);
        tool->description = desc ? rc_strdup(desc) : NULL;
        tool->parameters = json_incref(schema);
        tool->deferred = defer && conv->model == RC_MODEL_V41_FLASH;
        deferred += (size_t)tool->deferred;
        if (!tool->name || (desc && !tool->description)) return rc_fail(e, "out of memory");
    }
    if (conv->n_tools && deferred == conv->n_tools)
        return rc_fail(e, "tools: at least one tool must have defer_loading=false");
    return 0;
}

static int find_tool(const rc_conversation *conv, const char *name)
{
    for (size_t i = 0; i < conv->n_tools; i++)
        if (strcmp(conv->tools[i].name, name) == 0) return (int)i;
    return -1;
}

/* A system message (empty content) announcing the tools named by tool_reference
 * blocks, in order (V4.1 models only; docs/recipe-spec.md §7.6). */
static int add_updated_tools(rc_err *e, rc_conversation *conv, json_t *refs)
{
    size_t n = json_array_size(refs);
    if (n == 0 || conv->model != RC_MODEL_V41_FLASH) return 0;
    rc_message *m = rc_add_message(conv, RC_SYSTEM);
    if (!m || !(m->content = rc_strdup("")) ||
        !(m->updated_tools = calloc(n, sizeof *m->updated_tools)))
        return rc_fail(e, "out of memory");
    for (size_t i = 0; i < n; i++) {
        int k = find_tool(conv, json_string_value(json_array_get(refs, i)));
        if (k < 0) continue;
        rc_tool *t = &m->updated_tools[m->n_updated++];
        t->name = rc_strdup(conv->tools[k].name);
        t->description = conv->tools[k].description ? rc_strdup(conv->tools[k].description) : NULL;
        t->parameters = json_incref(conv->tools[k].parameters);
        if (!t->name) return rc_fail(e, "out of memory");
    }
    return 0;
}

static int user_message(rc_err *e, rc_conversation *conv, json_t *content, const char *p,
                        size_t idx)
{
    rc_buf b = {0};
    json_t *refs = json_array();
    int rc = -1, seen_other = 0, any_other = 0;
    (void)any_other;
    if (rc_json_is_text(content)) {
        rc_message *m = rc_add_message(conv, RC_USER);
        if (!m) goto oom;
        rc_buf_add(&b, json_string_value(content), json_string_length(content));
        m->content_len = b.len;
        m->content = rc_buf_take(&b);
        json_decref(refs);
        return m->content ? 0 : rc_fail(e, "out of memory");
    }
    for (size_t i = 0; i < json_array_size(content); i++) {
        json_t *blk = json_array_get(content, i);
        char bp[160];
        snprintf(bp, sizeof bp, "%scontent[%zu].", p, i);
        const char *type = NULL;
        if (!json_is_object(blk) || rc_get_string(e, blk, "type", bp, &type) <= 0) {
            rc_fail(e, "%stype: missing", bp);
            goto done;
        }
        if (strcmp(type, "tool_result") == 0) {
            const char *id = NULL;
            if (seen_other) {
                rc_fail(e, "messages[%zu]: tool_result blocks must come first in a user message",
                        idx);
                goto done;
            }
            if (rc_get_string(e, blk, "tool_use_id", bp, &id) <= 0) {
                rc_fail(e, "%stool_use_id: missing", bp);
                goto done;
            }
            int is_error;
            if (rc_get_bool(e, blk, "is_error", bp, &is_error) < 0) goto done;
            rc_buf tb = {0};
            json_t *c = json_object_get(blk, "content");
            char cp[200];
            snprintf(cp, sizeof cp, "%scontent", bp);
            if (c && !json_is_null(c) && text_blocks(e, conv, c, cp, 1, &tb, refs) < 0) {
                free(tb.s);
                goto done;
            }
            rc_message *m = rc_add_message(conv, RC_TOOL);
            if (!m) goto oom;
            m->content_len = tb.len;
            m->content = rc_buf_take(&tb);
            m->tool_call_id = rc_strdup(id);
            if (!m->content || !m->tool_call_id) goto oom;
            continue;
        }
        seen_other = 1;
        if (strcmp(type, "thinking") == 0) {
            rc_fail(e, "%s: thinking blocks may only be in assistant messages", bp);
            goto done;
        }
        if (strcmp(type, "tool_use") == 0) {
            rc_fail(e, "%s: tool_use blocks may only be in assistant messages", bp);
            goto done;
        }
        if (strcmp(type, "tool_addition") == 0) {
            rc_fail(e, "%s: tool_addition blocks may only be in system messages", bp);
            goto done;
        }
        if (strcmp(type, "server_tool_use") == 0 || strcmp(type, "web_search_tool_result") == 0) {
            rc_fail(e, "%s: server tools are not supported", bp);
            goto done;
        }
        /* each remaining block is a user message of its own (the encodings then
         * merge consecutive user messages, V4 skipping empty ones) */
        any_other++;
        b.len = 0;
        if (strcmp(type, "text") == 0) {
            const char *t = NULL;
            if (rc_get_string(e, blk, "text", bp, &t) <= 0) {
                rc_fail(e, "%stext: missing", bp);
                goto done;
            }
            rc_buf_add(&b, t, json_string_length(json_object_get(blk, "text")));
        } else if (strcmp(type, "image") == 0) {
            if (image_block(e, conv, blk, bp, 0, &b) < 0) goto done;
        } else if (strcmp(type, "document") == 0) {
            const char *mt =
                json_string_value(json_object_get(json_object_get(blk, "source"), "media_type"));
            rc_buf_adds(&b, "[Unsupported document type: ");
            rc_buf_adds(&b, mt ? mt : "unknown");
            rc_buf_adds(&b, "]");
        } else {
            rc_fail(e, "%stype: unknown block type \"%.40s\"", bp, type);
            goto done;
        }
        rc_message *um = rc_add_message(conv, RC_USER);
        if (!um) goto oom;
        um->content_len = b.len;
        um->content = rc_buf_take(&b);
        if (!um->content) goto oom;
    }
    if (add_updated_tools(e, conv, refs) < 0) goto done;
    rc = 0;
    goto done;
oom:
    rc_fail(e, "out of memory");
done:
    free(b.s);
    json_decref(refs);
    return rc;
}

static int assistant_message(rc_err *e, rc_conversation *conv, json_t *content, const char *p)
{
    rc_buf text = {0}, reasoning = {0};
    rc_message *m = rc_add_message(conv, RC_ASSISTANT);
    if (!m) return rc_fail(e, "out of memory");
    int rc = -1, n_text = 0, n_think = 0, seen_tool = 0;
    if (rc_json_is_text(content)) {
        rc_buf_add(&text, json_string_value(content), json_string_length(content));
    } else {
        m->calls = calloc(json_array_size(content) + 1, sizeof *m->calls);
        if (!m->calls) goto oom;
        for (size_t i = 0; i < json_array_size(content); i++) {
            json_t *blk = json_array_get(content, i);
            char bp[160];
            snprintf(bp, sizeof bp, "%scontent[%zu].", p, i);
            const char *type = NULL;
            if (!json_is_object(blk) || rc_get_string(e, blk, "type", bp, &type) <= 0) {
                rc_fail(e, "%stype: missing", bp);
                goto done;
            }
            if (strcmp(type, "tool_use") == 0) {
                const char *id = NULL, *name = NULL;
                json_t *input = json_object_get(blk, "input");
                if (rc_get_string(e, blk, "id", bp, &id) <= 0) {
                    rc_fail(e, "%sid: missing", bp);
                    goto done;
                }
                if (rc_get_string(e, blk, "name", bp, &name) <= 0) {
                    rc_fail(e, "%sname: missing", bp);
                    goto done;
                }
                if (!input) {
                    rc_fail(e, "%sinput: missing", bp);
                    goto done;
                }
                for (size_t k = 0; k < m->n_calls; k++)
                    if (m->calls[k].id && strcmp(m->calls[k].id, id) == 0) {
                        rc_fail(e, "%sid: tool_use ids must be unique", bp);
                        goto done;
                    }
                rc_buf args = {0};
                rc_pyjson(&args, input, RC_FLOAT_V4);
                rc_call *c = &m->calls[m->n_calls++];
                c->id = rc_strdup(id);
                c->name = rc_strdup(name);
                c->arguments = rc_buf_take(&args);
                if (!c->id || !c->name || !c->arguments) goto oom;
                seen_tool = 1;
                continue;
            }
            if (seen_tool) {
                rc_fail(e, "%s: tool_use blocks must be the last blocks of an assistant message",
                        bp);
                goto done;
            }
            if (strcmp(type, "text") == 0) {
                const char *t = NULL;
                if (rc_get_string(e, blk, "text", bp, &t) <= 0) {
                    rc_fail(e, "%stext: missing", bp);
                    goto done;
                }
                if (n_text++) rc_buf_add(&text, "\n\n", 2);
                rc_buf_add(&text, t, json_string_length(json_object_get(blk, "text")));
            } else if (strcmp(type, "thinking") == 0) {
                const char *t = NULL;
                if (rc_get_string(e, blk, "thinking", bp, &t) <= 0) {
                    rc_fail(e, "%sthinking: missing", bp);
                    goto done;
                }
                if (n_think++) rc_buf_add(&reasoning, "\n\n", 2);
                rc_buf_add(&reasoning, t, json_string_length(json_object_get(blk, "thinking")));
            } else if (strcmp(type, "tool_result") == 0) {
                rc_fail(e, "%s: tool_result blocks may only be in user messages", bp);
                goto done;
            } else if (strcmp(type, "image") == 0) {
                if (conv->model == RC_MODEL_V41_FLASH) {
                    rc_fail(e, "%s: images in assistant messages are not supported", bp);
                    goto done;
                }
                if (image_block(e, conv, blk, bp, 1, &text) < 0) goto done;
                n_text++;
            } else if (strcmp(type, "document") == 0) {
                const char *mt = json_string_value(
                    json_object_get(json_object_get(blk, "source"), "media_type"));
                if (n_text++) rc_buf_add(&text, "\n\n", 2);
                rc_buf_adds(&text, "[Unsupported document type: ");
                rc_buf_adds(&text, mt ? mt : "unknown");
                rc_buf_adds(&text, "]");
            } else if (strcmp(type, "server_tool_use") == 0 ||
                       strcmp(type, "web_search_tool_result") == 0) {
                rc_fail(e, "%s: server tools are not supported", bp);
                goto done;
            } else if (strcmp(type, "tool_addition") == 0) {
                rc_fail(e, "%s: tool_addition blocks may only be in system messages", bp);
                goto done;
            } else {
                rc_fail(e, "%stype: unknown block type \"%.40s\"", bp, type);
                goto done;
            }
        }
    }
    m->content_len = text.len;
    m->content = rc_buf_take(&text);
    if (!m->content) goto oom;
    if (conv->thinking) {
        m->reasoning = rc_buf_take(&reasoning);
        if (!m->reasoning) goto oom;
    }
    rc = 0;
    goto done;
oom:
    rc_fail(e, "out of memory");
done:
    free(text.s);
    free(reasoning.s);
    return rc;
}

static int system_role_message(rc_err *e, rc_conversation *conv, json_t *content, const char *p)
{
    rc_buf b = {0};
    json_t *added = json_array();
    if (rc_json_is_text(content)) {
        rc_buf_add(&b, json_string_value(content), json_string_length(content));
    } else {
        int n = 0;
        for (size_t i = 0; i < json_array_size(content); i++) {
            json_t *blk = json_array_get(content, i);
            char bp[160];
            snprintf(bp, sizeof bp, "%scontent[%zu].", p, i);
            const char *type = NULL;
            if (!json_is_object(blk) || rc_get_string(e, blk, "type", bp, &type) <= 0) {
                free(b.s);
                json_decref(added);
                return rc_fail(e, "%stype: missing", bp);
            }
            if (strcmp(type, "tool_addition") == 0) {
                const char *name =
                    json_string_value(json_object_get(json_object_get(blk, "tool"), "name"));
                if (!name || find_tool(conv, name) < 0) {
                    free(b.s);
                    json_decref(added);
                    return rc_fail(e, "%s: tool_addition references unknown tool '%.60s'", bp,
                                   name ? name : "");
                }
                json_array_append_new(added, json_string(name));
                continue;
            }
            if (n++) rc_buf_add(&b, "\n\n", 2);
            if (strcmp(type, "text") == 0) {
                const char *t = NULL;
                if (rc_get_string(e, blk, "text", bp, &t) <= 0) {
                    free(b.s);
                    json_decref(added);
                    return rc_fail(e, "%stext: missing", bp);
                }
                rc_buf_add(&b, t, json_string_length(json_object_get(blk, "text")));
            } else if (strcmp(type, "image") == 0) {
                if (conv->model == RC_MODEL_V4_PRO)
                    rc_buf_adds(&b, "[Unsupported Image]");
                else if (image_block(e, conv, blk, bp, 0, &b) < 0) {
                    free(b.s);
                    json_decref(added);
                    return -1;
                }
            } else {
                free(b.s);
                json_decref(added);
                return rc_fail(e, "%stype: \"%.40s\" is not allowed in a system message", bp, type);
            }
        }
    }
    int rc = 0;
    if (conv->model == RC_MODEL_V4_PRO) {
        if (b.len) {
            rc_buf u = {0};
            rc_buf_adds(&u, "<system-reminder>\n");
            rc_buf_add(&u, b.s, b.len);
            rc_buf_adds(&u, "\n</system-reminder>");
            rc_message *m = rc_add_message(conv, RC_USER);
            if (!m)
                rc = rc_fail(e, "out of memory");
            else {
                m->content_len = u.len;
                m->content = rc_buf_take(&u);
                if (!m->content) rc = rc_fail(e, "out of memory");
            }
            free(u.s);
        }
    } else {
        rc_message *m = rc_add_message(conv, RC_SYSTEM);
        if (!m)
            rc = rc_fail(e, "out of memory");
        else {
            m->content_len = b.len;
            m->content = rc_buf_take(&b);
            if (!m->content) rc = rc_fail(e, "out of memory");
            size_t n = 0;
            for (size_t i = 0; i < json_array_size(added); i++) {
                int k = find_tool(conv, json_string_value(json_array_get(added, i)));
                n += (size_t)(k >= 0 && conv->tools[k].deferred);
            }
            if (rc == 0 && n && (m->updated_tools = calloc(n, sizeof *m->updated_tools)))
                for (size_t i = 0; i < json_array_size(added); i++) {
                    int k = find_tool(conv, json_string_value(json_array_get(added, i)));
                    if (k < 0 || !conv->tools[k].deferred) continue;
                    rc_tool *t = &m->updated_tools[m->n_updated++];
                    t->name = rc_strdup(conv->tools[k].name);
                    t->description =
                        conv->tools[k].description ? rc_strdup(conv->tools[k].description) : NULL;
                    t->parameters = json_incref(conv->tools[k].parameters);
                }
        }
    }
    free(b.s);
    json_decref(added);
    return rc;
}

/* tool_use ids answered by tool_results in the next message, and only there (§7.5). */
static int check_pairing(rc_err *e, json_t *messages)
{
    for (size_t i = 0; i < json_array_size(messages); i++) {
        json_t *msg = json_array_get(messages, i), *content = json_object_get(msg, "content");
        const char *role = json_string_value(json_object_get(msg, "role"));
        json_t *next = json_array_get(messages, i + 1);
        json_t *next_content = next ? json_object_get(next, "content") : NULL;
        const char *next_role = next ? json_string_value(json_object_get(next, "role")) : NULL;
        /* results in this (user) message must answer the previous message's uses */
        if (role && strcmp(role, "user") == 0 && json_is_array(content)) {
            json_t *prev = i ? json_object_get(json_array_get(messages, i - 1), "content") : NULL;
            for (size_t k = 0; k < json_array_size(content); k++) {
                json_t *blk = json_array_get(content, k);
                const char *type = json_string_value(json_object_get(blk, "type"));
                if (!type || !rc_streq(type, "tool_result")) continue;
                const char *id = json_string_value(json_object_get(blk, "tool_use_id"));
                int found = 0;
                for (size_t j = 0; j < json_array_size(prev) && id; j++) {
                    json_t *u = json_array_get(prev, j);
                    const char *ut = json_string_value(json_object_get(u, "type"));
                    if (ut && rc_streq(ut, "tool_use") &&
                        rc_json_is_text(json_object_get(u, "id")) &&
                        rc_streq(json_string_value(json_object_get(u, "id")), id))
                        found = 1;
                }
                if (!found)
                    return rc_fail(e,
                                   "messages[%zu].content[%zu]: tool_result for \"%.60s\" has no "
                                   "tool_use in the previous message",
                                   i, k, id ? id : "");
                for (size_t j = 0; j < k; j++) {
                    json_t *o = json_array_get(content, j);
                    const char *ot = json_string_value(json_object_get(o, "type"));
                    const char *oid = json_string_value(json_object_get(o, "tool_use_id"));
                    if (ot && rc_streq(ot, "tool_result") && oid && id && rc_streq(oid, id))
                        return rc_fail(
                            e,
                            "messages[%zu].content[%zu]: each tool_use must have a single "
                            "result (\"%.60s\" has several)",
                            i, k, id);
                }
            }
        }
        if (!role || !rc_streq(role, "assistant") || !json_is_array(content)) continue;
        for (size_t k = 0; k < json_array_size(content); k++) {
            json_t *blk = json_array_get(content, k);
            const char *type = json_string_value(json_object_get(blk, "type"));
            if (!type || !rc_streq(type, "tool_use")) continue;
            const char *id = json_string_value(json_object_get(blk, "id"));
            int answered = 0, leading = 1;
            if (next_role && rc_streq(next_role, "user") && json_is_array(next_content))
                for (size_t j = 0; j < json_array_size(next_content); j++) {
                    json_t *r = json_array_get(next_content, j);
                    const char *rt = json_string_value(json_object_get(r, "type"));
                    if (!rt || !rc_streq(rt, "tool_result")) {
                        leading = 0;
                        continue;
                    }
                    const char *rid = json_string_value(json_object_get(r, "tool_use_id"));
                    if (leading && rid && id && rc_streq(rid, id)) answered = 1;
                }
            if (!answered)
                return rc_fail(e,
                               "messages[%zu]: tool_use \"%.60s\" has no tool_result at the start "
                               "of the next message",
                               i, id ? id : "");
        }
    }
    return 0;
}

di_status rc_convert_messages(json_t *root, rc_conversation *conv, char *msg, size_t msg_size)
{
    rc_err e = {DI_OK, msg, msg_size};
    msg[0] = 0;
    if (!json_is_object(root)) {
        rc_fail(&e, "request: expected a JSON object");
        return e.status;
    }
    json_t *messages = NULL, *output = NULL, *choice = NULL;
    if (rc_parse_model(&e, root, conv) < 0) goto done;
    if (rc_get_array(&e, root, "messages", "", &messages) <= 0) {
        rc_fail(&e, "messages: missing");
        goto done;
    }
    if (rc_get_object(&e, root, "output_config", "", &output) < 0) goto done;
    if (rc_parse_thinking_and_effort(&e, root, output, "effort", "output_config.effort", 1, conv) <
        0)
        goto done;
    if (rc_check_temperature_top_p(&e, root, conv) < 0) goto done;
    unsigned long long u;
    int r;
    if ((r = rc_get_uint(&e, root, "max_tokens", "", UINT32_MAX, &u)) < 0) goto done;
    if (r > 0 && u == 0) {
        rc_fail(&e, "max_tokens: must be in [1, 393216]");
        goto done;
    }
    if (r > 0) conv->max_tokens = u > 393216 ? 393216 : (int)u; /* lowered, as the reference does */
    if (rc_get_bool(&e, root, "stream", "", &conv->stream) < 0) goto done;
    json_t *stops = NULL;
    if (rc_get_array(&e, root, "stop_sequences", "", &stops) < 0) goto done;
    for (size_t i = 0; i < json_array_size(stops); i++) {
        json_t *s = json_array_get(stops, i);
        if (!rc_json_is_text(s)) {
            rc_fail(&e, "stop_sequences[%zu]: expected a string", i);
            goto done;
        }
        if (json_string_length(s) == 0) {
            rc_fail(&e, "stop_sequences[%zu]: empty string", i);
            goto done;
        }
        if (rc_add_stop(conv, json_string_value(s)) < 0) {
            rc_fail(&e, "out of memory");
            goto done;
        }
    }
    json_t *system = json_object_get(root, "system");
    if (system && !json_is_null(system)) {
        rc_buf b = {0};
        if (rc_json_is_text(system)) {
            rc_buf_add(&b, json_string_value(system), json_string_length(system));
        } else if (json_is_array(system)) {
            int n = 0;
            for (size_t i = 0; i < json_array_size(system); i++) {
                json_t *blk = json_array_get(system, i);
                const char *type = json_string_value(json_object_get(blk, "type"));
                const char *t = json_string_value(json_object_get(blk, "text"));
                if (!type || !rc_streq(type, "text")) {
                    free(b.s);
                    rc_fail(&e, "system[%zu].type: expected \"text\"", i);
                    goto done;
                }
                if (!t) {
                    free(b.s);
                    rc_fail(&e, "system[%zu].text: missing", i);
                    goto done;
                }
                if (strncasecmp(t, "x-anthropic-billing-header", 26) == 0) continue;
                if (n++) rc_buf_add(&b, "\n\n", 2);
                rc_buf_add(&b, t, json_string_length(json_object_get(blk, "text")));
            }
        } else {
            rc_fail(&e, "system: expected a string or an array of text blocks");
            goto done;
        }
        rc_message *m = rc_add_message(conv, RC_SYSTEM);
        if (!m) {
            free(b.s);
            rc_fail(&e, "out of memory");
            goto done;
        }
        m->content_len = b.len;
        m->content = rc_buf_take(&b);
        if (!m->content) {
            rc_fail(&e, "out of memory");
            goto done;
        }
    }
    if (parse_tools(&e, root, conv) < 0) goto done;
    if (rc_get_object(&e, root, "tool_choice", "", &choice) < 0) goto done;
    const char *kind = "auto", *name = NULL;
    if (choice) {
        const char *type = NULL;
        int flag;
        if (rc_get_string(&e, choice, "type", "tool_choice.", &type) <= 0) {
            rc_fail(&e, "tool_choice.type: missing");
            goto done;
        }
        if (rc_get_bool(&e, choice, "disable_parallel_tool_use", "tool_choice.", &flag) < 0)
            goto done;
        if (rc_streq(type, "auto") || rc_streq(type, "any"))
            kind = "auto"; /* any → auto, as the reference */
        else if (rc_streq(type, "none"))
            kind = "none";
        else if (rc_streq(type, "tool")) {
            if (rc_get_string(&e, choice, "name", "tool_choice.", &name) <= 0) {
                rc_fail(&e, "tool_choice.name: missing");
                goto done;
            }
            kind = "function";
        } else {
            rc_fail(&e, "tool_choice.type: unknown value \"%.40s\"", type);
            goto done;
        }
    }
    if (json_array_size(messages) == 0) {
        rc_fail(&e, "messages: at least one message is required");
        goto done;
    }
    /* types first, as the reference's parser rejects them before any conversion */
    for (size_t i = 0; i < json_array_size(messages); i++) {
        json_t *m = json_array_get(messages, i), *content;
        const char *role = NULL;
        char p[48];
        snprintf(p, sizeof p, "messages[%zu].", i);
        if (!json_is_object(m)) {
            rc_fail(&e, "messages[%zu]: expected an object", i);
            goto done;
        }
        if (rc_get_string(&e, m, "role", p, &role) <= 0) {
            rc_fail(&e, "%srole: missing", p);
            goto done;
        }
        if (!rc_streq(role, "user") && !rc_streq(role, "assistant") && !rc_streq(role, "system")) {
            rc_fail(&e, "%srole: unknown role \"%.40s\" (user, assistant, system)", p, role);
            goto done;
        }
        content = json_object_get(m, "content");
        if (!rc_json_is_text(content) && !json_is_array(content)) {
            rc_fail(&e, "%scontent: expected a string or an array of blocks", p);
            goto done;
        }
        if (json_is_array(content) && json_array_size(content) == 0) {
            rc_fail(&e, "%scontent: all messages must have non-empty content", p);
            goto done;
        }
    }
    if (check_pairing(&e, messages) < 0) goto done;
    int declared = conv->n_tools > 0;
    (void)declared;
    if (rc_apply_tool_choice(&e, conv, kind, name) < 0) goto done;
    for (size_t i = 0; i < json_array_size(messages); i++) {
        json_t *m = json_array_get(messages, i), *content = json_object_get(m, "content");
        const char *role = json_string_value(json_object_get(m, "role"));
        char p[48];
        snprintf(p, sizeof p, "messages[%zu].", i);
        int rc = rc_streq(role, "user")        ? user_message(&e, conv, content, p, i)
                 : rc_streq(role, "assistant") ? assistant_message(&e, conv, content, p)
                                               : system_role_message(&e, conv, content, p);
        if (rc < 0) goto done;
    }
done:
    return e.status;
}
