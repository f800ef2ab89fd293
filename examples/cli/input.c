/* cli_read_input, cli_request_error and the option parsers: see cli.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

char *cli_read_input(const char *command, const char *path, size_t *len)
{
    /* The library takes at most 4 GiB of text; reading stops with an error there
     * rather than exhausting memory on an endless input (/dev/zero). */
    const size_t limit = (size_t)4 << 30;
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "deepinfer %s: cannot open %s: %s\n", command, path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    const char *failure = buf ? NULL : "out of memory";
    while (!failure) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (ferror(f)) {
            failure = strerror(errno);
            break;
        }
        if (feof(f)) break;
        if (n + 1 == cap) {
            char *bigger = cap * 2 > limit ? NULL : realloc(buf, cap * 2);
            if (!bigger) {
                failure = cap * 2 > limit ? "input is larger than 4 GiB" : "out of memory";
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    if (f != stdin) fclose(f);
    if (failure) {
        fprintf(stderr, "deepinfer %s: cannot read %s: %s\n", command, path, failure);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int cli_protocol(const char *name, di_protocol *out)
{
    if (strcmp(name, "chat") == 0)
        *out = DI_PROTOCOL_CHAT;
    else if (strcmp(name, "messages") == 0)
        *out = DI_PROTOCOL_MESSAGES;
    else if (strcmp(name, "responses") == 0)
        *out = DI_PROTOCOL_RESPONSES;
    else
        return -1;
    return 0;
}

int cli_device(const char *name, int32_t *out)
{
    if (strcmp(name, "cpu") == 0)
        *out = DI_DEVICE_CPU;
    else if (strcmp(name, "cuda") == 0)
        *out = DI_DEVICE_CUDA;
    else
        return -1;
    return 0;
}

static const char *const kv_cache_types[] = {"f16", "f32", "q8_0", "q4_0"}; /* di_kv_cache_type */

const char *cli_kv_cache_type_name(int32_t type)
{
    return type >= 0 && type < (int32_t)(sizeof kv_cache_types / sizeof kv_cache_types[0])
               ? kv_cache_types[type]
               : "?";
}

int cli_kv_cache_type(const char *name, int32_t *out)
{
    const char *const *names = kv_cache_types;
    for (int32_t i = 0; i < (int32_t)(sizeof kv_cache_types / sizeof kv_cache_types[0]); i++)
        if (strcmp(name, names[i]) == 0) {
            *out = i;
            return 0;
        }
    return -1;
}

int cli_encoding(const char *name, di_encoding *out)
{
    static const struct {
        const char *name;
        di_encoding encoding;
    } names[] = {{"dsv4", DI_ENCODING_DSV4},
                 {"dsv41", DI_ENCODING_DSV41},
                 {"dsv3", DI_ENCODING_DSV3},
                 {"r1", DI_ENCODING_R1},
                 {"chatml", DI_ENCODING_CHATML}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].encoding;
            return 0;
        }
    return -1;
}

int cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_request_error(di_protocol protocol, const char *body, size_t len, char *msg, size_t size)
{
    /* Any encoding reads the JSON the same way; ChatML takes every protocol,
     * and a codec without a tokenizer needs no model. */
    di_codec *codec = NULL;
    di_prompt *prompt = NULL;
    di_error *err = NULL;
    int refused = di_codec_create(NULL, DI_ENCODING_CHATML, &codec, &err) == DI_OK &&
                  di_codec_render(codec, protocol, body, len, &prompt, &err) != DI_OK;
    if (refused) snprintf(msg, size, "%s", di_error_message(err));
    di_error_free(err);
    di_prompt_free(prompt);
    di_codec_free(codec);
    return refused ? 0 : -1;
}
