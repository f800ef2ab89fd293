/* The byte-level alphabet of GPT-2 (bytes_to_unicode in OpenAI's encoder.py, used
 * unchanged by HF tokenizers' ByteLevel pre-tokenizer and decoder): the printable
 * bytes 21..7E, A1..AC and AE..FF stand for themselves as code points; the other
 * 68 bytes, in increasing order, become U+0100, U+0101, ... U+0143. */
#include "tokenizer/tokenizer.h"

static int byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The code point that stands for byte b. The non-printable bytes are 00..20
 * (33 of them), 7F..A0 (34) and AD (1), numbered 0..67 in that order. */
static unsigned code_point_of_byte(unsigned b)
{
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 0x100 + b;
    if (b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    return 0x100 + 67; /* 0xAD */
}

/* The byte a code point stands for, or -1. */
static int byte_of_code_point(unsigned cp)
{
    if (cp < 0x100) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp > 0x143) return -1;
    unsigned n = cp - 0x100;
    if (n <= 32) return (int)n;
    if (n <= 66) return (int)(0x7F + (n - 33));
    return 0xAD;
}

long tok_byte_level_decode(const uint8_t *s, size_t len, uint8_t *out)
{
    size_t i = 0, n = 0;
    while (i < len) {
        unsigned cp;
        if (s[i] < 0x80) {
            cp = s[i];
            i += 1;
        } else if ((s[i] & 0xE0) == 0xC0 && i + 1 < len) {
            cp = ((unsigned)(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        } else {
            return -1; /* the alphabet is all below U+0800 */
        }
        int b = byte_of_code_point(cp);
        if (b < 0) return -1;
        out[n++] = (uint8_t)b;
    }
    return (long)n;
}

size_t tok_byte_level_encode(const uint8_t *s, size_t len, uint8_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned cp = code_point_of_byte(s[i]);
        if (cp < 0x80) {
            out[n++] = (uint8_t)cp;
        } else {
            out[n++] = (uint8_t)(0xC0 | (cp >> 6));
            out[n++] = (uint8_t)(0x80 | (cp & 0x3F));
        }
    }
    return n;
}
