/* deepinfer parse --protocol chat|messages|responses --request REQ.json [--stream]
 *                 [--encoding dsv4|dsv41|dsv3|r1|chatml] [--tokenizer PATH] [--id ID] [--created
 * SECONDS] CHUNKS.json|-
 *
 * Replays what a model generated for a request through the output side of the
 * codec, as a server with its own inference backend would use it:
 * CHUNKS.json is {"chunks": ["text", ...], "finish_reason": "stop"|"length"|
 * "content_filter", "prompt_tokens": N, "prompt_cache_hit_tokens": N} (each
 * chunk one backend push of one token; a chunk may also be {"text": "...",
 * "tokens": N}). Prints the complete response JSON, or with --stream every SSE
 * message in the order it would be sent. With --tokenizer the usage counts
 * reasoning tokens, as the reference does. docs/cli.md documents it. */
#include <deepinfer/deepinfer.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int usage(const char *why)
{
    fprintf(
        stderr,
        "deepinfer parse: %s (usage: deepinfer parse --protocol chat|messages|responses "
        "--request REQ.json [--stream] [--encoding dsv4|dsv41|dsv3|r1|chatml] [--tokenizer PATH] "
        "[--id ID] "
        "[--created SECONDS] CHUNKS.json|-)\n",
        why);
    return EXIT_USAGE;
}

/* Write the SSE messages of the stream's last call. */
static void write_chunks(const di_stream *s)
{
    for (size_t i = 0; i < di_stream_chunk_count(s); i++) {
        size_t n;
        const char *sse = di_stream_chunk_sse(s, i, &n);
        fwrite(sse, 1, n, stdout);
    }
}

/* The chunk list of CHUNKS.json, checked; NULL with a message on stderr. */
static json_t *read_chunks(const char *path, di_finish *reason, uint32_t *prompt_tokens,
                           uint32_t *hit_tokens)
{
    size_t len;
    char *text = cli_read_input("parse", path, &len);
    if (!text) return NULL;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!root) {
        fprintf(stderr, "deepinfer parse: %s: invalid JSON at line %d: %s\n", path, jerr.line,
                jerr.text);
        return NULL;
    }
    json_t *chunks = json_object_get(root, "chunks");
    const char *why = NULL;
    if (!json_is_object(root))
        why = "the file must hold a JSON object";
    else if (!json_is_array(chunks))
        why = "\"chunks\" must be an array";
    for (size_t i = 0; !why && i < json_array_size(chunks); i++) {
        json_t *c = json_array_get(chunks, i);
        if (!json_is_string(c) &&
            !(json_is_object(c) && json_is_string(json_object_get(c, "text")) &&
              (!json_object_get(c, "tokens") || json_is_integer(json_object_get(c, "tokens")))))
            why = "every chunk must be a string or {\"text\": string, \"tokens\": integer}";
    }
    const char *r = json_string_value(json_object_get(root, "finish_reason"));
    *reason = DI_FINISH_STOP;
    if (!why && json_object_get(root, "finish_reason")) {
        if (!r)
            why = "\"finish_reason\" must be a string";
        else if (strcmp(r, "length") == 0)
            *reason = DI_FINISH_LENGTH;
        else if (strcmp(r, "content_filter") == 0)
            *reason = DI_FINISH_CONTENT_FILTER;
        else if (strcmp(r, "stop") != 0)
            why = "\"finish_reason\" must be \"stop\", \"length\" or \"content_filter\"";
    }
    const char *keys[2] = {"prompt_tokens", "prompt_cache_hit_tokens"};
    uint32_t *outs[2] = {prompt_tokens, hit_tokens};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(root, keys[k]);
        *outs[k] = 0;
        if (why || !v) continue;
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > (json_int_t)UINT32_MAX)
            why = k ? "\"prompt_cache_hit_tokens\" must be an integer in [0, 2^32)"
                    : "\"prompt_tokens\" must be an integer in [0, 2^32)";
        else
            *outs[k] = (uint32_t)json_integer_value(v);
    }
    if (why) {
        fprintf(stderr, "deepinfer parse: %s: %s\n", path, why);
        json_decref(root);
        return NULL;
    }
    return root;
}

int cli_parse(int argc, char **argv)
{
    const char *protocol = NULL, *request = NULL, *encoding = "dsv4", *tokenizer = NULL;
    const char *id = NULL, *created = NULL, *input = NULL;
    int stream = 0;
    for (int i = 1; i < argc; i++) {
        const char **value = strcmp(argv[i], "--protocol") == 0    ? &protocol
                             : strcmp(argv[i], "--request") == 0   ? &request
                             : strcmp(argv[i], "--encoding") == 0  ? &encoding
                             : strcmp(argv[i], "--tokenizer") == 0 ? &tokenizer
                             : strcmp(argv[i], "--id") == 0        ? &id
                             : strcmp(argv[i], "--created") == 0   ? &created
                                                                   : NULL;
        if (value) {
            if (++i == argc) return usage("an option needs a value");
            *value = argv[i];
        } else if (strcmp(argv[i], "--stream") == 0) {
            stream = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: deepinfer parse --protocol chat|messages|responses --request REQ.json "
                   "[--stream] [--encoding dsv4|dsv41|dsv3|r1|chatml] [--tokenizer PATH] [--id ID] "
                   "[--created SECONDS] CHUNKS.json|-\n(docs/cli.md)\n");
            return EXIT_OK;
        } else if (argv[i][0] == '-' && argv[i][1] != 0) {
            char why[160];
            snprintf(why, sizeof why, "unknown option '%.100s'", argv[i]);
            return usage(why);
        } else if (input) {
            return usage("more than one CHUNKS file");
        } else {
            input = argv[i];
        }
    }
    di_protocol proto;
    if (!protocol) return usage("--protocol is required");
    if (cli_protocol(protocol, &proto) != 0)
        return usage("--protocol must be chat, messages or responses");
    di_encoding enc;
    if (cli_encoding(encoding, &enc) != 0)
        return usage("--encoding must be dsv4, dsv41, dsv3, r1 or chatml");
    if (!request) return usage("--request REQ.json is required");
    if (!input) return usage("a CHUNKS file (or - for stdin) is required");
    if (strcmp(request, "-") == 0 && strcmp(input, "-") == 0)
        return usage("the request and the chunks cannot both come from stdin");
    di_stream_options opts;
    di_stream_options_init(&opts);
    opts.response_id = id;
    if (created) {
        char *end;
        errno = 0;
        long long t = strtoll(created, &end, 10);
        if (errno || *end || end == created || t <= 0)
            return usage("--created must be a positive integer");
        opts.created = t;
    }

    di_finish reason;
    uint32_t prompt_tokens, hit_tokens;
    json_t *root = read_chunks(input, &reason, &prompt_tokens, &hit_tokens);
    if (!root) return EXIT_FAILED;
    size_t len;
    char *body = cli_read_input("parse", request, &len);
    di_tokenizer *tok = NULL;
    di_codec *codec = NULL;
    di_prompt *prompt = NULL;
    di_stream *s = NULL;
    di_error *err = NULL;
    int status = EXIT_FAILED;
    if (!body) goto done;
    if (tokenizer && di_tokenizer_load(tokenizer, &tok, &err) != DI_OK) goto fail;
    if (di_codec_create(tok, enc, &codec, &err) != DI_OK) goto fail;
    if (di_codec_render(codec, proto, body, len, &prompt, &err) != DI_OK) goto fail;
    if (di_stream_create(prompt, tok, &opts, &s, &err) != DI_OK) goto fail;
    if (di_stream_ready(s, prompt_tokens, hit_tokens, NULL, &err) != DI_OK) goto fail;
    if (stream) write_chunks(s);
    json_t *chunks = json_object_get(root, "chunks");
    for (size_t i = 0; i < json_array_size(chunks) && !di_stream_finished(s); i++) {
        json_t *c = json_array_get(chunks, i);
        json_t *t = json_is_string(c) ? c : json_object_get(c, "text");
        json_t *n = json_is_object(c) ? json_object_get(c, "tokens") : NULL;
        json_int_t tokens = n ? json_integer_value(n) : 1;
        if (tokens < 0 || tokens > (json_int_t)UINT32_MAX) {
            fprintf(stderr, "deepinfer parse: %s: chunks[%zu].tokens is out of range\n", input, i);
            goto done;
        }
        if (di_stream_push_text(s, json_string_value(t), json_string_length(t), (uint32_t)tokens,
                                &err) != DI_OK)
            goto fail;
        if (stream) write_chunks(s);
    }
    if (di_stream_finish(s, reason, &err) != DI_OK) goto fail;
    if (stream) {
        write_chunks(s);
    } else {
        size_t n;
        const char *response = di_stream_response_json(s, &n);
        fwrite(response, 1, n, stdout);
        putchar('\n');
    }
    status = EXIT_OK;
    goto done;
fail:
    fprintf(stderr, "deepinfer parse: %s\n", di_error_message(err));
done:
    di_error_free(err);
    di_stream_free(s);
    di_prompt_free(prompt);
    di_codec_free(codec);
    di_tokenizer_free(tok);
    free(body);
    json_decref(root);
    return status;
}
