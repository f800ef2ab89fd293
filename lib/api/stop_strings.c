/* Stop strings of token requests (di_request.stop_strings): matched on the
 * decoded output text across token boundaries, as vLLM's and llama.cpp's `stop`
 * are. The text that may still be the start of a stop string is held back; the
 * rest goes out as DI_EVENT_TEXT. A match can only begin inside the held text
 * or after it: everything released was checked to begin no stop string with
 * the text that followed it, so each byte is searched against a bounded window
 * (held < the longest stop string) and the cost per token is O(window x stops). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/engine_internal.h"

void api_request_free_stops(api_request *a)
{
    for (size_t i = 0; i < a->n_stops; i++) free(a->stops[i]);
    free(a->stops);
    free(a->held);
    a->stops = NULL;
    a->held = NULL;
    a->n_stops = a->held_len = 0;
}

/* The first occurrence of needle (m bytes) in s (n bytes), or n. */
static size_t find(const char *s, size_t n, const char *needle, size_t m)
{
    for (size_t i = 0; m <= n && i + m <= n; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, m) == 0) return i;
    return n;
}

/* The length of the longest suffix of s (n bytes) that is a proper prefix of
 * one of the stop strings. */
static size_t held_suffix(const api_request *a, const char *s, size_t n)
{
    size_t k = n < a->max_stop ? n : a->max_stop - 1;
    for (; k > 0; k--)
        for (size_t i = 0; i < a->n_stops; i++) {
            size_t m = strlen(a->stops[i]);
            if (k < m && memcmp(s + n - k, a->stops[i], k) == 0) return k;
        }
    return 0;
}

int api_stop_feed(api_request *a, uint64_t id, event_list *l, const char *t, size_t n, int flush)
{
    char *p = realloc(a->held, a->held_len + n + 1);
    if (!p) return -1;
    a->held = p;
    memcpy(p + a->held_len, t, n);
    size_t len = a->held_len + n;
    /* the stop string that completes first, as if the text came a byte at a
     * time (so the pieces' boundaries change nothing); of those completing at
     * the same byte, the longest */
    size_t at = len, end = SIZE_MAX;
    for (size_t i = 0; i < a->n_stops; i++) {
        size_t m = strlen(a->stops[i]), x = find(p, len, a->stops[i], m);
        if (x < len && (x + m < end || (x + m == end && x < at))) {
            at = x;
            end = x + m;
        }
    }
    int hit = at < len;
    size_t out = hit ? at : flush ? len : len - held_suffix(a, p, len);
    if (out) event_text(l, id, a->fn, a->user, DI_EVENT_TEXT, p, out);
    a->stop_hit |= hit;
    if (hit || flush) {
        a->held_len = 0;
    } else {
        memmove(p, p + out, len - out);
        a->held_len = len - out;
    }
    return hit;
}
