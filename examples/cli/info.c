/* deepinfer info --model PATH [--tokenizer PATH] [--ctx N]
 *
 * Loads the model with the engine and prints what it loaded as one JSON line
 * (di_engine_model_info: name, architecture, parameters, stored formats,
 * context, chat template, special tokens, encoding). Built only on the public
 * API. docs/cli.md documents it. */
#include <deepinfer/deepinfer.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int usage(const char *why)
{
    fprintf(stderr,
            "deepinfer info: %s (usage: deepinfer info --model PATH [--tokenizer PATH] "
            "[--ctx N])\n",
            why);
    return EXIT_USAGE;
}

int cli_info(int argc, char **argv)
{
    const char *model = NULL, *tokenizer = NULL;
    long ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            printf(
                "usage: deepinfer info --model PATH [--tokenizer PATH] [--ctx N]\n(docs/cli.md)\n");
            return EXIT_OK;
        }
        if (strcmp(o, "--model") != 0 && strcmp(o, "--tokenizer") != 0 && strcmp(o, "--ctx") != 0) {
            char why[96];
            snprintf(why, sizeof why, "unexpected argument '%.60s'", o);
            return usage(why);
        }
        if (!v) return usage("an option needs a value");
        if (strcmp(o, "--model") == 0)
            model = v;
        else if (strcmp(o, "--tokenizer") == 0)
            tokenizer = v;
        else if (cli_parse_long(v, 0, 1L << 20, &ctx) != 0)
            return usage("--ctx must be 0 (the model's, at most 4096) to 1048576");
        i++;
    }
    if (!model) return usage("--model is required");
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = model;
    cfg.tokenizer_path = tokenizer;
    cfg.n_ctx = ctx;
    cfg.n_threads = 1;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) {
        fprintf(stderr, "deepinfer info: %s\n", di_error_message(err));
        di_error_free(err);
        return EXIT_FAILED;
    }
    size_t len = 0;
    const char *info = di_engine_model_info(e, &len);
    fwrite(info, 1, len, stdout);
    putchar('\n');
    di_engine_destroy(e);
    return EXIT_OK;
}
