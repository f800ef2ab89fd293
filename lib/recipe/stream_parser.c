/* The stream parser: generated text, one push at a time, split into reasoning,
 * answer and tool-call pieces, with stop sequences and JSON output mode — as
 * deepseek-recipe 0.2.0's StreamProcessor splits it (docs/stream-spec.md).
 *
 * The unit of output is the push: text that cannot be decided yet (its end may
 * be the start of a marker, of a stop sequence, or newlines that a marker would
 * drop) is held whole, with the pushes it came from, and once decided each
 * push's part becomes its own piece. Every byte in the buffer carries the number
 * of the push it came from.
 *
 * This file holds the entry points and the held text; each syntax has its own
 * file (stream_parser_impl.h lists them). */
#include <stdlib.h>
#include <string.h>

#include "recipe/stream_parser_impl.h"

void rc_pieces_clear(rc_pieces *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->v[i].text.s);
        free(p->v[i].raw.s);
    }
    p->n = 0;
    p->oom = 0;
}

void rc_pieces_free(rc_pieces *p)
{
    rc_pieces_clear(p);
    free(p->v);
    memset(p, 0, sizeof *p);
}

/* Append text of class cls from push `push`, merging with the last piece when it
 * has the same class, push and call and no barrier lies between them. */
rc_piece *sp_add_piece(rc_parser *p, rc_pieces *out, rc_piece_class cls, uint32_t push, int call,
                       const char *s, size_t n)
{
    if (out->oom) return NULL;
    if (out->n > 0 && !p->barrier) {
        rc_piece *last = &out->v[out->n - 1];
        if (last->cls == cls && last->push == push && last->call == call &&
            cls != RC_PIECE_CALL_BEGIN && cls != RC_PIECE_CALL_END) {
            rc_buf_add(&last->text, s, n);
            if (last->text.oom) out->oom = 1;
            return last;
        }
    }
    p->barrier = 0;
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 16;
        rc_piece *v = realloc(out->v, cap * sizeof *v);
        if (!v) {
            out->oom = 1;
            return NULL;
        }
        out->v = v;
        out->cap = cap;
    }
    rc_piece *pc = &out->v[out->n++];
    memset(pc, 0, sizeof *pc);
    pc->cls = cls;
    pc->push = push;
    pc->call = call;
    rc_buf_add(&pc->text, s, n);
    if (pc->text.oom) out->oom = 1;
    if (cls == RC_PIECE_REASONING && n) p->reasoning_emitted = 1;
    if (n) p->started = 1;
    return pc;
}

/* Append s[0, n) from push `push`; -1 when memory runs out. */
int sp_held_add(rc_buf *text, uint32_t **pushes, size_t *cap, uint32_t push, const char *s,
                size_t n)
{
    if (text->len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < text->len + n + 1) c *= 2;
        uint32_t *v = realloc(*pushes, c * sizeof *v);
        if (!v) return -1;
        *pushes = v;
        *cap = c;
    }
    for (size_t i = 0; i < n; i++) (*pushes)[text->len + i] = push;
    rc_buf_add(text, s, n);
    return text->oom ? -1 : 0;
}

/* Drop the first n held bytes; the empty pushes' offsets move with the text. */
void sp_held_consume(rc_buf *text, uint32_t *pushes, struct empty_push *empties, size_t n_empties,
                     size_t n)
{
    if (n == 0) return;
    for (size_t k = 0; k < n_empties; k++)
        empties[k].at = empties[k].at > n ? empties[k].at - n : 0;
    memmove(text->s, text->s + n, text->len - n);
    memmove(pushes, pushes + n, (text->len - n) * sizeof *pushes);
    text->len -= n;
    if (text->s) text->s[text->len] = '\0';
}

/* Room for one more empty push; -1 when memory runs out. */
int sp_held_reserve_empty(struct empty_push **empties, size_t n_empties, size_t *cap)
{
    if (n_empties < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 4;
    struct empty_push *v = realloc(*empties, c * sizeof *v);
    if (!v) return -1;
    *empties = v;
    *cap = c;
    return 0;
}

/* Drop the first n bytes of the buffer. */
void sp_consume(rc_parser *p, size_t n)
{
    sp_held_consume(&p->buf, p->push_of, p->empties, p->n_empties, n);
}

/* Does s[0, n) end with a non-empty proper prefix of lit? */
int sp_ends_with_prefix_of(const char *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    if (m < 2) return 0; /* no non-empty proper prefix */
    for (size_t k = m - 1; k > 0; k--)
        if (n >= k && memcmp(s + n - k, lit, k) == 0) return 1;
    return 0;
}

const char *sp_find(const char *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    if (m > n) return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (s[i] == lit[0] && memcmp(s + i, lit, m) == 0) return s + i;
    return NULL;
}

size_t sp_span(const rc_parser *p, char c)
{
    const char *q = memchr(p->buf.s, c, p->buf.len);
    return q ? (size_t)(q - p->buf.s) : (size_t)-1;
}

void sp_stop_parsing(rc_parser *p)
{
    p->state = P_DONE;
    sp_consume(p, p->buf.len);
}

static int run(rc_parser *p, rc_pieces *out, int final)
{
    for (;;) {
        pstate before = p->state;
        if (p->state == P_REASONING || p->state == P_CONTENT) sp_text_process(p, out, final);
        if (p->state == P_TOOLS) {
            if (p->reply->tool_format == RC_TOOLS_V3)
                sp_v3_process(p, out);
            else if (p->reply->tool_format == RC_TOOLS_HERMES)
                sp_hermes_process(p, out);
            else
                sp_dsml_process(p, out);
        }
        if (p->state == P_DONE) sp_consume(p, p->buf.len);
        if (p->state == before) break;
    }
    return out->oom ? -1 : 0;
}

rc_parser *rc_parser_new(const rc_reply *reply)
{
    rc_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->reply = reply;
    /* the buffers always exist, so no pointer arithmetic ever starts from NULL */
    rc_buf_add(&p->buf, "", 0);
    rc_buf_add(&p->jbuf, "", 0);
    p->push_cap = 64;
    p->push_of = malloc(p->push_cap * sizeof *p->push_of);
    if (p->buf.oom || p->jbuf.oom || !p->push_of) {
        rc_parser_free(p);
        return NULL;
    }
    if (reply->starts_in_tool_calls) {
        p->state = P_TOOLS;
        p->t = T_REGION;
        if (reply->tool_format == RC_TOOLS_HERMES) { /* the prompt opened a block */
            p->h_body = 1;
            p->h_prompt_open = 1;
            /* the call text the prompt wrote (a named function) is read first */
            const char *pre = reply->call_prefix;
            if (pre && sp_held_add(&p->buf, &p->push_of, &p->push_cap, 0, pre, strlen(pre)) != 0) {
                rc_parser_free(p);
                return NULL;
            }
        }
    } else if (reply->stage == RC_STAGE_REASONING_START) {
        p->state = P_REASONING;
        p->strip_newlines = 1;
        p->leading_think = reply->leading_think;
    } else if (reply->stage == RC_STAGE_REASONING_CONTINUATION) {
        p->state = P_REASONING;
    } else if (reply->stage == RC_STAGE_NONE) {
        p->state = P_CONTENT;
        p->strip_newlines = 1;
    } else {
        p->state = P_CONTENT;
    }
    return p;
}

void rc_parser_free(rc_parser *p)
{
    if (!p) return;
    free(p->buf.s);
    free(p->push_of);
    free(p->jbuf.s);
    free(p->jpush);
    free(p->empties);
    free(p->jempties);
    free(p);
}

int rc_parser_stopped(const rc_parser *p)
{
    return p->stop != NULL || p->h_done;
}

const char *rc_parser_stop_sequence(const rc_parser *p)
{
    return p->stop;
}

int rc_parser_n_calls(const rc_parser *p)
{
    return p->n_calls;
}

uint32_t rc_parser_next_push(const rc_parser *p)
{
    return p->push + 1;
}

int rc_parser_reasoning_emitted(const rc_parser *p)
{
    return p->reasoning_emitted;
}

int rc_parser_push(rc_parser *p, const char *text, size_t len, rc_pieces *out)
{
    if (p->state == P_DONE) return 0;
    p->push++;
    p->barrier = 0;
    if (sp_held_add(&p->buf, &p->push_of, &p->push_cap, p->push, text, len) != 0) return -1;
    if (len == 0 && (p->state == P_REASONING || p->state == P_CONTENT)) {
        /* an empty push is an empty piece, in its place among the held text */
        if (sp_held_reserve_empty(&p->empties, p->n_empties, &p->cap_empties) != 0) return -1;
        if (!(p->strip_consume && p->buf.len == 0))
            p->empties[p->n_empties++] = (struct empty_push){p->buf.len, p->push};
        if (p->buf.len == 0)
            sp_emit_empties(p, out, p->state == P_REASONING ? RC_PIECE_REASONING : RC_PIECE_CONTENT,
                            0, 0);
    }
    return run(p, out, 0);
}

int rc_parser_push_atomic(rc_parser *p, const char *text, size_t len, rc_pieces *out)
{
    if (p->state == P_DONE) return 0;
    /* remember the push about to be made (the oldest drops out: stops are short) */
    if (p->n_atomic == sizeof p->atomic / sizeof p->atomic[0]) {
        memmove(p->atomic, p->atomic + 1, (p->n_atomic - 1) * sizeof p->atomic[0]);
        p->n_atomic--;
    }
    p->atomic[p->n_atomic++] = p->push + 1;
    return rc_parser_push(p, text, len, out);
}

int rc_parser_finish(rc_parser *p, rc_pieces *out)
{
    int r = run(p, out, 1);
    p->n_empties = 0; /* empty pushes still held are dropped */
    if (p->jbuf.len) {
        sp_json_run(p, out, 1);
        r = out->oom ? -1 : r;
    }
    if (p->state == P_TOOLS && p->reply->tool_format == RC_TOOLS_DSML) {
        sp_dsml_finish(p, out);
        r = out->oom ? -1 : r;
    }
    if (p->state == P_TOOLS && p->reply->tool_format == RC_TOOLS_HERMES) {
        sp_hermes_finish(p, out);
        r = out->oom ? -1 : r;
    }
    if (p->state == P_TOOLS) sp_consume(p, p->buf.len);
    return r;
}
