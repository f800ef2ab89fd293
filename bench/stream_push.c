/* Output-side throughput of deepinfer from C, over the public API.
 *
 *   stream_push TOKENIZER PROTOCOL REQUEST.json PIECES [REPEATS]
 *
 * PIECES holds the backend outputs separated by NUL bytes. Renders the request
 * (PROTOCOL: chat, messages or responses), then per repeat creates a stream,
 * pushes every piece (one token each), finishes, and touches every chunk's SSE
 * bytes as a server would send them. Prints one line:
 *   seconds=<best of REPEATS> pushes=<n> chunks=<total> bytes=<SSE bytes>
 * Loading and rendering are not counted. bench/stream_bench.py runs it. */
#include <deepinfer/deepinfer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0;
    *len = (size_t)n;
    return b;
}

static size_t drain(const di_stream *s, size_t *bytes)
{
    size_t n = di_stream_chunk_count(s);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *sse = di_stream_chunk_sse(s, i, &len);
        *bytes += len + (size_t)(unsigned char)sse[0] * 0;
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: stream_push TOKENIZER PROTOCOL REQUEST.json PIECES [REPEATS]\n");
        return 2;
    }
    int repeats = argc > 5 ? (int)strtol(argv[5], NULL, 10) : 3;
    if (repeats < 1) repeats = 1;
    di_protocol proto = strcmp(argv[2], "chat") == 0       ? DI_PROTOCOL_CHAT
                        : strcmp(argv[2], "messages") == 0 ? DI_PROTOCOL_MESSAGES
                                                           : DI_PROTOCOL_RESPONSES;
    size_t req_len, pieces_len;
    char *req = slurp(argv[3], &req_len), *pieces = slurp(argv[4], &pieces_len);
    di_tokenizer *tok = NULL;
    di_codec *codec = NULL;
    di_prompt *prompt = NULL;
    di_error *err = NULL;
    if (!req || !pieces || di_tokenizer_load(argv[1], &tok, &err) != DI_OK ||
        di_codec_create(tok, DI_ENCODING_DSV4, &codec, &err) != DI_OK ||
        di_codec_render(codec, proto, req, req_len, &prompt, &err) != DI_OK) {
        fprintf(stderr, "stream_push: %s\n", err ? di_error_message(err) : "cannot read input");
        return 1;
    }
    double best = 1e30;
    size_t pushes = 0, chunks = 0, bytes = 0;
    for (int r = 0; r < repeats; r++) {
        pushes = chunks = bytes = 0;
        double t0 = now();
        di_stream_options o;
        di_stream_options_init(&o);
        o.response_id = "bench";
        di_stream *s = NULL;
        if (di_stream_create(prompt, tok, &o, &s, &err) != DI_OK ||
            di_stream_ready(s, 100, 0, NULL, &err) != DI_OK)
            break;
        chunks += drain(s, &bytes);
        for (size_t at = 0; at < pieces_len && !di_stream_finished(s);) {
            size_t n = strlen(pieces + at);
            if (di_stream_push_text(s, pieces + at, n, 1, &err) != DI_OK) break;
            chunks += drain(s, &bytes);
            pushes++;
            at += n + 1;
        }
        if (di_stream_finish(s, DI_FINISH_STOP, &err) != DI_OK) break;
        chunks += drain(s, &bytes);
        di_stream_free(s);
        double t = now() - t0;
        if (t < best) best = t;
    }
    if (err) {
        fprintf(stderr, "stream_push: %s\n", di_error_message(err));
        return 1;
    }
    printf("seconds=%.6f pushes=%zu chunks=%zu bytes=%zu\n", best, pushes, chunks, bytes);
    di_prompt_free(prompt);
    di_codec_free(codec);
    di_tokenizer_free(tok);
    free(req);
    free(pieces);
    return 0;
}
