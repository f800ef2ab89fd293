/* The stream parser: generated text, one push at a time, split into reasoning,
 * answer and DSML tool-call pieces, with stop sequences and JSON output mode —
 * as deepseek-recipe 0.2.0's StreamProcessor splits it (docs/stream-spec.md).
 *
 * The unit of output is the push: text that cannot be decided yet (its end may
 * be the start of a marker, of a stop sequence, or newlines that a marker would
 * drop) is held whole, with the pushes it came from, and once decided each
 * push's part becomes its own piece. Every byte in the buffer carries the number
 * of the push it came from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/stream.h"

typedef enum pstate { P_REASONING, P_CONTENT, P_TOOLS, P_DONE } pstate;

/* Positions inside the DSML tool-call region (docs/stream-spec.md §5.2). */
typedef enum tstate {
    T_SKIP,        /* the rest of a tag, up to '>' (not checked); then `after` */
    T_REGION,      /* between invokes: junk until a tag */
    T_NAME_QUOTE,  /* invoke name= : the opening quote */
    T_NAME,        /* inside invoke name="… */
    T_INVOKE,      /* inside an invoke: junk until a tag */
    T_KEY,         /* the key, copied raw from its opening quote up to a space */
    T_STRING_ATTR, /* spaces, then string="true|false"> */
    T_VALUE,       /* the value, up to "</｜DSML｜" */
} tstate;

/* JSON output mode phases (§7). */
typedef enum jphase { J_PREFIX, J_PAYLOAD, J_SUFFIX } jphase;

#define DSML      "｜DSML｜"
#define OPENER    "<" DSML
#define CLOSER    "</" DSML
#define THINK_END "</think>"
/* the V3 / V3.1 / R1 tool-call tokens (their chat templates) */
#define V3_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define V3_CALLS_END   "<｜tool▁calls▁end｜>"
#define V3_CALL_BEGIN  "<｜tool▁call▁begin｜>"
#define V3_CALL_END    "<｜tool▁call▁end｜>"
#define V3_SEP         "<｜tool▁sep｜>"
#define EOS            "<｜end▁of▁sentence｜>"
/* ChatML's Hermes-style tool calls */
#define H_CALL_BEGIN "<tool_call>"
#define H_CALL_END   "</tool_call>"

/* Positions in a V3 tool-call block. */
typedef enum vstate {
    V_REGION,     /* between calls */
    V_HEAD,       /* after <｜tool▁call▁begin｜>: "function" (V3, R1) or the name (V3.1) */
    V_NAME,       /* V3: the name, up to the newline */
    V_FENCE,      /* V3: ```json\n */
    V_ARGS,       /* the arguments JSON, up to the terminator */
    V_AFTER_ARGS, /* V3: after the closing fence, up to <｜tool▁call▁end｜> */
} vstate;

struct rc_parser {
    const rc_reply *reply;
    pstate state;
    int strip_newlines; /* drop leading '\n' of the next channel text */
    int strip_consume;  /* after </think>: leading '\n's are dropped before any matching */
    int started;        /* a non-empty piece was emitted */
    int barrier;        /* the next piece must not merge with the previous one */
    /* the undecided input */
    rc_buf buf;
    uint32_t *push_of; /* push number of each byte of buf */
    size_t push_cap;
    uint32_t push;
    /* tool calls */
    tstate t, after; /* after: where T_SKIP goes */
    int n_calls;
    int n_params;      /* of the current call */
    int string_value;  /* the current value is a JSON string */
    int quote_pending; /* its opening '"' waits: the value so far may be a closing tag */
    int reasoning_emitted;
    int first_tag;      /* the region's opening tag is next */
    uint32_t atomic[8]; /* recent pushes that are an added token's text */
    size_t n_atomic;
    vstate v;          /* V3 tool-call tokens */
    int v_fenced;      /* the V3 form: arguments end at "\n```" */
    int leading_think; /* R1: a leading "<think>" is still possible */
    int h_body;        /* Hermes: inside a call's JSON, up to </tool_call> (else between calls) */
    int h_prompt_open; /* Hermes: the prompt wrote the open block's <tool_call> */
    size_t h_scanned;  /* Hermes: bytes of the open block searched for </tool_call> already */
    int h_done;        /* Hermes: text that is no call followed the calls: the output is over */
    /* JSON output mode */
    jphase jphase;
    int jhad_text;               /* a push of this phase had prefix/suffix text */
    uint32_t jspace_push;        /* the push that got this phase's last " " */
    int jbracket;                /* a bare payload's bracket is still jbuf[0] */
    int jpay_text;               /* payload text (not a bare bracket) has been emitted */
    struct empty_push *jempties; /* empty pushes among the JSON stage's held text */
    size_t n_jempties, cap_jempties;
    rc_buf jbuf; /* the JSON stage's undecided answer text */
    uint32_t *jpush;
    size_t jcap;
    /* empty pushes not yet emitted: buffer offset and push */
    struct empty_push {
        size_t at;
        uint32_t push;
    } * empties;
    size_t n_empties, cap_empties;
    int stripped_nl; /* a leading '\n' was stripped: held empty pushes are dropped */
    const char *stop;
    /* the end of the text released since the last marker: the matchers go on
     * from it (a '\n' that breaks a partial match begun there starts no run) */
    char ctx[16];
    size_t ctx_len;
};

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
static rc_piece *add_piece(rc_parser *p, rc_pieces *out, rc_piece_class cls, uint32_t push,
                           int call, const char *s, size_t n)
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

/* Both stages hold undecided text the same way: the bytes (text), the push
 * number of each byte (pushes, capacity *cap) and the empty pushes among them
 * (their offsets into text). */

/* Append s[0, n) from push `push`; -1 when memory runs out. */
static int held_add(rc_buf *text, uint32_t **pushes, size_t *cap, uint32_t push, const char *s,
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
static void held_consume(rc_buf *text, uint32_t *pushes, struct empty_push *empties,
                         size_t n_empties, size_t n)
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
static int held_reserve_empty(struct empty_push **empties, size_t n_empties, size_t *cap)
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
static void consume(rc_parser *p, size_t n)
{
    held_consume(&p->buf, p->push_of, p->empties, p->n_empties, n);
}

/* Does s[0, n) end with a non-empty proper prefix of lit? */
static int ends_with_prefix_of(const char *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    if (m < 2) return 0; /* no non-empty proper prefix */
    for (size_t k = m - 1; k > 0; k--)
        if (n >= k && memcmp(s + n - k, lit, k) == 0) return 1;
    return 0;
}

static const char *find(const char *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    if (m > n) return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (s[i] == lit[0] && memcmp(s + i, lit, m) == 0) return s + i;
    return NULL;
}

/* The earliest payload start in s[0, n) in the prefix phase: a fence ("```json\n"
 * or "```\n", removed) or a bracket. *start = where the prefix text ends, *skip =
 * bytes of fence to drop. Returns 0 when there is none. */
static int json_payload_start(const char *s, size_t n, size_t *start, size_t *skip)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '{' || s[i] == '[') {
            *start = i;
            *skip = 0;
            return 1;
        }
        if (s[i] == '`' && n - i >= 4 && memcmp(s + i, "```\n", 4) == 0) {
            *start = i;
            *skip = 4;
            return 1;
        }
        if (s[i] == '`' && n - i >= 8 && memcmp(s + i, "```json\n", 8) == 0) {
            *start = i;
            *skip = 8;
            return 1;
        }
    }
    return 0;
}

/* ---- JSON output mode (§7) --------------------------------------------- */

/* The earliest i < limit where s[i, n) may still become a fence (a proper
 * prefix of "```json\n" or "```\n"); n when there is none. */
static size_t json_fence_from(const char *s, size_t n, size_t limit)
{
    for (size_t i = 0; i < n && i < limit; i++) {
        size_t k = n - i;
        if (s[i] == '`' && ((k < 8 && memcmp(s + i, "```json\n", k) == 0) ||
                            (k < 4 && memcmp(s + i, "```\n", k) == 0)))
            return i;
    }
    return n;
}

/* The answer's JSON stage has its own undecided buffer: a fence prefix at the end
 * of the prefix, or "\n", "\n`", "\n``" at the end of the payload, is held. */

static void jconsume(rc_parser *p, size_t n)
{
    held_consume(&p->jbuf, p->jpush, p->jempties, p->n_jempties, n);
}

/* One " " for push `push` in the prefix or suffix phase. */
static void json_space(rc_parser *p, rc_pieces *out, uint32_t push)
{
    if (p->jspace_push == push) return;
    p->barrier = 1;
    add_piece(p, out, RC_PIECE_CONTENT, push, -1, " ", 1);
    p->barrier = 1;
    p->jspace_push = push;
    p->jhad_text = 1;
}

/* Spaces for the pushes of jbuf[0, n) (prefix or suffix text). */
static void jempties_drop(rc_parser *p, size_t k)
{
    if (k == 0) return;
    memmove(p->jempties, p->jempties + k, (p->n_jempties - k) * sizeof *p->jempties);
    p->n_jempties -= k;
}

/* Spaces for the pushes of jbuf[0, n) (prefix or suffix text), the empty pushes
 * held among them included; without any text they get none. */
static void json_spaces(rc_parser *p, rc_pieces *out, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        while (k < p->n_jempties && p->jempties[k].at <= i)
            json_space(p, out, p->jempties[k++].push);
        if (i == 0 || p->jpush[i] != p->jpush[i - 1]) json_space(p, out, p->jpush[i]);
    }
    while (k < p->n_jempties && p->jempties[k].at <= n) {
        if (n) json_space(p, out, p->jempties[k].push);
        k++;
    }
    jempties_drop(p, k);
}

/* A held empty push in the payload: an empty piece once payload text exists. */
static void json_payload_empty(rc_parser *p, rc_pieces *out, uint32_t push)
{
    if (!p->jpay_text) return;
    p->barrier = 1;
    add_piece(p, out, RC_PIECE_CONTENT, push, -1, "", 0);
    p->barrier = 1;
}

static void json_payload(rc_parser *p, rc_pieces *out, size_t n)
{
    size_t i = 0, k = 0;
    while (i < n) {
        while (k < p->n_jempties && p->jempties[k].at <= i)
            json_payload_empty(p, out, p->jempties[k++].push);
        size_t j = i + 1;
        while (j < n && p->jpush[j] == p->jpush[i]) j++;
        add_piece(p, out, RC_PIECE_CONTENT, p->jpush[i], -1, p->jbuf.s + i, j - i);
        p->jpay_text = 1;
        i = j;
    }
    /* those right after the released text go with it when nothing is held */
    while (k < p->n_jempties &&
           (p->jempties[k].at < n || (p->jempties[k].at == n && n == p->jbuf.len)))
        json_payload_empty(p, out, p->jempties[k++].push);
    jempties_drop(p, k);
}

static void json_new_phase(rc_parser *p, jphase ph)
{
    p->jphase = ph;
    p->jhad_text = 0;
    p->jspace_push = 0;
    p->barrier = 1;
}

static void json_run(rc_parser *p, rc_pieces *out, int final)
{
    for (;;) {
        const char *s = p->jbuf.s;
        size_t n = p->jbuf.len;
        if (n == 0) return;
        if (p->jphase == J_PREFIX) {
            size_t start, skip;
            if (!json_payload_start(s, n, &start, &skip)) {
                /* hold from the push where a fence may still begin */
                size_t f = final ? n : json_fence_from(s, n, n);
                while (f > 0 && f < n && p->jpush[f - 1] == p->jpush[f]) f--;
                json_spaces(p, out, f);
                jconsume(p, f);
                return;
            }
            json_spaces(p, out, start);
            jconsume(p, start + skip);
            json_new_phase(p, J_PAYLOAD);
            if (!skip && p->jbuf.len) p->jbracket = 1; /* its own piece, below */
        } else if (p->jphase == J_PAYLOAD) {
            if (p->jbracket) {
                /* a bare payload's bracket is its own piece; it is held with what
                 * follows it when that is a possible "\n```" ("{\n" is held whole) */
                if (!final && n > 1 && n < 5 && memcmp(s + 1, "\n```", n - 1) == 0) return;
                add_piece(p, out, RC_PIECE_CONTENT, p->jpush[0], -1, s, 1);
                p->barrier = 1;
                jconsume(p, 1);
                p->jbracket = 0;
                continue;
            }
            const char *end = find(s, n, "\n```");
            if (!end) {
                /* release the pieces before a possible "\n```" at the end */
                size_t upto = n;
                if (!final)
                    for (size_t k = 3; k > 0; k--)
                        if (n >= k && memcmp(s + n - k, "\n```", k) == 0) {
                            upto = n - k;
                            break;
                        }
                if (upto < n)
                    while (upto > 0 && p->jpush[upto - 1] == p->jpush[upto]) upto--;
                json_payload(p, out, upto);
                jconsume(p, upto);
                return;
            }
            size_t k = (size_t)(end - s);
            json_payload(p, out, k);
            jempties_drop(p, p->n_jempties); /* none carries over into the suffix */
            jconsume(p, k + 4);
            json_new_phase(p, J_SUFFIX);
        } else {
            json_spaces(p, out, n);
            jconsume(p, n);
            return;
        }
    }
}

/* Answer text of one push in JSON mode. An empty push in the prefix or suffix
 * phase still gets its " " once that phase has had text. */
static void json_feed(rc_parser *p, rc_pieces *out, uint32_t push, const char *s, size_t n)
{
    if (n == 0) {
        if (p->jbuf.len == 0 && p->jphase == J_PAYLOAD) {
            json_payload_empty(p, out, push);
            return;
        }
        if (p->jbuf.len == 0) { /* before any prefix text: dropped */
            if (p->jhad_text) json_space(p, out, push);
            return;
        }
        /* held with the text around it (before any prefix text: until text comes) */
        if (held_reserve_empty(&p->jempties, p->n_jempties, &p->cap_jempties) != 0) {
            out->oom = 1;
            return;
        }
        p->jempties[p->n_jempties++] = (struct empty_push){p->jbuf.len, push};
        return;
    }
    if (held_add(&p->jbuf, &p->jpush, &p->jcap, push, s, n) != 0) {
        out->oom = 1;
        return;
    }
    json_run(p, out, 0);
}

/* ---- channel text ------------------------------------------------------ */

/* Emit bytes [from, to) of the buffer as channel text, split where the push
 * changes, with leading-newline stripping and JSON mode applied. */
static void channel_piece(rc_parser *p, rc_pieces *out, rc_piece_class cls, uint32_t push,
                          const char *s, size_t n)
{
    if (cls == RC_PIECE_CONTENT && p->reply->parse_json_output)
        json_feed(p, out, push, s, n);
    else
        add_piece(p, out, cls, push, -1, s, n);
}

/* Empty pushes recorded at buffer offsets <= at become empty pieces, once the
 * leading newlines are behind. */
static void emit_empties(rc_parser *p, rc_pieces *out, rc_piece_class cls, size_t at,
                         int text_follows)
{
    size_t k = 0;
    if (!p->started && p->stripped_nl) { /* dropped once a leading '\n' was stripped */
        while (k < p->n_empties && p->empties[k].at <= at) k++;
        if (k == 0) return;
        memmove(p->empties, p->empties + k, (p->n_empties - k) * sizeof *p->empties);
        p->n_empties -= k;
        return;
    }
    if (p->strip_newlines || (!p->started && !text_follows)) return;
    while (k < p->n_empties && p->empties[k].at <= at) {
        p->barrier = 1;
        channel_piece(p, out, cls, p->empties[k].push, "", 0);
        p->barrier = 1;
        k++;
    }
    if (k == 0) return;
    memmove(p->empties, p->empties + k, (p->n_empties - k) * sizeof *p->empties);
    p->n_empties -= k;
}

static void emit_channel(rc_parser *p, rc_pieces *out, rc_piece_class cls, size_t from, size_t to)
{
    size_t i = from;
    while (i < to) {
        size_t j = i + 1;
        while (j < to && p->push_of[j] == p->push_of[i]) j++;
        size_t a = i;
        if (p->strip_newlines) {
            while (a < j && p->buf.s[a] == '\n') a++;
            if (a > i) p->stripped_nl = 1;
            if (a < j) p->strip_newlines = 0;
        }
        emit_empties(p, out, cls, i, a < j);
        if (a < j) channel_piece(p, out, cls, p->push_of[i], p->buf.s + a, j - a);
        i = j;
    }
    emit_empties(p, out, cls, to, 0);
}

/* Is any byte of buf[from, to) from an atomic push (an added token's text, which
 * stop sequences never match into, as in the reference)? */
static int touches_atomic(const rc_parser *p, size_t from, size_t to)
{
    for (size_t k = 0; k < p->n_atomic; k++)
        for (size_t i = from; i < to; i++)
            if (p->push_of[i] == p->atomic[k]) return 1;
    return 0;
}

/* The first occurrence of stop `lit` in s[0, n) (s inside the buffer) that no
 * atomic push takes part in. */
static const char *find_stop(const rc_parser *p, const char *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    for (const char *hit = find(s, n, lit); hit;
         hit = find(hit + 1, n - (size_t)(hit + 1 - s), lit)) {
        size_t at = (size_t)(hit - p->buf.s);
        if (!p->n_atomic || !touches_atomic(p, at, at + m)) return hit;
    }
    return NULL;
}

typedef enum mkind { M_THINK_END, M_OPENER, M_STRAY_THINK_END, M_STOP, M_EOS } mkind;

/* The literal that opens the tool-call region. */
static const char *opener_of(const rc_parser *p)
{
    return p->reply->tool_format == RC_TOOLS_V3       ? V3_CALLS_BEGIN
           : p->reply->tool_format == RC_TOOLS_HERMES ? H_CALL_BEGIN
                                                      : OPENER;
}

static int scan_marker_from(const char *s, size_t n, const char *lit, int absorb, size_t *start,
                            size_t *end, int *pending, size_t *pending_at);
static int scan_marker(const char *s, size_t n, const char *lit, int absorb, size_t *start,
                       size_t *end, int *pending)
{
    size_t at;
    return scan_marker_from(s, n, lit, absorb, start, end, pending, &at);
}

/* Where the partial match at the end of s begins (after scan_marker said pending). */
static size_t pending_start(const char *s, size_t n, const char *lit, int absorb)
{
    size_t st, e, at = n;
    int pending = 0;
    scan_marker_from(s, n, lit, absorb, &st, &e, &pending, &at);
    return pending ? at : n;
}

/* scan_marker_from on the buffer's first n bytes, the matcher carrying on from
 * the released text before them (p->ctx). */
static int scan_buf(const rc_parser *p, size_t n, const char *lit, int absorb, size_t *start,
                    size_t *end, int *pending, size_t *pending_at)
{
    size_t cl = p->ctx_len;
    if (cl == 0) return scan_marker_from(p->buf.s, n, lit, absorb, start, end, pending, pending_at);
    char *t = malloc(cl + n + 1);
    if (!t) return scan_marker_from(p->buf.s, n, lit, absorb, start, end, pending, pending_at);
    memcpy(t, p->ctx, cl);
    if (n) memcpy(t + cl, p->buf.s, n);
    size_t at = cl + n;
    int r = scan_marker_from(t, cl + n, lit, absorb, start, end, pending, &at);
    free(t);
    if (r) {
        if (*end <= cl) r = 0; /* cannot happen: it would have matched before */
        *start = *start > cl ? *start - cl : 0;
        *end = r ? *end - cl : 0;
    }
    if (!r) {
        *pending_at = at > cl ? at - cl : 0;
    }
    return r;
}

static void ctx_add(rc_parser *p, const char *s, size_t n)
{
    if (n == 0) return;
    size_t cap = sizeof p->ctx - 1;
    if (n >= cap) {
        memcpy(p->ctx, s + n - cap, cap);
        p->ctx_len = cap;
        return;
    }
    if (p->ctx_len + n > cap) {
        size_t drop = p->ctx_len + n - cap;
        memmove(p->ctx, p->ctx + drop, p->ctx_len - drop);
        p->ctx_len -= drop;
    }
    memcpy(p->ctx + p->ctx_len, s, n);
    p->ctx_len += n;
}

/* Scan s[0, n) for marker `lit` as the reference's matcher does: a run of '\n'
 * right before the marker belongs to it (absorb), but a '\n' that breaks a
 * partial match is consumed by the failure and starts no run (so "<\n<｜DSML｜"
 * keeps its '\n' as text). Returns 1 with [*start, *end) at the first match;
 * else 0, with *pending set when the end of s may still become a match. */
static int scan_marker_from(const char *s, size_t n, const char *lit, int absorb, size_t *start,
                            size_t *end, int *pending, size_t *pending_at)
{
    size_t m = strlen(lit), k = 0, from = 0;
    int in_run = 0; /* in a '\n' run that the marker would absorb */
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (k > 0) { /* inside a partial match */
            if (c == lit[k]) {
                if (++k == m) {
                    *start = from;
                    *end = i + 1;
                    return 1;
                }
                continue;
            }
            k = 0;
            in_run = 0;
            if (c == lit[0]) {
                from = i;
                k = 1;
            }
            continue; /* a breaking '\n' starts no run */
        }
        if (c == lit[0]) {
            if (!in_run) from = i;
            k = 1;
            if (m == 1) {
                *start = from;
                *end = i + 1;
                return 1;
            }
        } else if (absorb && c == '\n') {
            if (!in_run) from = i;
            in_run = 1;
        } else {
            in_run = 0;
        }
    }
    *pending = k > 0 || in_run;
    *pending_at = from;
    return 0;
}

/* JSON output mode: where the buffer's answer text falls in the JSON stage's
 * phases (the JSON stage's own held text comes first). [0, b0) is prefix text,
 * [b0, p0) the fence or the bare bracket, [p0, e1) payload text with its
 * terminating "\n```" (when found), [e1, n) suffix text; offsets are n when the
 * boundary is not in the buffer. Without JSON mode everything is "prefix". */
typedef struct jregions {
    size_t b0, p0, e1;
    int payload_end_seen; /* e1 is a real boundary (the terminator is complete) */
} jregions;

static jregions json_regions(const rc_parser *p)
{
    const char *s = p->buf.s;
    size_t n = p->buf.len;
    jregions r = {n, n, n, 0};
    if (n == 0 || p->state != P_CONTENT || !p->reply->parse_json_output) return r;
    size_t jl = p->jbuf.len;
    rc_buf c = {0};
    size_t a = 0;
    if (p->jphase == J_SUFFIX) {
        r.b0 = r.p0 = r.e1 = 0;
        r.payload_end_seen = 1;
        return r;
    }
    if (p->jphase == J_PREFIX) {
        if (p->strip_newlines)
            while (a < n && s[a] == '\n') a++;
        rc_buf_add(&c, p->jbuf.s, jl);
        rc_buf_add(&c, s + a, n - a);
        size_t st, skip;
        if (c.oom || !json_payload_start(c.s, c.len, &st, &skip)) {
            free(c.s);
            return r;
        }
        size_t pe = st + (skip ? skip : 1); /* payload text begins (concatenation) */
        r.b0 = st >= jl ? a + st - jl : 0;
        r.p0 = pe >= jl ? a + pe - jl : 0;
        free(c.s);
        const char *t = find(s + r.p0, n - r.p0, "\n```");
        if (t) {
            r.e1 = (size_t)(t - s) + 4;
            r.payload_end_seen = 1;
        }
        return r;
    }
    /* J_PAYLOAD: the terminator may begin in the JSON stage's held text */
    r.b0 = r.p0 = 0;
    rc_buf_add(&c, p->jbuf.s, jl);
    rc_buf_add(&c, s, n);
    const char *t = c.oom ? NULL : find(c.s, c.len, "\n```");
    if (t) {
        size_t e = (size_t)(t - c.s) + 4;
        r.e1 = e >= jl ? e - jl : 0;
        r.payload_end_seen = 1;
    }
    free(c.s);
    return r;
}

/* The match ending first in the buffer: its start (with the '\n' run a marker
 * absorbs), end and kind; -1 when there is none. In JSON mode the DSML opener is
 * looked for in the prefix and suffix text, a stray </think> in the prefix text,
 * stop sequences only in the payload text (with its terminator). */
static int earliest_marker(const rc_parser *p, size_t *start, size_t *end, const char **stop)
{
    const char *s = p->buf.s;
    size_t n = p->buf.len, best_end = (size_t)-1, best_start = 0;
    int kind = -1;
    const char *best_stop = NULL;
    int json = p->state == P_CONTENT && p->reply->parse_json_output;
    jregions jr = json_regions(p);
    struct {
        const char *lit;
        mkind kind;
        int absorb;
        int on;
        size_t from, to; /* the range searched */
    } m[5] = {
        {THINK_END, M_THINK_END, 1, p->state == P_REASONING, 0, n},
        {opener_of(p), M_OPENER, 1, p->reply->parse_tool_calls, 0, jr.b0},
        {THINK_END, M_STRAY_THINK_END, 0, p->state == P_CONTENT, 0, jr.b0},
        {opener_of(p), M_OPENER, 1, p->reply->parse_tool_calls && json && jr.payload_end_seen,
         jr.e1, n},
        {EOS, M_EOS, 0, p->reply->tool_format == RC_TOOLS_V3, 0, n},
    };
    for (int i = 0; i < 5; i++) {
        if (!m[i].on || m[i].from >= m[i].to) continue;
        size_t st, e;
        int pending;
        size_t at;
        if (m[i].from == 0 ? !scan_buf(p, m[i].to, m[i].lit, m[i].absorb, &st, &e, &pending, &at)
                           : !scan_marker(s + m[i].from, m[i].to - m[i].from, m[i].lit, m[i].absorb,
                                          &st, &e, &pending))
            continue;
        st += m[i].from;
        e += m[i].from;
        if (e >= best_end) continue;
        best_end = e;
        best_start = st;
        kind = (int)m[i].kind;
    }
    /* leading '\n's being stripped are not matched, except by the stop "\n" itself */
    size_t lead = 0, sfrom = 0, sto = n;
    if (p->state == P_CONTENT && p->strip_newlines)
        while (lead < n && s[lead] == '\n') lead++;
    if (json) {
        sfrom = jr.p0;
        sto = jr.e1;
        lead = 0;
    }
    if (p->state == P_CONTENT && sfrom < sto)
        for (size_t i = 0; i < p->reply->n_stops; i++) {
            const char *lit = p->reply->stops[i];
            if (!lit[0]) continue;
            const char *hit = lead && strcmp(lit, "\n") == 0
                                  ? s
                                  : find_stop(p, s + sfrom + lead, sto - sfrom - lead, lit);
            if (!hit) continue;
            size_t at = (size_t)(hit - s), e = at + strlen(lit);
            /* a stop ending with a marker wins; between stops, the first listed */
            if (e > best_end || (e == best_end && kind == M_STOP)) continue;
            best_end = e;
            best_start = at;
            kind = M_STOP;
            best_stop = lit;
        }
    *start = best_start;
    *end = best_end;
    *stop = best_stop;
    return kind;
}

/* Where the undecided end of the buffer begins (§3's table): the earliest
 * position from which the text may still become a marker, a '\n' run a marker
 * would drop, or a stop sequence; n when all of it is decided. In JSON mode
 * only the markers of the phase the buffer ends in count (see earliest_marker);
 * *floor is where that phase's text begins in the buffer. */
static size_t pending_from(const rc_parser *p, size_t *floor)
{
    const char *s = p->buf.s;
    size_t n = p->buf.len, from = n, st, e;
    int pending = 0;
    *floor = 0;
    if (n == 0) return 0;
    int reasoning = p->state == P_REASONING;
    int json = p->state == P_CONTENT && p->reply->parse_json_output;
    jregions jr = json_regions(p);
    int in_prefix = !json || jr.b0 == n;
    int in_suffix = json && jr.payload_end_seen && jr.e1 < n;
    int in_payload = !in_prefix && !in_suffix;
    size_t base = in_suffix ? jr.e1 : 0;
    if (json) *floor = in_suffix ? jr.e1 : in_payload ? jr.p0 : 0;
    size_t at = n;
    if (in_prefix && !scan_buf(p, n, THINK_END, reasoning, &st, &e, &pending, &at) && pending)
        from = at;
    const char *opener = opener_of(p);
    if (p->reply->parse_tool_calls && !in_payload) {
        if (base == 0) {
            if (!scan_buf(p, n, opener, 1, &st, &e, &pending, &at) && pending && at < from)
                from = at;
        } else if (!scan_marker(s + base, n - base, opener, 1, &st, &e, &pending) && pending) {
            size_t f = base + pending_start(s + base, n - base, opener, 1);
            if (f < from) from = f;
        }
    }
    if (p->reply->tool_format == RC_TOOLS_V3 && ends_with_prefix_of(s, n, EOS)) {
        size_t f = n;
        for (size_t k = strlen(EOS) - 1; k > 0; k--)
            if (n >= k && memcmp(s + n - k, EOS, k) == 0) {
                f = n - k;
                break;
            }
        if (f < from) from = f;
    }
    size_t lead = 0;
    if (!reasoning && !json && p->strip_newlines)
        while (lead < n && s[lead] == '\n') lead++;
    size_t sfloor = lead > *floor ? lead : *floor;
    if (!reasoning && (!json || in_payload))
        for (size_t i = 0; i < p->reply->n_stops; i++) {
            const char *lit = p->reply->stops[i];
            size_t m = strlen(lit);
            if (m == 0) continue;
            for (size_t k = m - 1; k > 0; k--)
                if (n >= k && n - k >= sfloor && memcmp(s + n - k, lit, k) == 0) {
                    if (n - k < from) from = n - k;
                    break;
                }
        }
    /* a bare payload's bracket is held with an undecided end right after it */
    if (json && in_payload && from == jr.p0 && from < n && jr.p0 == jr.b0 + 1 &&
        (s[jr.b0] == '{' || s[jr.b0] == '[')) {
        from = jr.b0;
        *floor = jr.b0;
    }
    return from;
}

/* JSON mode: the JSON stage holds a possible fence (prefix phase) while the
 * text after it is held here; once that text shows no fence can start in the
 * held part, the held part is prefix text and is decided at once
 * (["``", "a<", "x"] gives " " for the first push with the second). */
static void json_settle_fence(rc_parser *p, rc_pieces *out)
{
    if (p->state != P_CONTENT || !p->reply->parse_json_output || p->jphase == J_SUFFIX ||
        p->jbuf.len == 0 || p->buf.len == 0)
        return;
    if (p->jphase == J_PAYLOAD) {
        /* likewise for a held possible "\n```" at the payload's end */
        if (p->jbracket) return;
        size_t jl = p->jbuf.len, f = jl;
        for (size_t i = 0; i < jl; i++) {
            if (p->jbuf.s[i] != '\n') continue;
            size_t k = jl - i + p->buf.len;
            if (k > 4) k = 4;
            rc_buf c = {0};
            rc_buf_add(&c, p->jbuf.s + i, jl - i);
            rc_buf_add(&c, p->buf.s, p->buf.len);
            int viable = !c.oom && memcmp(c.s, "\n```", k) == 0;
            free(c.s);
            if (viable) {
                f = i;
                break;
            }
        }
        while (f > 0 && f < jl && p->jpush[f - 1] == p->jpush[f]) f--;
        if (f) {
            json_payload(p, out, f);
            jconsume(p, f);
        }
        return;
    }
    rc_buf c = {0};
    size_t jl = p->jbuf.len;
    rc_buf_add(&c, p->jbuf.s, jl);
    rc_buf_add(&c, p->buf.s, p->buf.len);
    if (c.oom) {
        free(c.s);
        return;
    }
    size_t st, skip, f;
    if (!json_payload_start(c.s, c.len, &st, &skip)) {
        f = json_fence_from(c.s, c.len, jl);
        if (f > jl) f = jl;
        while (f > 0 && f < jl && p->jpush[f - 1] == p->jpush[f]) f--;
    } else {
        f = 0;
    }
    free(c.s);
    if (f) {
        json_spaces(p, out, f);
        jconsume(p, f);
    }
}

/* Degenerate output — a run of '\n' that never ends, pushed a token at a time —
 * would make every push rescan all it holds. At most HELD_PIECES_MAX pushes are
 * held: older ones are released as text (where the reference would still hold
 * them; no real output holds that many). Returns the new release point. */
enum { HELD_PIECES_MAX = 1024 };
static size_t cap_held(const rc_parser *p, size_t upto)
{
    size_t i = p->buf.len, count = 0;
    while (i > upto) {
        size_t j = i - 1;
        while (j > upto && p->push_of[j - 1] == p->push_of[j]) j--;
        if (++count == HELD_PIECES_MAX) return j > upto ? j : upto;
        i = j;
    }
    return upto;
}

static void process_text(rc_parser *p, rc_pieces *out, int final)
{
    while (p->state == P_REASONING || p->state == P_CONTENT) {
        rc_piece_class cls = p->state == P_REASONING ? RC_PIECE_REASONING : RC_PIECE_CONTENT;
        if (p->leading_think) { /* R1 writes "<think>\n" first when its prompt did not */
            size_t a = 0;
            while (a < p->buf.len && p->buf.s[a] == '\n') a++;
            size_t have = p->buf.len - a, need = strlen("<think>");
            size_t k = have < need ? have : need;
            if (memcmp(p->buf.s + a, "<think>", k) == 0 && !final && have < need) return;
            p->leading_think = 0;
            if (have >= need && memcmp(p->buf.s + a, "<think>", need) == 0) consume(p, a + need);
        }
        if (p->strip_consume) { /* the answer after </think>: its leading '\n's go first */
            size_t k = 0;
            while (k < p->buf.len && p->buf.s[k] == '\n') k++;
            for (size_t i = 0; k && !p->reply->parse_json_output && i < p->reply->n_stops; i++)
                if (strcmp(p->reply->stops[i], "\n") == 0) { /* the stop "\n" still matches */
                    p->stop = p->reply->stops[i];
                    p->state = P_DONE;
                    consume(p, p->buf.len);
                    return;
                }
            consume(p, k);
            if (k) p->ctx_len = 0;
            if (p->buf.len == 0) return;
            p->strip_consume = 0;
        }
        size_t start, end;
        const char *stop;
        int kind = earliest_marker(p, &start, &end, &stop);
        if (kind < 0) {
            /* release the pieces wholly before the undecided end; hold the rest whole */
            size_t floor = 0;
            size_t upto = final ? p->buf.len : pending_from(p, &floor);
            if (upto < p->buf.len)
                while (upto > floor && p->push_of[upto - 1] == p->push_of[upto]) upto--;
            upto = cap_held(p, upto);
            ctx_add(p, p->buf.s, upto);
            emit_channel(p, out, cls, 0, upto);
            consume(p, upto);
            if (!final) json_settle_fence(p, out);
            return;
        }
        emit_channel(p, out, cls, 0, start);
        p->ctx_len = 0;
        /* the DSML opener stays: it is the tool-call region's first tag */
        int keep_opener = kind == M_OPENER && p->reply->tool_format == RC_TOOLS_DSML;
        consume(p, keep_opener ? end - strlen(OPENER) : end);
        switch ((mkind)kind) {
        case M_THINK_END:
            p->state = P_CONTENT;
            p->strip_consume = 1;
            p->barrier = 1;
            break;
        case M_OPENER: /* the opener stays in the buffer: it is the region's first tag */
            /* JSON mode: answer text the JSON stage still holds is decided now */
            if (p->state == P_CONTENT && p->reply->parse_json_output && p->jbuf.len)
                json_run(p, out, 1);
            p->state = P_TOOLS;
            p->t = T_REGION;
            p->v = V_REGION;
            p->h_body = 1; /* Hermes: the opener was the call's <tool_call> */
            p->first_tag = 1;
            break;
        case M_STRAY_THINK_END: /* deleted from the answer; it ends newline stripping */
            if (p->reply->parse_json_output && p->jphase != J_PAYLOAD) {
                /* it splits the prefix text: what the JSON stage holds is decided,
                 * and the text after it gets its own " " */
                if (p->jbuf.len) json_run(p, out, 1);
                p->jspace_push = 0;
            }
            p->strip_newlines = 0;
            p->strip_consume = 0;
            p->barrier = 1;
            break;
        case M_STOP:
            p->stop = stop;
            p->state = P_DONE;
            consume(p, p->buf.len);
            break;
        case M_EOS: /* the end of the output, written out as text */
            p->state = P_DONE;
            consume(p, p->buf.len);
            break;
        }
    }
}

/* ---- the DSML tool-call region ----------------------------------------- */

static size_t span(const rc_parser *p, char c)
{
    const char *q = memchr(p->buf.s, c, p->buf.len);
    return q ? (size_t)(q - p->buf.s) : (size_t)-1;
}

static void emit_key(rc_parser *p, rc_pieces *out, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && p->push_of[j] == p->push_of[i]) j++;
        add_piece(p, out, RC_PIECE_ARGS_KEY, p->push_of[i], p->n_calls - 1, p->buf.s + i, j - i);
        i = j;
    }
}

/* A value range, JSON-escaped (string values) or raw, one piece per push. */
static void emit_value(rc_parser *p, rc_pieces *out, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && p->push_of[j] == p->push_of[i]) j++;
        if (!p->string_value) {
            add_piece(p, out, RC_PIECE_ARGS_VALUE, p->push_of[i], p->n_calls - 1, p->buf.s + i,
                      j - i);
        } else {
            rc_buf esc = {0};
            rc_json_string(&esc, p->buf.s + i, j - i);
            if (esc.oom) {
                out->oom = 1;
            } else {
                rc_piece *pc = add_piece(p, out, RC_PIECE_ARGS_VALUE, p->push_of[i], p->n_calls - 1,
                                         esc.s + 1, esc.len - 2);
                if (pc) {
                    rc_buf_add(&pc->raw, p->buf.s + i, j - i);
                    if (pc->raw.oom) out->oom = 1;
                }
            }
            free(esc.s);
        }
        i = j;
    }
}

/* A structural piece (what the parser writes) attributed to the current push. */
static void emit_struct(rc_parser *p, rc_pieces *out, rc_piece_class cls, const char *s)
{
    add_piece(p, out, cls, p->push, p->n_calls - 1, s, strlen(s));
}

static void stop_parsing(rc_parser *p)
{
    p->state = P_DONE;
    consume(p, p->buf.len);
}

/* What a tag after "<｜DSML｜" is: reads the tag word (an optional leading space,
 * then up to a space or '>'). Returns 0 when more input is needed, else 1 with
 * *word_len (bytes after the opener) and *named (the word is followed by
 * ' name='), or -1 when the word is followed by something else than ' name='
 * or '>' (*word_len is then set too). */
static int read_tag(const rc_parser *p, size_t at, size_t *word_len, int *named, int *closed)
{
    const char *s = p->buf.s + at;
    size_t n = p->buf.len - at, i = 0;
    if (i < n && s[i] == ' ') i++;
    while (i < n && s[i] != ' ' && s[i] != '>') i++;
    if (i == n) return 0;
    *word_len = i;
    *closed = s[i] == '>';
    *named = 0;
    if (*closed) return 1;
    static const char attr[] = " name=";
    size_t k = n - i < 6 ? n - i : 6;
    if (memcmp(s + i, attr, k) != 0) return -1;
    if (k < 6) return 0;
    *named = 1;
    return 1;
}

static int word_is(const char *w, size_t n, const char *a, const char *b)
{
    return (n == strlen(a) && memcmp(w, a, n) == 0) || (n == strlen(b) && memcmp(w, b, n) == 0);
}

/* The effect of a closing tag at the buffer's start ("</｜DSML｜"): it happens at
 * once when nothing follows the opener or when this push completed an opener
 * begun in an earlier one; otherwise once the tag's '>' has arrived, as the
 * reference decides. */
static int closing_now(const rc_parser *p, const char *word, int region_too)
{
    size_t n_open = strlen(CLOSER);
    if (p->buf.len == n_open || (p->push_of[0] != p->push && p->push_of[n_open - 1] == p->push))
        return 1;
    if (memchr(p->buf.s + n_open, '>', p->buf.len - n_open) != NULL) return 1;
    /* it waits only while the tag may still be the V4 closer "WORD>" or "WORD >"
     * ("</｜DSML｜pa" waits, "</｜DSML｜ pa" or "</｜DSML｜x" closes at once) */
    /* an invoke's closer also waits while what follows may still be the
     * region's closer: "</｜DSML｜</｜DSML｜", "</｜DSML｜<", "…</｜DSML｜tool" */
    const char *r = p->buf.s + n_open;
    size_t after = p->buf.len - n_open, w = strlen(word);
    if (region_too) {
        static const char *const ends[2] = {CLOSER "tool_calls", CLOSER " calls"};
        for (int e = 0; e < 2; e++) {
            size_t m = strlen(ends[e]);
            if (after <= m && memcmp(r, ends[e], after) == 0) return 0;
        }
    }
    if (after <= w) return memcmp(r, word, after) != 0;
    return !(after == w + 1 && memcmp(r, word, w) == 0 && r[w] == ' ');
}

static void close_value(rc_parser *p, rc_pieces *out)
{
    if (p->string_value) emit_struct(p, out, RC_PIECE_ARGS_UNQUOTE, "\"");
}

static void close_invoke(rc_parser *p, rc_pieces *out)
{
    emit_struct(p, out, RC_PIECE_ARGS_CLOSE, p->n_params ? "}" : "{}");
    add_piece(p, out, RC_PIECE_CALL_END, p->push, p->n_calls - 1, "", 0);
}

static void process_tools(rc_parser *p, rc_pieces *out)
{
    size_t n_open = strlen(OPENER), n_close = strlen(CLOSER);
    while (p->state == P_TOOLS && p->buf.len > 0) {
        switch (p->t) {
        case T_SKIP: {
            /* up to '>', unless a DSML tag begins first: that tag counts */
            size_t gt = span(p, '>');
            const char *open = find(p->buf.s, p->buf.len, OPENER);
            const char *close = find(p->buf.s, p->buf.len, CLOSER);
            const char *tag = open && (!close || open < close) ? open : close;
            if (tag && (size_t)(tag - p->buf.s) < gt) {
                consume(p, (size_t)(tag - p->buf.s));
                p->t = p->after;
                break;
            }
            if (gt == (size_t)-1) {
                size_t keep = 0;
                for (size_t k = n_close - 1; k > 0 && !keep; k--)
                    if (p->buf.len >= k &&
                        (memcmp(p->buf.s + p->buf.len - k, CLOSER, k) == 0 ||
                         (k < n_open && memcmp(p->buf.s + p->buf.len - k, OPENER, k) == 0)))
                        keep = k;
                consume(p, p->buf.len - keep);
                return;
            }
            consume(p, gt + 1);
            p->t = p->after;
            break;
        }
        case T_REGION:
        case T_INVOKE: {
            int in_invoke = p->t == T_INVOKE;
            const char *open = find(p->buf.s, p->buf.len, OPENER);
            const char *close = find(p->buf.s, p->buf.len, CLOSER);
            const char *tag = open && (!close || open < close) ? open : close;
            if (!tag) { /* junk; keep what may still become a tag */
                size_t keep = 0;
                for (size_t k = n_close - 1; k > 0 && !keep; k--)
                    if (p->buf.len >= k &&
                        (memcmp(p->buf.s + p->buf.len - k, CLOSER, k) == 0 ||
                         (k < n_open && memcmp(p->buf.s + p->buf.len - k, OPENER, k) == 0)))
                        keep = k;
                consume(p, p->buf.len - keep);
                return;
            }
            consume(p, (size_t)(tag - p->buf.s));
            if (tag == close) {
                if (!in_invoke) {
                    /* "</｜DSML｜tool_calls>" / " calls>" ends the region; any other
                     * closing tag is junk, and a tag inside it counts */
                    static const char *const ends[2] = {"tool_calls>", " calls>"};
                    size_t after = p->buf.len - n_close;
                    int wait = 0;
                    for (int e = 0; e < 2; e++) {
                        size_t m = strlen(ends[e]);
                        if (after >= m && memcmp(p->buf.s + n_close, ends[e], m) == 0) {
                            stop_parsing(p);
                            return;
                        }
                        if (after < m && memcmp(p->buf.s + n_close, ends[e], after) == 0) wait = 1;
                    }
                    if (wait) return;
                    consume(p, n_close);
                    break;
                }
                if (!closing_now(p, "invoke", 1)) return;
                close_invoke(p, out);
                consume(p, n_close); /* the rest of the tag is junk: a tag in it counts */
                p->t = T_REGION;
                break;
            }
            size_t word;
            int named, closed;
            {
                /* a tag running into another tag before its word ends is junk */
                size_t i = n_open;
                while (i < p->buf.len && p->buf.s[i] != ' ' && p->buf.s[i] != '>' &&
                       !(p->buf.len - i >= n_open && memcmp(p->buf.s + i, OPENER, n_open) == 0) &&
                       !(p->buf.len - i >= n_close && memcmp(p->buf.s + i, CLOSER, n_close) == 0))
                    i++;
                if (i < p->buf.len && p->buf.s[i] != ' ' && p->buf.s[i] != '>' &&
                    !(i == n_open && p->buf.s[i] == ' ')) {
                    p->first_tag = 0;
                    consume(p, n_open);
                    p->t = T_SKIP;
                    p->after = in_invoke ? T_INVOKE : T_REGION;
                    break;
                }
            }
            int r = read_tag(p, n_open, &word, &named, &closed);
            if (r == 0) return;
            const char *w = p->buf.s + n_open;
            int is_param = word_is(w, word, "parameter", " parameter");
            if (in_invoke) {
                if (is_param && r > 0 && named) {
                    consume(p, n_open + word + 6 /* " name=" */);
                    emit_struct(p, out, p->n_params ? RC_PIECE_ARGS_COMMA : RC_PIECE_ARGS_OPEN,
                                p->n_params ? ", " : "{");
                    p->n_params++;
                    p->t = T_KEY;
                    break;
                }
                /* anything else inside an invoke is junk */
                consume(p, n_open);
                p->t = T_SKIP;
                p->after = T_INVOKE;
                break;
            }
            if (find(w, word, OPENER)) {
                /* a tag word running into another tag: this one is junk, that one
                 * is read ("<｜DSML｜x\n<｜DSML｜parameter name=…" is no invoke) */
                p->first_tag = 0;
                consume(p, n_open);
                p->t = T_SKIP;
                p->after = T_REGION;
                break;
            }
            if (p->first_tag && !(r > 0 && named)) {
                /* the opening tag: its word is not checked */
                p->first_tag = 0;
                consume(p, n_open);
                p->t = T_SKIP;
                p->after = T_REGION;
                break;
            }
            p->first_tag = 0;
            if (is_param || word_is(w, word, "tool_calls", " calls")) {
                consume(p, n_open); /* junk between invokes */
                p->t = T_SKIP;
                p->after = T_REGION;
                break;
            }
            if (r > 0 && named && !(word >= 6 && memcmp(w + word - 6, "invoke", 6) == 0)) {
                /* a named tag is an invoke only when its word ends in "invoke"
                 * ("xinvoke" is one, "foo" or "invokex" is junk), as the reference */
                consume(p, n_open);
                p->t = T_SKIP;
                p->after = T_REGION;
                break;
            }
            if (r < 0 || !named) { /* an invoke without ' name=': parsing stops */
                stop_parsing(p);
                return;
            }
            consume(p, n_open + word + 6 /* " name=" */);
            p->t = T_NAME_QUOTE;
            break;
        }
        case T_NAME_QUOTE:
            if (p->buf.s[0] != '"') { /* name='…' or name=…: parsing stops */
                stop_parsing(p);
                return;
            }
            consume(p, 1);
            p->t = T_NAME;
            break;
        case T_NAME: {
            size_t q = span(p, '"');
            if (q == (size_t)-1) return;
            p->n_calls++;
            p->n_params = 0;
            add_piece(p, out, RC_PIECE_CALL_BEGIN, p->push, p->n_calls - 1, p->buf.s, q);
            consume(p, q + 1);
            p->t = T_SKIP;
            p->after = T_INVOKE;
            break;
        }
        case T_KEY: {
            size_t sp = span(p, ' ');
            if (sp == (size_t)-1) {
                emit_key(p, out, p->buf.len);
                consume(p, p->buf.len);
                return;
            }
            emit_key(p, out, sp);
            consume(p, sp);
            emit_struct(p, out, RC_PIECE_ARGS_COLON, ": ");
            p->t = T_STRING_ATTR;
            break;
        }
        case T_STRING_ATTR: {
            /* the first string="true"> or string="false"> ahead; what precedes it is
             * skipped */
            static const char t_attr[] = "string=\"true\">", f_attr[] = "string=\"false\">";
            const char *ht = find(p->buf.s, p->buf.len, t_attr);
            const char *hf = find(p->buf.s, p->buf.len, f_attr);
            const char *h = ht && (!hf || ht < hf) ? ht : hf;
            if (!h) {
                size_t keep = 0;
                for (size_t k = strlen(f_attr) - 1; k > 0 && !keep; k--)
                    if (p->buf.len >= k &&
                        (memcmp(p->buf.s + p->buf.len - k, f_attr, k) == 0 ||
                         (k < strlen(t_attr) && memcmp(p->buf.s + p->buf.len - k, t_attr, k) == 0)))
                        keep = k;
                consume(p, p->buf.len - keep);
                return;
            }
            p->string_value = h == ht;
            /* the push that brought the 't' of "true" */
            uint32_t t_push = p->push_of[(size_t)(h - p->buf.s) + strlen("string=\"")];
            consume(p, (size_t)(h - p->buf.s) + strlen(h == ht ? t_attr : f_attr));
            p->quote_pending = 0;
            if (p->string_value) {
                /* the '"' waits while the value so far is a possible closing tag
                 * ("string=\"true\"><" emits nothing yet), unless the 't' of "true"
                 * came in an earlier push */
                if (t_push == p->push && p->buf.len && p->buf.len < n_close &&
                    memcmp(p->buf.s, CLOSER, p->buf.len) == 0)
                    p->quote_pending = 1;
                else
                    emit_struct(p, out, RC_PIECE_ARGS_QUOTE, "\"");
            }
            p->t = T_VALUE;
            break;
        }
        case T_VALUE: {
            if (p->quote_pending) {
                if (p->buf.len < n_close && memcmp(p->buf.s, CLOSER, p->buf.len) == 0) return;
                p->quote_pending = 0;
                emit_struct(p, out, RC_PIECE_ARGS_QUOTE, "\"");
            }
            const char *hit = find(p->buf.s, p->buf.len, CLOSER);
            if (hit) {
                size_t v = (size_t)(hit - p->buf.s);
                emit_value(p, out, v);
                consume(p, v);
                if (!closing_now(p, "parameter", 0)) return;
                close_value(p, out);
                consume(p, n_close); /* the rest of the tag is junk: a tag in it counts */
                p->t = T_INVOKE;
                break;
            }
            /* hold everything while the end may still be the closing tag's start */
            if (ends_with_prefix_of(p->buf.s, p->buf.len, CLOSER)) return;
            emit_value(p, out, p->buf.len);
            consume(p, p->buf.len);
            return;
        }
        }
    }
}

/* ---- the V3 / V3.1 / R1 tool-call tokens -------------------------------- */

/* deepseek-recipe defines no parser for these formats; this one follows the chat
 * templates that teach them (docs/stream.md, "Chat templates"):
 *   V3, R1:  <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
 *   V3.1:    <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>
 * inside <｜tool▁calls▁begin｜> … <｜tool▁calls▁end｜>. ARGS is streamed as it
 * comes (it is already JSON); text between calls is skipped. */

/* Consume junk up to `lit`'s first possible start; 1 when `lit` is at the start. */
static int skip_to(rc_parser *p, const char *lit, const char *alt)
{
    const char *hit = find(p->buf.s, p->buf.len, lit);
    const char *hit2 = alt ? find(p->buf.s, p->buf.len, alt) : NULL;
    const char *h = hit && (!hit2 || hit < hit2) ? hit : hit2;
    if (h) {
        consume(p, (size_t)(h - p->buf.s));
        return 1;
    }
    size_t keep = 0;
    for (size_t k = strlen(lit) - 1; k > 0 && !keep; k--)
        if (p->buf.len >= k &&
            (memcmp(p->buf.s + p->buf.len - k, lit, k) == 0 ||
             (alt && k < strlen(alt) && memcmp(p->buf.s + p->buf.len - k, alt, k) == 0)))
            keep = k;
    consume(p, p->buf.len - keep);
    return 0;
}

static void trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\n' || **s == '\t' || **s == '\r')) (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\n' || (*s)[*n - 1] == '\t' ||
                  (*s)[*n - 1] == '\r'))
        (*n)--;
}

static void begin_v3_call(rc_parser *p, rc_pieces *out, const char *name, size_t n)
{
    trim(&name, &n);
    p->n_calls++;
    add_piece(p, out, RC_PIECE_CALL_BEGIN, p->push, p->n_calls - 1, name, n);
}

static void process_tools_v3(rc_parser *p, rc_pieces *out)
{
    while (p->state == P_TOOLS && p->buf.len > 0) {
        switch (p->v) {
        case V_REGION: {
            if (!skip_to(p, V3_CALL_BEGIN, V3_CALLS_END)) return;
            if (memcmp(p->buf.s, V3_CALLS_END, strlen(V3_CALLS_END)) == 0) {
                stop_parsing(p);
                return;
            }
            consume(p, strlen(V3_CALL_BEGIN));
            p->v = V_HEAD;
            break;
        }
        case V_HEAD: {
            const char *sep = find(p->buf.s, p->buf.len, V3_SEP);
            if (!sep) return;
            const char *h = p->buf.s;
            size_t n = (size_t)(sep - h);
            trim(&h, &n);
            if (n == strlen("function") && memcmp(h, "function", n) == 0) {
                consume(p, (size_t)(sep - p->buf.s) + strlen(V3_SEP));
                p->v = V_NAME;
            } else {
                begin_v3_call(p, out, p->buf.s, (size_t)(sep - p->buf.s));
                consume(p, (size_t)(sep - p->buf.s) + strlen(V3_SEP));
                p->v_fenced = 0;
                p->v = V_ARGS;
            }
            break;
        }
        case V_NAME: {
            size_t nl = span(p, '\n');
            const char *end = find(p->buf.s, p->buf.len, V3_CALL_END);
            if (nl == (size_t)-1 && !end) return;
            size_t n =
                nl != (size_t)-1 && (!end || p->buf.s + nl < end) ? nl : (size_t)(end - p->buf.s);
            begin_v3_call(p, out, p->buf.s, n);
            consume(p, n);
            p->v_fenced = 1;
            p->v = V_FENCE;
            break;
        }
        case V_FENCE: {
            /* "\n```json\n" or "\n```\n" before the arguments, when present */
            static const char *const fences[] = {"\n```json\n", "\n```\n"};
            int waiting = 0, matched = 0;
            for (int f = 0; f < 2 && !matched; f++) {
                size_t m = strlen(fences[f]), k = p->buf.len < m ? p->buf.len : m;
                if (memcmp(p->buf.s, fences[f], k) != 0) continue;
                if (k < m) {
                    waiting = 1;
                    continue;
                }
                consume(p, m);
                matched = 1;
            }
            if (!matched && waiting) return;
            p->v = V_ARGS;
            break;
        }
        case V_ARGS: {
            const char *term = p->v_fenced ? "\n```" : V3_CALL_END;
            const char *hit = find(p->buf.s, p->buf.len, term);
            if (p->v_fenced && !hit) { /* an unfenced end is accepted too */
                hit = find(p->buf.s, p->buf.len, V3_CALL_END);
                if (hit) term = V3_CALL_END;
            }
            size_t n = hit ? (size_t)(hit - p->buf.s) : p->buf.len;
            if (!hit)
                for (size_t k = strlen(term) - 1; k > 0; k--)
                    if (p->buf.len >= k && memcmp(p->buf.s + p->buf.len - k, term, k) == 0) {
                        n = p->buf.len - k;
                        break;
                    }
            for (size_t i = 0; i < n;) {
                size_t j = i + 1;
                while (j < n && p->push_of[j] == p->push_of[i]) j++;
                add_piece(p, out, RC_PIECE_ARGS_VALUE, p->push_of[i], p->n_calls - 1, p->buf.s + i,
                          j - i);
                i = j;
            }
            consume(p, n);
            if (!hit) return;
            consume(p, strlen(term));
            add_piece(p, out, RC_PIECE_CALL_END, p->push, p->n_calls - 1, "", 0);
            p->v = strcmp(term, V3_CALL_END) == 0 ? V_REGION : V_AFTER_ARGS;
            break;
        }
        case V_AFTER_ARGS:
            if (!skip_to(p, V3_CALL_END, NULL)) return;
            consume(p, strlen(V3_CALL_END));
            p->v = V_REGION;
            break;
        }
    }
}

/* ---- ChatML's Hermes-style tool calls --------------------------------------- */

/* A call is <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>, as
 * Qwen2's chat templates teach it (vLLM's and llama.cpp's "hermes" parsers read
 * the same). A block is held until it closes and then emitted whole: ARGS
 * (an object, or a string holding JSON) becomes the arguments JSON, written
 * with ", " and ": " separators as Python's json.dumps writes it. A block that is not
 * such an object is answer text, tags included. Text between calls is skipped. */
/* The call a block's text holds: {"name": string, "arguments": object or string}
 * ("parameters" read as well; no arguments: {}); NULL when it is not one. */
static json_t *hermes_parse(const char *s, size_t n, json_t **name, json_t **args)
{
    char msg[8];
    json_t *root = rc_json_parse(s, n, 64, msg, sizeof msg);
    *name = json_object_get(root, "name");
    *args = json_object_get(root, "arguments");
    if (!*args) *args = json_object_get(root, "parameters");
    if (json_is_object(root) && rc_json_is_text(*name) &&
        (!*args || json_is_object(*args) || rc_json_is_text(*args)))
        return root;
    json_decref(root);
    return NULL;
}

static size_t skip_ws(const char *s, size_t i, size_t n)
{
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) i++;
    return i;
}

/* The head of a call block that is not whole JSON: `{"name": NAME` with NAME a
 * complete JSON string, then optionally `, "arguments": ` (or "parameters").
 * Returns NAME (a new reference), with *args_at the offset where the arguments
 * begin (n when the head ends before them); NULL when the text does not open
 * with a complete name. */
static json_t *hermes_head(const char *s, size_t n, size_t *args_at)
{
    size_t i = skip_ws(s, 0, n);
    if (i >= n || s[i] != '{') return NULL;
    i = skip_ws(s, i + 1, n);
    if (n - i < 6 || memcmp(s + i, "\"name\"", 6) != 0) return NULL;
    i = skip_ws(s, i + 6, n);
    if (i >= n || s[i] != ':') return NULL;
    i = skip_ws(s, i + 1, n);
    if (i >= n || s[i] != '"') return NULL;
    size_t end = i + 1;
    while (end < n && s[end] != '"') end += s[end] == '\\' ? 2 : 1;
    if (end >= n) return NULL; /* the name is cut short */
    char msg[8];
    json_t *name = rc_json_parse(s + i, end + 1 - i, 2, msg, sizeof msg);
    if (!rc_json_is_text(name)) {
        json_decref(name);
        return NULL;
    }
    *args_at = n;
    i = skip_ws(s, end + 1, n);
    if (i < n && s[i] == ',') {
        i = skip_ws(s, i + 1, n);
        static const char *const keys[] = {"\"arguments\"", "\"parameters\""};
        for (size_t k = 0; k < 2; k++) {
            size_t m = strlen(keys[k]);
            if (n - i < m || memcmp(s + i, keys[k], m) != 0) continue;
            size_t j = skip_ws(s, i + m, n);
            if (j < n && s[j] == ':') *args_at = skip_ws(s, j + 1, n);
        }
    }
    return name;
}

/* A call block that is no whole call but opens with its name: a call with the
 * arguments as written, as the reference returns a DSML call the output ended
 * inside — the name and the arguments so far, no markup; such a call is not
 * ended (the writers close it at the finish). `closed`: the block ended with
 * </tool_call> (the prompt wrote its head): the arguments are trimmed and,
 * when they are JSON only without it, the object's closing brace left out. Returns 0 when the block
 * has no name (it is dropped, as the reference drops a DSML invoke cut before its name). */
static int hermes_partial_call(rc_parser *p, rc_pieces *out, const char *s, size_t n, int closed)
{
    size_t at;
    json_t *name = hermes_head(s, n, &at);
    if (!name) return 0;
    p->n_calls++;
    add_piece(p, out, RC_PIECE_CALL_BEGIN, p->push, p->n_calls - 1, json_string_value(name),
              json_string_length(name));
    json_decref(name);
    size_t len = n - at;
    const char *a = s + at;
    if (closed) {
        while (len && (a[len - 1] == ' ' || a[len - 1] == '\n' || a[len - 1] == '\t' ||
                       a[len - 1] == '\r'))
            len--;
        char msg[8];
        json_t *v = rc_json_parse(a, len, 64, msg, sizeof msg);
        if (!v && len && a[len - 1] == '}' &&
            (v = rc_json_parse(a, len - 1, 64, msg, sizeof msg)) != NULL)
            len--;
        json_decref(v);
    }
    if (len) add_piece(p, out, RC_PIECE_ARGS_VALUE, p->push, p->n_calls - 1, a, len);
    if (closed) add_piece(p, out, RC_PIECE_CALL_END, p->push, p->n_calls - 1, "", 0);
    return 1;
}

static void hermes_call(rc_parser *p, rc_pieces *out, const char *s, size_t n, int closed)
{
    json_t *name, *args, *root = hermes_parse(s, n, &name, &args);
    /* the output ended inside the block (a call cut short), or the block the
     * prompt opened with a named function's head is no whole call: never
     * markup or prompt text in the answer */
    if (!root && (!closed || (p->h_prompt_open && p->reply->call_prefix))) {
        hermes_partial_call(p, out, s, n, closed);
        return;
    }
    if (!root) {
        /* not a call: the block is answer text */
        rc_buf raw = {0};
        if (!p->h_prompt_open) rc_buf_adds(&raw, H_CALL_BEGIN);
        rc_buf_add(&raw, s, n);
        if (closed) rc_buf_adds(&raw, H_CALL_END);
        if (raw.oom) out->oom = 1;
        if (raw.s) add_piece(p, out, RC_PIECE_CONTENT, p->push, -1, raw.s, raw.len);
        free(raw.s);
        return;
    }
    p->n_calls++;
    add_piece(p, out, RC_PIECE_CALL_BEGIN, p->push, p->n_calls - 1, json_string_value(name),
              json_string_length(name));
    rc_buf b = {0};
    if (!args) {
        rc_buf_adds(&b, "{}");
    } else if (json_is_object(args)) {
        rc_pyjson(&b, args, RC_FLOAT_V4);
    } else {
        rc_buf_add(&b, json_string_value(args), json_string_length(args));
    }
    if (b.oom) out->oom = 1;
    if (b.s) add_piece(p, out, RC_PIECE_ARGS_VALUE, p->push, p->n_calls - 1, b.s, b.len);
    free(b.s);
    add_piece(p, out, RC_PIECE_CALL_END, p->push, p->n_calls - 1, "", 0);
    json_decref(root);
}

static void process_tools_hermes(rc_parser *p, rc_pieces *out)
{
    while (p->state == P_TOOLS && p->buf.len > 0) {
        if (!p->h_body) {
            /* between blocks: whitespace, then another <tool_call>, or the end of
             * the calls — after a call, text that is none ends the output (the
             * model should have ended its turn); after blocks that were not
             * calls, it is answer text again */
            size_t ws = 0;
            while (ws < p->buf.len && (p->buf.s[ws] == ' ' || p->buf.s[ws] == '\n' ||
                                       p->buf.s[ws] == '\t' || p->buf.s[ws] == '\r'))
                ws++;
            if (ws == p->buf.len) return; /* held: what follows decides */
            size_t m = strlen(H_CALL_BEGIN), left = p->buf.len - ws, k = left < m ? left : m;
            if (memcmp(p->buf.s + ws, H_CALL_BEGIN, k) == 0) {
                if (k < m) return; /* perhaps the next call */
                consume(p, ws + m);
                p->h_body = 1;
                continue;
            }
            if (p->n_calls > 0) {
                p->h_done = 1;
                consume(p, p->buf.len);
            } else {
                p->state = P_CONTENT;
            }
            return;
        }
        /* only the new bytes are searched (and the tag's length before them):
         * a block that never closes costs linear time */
        size_t from = p->h_scanned;
        const char *end = find(p->buf.s + from, p->buf.len - from, H_CALL_END);
        if (!end) {
            size_t keep = strlen(H_CALL_END) - 1;
            p->h_scanned = p->buf.len > keep ? p->buf.len - keep : 0;
            return;
        }
        p->h_scanned = 0;
        hermes_call(p, out, p->buf.s, (size_t)(end - p->buf.s), 1);
        p->h_prompt_open = 0;
        consume(p, (size_t)(end - p->buf.s) + strlen(H_CALL_END));
        p->h_body = 0;
    }
}

static int run(rc_parser *p, rc_pieces *out, int final)
{
    for (;;) {
        pstate before = p->state;
        if (p->state == P_REASONING || p->state == P_CONTENT) process_text(p, out, final);
        if (p->state == P_TOOLS) {
            if (p->reply->tool_format == RC_TOOLS_V3)
                process_tools_v3(p, out);
            else if (p->reply->tool_format == RC_TOOLS_HERMES)
                process_tools_hermes(p, out);
            else
                process_tools(p, out);
        }
        if (p->state == P_DONE) consume(p, p->buf.len);
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
            if (pre && held_add(&p->buf, &p->push_of, &p->push_cap, 0, pre, strlen(pre)) != 0) {
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
    if (held_add(&p->buf, &p->push_of, &p->push_cap, p->push, text, len) != 0) return -1;
    if (len == 0 && (p->state == P_REASONING || p->state == P_CONTENT)) {
        /* an empty push is an empty piece, in its place among the held text */
        if (held_reserve_empty(&p->empties, p->n_empties, &p->cap_empties) != 0) return -1;
        if (!(p->strip_consume && p->buf.len == 0))
            p->empties[p->n_empties++] = (struct empty_push){p->buf.len, p->push};
        if (p->buf.len == 0)
            emit_empties(p, out, p->state == P_REASONING ? RC_PIECE_REASONING : RC_PIECE_CONTENT, 0,
                         0);
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
        json_run(p, out, 1);
        r = out->oom ? -1 : r;
    }
    if (p->state == P_TOOLS && p->t == T_VALUE && p->buf.len &&
        !find(p->buf.s, p->buf.len, CLOSER)) {
        if (p->quote_pending) emit_struct(p, out, RC_PIECE_ARGS_QUOTE, "\"");
        p->quote_pending = 0;
        /* a value's held end (a possible closing tag's start) is value text */
        emit_value(p, out, p->buf.len);
        r = out->oom ? -1 : r;
    }
    if (p->state == P_TOOLS && p->reply->tool_format == RC_TOOLS_HERMES && p->h_body &&
        p->buf.len) {
        /* a block the output ended inside: a call when its JSON is whole, a
         * closing tag cut short after it ignored */
        size_t n = p->buf.len, cut = n;
        for (size_t k = strlen(H_CALL_END) - 1; k > 0 && cut == n; k--)
            if (n >= k && memcmp(p->buf.s + n - k, H_CALL_END, k) == 0) cut = n - k;
        json_t *name, *args, *whole = cut < n ? hermes_parse(p->buf.s, cut, &name, &args) : NULL;
        json_decref(whole);
        hermes_call(p, out, p->buf.s, whole ? cut : n, 0);
        r = out->oom ? -1 : r;
    }
    if (p->state == P_TOOLS) consume(p, p->buf.len);
    return r;
}
