/* Prompt-lookup drafting (draft.h). */
#include <string.h>

#include "engine/draft.h"

int draft_prompt_lookup(const int32_t *tokens, int64_t n, int min_ngram, int max_ngram,
                        int32_t *out, int max)
{
    if (max <= 0 || min_ngram < 1 || max_ngram < min_ngram) return 0;
    for (int g = max_ngram; g >= min_ngram; g--) {
        if (n <= g) continue;
        const int32_t *suffix = tokens + n - g;
        /* the most recent earlier occurrence: what the output copies now */
        for (int64_t start = n - g - 1; start >= 0; start--) {
            if (tokens[start] != suffix[0] ||
                memcmp(tokens + start, suffix, (size_t)g * sizeof *tokens) != 0)
                continue;
            int64_t from = start + g, avail = n - from;
            int k = avail < max ? (int)avail : max;
            memcpy(out, tokens + from, (size_t)k * sizeof *out);
            return k;
        }
    }
    return 0;
}
