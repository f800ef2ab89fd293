/* libFuzzer target: rendering arbitrary bytes as a request of every protocol, with
 * both V4 encodings, and as a Chat Completions request with ChatML (with and
 * without a default system prompt). Either a clear rejection (a message is always
 * given) or a prompt that starts with the BOS token (V4) or a ChatML turn and ends
 * with the generation prompt. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "deepinfer/deepinfer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* lit within s[0, n): prompts may hold U+0000, so no C-string search */
static int contains(const char *s, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(s + i, lit, m) == 0) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Every protocol sees every input: the Messages and Responses parsers have
     * their own string handling (a U+0000 over-read was found in Responses). */
    for (int proto = DI_PROTOCOL_CHAT; proto <= DI_PROTOCOL_RESPONSES; proto++)
        for (int enc = DI_ENCODING_DSV4; enc <= DI_ENCODING_DSV41; enc++) {
            di_codec *codec = NULL;
            if (di_codec_create(NULL, (di_encoding)enc, &codec, NULL) != DI_OK) abort();
            di_prompt *prompt = NULL;
            di_error *err = NULL;
            di_status st =
                di_codec_render(codec, (di_protocol)proto, (const char *)data, size, &prompt, &err);
            if (st == DI_OK) {
                size_t n;
                const char *text = di_prompt_text(prompt, &n);
                if (!text || n < 3 ||
                    strncmp(text,
                            "<\xef\xbd\x9c"
                            "begin",
                            8) != 0)
                    abort();
            } else if (!err || !di_error_message(err)[0]) {
                abort();
            }
            di_error_free(err);
            di_prompt_free(prompt);
            di_codec_free(codec);
        }
    for (int with_system = 0; with_system < 2; with_system++) {
        di_codec *codec = NULL;
        if (di_codec_create(NULL, DI_ENCODING_CHATML, &codec, NULL) != DI_OK) abort();
        if (with_system && di_codec_set_default_system(codec, "Be brief.", NULL) != DI_OK) abort();
        di_prompt *prompt = NULL;
        di_error *err = NULL;
        di_status st =
            di_codec_render(codec, DI_PROTOCOL_CHAT, (const char *)data, size, &prompt, &err);
        if (st == DI_OK) {
            size_t n;
            const char *text = di_prompt_text(prompt, &n);
            if (!text || n < 12 || strncmp(text, "<|im_start|>", 12) != 0 ||
                !contains(text, n, "<|im_start|>assistant\n"))
                abort();
        } else if (!err || !di_error_message(err)[0]) {
            abort();
        }
        di_error_free(err);
        di_prompt_free(prompt);
        di_codec_free(codec);
    }
    return 0;
}
