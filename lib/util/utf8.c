/* UTF-8 well-formedness: see utf8.h. The checks follow table 3-7 of the Unicode
 * Standard row by row: the lead byte fixes the length and the allowed range of the
 * second byte; every later byte is 80..BF. */
#include "util/utf8.h"

/* For a lead byte, the total length and the inclusive range of the second byte.
 * A length of 0 marks a byte that never starts a sequence (80..C1, F5..FF). */
typedef struct lead_rule {
    uint8_t len, lo, hi;
} lead_rule;

static lead_rule lead_rule_for(uint8_t b)
{
    if (b < 0x80) return (lead_rule){1, 0, 0};
    if (b < 0xC2) return (lead_rule){0, 0, 0};
    if (b < 0xE0) return (lead_rule){2, 0x80, 0xBF};
    if (b == 0xE0) return (lead_rule){3, 0xA0, 0xBF};
    if (b < 0xED) return (lead_rule){3, 0x80, 0xBF};
    if (b == 0xED) return (lead_rule){3, 0x80, 0x9F};
    if (b < 0xF0) return (lead_rule){3, 0x80, 0xBF};
    if (b == 0xF0) return (lead_rule){4, 0x90, 0xBF};
    if (b < 0xF4) return (lead_rule){4, 0x80, 0xBF};
    if (b == 0xF4) return (lead_rule){4, 0x80, 0x8F};
    return (lead_rule){0, 0, 0};
}

/* How many bytes of the sequence at s[0, n) are a correct prefix of it (so far),
 * with *rule describing its lead byte. Returns rule->len when it is complete. */
static size_t sequence_prefix(const uint8_t *s, size_t n, lead_rule *rule)
{
    *rule = lead_rule_for(s[0]);
    if (rule->len <= 1) return rule->len;
    size_t i = 1;
    if (i < n) {
        if (s[1] < rule->lo || s[1] > rule->hi) return 1;
        i = 2;
    }
    while (i < n && i < rule->len && s[i] >= 0x80 && s[i] <= 0xBF) i++;
    return i;
}

size_t di_utf8_sequence_length(const uint8_t *s, size_t n)
{
    lead_rule rule;
    if (n == 0) return 0;
    size_t got = sequence_prefix(s, n, &rule);
    return got == rule.len ? got : 0;
}

di_utf8_scan di_utf8_scan_bytes(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII runs are the common case: skip them without the table. */
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        lead_rule rule;
        size_t got = sequence_prefix(s + i, n - i, &rule);
        if (rule.len != 0 && got == rule.len) {
            i += got;
            continue;
        }
        /* Incomplete only when the sequence ran into the end of the input with
         * every byte so far correct. */
        if (rule.len != 0 && i + got == n) return (di_utf8_scan){i, DI_UTF8_INCOMPLETE};
        return (di_utf8_scan){i, DI_UTF8_INVALID};
    }
    return (di_utf8_scan){n, DI_UTF8_VALID};
}

size_t di_utf8_ill_formed_length(const uint8_t *s, size_t n)
{
    lead_rule rule;
    size_t got = sequence_prefix(s, n, &rule);
    return got ? got : 1;
}
