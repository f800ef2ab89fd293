/* agent: an agent loop on the engine. The model gets two tools implemented here
 * in C, get_weather(city) and add(a, b), in an OpenAI Chat Completions
 * conversation. When the model calls one (DI_EVENT_TOOL_CALL), the callback runs
 * the local function on the parsed arguments; when the turn ends, the program
 * appends the assistant message with its tool_calls and a "tool" message with
 * each result, and submits the next turn — until a turn ends without a tool call
 * (the final answer) or MAX_TURNS is reached. Reasoning and answer text are
 * printed as they stream.
 *
 *   cc agent.c $(pkg-config --cflags --libs deepinfer jansson) -o agent
 *   ./agent SmolLM2-135M-Instruct.Q4_1.gguf ["question"]
 *
 * The model needs a prompt encoding (di_engine_encoding): a chat template the
 * codec renders, tools included. The tools are strict ("strict": true, as
 * OpenAI's structured outputs define it): the engine constrains each call to a
 * declared tool and its arguments to the tool's JSON schema (docs/grammar.md,
 * "Strict tools"), so even a small model writes calls the tools can run. The
 * first turn sends "tool_choice": "required" so that the model calls a tool;
 * later turns are "auto". Every turn sends "parallel_tool_calls": false: at
 * most one call per turn (without it a required turn may repeat calls until
 * max_tokens). A call the tool cannot serve (a city it does not know) is
 * answered with an error as the tool's result, as agent runtimes do, and the
 * conversation goes on. Greedy decoding: the same run every time.
 * Exits 0 when the conversation ended (with an answer or at the turn limit) and
 * every turn got exactly one DI_EVENT_DONE; 1 otherwise. */
#include <deepinfer/deepinfer.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TURNS 4

static const char *const TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"strict\": true,"
    " \"description\": \"Get the current weather in a city.\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}},"
    " \"required\": [\"city\"], \"additionalProperties\": false}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"add\", \"strict\": true,"
    " \"description\": \"Add two numbers.\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\"},"
    " \"b\": {\"type\": \"number\"}}, \"required\": [\"a\", \"b\"],"
    " \"additionalProperties\": false}}}]";

/* The tools. Each takes the parsed arguments and returns the result object. */
static json_t *get_weather(json_t *args)
{
    static const struct {
        const char *city, *conditions;
        int celsius;
    } table[] = {{"Paris", "sunny", 18}, {"London", "light rain", 12}, {"Tokyo", "cloudy", 21}};
    const char *city = json_string_value(json_object_get(args, "city"));
    if (!city) return json_pack("{s:s}", "error", "get_weather: \"city\" must be a string");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(city, table[i].city) == 0)
            return json_pack("{s:s, s:s, s:i}", "city", city, "conditions", table[i].conditions,
                             "temperature_c", table[i].celsius);
    return json_pack("{s:s, s:s}", "city", city, "error", "no weather station in that city");
}

static json_t *add(json_t *args)
{
    json_t *a = json_object_get(args, "a"), *b = json_object_get(args, "b");
    if (!json_is_number(a) || !json_is_number(b))
        return json_pack("{s:s}", "error", "add: \"a\" and \"b\" must be numbers");
    return json_pack("{s:f}", "result", json_number_value(a) + json_number_value(b));
}

/* Run the call the model wrote; anything wrong with it becomes an error result
 * (strict tools rule out an unknown name or arguments off the schema, but a
 * call cut by max_tokens still arrives with its arguments so far). */
static json_t *run_tool(const char *name, const char *arguments)
{
    json_error_t jerr;
    json_t *args = json_loads(arguments, 0, &jerr), *result;
    if (!json_is_object(args))
        result = json_pack("{s:s, s:s}", "error", "the arguments are not a JSON object", "detail",
                           args ? "" : jerr.text);
    else if (strcmp(name, "get_weather") == 0)
        result = get_weather(args);
    else if (strcmp(name, "add") == 0)
        result = add(args);
    else
        result = json_pack("{s:s, s:s}", "error", "no such tool", "name", name);
    json_decref(args);
    return result;
}

/* One assistant turn, filled by the callback. */
typedef struct turn {
    char *text;       /* the answer text (content), NUL-terminated */
    size_t len;       /* bytes of text */
    json_t *calls;    /* the tool_calls, as the next request sends them back */
    json_t *results;  /* a "tool" message answering each call */
    int printing;     /* the event kind being printed, to label a change */
    int n_done;       /* DI_EVENT_DONE events: must be exactly 1 */
    di_status status; /* the DONE event's status, message and finish reason */
    char message[256];
    char finish[32];
} turn;

static void print_label(turn *t, int kind, const char *label)
{
    if (t->printing != kind) printf("%s%s", t->printing ? "\n" : "", label);
    t->printing = kind;
}

/* Runs inside di_poll, on the main thread. */
static void on_event(void *user, const di_event *ev)
{
    turn *t = user;
    size_t n;
    const char *text = di_event_text(ev, &n);
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_REASONING:
        print_label(t, DI_EVENT_REASONING, "  reasoning: ");
        fwrite(text, 1, n, stdout);
        break;
    case DI_EVENT_TEXT: {
        print_label(t, DI_EVENT_TEXT, "  assistant: ");
        fwrite(text, 1, n, stdout);
        char *grown = realloc(t->text, t->len + n + 1);
        if (!grown) abort();
        memcpy(grown + t->len, text, n);
        t->text = grown;
        t->len += n;
        t->text[t->len] = '\0';
        break;
    }
    case DI_EVENT_TOOL_CALL: {
        const char *id = di_event_tool_call_id(ev), *name = di_event_tool_call_name(ev);
        json_t *result = run_tool(name ? name : "", text);
        char *content = json_dumps(result, JSON_COMPACT);
        print_label(t, DI_EVENT_TOOL_CALL, "");
        printf("  tool call: %s(%s) -> %s\n", name ? name : "?", text, content ? content : "?");
        json_array_append_new(t->calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id ? id : "",
                                                  "type", "function", "function", "name",
                                                  name ? name : "", "arguments", text));
        json_array_append_new(t->results,
                              json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id",
                                        id ? id : "", "content", content ? content : "{}"));
        free(content);
        json_decref(result);
        t->printing = 0;
        break;
    }
    case DI_EVENT_DONE: {
        const char *finish = di_event_finish_text(ev);
        t->n_done++;
        t->status = di_event_status(ev);
        snprintf(t->message, sizeof t->message, "%s", di_event_message(ev));
        snprintf(t->finish, sizeof t->finish, "%s", finish ? finish : "");
        print_label(t, DI_EVENT_DONE, "");
        printf("  [turn done: %s, finish_reason %s, %u prompt + %u output tokens]\n",
               di_status_string(t->status), t->finish, di_event_prompt_tokens(ev),
               di_event_completion_tokens(ev));
        break;
    }
    default: break; /* tokens, chunks, argument deltas, kinds added later */
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) return fprintf(stderr, "usage: agent MODEL.gguf [QUESTION]\n"), 2;
    const char *question = argc > 2 ? argv[2] : "Check the weather in Tokyo for me.";
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = argv[1];
    cfg.n_ctx = 2048;
    di_engine *engine = NULL;
    di_error *err = NULL;
    json_t *tools = json_loads(TOOLS, 0, NULL);
    json_t *messages = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content",
                                 "You are a helpful assistant. Use the tools when they help.",
                                 "role", "user", "content", question);
    int ok = 0, turns = 0, answered = 0;
    if (!tools || !messages) {
        fprintf(stderr, "agent: the question is not UTF-8 (or memory ran out)\n");
        goto done;
    }
    if (di_engine_create(&cfg, &engine, &err) != DI_OK) goto done;
    printf("user: %s\n", question);

    for (turns = 1; turns <= MAX_TURNS && !answered; turns++) {
        turn t = {.calls = json_array(), .results = json_array()};
        json_t *body =
            json_pack("{s:O, s:O, s:s, s:b}", "messages", messages, "tools", tools, "tool_choice",
                      turns == 1 ? "required" : "auto", "parallel_tool_calls", 0);
        char *json = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        di_request req;
        di_request_init(&req);
        req.protocol = DI_PROTOCOL_CHAT;
        req.json = json;
        req.json_len = json ? strlen(json) : 0;
        req.max_tokens = 96;
        req.temperature = 0; /* greedy */
        req.on_event = on_event;
        req.user_data = &t;
        uint64_t id;
        di_status st = json && t.calls && t.results ? di_submit(engine, &req, &id, &err)
                                                    : DI_ERR_OUT_OF_MEMORY;
        free(json);
        if (st == DI_OK)
            while (di_engine_pending(engine) > 0) di_poll(engine, -1); /* callbacks run here */
        if (st == DI_OK && (t.n_done != 1 || t.status != DI_OK)) {
            fprintf(stderr, "agent: turn %d: %d DONE events, %s %s\n", turns, t.n_done,
                    di_status_string(t.status), t.message);
            st = t.n_done != 1 ? DI_ERR_INTERNAL : t.status;
        } else if (st == DI_OK && json_array_size(t.calls) == 0) {
            answered = 1;   /* no tool call: this is the final answer */
            if (turns == 1) /* a small model may write a call the parser cannot read */
                printf("  (tool_choice was \"required\" but no valid tool call came: the "
                       "text is the answer)\n");
        } else if (st == DI_OK) { /* the assistant's calls, then a result for each */
            json_t *said = t.len ? json_string(t.text) : json_null();
            if (json_array_append_new(messages,
                                      json_pack("{s:s, s:o, s:O}", "role", "assistant", "content",
                                                said, "tool_calls", t.calls)) ||
                json_array_extend(messages, t.results))
                st = DI_ERR_OUT_OF_MEMORY;
        }
        free(t.text);
        json_decref(t.calls);
        json_decref(t.results);
        if (st != DI_OK) goto done;
    }
    ok = 1;
    printf(answered ? "final answer after %d turns\n" : "no final answer within %d turns\n",
           turns - 1);

done:
    if (err) fprintf(stderr, "agent: %s\n", di_error_message(err));
    di_error_free(err);
    di_engine_destroy(engine);
    json_decref(messages);
    json_decref(tools);
    return ok ? 0 : 1;
}
