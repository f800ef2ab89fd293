/* Shared request-conversion pieces: see request_common.h. */
#include "recipe/request_common.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

static int wrong_type(rc_err *e, const char *path, const char *key, const char *what, json_t *v)
{
    return rc_fail(e, "%s%s: expected %s, got %s", path, key, what, type_name(v));
}

int rc_get_string(rc_err *e, json_t *obj, const char *key, const char *path, const char **out)
{
    json_t *v = field(obj, key);
    if (!v) return 0;
    const char *s = rc_json_is_text(v) ? json_string_value(v) : NULL;
    if (!s) return wrong_type(e, path, key, "a string", v);
    *out = s;
    return 1;
}

int rc_get_bool(rc_err *e, json_t *obj, const char *key, const char *path, int *out)
{
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return wrong_type(e, path, key, "a boolean", v);
    *out = json_is_true(v);
    return 1;
}

int rc_get_number(rc_err *e, json_t *obj, const char *key, const char *path, double *out)
{
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_number(v)) return wrong_type(e, path, key, "a number", v);
    *out = json_number_value(v);
    return 1;
}

int rc_get_object(rc_err *e, json_t *obj, const char *key, const char *path, json_t **out)
{
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_object(v)) return wrong_type(e, path, key, "an object", v);
    *out = v;
    return 1;
}

int rc_get_array(rc_err *e, json_t *obj, const char *key, const char *path, json_t **out)
{
    json_t *v = field(obj, key);
    if (!v) return 0;
    if (!json_is_array(v)) return wrong_type(e, path, key, "an array", v);
    *out = v;
    return 1;
}

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

char *rc_strndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
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
    if (r == 0 || !model) return rc_fail(e, "model: missing");
    if (strcmp(model, "DeepSeek-V4-Pro") == 0)
        conv->model = RC_MODEL_V4_PRO;
    else if (strcmp(model, "DeepSeek-V4.1-Flash") == 0)
        conv->model = RC_MODEL_V41_FLASH;
    else
        return rc_fail(e,
                       "model: \"%.80s\" is not a supported model (DeepSeek-V4-Pro, "
                       "DeepSeek-V4.1-Flash)",
                       model);
    return 0;
}

int rc_parse_effort(rc_err *e, const char *s, const char *path, rc_effort *out, int *none)
{
    static const struct {
        const char *name;
        rc_effort effort;
    } map[] = {{"none", RC_EFFORT_HIGH},   {"minimal", RC_EFFORT_LOW}, {"low", RC_EFFORT_LOW},
               {"medium", RC_EFFORT_HIGH}, {"high", RC_EFFORT_HIGH},   {"xhigh", RC_EFFORT_XHIGH},
               {"ultra", RC_EFFORT_MAX},   {"max", RC_EFFORT_MAX}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(s, map[i].name) == 0) {
            *out = map[i].effort;
            *none = i == 0;
            return 0;
        }
    return rc_fail(e,
                   "%s: unknown effort \"%.40s\" (none, minimal, low, medium, high, xhigh, "
                   "ultra, max)",
                   path, s);
}

void rc_resolve_thinking(rc_conversation *conv, int thinking_switch, int have_effort,
                         rc_effort effort, int effort_none)
{
    if (thinking_switch >= 0)
        conv->thinking = thinking_switch;
    else
        conv->thinking = !(have_effort && effort_none);
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

/* The structural part of the JSON Schema meta-schema (draft 2020-12): a schema is
 * an object or a boolean; the keywords that hold schemas hold schemas, the ones
 * that hold lists of them hold non-empty arrays, `type` names JSON types. */
static int is_schema(json_t *s, int depth)
{
    static const char *const single[] = {"items",
                                         "additionalProperties",
                                         "not",
                                         "if",
                                         "then",
                                         "else",
                                         "contains",
                                         "propertyNames",
                                         "additionalItems",
                                         "unevaluatedItems",
                                         "unevaluatedProperties"};
    static const char *const maps[] = {"properties", "patternProperties", "$defs", "definitions",
                                       "dependentSchemas"};
    static const char *const lists[] = {"anyOf", "allOf", "oneOf", "prefixItems"};
    static const char *const types[] = {"array",  "boolean", "integer", "null",
                                        "number", "object",  "string"};
    if (json_is_boolean(s)) return 1;
    if (!json_is_object(s) || depth > 200) return 0;
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++) {
        json_t *v = json_object_get(s, single[i]);
        if (!v) continue;
        if (strcmp(single[i], "items") == 0 && json_is_array(v)) {
            for (size_t k = 0; k < json_array_size(v); k++)
                if (!is_schema(json_array_get(v, k), depth + 1)) return 0;
        } else if (!is_schema(v, depth + 1)) {
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        json_t *v = json_object_get(s, maps[i]);
        if (!v) continue;
        if (!json_is_object(v)) return 0;
        const char *key;
        json_t *sub;
        json_object_foreach(v, key, sub) if (!is_schema(sub, depth + 1)) return 0;
    }
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        json_t *v = json_object_get(s, lists[i]);
        if (!v) continue;
        if (!json_is_array(v) || json_array_size(v) == 0) return 0;
        for (size_t k = 0; k < json_array_size(v); k++)
            if (!is_schema(json_array_get(v, k), depth + 1)) return 0;
    }
    json_t *type = json_object_get(s, "type");
    if (type) {
        size_t n = json_is_array(type) ? json_array_size(type) : 1;
        if (json_is_array(type) && n == 0) return 0;
        for (size_t k = 0; k < n; k++) {
            json_t *t = json_is_array(type) ? json_array_get(type, k) : type;
            size_t j = 0;
            while (j < 7 && !(json_is_string(t) && strcmp(json_string_value(t), types[j]) == 0))
                j++;
            if (j == 7) return 0;
        }
    }
    json_t *required = json_object_get(s, "required");
    if (required) {
        if (!json_is_array(required)) return 0;
        for (size_t k = 0; k < json_array_size(required); k++)
            if (!json_is_string(json_array_get(required, k))) return 0;
    }
    json_t *en = json_object_get(s, "enum");
    if (en && !json_is_array(en)) return 0;
    return 1;
}

int rc_check_parameters(rc_err *e, json_t *params, const char *name)
{
    if (!is_schema(params, 0))
        return rc_fail(e, "tool '%s': parameters is not a valid JSON Schema", name);
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
    if (conv->thinking)
        return rc_fail(e, "tool_choice: thinking mode does not support \"%s\"", kind);
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

static int valid_base64(const char *s)
{
    size_t n = strlen(s), pad = 0;
    if (n % 4) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '=') {
            if (i < n - 2) return 0;
            pad++;
            continue;
        }
        if (pad || !(isalnum((unsigned char)c) || c == '+' || c == '/')) return 0;
    }
    return 1;
}

int rc_check_image_url(rc_err *e, const char *url, const char *path)
{
    if (strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0) {
        if (strlen(url) > 8192) return rc_fail(e, "%surl: longer than 8192 bytes", path);
        return 0;
    }
    static const char *types[] = {"png", "jpeg", "jpg", "gif", "webp"};
    if (strncmp(url, "data:image/", 11) == 0) {
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            size_t n = strlen(types[i]);
            if (strncmp(url + 11, types[i], n) == 0 && strncmp(url + 11 + n, ";base64,", 8) == 0) {
                if (!valid_base64(url + 11 + n + 8))
                    return rc_fail(e, "%surl: invalid base64 data", path);
                return 0;
            }
        }
    }
    return rc_fail(e,
                   "%surl: unsupported image URL (http, https, or a base64 data URL of a "
                   "png, jpeg, gif or webp image)",
                   path);
}

/* Copy key from src to dst when present. */
static int copy_key(json_t *dst, json_t *src, const char *key)
{
    json_t *v = json_object_get(src, key);
    return v ? json_object_set(dst, key, v) : 0;
}

static json_t *strict_schema(rc_err *e, json_t *s, const char *name, int top);

static json_t *strict_object(rc_err *e, json_t *s, const char *name, int top)
{
    json_t *props = json_object_get(s, "properties"),
           *addl = json_object_get(s, "additionalProperties");
    json_t *req = json_object_get(s, "required");
    if (addl && !json_is_boolean(addl)) {
        rc_fail(e, "tool '%s': additionalProperties must be false in a strict schema", name);
        return NULL;
    }
    if (json_is_true(addl)) {
        rc_fail(e, "tool '%s': additionalProperties should not be true", name);
        return NULL;
    }
    if (props && !json_is_object(props)) {
        rc_fail(e, "tool '%s': properties must be an object", name);
        return NULL;
    }
    if (!top && json_object_size(props) == 0) {
        rc_fail(e, "tool '%s': an object with no properties is not allowed", name);
        return NULL;
    }
    json_t *out = json_object(), *oprops = json_object(), *oreq = json_array();
    const char *key;
    json_t *value;
    json_object_foreach(props, key, value)
    {
        json_t *n = strict_schema(e, value, name, 0);
        if (!n) goto fail;
        json_object_set_new(oprops, key, n);
        json_array_append_new(oreq, json_string(key));
    }
    if (req) {
        if (!json_is_array(req)) {
            rc_fail(e, "tool '%s': required must be an array", name);
            goto fail;
        }
        for (size_t i = 0; i < json_array_size(req); i++) {
            json_t *r = json_array_get(req, i);
            if (!json_is_string(r)) {
                rc_fail(e, "tool '%s': required must list property names", name);
                goto fail;
            }
            for (size_t j = 0; j < i; j++)
                if (json_equal(json_array_get(req, j), r)) {
                    rc_fail(e, "tool '%s': duplicate required property '%.60s'", name,
                            json_string_value(r));
                    goto fail;
                }
            if (!json_object_get(props, json_string_value(r))) {
                rc_fail(e, "tool '%s': required property '%.60s' not found in object", name,
                        json_string_value(r));
                goto fail;
            }
        }
        if (json_array_size(req) != json_object_size(props)) {
            rc_fail(e, "tool '%s': required properties must match all properties", name);
            goto fail;
        }
    }
    json_object_set_new(out, "type", json_string("object"));
    json_object_set_new(out, "properties", oprops);
    json_object_set_new(out, "additionalProperties", json_false());
    json_object_set_new(out, "required", oreq);
    copy_key(out, s, "description");
    return out;
fail:
    json_decref(out);
    json_decref(oprops);
    json_decref(oreq);
    return NULL;
}

/* The canonical form deepseek-recipe rewrites a strict tool's schema into, and
 * shows in the prompt (docs/recipe-spec.md §4.3). NULL with an error otherwise. */
static json_t *strict_schema(rc_err *e, json_t *s, const char *name, int top)
{
    static const char *const simple[] = {"string", "number", "integer", "boolean", "null"};
    if (!json_is_object(s)) {
        rc_fail(e, "tool '%s': invalid strict schema (expected an object)", name);
        return NULL;
    }
    json_t *type = json_object_get(s, "type"), *out;
    if (json_object_get(s, "$ref")) {
        out = json_object();
        copy_key(out, s, "$ref");
        return out;
    }
    if (json_is_array(type)) {
        for (size_t i = 0; i < json_array_size(type); i++) {
            json_t *t = json_array_get(type, i);
            size_t k = 0;
            while (k < 5 && !(json_is_string(t) && strcmp(json_string_value(t), simple[k]) == 0))
                k++;
            if (k == 5) {
                rc_fail(e, "tool '%s': a type list may hold only simple types", name);
                return NULL;
            }
        }
        out = json_object();
        copy_key(out, s, "type");
        return out;
    }
    if (!type) {
        json_t *any = json_object_get(s, "anyOf");
        if (!json_is_array(any)) {
            rc_fail(e, "tool '%s': one of type, anyOf, $ref is required", name);
            return NULL;
        }
        json_t *list = json_array();
        for (size_t i = 0; i < json_array_size(any); i++) {
            json_t *n = strict_schema(e, json_array_get(any, i), name, 0);
            if (!n) {
                json_decref(list);
                return NULL;
            }
            json_array_append_new(list, n);
        }
        out = json_object();
        json_object_set_new(out, "anyOf", list);
        copy_key(out, s, "description");
        return out;
    }
    const char *t = json_string_value(type);
    if (!t) {
        rc_fail(e, "tool '%s': type must be a string", name);
        return NULL;
    }
    if (top && strcmp(t, "object") != 0) {
        rc_fail(e, "tool '%s': the top level of the parameters schema must be an object", name);
        return NULL;
    }
    if (strcmp(t, "object") == 0) return strict_object(e, s, name, top);
    out = json_object();
    json_object_set(out, "type", type);
    if (strcmp(t, "string") == 0) {
        json_t *format = json_object_get(s, "format");
        static const char *const formats[] = {"email", "hostname", "ipv4", "ipv6", "uuid"};
        if (format) {
            size_t k = 0;
            while (k < 5 &&
                   !(json_is_string(format) && strcmp(json_string_value(format), formats[k]) == 0))
                k++;
            if (k == 5) {
                json_decref(out);
                rc_fail(e, "tool '%s': string format must be email, hostname, ipv4, ipv6 or uuid",
                        name);
                return NULL;
            }
        }
        copy_key(out, s, "description");
        copy_key(out, s, "pattern");
        copy_key(out, s, "format");
        copy_key(out, s, "enum");
    } else if (strcmp(t, "number") == 0 || strcmp(t, "integer") == 0) {
        static const char *const keys[] = {"description",      "const",     "default",
                                           "minimum",          "maximum",   "exclusiveMinimum",
                                           "exclusiveMaximum", "multipleOf"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) copy_key(out, s, keys[k]);
    } else if (strcmp(t, "boolean") == 0 || strcmp(t, "null") == 0) {
        copy_key(out, s, "description");
    } else if (strcmp(t, "array") == 0) {
        json_t *items = json_object_get(s, "items");
        if (!items) {
            json_decref(out);
            rc_fail(e, "tool '%s': an array schema needs items", name);
            return NULL;
        }
        json_t *n = strict_schema(e, items, name, 0);
        if (!n) {
            json_decref(out);
            return NULL;
        }
        json_object_set_new(out, "items", n);
        copy_key(out, s, "description");
    } else {
        json_decref(out);
        rc_fail(e, "tool '%s': unknown type \"%.40s\"", name, t);
        return NULL;
    }
    return out;
}

json_t *rc_strict_parameters(rc_err *e, json_t *params, const char *name)
{
    if (!params) {
        json_t *out = json_object();
        json_object_set_new(out, "type", json_string("object"));
        json_object_set_new(out, "properties", json_object());
        json_object_set_new(out, "additionalProperties", json_false());
        json_object_set_new(out, "required", json_array());
        return out;
    }
    return strict_schema(e, params, name, 1);
}

int rc_parse_thinking_and_effort(rc_err *e, json_t *root, json_t *effort_obj,
                                 const char *effort_key, const char *effort_path, int has_switch,
                                 rc_conversation *conv)
{
    int thinking_switch = -1, have_effort = 0, effort_none = 0;
    rc_effort effort = RC_EFFORT_HIGH;
    json_t *thinking = NULL;
    if (has_switch && rc_get_object(e, root, "thinking", "", &thinking) < 0) return -1;
    if (thinking) {
        const char *type = NULL;
        unsigned long long budget;
        if (rc_get_string(e, thinking, "type", "thinking.", &type) <= 0 || !type)
            return rc_fail(e, "thinking.type: missing");
        if (rc_streq(type, "enabled") || rc_streq(type, "adaptive"))
            thinking_switch = 1;
        else if (rc_streq(type, "disabled"))
            thinking_switch = 0;
        else
            return rc_fail(e, "thinking.type: unknown value \"%.40s\"", type);
        if (rc_get_uint(e, thinking, "budget_tokens", "thinking.", UINT64_MAX, &budget) < 0)
            return -1;
    }
    const char *s = NULL;
    int r = effort_obj ? rc_get_string(e, effort_obj, effort_key, "", &s) : 0;
    if (r < 0) return -1;
    if (r > 0 && s) {
        if (rc_parse_effort(e, s, effort_path, &effort, &effort_none) < 0) return -1;
        have_effort = 1;
    }
    rc_resolve_thinking(conv, thinking_switch, have_effort, effort, effort_none);
    return 0;
}

int rc_check_temperature_top_p(rc_err *e, json_t *root, rc_conversation *conv)
{
    double x = 0;
    int r;
    if ((r = rc_get_number(e, root, "temperature", "", &x)) < 0) return -1;
    if (r > 0 && (x < 0 || x > 2)) return rc_fail(e, "temperature: must be in [0, 2]");
    if (r > 0) conv->has_temperature = 1, conv->temperature = (float)x;
    if ((r = rc_get_number(e, root, "top_p", "", &x)) < 0) return -1;
    if (r > 0 && (x <= 0 || x > 1)) return rc_fail(e, "top_p: must be in (0, 1]");
    if (r > 0) conv->has_top_p = 1, conv->top_p = (float)x;
    return 0;
}
