/* The general pre-tokenizer: HF tokenizers' Split pre-tokenizer (and ByteLevel's
 * GPT-2 split) run with Oniguruma, the regex engine HF tokenizers itself uses
 * (its `onig` feature; Debian's libonig 6.9.8 is the version it bundles), so the
 * pattern semantics — \p{..} classes, \s, lookahead at piece ends — are the
 * reference's own. Each step splits every piece the previous step produced,
 * searching only inside that piece, as pre_tokenizers.Sequence does. */
#include <oniguruma.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_classes.h"

struct tok_regex {
    regex_t *re;
};

/* Oniguruma's encoding tables are initialised once per process; the call is
 * idempotent but not thread-safe, so it runs under pthread_once. */
static pthread_once_t onig_once = PTHREAD_ONCE_INIT;
static int onig_ready;

/* The general categories whose code points come from unicode_classes.c rather
 * than from the system Oniguruma's own tables (Debian 12's is Unicode 14; the
 * reference's is newer): registered as user properties under these names, and
 * patterns are rewritten to use them (rewrite_classes). */
static const struct {
    char letter;
    const char *long_name;
    const char *property;
    const uint32_t *ranges;
} classes[] = {
    {'L', "Letter", "DiCatL", tok_unicode_L}, {'M', "Mark", "DiCatM", tok_unicode_M},
    {'N', "Number", "DiCatN", tok_unicode_N}, {'P', "Punctuation", "DiCatP", tok_unicode_P},
    {'S', "Symbol", "DiCatS", tok_unicode_S},
};

static void onig_setup(void)
{
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_ready = onig_initialize(encodings, 1) == ONIG_NORMAL;
    for (size_t i = 0; onig_ready && i < sizeof classes / sizeof classes[0]; i++)
        onig_ready = onig_unicode_define_user_property(
                         classes[i].property, (OnigCodePoint *)classes[i].ranges) == ONIG_NORMAL;
}

/* Rewrite \p{X}, \p{^X}, \P{X} and \pX for the general categories above into
 * their user properties; everything else, escapes included, is copied as it is.
 * Returns a new NUL-terminated pattern (*out_len bytes) or NULL. */
static char *rewrite_classes(const char *p, size_t len, size_t *out_len)
{
    char *out = malloc(len * 4 + 16);
    if (!out) return NULL;
    size_t n = 0, i = 0;
    while (i < len) {
        if (p[i] != '\\' || i + 1 >= len) {
            out[n++] = p[i++];
            continue;
        }
        char kind = p[i + 1];
        if (kind == 'p' || kind == 'P') {
            size_t j = i + 2, name_start, name_len;
            int braced = j < len && p[j] == '{', negate = kind == 'P';
            if (braced) {
                j++;
                if (j < len && p[j] == '^') negate = !negate, j++;
                name_start = j;
                while (j < len && p[j] != '}') j++;
                name_len = j - name_start;
                j++; /* past '}' */
            } else {
                name_start = j;
                name_len = j < len ? 1 : 0;
                j += name_len;
            }
            for (size_t c = 0; c < sizeof classes / sizeof classes[0] && j <= len; c++) {
                size_t ln = strlen(classes[c].long_name);
                if ((name_len == 1 && p[name_start] == classes[c].letter) ||
                    (name_len == ln && memcmp(p + name_start, classes[c].long_name, ln) == 0)) {
                    n += (size_t)sprintf(out + n, "\\%c{%s}", negate ? 'P' : 'p',
                                         classes[c].property);
                    i = j;
                    goto next;
                }
            }
        }
        out[n++] = p[i];
        out[n++] = p[i + 1];
        i += 2;
    next:;
    }
    out[n] = 0;
    *out_len = n;
    return out;
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
    size_t rewritten_len = 0;
    char *rewritten = literal ? NULL : rewrite_classes(pattern, len, &rewritten_len);
    if (rewritten) {
        pattern = rewritten;
        len = rewritten_len;
    }
    tok_regex *r = calloc(1, sizeof *r);
    if (!r || (!literal && !rewritten)) {
        free(r);
        free(escaped);
        free(rewritten);
        tok_fail(err, DI_ERR_OUT_OF_MEMORY, "out of memory compiling a split pattern");
        return NULL;
    }
    OnigErrorInfo einfo;
    int rc = onig_new(&r->re, (const OnigUChar *)pattern, (const OnigUChar *)pattern + len,
                      ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &einfo);
    free(escaped);
    free(rewritten);
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
        if (r < 0) return -2; /* the regex engine gave up (e.g. its retry limit) */
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
        for (size_t a = first, b = out->n; b > a + 1; a++, b--) {
            tok_span t = out->v[a];
            out->v[a] = out->v[b - 1];
            out->v[b - 1] = t;
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
            int fm = find_matches(step->regex, region, text, cur.v[p].start,
                                  cur.v[p].start + cur.v[p].len, &seg);
            if (fm) {
                rc = fm;
                goto done;
            }
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
