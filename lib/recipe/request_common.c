/* Shared request-conversion pieces: see request_common.h. */
#include "recipe/request_common.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rc_fail(rc_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (e->status == DI_OK) {
        e->status = DI_ERR_INVALID_REQUEST;
        vsnprintf(e->msg, e->size, fmt, ap);
    }
    va_end(ap);
    return -1;
}

static const char *type_name(json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

static json_t *field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

#define GETTER(fn, ctype, check, what, assign)                                                     \
    int fn(rc_err *e, json_t *obj, const char *key, const char *path, ctype *out)                  \
    {                                                                                              \
        json_t *v = field(obj, key);                                                               \
        if (!v) return 0;                                                                          \
        if (!(check)) return rc_fail(e, "%s%s: expected %s, got %s", path, key, what, type_name(v)); \
        assign;                                                                                    \
        return 1;                                                                                  \
    }

GETTER(rc_get_string, const char *, json_is_string(v), "a string", *out = json_string_value(v))
GETTER(rc_get_bool, int, json_is_boolean(v), "a boolean", *out = json_is_true(v))
GETTER(rc_get_number, double, json_is_number(v), "a number", *out = json_number_value(v))
GETTER(rc_get_object, json_t *, json_is_object(v), "an object", *out = v)
GETTER(rc_get_array, json_t *, json_is_array(v), "an array", *out = v)

int rc_get_uint(rc_err *e, json_t *obj, const char *key, const char *path, unsigned long long max,
                unsigned long long *out)
{
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (unsigned long long)json_integer_value(v) > max)
        return rc_fail(e, "%s%s: expected an integer in [0, %llu]", path, key, max);
    *out = (unsigned long long)json_integer_value(v);
    return 1;
}

char *rc_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

int rc_parse_model(rc_err *e, json_t *root, rc_conversation *conv)
{
    const char *model = NULL;
    int r = rc_get_string(e, root, "model", "", &model);
    if (r < 0) return -1;
    if (r == 0) return rc_fail(e, "model: missing");
    if (strcmp(model, "DeepSeek-V4-Pro") == 0) conv->model = RC_MODEL_V4_PRO;
    else if (strcmp(model, "DeepSeek-V4.1-Flash") == 0) conv->model = RC_MODEL_V41_FLASH;
    else
        return rc_fail(e, "model: \"%.80s\" is not a supported model (DeepSeek-V4-Pro, "
                          "DeepSeek-V4.1-Flash)", model);
    return 0;
}

int rc_parse_effort(rc_err *e, const char *s, const char *path, rc_effort *out, int *none)
{
    static const struct {
        const char *name;
        rc_effort effort;
    } map[] = {{"none", RC_EFFORT_HIGH},    {"minimal", RC_EFFORT_LOW}, {"low", RC_EFFORT_LOW},
               {"medium", RC_EFFORT_HIGH},  {"high", RC_EFFORT_HIGH},   {"xhigh", RC_EFFORT_XHIGH},
               {"ultra", RC_EFFORT_MAX},    {"max", RC_EFFORT_MAX}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(s, map[i].name) == 0) {
            *out = map[i].effort;
            *none = i == 0;
            return 0;
        }
    return rc_fail(e, "%s: unknown effort \"%.40s\" (none, minimal, low, medium, high, xhigh, "
                      "ultra, max)", path, s);
}

void rc_resolve_thinking(rc_conversation *conv, int thinking_switch, int have_effort,
                         rc_effort effort, int effort_none)
{
    if (thinking_switch >= 0) conv->thinking = thinking_switch;
    else conv->thinking = !(have_effort && effort_none);
    conv->effort = !conv->thinking ? RC_EFFORT_NONE : have_effort ? effort : RC_EFFORT_HIGH;
}

int rc_check_tool_name(rc_err *e, const char *name, const char *path)
{
    size_t n = strlen(name);
    if (n == 0) return rc_fail(e, "%s: empty string", path);
    if (n > 128) return rc_fail(e, "%s: longer than 128 characters", path);
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '_' && name[i] != '-')
            return rc_fail(e, "%s: must match ^[a-zA-Z0-9_-]+$", path);
    return 0;
}

int rc_check_parameters(rc_err *e, json_t *params, const char *name)
{
    if (!json_is_object(params))
        return rc_fail(e, "tool '%s': parameters must be a JSON Schema object", name);
    if (json_object_size(params) == 0) return 0;
    json_t *type = json_object_get(params, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "object") != 0)
        return rc_fail(e, "tool '%s': the parameters schema must have type \"object\"", name);
    return 0;
}

int rc_apply_tool_choice(rc_err *e, rc_conversation *conv, const char *kind, const char *name)
{
    if (conv->n_tools == 0) {
        conv->tool_choice = strcmp(kind, "none") == 0 ? RC_CHOICE_NONE : RC_CHOICE_AUTO;
        return 0;
    }
    if (strcmp(kind, "auto") == 0) {
        conv->tool_choice = RC_CHOICE_AUTO;
        return 0;
    }
    if (strcmp(kind, "none") == 0) {
        conv->tool_choice = RC_CHOICE_NONE;
        for (size_t i = 0; i < conv->n_tools; i++) rc_tool_clear(&conv->tools[i]);
        conv->n_tools = 0;
        return 0;
    }
    if (conv->thinking) return rc_fail(e, "tool_choice: thinking mode does not support \"%s\"", kind);
    conv->tool_choice = RC_CHOICE_REQUIRED;
    if (strcmp(kind, "required") == 0) return 0;
    size_t keep = conv->n_tools;
    for (size_t i = 0; i < conv->n_tools; i++)
        if (strcmp(conv->tools[i].name, name) == 0) keep = i;
    if (keep == conv->n_tools)
        return rc_fail(e, "tool_choice: no function named '%.128s' is declared in tools", name);
    for (size_t i = 0; i < conv->n_tools; i++)
        if (i != keep) rc_tool_clear(&conv->tools[i]);
    conv->tools[0] = conv->tools[keep];
    if (keep != 0) memset(&conv->tools[keep], 0, sizeof conv->tools[keep]);
    conv->n_tools = 1;
    return 0;
}

static int mentions_json(const char *s)
{
    for (; *s; s++)
        if (tolower((unsigned char)s[0]) == 'j' && s[1] && tolower((unsigned char)s[1]) == 's' &&
            s[2] && tolower((unsigned char)s[2]) == 'o' && s[3] &&
            tolower((unsigned char)s[3]) == 'n')
            return 1;
    return 0;
}

int rc_any_content_mentions_json(const rc_conversation *conv)
{
    for (size_t i = 0; i < conv->n_messages; i++)
        if (conv->messages[i].content && mentions_json(conv->messages[i].content)) return 1;
    return 0;
}
