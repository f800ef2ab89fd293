/* The HTTP side of deepinfer serve: routing, authentication, limits, request
 * bodies into di_submit, engine events out to the connections.
 *
 * Every function here runs on the server's one thread (serve.c), inside
 * libmicrohttpd's callbacks (MHD_run) or the engine's (di_poll). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"

/* ---- requests: lifetime ---------------------------------------------------- */

static srv_request *request_new(srv *s, struct MHD_Connection *conn, const char *url,
                                const char *method)
{
    srv_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->s = s;
    r->conn = conn;
    r->refs = 1; /* the HTTP daemon's, dropped in srv_completed */
    r->fd = -1;
    r->t_start = srv_now();
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->sc = ci ? ci->socket_context : NULL;
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r->fd = ci->connect_fd;
    snprintf(r->remote, sizeof r->remote, "-");
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, r->remote,
                      sizeof r->remote);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
                      r->remote, sizeof r->remote);
    }
    r->next = s->live;
    if (s->live) s->live->prev = r;
    s->live = r;
    return r;
}

void srv_request_unref(srv_request *r)
{
    if (--r->refs > 0) return;
    srv *s = r->s;
    if (r->prev)
        r->prev->next = r->next;
    else
        s->live = r->next;
    if (r->next) r->next->prev = r->prev;
    free(r->body);
    free(r->out);
    free(r->response_json);
    free(r);
}

/* ---- suspension: a connection waits for the engine ------------------------ */

static void suspend(srv_request *r)
{
    if (r->suspended) return;
    MHD_suspend_connection(r->conn);
    r->suspended = 1;
    /* libmicrohttpd does not watch a suspended socket; the server does, for a
     * hang-up only (EPOLLRDHUP; EPOLLIN would fire on pipelined requests), so
     * a client that leaves is cancelled at once. */
    if (r->fd >= 0) {
        struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = r};
        r->in_epoll = epoll_ctl(r->s->epoll_fd, EPOLL_CTL_ADD, r->fd, &ev) == 0;
    }
}

static void resume(srv_request *r)
{
    if (!r->suspended || !r->s->daemon) return;
    if (r->in_epoll) epoll_ctl(r->s->epoll_fd, EPOLL_CTL_DEL, r->fd, NULL);
    r->in_epoll = 0;
    r->suspended = 0;
    MHD_resume_connection(r->conn);
}

void srv_client_hangup(srv_request *r)
{
    if (!r->suspended) return;
    if (!r->client_gone && r->in_engine) {
        di_cancel(r->s->engine, r->id, NULL);
        r->s->metrics.client_disconnects++;
    }
    r->client_gone = 1;
    resume(r); /* libmicrohttpd then finds the socket closed and ends the request */
}

void srv_cancel_all(srv *s)
{
    for (srv_request *r = s->live; r; r = r->next)
        if (r->in_engine) di_cancel(s->engine, r->id, NULL);
    s->cancelled_all = 1;
}

/* ---- replies ---------------------------------------------------------------- */

/* Queue `body` (len bytes, malloc'ed: the response takes it) with `status`. */
static enum MHD_Result reply(srv_request *r, unsigned status, const char *content_type, char *body,
                             size_t len)
{
    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\"}}";
        body = strdup(oom);
        if (!body) return MHD_NO;
        len = strlen(body);
        status = 503;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (status == 405)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
                                r->ep <= EP_COUNT_TOKENS ? "POST" : "GET, HEAD");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 503 || status == 429) MHD_add_response_header(resp, "Retry-After", "1");
    r->http_status = status;
    r->bytes_out = len;
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_json(srv_request *r, unsigned status, char *json)
{
    return reply(r, status, "application/json", json, json ? strlen(json) : 0);
}

__attribute__((format(printf, 4, 5))) static enum MHD_Result
reply_error(srv_request *r, unsigned status, const char *param, const char *fmt, ...)
{
    char message[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    snprintf(r->message, sizeof r->message, "%s", message);
    return reply_json(r, status, srv_error_body(r->api, status, message, param));
}

/* ---- routing and checks that need no body --------------------------------- */

static srv_endpoint route(const char *url, int *post)
{
    static const struct {
        const char *path;
        srv_endpoint ep;
        int post;
    } routes[] = {
        {"/v1/chat/completions", EP_CHAT, 1}, {"/v1/messages", EP_MESSAGES, 1},
        {"/v1/responses", EP_RESPONSES, 1},   {"/v1/messages/count_tokens", EP_COUNT_TOKENS, 1},
        {"/v1/models", EP_MODELS, 0},         {"/health", EP_HEALTH, 0},
        {"/metrics", EP_METRICS, 0},          {"/", EP_PAGE, 0},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].path) == 0) {
            *post = routes[i].post;
            return routes[i].ep;
        }
    }
    *post = 0;
    return EP_OTHER;
}

/* Compares in time that depends only on the key's length, not on where the
 * given value first differs. */
static int key_equal(const char *given, size_t n, const char *key)
{
    size_t k = strlen(key);
    unsigned diff = (unsigned)(n != k);
    for (size_t i = 0; i < k; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < n ? given[i] : 0);
    return diff == 0;
}

/* Authorization: Bearer KEY (OpenAI's SDKs) or x-api-key: KEY (Anthropic's). */
static int authorized(srv_request *r)
{
    const char *key = r->s->cfg->api_key;
    if (!key) return 1;
    int ok = 0;
    const char *auth =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) {
        const char *v = auth + 7;
        while (*v == ' ') v++;
        ok |= key_equal(v, strlen(v), key);
    }
    const char *x = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "x-api-key");
    if (x) ok |= key_equal(x, strlen(x), key);
    return ok;
}

static enum MHD_Result reply_models(srv_request *r)
{
    /* One list both SDKs read: OpenAI's {object, data: [{id, object, created,
     * owned_by}]} and Anthropic's {data: [{type, id, display_name,
     * created_at}], has_more, first_id, last_id}. */
    srv *s = r->s;
    char created_at[32];
    time_t t = (time_t)s->started_wall;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(created_at, sizeof created_at, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:s}", "id", s->model_id, "object",
                          "model", "created", (json_int_t)t, "owned_by", "deepinfer", "type",
                          "model", "display_name", s->model_id, "created_at", created_at);
    json_t *root = json_pack("{s:s, s:[o], s:b, s:s, s:s}", "object", "list", "data", m, "has_more",
                             0, "first_id", s->model_id, "last_id", s->model_id);
    char *body = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return reply_json(r, 200, body);
}

static enum MHD_Result reply_get(srv_request *r)
{
    srv *s = r->s;
    switch (r->ep) {
    case EP_MODELS: return reply_models(r);
    case EP_HEALTH:
        return reply_json(
            r, s->shutting_down ? 503 : 200,
            strdup(s->shutting_down ? "{\"status\":\"shutting down\"}" : "{\"status\":\"ok\"}"));
    case EP_METRICS: {
        char *text = srv_metrics_render(s);
        return reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", text,
                     text ? strlen(text) : 0);
    }
    case EP_PAGE: {
        struct MHD_Response *resp = MHD_create_response_from_buffer(
            srv_page_html_len, (void *)srv_page_html, MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'self'; script-src 'unsafe-inline'; style-src "
                                "'unsafe-inline'; connect-src 'self'");
        r->http_status = 200;
        r->bytes_out = srv_page_html_len;
        enum MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    default: return reply_error(r, 404, NULL, "no such endpoint: %s %s", r->method, r->path);
    }
}

/* ---- generation: engine events to the connection --------------------------- */

static int out_append(srv_request *r, const char *s, size_t n)
{
    if (r->out_off > 0 && r->out_off == r->out_len) r->out_off = r->out_len = 0;
    if (r->out_len + n > r->out_cap) {
        if (r->out_off > 0) { /* reclaim what was sent */
            memmove(r->out, r->out + r->out_off, r->out_len - r->out_off);
            r->out_len -= r->out_off;
            r->out_off = 0;
        }
        if (r->out_len + n > r->out_cap) {
            size_t cap = (r->out_len + n) * 2;
            char *p = realloc(r->out, cap);
            if (!p) return -1;
            r->out = p;
            r->out_cap = cap;
        }
    }
    memcpy(r->out + r->out_len, s, n);
    r->out_len += n;
    return 0;
}

/* The error type a failed generation reports, in the endpoint's words. */
static const char *failure_type(const srv_request *r)
{
    int anthropic = r->ep == EP_MESSAGES;
    if (r->status == DI_ERR_CANCELLED) return anthropic ? "overloaded_error" : "server_error";
    if (r->status == DI_ERR_CONTEXT_LENGTH) return "invalid_request_error";
    return anthropic ? "api_error" : "server_error";
}

static void finish_nonstream(srv_request *r)
{
    srv *s = r->s;
    if (r->client_gone) return;
    if (r->ep == EP_COUNT_TOKENS) {
        /* count_tokens submits the body and cancels it at once: the prompt was
         * rendered and tokenized by the engine, so the count is exactly the
         * prompt the request would prefill (the model's default system turn
         * included). */
        char body[64];
        snprintf(body, sizeof body, "{\"input_tokens\":%u}", r->prompt_tokens);
        reply_json(r, 200, strdup(body));
        return;
    }
    if (r->status == DI_OK && r->response_json) {
        reply_json(r, 200, r->response_json);
        r->response_json = NULL;
        return;
    }
    unsigned code = r->status == DI_ERR_CONTEXT_LENGTH ? 400
                    : r->status == DI_ERR_CANCELLED    ? 503
                                                       : 500;
    const char *why = r->status == DI_ERR_CANCELLED && s->shutting_down
                          ? "the server is shutting down"
                          : r->message;
    reply_error(r, code, NULL, "%s: %.600s", di_status_string(r->status), why);
}

static void finish_stream(srv_request *r)
{
    if (r->client_gone || r->status == DI_OK) return;
    char message[640];
    snprintf(message, sizeof message, "%s: %.600s", di_status_string(r->status),
             r->status == DI_ERR_CANCELLED && r->s->shutting_down ? "the server is shutting down"
                                                                  : r->message);
    char *sse = srv_error_sse(r->ep, r->n_chunks, failure_type(r), message);
    if (sse) out_append(r, sse, strlen(sse));
    free(sse);
    snprintf(r->message, sizeof r->message, "%s", message);
}

static void on_event(void *user, const di_event *ev)
{
    srv_request *r = user;
    srv *s = r->s;
    double now = srv_now();
    size_t n;
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_TOKENS:
        /* count_tokens may sample a token before its cancel lands: not a latency */
        if (r->t_first == 0) {
            r->t_first = now;
            s->waiting--;
            if (r->ep != EP_COUNT_TOKENS) srv_histogram_observe(&s->metrics.ttft, now - r->t_start);
        } else if (r->ep != EP_COUNT_TOKENS) {
            srv_histogram_observe(&s->metrics.itl, now - r->t_last);
        }
        r->t_last = now;
        break;
    case DI_EVENT_CHUNK: {
        if (!r->stream || r->client_gone) break;
        const char *sse = di_event_chunk_sse(ev, &n);
        r->n_chunks++;
        if (out_append(r, sse, n) != 0 ||
            r->out_len - r->out_off > (size_t)s->cfg->max_buffered_bytes) {
            /* a client that does not read what it asked for is cut off */
            di_cancel(s->engine, r->id, NULL);
            r->client_gone = 1;
            snprintf(r->message, sizeof r->message, "the client did not read its stream");
        }
        resume(r);
        break;
    }
    case DI_EVENT_DONE: {
        r->done = 1;
        r->in_engine = 0;
        s->in_engine--;
        if (r->t_first == 0) s->waiting--;
        r->status = di_event_status(ev);
        /* count_tokens is cancelled on purpose: not a failure */
        if (r->status != DI_OK && !r->message[0] && r->ep != EP_COUNT_TOKENS)
            snprintf(r->message, sizeof r->message, "%s", di_event_message(ev));
        snprintf(r->finish_text, sizeof r->finish_text, "%s",
                 di_event_finish_text(ev) ? di_event_finish_text(ev) : "");
        r->prompt_tokens = di_event_prompt_tokens(ev);
        r->cached_tokens = di_event_prompt_cache_hit_tokens(ev);
        r->completion_tokens = di_event_completion_tokens(ev);
        if (r->ep != EP_COUNT_TOKENS) {
            s->metrics.prompt_tokens += r->prompt_tokens;
            s->metrics.cached_tokens += r->cached_tokens;
            s->metrics.generated_tokens += r->completion_tokens;
            s->metrics.draft_tokens += di_event_draft_tokens(ev);
            s->metrics.accepted_draft_tokens += di_event_accepted_draft_tokens(ev);
            s->metrics.finished[r->status == DI_OK ? 0 : r->status == DI_ERR_CANCELLED ? 1 : 2]++;
        }
        const char *json = di_event_response_json(ev, &n);
        if (json && !r->stream) {
            r->response_json = malloc(n + 1);
            if (r->response_json) {
                memcpy(r->response_json, json, n);
                r->response_json[n] = 0;
            }
        }
        if (s->daemon) {
            if (r->stream)
                finish_stream(r);
            else
                finish_nonstream(r);
            resume(r);
        }
        srv_request_unref(r); /* the engine's reference */
        break;
    }
    default: break; /* text, reasoning and tool-call deltas: the chunks carry them */
    }
}

/* libmicrohttpd asks for the next piece of an SSE stream. */
static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_request *r = cls;
    if (r->client_gone) return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t avail = r->out_len - r->out_off;
    if (avail > 0) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, r->out + r->out_off, n);
        r->out_off += n;
        r->bytes_out += n;
        return (ssize_t)n;
    }
    if (r->done) return MHD_CONTENT_READER_END_OF_STREAM;
    suspend(r); /* resumed when the engine has more */
    return 0;
}

static void sse_free(void *cls)
{
    srv_request_unref(cls); /* the stream's reference */
}

static enum MHD_Result start_stream(srv_request *r)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, r, sse_free);
    if (!resp) return MHD_NO;
    r->refs++;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    r->http_status = 200;
    enum MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

static di_protocol protocol_of(srv_endpoint ep)
{
    return ep == EP_CHAT        ? DI_PROTOCOL_CHAT
           : ep == EP_RESPONSES ? DI_PROTOCOL_RESPONSES
                                : DI_PROTOCOL_MESSAGES;
}

static unsigned submit_status(di_status st)
{
    switch (st) {
    case DI_ERR_INVALID_STATE: /* the engine is shutting down */
    case DI_ERR_OUT_OF_MEMORY: return 503;
    case DI_ERR_INTERNAL:
    case DI_ERR_BACKEND: return 500;
    default: return 400; /* everything the codec and the engine refuse in a request */
    }
}

/* The whole body is here: check it, submit it, answer or stream. */
static enum MHD_Result handle_generation(srv_request *r)
{
    srv *s = r->s;
    const srv_config *cfg = s->cfg;
    json_error_t jerr;
    const char *text = r->body ? r->body : "";
    json_t *root = json_loadb(text, r->body_len, 0, &jerr);
    if (!json_is_object(root)) { /* bad JSON in the library's words, as run and the bindings */
        char why[600];
        if (root || cli_request_error(protocol_of(r->ep), text, r->body_len, why, sizeof why) != 0)
            snprintf(why, sizeof why, "request: %s", root ? "expected a JSON object" : jerr.text);
        json_decref(root);
        return reply_error(r, 400, NULL, "%s", why);
    }
    r->stream = json_is_true(json_object_get(root, "stream"));
    const char *body = r->body;
    size_t body_len = r->body_len;
    char *rewritten = NULL;
    if (r->ep == EP_COUNT_TOKENS) {
        /* count_tokens takes a Messages body without max_tokens; it is
         * rendered as the Messages request it would be */
        r->stream = 0;
        json_object_set_new(root, "stream", json_false());
        if (!json_object_get(root, "max_tokens"))
            json_object_set_new(root, "max_tokens", json_integer(1));
        rewritten = json_dumps(root, JSON_COMPACT);
        if (!rewritten) {
            json_decref(root);
            return reply_error(r, 503, NULL, "out of memory");
        }
        body = rewritten;
        body_len = strlen(rewritten);
    }
    json_decref(root);
    if (s->in_engine >= (size_t)cfg->max_queue) {
        free(rewritten);
        return reply_error(r, 503, NULL,
                           "the server is busy: %zu requests in flight, the limit is %ld; retry",
                           s->in_engine, cfg->max_queue);
    }
    di_request req;
    di_request_init(&req);
    req.protocol = (int32_t)protocol_of(r->ep);
    req.json = body;
    req.json_len = body_len;
    if (r->ep == EP_COUNT_TOKENS) req.max_tokens = 1;
    req.seed = cfg->seed;
    if (cfg->temperature >= 0) req.temperature = (float)cfg->temperature;
    req.on_event = on_event;
    req.user_data = r;
    di_error *err = NULL;
    di_status st = di_submit(s->engine, &req, &r->id, &err);
    free(rewritten);
    if (st != DI_OK) {
        const char *msg = di_error_message(err);
        char param[128];
        srv_error_param(msg, param, sizeof param);
        enum MHD_Result ret = reply_error(r, submit_status(st), param, "%s", msg);
        di_error_free(err);
        return ret;
    }
    r->in_engine = 1;
    r->refs++; /* the engine's, dropped at its terminal event */
    s->in_engine++;
    s->waiting++;
    if (r->ep == EP_COUNT_TOKENS) di_cancel(s->engine, r->id, NULL);
    if (r->stream) return start_stream(r);
    suspend(r); /* resumed with the answer at the terminal event */
    return MHD_YES;
}

/* ---- the access handler ------------------------------------------------------ */

enum MHD_Result srv_access(void *cls, struct MHD_Connection *conn, const char *url,
                           const char *method, const char *version, const char *upload_data,
                           size_t *upload_data_size, void **req_cls)
{
    (void)version;
    srv *s = cls;
    srv_request *r = *req_cls;
    if (!r) { /* the headers are in */
        if (!(r = request_new(s, conn, url, method))) return MHD_NO;
        *req_cls = r;
        int post;
        r->ep = route(url, &post);
        r->api = strncmp(url, "/v1/messages", 12) == 0 ? API_ANTHROPIC : API_OPENAI;
        if (r->ep == EP_OTHER)
            return reply_error(r, 404, NULL, "no such endpoint: %s %s", method, url);
        int is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
        int is_get =
            strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        if (post ? !is_post : !is_get)
            return reply_error(r, 405, NULL, "%s takes %s, not %s", url, post ? "POST" : "GET",
                               method);
        if (r->ep != EP_HEALTH && r->ep != EP_PAGE && !authorized(r))
            return reply_error(r, 401, NULL,
                               "missing or wrong API key (send Authorization: Bearer KEY or "
                               "x-api-key: KEY)");
        if (!post) return reply_get(r);
        if (s->shutting_down) return reply_error(r, 503, NULL, "the server is shutting down");
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno == 0 && end != cl && n > (unsigned long long)s->cfg->max_body_bytes)
                return reply_error(r, 413, NULL, "request body: %llu bytes, over the limit of %ld",
                                   n, s->cfg->max_body_bytes);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) { /* a piece of the body */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->body_too_large || r->body_len + n > (size_t)s->cfg->max_body_bytes) {
            r->body_too_large = 1; /* read and dropped: the answer is 413 */
            return MHD_YES;
        }
        if (r->body_len + n + 1 > r->body_cap) {
            size_t cap = (r->body_len + n + 1) * 2;
            if (cap > (size_t)s->cfg->max_body_bytes + 1) cap = (size_t)s->cfg->max_body_bytes + 1;
            char *p = realloc(r->body, cap);
            if (!p) return MHD_NO;
            r->body = p;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = 0;
        return MHD_YES;
    }
    /* the whole request is in */
    if (r->submitted) {
        /* resumed without an answer: the client went away */
        return MHD_NO;
    }
    r->submitted = 1;
    if (r->sc) r->sc->busy = 1;
    if (r->body_too_large)
        return reply_error(r, 413, NULL, "request body: over the limit of %ld bytes",
                           s->cfg->max_body_bytes);
    return handle_generation(r);
}

/* ---- completion, connections, slow clients ------------------------------------ */

static const char *termination_name(enum MHD_RequestTerminationCode toe)
{
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK: return "ok";
    case MHD_REQUEST_TERMINATED_WITH_ERROR: return "connection error";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR: return "read error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client abort";
    default: return "closed";
    }
}

void srv_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                   enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    srv *s = cls;
    srv_request *r = *req_cls;
    if (!r) return;
    *req_cls = NULL;
    double now = srv_now();
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !r->client_gone) {
        r->client_gone = 1;
        if (r->in_engine) {
            di_cancel(s->engine, r->id, NULL);
            s->metrics.client_disconnects++;
        }
    }
    if (r->suspended) { /* cannot happen: a suspended request is not completed */
        if (r->in_epoll) epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, r->fd, NULL);
        r->in_epoll = r->suspended = 0;
    }
    unsigned status = r->http_status ? r->http_status : 499; /* 499: closed before an answer */
    srv_metrics_request(&s->metrics, r->ep, status);
    if (r->sc) {
        r->sc->busy = 0;
        r->sc->phase_start = now;
    }
    r->sc = NULL;
    const char *result = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK ? termination_name(toe)
                         : r->message[0]                            ? r->message
                                                                    : "ok";
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (r->id)
        fprintf(stderr,
                "%s %s %s %s %u %.1f ms %zu bytes stream=%d prompt=%u cached=%u generated=%u "
                "ttft=%.1f ms finish=%s: %s\n",
                when, r->remote, r->method, r->path, status, (now - r->t_start) * 1e3, r->bytes_out,
                r->stream, r->prompt_tokens, r->cached_tokens, r->completion_tokens,
                r->t_first > 0 ? (r->t_first - r->t_start) * 1e3 : 0.0,
                r->finish_text[0] ? r->finish_text : "-", result);
    else
        fprintf(stderr, "%s %s %s %s %u %.1f ms %zu bytes: %s\n", when, r->remote, r->method,
                r->path, status, (now - r->t_start) * 1e3, r->bytes_out, result);
    srv_request_unref(r); /* the HTTP daemon's reference */
}

void srv_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                    enum MHD_ConnectionNotificationCode toe)
{
    srv *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_conn *c = calloc(1, sizeof *c);
        if (!c) return; /* this connection goes without a deadline */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        c->phase_start = srv_now();
        c->next = s->conns;
        if (s->conns) s->conns->prev = c;
        s->conns = c;
        *socket_context = c;
        return;
    }
    srv_conn *c = *socket_context;
    if (!c) return;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c);
    *socket_context = NULL;
}

void srv_sweep_slow(srv *s, double now)
{
    /* libmicrohttpd's idle timeout restarts at every byte, so a client that
     * trickles its headers or body (slowloris) would hold its connection
     * forever; a whole request must arrive within the request timeout of the
     * connection opening or of its previous answer. Shutting the socket makes
     * libmicrohttpd close the connection at its next read. */
    for (srv_conn *c = s->conns; c; c = c->next) {
        if (c->busy || c->shut || c->fd < 0) continue;
        if (now - c->phase_start > (double)s->cfg->request_timeout_s) {
            shutdown(c->fd, SHUT_RDWR);
            c->shut = 1;
        }
    }
}
