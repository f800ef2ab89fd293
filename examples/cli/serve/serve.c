/* deepinfer serve --model PATH [--host ADDR] [--port N] [options]
 *
 * Loads the model into one engine and answers OpenAI Chat Completions, OpenAI
 * Responses and Anthropic Messages requests over HTTP/1.1 (libmicrohttpd), all
 * clients sharing the engine's batches. This file holds the command line, the
 * engine and daemon set-up, the event loop and the shutdown; routes.c the HTTP
 * side. docs/serve.md documents the flags, endpoints and limits. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../cli.h"
#include "serve.h"

double srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- arguments ---------------------------------------------------------------- */

static const char usage_text[] =
    "deepinfer serve --model PATH [--host ADDR] [--port N] [--api-key KEY] [--model-name NAME] "
    "[--threads T] [--ctx N] [--parallel N] [--max-queue N] [--temperature X] [--seed S] "
    "[--encoding E] [--tokenizer PATH] [--cache-dir DIR] [--no-prefix-cache] [--max-body-bytes N] "
    "[--max-header-bytes N] [--max-connections N] [--per-ip-connections N] [--idle-timeout S] "
    "[--request-timeout S] [--shutdown-timeout S] [--draft off|auto|prompt-lookup|draft-model|mtp] "
    "[--draft-max N] [--draft-model PATH] [--kv-cache-type f16|f32|q8_0|q4_0] [--verbose]";

static int usage(const char *why)
{
    fprintf(stderr, "deepinfer serve: %s (usage: %s)\n", why, usage_text);
    return EXIT_USAGE;
}

/* Options taking a number: name, the field, the range. */
typedef struct num_option {
    const char *name;
    size_t offset;
    long lo, hi;
} num_option;

static const num_option num_options[] = {
    {"--port", offsetof(srv_config, port), 0, 65535},
    {"--threads", offsetof(srv_config, threads), 0, 1024},
    {"--ctx", offsetof(srv_config, ctx), 0, 1L << 20},
    {"--parallel", offsetof(srv_config, parallel), 0, 256},
    {"--max-queue", offsetof(srv_config, max_queue), 1, 100000},
    {"--seed", offsetof(srv_config, seed), 0, INT32_MAX},
    {"--max-body-bytes", offsetof(srv_config, max_body_bytes), 1024, 256L << 20},
    {"--max-header-bytes", offsetof(srv_config, max_header_bytes), 8192, 1L << 20},
    {"--max-connections", offsetof(srv_config, max_connections), 1, 65536},
    {"--per-ip-connections", offsetof(srv_config, per_ip_connections), 0, 65536},
    {"--idle-timeout", offsetof(srv_config, idle_timeout_s), 1, 86400},
    {"--request-timeout", offsetof(srv_config, request_timeout_s), 1, 86400},
    {"--shutdown-timeout", offsetof(srv_config, shutdown_timeout_s), 0, 86400},
};

enum { EXIT_HELP = -1 };

static int parse_args(int argc, char **argv, srv_config *c)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->seed = -1;
    c->temperature = -1;
    c->max_queue = 256;
    c->max_body_bytes = 8L << 20;
    c->max_header_bytes = 32768;
    c->max_connections = 512;
    c->idle_timeout_s = 30;
    c->request_timeout_s = 30;
    c->shutdown_timeout_s = 10;
    c->max_buffered_bytes = 8L << 20;
    c->draft = (cli_draft)CLI_DRAFT_INIT;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            printf("usage: %s\n(docs/serve.md)\n", usage_text);
            return EXIT_HELP;
        }
        if (strcmp(o, "--no-prefix-cache") == 0) {
            c->no_prefix_cache = 1;
            continue;
        }
        if (strcmp(o, "--verbose") == 0) {
            c->verbose = 1;
            continue;
        }
        char why[160];
        if (!v) {
            snprintf(why, sizeof why, "%.60s %s", o,
                     strncmp(o, "--", 2) == 0 ? "needs a value or is unknown"
                                              : "is an unexpected argument");
            return usage(why);
        }
        i++;
        const char *bad = NULL;
        if (cli_draft_option(o, v, &c->draft, &bad)) {
            if (bad) return usage(bad);
            continue;
        }
        const num_option *num = NULL;
        for (size_t k = 0; k < sizeof num_options / sizeof num_options[0]; k++)
            if (strcmp(o, num_options[k].name) == 0) num = &num_options[k];
        if (num) {
            long *field = (long *)(void *)((char *)c + num->offset);
            if (cli_parse_long(v, num->lo, num->hi, field) != 0) {
                snprintf(why, sizeof why, "%s must be %ld to %ld", o, num->lo, num->hi);
                return usage(why);
            }
        } else if (strcmp(o, "--model") == 0) {
            c->model = v;
        } else if (strcmp(o, "--host") == 0) {
            c->host = v;
        } else if (strcmp(o, "--api-key") == 0) {
            if (!v[0]) return usage("--api-key must not be empty");
            c->api_key = v;
        } else if (strcmp(o, "--model-name") == 0) {
            c->model_name = v;
        } else if (strcmp(o, "--cache-dir") == 0) {
            c->cache_dir = v;
        } else if (strcmp(o, "--tokenizer") == 0) {
            c->tokenizer = v;
        } else if (strcmp(o, "--encoding") == 0) {
            if (cli_encoding(v, &c->encoding) != 0)
                return usage("--encoding must be dsv4, dsv41, dsv3, r1 or chatml");
        } else if (strcmp(o, "--kv-cache-type") == 0) {
            if (cli_kv_cache_type(v, &c->kv_type) != 0)
                return usage("--kv-cache-type must be f16, f32, q8_0 or q4_0");
        } else if (strcmp(o, "--temperature") == 0) {
            char *end;
            errno = 0;
            c->temperature = strtod(v, &end);
            if (end == v || *end || errno || !(c->temperature >= 0 && c->temperature <= 100))
                return usage("--temperature must be a number from 0 to 100");
        } else {
            snprintf(why, sizeof why, "unexpected argument '%.60s'", o);
            return usage(why);
        }
    }
    if (!c->model) return usage("--model is required");
    di_engine_config probe;
    di_engine_config_init(&probe);
    const char *why_draft = cli_draft_apply(&c->draft, &probe);
    if (why_draft) return usage(why_draft);
    /* DEEPINFER_API_KEY keeps the key out of the process list */
    if (!c->api_key) {
        const char *env = getenv("DEEPINFER_API_KEY");
        if (env && env[0]) c->api_key = env;
    }
    return EXIT_OK;
}

/* ---- set-up ------------------------------------------------------------------- */

static void on_log(void *user, di_log_level level, const char *message)
{
    const srv_config *c = user;
    if (level <= DI_LOG_WARN || c->verbose) fprintf(stderr, "deepinfer serve: %s\n", message);
}

static void on_http_log(void *cls, const char *fmt, va_list ap)
{
    const srv_config *c = cls;
    if (!c->verbose) return;
    fprintf(stderr, "deepinfer serve: http: ");
    vfprintf(stderr, fmt, ap);
}

static di_engine *load(const srv_config *c)
{
    double t0 = srv_now();
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = c->model;
    cfg.n_threads = (int32_t)c->threads;
    cfg.n_ctx = c->ctx;
    cfg.encoding = (int32_t)c->encoding;
    cfg.max_running = (int32_t)c->parallel;
    cfg.kv_cache_dir = c->cache_dir;
    cfg.tokenizer_path = c->tokenizer;
    cfg.served_model_name = c->model_name; /* NULL: the file's name, as responses give it */
    cfg.disable_prefix_cache = c->no_prefix_cache;
    cfg.kv_cache_type = c->kv_type;
    (void)cli_draft_apply(&c->draft, &cfg); /* checked by parse_args */
    cfg.log = on_log;
    cfg.log_user = (void *)c;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) {
        fprintf(stderr, "deepinfer serve: %s\n", di_error_message(err));
        di_error_free(err);
        return NULL;
    }
    /* every route renders API requests: an engine that cannot would answer
     * each one 400, so it is refused here, with what to give it */
    if (di_engine_prompt_encoding(e) == DI_ENCODING_NONE) {
        fprintf(stderr, "deepinfer serve: %s cannot render API requests: %s\n", c->model,
                di_engine_tokenizer(e)
                    ? "its prompt encoding is unknown, or its tokenizer lacks that encoding's "
                      "turn tokens or is another model's (give --encoding "
                      "dsv4|dsv41|dsv3|r1|chatml, or --tokenizer PATH)"
                    : "it has no tokenizer (none in its GGUF, no tokenizer.json beside its "
                      "config.json): give --tokenizer PATH");
        di_engine_destroy(e);
        return NULL;
    }
    fprintf(stderr,
            "deepinfer serve: loaded %s in %.2f s (vocabulary %d, context %lld, encoding %s, KV "
            "cache %s)\n",
            c->model, srv_now() - t0, (int)di_engine_vocab_size(e),
            (long long)di_engine_context_length(e), di_encoding_name(di_engine_prompt_encoding(e)),
            cli_kv_cache_type_name(c->kv_type));
    return e;
}

/* The address to listen on: a numeric IPv4 or IPv6 address, or a name. */
static int resolve(const srv_config *c, struct sockaddr_storage *ss, int *ipv6)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%ld", c->port);
    int rc = getaddrinfo(c->host, port, &hints, &res);
    if (rc != 0 || !res) {
        fprintf(stderr, "deepinfer serve: --host %s: %s\n", c->host, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *ipv6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return 0;
}

static struct MHD_Daemon *start_daemon(srv *s)
{
    const srv_config *c = s->cfg;
    struct sockaddr_storage ss;
    int ipv6 = 0;
    if (resolve(c, &ss, &ipv6) != 0) return NULL;
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ipv6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, srv_access, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)c->per_ip_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)c->max_header_bytes,
        MHD_OPTION_NOTIFY_COMPLETED, srv_completed, s, MHD_OPTION_NOTIFY_CONNECTION, srv_connection,
        s, MHD_OPTION_EXTERNAL_LOGGER, on_http_log, (void *)c, MHD_OPTION_END);
    if (!d)
        fprintf(stderr, "deepinfer serve: cannot listen on %s port %ld: %s\n", c->host, c->port,
                errno ? strerror(errno) : "libmicrohttpd refused the settings");
    return d;
}

/* ---- the loop ------------------------------------------------------------------ */

enum { TAG_HTTP = 1, TAG_ENGINE = 2, TAG_SIGNAL = 3 };

static int watch(int epoll_fd, int fd, uint64_t tag)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
}

static void begin_shutdown(srv *s, int sig)
{
    double now = srv_now();
    if (s->shutting_down) { /* a second signal: cancel what is left now */
        s->shutdown_deadline = now;
        return;
    }
    s->shutting_down = 1;
    s->shutdown_deadline = now + (double)s->cfg->shutdown_timeout_s;
    MHD_socket listen_fd = MHD_quiesce_daemon(s->daemon);
    if (listen_fd != MHD_INVALID_SOCKET) close(listen_fd); /* no new connections */
    fprintf(stderr,
            "deepinfer serve: %s: no new connections; %zu requests in flight get %ld s to "
            "finish\n",
            strsignal(sig), s->in_engine, s->cfg->shutdown_timeout_s);
}

static int run_loop(srv *s)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (!di || watch(s->epoll_fd, di->epoll_fd, TAG_HTTP) != 0 ||
        watch(s->epoll_fd, s->engine_fd, TAG_ENGINE) != 0 ||
        watch(s->epoll_fd, s->signal_fd, TAG_SIGNAL) != 0) {
        fprintf(stderr, "deepinfer serve: epoll: %s\n", strerror(errno));
        return -1;
    }
    double last_sweep = srv_now();
    for (;;) {
        int timeout = 250;
        MHD_UNSIGNED_LONG_LONG mhd_timeout;
        if (MHD_get_timeout(s->daemon, &mhd_timeout) == MHD_YES && mhd_timeout < (unsigned)timeout)
            timeout = (int)mhd_timeout;
        struct epoll_event evs[64];
        int n = epoll_wait(s->epoll_fd, evs, 64, timeout);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "deepinfer serve: epoll_wait: %s\n", strerror(errno));
            return -1;
        }
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == TAG_ENGINE) {
                di_poll(s->engine, 0);
            } else if (tag == TAG_SIGNAL) {
                struct signalfd_siginfo si;
                if (read(s->signal_fd, &si, sizeof si) == (ssize_t)sizeof si)
                    begin_shutdown(s, (int)si.ssi_signo);
            } else if (tag != TAG_HTTP) {
                srv_client_hangup(evs[i].data.ptr);
            }
        }
        MHD_run(s->daemon);
        double now = srv_now();
        if (now - last_sweep >= 1.0) {
            srv_sweep_slow(s, now);
            last_sweep = now;
        }
        if (s->shutting_down) {
            if (!s->cancelled_all && now >= s->shutdown_deadline) {
                if (s->in_engine)
                    fprintf(stderr, "deepinfer serve: cancelling %zu requests\n", s->in_engine);
                srv_cancel_all(s);
            }
            if (s->in_engine == 0 && !s->live) return 0;     /* every answer went out */
            if (now >= s->shutdown_deadline + 5.0) return 0; /* clients that do not read */
        }
    }
}

int cli_serve(int argc, char **argv)
{
    srv_config c;
    int st = parse_args(argc, argv, &c);
    if (st != EXIT_OK) return st == EXIT_HELP ? EXIT_OK : st;
    /* SIGINT and SIGTERM arrive on a signalfd; blocked before any thread starts,
     * so the engine's threads inherit the mask and the loop alone takes them. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    srv s;
    memset(&s, 0, sizeof s);
    s.cfg = &c;
    s.epoll_fd = s.signal_fd = s.engine_fd = -1;
    srv_metrics_init(&s.metrics);
    int rc = EXIT_FAILED;
    s.signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    s.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (s.signal_fd < 0 || s.epoll_fd < 0) {
        fprintf(stderr, "deepinfer serve: %s\n", strerror(errno));
        goto done;
    }
    if (!(s.engine = load(&c))) goto done;
    if ((s.engine_fd = di_engine_event_fd(s.engine)) < 0) {
        fprintf(stderr, "deepinfer serve: di_engine_event_fd: %s\n",
                di_status_string((di_status)-s.engine_fd));
        goto done;
    }
    /* the name responses carry as `model` (di_engine_config.served_model_name) */
    s.model_id = di_engine_served_model_name(s.engine);
    if (!(s.daemon = start_daemon(&s))) goto done;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s.daemon, MHD_DAEMON_INFO_BIND_PORT);
    s.started = srv_now();
    s.started_wall = (double)time(NULL);
    fprintf(stderr, "deepinfer serve: listening on http://%s%s%s:%u (model %s%s)\n",
            strchr(c.host, ':') ? "[" : "", c.host, strchr(c.host, ':') ? "]" : "",
            di ? (unsigned)di->port : (unsigned)c.port, s.model_id,
            c.api_key ? ", API key required" : "");
    if (run_loop(&s) == 0) rc = EXIT_OK;
done:
    if (s.daemon) {
        for (srv_request *r = s.live; r; r = r->next) {
            if (!r->suspended) continue;
            if (r->in_epoll) epoll_ctl(s.epoll_fd, EPOLL_CTL_DEL, r->fd, NULL);
            r->in_epoll = r->suspended = 0;
            MHD_resume_connection(r->conn); /* MHD_stop_daemon needs none suspended */
        }
        MHD_stop_daemon(s.daemon);
        s.daemon = NULL;
    }
    /* delivers the terminal events still owed (their requests cancelled) */
    if (s.engine) di_engine_destroy(s.engine);
    if (s.signal_fd >= 0) close(s.signal_fd);
    if (s.epoll_fd >= 0) close(s.epoll_fd);
    if (rc == EXIT_OK) fprintf(stderr, "deepinfer serve: stopped\n");
    return rc;
}
