/* The stream parser's V4 DSML tool calls (docs/stream-spec.md §5): the region
 * that "<｜DSML｜tool_calls>" opens, its invokes and their parameters, streamed
 * as the arguments JSON is written — string="true" values JSON-escaped, the
 * others raw — as deepseek-recipe's StreamProcessor reads them. */
#include <stdlib.h>
#include <string.h>

#include "recipe/stream_parser_impl.h"

static void emit_key(rc_parser *p, rc_pieces *out, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && p->push_of[j] == p->push_of[i]) j++;
        sp_add_piece(p, out, RC_PIECE_ARGS_KEY, p->push_of[i], p->n_calls - 1, p->buf.s + i, j - i);
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
            sp_add_piece(p, out, RC_PIECE_ARGS_VALUE, p->push_of[i], p->n_calls - 1, p->buf.s + i,
                         j - i);
        } else {
            rc_buf esc = {0};
            rc_json_string(&esc, p->buf.s + i, j - i);
            if (esc.oom) {
                out->oom = 1;
            } else {
                rc_piece *pc = sp_add_piece(p, out, RC_PIECE_ARGS_VALUE, p->push_of[i],
                                            p->n_calls - 1, esc.s + 1, esc.len - 2);
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
    sp_add_piece(p, out, cls, p->push, p->n_calls - 1, s, strlen(s));
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
    sp_add_piece(p, out, RC_PIECE_CALL_END, p->push, p->n_calls - 1, "", 0);
}

/* The longest tail of the held text (shorter than the closer) that may still
 * become a tag: a prefix of the closer, or of the opener. */
static size_t tag_tail(const rc_parser *p, size_t n_open, size_t n_close)
{
    for (size_t k = n_close - 1; k > 0; k--)
        if (p->buf.len >= k && (memcmp(p->buf.s + p->buf.len - k, CLOSER, k) == 0 ||
                                (k < n_open && memcmp(p->buf.s + p->buf.len - k, OPENER, k) == 0)))
            return k;
    return 0;
}

void sp_dsml_process(rc_parser *p, rc_pieces *out)
{
    size_t n_open = strlen(OPENER), n_close = strlen(CLOSER);
    while (p->state == P_TOOLS && p->buf.len > 0) {
        switch (p->t) {
        case T_SKIP: {
            /* up to '>', unless a DSML tag begins first: that tag counts */
            size_t gt = sp_span(p, '>');
            const char *open = sp_find(p->buf.s, p->buf.len, OPENER);
            const char *close = sp_find(p->buf.s, p->buf.len, CLOSER);
            const char *tag = open && (!close || open < close) ? open : close;
            if (tag && (size_t)(tag - p->buf.s) < gt) {
                sp_consume(p, (size_t)(tag - p->buf.s));
                p->t = p->after;
                break;
            }
            if (gt == (size_t)-1) {
                sp_consume(p, p->buf.len - tag_tail(p, n_open, n_close));
                return;
            }
            sp_consume(p, gt + 1);
            p->t = p->after;
            break;
        }
        case T_REGION:
        case T_INVOKE: {
            int in_invoke = p->t == T_INVOKE;
            const char *open = sp_find(p->buf.s, p->buf.len, OPENER);
            const char *close = sp_find(p->buf.s, p->buf.len, CLOSER);
            const char *tag = open && (!close || open < close) ? open : close;
            if (!tag) { /* junk; keep what may still become a tag */
                sp_consume(p, p->buf.len - tag_tail(p, n_open, n_close));
                return;
            }
            sp_consume(p, (size_t)(tag - p->buf.s));
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
                            sp_stop_parsing(p);
                            return;
                        }
                        if (after < m && memcmp(p->buf.s + n_close, ends[e], after) == 0) wait = 1;
                    }
                    if (wait) return;
                    sp_consume(p, n_close);
                    break;
                }
                if (!closing_now(p, "invoke", 1)) return;
                close_invoke(p, out);
                sp_consume(p, n_close); /* the rest of the tag is junk: a tag in it counts */
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
                    sp_consume(p, n_open);
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
                    sp_consume(p, n_open + word + 6 /* " name=" */);
                    emit_struct(p, out, p->n_params ? RC_PIECE_ARGS_COMMA : RC_PIECE_ARGS_OPEN,
                                p->n_params ? ", " : "{");
                    p->n_params++;
                    p->t = T_KEY;
                    break;
                }
                /* anything else inside an invoke is junk */
                sp_consume(p, n_open);
                p->t = T_SKIP;
                p->after = T_INVOKE;
                break;
            }
            if (sp_find(w, word, OPENER)) {
                /* a tag word running into another tag: this one is junk, that one
                 * is read ("<｜DSML｜x\n<｜DSML｜parameter name=…" is no invoke) */
                p->first_tag = 0;
                sp_consume(p, n_open);
                p->t = T_SKIP;
                p->after = T_REGION;
                break;
            }
            if (p->first_tag && !(r > 0 && named)) {
                /* the opening tag: its word is not checked */
                p->first_tag = 0;
                sp_consume(p, n_open);
                p->t = T_SKIP;
                p->after = T_REGION;
                break;
            }
            p->first_tag = 0;
            if (is_param || word_is(w, word, "tool_calls", " calls")) {
                sp_consume(p, n_open); /* junk between invokes */
                p->t = T_SKIP;
                p->after = T_REGION;
                break;
            }
            if (r > 0 && named && !(word >= 6 && memcmp(w + word - 6, "invoke", 6) == 0)) {
                /* a named tag is an invoke only when its word ends in "invoke"
                 * ("xinvoke" is one, "foo" or "invokex" is junk), as the reference */
                sp_consume(p, n_open);
                p->t = T_SKIP;
                p->after = T_REGION;
                break;
            }
            if (r < 0 || !named) { /* an invoke without ' name=': parsing stops */
                sp_stop_parsing(p);
                return;
            }
            sp_consume(p, n_open + word + 6 /* " name=" */);
            p->t = T_NAME_QUOTE;
            break;
        }
        case T_NAME_QUOTE:
            if (p->buf.s[0] != '"') { /* name='…' or name=…: parsing stops */
                sp_stop_parsing(p);
                return;
            }
            sp_consume(p, 1);
            p->t = T_NAME;
            break;
        case T_NAME: {
            size_t q = sp_span(p, '"');
            if (q == (size_t)-1) return;
            p->n_calls++;
            p->n_params = 0;
            sp_add_piece(p, out, RC_PIECE_CALL_BEGIN, p->push, p->n_calls - 1, p->buf.s, q);
            sp_consume(p, q + 1);
            p->t = T_SKIP;
            p->after = T_INVOKE;
            break;
        }
        case T_KEY: {
            size_t sp = sp_span(p, ' ');
            if (sp == (size_t)-1) {
                emit_key(p, out, p->buf.len);
                sp_consume(p, p->buf.len);
                return;
            }
            emit_key(p, out, sp);
            sp_consume(p, sp);
            emit_struct(p, out, RC_PIECE_ARGS_COLON, ": ");
            p->t = T_STRING_ATTR;
            break;
        }
        case T_STRING_ATTR: {
            /* the first string="true"> or string="false"> ahead; what precedes it is
             * skipped */
            static const char t_attr[] = "string=\"true\">", f_attr[] = "string=\"false\">";
            const char *ht = sp_find(p->buf.s, p->buf.len, t_attr);
            const char *hf = sp_find(p->buf.s, p->buf.len, f_attr);
            const char *h = ht && (!hf || ht < hf) ? ht : hf;
            if (!h) {
                size_t keep = 0;
                for (size_t k = strlen(f_attr) - 1; k > 0 && !keep; k--)
                    if (p->buf.len >= k &&
                        (memcmp(p->buf.s + p->buf.len - k, f_attr, k) == 0 ||
                         (k < strlen(t_attr) && memcmp(p->buf.s + p->buf.len - k, t_attr, k) == 0)))
                        keep = k;
                sp_consume(p, p->buf.len - keep);
                return;
            }
            p->string_value = h == ht;
            /* the push that brought the 't' of "true" */
            uint32_t t_push = p->push_of[(size_t)(h - p->buf.s) + strlen("string=\"")];
            sp_consume(p, (size_t)(h - p->buf.s) + strlen(h == ht ? t_attr : f_attr));
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
            const char *hit = sp_find(p->buf.s, p->buf.len, CLOSER);
            if (hit) {
                size_t v = (size_t)(hit - p->buf.s);
                emit_value(p, out, v);
                sp_consume(p, v);
                if (!closing_now(p, "parameter", 0)) return;
                close_value(p, out);
                sp_consume(p, n_close); /* the rest of the tag is junk: a tag in it counts */
                p->t = T_INVOKE;
                break;
            }
            /* hold everything while the end may still be the closing tag's start */
            if (sp_ends_with_prefix_of(p->buf.s, p->buf.len, CLOSER)) return;
            emit_value(p, out, p->buf.len);
            sp_consume(p, p->buf.len);
            return;
        }
        }
    }
}

void sp_dsml_finish(rc_parser *p, rc_pieces *out)
{
    if (p->t != T_VALUE || !p->buf.len || sp_find(p->buf.s, p->buf.len, CLOSER)) return;
    if (p->quote_pending) emit_struct(p, out, RC_PIECE_ARGS_QUOTE, "\"");
    p->quote_pending = 0;
    /* a value's held end (a possible closing tag's start) is value text */
    emit_value(p, out, p->buf.len);
}
