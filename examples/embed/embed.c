/* embed: the smallest program that embeds deepinfer — create an engine, submit
 * one request, poll, and print the answer as it streams.
 *
 *   cc embed.c $(pkg-config --cflags --libs deepinfer) -o embed
 *   ./embed SmolLM2-135M-Instruct.Q4_1.gguf
 *
 * The request is an OpenAI Chat Completions body when the engine has a prompt
 * encoding for the model (di_engine_encoding); any other model gets the token IDs
 * of a sentence to continue. Greedy decoding (temperature 0) gives the same text
 * on every run. Exits 0 when the request finished, 1 on an error. */
#include <deepinfer/deepinfer.h>
#include <stdio.h>
#include <string.h>

#define QUESTION "Name three primary colors."

/* Runs inside di_poll, on this thread: no locks needed. */
static void on_event(void *user, const di_event *ev)
{
    size_t n;
    const char *text = di_event_text(ev, &n);
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_TEXT:
        fwrite(text, 1, n, stdout);
        fflush(stdout);
        break;
    case DI_EVENT_DONE: /* exactly once per accepted request, always last */
        *(di_status *)user = di_event_status(ev);
        printf("\n[%s%s%s: %u prompt + %u output tokens]\n", di_status_string(di_event_status(ev)),
               *di_event_message(ev) ? ", " : "", di_event_message(ev), di_event_prompt_tokens(ev),
               di_event_completion_tokens(ev));
        break;
    default: break; /* tokens, chunks, and kinds added later */
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) return fprintf(stderr, "usage: embed MODEL.gguf\n"), 2;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = argv[1];
    cfg.n_ctx = 1024;
    di_engine *engine = NULL;
    di_error *err = NULL;
    di_status st = di_engine_create(&cfg, &engine, &err);

    di_status result = DI_ERR_INTERNAL; /* set by the DONE event */
    di_request req;
    di_request_init(&req);
    req.max_tokens = 48;
    req.temperature = 0; /* greedy */
    req.on_event = on_event;
    req.user_data = &result;
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"" QUESTION "\"}]}";
    int32_t *ids = NULL;
    if (st == DI_OK && di_engine_encoding(engine)) { /* a chat model the codec knows */
        req.protocol = DI_PROTOCOL_CHAT;
        req.json = body;
        req.json_len = strlen(body);
    } else if (st == DI_OK) {                              /* any other model: a token request */
        const char *text = "The three primary colors are"; /* a sentence to continue */
        st = di_tokenizer_encode(di_engine_tokenizer(engine), text, strlen(text),
                                 DI_TOKENIZE_HF_DEFAULT, &ids, &req.n_tokens, &err);
        req.tokens = ids;
    }
    uint64_t id;
    if (st == DI_OK) st = di_submit(engine, &req, &id, &err); /* copies what it needs */
    di_tokens_free(ids);
    if (st == DI_OK)
        while (di_engine_pending(engine) > 0) di_poll(engine, 100); /* callbacks run here */
    else
        fprintf(stderr, "embed: %s\n", di_error_message(err));
    di_error_free(err);
    di_engine_destroy(engine);
    return st == DI_OK && result == DI_OK ? 0 : 1;
}
