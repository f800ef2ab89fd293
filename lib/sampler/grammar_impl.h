/* The compiled grammar's layout, shared by the compiler (grammar.c) and the
 * matcher (grammar_matcher.c); private to lib/sampler. */
#ifndef DI_SAMPLER_GRAMMAR_IMPL_H
#define DI_SAMPLER_GRAMMAR_IMPL_H

#include <stdint.h>

#include "sampler/grammar.h"

enum { GE_END = 0, GE_ALT = 1, GE_REF = 2, GE_BYTES = 3 };

typedef struct gelem {
    int32_t type, value; /* GE_REF: rule id; GE_BYTES: byte set id */
} gelem;

typedef struct byteset {
    uint32_t w[8];
} byteset;

struct grammar {
    gelem *elems; /* every rule's alternatives, ALT between them, END after the last */
    int32_t n_elems;
    int32_t *rule_alts; /* the alternatives' first elements, rule r's from alt_off[r] */
    int32_t *alt_off;   /* [n_rules + 1] */
    int32_t n_rules, root;
    byteset *sets;
    int32_t n_sets;
};

#endif
