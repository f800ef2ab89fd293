/* The public engine API (deepinfer.h, "Engine"): handles, requests, events and
 * polling over lib/engine/scheduler.h. This file is the only one that knows
 * about the host's callbacks: the scheduler's worker hands it tokens, it turns
 * them into events (decoded text, or di_stream's parsed events and protocol
 * chunks), and di_poll delivers them on the host's thread. */
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/error.h"
#include "api/event.h"
#include "api/struct_size.h"
#include "engine/scheduler.h"
#include "model/gguf.h"
#include "model/model.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

_Static_assert(sizeof(di_engine_config) == DI_STRUCT_SIZE_UNTIL(di_engine_config, progress_user),
               "di_engine_config has no trailing padding");
_Static_assert(sizeof(di_request) == DI_STRUCT_SIZE_UNTIL(di_request, user_data),
               "di_request has no trailing padding");

/* What the API keeps per request (the scheduler's owner pointer). */
typedef struct api_request {
    di_event_fn fn;
    void *user;
    di_stream *stream;     /* protocol requests */
    di_detokenizer *detok; /* token requests with a tokenizer */
    int ready;             /* di_stream_ready was called */
    uint32_t n_prompt;
} api_request;

struct di_engine {
    model *m;
    di_tokenizer *tok;
    di_codec *codec;
    int32_t encoding;
    sched *sched;
    int32_t n_vocab;
    int64_t n_ctx;
    int32_t eos[2];
    int n_eos;
    di_log_fn log;
    void *log_user;
    /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    di_event *head, *tail;
    size_t pending;
    int in_poll, destroying;
    pthread_t poll_thread;
};

static void elog(di_engine *e, di_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void elog(di_engine *e, di_log_level level, const char *fmt, ...)
{
    if (!e->log) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    e->log(e->log_user, level, msg);
}

static di_status errf(di_error **err, di_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static di_status errf(di_error **err, di_status st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return di_error_set(err, st, msg);
}

static void enqueue(di_engine *e, event_list *l)
{
    if (!l->head) return;
    pthread_mutex_lock(&e->mu);
    if (e->tail)
        e->tail->next = l->head;
    else
        e->head = l->head;
    e->tail = l->tail;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    l->head = l->tail = NULL;
}

static void stream_ready(event_list *l, const sched_request *r, api_request *a)
{
    if (a->ready) return;
    a->ready = 1;
    if (di_stream_ready(a->stream, a->n_prompt, 0, NULL, NULL) == DI_OK)
        collect_stream(l, r->id, a->fn, a->user, a->stream, NULL);
}

static int sink_tokens(void *ctx, sched_request *r, const int32_t *ids, size_t n, int is_stop)
{
    di_engine *e = ctx;
    api_request *a = r->owner;
    event_list l = {0};
    di_event *ev = event_new(&l, r->id, a->fn, a->user, DI_EVENT_TOKENS);
    if (ev) {
        ev->tokens = malloc(n * sizeof *ids);
        if (ev->tokens) {
            memcpy(ev->tokens, ids, n * sizeof *ids);
            ev->n_tokens = n;
        }
    }
    int end = 0;
    if (a->stream) {
        stream_ready(&l, r, a);
        /* A stop token ends the output without being part of it. */
        if (!is_stop) {
            di_error *err = NULL;
            if (di_stream_push_tokens(a->stream, ids, n, &err) != DI_OK) {
                elog(e, DI_LOG_WARN, "request %llu: %s", (unsigned long long)r->id,
                     di_error_message(err));
                di_error_free(err);
            }
            collect_stream(&l, r->id, a->fn, a->user, a->stream, NULL);
            end = di_stream_finished(a->stream);
        }
    } else if (a->detok && !is_stop) {
        for (size_t i = 0; i < n; i++) {
            const char *t;
            size_t len;
            if (di_detokenizer_push(a->detok, ids[i], &t, &len) == DI_OK && len)
                event_text(&l, r->id, a->fn, a->user, DI_EVENT_TEXT, t, len);
        }
    }
    if (l.oom) elog(e, DI_LOG_ERROR, "out of memory building events; some were dropped");
    enqueue(e, &l);
    return end;
}

static void sink_done(void *ctx, sched_request *r, di_finish finish, di_status status,
                      const char *message)
{
    di_engine *e = ctx;
    api_request *a = r->owner;
    event_list l = {0};
    char *finish_text = NULL;
    uint32_t reasoning = 0;
    const char *response = NULL;
    size_t response_len = 0;
    if (a->stream && status == DI_OK) {
        stream_ready(&l, r, a);
        if (di_stream_finish(a->stream, finish, NULL) == DI_OK)
            collect_stream(&l, r->id, a->fn, a->user, a->stream, &finish_text);
        response = di_stream_response_json(a->stream, &response_len);
        di_stream_usage(a->stream, NULL, &reasoning);
    } else if (a->detok) {
        const char *t;
        size_t len;
        if (di_detokenizer_flush(a->detok, &t, &len) == DI_OK && len)
            event_text(&l, r->id, a->fn, a->user, DI_EVENT_TEXT, t, len);
    }
    /* The terminal event must exist whatever else failed: it is allocated with
     * a retry, and without its strings when memory is that short. */
    di_event *ev = NULL;
    for (int tries = 0; !ev; tries++) {
        ev = event_new(&l, r->id, a->fn, a->user, DI_EVENT_DONE);
        if (!ev && tries > 1000) abort(); /* memory never came back: nothing sound is left */
        if (!ev) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    ev->status = status;
    ev->message = event_strdup(message);
    ev->finish = status == DI_OK ? finish : (di_finish)0;
    ev->finish_text = finish_text;
    ev->prompt_tokens = (uint32_t)r->n_prompt;
    ev->completion_tokens = (uint32_t)(r->n_all - r->n_prompt);
    ev->reasoning_tokens = reasoning;
    if (response) {
        ev->response = event_strndup(response, response_len);
        ev->response_len = response_len;
    }
    di_stream_free(a->stream);
    di_detokenizer_free(a->detok);
    free(a);
    r->owner = NULL;
    enqueue(e, &l);
}

static void sink_log(void *ctx, di_log_level level, const char *message)
{
    di_engine *e = ctx;
    if (e->log) e->log(e->log_user, level, message);
}

/* ---- engine ---- */

DI_API void di_engine_config_init(di_engine_config *cfg)
{
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->device = DI_DEVICE_CPU;
}

/* The encoding a GGUF declares through its pre-tokenizer name; 0 when none. */
static int32_t gguf_encoding(const char *path, char *pre, size_t pre_size)
{
    gguf_file *f = NULL;
    char msg[256];
    int32_t enc = 0;
    pre[0] = 0;
    if (gguf_open(path, GGUF_OPEN_METADATA_ONLY, &f, msg, sizeof msg) != DI_OK) return 0;
    const char *s;
    size_t n;
    if (gguf_get_string(f, "tokenizer.ggml.pre", &s, &n)) {
        snprintf(pre, pre_size, "%.*s", (int)n, s);
        if (strcmp(pre, "deepseek-r1-qwen") == 0) enc = DI_ENCODING_R1;
        if (strcmp(pre, "deepseek-v3") == 0) enc = DI_ENCODING_DSV3;
    }
    gguf_close(f);
    return enc;
}

static int is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void engine_free(di_engine *e)
{
    if (!e) return;
    sched_destroy(e->sched);
    di_codec_free(e->codec);
    di_tokenizer_free(e->tok);
    model_free(e->m);
    for (di_event *ev = e->head, *next; ev; ev = next) {
        next = ev->next;
        event_free(ev);
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

DI_API di_status di_engine_create(const di_engine_config *cfg, di_engine **out, di_error **err)
{
    if (!cfg || !out)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "cfg and out must not be NULL");
    *out = NULL;
    di_engine_config c;
    di_engine_config_init(&c);
    const char *msg;
    if (di_struct_copy_in(&c, sizeof c, cfg, sizeof c, &msg) != DI_OK)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, msg);
    if (!c.model_path)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "model_path: must not be NULL");
    if (c.device == DI_DEVICE_CUDA)
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "device: the CUDA backend is not built yet; use DI_DEVICE_CPU");
    if (c.device != DI_DEVICE_CPU)
        return errf(err, DI_ERR_INVALID_ARGUMENT, "device: unknown device %d", (int)c.device);
    if (c.encoding < 0 || c.encoding > DI_ENCODING_R1)
        return errf(err, DI_ERR_INVALID_ARGUMENT, "encoding: unknown encoding %d", (int)c.encoding);
    if (c.n_threads < 0 || c.n_threads > 1024)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "n_threads: expected 0 (all CPUs) to 1024");
    if (c.max_running < 0 || c.max_running > 256)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "max_running: expected 0 (16) to 256");
    if (c.n_ctx < 0 || c.n_ctx > (int64_t)1 << 24)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "n_ctx: expected 0 (the model's) to 16777216 tokens");
    if (c.n_batch < 0 || c.n_batch > 65536)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "n_batch: expected 0 (256) to 65536 tokens");
    if (c.kv_cache_bytes < 0)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "kv_cache_bytes: expected 0 (the default) or more");
    di_engine *e = calloc(1, sizeof *e);
    if (!e) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->log = c.log;
    e->log_user = c.log_user;
    di_status st;
    if (c.progress && c.progress(c.progress_user, 0.0f) != 0) {
        st = di_error_set(err, DI_ERR_CANCELLED, "the model load was cancelled by the host");
        goto fail;
    }
    model_options mo = {0};
    mo.n_threads = c.n_threads;
    if (mo.n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        mo.n_threads = n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
    }
    mo.n_ctx = c.n_ctx;
    mo.n_batch = c.n_batch;
    mo.kv_dtype = MODEL_DTYPE_F16;
    mo.kv_bytes = c.kv_cache_bytes;
    mo.kv_n_ctx_multiple = 4;
    mo.progress = c.progress;
    mo.progress_user = c.progress_user;
    if ((st = model_load(c.model_path, &mo, &e->m, err)) != DI_OK) goto fail;
    const model_config *mc = model_get_config(e->m);
    e->n_vocab = (int32_t)mc->n_vocab;
    e->n_ctx = model_n_ctx(e->m);
    /* The tokenizer: the configured one, the GGUF's, or the directory's. */
    const char *tok_path = c.tokenizer_path;
    char *dir_json = NULL;
    if (!tok_path) {
        if (is_dir(c.model_path)) {
            size_t n = strlen(c.model_path) + sizeof "/tokenizer.json";
            dir_json = malloc(n);
            if (!dir_json) {
                st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
                goto fail;
            }
            snprintf(dir_json, n, "%s/tokenizer.json", c.model_path);
            if (exists(dir_json)) tok_path = dir_json;
        } else {
            tok_path = c.model_path;
        }
    }
    st = tok_path ? di_tokenizer_load(tok_path, &e->tok, err) : DI_OK;
    free(dir_json);
    if (st != DI_OK) goto fail;
    char pre[64] = "";
    int32_t enc = c.encoding;
    if (enc == 0 && !is_dir(c.model_path)) enc = gguf_encoding(c.model_path, pre, sizeof pre);
    if (enc == 0 && c.tokenizer_path && !is_dir(c.tokenizer_path))
        enc = gguf_encoding(c.tokenizer_path, pre, sizeof pre);
    if (enc == 0 && e->tok) {
        /* A tokenizer with DeepSeek's chat tokens: the R1 distills (Qwen2, Llama
         * weights) use the R1 template, DeepSeek-V3 weights the V3 one. */
        int32_t id;
        const char *assistant = "<\xef\xbd\x9c"
                                "Assistant\xef\xbd\x9c>"; /* <｜Assistant｜> */
        if (di_tokenizer_token_id(e->tok, assistant, strlen(assistant), &id) == DI_OK)
            enc = mc->arch == MODEL_ARCH_DEEPSEEK_V3 ? DI_ENCODING_DSV3 : DI_ENCODING_R1;
    }
    if (enc != 0) {
        if (!e->tok) {
            st = di_error_set(err, DI_ERR_UNSUPPORTED,
                              "encoding: a prompt encoding needs a tokenizer, and the model has "
                              "none (set tokenizer_path)");
            goto fail;
        }
        if ((st = di_codec_create(e->tok, (di_encoding)enc, &e->codec, err)) != DI_OK) goto fail;
        e->encoding = enc;
    }
    if (mc->eos_token_id >= 0 && mc->eos_token_id < e->n_vocab)
        e->eos[e->n_eos++] = mc->eos_token_id;
    if (e->tok && e->tok->eos_id >= 0 && e->tok->eos_id < e->n_vocab &&
        (e->n_eos == 0 || e->eos[0] != e->tok->eos_id))
        e->eos[e->n_eos++] = e->tok->eos_id;
    sched_sink sink = {sink_tokens, sink_done, sink_log, e};
    /* Every running request decodes a token each step, so no more may run than
     * a step takes tokens: otherwise the newest would wait for the others. */
    int max_running = c.max_running ? c.max_running : 16;
    if (max_running > model_n_batch(e->m)) max_running = (int)model_n_batch(e->m);
    st = sched_create(e->m, max_running, &sink, &e->sched);
    if (st != DI_OK) {
        st = di_error_set(err, st, "cannot start the engine's worker thread");
        goto fail;
    }
    if (c.progress) c.progress(c.progress_user, 1.0f);
    elog(e, DI_LOG_INFO,
         "engine: %s, vocabulary %d, context %lld, KV cache %d blocks of %d tokens, "
         "encoding %d%s%s%s",
         c.model_path, (int)e->n_vocab, (long long)e->n_ctx, (int)model_kv_blocks_total(e->m),
         (int)MODEL_KV_BLOCK, (int)e->encoding, pre[0] ? " (pre-tokenizer " : "", pre,
         pre[0] ? ")" : "");
    *out = e;
    return DI_OK;
fail:
    engine_free(e);
    return st;
}

DI_API int32_t di_engine_encoding(const di_engine *e)
{
    return e ? e->encoding : 0;
}
DI_API const di_tokenizer *di_engine_tokenizer(const di_engine *e)
{
    return e ? e->tok : NULL;
}
DI_API int32_t di_engine_vocab_size(const di_engine *e)
{
    return e ? e->n_vocab : 0;
}
DI_API int64_t di_engine_context_length(const di_engine *e)
{
    return e ? e->n_ctx : 0;
}

DI_API size_t di_engine_pending(di_engine *e)
{
    if (!e) return 0;
    pthread_mutex_lock(&e->mu);
    size_t n = e->pending;
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* Deliver the events in `list` in order, counting terminal ones off pending. */
static int64_t deliver(di_engine *e, di_event *list)
{
    int64_t n = 0;
    for (di_event *ev = list, *next; ev; ev = next) {
        next = ev->next;
        if (ev->fn) ev->fn(ev->user, ev);
        if (ev->kind == DI_EVENT_DONE) {
            pthread_mutex_lock(&e->mu);
            e->pending--;
            pthread_mutex_unlock(&e->mu);
        }
        event_free(ev);
        n++;
    }
    return n;
}

DI_API int64_t di_poll(di_engine *e, int32_t timeout_ms)
{
    if (!e || timeout_ms < -1) return -(int64_t)DI_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&e->mu);
    if (e->in_poll || e->destroying) {
        pthread_mutex_unlock(&e->mu);
        return -(int64_t)DI_ERR_INVALID_STATE;
    }
    if (!e->head && timeout_ms != 0) {
        if (timeout_ms < 0) {
            /* Nothing pending: nothing can arrive but a new request's events. */
            while (!e->head && e->pending > 0) pthread_cond_wait(&e->cv, &e->mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            while (!e->head)
                if (pthread_cond_timedwait(&e->cv, &e->mu, &ts) != 0) break;
        }
    }
    di_event *list = e->head;
    e->head = e->tail = NULL;
    e->in_poll = 1;
    e->poll_thread = pthread_self();
    pthread_mutex_unlock(&e->mu);
    int64_t n = deliver(e, list);
    pthread_mutex_lock(&e->mu);
    e->in_poll = 0;
    pthread_mutex_unlock(&e->mu);
    return n;
}

DI_API di_status di_engine_destroy(di_engine *e)
{
    if (!e) return DI_OK;
    pthread_mutex_lock(&e->mu);
    if (e->in_poll || e->destroying) {
        pthread_mutex_unlock(&e->mu);
        return DI_ERR_INVALID_STATE;
    }
    e->destroying = 1;
    pthread_mutex_unlock(&e->mu);
    /* The worker ends every live request (terminal events queued), then stops. */
    sched_close(e->sched);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        di_event *list = e->head;
        e->head = e->tail = NULL;
        pthread_mutex_unlock(&e->mu);
        if (!list) break;
        deliver(e, list);
    }
    engine_free(e);
    return DI_OK;
}

/* ---- requests ---- */

DI_API void di_request_init(di_request *req)
{
    if (!req) return;
    memset(req, 0, sizeof *req);
    req->struct_size = sizeof *req;
    req->temperature = 1.0f;
    req->top_p = 1.0f;
    req->repetition_penalty = 1.0f;
    req->seed = -1;
}

static uint64_t clock_seed(const void *salt)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
           ((uint64_t)(uintptr_t)salt * 0x9e3779b97f4a7c15ull);
}

/* The chat templates (DSV3, R1) render only a body's messages; the sampling
 * fields of a Chat Completions body are read here, as OpenAI defines them:
 * max_completion_tokens (or the older max_tokens), temperature [0, 2], top_p
 * [0, 1] (0 keeps only the most likely token), seed, presence_penalty and
 * frequency_penalty [-2, 2]. A field the body lacks keeps the di_request's value. */
static di_status template_sampling(const char *json, size_t len, sampler_params *sp,
                                   int64_t *max_tokens, int64_t *seed, di_error **err)
{
    json_t *root = json_loadb(json, len, 0, NULL);
    if (!root) return DI_OK; /* the codec accepted it: nothing more to read */
    di_status st = DI_OK;
    json_t *v;
    if ((v = json_object_get(root, "max_completion_tokens")) ||
        (v = json_object_get(root, "max_tokens"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1) {
            st = di_error_set(err, DI_ERR_INVALID_REQUEST,
                              "max_tokens: expected an integer of at least 1");
            goto done;
        }
        if (*max_tokens == 0) *max_tokens = (int64_t)json_integer_value(v);
    }
    struct {
        const char *name;
        float *field;
        double lo, hi;
    } nums[] = {
        {"temperature", &sp->temperature, 0.0, 2.0},
        {"top_p", &sp->top_p, 0.0, 1.0},
        {"presence_penalty", &sp->presence_penalty, -2.0, 2.0},
        {"frequency_penalty", &sp->frequency_penalty, -2.0, 2.0},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        v = json_object_get(root, nums[i].name);
        if (!v || json_is_null(v)) continue;
        double x = json_number_value(v);
        if (!json_is_number(v) || x < nums[i].lo || x > nums[i].hi) {
            st = errf(err, DI_ERR_INVALID_REQUEST, "%s: expected a number in [%g, %g]",
                      nums[i].name, nums[i].lo, nums[i].hi);
            goto done;
        }
        *nums[i].field = (float)x;
    }
    if (sp->top_p <= 0.0f) {
        sp->temperature = 0.0f;
        sp->top_p = 1.0f;
    }
    v = json_object_get(root, "seed");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            st = di_error_set(err, DI_ERR_INVALID_REQUEST, "seed: expected a non-negative integer");
            goto done;
        }
        *seed = (int64_t)json_integer_value(v);
    }
done:
    json_decref(root);
    return st;
}

DI_API di_status di_submit(di_engine *e, const di_request *req_in, uint64_t *id, di_error **err)
{
    if (id) *id = 0;
    if (!e || !req_in || !id)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "engine, req and id must not be NULL");
    di_request q;
    di_request_init(&q);
    const char *msg;
    if (di_struct_copy_in(&q, sizeof q, req_in, sizeof q, &msg) != DI_OK)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, msg);
    pthread_mutex_lock(&e->mu);
    int destroying = e->destroying;
    pthread_mutex_unlock(&e->mu);
    if (destroying) return di_error_set(err, DI_ERR_INVALID_STATE, "the engine is being destroyed");
    if (!q.on_event) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "on_event: must be set");
    if (q.protocol < 0 || q.protocol > DI_PROTOCOL_RESPONSES)
        return errf(err, DI_ERR_INVALID_ARGUMENT, "protocol: unknown protocol %d", (int)q.protocol);
    if (q.reserved != 0) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "reserved: must be 0");
    if (q.ignore_eos != 0 && q.ignore_eos != 1)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "ignore_eos: expected 0 or 1");
    if (q.seed < -1)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "seed: expected -1 (random) or >= 0");
    if (q.max_tokens < 0)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "max_tokens: expected 0 or more");
    if (q.n_stop_tokens && !q.stop_tokens)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "stop_tokens: must not be NULL");
    for (size_t i = 0; i < q.n_stop_tokens; i++)
        if (q.stop_tokens[i] < 0 || q.stop_tokens[i] >= e->n_vocab)
            return errf(err, DI_ERR_INVALID_ARGUMENT,
                        "stop_tokens[%zu]: token id %d is outside the vocabulary of %d", i,
                        (int)q.stop_tokens[i], (int)e->n_vocab);

    di_status st = DI_OK;
    di_prompt *prompt = NULL;
    sched_request *r = calloc(1, sizeof *r);
    api_request *a = calloc(1, sizeof *a);
    if (!r || !a) {
        st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    a->fn = q.on_event;
    a->user = q.user_data;
    r->owner = a;
    const int32_t *ids;
    size_t n_ids;
    sampler_params sp = {0};
    sp.temperature = q.temperature;
    sp.top_p = q.top_p;
    if (q.protocol) {
        if (!e->codec) {
            st = di_error_set(err, DI_ERR_UNSUPPORTED,
                              "this model has no prompt encoding the codec knows (DeepSeek V3, "
                              "V4, R1 distills), so protocol requests cannot be rendered: submit "
                              "token IDs (protocol 0) or set di_engine_config.encoding");
            goto fail;
        }
        if (!q.json) {
            st = di_error_set(err, DI_ERR_INVALID_ARGUMENT, "json: must not be NULL");
            goto fail;
        }
        if ((st = di_codec_render(e->codec, (di_protocol)q.protocol, q.json, q.json_len, &prompt,
                                  err)) != DI_OK)
            goto fail;
        if ((st = di_prompt_tokens(prompt, &ids, &n_ids, err)) != DI_OK) goto fail;
        /* The V4 encodings resolve temperature and top_p from the body as the
         * reference does; the chat templates (DSV3, R1) resolve none, so the
         * di_request's apply. top_p 0 keeps only the most likely token. */
        if (e->encoding == DI_ENCODING_DSV4 || e->encoding == DI_ENCODING_DSV41) {
            sp.temperature = di_prompt_temperature(prompt);
            sp.top_p = di_prompt_top_p(prompt);
            if (sp.top_p <= 0.0f) {
                sp.temperature = 0.0f;
                sp.top_p = 1.0f;
            }
        } else {
            sp.presence_penalty = q.presence_penalty;
            sp.frequency_penalty = q.frequency_penalty;
            if ((st = template_sampling(q.json, q.json_len, &sp, &q.max_tokens, &q.seed, err)) !=
                DI_OK)
                goto fail;
        }
    } else {
        if (!q.tokens || q.n_tokens == 0) {
            st = di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                              "tokens: a token request needs at least one prompt token");
            goto fail;
        }
        ids = q.tokens;
        n_ids = q.n_tokens;
    }
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= e->n_vocab) {
            st = errf(err, DI_ERR_INVALID_ARGUMENT,
                      "tokens[%zu]: token id %d is outside the model's vocabulary of %d", i,
                      (int)ids[i], (int)e->n_vocab);
            goto fail;
        }
    if ((int64_t)n_ids >= e->n_ctx) {
        st = errf(err, DI_ERR_CONTEXT_LENGTH,
                  "the prompt's %zu tokens leave no room for output in the context of %lld "
                  "tokens",
                  n_ids, (long long)e->n_ctx);
        goto fail;
    }
    if (model_kv_blocks_for((int64_t)n_ids + 1) > model_kv_blocks_total(e->m)) {
        st = errf(err, DI_ERR_CONTEXT_LENGTH,
                  "the prompt's %zu tokens do not fit the KV cache budget of %d tokens", n_ids,
                  (int)(model_kv_blocks_total(e->m) * MODEL_KV_BLOCK));
        goto fail;
    }
    int64_t room = e->n_ctx - (int64_t)n_ids, max_tokens = q.max_tokens;
    if (q.protocol && max_tokens == 0) {
        uint32_t mt;
        if ((st = di_prompt_max_tokens(prompt, (uint32_t)n_ids, (uint32_t)e->n_ctx, &mt, err)) !=
            DI_OK)
            goto fail;
        max_tokens = mt;
    }
    if (max_tokens == 0 || max_tokens > room) max_tokens = room;
    sp.top_k = q.top_k;
    sp.min_p = q.min_p;
    sp.repetition_penalty = q.repetition_penalty;
    if (!(q.protocol && e->encoding != DI_ENCODING_DSV4 && e->encoding != DI_ENCODING_DSV41)) {
        sp.presence_penalty = q.presence_penalty;
        sp.frequency_penalty = q.frequency_penalty;
    }
    sp.seed = q.seed >= 0 ? (uint64_t)q.seed : clock_seed(r);
    sp.bias_ids = q.logit_bias_ids;
    sp.bias_values = q.logit_bias_values;
    sp.n_bias = q.n_logit_bias;
    char smsg[256];
    if ((st = sampler_create(&sp, e->n_vocab, &r->smp, smsg, sizeof smsg)) != DI_OK) {
        st = di_error_set(err, st, smsg);
        goto fail;
    }
    r->n_prompt = (int64_t)n_ids;
    r->max_tokens = max_tokens;
    r->cap = (int64_t)n_ids + 16 < e->n_ctx ? (int64_t)n_ids + 16 : e->n_ctx;
    r->tokens = malloc((size_t)r->cap * sizeof *r->tokens);
    size_t n_stop = (q.ignore_eos && !q.protocol ? 0 : (size_t)e->n_eos) + q.n_stop_tokens;
    r->stop_ids = malloc((n_stop ? n_stop : 1) * sizeof *r->stop_ids);
    if (!r->tokens || !r->stop_ids) {
        st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    memcpy(r->tokens, ids, n_ids * sizeof *ids);
    for (size_t i = 0; i < n_ids; i++)
        if (sampler_accept_prompt(r->smp, ids[i]) != 0) {
            st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
            goto fail;
        }
    if (!(q.ignore_eos && !q.protocol))
        for (int i = 0; i < e->n_eos; i++) r->stop_ids[r->n_stop++] = e->eos[i];
    for (size_t i = 0; i < q.n_stop_tokens && !q.protocol; i++)
        r->stop_ids[r->n_stop++] = q.stop_tokens[i];
    a->n_prompt = (uint32_t)n_ids;
    if (q.protocol) {
        if ((st = di_stream_create(prompt, e->tok, NULL, &a->stream, err)) != DI_OK) goto fail;
    } else if (e->tok) {
        if (di_detokenizer_create(e->tok, 0, &a->detok) != DI_OK) {
            st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
            goto fail;
        }
    }
    di_prompt_free(prompt);
    prompt = NULL;
    pthread_mutex_lock(&e->mu);
    e->pending++;
    pthread_mutex_unlock(&e->mu);
    if ((st = sched_submit(e->sched, r, id)) != DI_OK) {
        pthread_mutex_lock(&e->mu);
        e->pending--;
        pthread_mutex_unlock(&e->mu);
        st = di_error_set(err, st,
                          st == DI_ERR_INVALID_STATE ? "the engine is being destroyed"
                                                     : "out of memory");
        goto fail;
    }
    return DI_OK;
fail:
    di_prompt_free(prompt);
    if (a) {
        di_stream_free(a->stream);
        di_detokenizer_free(a->detok);
        free(a);
    }
    sched_request_free(r);
    return st;
}

DI_API di_status di_cancel(di_engine *e, uint64_t id, di_error **err)
{
    if (!e) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "engine must not be NULL");
    pthread_mutex_lock(&e->mu);
    int destroying = e->destroying;
    pthread_mutex_unlock(&e->mu);
    if (destroying) return di_error_set(err, DI_ERR_INVALID_STATE, "the engine is being destroyed");
    di_status st = sched_cancel(e->sched, id);
    if (st == DI_ERR_NOT_FOUND)
        return errf(err, st, "no request has id %llu", (unsigned long long)id);
    if (st == DI_ERR_INVALID_STATE)
        return errf(err, st, "request %llu has already finished", (unsigned long long)id);
    return st;
}
