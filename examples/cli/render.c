/* deepinfer render --protocol chat|messages|responses --encoding dsv4|dsv41|dsv3|r1|chatml
 * [--tokenizer PATH]
 * [--tokens] FILE|-
 *
 * Renders the request in FILE (stdin for -) into the prompt a DeepSeek model
 * reads, exactly as deepseek-recipe renders it, and prints it with no added
 * newline; with --tokens (which needs --tokenizer) prints the prompt's token IDs
 * as a JSON array instead. An invalid request exits 1 with one line on stderr
 * naming the field and the reason. docs/cli.md documents it. */
#include <deepinfer/deepinfer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define RENDER_USAGE                                                                               \
    "deepinfer render --protocol chat|messages|responses --encoding dsv4|dsv41|dsv3|r1|chatml "    \
    "[--tokenizer PATH] [--tokens] FILE|-"

static int usage(const char *why)
{
    fprintf(stderr, "deepinfer render: %s (usage: " RENDER_USAGE ")\n", why);
    return EXIT_USAGE;
}

int cli_render(int argc, char **argv)
{
    const char *protocol = NULL, *encoding = NULL, *tokenizer = NULL, *input = NULL;
    int tokens = 0;
    for (int i = 1; i < argc; i++) {
        const char **value = strcmp(argv[i], "--protocol") == 0    ? &protocol
                             : strcmp(argv[i], "--encoding") == 0  ? &encoding
                             : strcmp(argv[i], "--tokenizer") == 0 ? &tokenizer
                                                                   : NULL;
        if (value) {
            if (++i == argc) return usage("an option needs a value");
            *value = argv[i];
        } else if (strcmp(argv[i], "--tokens") == 0) {
            tokens = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: " RENDER_USAGE "\n(docs/cli.md)\n");
            return EXIT_OK;
        } else if (argv[i][0] == '-' && argv[i][1] != 0) {
            char why[160];
            snprintf(why, sizeof why, "unknown option '%.100s'", argv[i]);
            return usage(why);
        } else if (input) {
            return usage("more than one input FILE");
        } else {
            input = argv[i];
        }
    }
    if (!protocol) return usage("--protocol is required");
    di_protocol proto;
    if (cli_protocol(protocol, &proto) != 0) {
        char why[200];
        snprintf(why, sizeof why, "--protocol '%.60s' is not supported (chat, messages, responses)",
                 protocol);
        return usage(why);
    }
    if (!encoding) return usage("--encoding is required");
    di_encoding enc;
    if (cli_encoding(encoding, &enc) != 0) {
        char why[200];
        snprintf(why, sizeof why,
                 "--encoding '%.60s' is not supported (dsv4, dsv41, dsv3, r1, chatml)", encoding);
        return usage(why);
    }
    if (tokens && !tokenizer) return usage("--tokens needs --tokenizer PATH");
    if (!input) return usage("an input FILE (or - for stdin) is required");

    size_t len;
    char *body = cli_read_input("render", input, &len);
    if (!body) return EXIT_FAILED;
    di_tokenizer *tok = NULL;
    di_codec *codec = NULL;
    di_prompt *prompt = NULL;
    di_error *err = NULL;
    int status = EXIT_FAILED;
    if (tokenizer && di_tokenizer_load(tokenizer, &tok, &err) != DI_OK) goto fail;
    if (di_codec_create(tok, enc, &codec, &err) != DI_OK) goto fail;
    if (di_codec_render(codec, proto, body, len, &prompt, &err) != DI_OK) goto fail;
    if (tokens) {
        const int32_t *ids;
        size_t n;
        if (di_prompt_tokens(prompt, &ids, &n, &err) != DI_OK) goto fail;
        putchar('[');
        for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
        puts("]");
    } else {
        size_t n;
        const char *text = di_prompt_text(prompt, &n);
        fwrite(text, 1, n, stdout);
    }
    status = EXIT_OK;
    goto done;
fail:
    fprintf(stderr, "deepinfer render: %s\n", di_error_message(err));
done:
    di_error_free(err);
    di_prompt_free(prompt);
    di_codec_free(codec);
    di_tokenizer_free(tok);
    free(body);
    return status;
}
