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
#include "api/tool_constraint.h"
#include "util/error.h"
#include "util/struct_size.h"
#include "util/utf8.h"
#include "recipe/sampling.h"
#include "recipe/stream.h"
#include "sampler/grammar.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

/* The size the exported di_request_init writes: the struct of the release
 * that added di_request_init_size. Frozen: binaries compiled before the
 * di_request_init macro pass a struct no larger, so a field appended later
 * must not change it (it names today's last field, not sizeof). */
#define REQUEST_INIT_SIZE DI_STRUCT_SIZE_UNTIL(di_request, n_stop_strings)
_Static_assert(REQUEST_INIT_SIZE <= sizeof(di_request),
               "di_request_init's frozen size is a release of the struct");

/* The defaults (deepinfer.h gives each with its field): zero but for those set
 * here, which belong to the first release (a field appended later defaults to
 * zero), each written only when the caller's struct holds it. */
DI_API void di_request_init_size(di_request *req, size_t struct_size)
{
    if (!di_struct_init(req, struct_size)) return;
    if (struct_size >= DI_STRUCT_SIZE_UNTIL(di_request, temperature)) req->temperature = 1.0f;
    if (struct_size >= DI_STRUCT_SIZE_UNTIL(di_request, top_p)) req->top_p = 1.0f;
    if (struct_size >= DI_STRUCT_SIZE_UNTIL(di_request, repetition_penalty))
        req->repetition_penalty = 1.0f;
    if (struct_size >= DI_STRUCT_SIZE_UNTIL(di_request, seed)) req->seed = -1;
}

DI_API void(di_request_init)(di_request *req)
{
    di_request_init_size(req, REQUEST_INIT_SIZE);
}

static uint64_t clock_seed(const void *salt)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
           ((uint64_t)(uintptr_t)salt * 0x9e3779b97f4a7c15ull);
}

/* One rule for every encoding and protocol: what the request body decides
 * wins — its own field, or a rule of its model that fixes a value (the V4
 * encodings' thinking mode forces temperature 1.0) — and the di_request gives
 * what the body leaves open (docs/api.md, "Sampling precedence"). */
static void body_sampling(const rc_sampling *b, sampler_params *sp, int64_t *max_tokens,
                          int64_t *seed)
{
    if (b->set & RC_SET_TEMPERATURE) sp->temperature = b->temperature;
    if (b->set & RC_SET_TOP_P) sp->top_p = b->top_p;
    if (b->set & RC_SET_TOP_K) sp->top_k = b->top_k;
    if (b->set & RC_SET_MIN_P) sp->min_p = b->min_p;
    if (b->set & RC_SET_REPETITION_PENALTY) sp->repetition_penalty = b->repetition_penalty;
    if (b->set & RC_SET_PRESENCE_PENALTY) sp->presence_penalty = b->presence_penalty;
    if (b->set & RC_SET_FREQUENCY_PENALTY) sp->frequency_penalty = b->frequency_penalty;
    if (b->set & RC_SET_SEED) *seed = (int64_t)(b->seed & INT64_MAX);
    if (b->set & RC_SET_MAX_TOKENS) *max_tokens = b->max_tokens;
    if (sp->top_p <= 0.0f) { /* top_p 0 keeps only the most likely token */
        sp->temperature = 0.0f;
        sp->top_p = 1.0f;
    }
}

/* logit_bias of the di_request and of the body, the body's winning for a token
 * both name: *ids / *values malloc'd (NULL when there is none). */
static di_status merge_bias(const di_request *q, const rc_sampling *b, int32_t n_vocab,
                            int32_t **ids, float **values, size_t *n, di_error **err)
{
    *ids = NULL;
    *values = NULL;
    *n = 0;
    size_t cap = q->n_logit_bias + (b ? b->n_bias : 0);
    if (cap == 0) return DI_OK;
    if (q->n_logit_bias && (!q->logit_bias_ids || !q->logit_bias_values))
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "logit_bias: ids and values must be set");
    if (!(*ids = malloc(cap * sizeof **ids)) || !(*values = malloc(cap * sizeof **values))) {
        free(*ids);
        *ids = NULL;
        return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (size_t i = 0; b && i < b->n_bias; i++) {
        if (b->bias_ids[i] >= n_vocab) {
            free(*ids);
            free(*values);
            *ids = NULL;
            *values = NULL;
            *n = 0;
            return di_error_setf(err, DI_ERR_INVALID_REQUEST,
                                 "logit_bias.%d: token id outside the vocabulary of %d",
                                 (int)b->bias_ids[i], (int)n_vocab);
        }
        (*ids)[*n] = b->bias_ids[i];
        (*values)[(*n)++] = b->bias_values[i];
    }
    size_t n_body = *n;
    for (size_t i = 0; i < q->n_logit_bias; i++) {
        int dup = 0;
        for (size_t j = 0; j < n_body && !dup; j++) dup = (*ids)[j] == q->logit_bias_ids[i];
        if (dup) continue;
        (*ids)[*n] = q->logit_bias_ids[i];
        (*values)[(*n)++] = q->logit_bias_values[i];
    }
    return DI_OK;
}

/* The engine's vocabulary for grammar masks, built once (under e->mu): the
 * tokenizer's token strings, special tokens excluded. */
static di_status engine_gvocab(di_engine *e, const grammar_vocab **out, di_error **err)
{
    pthread_mutex_lock(&e->mu);
    di_status st = DI_OK;
    if (!e->gvocab) {
        const di_tokenizer_impl *tok = e->tok;
        int32_t n = e->n_vocab;
        const uint8_t **bytes = calloc((size_t)n, sizeof *bytes);
        size_t *lens = calloc((size_t)n, sizeof *lens);
        uint8_t *excl = calloc((size_t)n, 1);
        if (bytes && lens && excl) {
            for (int32_t i = 0; i < n && i < tok->n_vocab; i++) {
                tok_error terr;
                if (tok_token_bytes(tok, i, &bytes[i], &lens[i], &terr) != DI_OK) lens[i] = 0;
                excl[i] = (tok->tok_flags[i] & TOK_FLAG_SPECIAL) != 0;
            }
            st = grammar_vocab_create(n, bytes, lens, excl, &e->gvocab);
        } else
            st = DI_ERR_OUT_OF_MEMORY;
        free(bytes);
        free(lens);
        free(excl);
    }
    *out = e->gvocab;
    pthread_mutex_unlock(&e->mu);
    if (st != DI_OK) return di_error_set(err, st, "out of memory for the grammar vocabulary");
    return DI_OK;
}

/* A compiled grammar (taken) as smp's constraint, applying after token
 * `after` (-1: from the first output token). */
static di_status attach_grammar(di_engine *e, grammar *g, int32_t after, sampler *smp,
                                di_error **err)
{
    const grammar_vocab *v;
    di_status st = engine_gvocab(e, &v, err);
    if (st != DI_OK) {
        grammar_free(g);
        return st;
    }
    grammar_matcher *m;
    st = grammar_matcher_create(g, v, e->eos, (size_t)e->n_eos, &m);
    if (st == DI_ERR_INVALID_REQUEST)
        return di_error_set(err, st,
                            "the grammar allows more than 32768 parses at its start (an ambiguous "
                            "grammar, such as a repetition of something that can match nothing)");
    if (st != DI_OK || sampler_set_grammar_after(smp, m, after) != DI_OK)
        return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the grammar");
    return DI_OK;
}

/* Compile the request's constraint (grammar, json_schema or regex) into a
 * matcher on r's sampler; none set is DI_OK. */
static di_status request_constraint(di_engine *e, const di_request *q, sampler *smp, di_error **err)
{
    int n_set = (q->grammar != NULL) + (q->json_schema != NULL) + (q->regex != NULL);
    if (n_set == 0) return DI_OK;
    if (n_set > 1)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "grammar, json_schema, regex: set at most one");
    if (q->protocol)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "grammar, json_schema, regex: token requests only (a protocol "
                            "request says it in its body)");
    if (!e->tok)
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "grammar, json_schema, regex: the engine has no tokenizer, so the "
                            "tokens' strings are unknown");
    char msg[512];
    grammar *g = NULL;
    di_status st;
    if (q->grammar)
        st = grammar_compile_gbnf(q->grammar, strlen(q->grammar), &g, msg, sizeof msg);
    else if (q->json_schema)
        st = grammar_compile_json_schema(q->json_schema, strlen(q->json_schema), &g, msg,
                                         sizeof msg);
    else
        st = grammar_compile_regex(q->regex, strlen(q->regex), &g, msg, sizeof msg);
    if (st != DI_OK) /* (the messages begin with "grammar", "json_schema" or "regex") */
        return di_error_set(err, st, msg);
    return attach_grammar(e, g, -1, smp, err);
}

/* The output constraint of a protocol request's body (Chat response_format,
 * Responses text.format) on r's sampler. When the reply starts in reasoning
 * (a thinking model), the constraint starts after its </think> token: the
 * answer is what must match, as vLLM's structured output with a reasoning
 * parser does. */
static di_status body_constraint(di_engine *e, const di_prompt *prompt, const rc_sampling *body,
                                 sampler *smp, di_error **err)
{
    if (body->constraint_oom) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    const rc_reply *rp = rc_prompt_reply(prompt);
    grammar *calls = NULL; /* strict tools, a forced call: the calls' grammar */
    di_status cs = tool_call_grammar(rp, body, e->encoding == DI_ENCODING_DSV41, &calls, err);
    if (cs != DI_OK) return cs;
    if (!calls && body->constraint == RC_CONSTRAINT_NONE) return DI_OK;
    const char *field = calls ? "tools" : body->constraint_field;
    if (!calls && rp->starts_in_tool_calls)
        return di_error_setf(err, DI_ERR_INVALID_REQUEST,
                             "%s: cannot be used with tool_choice required or a named tool (the "
                             "output starts inside a tool call)",
                             field);
    int32_t after = -1;
    /* (a call the prompt opened starts the output, reasoning or not) */
    if ((rp->stage == RC_STAGE_REASONING_START || rp->stage == RC_STAGE_REASONING_CONTINUATION) &&
        !(calls && rp->starts_in_tool_calls)) {
        tok_ids ids = {0};
        tok_error terr;
        static const char end[] = "</think>";
        di_status ts = tok_encode(e->tok, (const uint8_t *)end, sizeof end - 1,
                                  DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED, &ids, &terr);
        if (ts == DI_OK && ids.n == 1) after = ids.ids[0];
        free(ids.ids);
        if (after < 0) {
            grammar_free(calls);
            return di_error_setf(err, DI_ERR_UNSUPPORTED,
                                 "%s: the answer follows the reasoning, and this tokenizer has no "
                                 "single </think> token to start the constraint at",
                                 field);
        }
    }
    if (calls) return attach_grammar(e, calls, after, smp, err);
    char msg[512];
    grammar *g = NULL;
    const char *text = body->constraint_text;
    di_status st = body->constraint == RC_CONSTRAINT_REGEX
                       ? grammar_compile_regex(text, strlen(text), &g, msg, sizeof msg)
                       : grammar_compile_json_schema(text, strlen(text), &g, msg, sizeof msg);
    if (st != DI_OK) { /* the message names "json_schema…" or "regex…": name the body's field */
        const char *rest = msg;
        if (strncmp(rest, "json_schema", 11) == 0)
            rest += 11;
        else if (strncmp(rest, "regex", 5) == 0)
            rest += 5;
        else /* the grammar the format became ("grammar 1:21: …") */
            return di_error_setf(err, st, "%s: %s", field, msg);
        return di_error_setf(err, st, "%s%s", field, rest);
    }
    return attach_grammar(e, g, after, smp, err);
}

/* One choice's sampler: sp's settings with `seed`, the request's or body's
 * constraint, and the prompt's tokens accepted (penalties count them). */
static di_status choice_sampler(di_engine *e, const di_request *q, const di_prompt *prompt,
                                const rc_sampling *body, sampler_params sp, uint64_t seed,
                                const int32_t *ids, size_t n_ids, sampler **out, di_error **err)
{
    char smsg[256];
    sp.seed = seed;
    di_status st = sampler_create(&sp, e->n_vocab, out, smsg, sizeof smsg);
    if (st != DI_OK) return di_error_set(err, st, smsg);
    if ((st = request_constraint(e, q, *out, err)) != DI_OK) return st;
    if (body && (st = body_constraint(e, prompt, body, *out, err)) != DI_OK) return st;
    for (size_t i = 0; i < n_ids; i++)
        if (sampler_accept_prompt(*out, ids[i]) != 0)
            return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    return DI_OK;
}

/* Choice `index` of a Chat request with n > 1: a copy of choice 0's request
 * (its prompt, limits and stop tokens) with sampler smp (taken, also on
 * failure) and its own api_request sharing group g. NULL when out of memory. */
static sched_request *choice_request(const sched_request *r0, const api_request *a0, sampler *smp,
                                     uint32_t index, api_choices *g)
{
    sched_request *r = calloc(1, sizeof *r);
    api_request *a = calloc(1, sizeof *a);
    if (!r || !a) {
        free(a);
        free(r);
        sampler_free(smp);
        return NULL;
    }
    r->smp = smp;
    r->owner = a;
    r->n_prompt = r0->n_prompt;
    r->max_tokens = r0->max_tokens;
    r->want_logprobs = r0->want_logprobs;
    r->top_logprobs = r0->top_logprobs;
    r->cap = r0->cap;
    r->n_stop = r0->n_stop;
    r->tokens = malloc((size_t)r->cap * sizeof *r->tokens);
    r->stop_ids = malloc((r->n_stop ? r->n_stop : 1) * sizeof *r->stop_ids);
    a->fn = a0->fn;
    a->user = a0->user;
    a->n_prompt = a0->n_prompt;
    a->choice = index;
    a->group = g;
    if (!r->tokens || !r->stop_ids) {
        free(a);
        r->owner = NULL;
        sched_request_free(r);
        return NULL;
    }
    memcpy(r->tokens, r0->tokens, (size_t)r->n_prompt * sizeof *r->tokens);
    memcpy(r->stop_ids, r0->stop_ids, r->n_stop * sizeof *r->stop_ids);
    return r;
}

/* Free what a choice's api_request owns, and it. */
static void api_request_free(api_request *a)
{
    if (!a) return;
    di_stream_free(a->stream);
    di_detokenizer_free(a->detok);
    api_request_free_stops(a);
    free(a);
}

DI_API di_status di_submit(di_engine *e, const di_request *req_in, uint64_t *id, di_error **err)
{
    if (id) *id = 0;
    if (!e || !req_in || !id)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "engine, req and id must not be NULL");
    di_request q;
    di_request_init(&q);
    const char *msg;
    if (di_struct_copy_in(&q, sizeof q, req_in, DI_STRUCT_SIZE_UNTIL(di_request, user_data),
                          &msg) != DI_OK)
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
    /* nothing set is ignored: a field of the other kind of request is an error */
    if (q.protocol && q.ignore_eos)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "ignore_eos: token requests only (a protocol request ends at its "
                            "encoding's end of turn)");
    if (q.protocol && (q.tokens || q.n_tokens))
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "tokens: a protocol request's prompt is its json body");
    if (!q.protocol && (q.json || q.json_len))
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "json: a token request's prompt is its tokens (set protocol for a "
                            "request body)");
    if (q.logprobs != 0 && q.logprobs != 1)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "logprobs: expected 0 or 1");
    if (q.top_logprobs < 0 || q.top_logprobs > SCHED_MAX_TOP)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "top_logprobs: must be in [0, %d]",
                             SCHED_MAX_TOP);
    if (q.top_logprobs && !q.logprobs)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "top_logprobs: requires logprobs 1");
    if (q.protocol && q.logprobs)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "logprobs: token requests only (a protocol request's body asks for "
                            "them: Chat logprobs / top_logprobs)");
    if (q.n_stop_strings && q.protocol)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT,
                            "stop_strings: token requests only (a protocol request's body has "
                            "its own stop sequences)");
    if (q.n_stop_strings && !q.stop_strings)
        return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "stop_strings: must not be NULL");
    if (q.n_stop_strings > 16)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "stop_strings: %zu strings, at most 16",
                             q.n_stop_strings);
    for (size_t i = 0; i < q.n_stop_strings; i++) {
        const char *t = q.stop_strings[i];
        size_t n = t ? strlen(t) : 0;
        if (!t) return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "stop_strings[%zu]: NULL", i);
        if (n == 0 || n > 256)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                                 "stop_strings[%zu]: %zu bytes, expected 1 to 256", i, n);
        if (di_utf8_scan_bytes((const uint8_t *)t, n).state != DI_UTF8_VALID)
            return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "stop_strings[%zu]: not valid UTF-8",
                                 i);
    }
    if (q.n_stop_strings && !e->tok)
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "stop_strings: the engine has no tokenizer, so the output has no "
                            "text to match");
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
    sched_request **choices = NULL; /* Chat `n` > 1: [n_choices] */
    sampler **smps = NULL;          /* [n_choices]: choice i's sampler until its request takes it */
    uint32_t n_choices = 1;
    api_choices *group = NULL;
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
    const rc_sampling *body = NULL;
    int32_t *bias_ids = NULL;
    float *bias_values = NULL;
    size_t n_bias = 0;
    sampler_params sp = {0};
    sp.temperature = q.temperature;
    sp.top_p = q.top_p;
    sp.top_k = q.top_k;
    sp.min_p = q.min_p;
    sp.repetition_penalty = q.repetition_penalty;
    sp.presence_penalty = q.presence_penalty;
    sp.frequency_penalty = q.frequency_penalty;
    if (q.protocol) {
        if (!e->codec) {
            if (e->no_codec_why[0])
                st = di_error_setf(err, DI_ERR_UNSUPPORTED,
                                   "%s, so protocol requests cannot be rendered: submit token "
                                   "IDs (protocol 0) or set di_engine_config.tokenizer_path",
                                   e->no_codec_why);
            else if (!e->tok)
                st = di_error_set(err, DI_ERR_UNSUPPORTED,
                                  "this model has no tokenizer (none in its GGUF, or no "
                                  "tokenizer.json beside its config.json), so no prompt "
                                  "encoding, and protocol requests cannot be rendered: submit "
                                  "token IDs (protocol 0) or set di_engine_config.tokenizer_path");
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
        if ((st = rc_codec_render_engine(e->codec, (di_protocol)q.protocol, q.json, q.json_len,
                                         &prompt, err)) != DI_OK)
            goto fail;
        if ((st = di_prompt_tokens(prompt, &ids, &n_ids, err)) != DI_OK) goto fail;
        body = rc_prompt_sampling(prompt);
        if (body->invalid[0]) {
            st = di_error_set(err, DI_ERR_INVALID_REQUEST, body->invalid);
            goto fail;
        }
        if (body->unsupported[0]) {
            st = di_error_set(err, DI_ERR_UNSUPPORTED, body->unsupported);
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
    if (body) body_sampling(body, &sp, &max_tokens, &q.seed);
    if (q.protocol && max_tokens == 0) {
        uint32_t mt; /* the reference's default, lowered to the room left */
        if ((st = di_prompt_max_tokens(prompt, (uint32_t)n_ids, (uint32_t)e->n_ctx, &mt, err)) !=
            DI_OK)
            goto fail;
        max_tokens = mt;
    }
    if (max_tokens > room) {
        st = di_error_setf(err, DI_ERR_CONTEXT_LENGTH,
                           "max_tokens: the prompt's %zu tokens and %lld output tokens exceed the "
                           "context of %lld tokens (at most %lld output tokens fit)",
                           n_ids, (long long)max_tokens, (long long)e->n_ctx, (long long)room);
        goto fail;
    }
    if (max_tokens == 0) max_tokens = room;
    n_choices = body && body->n > 1 ? body->n : 1;
    if ((int)n_choices > e->max_running) {
        st = di_error_setf(err, DI_ERR_UNSUPPORTED,
                           "n: %u choices, but this engine decodes at most %d sequences at once "
                           "(di_engine_config.max_running)",
                           n_choices, e->max_running);
        goto fail;
    }
    /* Chat `n`: choice i samples with seed + i, as vLLM's parallel sampling
     * seeds its child requests (no seed: each choice its own clock seed) */
    uint64_t seed0 = q.seed >= 0 ? (uint64_t)q.seed : clock_seed(r);
    if ((st = merge_bias(&q, body, e->n_vocab, &bias_ids, &bias_values, &n_bias, err)) != DI_OK)
        goto fail;
    sp.bias_ids = bias_ids;
    sp.bias_values = bias_values;
    sp.n_bias = n_bias;
    st = choice_sampler(e, &q, prompt, body, sp, seed0, ids, n_ids, &r->smp, err);
    if (st == DI_OK && n_choices > 1 &&
        (!(choices = calloc(n_choices, sizeof(sched_request *))) ||
         !(smps = calloc(n_choices, sizeof(sampler *))) || !(group = calloc(1, sizeof *group)) ||
         !(group->streams = calloc(n_choices, sizeof(di_stream *)))))
        st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
    for (uint32_t i = 1; st == DI_OK && i < n_choices; i++)
        st = choice_sampler(e, &q, prompt, body, sp, q.seed >= 0 ? seed0 + i : clock_seed(&smps[i]),
                            ids, n_ids, &smps[i], err);
    free(bias_ids);
    free(bias_values);
    bias_ids = NULL;
    bias_values = NULL;
    if (st != DI_OK) goto fail;
    r->n_prompt = (int64_t)n_ids;
    r->max_tokens = max_tokens;
    r->want_logprobs = q.logprobs;
    r->top_logprobs = q.top_logprobs;
    if (body && body->logprobs) { /* a protocol body's logprobs / top_logprobs */
        r->want_logprobs = 1;
        r->top_logprobs = body->top_logprobs;
    }
    r->cap = (int64_t)n_ids + 16 < e->n_ctx ? (int64_t)n_ids + 16 : e->n_ctx;
    r->tokens = malloc((size_t)r->cap * sizeof *r->tokens);
    size_t n_stop = (q.ignore_eos ? 0 : (size_t)e->n_eos) + q.n_stop_tokens;
    r->stop_ids = malloc((n_stop ? n_stop : 1) * sizeof *r->stop_ids);
    if (!r->tokens || !r->stop_ids) {
        st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    memcpy(r->tokens, ids, n_ids * sizeof *ids);
    if (!q.ignore_eos)
        for (int i = 0; i < e->n_eos; i++) r->stop_ids[r->n_stop++] = e->eos[i];
    for (size_t i = 0; i < q.n_stop_tokens; i++) r->stop_ids[r->n_stop++] = q.stop_tokens[i];
    a->n_prompt = (uint32_t)n_ids;
    if (q.protocol) {
        if ((st = di_stream_create(prompt, e->tok, NULL, &a->stream, err)) != DI_OK) goto fail;
        if (group) {
            group->n = n_choices;
            a->group = group;
            choices[0] = r;
            if (rc_stream_set_choice(a->stream, 0, NULL) != 0) {
                st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
                goto fail;
            }
            for (uint32_t i = 1; i < n_choices; i++) {
                choices[i] = choice_request(r, a, smps[i], i, group);
                smps[i] = NULL; /* taken */
                if (!choices[i]) {
                    st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
                    goto fail;
                }
                api_request *ai = choices[i]->owner;
                if ((st = di_stream_create(prompt, e->tok, NULL, &ai->stream, err)) != DI_OK)
                    goto fail;
                if (rc_stream_set_choice(ai->stream, i, a->stream) != 0) {
                    st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
                    goto fail;
                }
            }
        }
    } else if (e->tok) {
        if (di_detokenizer_create(e->tok, 0, &a->detok) != DI_OK) {
            st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
            goto fail;
        }
        if (q.n_stop_strings && !(a->stops = calloc(q.n_stop_strings, sizeof *a->stops))) {
            st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < q.n_stop_strings; i++) {
            size_t n = strlen(q.stop_strings[i]);
            if (!(a->stops[a->n_stops++] = strdup(q.stop_strings[i]))) {
                st = di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory");
                goto fail;
            }
            if (n > a->max_stop) a->max_stop = n;
        }
    }
    di_prompt_free(prompt);
    prompt = NULL;
    pthread_mutex_lock(&e->mu);
    e->pending++;
    pthread_mutex_unlock(&e->mu);
    if ((st = group ? sched_submit_group(e->sched, choices, (int)n_choices, id)
                    : sched_submit(e->sched, r, id)) != DI_OK) {
        pthread_mutex_lock(&e->mu);
        e->pending--;
        pthread_mutex_unlock(&e->mu);
        st = di_error_set(err, st,
                          st == DI_ERR_INVALID_STATE ? "the engine is being destroyed"
                                                     : "out of memory");
        goto fail;
    }
    free(choices);
    free(smps);
    return DI_OK;
fail:
    di_prompt_free(prompt);
    for (uint32_t i = 1; i < n_choices; i++) {
        if (smps) sampler_free(smps[i]);
        if (choices && choices[i]) {
            api_request_free(choices[i]->owner);
            sched_request_free(choices[i]);
        }
    }
    free(choices);
    free(smps);
    if (group) free(group->streams);
    free(group);
    api_request_free(a);
    sched_request_free(r);
    return st;
}
