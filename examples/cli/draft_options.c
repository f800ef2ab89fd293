/* --draft, --draft-max, --draft-model and --speculative: speculative decoding's
 * options, shared by generate, run and chat (cli.h; docs/cli.md). */
#include <string.h>

#include "cli.h"

enum { DEFAULT_DRAFT_MAX = 8 };

int cli_draft_option(const char *o, const char *v, cli_draft *d, const char **why)
{
    *why = NULL;
    if (strcmp(o, "--draft") == 0) {
        d->named = 1;
        if (strcmp(v, "off") == 0)
            d->draft = -1;
        else if (strcmp(v, "auto") == 0)
            d->draft = DI_DRAFT_AUTO;
        else if (strcmp(v, "prompt-lookup") == 0)
            d->draft = DI_DRAFT_PROMPT_LOOKUP;
        else if (strcmp(v, "draft-model") == 0)
            d->draft = DI_DRAFT_MODEL;
        else if (strcmp(v, "mtp") == 0)
            d->draft = DI_DRAFT_MTP;
        else
            *why = "--draft must be off, auto, prompt-lookup, draft-model or mtp";
        return 1;
    }
    if (strcmp(o, "--draft-max") == 0 || strcmp(o, "--speculative") == 0) {
        if (cli_parse_long(v, 0, 64, &d->max) != 0)
            *why = strcmp(o, "--speculative") == 0
                       ? "--speculative must be 0 (off) to 64 draft tokens"
                       : "--draft-max must be 0 (off) to 64 draft tokens";
        return 1;
    }
    if (strcmp(o, "--draft-model") == 0) {
        d->model = v;
        if (!v[0]) *why = "--draft-model needs a model file or folder";
        return 1;
    }
    return 0;
}

const char *cli_draft_apply(const cli_draft *d, di_engine_config *cfg)
{
    cfg->speculative_tokens = 0;
    cfg->draft = DI_DRAFT_AUTO;
    cfg->draft_model_path = NULL;
    if (d->named && d->draft < 0) {
        if (d->model) return "--draft-model cannot be used with --draft off";
        if (d->max > 0) return "--draft-max cannot be used with --draft off";
        return NULL;
    }
    if (!d->named && !d->model && d->max <= 0) return NULL; /* off, as by default */
    if (d->named && d->draft == DI_DRAFT_MODEL && !d->model)
        return "--draft draft-model needs --draft-model PATH";
    if (d->named && d->draft == DI_DRAFT_PROMPT_LOOKUP && d->model)
        return "--draft-model needs --draft draft-model, mtp (an MTP GGUF) or auto, not "
               "prompt-lookup";
    if (d->max == 0)
        return d->model ? "--draft-model cannot be used with --draft-max 0 (off)" : NULL;
    cfg->speculative_tokens = (int32_t)(d->max > 0 ? d->max : DEFAULT_DRAFT_MAX);
    cfg->draft = d->named ? d->draft : DI_DRAFT_AUTO;
    cfg->draft_model_path = d->model;
    return NULL;
}
