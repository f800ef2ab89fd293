/* What lib/api/engine.c (the engine's lifecycle, the worker's sink, polling)
 * and lib/api/submit.c (checking and building requests) share: the engine
 * handle and the per-request state the API keeps. */
#ifndef DI_API_ENGINE_INTERNAL_H
#define DI_API_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "api/event.h"
#include "deepinfer/deepinfer.h"
#include "engine/scheduler.h"
#include "model/model.h"
#include "sampler/grammar.h"

/* A Chat request's n > 1 choices (api_request.group), shared by their
 * api_requests and freed with the last: each choice's stream is kept until
 * every choice has ended, then they are joined (rc_stream_join) into the
 * request's last chunk and whole response, and its one DONE event. Used only
 * on the worker thread (the sink). */
typedef struct api_choices {
    uint32_t n, n_done;
    di_stream **streams; /* [n], owned */
    uint64_t completion_tokens, drafted, accepted;
    di_finish finish; /* choice 0's */
    char *finish_text;
    di_status status; /* the first choice's error, or DI_OK */
    char *message;
} api_choices;

/* What the API keeps per request (the scheduler's owner pointer). */
typedef struct api_request {
    uint32_t choice;    /* Chat `n`: this choice's index (0 otherwise) */
    api_choices *group; /* Chat `n` > 1: the request's choices; NULL otherwise */
    di_event_fn fn;
    void *user;
    di_stream *stream;     /* protocol requests */
    di_detokenizer *detok; /* token requests with a tokenizer */
    int ready;             /* di_stream_ready was called */
    uint32_t n_prompt;
    char *finish_text; /* the protocol's finish reason, when the stream ended inside a
                          push (a stop sequence, the end of Hermes calls) */
    /* token requests' stop strings (owned copies) and the decoded text held
     * back because it may begin one (held_len bytes) */
    char **stops;
    size_t n_stops, max_stop;
    char *held;
    size_t held_len;
    int stop_hit; /* a stop string ended the output */
} api_request;

/* Free an api_request's stop strings and held text (not the request itself). */
void api_request_free_stops(api_request *a);
/* Feed decoded text of a token request with stop strings: the text that can no
 * longer be part of a stop string becomes DI_EVENT_TEXT on l; returns 1 when a
 * stop string appeared (the text before it is out, the rest dropped), 0 when
 * not, -1 when out of memory. At the end (flush), the held text is released. */
int api_stop_feed(api_request *a, uint64_t id, event_list *l, const char *t, size_t n, int flush);

struct di_engine {
    model *m;
    di_tokenizer *tok;
    di_codec *codec;
    int32_t encoding;
    /* Why there is no codec when the model declared an encoding its tokenizer
     * cannot render (protocol requests fail with it); "" otherwise. */
    char no_codec_why[320];
    sched *sched;
    int32_t n_vocab;
    int64_t n_ctx;
    int32_t eos[3]; /* the model's, the tokenizer's, ChatML's <|im_end|> */
    int n_eos;
    di_log_fn log;
    void *log_user;
    /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    di_event *head, *tail;
    size_t pending;
    int in_poll, destroying;
    /* di_engine_event_fd's eventfd, readable while events are queued; -1
     * until a host asks for it. Guarded by mu, with head/tail. */
    int event_fd;
    /* di_engine_model_info's JSON and di_engine_served_model_name (engine_info.c) */
    char *info_json;
    size_t info_len;
    char *served_name;
    /* The vocabulary's token strings for grammar masks (grammar.h), built by
     * the first di_submit with a constraint (under mu); NULL until then. */
    grammar_vocab *gvocab;
    int max_running; /* sequences decoded at once (Chat `n` is at most this) */
};

/* Build e->info_json and e->served_name once the model, tokenizer and codec
 * are loaded (engine_info.c): `served` is di_engine_config.served_model_name
 * (NULL: model_path's file or folder name, without .gguf), `chat_template` the
 * GGUF's (may be NULL). The codec's template replies answer with the served
 * name. */
di_status engine_info_build(di_engine *e, const char *model_path, const char *served,
                            const char *chat_template, di_error **err);

#endif
