/* UTF-8 well-formedness, as the Unicode Standard defines it (chapter 3, table 3-7
 * "Well-Formed UTF-8 Byte Sequences"): no overlong forms, no surrogates
 * (U+D800..U+DFFF), nothing above U+10FFFF.
 *
 * Used wherever text crosses into or out of the library: request fields, the
 * incremental detokenizer (which must hold back a sequence that is still
 * incomplete and must not stall on bytes that can never become valid), and the
 * stream parser. Pure functions; thread-safe. */
#ifndef DI_UTIL_UTF8_H
#define DI_UTIL_UTF8_H

#include <stddef.h>
#include <stdint.h>

typedef enum di_utf8_state {
    DI_UTF8_VALID = 0,     /* all n bytes are well-formed */
    DI_UTF8_INVALID = 1,   /* the byte at `valid` starts an ill-formed sequence */
    DI_UTF8_INCOMPLETE = 2 /* bytes [valid, n) are a proper prefix of a well-formed
                              sequence: more input may complete it */
} di_utf8_state;

typedef struct di_utf8_scan {
    size_t valid;        /* bytes: length of the longest well-formed prefix */
    di_utf8_state state; /* what follows that prefix */
} di_utf8_scan;

/* Scan s[0, n) and report the longest well-formed prefix and what ends it.
 * An INCOMPLETE result only ever describes the last 1–3 bytes of the input; a
 * prefix that can never be completed (e.g. E0 80, ED A0, F4 90) is INVALID at
 * once, so a streaming caller never waits for bytes that cannot help. */
di_utf8_scan di_utf8_scan_bytes(const uint8_t *s, size_t n);

/* The length in bytes (1–4) of the well-formed sequence starting at s[0, n), or 0
 * when s starts with an ill-formed or incomplete sequence (or n is 0). */
size_t di_utf8_sequence_length(const uint8_t *s, size_t n);

/* The length of the maximal ill-formed subpart at s[0, n) (n >= 1): the longest
 * prefix of a well-formed sequence that starts there, at least 1 byte. A lossy
 * decoder replaces exactly these bytes with one U+FFFD, as the Unicode Standard
 * recommends (section 3.9, "U+FFFD Substitution of Maximal Subparts") and Rust's
 * String::from_utf8_lossy does. */
size_t di_utf8_ill_formed_length(const uint8_t *s, size_t n);

#endif
