/* The public engine API (deepinfer.h, "Engine"): handles, requests, events and
 * polling over lib/engine/scheduler.h. This file is the only one that knows
 * about the host's callbacks: the scheduler's worker hands it tokens, it turns
 * them into events (decoded text, or di_stream's parsed events and protocol
 * chunks), and di_poll delivers them on the host's thread. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#ifdef __linux__
#    include <sys/eventfd.h>
#endif
#include <unistd.h>

#include "util/error.h"
#include "api/engine_internal.h"
#include "api/engram_vocab.h"
#include "api/event.h"
#include "util/struct_size.h"
#include "util/utf8.h"
#include "engine/scheduler.h"
#include "model/gguf.h"
#include "model/model.h"
#include "recipe/encoding.h"
#include "recipe/stream.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

_Static_assert(sizeof(di_engine_config) == DI_STRUCT_SIZE_UNTIL(di_engine_config, reserved_kv),
               "di_engine_config has no trailing padding");
_Static_assert(sizeof(di_request) == DI_STRUCT_SIZE_UNTIL(di_request, n_stop_strings),
               "di_request has no trailing padding");

static void elog(di_engine *e, di_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sink_log(void *ctx, di_log_level level, const char *message);

static void elog(di_engine *e, di_log_level level, const char *fmt, ...)
{
    if (!e->log) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sink_log(e, level, msg);
}

/* The event descriptor's level, kept equal to "the queue is not empty": set
 * when the queue goes from empty to not, cleared when di_poll takes it all.
 * Called with mu held. */
static void event_fd_set(di_engine *e)
{
#ifdef __linux__
    if (e->event_fd >= 0) (void)eventfd_write(e->event_fd, 1);
#else
    (void)e;
#endif
}

static void event_fd_clear(di_engine *e)
{
#ifdef __linux__
    eventfd_t v;
    if (e->event_fd >= 0) (void)eventfd_read(e->event_fd, &v); /* non-blocking: 0 or EAGAIN */
#else
    (void)e;
#endif
}

static void enqueue(di_engine *e, event_list *l)
{
    if (!l->head) return;
    pthread_mutex_lock(&e->mu);
    if (!e->head) event_fd_set(e);
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
    if (di_stream_ready(a->stream, a->n_prompt, (uint32_t)r->n_cached, NULL, NULL) == DI_OK)
        collect_stream(l, r->id, a->fn, a->user, a->stream, NULL);
}

/* Chat `n`: the events of l belong to a's choice. */
static void tag_choice(event_list *l, const api_request *a)
{
    for (di_event *ev = l->head; ev; ev = ev->next) ev->choice = a->choice;
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
        /* the scheduler hands one token at a time with its log probabilities */
        if (ev->tokens && r->want_logprobs && n == 1) {
            size_t k = (size_t)r->top_logprobs;
            ev->logprobs = malloc(sizeof *ev->logprobs);
            if (ev->logprobs) ev->logprobs[0] = r->lp;
            if (k && ev->logprobs) {
                ev->top_ids = malloc(k * sizeof *ev->top_ids);
                ev->top_logprobs = malloc(k * sizeof *ev->top_logprobs);
                if (ev->top_ids && ev->top_logprobs) {
                    memcpy(ev->top_ids, r->lp_top_ids, k * sizeof *ev->top_ids);
                    memcpy(ev->top_logprobs, r->lp_top, k * sizeof *ev->top_logprobs);
                    ev->n_top = k;
                } else {
                    free(ev->top_ids);
                    free(ev->top_logprobs);
                    ev->top_ids = NULL;
                    ev->top_logprobs = NULL;
                    l.oom = 1;
                }
            }
            if (!ev->logprobs) l.oom = 1;
        }
    }
    int end = 0;
    if (a->stream) {
        stream_ready(&l, r, a);
        /* A stop token ends the output without being part of its text, but it
         * was generated: the usage counts it, as di_event_completion_tokens
         * does (every token the model produced, vLLM's count). */
        if (is_stop && !di_stream_finished(a->stream))
            (void)di_stream_push_text(a->stream, "", 0, (uint32_t)n, NULL);
        if (!is_stop) {
            di_error *err = NULL;
            di_status pst;
            if (r->want_logprobs && n == 1) {
                /* alternatives the tokenizer has no text for (a model's vocabulary
                 * padded beyond its tokenizer's) are left out */
                int32_t top_ids[SCHED_MAX_TOP];
                float top[SCHED_MAX_TOP];
                size_t k = 0;
                int32_t vocab = di_tokenizer_vocab_size(e->tok);
                for (int t = 0; t < r->top_logprobs; t++)
                    if (r->lp_top_ids[t] < vocab) {
                        top_ids[k] = r->lp_top_ids[t];
                        top[k++] = r->lp_top[t];
                    }
                pst = di_stream_push_tokens_logprobs(a->stream, ids, n, &r->lp, 1, top_ids, top, k,
                                                     &err);
            } else {
                pst = di_stream_push_tokens(a->stream, ids, n, &err);
            }
            if (pst != DI_OK) {
                elog(e, DI_LOG_WARN, "request %llu: %s", (unsigned long long)r->id,
                     di_error_message(err));
                di_error_free(err);
            }
            collect_stream(&l, r->id, a->fn, a->user, a->stream, &a->finish_text);
            end = di_stream_finished(a->stream);
        }
    } else if (a->detok && !is_stop) {
        for (size_t i = 0; i < n && !end; i++) {
            const char *t;
            size_t len;
            if (di_detokenizer_push(a->detok, ids[i], &t, &len) != DI_OK || !len) continue;
            if (!a->n_stops) {
                event_text(&l, r->id, a->fn, a->user, DI_EVENT_TEXT, t, len);
                continue;
            }
            int hit = api_stop_feed(a, r->id, &l, t, len, 0);
            if (hit < 0) l.oom = 1;
            end = hit == 1; /* a stop string: the request ends here (DI_FINISH_STOP) */
        }
    }
    if (l.oom) elog(e, DI_LOG_ERROR, "out of memory building events; some were dropped");
    tag_choice(&l, a);
    enqueue(e, &l);
    return end;
}

/* The terminal event, allocated with a retry: it must exist whatever else
 * failed (when memory stays short, without its strings). */
static di_event *done_event(event_list *l, uint64_t id, const api_request *a)
{
    di_event *ev = NULL;
    for (int tries = 0; !ev; tries++) {
        ev = event_new(l, id, a->fn, a->user, DI_EVENT_DONE);
        if (!ev && tries > 1000) abort(); /* memory never came back: nothing sound is left */
        if (!ev) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return ev;
}

/* The end of one choice of a Chat request with n > 1: its finish chunk (its
 * index); the last choice to end joins them all into the request's last chunk
 * (the usage summed over the choices), [DONE], the whole response and the one
 * DONE event. A choice that failed makes the request's DONE that error (the
 * first one), without a response. */
static void choice_done(di_engine *e, sched_request *r, di_finish finish, di_status status,
                        const char *message)
{
    api_request *a = r->owner;
    api_choices *g = a->group;
    event_list l = {0};
    if (status == DI_OK) {
        char *finish_text = NULL;
        stream_ready(&l, r, a);
        if (di_stream_finish(a->stream, finish, NULL) == DI_OK)
            collect_stream(&l, r->id, a->fn, a->user, a->stream, &finish_text);
        if (!finish_text) {
            finish_text = a->finish_text;
            a->finish_text = NULL;
        }
        if (a->choice == 0) {
            g->finish = finish;
            g->finish_text = finish_text;
        } else {
            free(finish_text);
        }
    } else if (g->status == DI_OK) {
        g->status = status;
        g->message = di_escape_dup(message);
    }
    tag_choice(&l, a);
    g->completion_tokens += (uint64_t)(r->n_all - r->n_prompt);
    g->drafted += (uint64_t)r->n_drafted;
    g->accepted += (uint64_t)r->n_accepted;
    g->streams[a->choice] = a->stream; /* kept for the join */
    a->stream = NULL;
    int last = ++g->n_done == g->n;
    if (last) {
        uint32_t reasoning = 0;
        const char *response = NULL;
        size_t response_len = 0;
        if (g->status == DI_OK && rc_stream_join(g->streams, g->n) == 0) {
            collect_stream(&l, r->id, a->fn, a->user, g->streams[0], NULL);
            response = di_stream_response_json(g->streams[0], &response_len);
            for (uint32_t i = 0; i < g->n; i++) {
                uint32_t k = 0;
                di_stream_usage(g->streams[i], NULL, &k);
                reasoning += k;
            }
        } else if (g->status == DI_OK) {
            g->status = DI_ERR_OUT_OF_MEMORY;
            g->message = event_strdup("out of memory joining the choices");
        }
        di_event *ev = done_event(&l, r->id, a);
        ev->status = g->status;
        ev->message = g->message ? g->message : event_strdup("");
        g->message = NULL;
        ev->finish = g->status == DI_OK ? g->finish : (di_finish)0;
        ev->finish_text = g->status == DI_OK ? g->finish_text : NULL;
        if (g->status != DI_OK) free(g->finish_text);
        g->finish_text = NULL;
        ev->prompt_tokens = (uint32_t)r->n_prompt;
        ev->prompt_cache_hit_tokens = (uint32_t)r->n_cached;
        ev->draft_tokens = (uint32_t)g->drafted;
        ev->accepted_draft_tokens = (uint32_t)g->accepted;
        ev->completion_tokens = (uint32_t)g->completion_tokens;
        ev->reasoning_tokens = reasoning;
        if (response) {
            ev->response = event_strndup(response, response_len);
            ev->response_len = response_len;
        }
        for (uint32_t i = 0; i < g->n; i++) di_stream_free(g->streams[i]);
        free(g->streams);
        free(g);
    }
    free(a->finish_text);
    free(a);
    r->owner = NULL;
    enqueue(e, &l);
}

static void sink_done(void *ctx, sched_request *r, di_finish finish, di_status status,
                      const char *message)
{
    di_engine *e = ctx;
    api_request *a = r->owner;
    if (a->group) {
        choice_done(e, r, finish, status, message);
        return;
    }
    event_list l = {0};
    char *finish_text = NULL;
    uint32_t reasoning = 0;
    const char *response = NULL;
    size_t response_len = 0;
    if (a->stream && status == DI_OK) {
        stream_ready(&l, r, a);
        if (di_stream_finish(a->stream, finish, NULL) == DI_OK)
            collect_stream(&l, r->id, a->fn, a->user, a->stream, &finish_text);
        if (!finish_text) { /* the stream had finished inside a push */
            finish_text = a->finish_text;
            a->finish_text = NULL;
        }
        response = di_stream_response_json(a->stream, &response_len);
        di_stream_usage(a->stream, NULL, &reasoning);
    } else if (a->detok) {
        const char *t = "";
        size_t len = 0;
        if (di_detokenizer_flush(a->detok, &t, &len) != DI_OK) len = 0;
        if (!a->n_stops) {
            if (len) event_text(&l, r->id, a->fn, a->user, DI_EVENT_TEXT, t, len);
        } else if (!a->stop_hit) {
            /* the held text, and the flushed tail, can no longer begin a stop string */
            if (api_stop_feed(a, r->id, &l, t, len, 1) < 0) l.oom = 1;
        }
    }
    /* The terminal event must exist whatever else failed: it is allocated with
     * a retry, and without its strings when memory is that short. */
    di_event *ev = done_event(&l, r->id, a);
    ev->status = status;
    ev->message = di_escape_dup(message);
    ev->finish = status == DI_OK ? finish : (di_finish)0;
    ev->finish_text = finish_text;
    ev->prompt_tokens = (uint32_t)r->n_prompt;
    ev->prompt_cache_hit_tokens = (uint32_t)r->n_cached;
    ev->draft_tokens = (uint32_t)r->n_drafted;
    ev->accepted_draft_tokens = (uint32_t)r->n_accepted;
    ev->completion_tokens = (uint32_t)(r->n_all - r->n_prompt);
    ev->reasoning_tokens = reasoning;
    if (response) {
        ev->response = event_strndup(response, response_len);
        ev->response_len = response_len;
    }
    di_stream_free(a->stream);
    di_detokenizer_free(a->detok);
    api_request_free_stops(a);
    free(a->finish_text);
    free(a);
    r->owner = NULL;
    enqueue(e, &l);
}

/* The log contract (di_log_fn) promises UTF-8: a message quoting a path the host
 * gave, or one cut at its buffer's end, may not be; ill-formed bytes become '?'
 * (a cut character at the end is dropped). */
static void sink_log(void *ctx, di_log_level level, const char *message)
{
    di_engine *e = ctx;
    if (!e->log) return;
    const uint8_t *m = (const uint8_t *)message;
    size_t n = strlen(message);
    if (di_utf8_scan_bytes(m, n).state == DI_UTF8_VALID) {
        e->log(e->log_user, level, message);
        return;
    }
    char fixed[1024];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < sizeof fixed;) {
        size_t k = di_utf8_sequence_length(m + i, n - i);
        if (k == 0) {
            size_t bad = di_utf8_ill_formed_length(m + i, n - i);
            if (i + bad == n) break; /* a character cut at the end */
            fixed[o++] = '?';
            i += bad;
        } else {
            memcpy(fixed + o, m + i, k);
            o += k;
            i += k;
        }
    }
    fixed[o] = 0;
    e->log(e->log_user, level, fixed);
}

/* ---- engine ---- */

/* The size the exported di_engine_config_init writes: the struct of the
 * release that added di_engine_config_init_size. Frozen: binaries compiled
 * before the di_engine_config_init macro pass a struct no larger, so a field
 * appended later must not change it (it names today's last field, not sizeof). */
#define ENGINE_CONFIG_INIT_SIZE DI_STRUCT_SIZE_UNTIL(di_engine_config, reserved_kv)
_Static_assert(ENGINE_CONFIG_INIT_SIZE <= sizeof(di_engine_config),
               "di_engine_config_init's frozen size is a release of the struct");

/* The defaults (deepinfer.h gives each with its field): zero but for those set
 * here, which belong to the first release (a field appended later defaults to
 * zero), each written only when the caller's struct holds it. */
DI_API void di_engine_config_init_size(di_engine_config *cfg, size_t struct_size)
{
    if (!di_struct_init(cfg, struct_size)) return;
    if (struct_size >= DI_STRUCT_SIZE_UNTIL(di_engine_config, device)) cfg->device = DI_DEVICE_CPU;
}

DI_API void(di_engine_config_init)(di_engine_config *cfg)
{
    di_engine_config_init_size(cfg, ENGINE_CONFIG_INIT_SIZE);
}

/* The encoding a GGUF declares through its pre-tokenizer name; 0 when none.
 * *chat_template (when not NULL and still NULL) gets a copy of its
 * tokenizer.chat_template. */
static int32_t gguf_encoding(const char *path, char *pre, size_t pre_size, char **chat_template,
                             int *no_vocab)
{
    gguf_file *f = NULL;
    char msg[256];
    int32_t enc = 0;
    pre[0] = 0;
    if (no_vocab) *no_vocab = 0;
    if (gguf_open(path, GGUF_OPEN_METADATA_ONLY, &f, msg, sizeof msg) != DI_OK) return 0;
    const char *s;
    size_t n;
    /* llama.cpp's LLAMA_VOCAB_TYPE_NONE: weights without a vocabulary (a key
     * of another type is the tokenizer loader's error to report) */
    if (no_vocab && (!gguf_find(f, "tokenizer.ggml.model") ||
                     (gguf_get_string(f, "tokenizer.ggml.model", &s, &n) && n == 4 &&
                      memcmp(s, "none", 4) == 0)))
        *no_vocab = 1;
    if (gguf_get_string(f, "tokenizer.ggml.pre", &s, &n)) {
        snprintf(pre, pre_size, "%.*s", (int)n, s);
        if (strcmp(pre, "deepseek-r1-qwen") == 0) enc = DI_ENCODING_R1;
        if (strcmp(pre, "deepseek-v3") == 0) enc = DI_ENCODING_DSV3;
    }
    if (chat_template && !*chat_template && gguf_get_string(f, "tokenizer.chat_template", &s, &n) &&
        (*chat_template = malloc(n + 1))) {
        memcpy(*chat_template, s, n);
        (*chat_template)[n] = 0;
    }
    gguf_close(f);
    return enc;
}

/* Add an end-of-sequence id (ignored when outside the vocabulary or known). */
static void add_eos(di_engine *e, int32_t id)
{
    if (id < 0 || id >= e->n_vocab) return;
    for (int i = 0; i < e->n_eos; i++)
        if (e->eos[i] == id) return;
    e->eos[e->n_eos++] = id;
}

/* The codec of encoding enc (0: none). An encoding whose turn token the
 * tokenizer lacks would render its turns as plain text the model never saw
 * (and one whose turn token lies past the model's vocabulary, every prompt
 * refused):
 * refused when the host asked for it (`asked`); when only the file declared it
 * (tokenizer.ggml.pre `pre`), the engine runs without a codec, token requests
 * only, and keeps why for the protocol requests it refuses. */
static di_status engine_set_encoding(di_engine *e, int32_t enc, int asked, const char *pre,
                                     const char *chat_template, di_error **err)
{
    if (enc == 0) return DI_OK;
    const char *turn = enc == DI_ENCODING_CHATML ? "<|im_start|>"
                       : enc == DI_ENCODING_DSV4 || enc == DI_ENCODING_DSV41
                           ? "<\xef\xbd\x9c"
                             "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
                           : "<\xef\xbd\x9c"
                             "Assistant\xef\xbd\x9c>";
    int32_t turn_id;
    char lack[160] = "";
    if (!e->tok)
        snprintf(lack, sizeof lack, "the model has no tokenizer (set tokenizer_path)");
    else if (di_tokenizer_token_id(e->tok, turn, strlen(turn), &turn_id) != DI_OK)
        snprintf(lack, sizeof lack, "the tokenizer has no %s token", turn);
    else {
        /* another model's tokenizer: the turn tokens every prompt holds lie
         * past the model's vocabulary, so every prompt would be refused */
        const char *user = enc == DI_ENCODING_CHATML ? "<|im_end|>"
                                                     : "<\xef\xbd\x9c"
                                                       "User\xef\xbd\x9c>";
        int32_t user_id;
        if (di_tokenizer_token_id(e->tok, user, strlen(user), &user_id) != DI_OK) user_id = -1;
        const int past_turn = turn_id >= e->n_vocab;
        if (past_turn || user_id >= e->n_vocab)
            snprintf(lack, sizeof lack,
                     "the tokenizer's %s is token %d, past the model's vocabulary of %d",
                     past_turn ? turn : user, (int)(past_turn ? turn_id : user_id),
                     (int)e->n_vocab);
    }
    if (lack[0]) {
        if (asked)
            return di_error_setf(err, DI_ERR_UNSUPPORTED, "encoding: %s, which encoding %s needs",
                                 lack, di_encoding_name(enc));
        snprintf(e->no_codec_why, sizeof e->no_codec_why,
                 "the model declares encoding %s (tokenizer.ggml.pre \"%s\"), but %s",
                 di_encoding_name(enc), pre, lack);
        return DI_OK;
    }
    di_status st = di_codec_create(e->tok, (di_encoding)enc, &e->codec, err);
    if (st != DI_OK) return st;
    e->encoding = enc;
    if (enc == DI_ENCODING_CHATML) {
        if (chat_template) {
            char *sys = rc_chatml_default_system(chat_template, strlen(chat_template));
            st = sys ? di_codec_set_default_system(e->codec, sys, err) : DI_OK;
            free(sys);
            if (st != DI_OK) return st;
        }
        /* a ChatML turn ends with <|im_end|>, whatever the model's EOS is */
        int32_t im_end;
        if (di_tokenizer_token_id(e->tok, "<|im_end|>", 10, &im_end) == DI_OK &&
            im_end < e->n_vocab)
            add_eos(e, im_end);
    }
    return DI_OK;
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
    free(e->info_json);
    free(e->served_name);
    di_tokenizer_free(e->tok);
    grammar_vocab_free(e->gvocab);
    model_free(e->m);
    for (di_event *ev = e->head, *next; ev; ev = next) {
        next = ev->next;
        event_free(ev);
    }
    if (e->event_fd >= 0) close(e->event_fd);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* The draft model of c.draft_model_path, checked against the engine's model
 * (the vocabulary's size; its token strings when both have a tokenizer),
 * as a drafter for max_running requests (draft.h). */
static di_status load_draft_model(di_engine *e, const di_engine_config *c, const model_options *mo,
                                  int max_running, drafter **out, di_error **err)
{
    model *dm = NULL;
    di_error *lerr = NULL;
    model_options o = *mo;
    o.n_ctx = e->n_ctx;
    o.kv_bytes = 0;
    o.progress = NULL;
    di_status st = model_load(c->draft_model_path, &o, &dm, &lerr);
    if (st != DI_OK) {
        st = di_error_setf(err, st, "draft_model_path: %s", di_error_message(lerr));
        di_error_free(lerr);
        return st;
    }
    /* (a draft with Engram reads the model's tokenizer, which it must share) */
    if ((st = api_engram_vocab(dm, e->tok, c->draft_model_path, &lerr)) != DI_OK) {
        model_free(dm);
        st = di_error_setf(err, st, "draft_model_path: %s", di_error_message(lerr));
        di_error_free(lerr);
        return st;
    }
    int32_t dv = (int32_t)model_get_config(dm)->n_vocab;
    if (dv != e->n_vocab) {
        model_free(dm);
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "draft_model_path: the draft model's vocabulary has %d tokens, the "
                             "model's %d: a draft model must share the model's tokenizer",
                             (int)dv, (int)e->n_vocab);
    }
    /* The token strings, when both files carry a vocabulary (a GGUF draft
     * model's; a folder's tokenizer.json is not compared) */
    di_tokenizer *dt = NULL;
    char pre[64];
    int no_vocab = 1;
    if (e->tok && !is_dir(c->draft_model_path))
        (void)gguf_encoding(c->draft_model_path, pre, sizeof pre, NULL, &no_vocab);
    if (!no_vocab && (st = di_tokenizer_load(c->draft_model_path, &dt, &lerr)) != DI_OK) {
        model_free(dm);
        st = di_error_setf(err, st, "draft_model_path: its tokenizer: %s", di_error_message(lerr));
        di_error_free(lerr);
        return st;
    }
    if (dt) {
        int32_t n = di_tokenizer_vocab_size(dt);
        for (int32_t id = 0; st == DI_OK && id < n && id < di_tokenizer_vocab_size(e->tok); id++) {
            char *a = NULL, *b = NULL;
            size_t la = 0, lb = 0;
            if (di_tokenizer_decode(dt, &id, 1, 0, &a, &la, NULL) == DI_OK &&
                di_tokenizer_decode(e->tok, &id, 1, 0, &b, &lb, NULL) == DI_OK &&
                (la != lb || memcmp(a, b, la) != 0))
                st = di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                   "draft_model_path: token %d is \"%.40s\" in the draft model's "
                                   "tokenizer and \"%.40s\" in the model's: a draft model must "
                                   "share the model's tokenizer",
                                   (int)id, a, b);
            di_text_free(a);
            di_text_free(b);
        }
        di_tokenizer_free(dt);
        if (st != DI_OK) {
            model_free(dm);
            return st;
        }
    }
    if ((st = drafter_model_create(dm, max_running, out)) != DI_OK)
        return di_error_set(err, st, "out of memory for the draft model's drafter");
    elog(e, DI_LOG_INFO, "speculative decoding: draft model %s", c->draft_model_path);
    return DI_OK;
}

DI_API di_status di_engine_create(const di_engine_config *cfg, di_engine **out, di_error **err)
{
    if (!cfg || !out)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "cfg and out must not be NULL");
    *out = NULL;
    di_engine_config c;
    di_engine_config_init(&c);
    const char *msg;
    if (di_struct_copy_in(&c, sizeof c, cfg, DI_STRUCT_SIZE_UNTIL(di_engine_config, progress_user),
                          &msg) != DI_OK)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, msg);
    if (!c.model_path)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "model_path: must not be NULL");
    if (c.served_model_name) { /* every response carries it as JSON text */
        di_utf8_scan u =
            di_utf8_scan_bytes((const uint8_t *)c.served_model_name, strlen(c.served_model_name));
        if (u.state != DI_UTF8_VALID)
            return di_error_setf(
                err, DI_ERR_INVALID_ARGUMENT,
                "served_model_name: not UTF-8 (an ill-formed sequence at byte %zu)", u.valid);
    }
    if (c.device != DI_DEVICE_CPU && c.device != DI_DEVICE_CUDA)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "device: unknown device %d",
                             (int)c.device);
    if (c.encoding < 0 || c.encoding > DI_ENCODING_CHATML)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "encoding: unknown encoding %d",
                             (int)c.encoding);
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
    if (c.disable_prefix_cache != 0 && c.disable_prefix_cache != 1)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "disable_prefix_cache: expected 0 or 1");
    if (c.reserved != 0) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "reserved: must be 0");
    if (c.speculative_tokens < 0 || c.speculative_tokens > 64)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "speculative_tokens: expected 0 (off) to 64 draft tokens per step");
    if (c.speculative_fixed != 0 && c.speculative_fixed != 1)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "speculative_fixed: expected 0 or 1");
    if (c.draft < DI_DRAFT_AUTO || c.draft > DI_DRAFT_MTP)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "draft: unknown drafter %d (expected DI_DRAFT_AUTO, "
                             "DI_DRAFT_PROMPT_LOOKUP, DI_DRAFT_MODEL or DI_DRAFT_MTP)",
                             (int)c.draft);
    if (c.reserved_draft != 0)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "reserved_draft: must be 0");
    model_dtype kv_dtype;
    di_status kst = model_kv_dtype_of(c.kv_cache_type, &kv_dtype, err);
    if (kst != DI_OK) return kst;
    if (c.reserved_kv != 0)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "reserved_kv: must be 0");
    if (c.draft_model_path && !c.draft_model_path[0])
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "draft_model_path: expected a model file or folder, or NULL for none");
    if (c.draft == DI_DRAFT_MODEL && !c.draft_model_path)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "draft: DI_DRAFT_MODEL needs draft_model_path");
    if (c.draft_model_path && c.draft == DI_DRAFT_PROMPT_LOOKUP)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "draft_model_path: set, but draft is DI_DRAFT_PROMPT_LOOKUP");
    if (c.draft_model_path && c.speculative_tokens == 0)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "draft_model_path: set, but speculative_tokens is 0 (speculation off)");
    if (c.kv_host_cache_bytes < 0)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "kv_host_cache_bytes: expected 0 (no host tier) or more");
    if (c.kv_disk_cache_bytes < 0)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "kv_disk_cache_bytes: expected 0 (4 GiB) or more");
    if (c.kv_cache_dir && !c.kv_cache_dir[0])
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "kv_cache_dir: expected a directory, or NULL for no disk tier");
    if (c.kv_cache_bytes < 0)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "kv_cache_bytes: expected 0 (the default) or more");
    di_engine *e = calloc(1, sizeof *e);
    if (!e) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->event_fd = -1;
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
    mo.device = c.device;
    mo.kv_dtype = kv_dtype;
    mo.kv_bytes = c.kv_cache_bytes;
    mo.kv_n_ctx_multiple = 4;
    mo.progress = c.progress;
    mo.progress_user = c.progress_user;
    if ((st = model_load(c.model_path, &mo, &e->m, err)) != DI_OK) goto fail;
    const model_config *mc = model_get_config(e->m);
    /* DeepSeek-V4's caches are each sequence's own: no prefix cache, so no tiers
     * (a warning, as for a tier directory that cannot be used) */
    const int v4 = mc->arch == MODEL_ARCH_DEEPSEEK_V4;
    if (v4 && (c.kv_host_cache_bytes > 0 || c.kv_cache_dir))
        elog(e, DI_LOG_WARN,
             "%s: kv_host_cache_bytes / kv_cache_dir ignored: DeepSeek-V4's caches are per "
             "sequence, with no prefix cache or tiers yet (docs/deepseek-v4.md)",
             c.model_path);
    e->n_vocab = (int32_t)mc->n_vocab;
    e->n_ctx = model_n_ctx(e->m);
    /* The tokenizer: the configured one, the GGUF's, or the directory's. */
    /* The model file's own metadata, read once: the encoding its pre-tokenizer
     * declares, its chat template, and whether it has a vocabulary at all. */
    char pre[64] = "";
    int32_t enc = c.encoding, found = 0;
    char *chat_template = NULL;
    int no_vocab = 0;
    if (!is_dir(c.model_path))
        found = gguf_encoding(c.model_path, pre, sizeof pre, &chat_template, &no_vocab);
    const char *tok_path = c.tokenizer_path;
    char *dir_json = NULL;
    if (!tok_path) {
        if (is_dir(c.model_path)) {
            size_t n = strlen(c.model_path) + sizeof "/tokenizer.json";
            dir_json = malloc(n);
            if (!dir_json) {
                free(chat_template);
                st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
                goto fail;
            }
            snprintf(dir_json, n, "%s/tokenizer.json", c.model_path);
            if (exists(dir_json)) tok_path = dir_json;
        } else if (!no_vocab) {
            /* a GGUF without a vocabulary (tokenizer.ggml.model "none" or
             * absent) serves token requests only */
            tok_path = c.model_path;
        }
    }
    st = tok_path ? di_tokenizer_load(tok_path, &e->tok, err) : DI_OK;
    free(dir_json);
    if (st == DI_OK) st = api_engram_vocab(e->m, e->tok, c.model_path, err);
    if (st != DI_OK) {
        free(chat_template);
        goto fail;
    }
    if (!found && c.tokenizer_path && !is_dir(c.tokenizer_path))
        found = gguf_encoding(c.tokenizer_path, pre, sizeof pre, &chat_template, NULL);
    /* llama.cpp's converter names DeepSeek-V4's pre-tokenizer as V3's
     * ("deepseek-v3": the same hash): with V4 weights it means V4's encoding */
    if (found == DI_ENCODING_DSV3 && mc->arch == MODEL_ARCH_DEEPSEEK_V4) found = DI_ENCODING_DSV4;
    if (enc == 0) enc = found;
    if (enc == 0 && e->tok) {
        /* A tokenizer with DeepSeek's chat tokens: the R1 distills (Qwen2, Llama
         * weights) use the R1 template, DeepSeek-V3 weights the V3 one,
         * DeepSeek-V4 weights deepseek-recipe's V4 encoding (and its DSML). */
        int32_t id;
        const char *assistant = "<\xef\xbd\x9c"
                                "Assistant\xef\xbd\x9c>"; /* <｜Assistant｜> */
        if (di_tokenizer_token_id(e->tok, assistant, strlen(assistant), &id) == DI_OK)
            enc = mc->arch == MODEL_ARCH_DEEPSEEK_V3   ? DI_ENCODING_DSV3
                  : mc->arch == MODEL_ARCH_DEEPSEEK_V4 ? DI_ENCODING_DSV4
                                                       : DI_ENCODING_R1;
        /* ChatML's turn tokens: SmolLM2, the Qwen2 chat models */
        else if (di_tokenizer_token_id(e->tok, "<|im_start|>", 12, &id) == DI_OK &&
                 di_tokenizer_token_id(e->tok, "<|im_end|>", 10, &id) == DI_OK)
            enc = DI_ENCODING_CHATML;
    }
    if (e->tok && di_tokenizer_vocab_size(e->tok) > e->n_vocab)
        elog(e, DI_LOG_WARN,
             "the tokenizer has %d tokens but the model only %d: a request whose text encodes "
             "to an id past %d will be refused; is this the model's tokenizer?",
             (int)di_tokenizer_vocab_size(e->tok), (int)e->n_vocab, (int)e->n_vocab - 1);
    /* a model's vocabulary padded past its tokenizer's is common (DeepSeek's: 129,280
     * for 128,815 tokens); one far larger is another model's tokenizer */
    else if (e->tok && (int64_t)di_tokenizer_vocab_size(e->tok) * 20 < (int64_t)e->n_vocab * 19)
        elog(e, DI_LOG_WARN,
             "the tokenizer has %d tokens but the model %d: the ids it samples past %d have no "
             "text and are dropped from the output; is this the model's tokenizer?",
             (int)di_tokenizer_vocab_size(e->tok), (int)e->n_vocab,
             (int)di_tokenizer_vocab_size(e->tok) - 1);
    st = engine_set_encoding(e, enc, c.encoding != 0, pre, chat_template, err);
    if (st != DI_OK) {
        free(chat_template);
        goto fail;
    }
    add_eos(e, mc->eos_token_id);
    if (e->tok) add_eos(e, e->tok->eos_id);
    st = engine_info_build(e, c.model_path, c.served_model_name, chat_template, err);
    free(chat_template);
    if (st != DI_OK) goto fail;
    sched_sink sink = {sink_tokens, sink_done, sink_log, e};
    /* Every running request decodes a token each step, so no more may run than
     * a step takes tokens: otherwise the newest would wait for the others. */
    int max_running = c.max_running ? c.max_running : 16;
    if (max_running > model_n_batch(e->m)) max_running = (int)model_n_batch(e->m);
    sched_cache cache = {!c.disable_prefix_cache && !v4, v4 ? 0 : c.kv_host_cache_bytes,
                         v4 ? NULL : c.kv_cache_dir, c.kv_disk_cache_bytes};
    drafter *d = NULL;
    /* llama.cpp's MTP GGUF as draft_model_path (a DeepSeek-V4 GGUF's
     * convert_hf_to_gguf.py --mtp export): its layer becomes the model's MTP
     * layer, which then drafts */
    const int mtp_file = c.draft_model_path && c.speculative_tokens > 0 &&
                         c.draft != DI_DRAFT_PROMPT_LOOKUP && model_file_is_mtp(c.draft_model_path);
    /* likewise llama.cpp's DSpark GGUF (convert_hf_to_gguf.py --dspark): its
     * head becomes the model's */
    const int dspark_file = c.draft_model_path && c.speculative_tokens > 0 &&
                            c.draft != DI_DRAFT_PROMPT_LOOKUP &&
                            model_file_is_dspark(c.draft_model_path);
    if (c.draft == DI_DRAFT_MTP && c.draft_model_path && c.speculative_tokens > 0 && !mtp_file &&
        !dspark_file) {
        st = di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                           "draft_model_path: %s is not an MTP or DSpark GGUF (llama.cpp's "
                           "convert_hf_to_gguf.py --mtp or --dspark), and draft is DI_DRAFT_MTP",
                           c.draft_model_path);
        goto fail;
    }
    if (mtp_file || dspark_file) {
        di_error *lerr = NULL;
        if ((st = mtp_file ? model_attach_mtp(e->m, c.draft_model_path, &lerr)
                           : model_attach_dspark(e->m, c.draft_model_path, &lerr)) != DI_OK) {
            st = di_error_setf(err, st, "draft_model_path: %s", di_error_message(lerr));
            di_error_free(lerr);
            goto fail;
        }
    }
    if (c.draft == DI_DRAFT_MTP && model_mtp_layers(e->m) < 1 && !model_dspark_block(e->m)) {
        st = di_error_set(
            err, DI_ERR_UNSUPPORTED,
            "draft: DI_DRAFT_MTP, but the model has no MTP (NextN) layer or DSpark "
            "head (a DeepSeek-V3, V4 or V4.1 checkpoint with num_nextn_predict_layers and "
            "its tensors has one; a DeepSeek-V4 GGUF takes llama.cpp's MTP or "
            "DSpark GGUF of it as draft_model_path, the CLI's --draft-model)");
        goto fail;
    }
    if (c.draft_model_path && c.speculative_tokens > 0 && !mtp_file && !dspark_file &&
        (st = load_draft_model(e, &c, &mo, max_running, &d, err)) != DI_OK)
        goto fail;
    /* The model's own MTP module: asked for, given as an MTP GGUF, or chosen
     * by auto when the model has one and no draft model is given. */
    if (!d && c.speculative_tokens > 0 && model_mtp_layers(e->m) > 0 &&
        (c.draft == DI_DRAFT_MTP || mtp_file || c.draft == DI_DRAFT_AUTO)) {
        if ((st = drafter_mtp_create(e->m, max_running, &d)) != DI_OK) {
            st = di_error_set(err, st, "out of memory for the MTP drafter");
            goto fail;
        }
        elog(e, DI_LOG_INFO, "speculative decoding: the model's MTP module drafts");
    }
    /* The model's own DSpark head (DeepSeek-V4-Flash-DSpark): likewise. */
    if (!d && c.speculative_tokens > 0 && model_dspark_block(e->m) &&
        (c.draft == DI_DRAFT_MTP || dspark_file || c.draft == DI_DRAFT_AUTO)) {
        if ((st = drafter_dspark_create(e->m, max_running, &d)) != DI_OK) {
            if (st == DI_ERR_INVALID_ARGUMENT)
                st = di_error_setf(err, st,
                                   "n_batch %lld is below the model's DSpark block of %d tokens "
                                   "(a block runs in one pass): raise n_batch, or draft another "
                                   "way",
                                   (long long)model_n_batch(e->m), model_dspark_block(e->m));
            else
                st = di_error_set(err, st, "out of memory for the DSpark drafter");
            goto fail;
        }
        elog(e, DI_LOG_INFO, "speculative decoding: the model's DSpark head drafts blocks of %d",
             model_dspark_block(e->m));
    }
    e->max_running = max_running;
    st = sched_create(e->m, max_running, c.speculative_tokens, c.speculative_fixed, d, &cache,
                      &sink, &e->sched);
    if (st != DI_OK) {
        st = di_error_set(err, st, "cannot start the engine's worker thread");
        goto fail;
    }
    if (c.progress) c.progress(c.progress_user, 1.0f);
    elog(e, DI_LOG_INFO,
         "engine: %s, vocabulary %d, context %lld, KV cache %d blocks of %d tokens, "
         "encoding %s%s%s%s",
         c.model_path, (int)e->n_vocab, (long long)e->n_ctx, (int)model_kv_blocks_total(e->m),
         (int)MODEL_KV_BLOCK, e->encoding ? di_encoding_name(e->encoding) : "none",
         pre[0] ? " (pre-tokenizer " : "", pre, pre[0] ? ")" : "");
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

DI_API int di_engine_event_fd(di_engine *e)
{
    if (!e) return -(int)DI_ERR_INVALID_ARGUMENT;
#ifdef __linux__
    pthread_mutex_lock(&e->mu);
    if (e->event_fd < 0 && !e->destroying) {
        e->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (e->event_fd >= 0 && e->head) event_fd_set(e);
    }
    int fd = e->event_fd >= 0 ? e->event_fd
             : e->destroying  ? -(int)DI_ERR_INVALID_STATE
                              : -(int)DI_ERR_OUT_OF_MEMORY; /* eventfd: EMFILE, ENOMEM */
    pthread_mutex_unlock(&e->mu);
    return fd;
#else
    return -(int)DI_ERR_UNSUPPORTED;
#endif
}

DI_API size_t di_engine_pending(di_engine *e)
{
    if (!e) return 0;
    pthread_mutex_lock(&e->mu);
    size_t n = e->pending;
    pthread_mutex_unlock(&e->mu);
    return n;
}

DI_API size_t di_engine_pending_count(const di_engine *e)
{
    /* the mutex is the one thing a const engine's reader changes */
    return di_engine_pending((di_engine *)e);
}

/* A delivery in progress. Callbacks are the host's code: a C++ exception (or
 * any unwinding) may leave one through deliver(), and this library is
 * compiled with -fexceptions so that poll_end runs then too (as a cleanup
 * attribute). It leaves nothing stranded: the event being delivered counts as
 * delivered (freed; a DONE comes off pending), the events after it go back to
 * the front of the queue for the next di_poll, and the poller slot is given
 * back. */
typedef struct poll_state {
    di_engine *e;
    di_event *current; /* its callback is running */
    di_event *rest;    /* not delivered yet */
    int polling;       /* di_poll holds the poller slot */
} poll_state;

static void event_delivered(di_engine *e, di_event *ev)
{
    if (ev->kind == DI_EVENT_DONE) {
        pthread_mutex_lock(&e->mu);
        e->pending--;
        pthread_mutex_unlock(&e->mu);
    }
    event_free(ev);
}

static void poll_end(poll_state *ps)
{
    di_engine *e = ps->e;
    if (ps->current) event_delivered(e, ps->current);
    ps->current = NULL;
    pthread_mutex_lock(&e->mu);
    if (ps->rest) {
        di_event *last = ps->rest;
        while (last->next) last = last->next;
        last->next = e->head;
        if (!e->head) {
            e->tail = last;
            event_fd_set(e);
        }
        e->head = ps->rest;
        ps->rest = NULL;
    }
    if (ps->polling) e->in_poll = 0;
    pthread_mutex_unlock(&e->mu);
}

/* Deliver ps->rest in order. Returns the number delivered. */
static int64_t deliver(poll_state *ps)
{
    int64_t n = 0;
    while (ps->rest) {
        di_event *ev = ps->rest;
        ps->rest = ev->next;
        ev->next = NULL;
        ps->current = ev;
        if (ev->fn) ev->fn(ev->user, ev);
        ps->current = NULL;
        event_delivered(ps->e, ev);
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
    /* the poller slot is taken before waiting: a second poller, or a destroy,
     * while this thread waits is refused (it would deliver or free under us) */
    e->in_poll = 1;
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
    __attribute__((cleanup(poll_end))) poll_state ps = {e, NULL, e->head, 1};
    if (e->head) event_fd_clear(e);
    e->head = e->tail = NULL;
    pthread_mutex_unlock(&e->mu);
    return deliver(&ps);
}

/* The end of di_engine_destroy, normal or unwinding: the engine freed with
 * whatever events are still queued. */
static void destroy_end(di_engine **e)
{
    engine_free(*e);
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
    /* If a callback unwinds out of here, the engine is still freed (the
     * events not delivered are dropped with it): destroy_end. */
    __attribute__((cleanup(destroy_end))) di_engine *doomed = e;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        if (!e->head) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        __attribute__((cleanup(poll_end))) poll_state ps = {e, NULL, e->head, 0};
        e->head = e->tail = NULL;
        pthread_mutex_unlock(&e->mu);
        deliver(&ps);
    }
    (void)doomed;
    return DI_OK;
}

/* ---- requests ---- */

DI_API di_status di_cancel(di_engine *e, uint64_t id, di_error **err)
{
    if (!e) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "engine must not be NULL");
    pthread_mutex_lock(&e->mu);
    int destroying = e->destroying;
    pthread_mutex_unlock(&e->mu);
    if (destroying) return di_error_set(err, DI_ERR_INVALID_STATE, "the engine is being destroyed");
    di_status st = sched_cancel(e->sched, id);
    if (st == DI_ERR_NOT_FOUND)
        return di_error_setf(err, st, "no request has id %llu", (unsigned long long)id);
    if (st == DI_ERR_INVALID_STATE)
        return di_error_setf(err, st, "request %llu has already finished", (unsigned long long)id);
    return st;
}
