/* What the writers of the three protocols share: chunks and their SSE framing,
 * serde-style JSON strings, usage numbers, tool-call ids, and the accumulation of
 * the complete response (docs/stream.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recipe/stream.h"
#include "recipe/writer.h"

void rc_json_str0(rc_buf *b, const char *s)
{
    if (!s)
        rc_buf_adds(b, "null");
    else
        rc_json_string(b, s, strlen(s));
}

void rc_json_u64(rc_buf *b, uint64_t v)
{
    char t[24];
    snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    rc_buf_adds(b, t);
}

void rc_json_i64(rc_buf *b, int64_t v)
{
    char t[24];
    snprintf(t, sizeof t, "%lld", (long long)v);
    rc_buf_adds(b, t);
}

void rc_chunks_clear(rc_chunks *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].json);
        free(c->v[i].event);
        free(c->v[i].sse);
    }
    c->n = 0;
    c->oom = 0;
}

/* Append a chunk whose JSON is taken from *json (NULL json: Chat's [DONE]). */
void rc_emit(rc_chunks *out, const char *event, rc_buf *json)
{
    if (out->oom || (json && json->oom)) goto oom;
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 16;
        rc_chunk *v = realloc(out->v, cap * sizeof *v);
        if (!v) goto oom;
        out->v = v;
        out->cap = cap;
    }
    rc_chunk *c = &out->v[out->n];
    memset(c, 0, sizeof *c);
    rc_buf sse = {0};
    if (event) {
        rc_buf_adds(&sse, "event: ");
        rc_buf_adds(&sse, event);
        rc_buf_adds(&sse, "\n");
    }
    rc_buf_adds(&sse, "data: ");
    if (json) {
        rc_buf_add(&sse, json->s ? json->s : "", json->len);
        c->json_len = json->len;
        c->json = rc_buf_take(json);
        if (!c->json) goto oom_sse;
    } else {
        rc_buf_adds(&sse, "[DONE]");
    }
    rc_buf_adds(&sse, "\n\n");
    c->sse_len = sse.len;
    c->sse = rc_buf_take(&sse);
    c->event = event ? strdup(event) : NULL;
    if (!c->sse || (event && !c->event)) {
        free(c->json);
        free(c->sse);
        free(c->event);
        goto oom;
    }
    out->n++;
    return;
oom_sse:
    free(sse.s);
oom:
    free(json ? json->s : NULL);
    if (json) memset(json, 0, sizeof *json);
    out->oom = 1;
}

int64_t rc_now(void)
{
    return (int64_t)time(NULL);
}

/* splitmix64 */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void rc_call_id(rc_writer *w, int index, char *dst, size_t cap)
{
    /* "ET_" marks every call of a thinking-mode turn whose reasoning is empty */
    const char *et = w->reply->thinking && w->reasoning.len == 0 ? "ET_" : "";
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    char rnd[25];
    for (int i = 0; i < 20; i++) rnd[i] = alphabet[next_random(&w->rng) % 62];
    for (int i = 20; i < 24; i++) rnd[i] = (char)('0' + next_random(&w->rng) % 10);
    rnd[24] = '\0';
    snprintf(dst, cap, "call_%02d_%s%s", index, et, rnd);
}

void rc_random_id(rc_writer *w, const char *prefix, char *dst, size_t cap)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    size_t n = strlen(prefix);
    snprintf(dst, cap, "%s", prefix);
    for (size_t i = n; i + 1 < cap && i < n + 24; i++) {
        dst[i] = alphabet[next_random(&w->rng) % 36];
        dst[i + 1] = '\0';
    }
}

void rc_seed(rc_writer *w, uint64_t seed)
{
    if (seed == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(uintptr_t)w;
    }
    w->rng = seed;
}

/* Record a tool-call piece in the accumulated response. */
static int track_piece(rc_writer *w, const rc_piece *pc)
{
    if (pc->cls == RC_PIECE_REASONING) {
        rc_buf_add(&w->reasoning, pc->text.s, pc->text.len);
        return w->reasoning.oom ? -1 : 0;
    }
    if (pc->cls == RC_PIECE_CONTENT) {
        rc_buf_add(&w->content, pc->text.s, pc->text.len);
        return w->content.oom ? -1 : 0;
    }
    if (pc->cls == RC_PIECE_CALL_BEGIN) {
        rc_out_call *v = realloc(w->calls, (w->n_calls + 1) * sizeof *v);
        if (!v) return -1;
        w->calls = v;
        rc_out_call *c = &v[w->n_calls++];
        memset(c, 0, sizeof *c);
        rc_call_id(w, pc->call, c->id, sizeof c->id);
        c->name = malloc(pc->text.len + 1);
        if (!c->name) return -1;
        memcpy(c->name, pc->text.s ? pc->text.s : "", pc->text.len);
        c->name[pc->text.len] = '\0';
        c->name_len = pc->text.len;
        return 0;
    }
    if (pc->cls >= RC_PIECE_ARGS_OPEN && pc->cls <= RC_PIECE_ARGS_CLOSE && pc->call >= 0 &&
        (size_t)pc->call < w->n_calls) {
        rc_buf *a = &w->calls[pc->call].arguments;
        rc_buf_add(a, pc->text.s, pc->text.len);
        return a->oom ? -1 : 0;
    }
    return 0;
}

void rc_writer_free(rc_writer *w)
{
    free(w->id);
    free(w->model);
    free(w->signature);
    free(w->fingerprint);
    free(w->reasoning.s);
    free(w->content.s);
    for (size_t i = 0; i < w->n_calls; i++) {
        free(w->calls[i].name);
        free(w->calls[i].arguments.s);
    }
    free(w->calls);
    free(w->response);
    free(w->item_text.s);
    free(w->items.s);
    free(w->custom_key.s);
    free(w->custom_pending.s);
    for (size_t i = 0; i < w->n_lp; i++) free(w->lp[i].entries.s);
    free(w->lp);
    free(w->lp_cur.s);
    free(w->lp_content.s);
    free(w->lp_reasoning.s);
    free(w->item_lp.s);
    memset(w, 0, sizeof *w);
}

int rc_write_start(rc_writer *w, rc_chunks *out)
{
    if (w->started) return 0;
    w->started = 1;
    switch (w->reply->protocol) {
    case DI_PROTOCOL_CHAT: return rc_chat_start(w, out);
    case DI_PROTOCOL_MESSAGES: return rc_messages_start(w, out);
    default: return rc_responses_start(w, out);
    }
}

int rc_writer_add_logprobs(rc_writer *w, uint32_t push, const char *entries, size_t len)
{
    if (w->n_lp == w->cap_lp) {
        size_t cap = w->cap_lp ? w->cap_lp * 2 : 8;
        struct rc_lp_push *v = realloc(w->lp, cap * sizeof *v);
        if (!v) return -1;
        w->lp = v;
        w->cap_lp = cap;
    }
    struct rc_lp_push *e = &w->lp[w->n_lp];
    memset(e, 0, sizeof *e);
    e->push = push;
    rc_buf_add(&e->entries, entries, len);
    if (e->entries.oom) {
        free(e->entries.s);
        return -1;
    }
    w->n_lp++;
    return 0;
}

/* The entries of `push` for the text piece about to be written (NULL: none, or
 * an earlier piece of that push took them). Pieces come in the order of their
 * text, so the entries of earlier pushes that no piece took never will be:
 * they are dropped, as the reference drops those of text it strips. */
static const rc_buf *take_logprobs(rc_writer *w, uint32_t push)
{
    size_t k = 0;
    while (k < w->n_lp && w->lp[k].push < push) free(w->lp[k++].entries.s);
    int hit = k < w->n_lp && w->lp[k].push == push;
    if (hit) {
        free(w->lp_cur.s);
        w->lp_cur = w->lp[k].entries;
        k++;
    }
    memmove(w->lp, w->lp + k, (w->n_lp - k) * sizeof *w->lp);
    w->n_lp -= k;
    return hit ? &w->lp_cur : NULL;
}

int rc_write_pieces(rc_writer *w, const rc_pieces *pieces, rc_chunks *out)
{
    if (rc_write_start(w, out) != 0) return -1;
    for (size_t i = 0; i < pieces->n; i++) {
        const rc_piece *pc = &pieces->v[i];
        if (track_piece(w, pc) != 0) return -1;
        w->piece_lp = NULL;
        if (w->n_lp && (pc->cls == RC_PIECE_REASONING || pc->cls == RC_PIECE_CONTENT))
            w->piece_lp = take_logprobs(w, pc->push);
        else if (w->n_lp && pc->push > 1) /* a call's pieces: earlier pushes are done */
            (void)take_logprobs(w, pc->push - 1);
        int r;
        switch (w->reply->protocol) {
        case DI_PROTOCOL_CHAT: r = rc_chat_piece(w, pc, out); break;
        case DI_PROTOCOL_MESSAGES: r = rc_messages_piece(w, pc, out); break;
        default: r = rc_responses_piece(w, pc, out); break;
        }
        w->piece_lp = NULL;
        if (r != 0) return -1;
    }
    return out->oom ? -1 : 0;
}

int rc_write_finish(rc_writer *w, rc_finish reason, rc_chunks *out)
{
    if (w->finished) return 0;
    if (rc_write_start(w, out) != 0) return -1;
    w->finished = 1;
    w->t_completed = w->created ? w->created : rc_now();
    switch (w->reply->protocol) {
    case DI_PROTOCOL_CHAT: return rc_chat_finish(w, reason, out);
    case DI_PROTOCOL_MESSAGES: return rc_messages_finish(w, reason, out);
    default: return rc_responses_finish(w, reason, out);
    }
}
