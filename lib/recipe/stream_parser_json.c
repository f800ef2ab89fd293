/* The stream parser's JSON output mode (docs/stream-spec.md §7): the answer
 * text goes through a second stage that finds the JSON payload — after a
 * "```json\n" or "```\n" fence, or from a bare bracket, up to "\n```" — and
 * writes the text around it as one " " per push, as deepseek-recipe does.
 * The stage holds its own undecided text (a possible fence or terminator). */
#include <stdlib.h>
#include <string.h>

#include "recipe/stream_parser_impl.h"

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
    sp_held_consume(&p->jbuf, p->jpush, p->jempties, p->n_jempties, n);
}

/* One " " for push `push` in the prefix or suffix phase. */
static void json_space(rc_parser *p, rc_pieces *out, uint32_t push)
{
    if (p->jspace_push == push) return;
    p->barrier = 1;
    sp_add_piece(p, out, RC_PIECE_CONTENT, push, -1, " ", 1);
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
    sp_add_piece(p, out, RC_PIECE_CONTENT, push, -1, "", 0);
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
        sp_add_piece(p, out, RC_PIECE_CONTENT, p->jpush[i], -1, p->jbuf.s + i, j - i);
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

void sp_json_run(rc_parser *p, rc_pieces *out, int final)
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
                sp_add_piece(p, out, RC_PIECE_CONTENT, p->jpush[0], -1, s, 1);
                p->barrier = 1;
                jconsume(p, 1);
                p->jbracket = 0;
                continue;
            }
            const char *end = sp_find(s, n, "\n```");
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
void sp_json_feed(rc_parser *p, rc_pieces *out, uint32_t push, const char *s, size_t n)
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
        if (sp_held_reserve_empty(&p->jempties, p->n_jempties, &p->cap_jempties) != 0) {
            out->oom = 1;
            return;
        }
        p->jempties[p->n_jempties++] = (struct empty_push){p->jbuf.len, push};
        return;
    }
    if (sp_held_add(&p->jbuf, &p->jpush, &p->jcap, push, s, n) != 0) {
        out->oom = 1;
        return;
    }
    sp_json_run(p, out, 0);
}

/* The answer's JSON phases in the parser's buffer (jregions, stream_parser_impl.h). */
jregions sp_json_regions(const rc_parser *p)
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
        const char *t = sp_find(s + r.p0, n - r.p0, "\n```");
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
    const char *t = c.oom ? NULL : sp_find(c.s, c.len, "\n```");
    if (t) {
        size_t e = (size_t)(t - c.s) + 4;
        r.e1 = e >= jl ? e - jl : 0;
        r.payload_end_seen = 1;
    }
    free(c.s);
    return r;
}

/* JSON mode: the JSON stage holds a possible fence (prefix phase) while the
 * text after it is held here; once that text shows no fence can start in the
 * held part, the held part is prefix text and is decided at once
 * (["``", "a<", "x"] gives " " for the first push with the second). */
void sp_json_settle_fence(rc_parser *p, rc_pieces *out)
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
