/* Hand-written pre-tokenizers for the two pipelines deepinfer runs most: DeepSeek
 * V3/V4 (three Split steps: \p{N}{1,3}, a CJK range, then the main pattern) and
 * Qwen2 (one Split step). Each reproduces, alternative by alternative, what
 * Oniguruma's leftmost-first backtracking search does with those exact
 * patterns, and the Isolated split around the matches; the general path
 * (pretokenize.c) is the reference it is tested against (test_tokenizer_fast,
 * fuzz_pretokenize).
 *
 * Character classes come from unicode_classes.c — the Unicode version of the
 * reference's regex engine, which the general path registers with Oniguruma too
 * — expanded once per process into a 1.1 MB table. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_classes.h"

enum {
    CL = 1,  /* \p{L} */
    CM = 2,  /* \p{M} */
    CN = 4,  /* \p{N} */
    CP = 8,  /* \p{P} */
    CS = 16, /* \p{S} */
    CW = 32, /* \s */
};

#define N_CODE_POINTS 0x110000
static uint8_t *class_table;
static pthread_once_t class_once = PTHREAD_ONCE_INIT;

static void mark_ranges(const uint32_t *ranges, uint8_t bit)
{
    for (uint32_t i = 0; i < ranges[0]; i++)
        for (uint32_t c = ranges[1 + 2 * i]; c <= ranges[2 + 2 * i]; c++) class_table[c] |= bit;
}

static void build_class_table(void)
{
    /* The White_Space property (\s of Oniguruma's Unicode encodings and of HF
     * tokenizers), unchanged since Unicode 6.3. */
    static const uint32_t white_space[] = {10,     0x09,   0x0D,   0x20,   0x20,   0x85,   0x85,
                                           0xA0,   0xA0,   0x1680, 0x1680, 0x2000, 0x200A, 0x2028,
                                           0x2029, 0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000};
    class_table = calloc(N_CODE_POINTS, 1);
    if (!class_table) return;
    mark_ranges(tok_unicode_L, CL);
    mark_ranges(tok_unicode_M, CM);
    mark_ranges(tok_unicode_N, CN);
    mark_ranges(tok_unicode_P, CP);
    mark_ranges(tok_unicode_S, CS);
    mark_ranges(white_space, CW);
}

/* The text is valid UTF-8 (checked on entry to encode). */
static inline uint32_t decode_at(const uint8_t *s, size_t i, size_t *next)
{
    uint8_t b = s[i];
    if (b < 0x80) {
        *next = i + 1;
        return b;
    }
    if (b < 0xE0) {
        *next = i + 2;
        return ((uint32_t)(b & 0x1F) << 6) | (s[i + 1] & 0x3F);
    }
    if (b < 0xF0) {
        *next = i + 3;
        return ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) |
               (s[i + 2] & 0x3F);
    }
    *next = i + 4;
    return ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
           ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
}

static inline uint8_t cls(uint32_t cp)
{
    return class_table[cp];
}

/* End of the run of characters from i whose class intersects `mask`. */
static inline size_t run_of(const uint8_t *s, size_t i, size_t end, uint8_t mask)
{
    while (i < end) {
        size_t next;
        uint32_t c = decode_at(s, i, &next);
        if (!(cls(c) & mask)) break;
        i = next;
    }
    return i;
}

/* End of the run of characters from i whose class avoids `mask` entirely. */
static inline size_t run_without(const uint8_t *s, size_t i, size_t end, uint8_t mask)
{
    while (i < end) {
        size_t next;
        uint32_t c = decode_at(s, i, &next);
        if (cls(c) & mask) break;
        i = next;
    }
    return i;
}

static inline size_t run_of_crlf(const uint8_t *s, size_t i, size_t end)
{
    while (i < end && (s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

/* The whitespace alternatives both patterns end with:
 *   \s*[\r\n]+ | \s+(?!\S) | \s+
 * at i, where the character at i is \s. Returns the match end. */
static size_t match_whitespace(const uint8_t *s, size_t i, size_t end)
{
    size_t r = i, last_crlf_end = 0, last_char = i;
    while (r < end) {
        size_t next;
        uint32_t c = decode_at(s, r, &next);
        if (!(cls(c) & CW)) break;
        if (c == '\r' || c == '\n') last_crlf_end = next;
        last_char = r;
        r = next;
    }
    if (last_crlf_end) return last_crlf_end; /* \s*[\r\n]+ */
    if (r == end) return r;                  /* \s+(?!\S) at the end of the piece */
    if (last_char > i) return last_char;     /* \s+(?!\S): give back one character */
    return r;                                /* \s+ */
}

static int is_ascii_punct(uint32_t c)
{
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}

static int is_ascii_letter(uint8_t b)
{
    return (b | 0x20) >= 'a' && (b | 0x20) <= 'z';
}

/* DeepSeek V3's main pattern at i; returns the match end, or i when nothing
 * matches here:
 *   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
 *   | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
 *   | ?[\p{P}\p{S}]+[\r\n]*
 *   | \s*[\r\n]+ | \s+(?!\S) | \s+ */
static size_t match_deepseek_main(const uint8_t *s, size_t i, size_t end)
{
    size_t next;
    uint32_t c = decode_at(s, i, &next);
    uint8_t k = cls(c);
    if (is_ascii_punct(c) && next < end && is_ascii_letter(s[next])) {
        size_t j = next;
        while (j < end && is_ascii_letter(s[j])) j++;
        return j;
    }
    if (k & (CL | CM)) return run_of(s, i, end, CL | CM);
    if (c != '\r' && c != '\n' && !(k & (CP | CS)) && next < end) {
        size_t after;
        uint32_t d = decode_at(s, next, &after);
        if (cls(d) & (CL | CM)) return run_of(s, next, end, CL | CM);
    }
    if (c == ' ' && next < end) {
        size_t after;
        uint32_t d = decode_at(s, next, &after);
        if (cls(d) & (CP | CS)) return run_of_crlf(s, run_of(s, next, end, CP | CS), end);
    }
    if (k & (CP | CS)) return run_of_crlf(s, run_of(s, i, end, CP | CS), end);
    if (k & CW) return match_whitespace(s, i, end);
    return i;
}

/* Qwen2's pattern at i (as match_deepseek_main):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+ */
static size_t match_qwen2(const uint8_t *s, size_t i, size_t end)
{
    size_t next;
    uint32_t c = decode_at(s, i, &next);
    uint8_t k = cls(c);
    if (c == '\'' && next < end) {
        size_t after;
        uint32_t d = decode_at(s, next, &after);
        uint32_t lower = d < 0x80 ? (d | 0x20) : d;
        /* case-insensitive: Oniguruma folds U+017F LATIN SMALL LETTER LONG S to s */
        if (lower == 's' || d == 0x17F || lower == 't' || lower == 'm' || lower == 'd')
            return after;
        if ((lower == 'r' || lower == 'v') && after < end && (s[after] | 0x20) == 'e')
            return after + 1;
        if (lower == 'l' && after < end && (s[after] | 0x20) == 'l') return after + 1;
    }
    if (k & CL) return run_of(s, i, end, CL);
    if (c != '\r' && c != '\n' && !(k & CN) && next < end) {
        size_t after;
        uint32_t d = decode_at(s, next, &after);
        if (cls(d) & CL) return run_of(s, next, end, CL);
    }
    if (k & CN) return next;
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    if (c == ' ' && next < end) {
        size_t after;
        uint32_t d = decode_at(s, next, &after);
        if (!(cls(d) & (CW | CL | CN)))
            return run_of_crlf(s, run_without(s, next, end, CW | CL | CN), end);
    }
    if (!(k & (CW | CL | CN))) return run_of_crlf(s, run_without(s, i, end, CW | CL | CN), end);
    return match_whitespace(s, i, end);
}

typedef size_t (*matcher)(const uint8_t *s, size_t i, size_t end);

/* Split text[start, end) with `match`, Isolated: matches and the gaps between them
 * become pieces. */
static int split_isolated(matcher match, const uint8_t *s, size_t start, size_t end, tok_spans *out)
{
    size_t gap = start, i = start;
    while (i < end) {
        size_t m = match(s, i, end);
        if (m == i) {
            size_t next;
            decode_at(s, i, &next);
            i = next;
            continue;
        }
        if (gap < i && tok_spans_push(out, (uint32_t)gap, (uint32_t)(i - gap))) return -1;
        if (tok_spans_push(out, (uint32_t)i, (uint32_t)(m - i))) return -1;
        i = gap = m;
    }
    if (gap < end && tok_spans_push(out, (uint32_t)gap, (uint32_t)(end - gap))) return -1;
    return 0;
}

static int is_deepseek_cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x309F) ||
           (c >= 0x30A0 && c <= 0x30FF);
}

/* DeepSeek V3: step 1 cuts \p{N} runs into groups of three; step 2 isolates CJK
 * runs in what remains; step 3 runs the main pattern on every piece (a digit
 * group never matches it and stays whole). */
static int deepseek_v3(const uint8_t *s, size_t len, tok_spans *out)
{
    size_t i = 0, seg = 0;
    while (i <= len) {
        size_t next = i;
        uint32_t c = 0;
        if (i < len) c = decode_at(s, i, &next);
        int digit = i < len && (cls(c) & CN);
        int cjk = i < len && !digit && is_deepseek_cjk(c);
        if (i < len && !digit && !cjk) {
            i = next;
            continue;
        }
        if (seg < i && split_isolated(match_deepseek_main, s, seg, i, out)) return -1;
        if (i == len) break;
        size_t j = i;
        if (digit) {
            for (int n = 0; n < 3 && j < len; n++) {
                size_t after;
                uint32_t d = decode_at(s, j, &after);
                if (!(cls(d) & CN)) break;
                j = after;
            }
            if (tok_spans_push(out, (uint32_t)i, (uint32_t)(j - i))) return -1;
        } else {
            while (j < len) {
                size_t after;
                uint32_t d = decode_at(s, j, &after);
                if (!is_deepseek_cjk(d) || (cls(d) & CN)) break;
                j = after;
            }
            if (split_isolated(match_deepseek_main, s, i, j, out)) return -1;
        }
        i = seg = j;
    }
    return 0;
}

int tok_pretokenize_fast(tok_fast_path path, const uint8_t *text, size_t len, tok_spans *out)
{
    pthread_once(&class_once, build_class_table);
    if (!class_table) return -1;
    switch (path) {
    case TOK_FAST_DEEPSEEK_V3: return deepseek_v3(text, len, out);
    case TOK_FAST_QWEN2: return split_isolated(match_qwen2, text, 0, len, out);
    case TOK_FAST_NONE: break;
    }
    return -1;
}

/* The patterns, exactly as the tokenizers' files spell them. */
static const char ds_digits[] = "\\p{N}{1,3}";
static const char ds_cjk[] = "[一-龥぀-ゟ゠-ヿ]+";
static const char ds_main[] =
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
static const char qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                            "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                            "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

tok_fast_path tok_detect_fast_path(const char *const *patterns, size_t n_patterns,
                                   int byte_level_split)
{
    if (byte_level_split) return TOK_FAST_NONE;
    if (n_patterns == 3 && strcmp(patterns[0], ds_digits) == 0 &&
        strcmp(patterns[1], ds_cjk) == 0 && strcmp(patterns[2], ds_main) == 0)
        return TOK_FAST_DEEPSEEK_V3;
    if (n_patterns == 1 && strcmp(patterns[0], qwen2) == 0) return TOK_FAST_QWEN2;
    return TOK_FAST_NONE;
}
