/* OpenAI Responses request → conversation, as deepseek-recipe converts it
 * (docs/recipe-spec.md §3, §4, §8). Errors name the field; the accept/reject
 * decision follows the reference, the wording is ours. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/request_common.h"

/* The description deepseek-recipe gives the apply_patch custom tool with V4-Pro
 * (§8.8), verified against the oracle's prompts; V4.1's is derived below. */
static const char apply_patch_v4[] =
    "Use the `apply_patch` tool to edit files.\n"
    "Your patch language is a stripped‑down, file‑oriented diff format designed to be easy to "
    "parse and safe to apply. You can think of it as a high‑level envelope:\n"
    "*** Begin Patch\n"
    "[ one or more file sections ]\n"
    "*** End Patch\n"
    "\n"
    "Within that envelope, you get a sequence of file operations.\n"
    "You MUST include a header to specify the action you are taking.\n"
    "Each operation starts with one of three headers:\n"
    "\n"
    "*** Add File: <path> - create a new file. Every following line is a + line (the initial "
    "contents).\n"
    "*** Delete File: <path> - remove an existing file. Nothing follows.\n"
    "*** Update File: <path> - patch an existing file in place (optionally with a rename).\n"
    "\n"
    "May be immediately followed by *** Move to: <new path> if you want to rename the file.\n"
    "Then one or more “hunks”, each introduced by @@ (optionally followed by a hunk header).\n"
    "Within a hunk each line starts with:\n"
    "\n"
    "For instructions on [context_before] and [context_after]:\n"
    "- By default, show 3 lines of code immediately above and 3 lines immediately below each "
    "change. If a change is within 3 lines of a previous change, do NOT duplicate the first "
    "change’s [context_after] lines in the second change’s [context_before] lines.\n"
    "- If 3 lines of context is insufficient to uniquely identify the snippet of code within the "
    "file, use the @@ operator to indicate the class or function to which the snippet belongs. For "
    "instance, we might have:\n"
    "@@ class BaseClass\n"
    "[3 lines of pre-context]\n"
    "- [old_code]\n"
    "+ [new_code]\n"
    "[3 lines of post-context]\n"
    "\n"
    "- If a code block is repeated so many times in a class or function such that even a single "
    "`@@` statement and 3 lines of context cannot uniquely identify the snippet of code, you can "
    "use multiple `@@` statements to jump to the right context. For instance:\n"
    "\n"
    "@@ class BaseClass\n"
    "@@ \t def method():\n"
    "[3 lines of pre-context]\n"
    "- [old_code]\n"
    "+ [new_code]\n"
    "[3 lines of post-context]\n"
    "\n"
    "The full grammar definition is below:\n"
    "Patch := Begin { FileOp } End\n"
    "Begin := \"*** Begin Patch\" NEWLINE\n"
    "End := \"*** End Patch\" NEWLINE\n"
    "FileOp := AddFile | DeleteFile | UpdateFile\n"
    "AddFile := \"*** Add File: \" path NEWLINE { \"+\" line NEWLINE }\n"
    "DeleteFile := \"*** Delete File: \" path NEWLINE\n"
    "UpdateFile := \"*** Update File: \" path NEWLINE [ MoveTo ] { Hunk }\n"
    "MoveTo := \"*** Move to: \" newPath NEWLINE\n"
    "Hunk := \"@@\" [ header ] NEWLINE { HunkLine } [ \"*** End of File\" NEWLINE ]\n"
    "HunkLine := (\" \" | \"-\" | \"+\") text NEWLINE\n"
    "\n"
    "A full patch can combine several operations:\n"
    "\n"
    "*** Begin Patch\n"
    "*** Add File: hello.txt\n"
    "+Hello world\n"
    "*** Update File: src/app.py\n"
    "*** Move to: src/main.py\n"
    "@@ def greet():\n"
    "-print(\"Hi\")\n"
    "+print(\"Hello, world!\")\n"
    "*** Delete File: obsolete.txt\n"
    "*** End Patch\n"
    "\n"
    "It is important to remember:\n"
    "\n"
    "- You must include a header with your intended action (Add/Delete/Update)\n"
    "- You must prefix new lines with `+` even when creating a new file\n"
    "- File references can only be relative, NEVER ABSOLUTE.\n"
    "";
/* The V4.1 description has one more blank line after the first line that ends in
 * "envelope:". Built from the V4 text into `out` (sizeof apply_patch_v4 + 1). */
static void apply_patch_v41(char *out)
{
    static const char marker[] = "envelope:\n";
    const char *at = strstr(apply_patch_v4, marker);
    size_t head = at ? (size_t)(at - apply_patch_v4) + sizeof marker - 1 : 0;
    memcpy(out, apply_patch_v4, head);
    out[head] = '\n';
    memcpy(out + head + (at ? 1 : 0), apply_patch_v4 + head, sizeof apply_patch_v4 - head);
}

static const char apply_patch_params[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {\"input\": "
    "{\"type\": \"string\", \"description\": \"The entire contents of the apply_patch command "
    "(the *** Begin Patch ... *** End Patch envelope).\"}}, \"required\": [\"input\"]}";

static int add_tool(rc_err *e, rc_conversation *conv, const char *name, const char *desc,
                    json_t *params, int strict, int *strict_seen, int *loose_seen)
{
    for (size_t j = 0; j < conv->n_tools; j++)
        if (conv->tools[j].name && strcmp(conv->tools[j].name, name) == 0)
            return rc_fail(e, "tools: tool names must be unique");
    json_t *shown;
    if (strict) {
        *strict_seen = 1;
        if (!(shown = rc_strict_parameters(e, params, name))) return -1;
    } else {
        *loose_seen = 1;
        shown = params ? json_incref(params) : json_object();
    }
    rc_tool *t = &conv->tools[conv->n_tools++];
    t->name = rc_strdup(name);
    t->description = desc ? rc_strdup(desc) : NULL;
    t->parameters = shown;
    if (!t->name || (desc && !t->description) || !shown) return rc_fail(e, "out of memory");
    return 0;
}

/* A function tool (top level or inside a namespace). */
static int function_tool(rc_err *e, rc_conversation *conv, json_t *t, const char *p, const char *ns,
                         const char *ns_desc, int *strict_seen, int *loose_seen)
{
    const char *name = NULL, *desc = NULL;
    int strict = 0, defer = 0;
    if (rc_get_string(e, t, "name", p, &name) <= 0) return rc_fail(e, "%sname: missing", p);
    if (rc_get_string(e, t, "description", p, &desc) < 0) return -1;
    if (rc_get_bool(e, t, "strict", p, &strict) < 0) return -1;
    if (rc_get_bool(e, t, "defer_loading", p, &defer) < 0) return -1;
    char np[160];
    snprintf(np, sizeof np, "%sname", p);
    if (rc_check_tool_name(e, name, np) < 0) return -1;
    json_t *params = json_object_get(t, "parameters");
    if (json_is_null(params)) params = NULL;
    if (params && rc_check_parameters(e, params, name) < 0) return -1;
    if (!ns) return add_tool(e, conv, name, desc, params, strict, strict_seen, loose_seen);
    rc_buf full = {0}, d = {0};
    int v41 = conv->model == RC_MODEL_V41_FLASH;
    rc_buf_adds(&full, ns);
    rc_buf_adds(&full, v41 ? "::" : "__");
    rc_buf_adds(&full, name);
    if (v41) {
        if (ns_desc && ns_desc[0]) {
            rc_buf_adds(&d, ns_desc);
            rc_buf_adds(&d, "\n");
        }
        if (desc) rc_buf_adds(&d, desc);
    } else if (desc) {
        rc_buf_adds(&d, desc);
    }
    char *fn = rc_buf_take(&full), *ds = (v41 || desc) ? rc_buf_take(&d) : NULL;
    free(d.s);
    int r = fn ? add_tool(e, conv, fn, ds, params, strict, strict_seen, loose_seen)
               : rc_fail(e, "out of memory");
    free(fn);
    free(ds);
    return r;
}

static int parse_tools(rc_err *e, json_t *root, rc_conversation *conv, int *any_strict)
{
    json_t *tools = NULL;
    if (rc_get_array(e, root, "tools", "", &tools) <= 0) return e->status ? -1 : 0;
    size_t cap = 1;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *inner = json_object_get(json_array_get(tools, i), "tools");
        cap += 1 + json_array_size(inner);
    }
    conv->tools = calloc(cap, sizeof *conv->tools);
    if (!conv->tools) return rc_fail(e, "out of memory");
    int strict_seen = 0, loose_seen = 0;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        char p[48];
        snprintf(p, sizeof p, "tools[%zu].", i);
        const char *type = NULL;
        if (!json_is_object(t)) return rc_fail(e, "tools[%zu]: expected an object", i);
        if (rc_get_string(e, t, "type", p, &type) <= 0) return rc_fail(e, "%stype: missing", p);
        if (strcmp(type, "function") == 0) {
            if (function_tool(e, conv, t, p, NULL, NULL, &strict_seen, &loose_seen) < 0) return -1;
        } else if (strcmp(type, "namespace") == 0) {
            const char *ns = NULL, *ns_desc = NULL;
            json_t *inner = NULL;
            if (rc_get_string(e, t, "name", p, &ns) <= 0) return rc_fail(e, "%sname: missing", p);
            if (rc_get_string(e, t, "description", p, &ns_desc) < 0) return -1;
            if (rc_get_array(e, t, "tools", p, &inner) <= 0)
                return rc_fail(e, "%stools: missing", p);
            for (size_t k = 0; k < json_array_size(inner); k++) {
                json_t *f = json_array_get(inner, k);
                char fp[96];
                snprintf(fp, sizeof fp, "%stools[%zu].", p, k);
                const char *ft = json_string_value(json_object_get(f, "type"));
                if (ft && strcmp(ft, "custom") == 0)
                    return rc_fail(e, "%s: custom tools are not allowed inside a namespace", fp);
                const char *fname = json_string_value(json_object_get(f, "name"));
                for (size_t j = 0; j < k && fname; j++) {
                    const char *other =
                        json_string_value(json_object_get(json_array_get(inner, j), "name"));
                    if (other && strcmp(other, fname) == 0)
                        return rc_fail(e, "%s: tool names within a namespace must be unique", fp);
                }
                if (function_tool(e, conv, f, fp, ns, ns_desc, &strict_seen, &loose_seen) < 0)
                    return -1;
            }
        } else if (strcmp(type, "custom") == 0) {
            const char *name = NULL;
            if (rc_get_string(e, t, "name", p, &name) <= 0) return rc_fail(e, "%sname: missing", p);
            if (strcmp(name, "apply_patch") != 0)
                return rc_fail(e, "%sname: unsupported custom tool '%.60s' (only apply_patch)", p,
                               name);
            json_t *params = json_loads(apply_patch_params, 0, NULL);
            char v41[sizeof apply_patch_v4 + 1];
            apply_patch_v41(v41);
            int r = add_tool(e, conv, "apply_patch",
                             conv->model == RC_MODEL_V41_FLASH ? v41 : apply_patch_v4, params, 0,
                             &strict_seen, &loose_seen);
            json_decref(params);
            if (r < 0) return -1;
        }
        /* web_search, file_search, tool_search, ...: dropped, as the reference does */
    }
    if (strict_seen && loose_seen)
        return rc_fail(e, "tools: strict and non-strict tools cannot be mixed");
    *any_strict = strict_seen;
    return 0;
}

/* Text of a message's content: string or parts, joined with "\n\n". */
static int message_content(rc_err *e, rc_conversation *conv, json_t *content, const char *p,
                           int assistant, char **out, size_t *out_len)
{
    rc_buf b = {0};
    if (rc_json_is_text(content)) {
        rc_buf_add(&b, json_string_value(content), json_string_length(content));
    } else if (json_is_array(content)) {
        for (size_t i = 0; i < json_array_size(content); i++) {
            json_t *part = json_array_get(content, i);
            char pp[128];
            snprintf(pp, sizeof pp, "%scontent[%zu].", p, i);
            const char *type = NULL;
            if (!json_is_object(part) || rc_get_string(e, part, "type", pp, &type) <= 0) {
                free(b.s);
                return rc_fail(e, "%stype: missing", pp);
            }
            if (i) rc_buf_add(&b, "\n\n", 2);
            if (rc_streq(type, "input_text") || rc_streq(type, "output_text")) {
                const char *t = NULL;
                if (rc_get_string(e, part, "text", pp, &t) <= 0) {
                    free(b.s);
                    return rc_fail(e, "%stext: missing", pp);
                }
                rc_buf_add(&b, t, json_string_length(json_object_get(part, "text")));
            } else if (rc_streq(type, "input_image")) {
                const char *url = NULL, *file = NULL, *detail = NULL;
                if (rc_get_string(e, part, "image_url", pp, &url) < 0 ||
                    rc_get_string(e, part, "file_id", pp, &file) < 0 ||
                    rc_get_string(e, part, "detail", pp, &detail) < 0) {
                    free(b.s);
                    return -1;
                }
                if (conv->model == RC_MODEL_V41_FLASH) {
                    int bad =
                        url && file
                            ? rc_fail(e, "%s: input_image cannot have both image_url and file_id",
                                      pp)
                        : !url && !file
                            ? rc_fail(e, "%s: input_image must have image_url or file_id", pp)
                        : file
                            ? rc_fail(
                                  e, "%s: file_id images are not supported; pass a base64 data URL",
                                  pp)
                        : assistant
                            ? rc_fail(e, "%s: images in assistant messages are not supported", p)
                            : rc_check_image_url(e, url, pp);
                    if (bad < 0) {
                        free(b.s);
                        return -1;
                    }
                    rc_buf_add(&b, "\xff", 1);
                    if (rc_add_image(conv, url) < 0) {
                        free(b.s);
                        return rc_fail(e, "out of memory");
                    }
                } else {
                    rc_buf_adds(&b, "[Unsupported Image]");
                }
            } else if (rc_streq(type, "input_file")) {
                rc_buf_adds(&b, "[Unsupported Document]");
            } else {
                free(b.s);
                return rc_fail(e, "%stype: unknown content part type \"%.40s\"", pp, type);
            }
        }
    } else {
        return rc_fail(e, "%scontent: expected a string or an array of content parts", p);
    }
    *out_len = b.len;
    *out = rc_buf_take(&b);
    return *out ? 0 : rc_fail(e, "out of memory");
}

/* Each function a tool search returned, flattened out of namespaces: calls
 * fn(tool object, namespace object or NULL). */
static int each_found_tool(rc_err *e, json_t *tools,
                           int (*fn)(rc_err *, json_t *, json_t *, void *), void *ctx)
{
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(t, "type"));
        if (type && rc_streq(type, "namespace")) {
            json_t *inner = json_object_get(t, "tools");
            for (size_t k = 0; k < json_array_size(inner); k++)
                if (fn(e, json_array_get(inner, k), t, ctx) < 0) return -1;
        } else if (fn(e, t, NULL, ctx) < 0) {
            return -1;
        }
    }
    return 0;
}

static int result_entry(rc_err *e, json_t *t, json_t *ns, void *ctx)
{
    (void)e;
    json_t *list = ctx, *o = json_object();
    static const char *const keys[] = {"name", "description", "parameters", "strict"};
    json_object_set_new(o, "type", json_string("function"));
    for (size_t k = 0; k < 4; k++) {
        json_t *v = json_object_get(t, keys[k]);
        json_object_set(o, keys[k], v ? v : json_null());
    }
    if (ns) {
        json_t *n = json_object();
        json_t *nn = json_object_get(ns, "name"), *nd = json_object_get(ns, "description");
        json_object_set(n, "name", nn ? nn : json_null());
        json_object_set(n, "description", nd ? nd : json_null());
        json_object_set_new(o, "namespace", n);
    }
    return json_array_append_new(list, o) ? -1 : 0;
}

/* The tool message of a tool_search_output: the found tools as compact JSON. */
static int tool_search_result(rc_err *e, json_t *tools, char **text, size_t *len)
{
    json_t *list = json_array();
    rc_buf b = {0};
    if (!list || each_found_tool(e, tools, result_entry, list) < 0) {
        json_decref(list);
        return rc_fail(e, "out of memory");
    }
    rc_compact_json(&b, list);
    json_decref(list);
    *len = b.len;
    *text = rc_buf_take(&b);
    return *text ? 0 : rc_fail(e, "out of memory");
}

typedef struct announce_ctx {
    rc_conversation *conv;
    rc_message *m;
} announce_ctx;

static int announce_entry(rc_err *e, json_t *t, json_t *ns, void *ctx)
{
    announce_ctx *c = ctx;
    const char *name = json_string_value(json_object_get(t, "name"));
    const char *desc = json_string_value(json_object_get(t, "description"));
    json_t *params = json_object_get(t, "parameters");
    rc_buf full = {0}, d = {0};
    if (ns) {
        const char *nsn = json_string_value(json_object_get(ns, "name"));
        const char *nsd = json_string_value(json_object_get(ns, "description"));
        rc_buf_adds(&full, nsn ? nsn : "");
        rc_buf_adds(&full, "::");
        if (nsd && nsd[0]) {
            rc_buf_adds(&d, nsd);
            rc_buf_adds(&d, "\n");
        }
    }
    rc_buf_adds(&full, name ? name : "");
    if (desc) rc_buf_adds(&d, desc);
    rc_tool *tool = &c->m->updated_tools[c->m->n_updated++];
    tool->name = rc_buf_take(&full);
    tool->description = rc_buf_take(&d);
    tool->parameters = params && !json_is_null(params) ? json_incref(params) : json_object();
    return tool->name && tool->description ? 0 : rc_fail(e, "out of memory");
}

static int count_entry(rc_err *e, json_t *t, json_t *ns, void *ctx)
{
    (void)e, (void)t, (void)ns;
    ++*(size_t *)ctx;
    return 0;
}

/* The system message that announces the tools a tool search found (§8.6). */
static int announce_tools(rc_err *e, rc_conversation *conv, json_t *tools)
{
    size_t n = 0;
    each_found_tool(e, tools, count_entry, &n);
    rc_message *m = rc_add_message(conv, RC_SYSTEM);
    if (!m || !(m->content = rc_strdup("")) ||
        !(m->updated_tools = calloc(n + 1, sizeof *m->updated_tools)))
        return rc_fail(e, "out of memory");
    announce_ctx ctx = {conv, m};
    return each_found_tool(e, tools, announce_entry, &ctx);
}

/* The assistant message being built from consecutive assistant-side items. */
typedef struct assistant_state {
    rc_message *m; /* NULL when none is open */
    rc_buf content, reasoning;
    int n_content, n_reasoning;
    size_t pending; /* calls not yet answered */
} assistant_state;

static int by_call_id(const void *x, const void *y)
{
    return strcmp(((const rc_call *)x)->id, ((const rc_call *)y)->id);
}

static int close_assistant(rc_err *e, rc_conversation *conv, assistant_state *a)
{
    if (!a->m) return 0;
    /* The reference keeps a turn's calls keyed by call_id: they come out sorted. */
    if (a->m->n_calls > 1) qsort(a->m->calls, a->m->n_calls, sizeof *a->m->calls, by_call_id);
    a->m->content_len = a->content.len;
    a->m->content = rc_buf_take(&a->content);
    if (conv->thinking) a->m->reasoning = rc_buf_take(&a->reasoning);
    free(a->reasoning.s);
    memset(&a->reasoning, 0, sizeof a->reasoning);
    int oom = !a->m->content || (conv->thinking && !a->m->reasoning);
    a->m = NULL;
    a->n_content = a->n_reasoning = 0;
    return oom ? rc_fail(e, "out of memory") : 0;
}

static int open_assistant(rc_err *e, rc_conversation *conv, assistant_state *a, size_t max_calls)
{
    if (a->m) return 0;
    a->m = rc_add_message(conv, RC_ASSISTANT);
    if (!a->m || !(a->m->calls = calloc(max_calls + 1, sizeof *a->m->calls)))
        return rc_fail(e, "out of memory");
    return 0;
}

/* Index of the assistant message a tool output answers: the open call list. */
static int add_call(rc_err *e, rc_conversation *conv, assistant_state *a, const char *id,
                    const char *name, char *arguments, size_t max_calls)
{
    if (open_assistant(e, conv, a, max_calls) < 0) {
        free(arguments);
        return -1;
    }
    rc_call *c = &a->m->calls[a->m->n_calls++];
    c->id = rc_strdup(id);
    c->name = rc_strdup(name);
    c->arguments = arguments;
    a->pending++;
    return c->id && c->name && c->arguments ? 0 : rc_fail(e, "out of memory");
}

static int parse_input(rc_err *e, json_t *input, rc_conversation *conv)
{
    size_t n = json_array_size(input);
    assistant_state a = {0};
    rc_message *caller = NULL; /* the assistant message whose calls are being answered */
    size_t caller_index = 0;
    int outputs_started = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *item = json_array_get(input, i);
        char p[48];
        snprintf(p, sizeof p, "input[%zu].", i);
        if (!json_is_object(item)) return rc_fail(e, "input[%zu]: expected an object", i);
        const char *type = json_string_value(json_object_get(item, "type"));
        json_t *role_v = json_object_get(item, "role");
        int is_message = (!type && role_v) || (type && rc_streq(type, "message"));
        if (!type && !role_v)
            return rc_fail(e, "input[%zu]: an input item needs a type or a role", i);
        /* after calls, only their outputs may come until all are answered */
        int is_output = type && (rc_streq(type, "function_call_output") ||
                                 rc_streq(type, "custom_tool_call_output") ||
                                 rc_streq(type, "tool_search_output"));
        int is_call =
            type && (rc_streq(type, "function_call") || rc_streq(type, "custom_tool_call") ||
                     (rc_streq(type, "tool_search_call") && conv->model == RC_MODEL_V41_FLASH));
        if (caller && caller->n_calls && a.pending && !is_output &&
            !(is_call && !outputs_started)) {
            const char *id = NULL;
            for (size_t k = 0; k < caller->n_calls; k++)
                id = caller->calls[k].id; /* some unanswered */
            return rc_fail(e, "input[%zu]: no tool output found for tool call %.60s", i,
                           id ? id : "");
        }
        if (is_message) {
            const char *role = NULL;
            if (rc_get_string(e, item, "role", p, &role) <= 0)
                return rc_fail(e, "%srole: missing", p);
            json_t *content = json_object_get(item, "content");
            if (!content) return rc_fail(e, "%scontent: missing", p);
            int assistant = rc_streq(role, "assistant");
            if (!assistant && !rc_streq(role, "user") && !rc_streq(role, "system") &&
                !rc_streq(role, "developer"))
                return rc_fail(e, "%srole: unknown role \"%.40s\"", p, role);
            char *text = NULL;
            size_t len = 0;
            if (message_content(e, conv, content, p, assistant, &text, &len) < 0) return -1;
            if (assistant) {
                if (a.m && a.m->n_calls) { /* after calls, a new turn */
                    if (close_assistant(e, conv, &a) < 0) {
                        free(text);
                        return -1;
                    }
                }
                if (open_assistant(e, conv, &a, n) < 0) {
                    free(text);
                    return -1;
                }
                if (a.n_content++) rc_buf_add(&a.content, "\n\n", 2);
                rc_buf_add(&a.content, text, len);
                free(text);
                caller = NULL;
                continue;
            }
            if (close_assistant(e, conv, &a) < 0) {
                free(text);
                return -1;
            }
            caller = NULL;
            rc_role r = rc_streq(role, "user")              ? RC_USER
                        : rc_streq(role, "system")          ? RC_SYSTEM
                        : conv->model == RC_MODEL_V41_FLASH ? RC_SYSTEM
                                                            : RC_USER;
            rc_message *m = rc_add_message(conv, r);
            if (!m) {
                free(text);
                return rc_fail(e, "out of memory");
            }
            m->content = text;
            m->content_len = len;
            continue;
        }
        if (rc_streq(type, "reasoning")) {
            if (a.m && (a.content.len || a.m->n_calls || a.n_content)) {
                if (close_assistant(e, conv, &a) < 0) return -1;
            }
            caller = NULL;
            if (open_assistant(e, conv, &a, n) < 0) return -1;
            json_t *parts = json_object_get(item, "content");
            for (size_t k = 0; k < json_array_size(parts); k++) {
                const char *t =
                    json_string_value(json_object_get(json_array_get(parts, k), "text"));
                if (!t) continue;
                if (a.n_reasoning++) rc_buf_add(&a.reasoning, "\n", 1);
                rc_buf_adds(&a.reasoning, t);
            }
            continue;
        }
        if (rc_streq(type, "tool_search_call") && conv->model == RC_MODEL_V41_FLASH) {
            const char *id = NULL;
            if (rc_get_string(e, item, "call_id", p, &id) <= 0)
                return rc_fail(e, "%scall_id: missing", p);
            rc_buf b = {0};
            json_t *args = json_object_get(item, "arguments");
            if (args)
                rc_compact_json(&b, args);
            else
                rc_buf_adds(&b, "{}");
            if (caller && !a.pending) caller = NULL;
            if (add_call(e, conv, &a, id, "tool_search", rc_buf_take(&b), n) < 0) return -1;
            caller = a.m;
            caller_index = conv->n_messages - 1;
            outputs_started = 0;
            continue;
        }
        if (rc_streq(type, "function_call") || rc_streq(type, "custom_tool_call")) {
            const char *id = NULL, *name = NULL, *ns = NULL;
            if (rc_get_string(e, item, "call_id", p, &id) <= 0)
                return rc_fail(e, "%scall_id: missing", p);
            if (rc_get_string(e, item, "name", p, &name) <= 0)
                return rc_fail(e, "%sname: missing", p);
            char *args;
            if (rc_streq(type, "function_call")) {
                const char *s = NULL;
                if (rc_get_string(e, item, "arguments", p, &s) <= 0)
                    return rc_fail(e, "%sarguments: missing", p);
                if (rc_get_string(e, item, "namespace", p, &ns) < 0) return -1;
                args = rc_strdup(s);
            } else {
                json_t *in = json_object_get(item, "input");
                if (!rc_json_is_text(in)) return rc_fail(e, "%sinput: expected a string", p);
                json_t *wrap = json_object();
                json_object_set(wrap, "input", in);
                rc_buf b = {0};
                rc_pyjson(&b, wrap, RC_FLOAT_V4);
                json_decref(wrap);
                args = rc_buf_take(&b);
            }
            char full[300];
            if (ns && ns[0])
                snprintf(full, sizeof full, "%s%s%s", ns,
                         conv->model == RC_MODEL_V41_FLASH ? "::" : "__", name);
            else
                snprintf(full, sizeof full, "%s", name);
            if (caller && !a.pending) caller = NULL;
            if (add_call(e, conv, &a, id, full, args, n) < 0) return -1;
            caller = a.m;
            caller_index = conv->n_messages - 1;
            outputs_started = 0;
            continue;
        }
        if (is_output) {
            if (rc_streq(type, "tool_search_output") && conv->model != RC_MODEL_V41_FLASH) continue;
            const char *id = NULL;
            if (rc_get_string(e, item, "call_id", p, &id) <= 0)
                return rc_fail(e, "%scall_id: missing", p);
            json_t *out = json_object_get(item, "output");
            char *text = NULL;
            size_t len = 0;
            json_t *found_tools = NULL;
            if (rc_streq(type, "tool_search_output")) {
                found_tools = json_object_get(item, "tools");
                if (!json_is_array(found_tools)) return rc_fail(e, "%stools: expected an array", p);
                if (tool_search_result(e, found_tools, &text, &len) < 0) return -1;
            } else if (rc_json_is_text(out)) {
                text = rc_strndup(json_string_value(out), json_string_length(out));
                len = json_string_length(out);
            } else if (json_is_array(out)) {
                if (message_content(e, conv, out, p, 0, &text, &len) < 0) return -1;
            } else {
                return rc_fail(e, "%soutput: expected a string or an array of parts", p);
            }
            if (!text) return rc_fail(e, "out of memory");
            /* which call does it answer? */
            int found = -1, answered = 0;
            if (caller)
                for (size_t k = 0; k < caller->n_calls; k++)
                    if (rc_streq(caller->calls[k].id, id)) found = (int)k;
            if (found >= 0)
                for (size_t k = caller_index + 1; k < conv->n_messages; k++)
                    if (conv->messages[k].role == RC_TOOL &&
                        rc_streq(conv->messages[k].tool_call_id, id))
                        answered = 1;
            if (found < 0 || answered) {
                free(text);
                return rc_fail(e,
                               answered ? "%scall_id: duplicate tool output for call_id %.60s"
                                        : "%scall_id: no tool call found for tool output %.60s",
                               p, id);
            }
            if (a.m && close_assistant(e, conv, &a) < 0) {
                free(text);
                return -1;
            }
            rc_message *m = rc_add_message(conv, RC_TOOL);
            if (!m) {
                free(text);
                return rc_fail(e, "out of memory");
            }
            m->content = text;
            m->content_len = len;
            m->tool_call_id = rc_strdup(id);
            if (!m->tool_call_id) return rc_fail(e, "out of memory");
            if (a.pending) a.pending--;
            outputs_started = 1;
            if (found_tools && announce_tools(e, conv, found_tools) < 0) return -1;
            caller = &conv->messages[caller_index]; /* the array may have moved */
            continue;
        }
        /* unknown item types (and V4-Pro tool search items) are dropped */
    }
    if (caller && a.pending) {
        const char *id = caller->calls[caller->n_calls - 1].id;
        return rc_fail(e, "input: no tool output found for tool call %.60s", id);
    }
    return close_assistant(e, conv, &a);
}

di_status rc_convert_responses(json_t *root, rc_conversation *conv, char *msg, size_t msg_size)
{
    rc_err e = {DI_OK, msg, msg_size};
    msg[0] = 0;
    if (!json_is_object(root)) {
        rc_fail(&e, "request: expected a JSON object");
        return e.status;
    }
    json_t *input = json_object_get(root, "input"), *reasoning = NULL, *text = NULL, *choice;
    const char *instructions = NULL;
    int any_strict = 0, r;
    if (rc_parse_model(&e, root, conv) < 0) goto done;
    if (json_is_null(input)) input = NULL;
    if (input && !rc_json_is_text(input) && !json_is_array(input)) {
        rc_fail(&e, "input: expected a string or an array of input items");
        goto done;
    }
    if (rc_get_string(&e, root, "instructions", "", &instructions) < 0) goto done;
    if (rc_get_object(&e, root, "reasoning", "", &reasoning) < 0) goto done;
    if (rc_parse_thinking_and_effort(&e, root, reasoning, "effort", "reasoning.effort", 0, conv) <
        0)
        goto done;
    if (rc_check_temperature_top_p(&e, root, conv) < 0) goto done;
    unsigned long long u;
    if ((r = rc_get_uint(&e, root, "top_logprobs", "", 255, &u)) < 0) goto done;
    if (r > 0 && u > 20) {
        rc_fail(&e, "top_logprobs: must be in [0, 20]");
        goto done;
    }
    if ((r = rc_get_uint(&e, root, "max_output_tokens", "", UINT32_MAX, &u)) < 0) goto done;
    if (r > 0 && (u < 1 || u > 393216)) {
        rc_fail(&e, "max_output_tokens: must be in [1, 393216]");
        goto done;
    }
    if (r > 0) conv->max_tokens = (int)u;
    if (rc_get_bool(&e, root, "stream", "", &conv->stream) < 0) goto done;
    const char *user = NULL;
    if (rc_get_string(&e, root, "user", "", &user) < 0) goto done;
    if (rc_get_object(&e, root, "text", "", &text) < 0) goto done;
    json_t *format = NULL;
    if (text && rc_get_object(&e, text, "format", "text.", &format) < 0) goto done;
    if (format) {
        const char *type = NULL;
        if (rc_get_string(&e, format, "type", "text.format.", &type) <= 0) {
            rc_fail(&e, "text.format.type: missing");
            goto done;
        }
        if (rc_streq(type, "text"))
            conv->format = RC_FORMAT_TEXT;
        else if (rc_streq(type, "json_object"))
            conv->format = RC_FORMAT_JSON_OBJECT;
        else if (rc_streq(type, "json_schema")) {
            json_t *schema = json_object_get(format, "schema");
            int strict = 0;
            if (!schema) {
                rc_fail(&e, "text.format.schema: missing");
                goto done;
            }
            if (rc_get_bool(&e, format, "strict", "text.format.", &strict) < 0) goto done;
            if (strict) {
                json_t *checked = rc_strict_parameters(&e, schema, "text.format");
                if (!checked) goto done;
                json_decref(checked);
            }
            conv->format = RC_FORMAT_JSON_SCHEMA;
            conv->schema = json_incref(schema);
        } else {
            rc_fail(&e, "text.format.type: unknown value \"%.40s\"", type);
            goto done;
        }
    }
    if (parse_tools(&e, root, conv, &any_strict) < 0) goto done;
    choice = json_object_get(root, "tool_choice");
    const char *kind = "auto", *name = NULL;
    if (choice && !json_is_null(choice)) {
        if (rc_json_is_text(choice)) {
            kind = json_string_value(choice);
            if (!rc_streq(kind, "auto") && !rc_streq(kind, "none") && !rc_streq(kind, "required")) {
                rc_fail(&e, "tool_choice: unknown value \"%.40s\"", kind);
                goto done;
            }
        } else if (json_is_object(choice)) {
            const char *type = NULL;
            if (rc_get_string(&e, choice, "type", "tool_choice.", &type) <= 0) {
                rc_fail(&e, "tool_choice.type: missing");
                goto done;
            }
            if (rc_streq(type, "function") || rc_streq(type, "custom")) {
                if (rc_get_string(&e, choice, "name", "tool_choice.", &name) <= 0) {
                    rc_fail(&e, "tool_choice.name: missing");
                    goto done;
                }
                kind = "function";
            } else if (!rc_streq(type, "web_search") && !rc_streq(type, "web_search_2025_08_26")) {
                rc_fail(&e, "tool_choice.type: unknown value \"%.40s\"", type);
                goto done;
            }
        } else {
            rc_fail(&e, "tool_choice: expected a string or an object");
            goto done;
        }
    }
    if (!input && !instructions) {
        rc_fail(&e, "request: either input or instructions must be provided");
        goto done;
    }
    if (json_is_array(input) && json_array_size(input) == 0) {
        rc_fail(&e, "input: the items array must not be empty");
        goto done;
    }
    if (rc_apply_tool_choice(&e, conv, kind, name) < 0) goto done;
    if (instructions && instructions[0]) {
        rc_message *m = rc_add_message(conv, RC_SYSTEM);
        if (!m || !(m->content = rc_strdup(instructions))) {
            rc_fail(&e, "out of memory");
            goto done;
        }
        m->content_len = strlen(instructions);
    }
    if (rc_json_is_text(input)) {
        rc_message *m = rc_add_message(conv, RC_USER);
        if (!m || !(m->content = rc_strndup(json_string_value(input), json_string_length(input)))) {
            rc_fail(&e, "out of memory");
            goto done;
        }
        m->content_len = json_string_length(input);
    } else if (input && parse_input(&e, input, conv) < 0) {
        goto done;
    }
    if (any_strict && format && conv->tool_choice != RC_CHOICE_NONE) {
        rc_fail(&e, "text.format: cannot be used with strict tools");
        goto done;
    }
    if (conv->format == RC_FORMAT_JSON_OBJECT && !rc_any_content_mentions_json(conv))
        rc_fail(&e, "text.format: json_object needs the word 'json' in some message");
done:
    return e.status;
}
