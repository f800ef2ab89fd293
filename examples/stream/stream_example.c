/* The output side of the codec, as a server with its own inference backend
 * uses it: render a Chat Completions request, then feed what the model
 * generated — here a fixed list of backend outputs with reasoning and a DSML tool
 * call, cut at awkward places — to a response stream, and print the SSE messages
 * to send and the tool call as the host would run it.
 *
 *   stream_example
 *
 * Exits 1 if the tool call does not come out whole. */
#include <deepinfer/deepinfer.h>
#include <stdio.h>
#include <string.h>

static const char request[] =
    "{\"model\":\"DeepSeek-V4-Pro\",\"stream\":true,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}";

/* What a model generated, one backend output at a time (markers cut mid-way). */
static const char *const outputs[] = {
    "The user wants the weather",
    " in Paris.</th",
    "ink>Let me check.\n\n<｜DS",
    "ML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"ci",
    "ty\" string=\"true\">Par",
    "is</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
};

static int fail(const char *what, di_error *err)
{
    fprintf(stderr, "stream_example: %s: %s\n", what, di_error_message(err));
    di_error_free(err);
    return 1;
}

/* Print what the last call produced: SSE messages, and the complete tool calls. */
static int drain(const di_stream *s)
{
    int calls = 0;
    for (size_t i = 0; i < di_stream_chunk_count(s); i++) {
        size_t n;
        const char *sse = di_stream_chunk_sse(s, i, &n);
        fwrite(sse, 1, n, stdout);
    }
    for (size_t i = 0; i < di_stream_event_count(s); i++)
        if (di_stream_event_kind_at(s, i) == DI_STREAM_TOOL_CALL_END) {
            fprintf(stderr, "tool call %s: %s(%s)\n", di_stream_event_call_id(s, i),
                    di_stream_event_call_name(s, i), di_stream_event_text(s, i, NULL));
            calls++;
        }
    return calls;
}

int main(void)
{
    di_codec *codec = NULL;
    di_prompt *prompt = NULL;
    di_stream *s = NULL;
    di_error *err = NULL;
    if (di_codec_create(NULL, DI_ENCODING_DSV4, &codec, &err) != DI_OK) return fail("codec", err);
    if (di_codec_render(codec, DI_PROTOCOL_CHAT, request, strlen(request), &prompt, &err) != DI_OK)
        return fail("render", err);
    /* ... the host generates from di_prompt_tokens(prompt) with its backend ... */
    if (di_stream_create(prompt, NULL, NULL, &s, &err) != DI_OK) return fail("stream", err);
    di_prompt_free(prompt);
    if (di_stream_ready(s, 180, 128, NULL, &err) != DI_OK) return fail("ready", err);
    int calls = drain(s);
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0] && !di_stream_finished(s); i++) {
        if (di_stream_push_text(s, outputs[i], strlen(outputs[i]), 4, &err) != DI_OK)
            return fail("push", err);
        calls += drain(s);
    }
    if (di_stream_finish(s, DI_FINISH_STOP, &err) != DI_OK) return fail("finish", err);
    calls += drain(s);
    const char *response = di_stream_response_json(s, NULL);
    int ok = calls == 1 && strstr(response, "\"finish_reason\":\"tool_calls\"") != NULL;
    di_stream_free(s);
    di_codec_free(codec);
    return ok ? 0 : 1;
}
