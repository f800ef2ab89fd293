/* write_vocab_model KIND DIR: writes one of vocab_models.h's random models
 * (KIND r1, dsv3 or dsv4) into the new folder DIR, for the CLI tests that run
 * protocol requests through `deepinfer run`. Exit 2 on a usage error, 1 when
 * the folder cannot be written. */
#include <stdio.h>
#include <string.h>

#include "vocab_models.h"

int main(int argc, char **argv)
{
    static const struct {
        const char *kind;
        void (*write)(const char *);
    } kinds[] = {
        {"r1", write_big_vocab_model},
        {"dsv3", write_dsv3_vocab_model},
        {"dsv4", write_dsv4_vocab_model},
    };
    if (argc == 3)
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
            if (!strcmp(argv[1], kinds[i].kind)) {
                kinds[i].write(argv[2]);
                return 0;
            }
    fprintf(stderr, "usage: write_vocab_model r1|dsv3|dsv4 DIR\n");
    return 2;
}
