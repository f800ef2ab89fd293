/* Error objects in each API's own shape.
 * OpenAI (Chat Completions, Responses): {"error": {"message", "type", "param",
 * "code"}}, with type invalid_request_error (400, 404, 405, 413),
 * authentication_error (401), server_error (5xx) as OpenAI's API reference
 * names them. Anthropic (Messages): {"type": "error", "error": {"type",
 * "message"}}, with invalid_request_error, authentication_error, not_found_error,
 * request_too_large, rate_limit_error, overloaded_error, api_error as its
 * "Errors" page lists them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static const char *openai_type(unsigned status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static const char *anthropic_type(unsigned status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static const char *openai_code(unsigned status)
{
    switch (status) {
    case 401: return "invalid_api_key";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 413: return "request_too_large";
    case 429: return "rate_limit_exceeded";
    case 503: return "server_overloaded";
    default: return NULL;
    }
}

char *srv_error_body(srv_api api, unsigned status, const char *message, const char *param)
{
    json_t *root;
    if (api == API_ANTHROPIC) {
        root = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                         anthropic_type(status), "message", message);
    } else {
        const char *code = openai_code(status);
        root = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", message, "type",
                         openai_type(status), "param",
                         param && param[0] ? json_string(param) : json_null(), "code",
                         code ? json_string(code) : json_null());
    }
    /* A message that is not UTF-8 (it cannot be: the library's are) would
     * make json_pack fail; say something rather than nothing. */
    if (!root) root = json_pack("{s:{s:s}}", "error", "message", "error");
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

char *srv_error_sse(srv_endpoint ep, size_t sequence_number, const char *type, const char *message)
{
    json_t *data;
    const char *event = "error";
    if (ep == EP_MESSAGES) {
        data = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", type, "message",
                         message);
    } else if (ep == EP_RESPONSES) {
        data = json_pack("{s:s, s:s, s:s, s:n, s:I}", "type", "error", "code", type, "message",
                         message, "param", "sequence_number", (json_int_t)sequence_number);
    } else {
        data = json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", message, "type", type,
                         "param", "code");
        event = NULL;
    }
    char *json = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!json) return NULL;
    size_t n = strlen(json) + 64;
    char *s = malloc(n);
    if (s) {
        if (event)
            snprintf(s, n, "event: %s\ndata: %s\n\n", event, json);
        else
            snprintf(s, n, "data: %s\n\n", json);
    }
    free(json);
    return s;
}

void srv_error_param(const char *message, char *buf, size_t cap)
{
    buf[0] = 0;
    const char *colon = strstr(message, ": ");
    if (!colon || colon == message || (size_t)(colon - message) >= cap) return;
    for (const char *p = message; p < colon; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '.' || c == '[' || c == ']';
        if (!ok) return; /* prose, not a field path */
    }
    memcpy(buf, message, (size_t)(colon - message));
    buf[colon - message] = 0;
}
