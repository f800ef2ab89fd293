/* The stream parser's V3 / V3.1 / R1 tool-call tokens.
 *
 * deepseek-recipe defines no parser for these formats; this one follows the chat
 * templates that teach them (docs/stream.md, "Chat templates"):
 *   V3, R1:  <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
 *   V3.1:    <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>
 * inside <｜tool▁calls▁begin｜> … <｜tool▁calls▁end｜>. ARGS is streamed as it
 * comes (it is already JSON); text between calls is skipped. */
#include <string.h>

#include "recipe/stream_parser_impl.h"

/* Consume junk up to `lit`'s first possible start; 1 when `lit` is at the start. */
static int skip_to(rc_parser *p, const char *lit, const char *alt)
{
    const char *hit = sp_find(p->buf.s, p->buf.len, lit);
    const char *hit2 = alt ? sp_find(p->buf.s, p->buf.len, alt) : NULL;
    const char *h = hit && (!hit2 || hit < hit2) ? hit : hit2;
    if (h) {
        sp_consume(p, (size_t)(h - p->buf.s));
        return 1;
    }
    size_t keep = 0;
    for (size_t k = strlen(lit) - 1; k > 0 && !keep; k--)
        if (p->buf.len >= k &&
            (memcmp(p->buf.s + p->buf.len - k, lit, k) == 0 ||
             (alt && k < strlen(alt) && memcmp(p->buf.s + p->buf.len - k, alt, k) == 0)))
            keep = k;
    sp_consume(p, p->buf.len - keep);
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
    sp_add_piece(p, out, RC_PIECE_CALL_BEGIN, p->push, p->n_calls - 1, name, n);
}

void sp_v3_process(rc_parser *p, rc_pieces *out)
{
    while (p->state == P_TOOLS && p->buf.len > 0) {
        switch (p->v) {
        case V_REGION: {
            if (!skip_to(p, V3_CALL_BEGIN, V3_CALLS_END)) return;
            if (memcmp(p->buf.s, V3_CALLS_END, strlen(V3_CALLS_END)) == 0) {
                sp_stop_parsing(p);
                return;
            }
            sp_consume(p, strlen(V3_CALL_BEGIN));
            p->v = V_HEAD;
            break;
        }
        case V_HEAD: {
            const char *sep = sp_find(p->buf.s, p->buf.len, V3_SEP);
            if (!sep) return;
            const char *h = p->buf.s;
            size_t n = (size_t)(sep - h);
            trim(&h, &n);
            if (n == strlen("function") && memcmp(h, "function", n) == 0) {
                sp_consume(p, (size_t)(sep - p->buf.s) + strlen(V3_SEP));
                p->v = V_NAME;
            } else {
                begin_v3_call(p, out, p->buf.s, (size_t)(sep - p->buf.s));
                sp_consume(p, (size_t)(sep - p->buf.s) + strlen(V3_SEP));
                p->v_fenced = 0;
                p->v = V_ARGS;
            }
            break;
        }
        case V_NAME: {
            size_t nl = sp_span(p, '\n');
            const char *end = sp_find(p->buf.s, p->buf.len, V3_CALL_END);
            if (nl == (size_t)-1 && !end) return;
            size_t n =
                nl != (size_t)-1 && (!end || p->buf.s + nl < end) ? nl : (size_t)(end - p->buf.s);
            begin_v3_call(p, out, p->buf.s, n);
            sp_consume(p, n);
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
                sp_consume(p, m);
                matched = 1;
            }
            if (!matched && waiting) return;
            p->v = V_ARGS;
            break;
        }
        case V_ARGS: {
            const char *term = p->v_fenced ? "\n```" : V3_CALL_END;
            const char *hit = sp_find(p->buf.s, p->buf.len, term);
            if (p->v_fenced && !hit) { /* an unfenced end is accepted too */
                hit = sp_find(p->buf.s, p->buf.len, V3_CALL_END);
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
                sp_add_piece(p, out, RC_PIECE_ARGS_VALUE, p->push_of[i], p->n_calls - 1,
                             p->buf.s + i, j - i);
                i = j;
            }
            sp_consume(p, n);
            if (!hit) return;
            sp_consume(p, strlen(term));
            sp_add_piece(p, out, RC_PIECE_CALL_END, p->push, p->n_calls - 1, "", 0);
            p->v = strcmp(term, V3_CALL_END) == 0 ? V_REGION : V_AFTER_ARGS;
            break;
        }
        case V_AFTER_ARGS:
            if (!skip_to(p, V3_CALL_END, NULL)) return;
            sp_consume(p, strlen(V3_CALL_END));
            p->v = V_REGION;
            break;
        }
    }
}
