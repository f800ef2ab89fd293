/* deepinfer serve: an OpenAI- and Anthropic-compatible HTTP/1.1 server on
 * libmicrohttpd, built only on the public C API (docs/serve.md).
 *
 * One thread runs everything the server does: an epoll loop over the HTTP
 * daemon's descriptor (libmicrohttpd in external-polling epoll mode), the
 * engine's event descriptor (di_engine_event_fd), a signalfd for SIGINT/SIGTERM
 * and the sockets of suspended connections (EPOLLRDHUP: a client that goes
 * away is seen at once). HTTP callbacks and engine callbacks (di_poll) both run
 * on that thread, so the state below needs no locks; the engine computes on its
 * own threads and shares one batch among all clients. */
#ifndef DEEPINFER_SERVE_H
#define DEEPINFER_SERVE_H

#include <deepinfer/deepinfer.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "../cli.h"

/* The endpoints, for routing, metrics and logs. */
typedef enum srv_endpoint {
    EP_CHAT = 0,         /* POST /v1/chat/completions */
    EP_MESSAGES = 1,     /* POST /v1/messages */
    EP_RESPONSES = 2,    /* POST /v1/responses */
    EP_COUNT_TOKENS = 3, /* POST /v1/messages/count_tokens */
    EP_MODELS = 4,       /* GET /v1/models */
    EP_HEALTH = 5,       /* GET /health */
    EP_METRICS = 6,      /* GET /metrics */
    EP_PAGE = 7,         /* GET / (the chat page) */
    EP_OTHER = 8,        /* anything else: 404 */
    EP_N = 9
} srv_endpoint;

/* Whose error object a response carries. */
typedef enum srv_api { API_OPENAI = 0, API_ANTHROPIC = 1 } srv_api;

/* Settings from the command line (docs/serve.md lists them with defaults). */
typedef struct srv_config {
    const char *model, *host, *api_key, *model_name, *cache_dir, *tokenizer;
    long port, threads, ctx, parallel, max_queue, seed;
    double temperature; /* < 0: the body's or the engine's default */
    di_encoding encoding;
    int no_prefix_cache, verbose;
    long max_body_bytes, max_header_bytes, max_connections, per_ip_connections;
    long idle_timeout_s, request_timeout_s, shutdown_timeout_s;
    long max_buffered_bytes; /* output a slow reader may leave unread before it is cut off */
    cli_draft draft;         /* --draft, --draft-max, --draft-model (speculative decoding) */
    int32_t kv_type;         /* --kv-cache-type: a di_kv_cache_type, 0: f16 */
} srv_config;

/* Counters and histograms for /metrics (metrics.c). */
enum { SRV_TTFT_BUCKETS = 14, SRV_ITL_BUCKETS = 12, SRV_MAX_STATUS = 16 };
typedef struct srv_histogram {
    const double *bounds; /* seconds, ascending; +Inf is implicit */
    size_t n_bounds;
    uint64_t counts[SRV_TTFT_BUCKETS + 1]; /* per bucket (not cumulative), last: +Inf */
    double sum;
    uint64_t count;
} srv_histogram;

typedef struct srv_metrics {
    struct {
        unsigned code;
        uint64_t n;
    } requests[EP_N][SRV_MAX_STATUS]; /* by endpoint and HTTP status */
    uint64_t prompt_tokens, cached_tokens, generated_tokens;
    uint64_t draft_tokens, accepted_draft_tokens; /* speculative decoding's, summed */
    uint64_t finished[4]; /* by result: ok, cancelled (client gone or shutdown), error, (unused) */
    uint64_t client_disconnects;
    srv_histogram ttft, itl;
} srv_metrics;

typedef struct srv_request srv_request;
typedef struct srv_conn srv_conn;

/* The server: one per process. */
typedef struct srv {
    const srv_config *cfg;
    di_engine *engine;
    struct MHD_Daemon *daemon;
    int epoll_fd, signal_fd, engine_fd;
    srv_request *live; /* every request the HTTP daemon holds, linked through next/prev */
    srv_conn *conns;   /* every open connection (for the request deadline) */
    size_t in_engine;  /* submitted, terminal event not yet delivered */
    size_t waiting;    /* submitted, no token yet (queued or prefilling) */
    int shutting_down; /* a signal came: no new requests */
    int cancelled_all; /* the shutdown deadline passed: what was left was cancelled */
    double shutdown_deadline;
    double started;       /* srv_now() when the server began listening */
    double started_wall;  /* the same moment, seconds since the epoch */
    const char *model_id; /* the name /v1/models gives */
    srv_metrics metrics;
} srv;

/* A connection (MHD's socket context): for the request deadline against slow
 * clients. */
struct srv_conn {
    int fd;
    int busy;           /* a whole request arrived and is being answered */
    double phase_start; /* when the connection opened or its last response ended */
    int shut;           /* shut down for missing the deadline */
    srv_conn *next, *prev;
};

/* One HTTP request. Owned by reference counts: the HTTP daemon holds one until
 * it reports the request completed, the engine one until the terminal event is
 * delivered, a streaming response one until libmicrohttpd frees it. */
struct srv_request {
    srv *s;
    struct MHD_Connection *conn;
    srv_conn *sc;
    int refs;
    srv_endpoint ep;
    srv_api api;
    char method[8];
    char path[128];
    char remote[64];
    /* the body as it arrives */
    char *body;
    size_t body_len, body_cap;
    int body_too_large;
    /* the engine's side */
    uint64_t id;
    int in_engine;   /* submitted and not yet given its terminal event */
    int stream;      /* SSE */
    int done;        /* the terminal event came */
    int client_gone; /* the client disconnected */
    int suspended, in_epoll, fd;
    di_status status;
    char message[1024];   /* why it failed, or what the log says */
    char finish_text[32]; /* the protocol's finish reason */
    char *response_json;  /* a non-streaming answer, until it is queued */
    int submitted;        /* the whole body arrived and was handled */
    uint32_t prompt_tokens, cached_tokens, completion_tokens;
    size_t n_chunks; /* SSE messages written (the Responses sequence_number of the next) */
    /* output waiting for the socket (SSE) */
    char *out;
    size_t out_len, out_off, out_cap;
    /* the log line */
    unsigned http_status;
    size_t bytes_out;
    double t_start, t_first, t_last;
    srv_request *next, *prev;
};

/* ---- routes.c --------------------------------------------------------- */

/* The access handler libmicrohttpd calls for each request (MHD_AccessHandlerCallback). */
enum MHD_Result srv_access(void *cls, struct MHD_Connection *conn, const char *url,
                           const char *method, const char *version, const char *upload_data,
                           size_t *upload_data_size, void **req_cls);
/* MHD_OPTION_NOTIFY_COMPLETED: the request is over (answered, or the client left). */
void srv_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                   enum MHD_RequestTerminationCode toe);
/* MHD_OPTION_NOTIFY_CONNECTION: connections opened and closed. */
void srv_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                    enum MHD_ConnectionNotificationCode toe);
/* A suspended connection's socket reported a hang-up: the client is gone. */
void srv_client_hangup(srv_request *r);
/* The shutdown deadline passed: cancel every request still in the engine. */
void srv_cancel_all(srv *s);
/* Shut down connections that have not delivered a whole request within the
 * request timeout (slow clients). */
void srv_sweep_slow(srv *s, double now);
/* Drop a reference; the last one frees the request. */
void srv_request_unref(srv_request *r);

/* ---- errors.c --------------------------------------------------------- */

/* The error body of `api` (OpenAI: {"error":{"message","type","param","code"}};
 * Anthropic: {"type":"error","error":{"type","message"}}) for HTTP `status`,
 * as a new string (free). `param` may be NULL. */
char *srv_error_body(srv_api api, unsigned status, const char *message, const char *param);
/* The SSE message that ends a stream which failed after its headers went out,
 * in the protocol's own shape (Chat: a data: error object; Messages: an
 * `error` event; Responses: an `error` event with the next sequence_number).
 * A new string (free). */
char *srv_error_sse(srv_endpoint ep, size_t sequence_number, const char *type, const char *message);
/* The field a di_submit message names ("messages[2].role: ..." gives
 * "messages[2].role"), into buf; "" when it names none. */
void srv_error_param(const char *message, char *buf, size_t cap);

/* ---- metrics.c -------------------------------------------------------- */

void srv_metrics_init(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, srv_endpoint ep, unsigned status);
void srv_histogram_observe(srv_histogram *h, double seconds);
/* The Prometheus text exposition of the server's state, as a new string (free). */
char *srv_metrics_render(const srv *s);
const char *srv_endpoint_name(srv_endpoint ep);

/* ---- page.c (generated from chat.html) -------------------------------- */

extern const char srv_page_html[];
extern const size_t srv_page_html_len;

/* ---- serve.c ---------------------------------------------------------- */

double srv_now(void);

#endif
