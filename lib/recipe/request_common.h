/* Pieces every request converter shares (request_common.c): typed field access
 * with errors that name the field, model names, thinking and effort, tool
 * declarations and tool choice (docs/recipe-spec.md §2–§4). */
#ifndef DI_RECIPE_REQUEST_COMMON_H
#define DI_RECIPE_REQUEST_COMMON_H

#include <string.h>

#include "recipe/conversation.h"

/* Error sink: the first failure wins. */
typedef struct rc_err {
    di_status status;
    char *msg;
    size_t size;
} rc_err;

int rc_fail(rc_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 when the two strings are equal. */
static inline int rc_streq(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/* Optional typed fields: return 1 when present (not absent, not null) and of the
 * right type, 0 when absent or null, -1 (with the error set) on a wrong type. */
int rc_get_string(rc_err *e, json_t *obj, const char *key, const char *path, const char **out);
int rc_get_bool(rc_err *e, json_t *obj, const char *key, const char *path, int *out);
int rc_get_number(rc_err *e, json_t *obj, const char *key, const char *path, double *out);
/* An integer in [0, max]. */
int rc_get_uint(rc_err *e, json_t *obj, const char *key, const char *path, unsigned long long max,
                unsigned long long *out);
int rc_get_object(rc_err *e, json_t *obj, const char *key, const char *path, json_t **out);
int rc_get_array(rc_err *e, json_t *obj, const char *key, const char *path, json_t **out);

char *rc_strdup(const char *s);

/** Copies n bytes of s (which may hold U+0000) and appends a NUL; malloc'd,
 *  caller frees; NULL when out of memory. */
char *rc_strndup(const char *s, size_t n);

/* Model name → model (§3.1). */
int rc_parse_model(rc_err *e, json_t *root, rc_conversation *conv);
/* Effort string (§3.3): 0 and *out on success, -1 with an error otherwise.
 * *none is set for "none". */
int rc_parse_effort(rc_err *e, const char *s, const char *path, rc_effort *out, int *none);
/* Decide thinking and effort (§3.2–3.3). thinking_switch: -1 absent, 0 off, 1 on. */
void rc_resolve_thinking(rc_conversation *conv, int thinking_switch, int have_effort,
                         rc_effort effort, int effort_none);
/* The thinking switch (Chat and Messages `thinking`: {type, budget_tokens}) and
 * the effort string at `effort_key` inside `effort_obj` (may be root), then
 * thinking and effort resolved into conv (§3.2–3.3). 0, or -1 with the error. */
int rc_parse_thinking_and_effort(rc_err *e, json_t *root, json_t *effort_obj,
                                 const char *effort_key, const char *effort_path, int has_switch,
                                 rc_conversation *conv);
/* temperature in [0, 2] and top_p in (0, 1] when present (§3.4), recorded in conv. */
int rc_check_temperature_top_p(rc_err *e, json_t *root, rc_conversation *conv);
/* Validate a tool name (§4.1); path names the field for messages. */
int rc_check_tool_name(rc_err *e, const char *name, const char *path);
/* Validate a tool's parameters schema (top-level object rule, §4.1). */
int rc_check_parameters(rc_err *e, json_t *params, const char *name);
/* A strict tool's parameters, rewritten into the canonical strict form (§4.3);
 * NULL parameters give the empty object schema. NULL with an error otherwise. */
json_t *rc_strict_parameters(rc_err *e, json_t *params, const char *name);
/* Apply tool_choice (§4.2): kind "auto"/"none"/"required"/"function" with a name. */
int rc_apply_tool_choice(rc_err *e, rc_conversation *conv, const char *kind, const char *name);
/* An image URL the V4.1 model accepts (§11): http(s) up to 8192 bytes, or a
 * base64 data URL of a png, jpeg, jpg, gif or webp image. */
int rc_check_image_url(rc_err *e, const char *url, const char *path);
/* The "json" word check for json_object formats (§6.4), case-insensitive. */
int rc_any_content_mentions_json(const rc_conversation *conv);

#endif
