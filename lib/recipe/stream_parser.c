/* The stream parser: generated text, one push at a time, split into reasoning,
 * answer and DSML tool-call pieces, with stop sequences — as deepseek-recipe
 * 0.2.0's StreamProcessor splits it (docs/stream.md).
 *
 * The unit of output is the push: text that cannot be decided yet (it may be the
 * start of a marker or of a stop sequence) is held with the pushes it came from,
 * and when it is decided each push's part becomes its own piece. Every byte in
 * the buffer carries the number of the push it came from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/stream.h"

typedef enum pstate { P_REASONING, P_CONTENT, P_TOOLS, P_DONE } pstate;

/* Positions inside the DSML tool-call block. */
typedef enum tstate {
    T_OPEN,         /* after "<｜DSML｜": the rest of the block's opening tag */
    T_BETWEEN,      /* between invokes */
    T_NAME,         /* inside invoke name="… */
    T_NAME_CLOSE,   /* expecting ">" after the name */
    T_INVOKE,       /* between parameters */
    T_KEY,          /* parameter name=: the key's opening quote */
    T_KEY_REST,     /* inside the key (copied) */
    T_AFTER_KEY,    /* after the key's closing quote */
    T_STRING_ATTR,  /* string="true|false"> */
    T_VALUE,        /* the value, up to "</｜DSML｜" */
    T_VALUE_CLOSE,  /* "parameter>" */
    T_INVOKE_CLOSE, /* "invoke>" */
    T_DONE
} tstate;

#define DSML "｜DSML｜"

struct rc_parser {
    const rc_reply *reply;
    pstate state;
    int strip_newlines; /* drop leading '\n' of the next text */
    /* the undecided input */
    rc_buf buf;
    uint32_t *push_of; /* push number of each byte of buf */
    size_t push_cap;
    uint32_t push;
    /* tool calls */
    tstate t;
    const char *tool_words[3]; /* "tool_calls", "invoke", "parameter" (V4) */
    int n_calls;
    int n_params;     /* of the current call */
    int string_value; /* the current value is a JSON string */
    const char *stop;
    int oom;
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
 * has the same class, push and call. */
static rc_piece *add_piece(rc_pieces *out, rc_piece_class cls, uint32_t push, int call,
                           const char *s, size_t n)
{
    if (out->oom) return NULL;
    if (out->n > 0) {
        rc_piece *last = &out->v[out->n - 1];
        if (last->cls == cls && last->push == push && last->call == call &&
            cls != RC_PIECE_CALL_BEGIN && cls != RC_PIECE_CALL_END) {
            rc_buf_add(&last->text, s, n);
            if (last->text.oom) out->oom = 1;
            return last;
        }
    }
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
    return pc;
}

/* Emit bytes [from, to) of the buffer as class cls, split where the push changes. */
static void emit_range(rc_parser *p, rc_pieces *out, rc_piece_class cls, size_t from, size_t to)
{
    size_t i = from;
    while (i < to) {
        size_t j = i + 1;
        while (j < to && p->push_of[j] == p->push_of[i]) j++;
        add_piece(out, cls, p->push_of[i], cls >= RC_PIECE_CALL_BEGIN ? p->n_calls - 1 : -1,
                  p->buf.s + i, j - i);
        i = j;
    }
}

/* Emit a value range JSON-escaped (string values) or raw, split by push. */
static void emit_value(rc_parser *p, rc_pieces *out, size_t from, size_t to)
{
    if (!p->string_value) {
        emit_range(p, out, RC_PIECE_ARGS_VALUE, from, to);
        return;
    }
    size_t i = from;
    while (i < to) {
        size_t j = i + 1;
        while (j < to && p->push_of[j] == p->push_of[i]) j++;
        rc_buf esc = {0};
        rc_json_string(&esc, p->buf.s + i, j - i);
        if (esc.oom) {
            out->oom = 1;
        } else if (esc.len >= 2) {
            rc_piece *pc = add_piece(out, RC_PIECE_ARGS_VALUE, p->push_of[i], p->n_calls - 1,
                                     esc.s + 1, esc.len - 2);
            if (pc) {
                rc_buf_add(&pc->raw, p->buf.s + i, j - i);
                if (pc->raw.oom) out->oom = 1;
            }
        }
        free(esc.s);
        i = j;
    }
}

/* A synthetic piece (structure the parser writes) attributed to the current push. */
static void emit_text(rc_parser *p, rc_pieces *out, rc_piece_class cls, const char *s)
{
    add_piece(out, cls, p->push, p->n_calls - 1, s, strlen(s));
}

/* Drop the first n bytes of the buffer. */
static void consume(rc_parser *p, size_t n)
{
    memmove(p->buf.s, p->buf.s + n, p->buf.len - n);
    memmove(p->push_of, p->push_of + n, (p->buf.len - n) * sizeof *p->push_of);
    p->buf.len -= n;
    if (p->buf.s) p->buf.s[p->buf.len] = '\0';
}

rc_parser *rc_parser_new(const rc_reply *reply)
{
    rc_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->reply = reply;
    if (reply->model == RC_MODEL_V41_FLASH) {
        p->tool_words[0] = " calls";
        p->tool_words[1] = " invoke";
        p->tool_words[2] = " parameter";
    } else {
        p->tool_words[0] = "tool_calls";
        p->tool_words[1] = "invoke";
        p->tool_words[2] = "parameter";
    }
    if (reply->starts_in_tool_calls) {
        p->state = P_TOOLS;
        p->t = T_BETWEEN;
    } else if (reply->stage == RC_STAGE_REASONING_START) {
        p->state = P_REASONING;
        p->strip_newlines = 1;
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
    free(p);
}

int rc_parser_stopped(const rc_parser *p)
{
    return p->stop != NULL;
}

const char *rc_parser_stop_sequence(const rc_parser *p)
{
    return p->stop;
}

int rc_parser_n_calls(const rc_parser *p)
{
    return p->n_calls;
}

/* ---- text states ------------------------------------------------------- */

typedef struct marker {
    const char *s;
    size_t n;
    int absorb_newlines; /* '\n's right before the marker belong to it */
    int kind;            /* 0 end of reasoning, 1 tool calls, 2 stray </think>, 3 stop */
} marker;

static size_t text_markers(const rc_parser *p, marker *m, size_t cap)
{
    size_t n = 0;
    if (p->state == P_REASONING) {
        m[n++] = (marker){"</think>", 8, 1, 0};
    } else {
        if (p->reply->parse_tool_calls) m[n++] = (marker){"<" DSML, strlen("<" DSML), 1, 1};
        m[n++] = (marker){"</think>", 8, 0, 2};
    }
    for (size_t i = 0; i < p->reply->n_stops && n < cap; i++) {
        const char *s = p->reply->stops[i];
        if (s[0]) m[n++] = (marker){s, strlen(s), 0, 3};
    }
    return n;
}

/* Could the buffer's end still grow into marker m? */
static int held_by(const char *b, size_t len, const marker *m)
{
    size_t start = len > m->n - 1 ? len - (m->n - 1) : 0;
    for (size_t i = start; i <= len; i++) {
        size_t k = len - i; /* b[i..len) is a prefix of m? (k == 0: the empty prefix) */
        if (k > 0 && memcmp(b + i, m->s, k) != 0) continue;
        if (k > 0) return 1;
        if (m->absorb_newlines && i > 0 && b[i - 1] == '\n') return 1;
    }
    /* a partial marker after '\n's */
    if (m->absorb_newlines) {
        for (size_t i = start; i < len; i++) {
            size_t k = len - i;
            if (memcmp(b + i, m->s, k) == 0 && i > 0 && b[i - 1] == '\n') return 1;
        }
    }
    return 0;
}

static int process_text(rc_parser *p, rc_pieces *out, int final)
{
    marker m[64];
    while (p->state == P_REASONING || p->state == P_CONTENT) {
        if (p->strip_newlines) {
            size_t k = 0;
            while (k < p->buf.len && p->buf.s[k] == '\n') k++;
            consume(p, k);
            if (p->buf.len == 0) return 0;
            p->strip_newlines = 0;
        }
        rc_piece_class cls = p->state == P_REASONING ? RC_PIECE_REASONING : RC_PIECE_CONTENT;
        size_t n_m = text_markers(p, m, 64);
        /* the earliest marker */
        size_t best = (size_t)-1, best_end = 0, best_i = 0;
        int best_kind = -1;
        for (size_t i = 0; i < n_m; i++) {
            const char *hit = p->buf.len >= m[i].n ? strstr(p->buf.s, m[i].s) : NULL;
            if (!hit) continue;
            size_t at = (size_t)(hit - p->buf.s), start = at;
            if (m[i].absorb_newlines)
                while (start > 0 && p->buf.s[start - 1] == '\n') start--;
            if (start < best) {
                best = start;
                best_end = at + m[i].n;
                best_kind = m[i].kind;
                best_i = i;
            }
        }
        if (best_kind >= 0) {
            emit_range(p, out, cls, 0, best);
            consume(p, best_end);
            if (best_kind == 0) {
                p->state = P_CONTENT;
                p->strip_newlines = 1;
            } else if (best_kind == 1) {
                p->state = P_TOOLS;
                p->t = T_OPEN;
            } else if (best_kind == 3) {
                p->stop = m[best_i].s;
                p->state = P_DONE;
            }
            continue;
        }
        if (!final) {
            for (size_t i = 0; i < n_m; i++)
                if (held_by(p->buf.s ? p->buf.s : "", p->buf.len, &m[i])) return 0;
        }
        emit_range(p, out, cls, 0, p->buf.len);
        consume(p, p->buf.len);
        return 0;
    }
    return 0;
}

/* ---- the DSML tool-call block ------------------------------------------ */

/* Match literal `lit` at the buffer's start: 1 matched, 0 need more, -1 mismatch. */
static int expect(const rc_parser *p, const char *lit)
{
    size_t n = strlen(lit), k = p->buf.len < n ? p->buf.len : n;
    if (memcmp(p->buf.s, lit, k) != 0) return -1;
    return k == n ? 1 : 0;
}

static void skip_space(rc_parser *p)
{
    size_t k = 0;
    while (k < p->buf.len && (p->buf.s[k] == ' ' || p->buf.s[k] == '\n' || p->buf.s[k] == '\t' ||
                              p->buf.s[k] == '\r'))
        k++;
    consume(p, k);
}

static void tag(char *dst, size_t cap, const char *pre, const char *word, const char *post)
{
    snprintf(dst, cap, "%s" DSML "%s%s", pre, word, post);
}

static void malformed(rc_parser *p)
{
    p->t = T_DONE;
    p->state = P_DONE;
    consume(p, p->buf.len);
}

/* At "</｜DSML｜" (the buffer's start), a closing tag for `word`: 1 — the buffer
 * ends right after "</｜DSML｜" (decided: the tag's name is read later, state
 * T_*_CLOSE; also when the opener began in an earlier push); 2 — the whole tag "</｜DSML｜word>" is
 * there (consumed); 0 — a proper prefix of the name follows: wait; -1 — something else follows. The
 * reference decides the same way: a lone "</｜DSML｜" closes at once, a partial
 * name waits for the whole tag. */
static int close_tag(rc_parser *p, const char *word)
{
    size_t n_open = strlen("</" DSML);
    /* decided at once when nothing follows, or when the opener was completed by
     * this push after being held from an earlier one */
    if (p->buf.len == n_open || p->push_of[0] != p->push) {
        consume(p, n_open);
        return 1;
    }
    char lit[64];
    snprintf(lit, sizeof lit, "%s>", word);
    size_t n = strlen(lit), have = p->buf.len - n_open;
    size_t k = have < n ? have : n;
    if (memcmp(p->buf.s + n_open, lit, k) != 0) return -1;
    if (have < n) return 0;
    consume(p, n_open + n);
    return 2;
}

static int process_tools(rc_parser *p, rc_pieces *out)
{
    char lit[96];
    for (;;) {
        if (p->state != P_TOOLS || p->buf.len == 0) return 0;
        int r;
        switch (p->t) {
        case T_OPEN:
            snprintf(lit, sizeof lit, "%s>", p->tool_words[0]);
            r = expect(p, lit);
            if (r == 0) return 0;
            if (r < 0) {
                malformed(p);
                return 0;
            }
            consume(p, strlen(lit));
            p->t = T_BETWEEN;
            break;
        case T_BETWEEN: {
            skip_space(p);
            if (p->buf.len == 0) return 0;
            tag(lit, sizeof lit, "<", p->tool_words[1], " name=\"");
            r = expect(p, lit);
            if (r > 0) {
                consume(p, strlen(lit));
                p->t = T_NAME;
                break;
            }
            char close[96];
            tag(close, sizeof close, "</", p->tool_words[0], ">");
            int rc = expect(p, close);
            if (rc > 0) {
                consume(p, strlen(close));
                p->t = T_DONE;
                p->state = P_DONE;
                consume(p, p->buf.len);
                return 0;
            }
            if (r == 0 || rc == 0) return 0;
            malformed(p);
            return 0;
        }
        case T_NAME: {
            char *q = memchr(p->buf.s, '"', p->buf.len);
            if (!q) return 0;
            size_t n = (size_t)(q - p->buf.s);
            p->n_calls++;
            p->n_params = 0;
            add_piece(out, RC_PIECE_CALL_BEGIN, p->push, p->n_calls - 1, p->buf.s, n);
            consume(p, n + 1);
            p->t = T_NAME_CLOSE;
            break;
        }
        case T_NAME_CLOSE:
            if (p->buf.s[0] != '>') {
                malformed(p);
                return 0;
            }
            consume(p, 1);
            p->t = T_INVOKE;
            break;
        case T_INVOKE: {
            skip_space(p);
            if (p->buf.len == 0) return 0;
            tag(lit, sizeof lit, "<", p->tool_words[2], " name=");
            r = expect(p, lit);
            if (r > 0) {
                consume(p, strlen(lit));
                emit_text(p, out, p->n_params ? RC_PIECE_ARGS_COMMA : RC_PIECE_ARGS_OPEN,
                          p->n_params ? ", " : "{");
                p->n_params++;
                p->t = T_KEY;
                break;
            }
            int rc = expect(p, "</" DSML);
            if (rc > 0) {
                r = close_tag(p, p->tool_words[1]);
                if (r == 0) return 0;
                if (r < 0) {
                    malformed(p);
                    return 0;
                }
                emit_text(p, out, RC_PIECE_ARGS_CLOSE, p->n_params ? "}" : "{}");
                if (r == 2) {
                    add_piece(out, RC_PIECE_CALL_END, p->push, p->n_calls - 1, "", 0);
                    p->t = T_BETWEEN;
                } else {
                    p->t = T_INVOKE_CLOSE;
                }
                break;
            }
            if (r == 0 || rc == 0) return 0;
            malformed(p);
            return 0;
        }
        case T_KEY: {
            /* the opening quote, the name, the closing quote — copied */
            if (p->buf.s[0] != '"') {
                malformed(p);
                return 0;
            }
            char *q = p->buf.len > 1 ? memchr(p->buf.s + 1, '"', p->buf.len - 1) : NULL;
            if (!q) {
                emit_range(p, out, RC_PIECE_ARGS_KEY, 0, p->buf.len);
                consume(p, p->buf.len);
                p->t = T_KEY_REST;
                return 0;
            }
            size_t n = (size_t)(q - p->buf.s) + 1;
            emit_range(p, out, RC_PIECE_ARGS_KEY, 0, n);
            consume(p, n);
            p->t = T_AFTER_KEY;
            break;
        }
        case T_AFTER_KEY:
            if (p->buf.s[0] != ' ') {
                malformed(p);
                return 0;
            }
            emit_text(p, out, RC_PIECE_ARGS_COLON, ": ");
            consume(p, 1);
            p->t = T_STRING_ATTR;
            break;
        case T_STRING_ATTR: {
            int rt = expect(p, "string=\"true\">"), rf = expect(p, "string=\"false\">");
            if (rt > 0 || rf > 0) {
                p->string_value = rt > 0;
                consume(p, rt > 0 ? strlen("string=\"true\">") : strlen("string=\"false\">"));
                if (p->string_value) emit_text(p, out, RC_PIECE_ARGS_QUOTE, "\"");
                p->t = T_VALUE;
                break;
            }
            if (rt == 0 || rf == 0) return 0;
            malformed(p);
            return 0;
        }
        case T_VALUE: {
            const char *end = "</" DSML;
            size_t n_end = strlen(end);
            char *hit = strstr(p->buf.s, end);
            if (hit) {
                size_t n = (size_t)(hit - p->buf.s);
                emit_value(p, out, 0, n);
                consume(p, n);
                r = close_tag(p, p->tool_words[2]);
                if (r == 0) return 0;
                if (r < 0) {
                    malformed(p);
                    return 0;
                }
                if (p->string_value) emit_text(p, out, RC_PIECE_ARGS_UNQUOTE, "\"");
                p->t = r == 2 ? T_INVOKE : T_VALUE_CLOSE;
                break;
            }
            /* hold everything while the end may still be the closing tag's start */
            for (size_t k = n_end - 1; k > 0; k--)
                if (p->buf.len >= k && memcmp(p->buf.s + p->buf.len - k, end, k) == 0) return 0;
            emit_value(p, out, 0, p->buf.len);
            consume(p, p->buf.len);
            return 0;
        }
        case T_VALUE_CLOSE:
            snprintf(lit, sizeof lit, "%s>", p->tool_words[2]);
            r = expect(p, lit);
            if (r == 0) return 0;
            if (r < 0) {
                malformed(p);
                return 0;
            }
            consume(p, strlen(lit));
            p->t = T_INVOKE;
            break;
        case T_INVOKE_CLOSE:
            snprintf(lit, sizeof lit, "%s>", p->tool_words[1]);
            r = expect(p, lit);
            if (r == 0) return 0;
            if (r < 0) {
                malformed(p);
                return 0;
            }
            consume(p, strlen(lit));
            add_piece(out, RC_PIECE_CALL_END, p->push, p->n_calls - 1, "", 0);
            p->t = T_BETWEEN;
            break;
        case T_DONE: consume(p, p->buf.len); return 0;
        case T_KEY_REST: {
            char *q = memchr(p->buf.s, '"', p->buf.len);
            if (!q) {
                emit_range(p, out, RC_PIECE_ARGS_KEY, 0, p->buf.len);
                consume(p, p->buf.len);
                return 0;
            }
            size_t n = (size_t)(q - p->buf.s) + 1;
            emit_range(p, out, RC_PIECE_ARGS_KEY, 0, n);
            consume(p, n);
            p->t = T_AFTER_KEY;
            break;
        }
        }
    }
}

static int run(rc_parser *p, rc_pieces *out, int final)
{
    for (;;) {
        pstate before = p->state;
        if (p->state == P_REASONING || p->state == P_CONTENT) process_text(p, out, final);
        if (p->state == P_TOOLS) process_tools(p, out);
        if (p->state == P_DONE) consume(p, p->buf.len);
        if (p->state == before) break;
    }
    return out->oom || p->oom ? -1 : 0;
}

int rc_parser_push(rc_parser *p, const char *text, size_t len, rc_pieces *out)
{
    if (p->state == P_DONE) return 0;
    p->push++;
    if (p->buf.len + len + 1 > p->push_cap) {
        size_t cap = p->push_cap ? p->push_cap : 64;
        while (cap < p->buf.len + len + 1) cap *= 2;
        uint32_t *v = realloc(p->push_of, cap * sizeof *v);
        if (!v) return -1;
        p->push_of = v;
        p->push_cap = cap;
    }
    for (size_t i = 0; i < len; i++) p->push_of[p->buf.len + i] = p->push;
    rc_buf_add(&p->buf, text, len);
    if (p->buf.oom) return -1;
    return run(p, out, 0);
}

int rc_parser_finish(rc_parser *p, rc_pieces *out)
{
    int r = run(p, out, 1);
    if (p->state == P_TOOLS) consume(p, p->buf.len);
    return r;
}
