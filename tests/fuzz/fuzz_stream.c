/* libFuzzer target: the stream parser and the three protocol writers on arbitrary
 * generated text. The first byte picks the protocol, for Chat the encoding (V4
 * DSML, or ChatML's Hermes calls, with tool_choice auto or a named function), and
 * the parsing settings (tools, thinking, JSON mode, stop sequences, tool choice
 * required); the rest is
 * cut into pushes at every 0x01 byte. Invariants: invalid UTF-8 is rejected with
 * a message and changes nothing; every chunk and the final response are valid
 * JSON (jansson); the stream ends with exactly one finish event. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepinfer/deepinfer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_json(const char *s, size_t n)
{
    json_error_t e;
    json_t *v = json_loadb(s, n, JSON_ALLOW_NUL, &e);
    if (!v) {
        fprintf(stderr, "invalid JSON (%s): %.*s\n", e.text, (int)n, s);
        abort();
    }
    json_decref(v);
}

static void check_chunks(const di_stream *s)
{
    for (size_t i = 0; i < di_stream_chunk_count(s); i++) {
        size_t n;
        const char *j = di_stream_chunk_json(s, i, &n);
        if (j) check_json(j, n);
        const char *sse = di_stream_chunk_sse(s, i, &n);
        if (!sse || n < 8 || memcmp(sse + n - 2, "\n\n", 2) != 0) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    unsigned mode = data[0];
    static const char *const bodies[3] = {
        "{\"model\":\"DeepSeek-V4-Pro\",\"messages\":[{\"role\":\"user\",\"content\":\"json\"}],"
        "\"stream\":true,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
        "{\"model\":\"DeepSeek-V4-Pro\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\","
        "\"content\":\"hi\"}],\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}",
        "{\"model\":\"DeepSeek-V4.1-Flash\",\"input\":\"hi\",\"tools\":[{\"type\":\"custom\","
        "\"name\":\"apply_patch\"},{\"type\":\"namespace\",\"name\":\"fs\",\"description\":\"d\","
        "\"tools\":[{\"type\":\"function\",\"name\":\"read\"}]}]}"};
    static const char *const chatml_bodies[2] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"f\"}}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":"
        "\"function\",\"function\":{\"name\":\"f\"}}}"};
    di_protocol proto = (di_protocol)(mode % 3 + 1);
    int chatml = proto == DI_PROTOCOL_CHAT && (mode & 2);
    di_codec *codec = NULL;
    di_prompt *prompt = NULL;
    di_stream *s = NULL;
    if (di_codec_create(NULL, chatml ? DI_ENCODING_CHATML : DI_ENCODING_DSV4, &codec, NULL) !=
        DI_OK)
        abort();
    const char *body = chatml ? chatml_bodies[(mode >> 3) & 1] : bodies[mode % 3];
    if (di_codec_render(codec, proto, body, strlen(body), &prompt, NULL) != DI_OK) abort();
    di_stream_options o;
    di_stream_options_init(&o);
    o.response_id = "fuzz";
    o.created = 1;
    o.seed = 1;
    const char *stops[2] = {"END", "\n\n\n"};
    if (mode & 4) {
        o.override_parsing = 1;
        o.parse_tool_calls = (int32_t)((mode >> 3) & 1);
        o.parse_json_output = (int32_t)((mode >> 4) & 1);
        o.starts_in_tool_calls = (int32_t)((mode >> 7) & 1);
        o.thinking_stage = (int32_t)((mode >> 5) & 3);
        o.stop_sequences = stops;
        o.n_stop_sequences = 2;
    }
    if (di_stream_create(prompt, NULL, &o, &s, NULL) != DI_OK) abort();
    if (di_stream_ready(s, 10, 3, NULL, NULL) != DI_OK) abort();
    check_chunks(s);
    size_t from = 1;
    for (size_t i = 1; i <= size && !di_stream_finished(s); i++) {
        if (i < size && data[i] != 1) continue;
        di_error *err = NULL;
        di_status st = di_stream_push_text(s, (const char *)data + from, i - from, 1, &err);
        if (st != DI_OK && (st != DI_ERR_INVALID_UTF8 || !di_error_message(err)[0])) abort();
        di_error_free(err);
        if (st == DI_OK) check_chunks(s);
        from = i + 1;
    }
    di_finish reason = (di_finish)(mode % 4 + 1);
    if (di_stream_finish(s, reason, NULL) != DI_OK) abort();
    check_chunks(s);
    size_t n;
    const char *r = di_stream_response_json(s, &n);
    if (!r) abort();
    check_json(r, n);
    di_stream_free(s);
    di_prompt_free(prompt);
    di_codec_free(codec);
    return 0;
}
