/* The general pre-tokenizer: HF tokenizers' Split pre-tokenizer (and ByteLevel's
 * GPT-2 split) run with Oniguruma, the regex engine HF tokenizers itself uses
 * (its `onig` feature; Debian's libonig 6.9.8 is the version it bundles), so the
 * pattern semantics — \p{..} classes, \s, lookahead at piece ends — are the
 * reference's own. Each step splits every piece the previous step produced,
 * searching only inside that piece, as pre_tokenizers.Sequence does. */
#include <oniguruma.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

struct tok_regex {
    regex_t *re;
};

/* Oniguruma's encoding tables are initialised once per process; the call is
 * idempotent but not thread-safe, so it runs under pthread_once. */
static pthread_once_t onig_once = PTHREAD_ONCE_INIT;
static int onig_ready;

static void onig_setup(void)
{
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_ready = onig_initialize(encodings, 1) == ONIG_NORMAL;
}

tok_regex *tok_regex_compile(const char *pattern, size_t len, int literal, tok_error *err)
{
    pthread_once(&onig_once, onig_setup);
    if (!onig_ready) {
        tok_fail(err, DI_ERR_INTERNAL, "Oniguruma failed to initialise");
        return NULL;
    }
    char *escaped = NULL;
    if (literal) {
        /* A String pattern matches itself: escape every ASCII punctuation byte, as
         * HF escapes a SplitPattern::String before compiling it. */
        escaped = malloc(len * 2 + 1);
        if (!escaped) {
            tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory compiling a split pattern");
            return NULL;
        }
        size_t n = 0;
        for (size_t i = 0; i < len; i++) {
            unsigned char c = (unsigned char)pattern[i];
            if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                              (c >= 'A' && c <= 'Z') || c == '_'))
                escaped[n++] = '\\';
            escaped[n++] = (char)c;
        }
        pattern = escaped;
        len = n;
    }
    tok_regex *r = calloc(1, sizeof *r);
    if (!r) {
        free(escaped);
        tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory compiling a split pattern");
        return NULL;
    }
    OnigErrorInfo einfo;
    int rc = onig_new(&r->re, (const OnigUChar *)pattern, (const OnigUChar *)pattern + len,
                      ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &einfo);
    free(escaped);
    if (rc != ONIG_NORMAL) {
        OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, rc, &einfo);
        tok_fail(err, DI_ERR_MODEL_FORMAT, "pre_tokenizer pattern does not compile: %s",
                 (const char *)msg);
        free(r);
        return NULL;
    }
    return r;
}

void tok_regex_free(tok_regex *r)
{
    if (!r) return;
    onig_free(r->re);
    free(r);
}

/* One match or gap of a piece, as HF's Pattern::find_matches reports them. */
typedef struct segment {
    uint32_t start, end;
    int is_match;
} segment;

typedef struct segments {
    segment *v;
    size_t n, cap;
} segments;

static int seg_push(segments *s, uint32_t start, uint32_t end, int is_match)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        segment *v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (segment){start, end, is_match};
    return 0;
}

static size_t utf8_char_len(uint8_t b)
{
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* Matches and gaps of `re` inside text[start, end), covering it in order. An
 * empty match is skipped (the search resumes one character later), as the onig
 * crate's find_iter does. */
static int find_matches(const tok_regex *re, OnigRegion *region, const uint8_t *text,
                        uint32_t start, uint32_t end, segments *out)
{
    const OnigUChar *str = text + start, *stop = text + end;
    uint32_t prev = start, at = start;
    while (at <= end) {
        int r = onig_search(re->re, str, stop, text + at, stop, region, ONIG_OPTION_NONE);
        if (r == ONIG_MISMATCH) break;
        if (r < 0) return -1;
        uint32_t ms = start + (uint32_t)region->beg[0], me = start + (uint32_t)region->end[0];
        if (me == ms) {
            if (ms >= end) break;
            at = ms + (uint32_t)utf8_char_len(text[ms]);
            continue;
        }
        if (prev != ms && seg_push(out, prev, ms, 0)) return -1;
        if (seg_push(out, ms, me, 1)) return -1;
        prev = at = me;
    }
    if (prev != end && seg_push(out, prev, end, 0)) return -1;
    return 0;
}

/* Apply a SplitDelimiterBehavior to one piece's segments, appending the
 * resulting non-empty pieces. */
static int apply_behavior(tok_split_behavior behavior, int invert, segments *seg, tok_spans *out)
{
    if (invert)
        for (size_t i = 0; i < seg->n; i++) seg->v[i].is_match = !seg->v[i].is_match;
    size_t first = out->n;
    int previous_match = 0;
    switch (behavior) {
    case TOK_SPLIT_ISOLATED:
        for (size_t i = 0; i < seg->n; i++)
            if (tok_spans_push(out, seg->v[i].start, seg->v[i].end - seg->v[i].start)) return -1;
        break;
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < seg->n; i++)
            if (!seg->v[i].is_match &&
                tok_spans_push(out, seg->v[i].start, seg->v[i].end - seg->v[i].start))
                return -1;
        break;
    case TOK_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < seg->n; i++) {
            const segment *g = &seg->v[i];
            if (g->is_match && !previous_match && out->n > first) {
                tok_span *last = &out->v[out->n - 1];
                last->len = g->end - last->start;
            } else if (tok_spans_push(out, g->start, g->end - g->start)) {
                return -1;
            }
            previous_match = g->is_match;
        }
        break;
    case TOK_SPLIT_MERGED_WITH_NEXT:
        /* Walk backwards, merging a match into the piece that follows it. */
        for (size_t k = seg->n; k-- > 0;) {
            const segment *g = &seg->v[k];
            if (g->is_match && !previous_match && out->n > first) {
                tok_span *last = &out->v[out->n - 1];
                last->len += last->start - g->start;
                last->start = g->start;
            } else if (tok_spans_push(out, g->start, g->end - g->start)) {
                return -1;
            }
            previous_match = g->is_match;
        }
        for (size_t a = first, b = out->n - 1; a < b; a++, b--) {
            tok_span t = out->v[a];
            out->v[a] = out->v[b];
            out->v[b] = t;
        }
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < seg->n; i++) {
            const segment *g = &seg->v[i];
            if (g->is_match == previous_match && out->n > first) {
                tok_span *last = &out->v[out->n - 1];
                last->len = g->end - last->start;
            } else if (tok_spans_push(out, g->start, g->end - g->start)) {
                return -1;
            }
            previous_match = g->is_match;
        }
        break;
    }
    /* Empty pieces are dropped, as PreTokenizedString::split does. */
    size_t w = first;
    for (size_t r = first; r < out->n; r++)
        if (out->v[r].len) out->v[w++] = out->v[r];
    out->n = w;
    return 0;
}

const char tok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

int tok_pretokenize_general(const di_tokenizer_impl *tok, const uint8_t *text, size_t len,
                            tok_spans *out)
{
    int rc = -1;
    tok_spans cur = {0}, next = {0};
    segments seg = {0};
    OnigRegion *region = onig_region_new();
    if (!region || tok_spans_push(&cur, 0, (uint32_t)len) != 0) goto done;
    if (len == 0) cur.n = 0;
    for (size_t k = 0; k < tok->n_steps; k++) {
        const tok_split_step *step = &tok->steps[k];
        next.n = 0;
        for (size_t p = 0; p < cur.n; p++) {
            seg.n = 0;
            if (find_matches(step->regex, region, text, cur.v[p].start,
                             cur.v[p].start + cur.v[p].len, &seg))
                goto done;
            if (apply_behavior(step->behavior, step->invert, &seg, &next)) goto done;
        }
        tok_spans t = cur;
        cur = next;
        next = t;
    }
    for (size_t p = 0; p < cur.n; p++)
        if (tok_spans_push(out, cur.v[p].start, cur.v[p].len)) goto done;
    rc = 0;
done:
    if (region) onig_region_free(region, 1);
    free(cur.v);
    free(next.v);
    free(seg.v);
    return rc;
}
