/* The stream parser's reasoning and answer text: the markers that end them
 * (</think>, the tool-call region's opener, a stray </think> in the answer, V3's
 * end-of-sentence text, stop sequences) matched as deepseek-recipe's matcher
 * matches them, with the '\n' runs a marker absorbs, leading newlines stripped
 * and empty pushes kept in their place (docs/stream-spec.md §3, §4, §6). */
#include <stdlib.h>
#include <string.h>

#include "recipe/stream_parser_impl.h"

/* Emit bytes [from, to) of the buffer as channel text, split where the push
 * changes, with leading-newline stripping and JSON mode applied. */
static void channel_piece(rc_parser *p, rc_pieces *out, rc_piece_class cls, uint32_t push,
                          const char *s, size_t n)
{
    if (cls == RC_PIECE_CONTENT && p->reply->parse_json_output)
        sp_json_feed(p, out, push, s, n);
    else
        sp_add_piece(p, out, cls, push, -1, s, n);
}

/* Empty pushes recorded at buffer offsets <= at become empty pieces, once the
 * leading newlines are behind. */
void sp_emit_empties(rc_parser *p, rc_pieces *out, rc_piece_class cls, size_t at, int text_follows)
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
        sp_emit_empties(p, out, cls, i, a < j);
        if (a < j) channel_piece(p, out, cls, p->push_of[i], p->buf.s + a, j - a);
        i = j;
    }
    sp_emit_empties(p, out, cls, to, 0);
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
    for (const char *hit = sp_find(s, n, lit); hit;
         hit = sp_find(hit + 1, n - (size_t)(hit + 1 - s), lit)) {
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
    jregions jr = sp_json_regions(p);
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
    jregions jr = sp_json_regions(p);
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
    if (p->reply->tool_format == RC_TOOLS_V3 && sp_ends_with_prefix_of(s, n, EOS)) {
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

void sp_text_process(rc_parser *p, rc_pieces *out, int final)
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
            if (have >= need && memcmp(p->buf.s + a, "<think>", need) == 0) sp_consume(p, a + need);
        }
        if (p->strip_consume) { /* the answer after </think>: its leading '\n's go first */
            size_t k = 0;
            while (k < p->buf.len && p->buf.s[k] == '\n') k++;
            for (size_t i = 0; k && !p->reply->parse_json_output && i < p->reply->n_stops; i++)
                if (strcmp(p->reply->stops[i], "\n") == 0) { /* the stop "\n" still matches */
                    p->stop = p->reply->stops[i];
                    p->state = P_DONE;
                    sp_consume(p, p->buf.len);
                    return;
                }
            sp_consume(p, k);
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
            sp_consume(p, upto);
            if (!final) sp_json_settle_fence(p, out);
            return;
        }
        emit_channel(p, out, cls, 0, start);
        p->ctx_len = 0;
        /* the DSML opener stays: it is the tool-call region's first tag */
        int keep_opener = kind == M_OPENER && p->reply->tool_format == RC_TOOLS_DSML;
        sp_consume(p, keep_opener ? end - strlen(OPENER) : end);
        switch ((mkind)kind) {
        case M_THINK_END:
            p->state = P_CONTENT;
            p->strip_consume = 1;
            p->barrier = 1;
            break;
        case M_OPENER: /* the opener stays in the buffer: it is the region's first tag */
            /* JSON mode: answer text the JSON stage still holds is decided now */
            if (p->state == P_CONTENT && p->reply->parse_json_output && p->jbuf.len)
                sp_json_run(p, out, 1);
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
                if (p->jbuf.len) sp_json_run(p, out, 1);
                p->jspace_push = 0;
            }
            p->strip_newlines = 0;
            p->strip_consume = 0;
            p->barrier = 1;
            break;
        case M_STOP:
            p->stop = stop;
            p->state = P_DONE;
            sp_consume(p, p->buf.len);
            break;
        case M_EOS: /* the end of the output, written out as text */
            p->state = P_DONE;
            sp_consume(p, p->buf.len);
            break;
        }
    }
}
