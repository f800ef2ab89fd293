/* di_request_init and di_submit (deepinfer.h, "Engine"): a request is checked,
 * rendered and tokenized on the caller's thread, its sampler built, and only
 * then queued for the worker, so a bad request fails at once and the worker
 * never sees one. */
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/engine_internal.h"
#include "util/error.h"
#include "util/struct_size.h"
#include "sampler/sampler.h"

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

/* The chat templates (DSV3, R1, ChatML) render only a body's messages; the
 * sampling fields of the body are read here, as OpenAI defines them:
 * max_completion_tokens (or the older max_tokens; Messages' max_tokens;
 * Responses' max_output_tokens), temperature [0, 2], top_p
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
        (v = json_object_get(root, "max_tokens")) ||
        (v = json_object_get(root, "max_output_tokens"))) {
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
            st = di_error_setf(err, DI_ERR_INVALID_REQUEST, "%s: expected a number in [%g, %g]",
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
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "protocol: unknown protocol %d",
                             (int)q.protocol);
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
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
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
            if (e->no_codec_why[0])
                st = di_error_setf(err, DI_ERR_UNSUPPORTED,
                                   "%s, so protocol requests cannot be rendered: submit token "
                                   "IDs (protocol 0) or set di_engine_config.tokenizer_path",
                                   e->no_codec_why);
            else
                st = di_error_set(err, DI_ERR_UNSUPPORTED,
                                  "this model has no prompt encoding the codec knows (DeepSeek "
                                  "V3, V4, R1 distills, ChatML), so protocol requests cannot be "
                                  "rendered: submit token IDs (protocol 0) or set "
                                  "di_engine_config.encoding");
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
            st = di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                               "tokens[%zu]: token id %d is outside the model's vocabulary of %d",
                               i, (int)ids[i], (int)e->n_vocab);
            goto fail;
        }
    if ((int64_t)n_ids >= e->n_ctx) {
        st =
            di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                          "the prompt's %zu tokens leave no room for output in the context of %lld "
                          "tokens",
                          n_ids, (long long)e->n_ctx);
        goto fail;
    }
    if (model_kv_blocks_for((int64_t)n_ids + 1) > model_kv_blocks_total(e->m)) {
        st = di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                           "the prompt's %zu tokens do not fit the KV cache budget of %d tokens",
                           n_ids, (int)(model_kv_blocks_total(e->m) * MODEL_KV_BLOCK));
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
