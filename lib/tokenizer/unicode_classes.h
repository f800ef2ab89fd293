/* Unicode general-category ranges at the Unicode version of the reference
 * tokenizer's regex engine (unicode_classes.c, generated). The fast
 * pre-tokenizers read them, and the general path registers them with Oniguruma
 * so \p{L}, \p{M}, \p{N}, \p{P} and \p{S} in a pattern mean the same code points
 * in both — whatever Unicode version the system's Oniguruma was built with. */
#ifndef DI_TOKENIZER_UNICODE_CLASSES_H
#define DI_TOKENIZER_UNICODE_CLASSES_H

#include <stdint.h>

extern const char tok_unicode_version[];
/* [0] = number of ranges n, then n (first, last) pairs, ascending. */
extern const uint32_t tok_unicode_L[];
extern const uint32_t tok_unicode_M[];
extern const uint32_t tok_unicode_N[];
extern const uint32_t tok_unicode_P[];
extern const uint32_t tok_unicode_S[];

#endif
