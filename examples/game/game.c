/* game: a fixed-timestep game loop (60 frames a second) that hosts the engine
 * and never waits on it. Each frame calls di_poll(engine, 0) — deliver what is
 * queued, do not wait —, advances the game one tick and draws it: the frame
 * number and the words an NPC is speaking as they arrive. The blacksmith's
 * greeting is cut short: once CUT_AFTER of its tokens have arrived the player
 * walks away and the game cancels it mid-stream (di_cancel); the innkeeper then
 * speaks, to the end of the line. Last, the frame-time statistics: how long
 * di_poll took, the longest frame, how many frames went over their budget.
 *
 *   cc game.c $(pkg-config --cflags --libs deepinfer) -o game
 *   ./game SmolLM2-135M-Instruct.Q4_1.gguf
 *
 * A model with a prompt encoding (di_engine_encoding) gets Chat Completions
 * requests; any other model gets the token IDs of a story to continue.
 * Exits 1 when a guarantee did not hold: each request ends with exactly one
 * DI_EVENT_DONE; the blacksmith's says DI_ERR_CANCELLED, after CUT_AFTER tokens
 * and before its max_tokens; the innkeeper's says DI_OK. Frame times are
 * reported, not checked: on a shared machine the OS may pre-empt any frame. */
#define _POSIX_C_SOURCE 200809L
#include <deepinfer/deepinfer.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define FRAME_NS         (1000000000L / 60) /* the frame budget: 16.7 ms */
#define MAX_FRAMES       (60 * 120)         /* two minutes: the game gives up */
#define CUT_AFTER        16                 /* blacksmith tokens before the player leaves */
#define SMITH_MAX_TOKENS 96                 /* the blacksmith would say more */

typedef struct npc {
    const char *name;
    uint64_t id;          /* the request speaking the line; 0 before it starts */
    char line[2048];      /* what the NPC said so far */
    size_t len, drawn;    /* bytes of line; bytes already drawn */
    unsigned tokens;      /* output tokens that arrived (DI_EVENT_TOKENS) */
    unsigned cut_at;      /* tokens when the game cancelled it; 0: not cancelled */
    int n_done;           /* DI_EVENT_DONE events: must end up exactly 1 */
    di_status status;     /* the DONE event's status */
    unsigned done_tokens; /* its completion tokens */
} npc;

/* Runs inside di_poll, on the game's thread: the game state needs no locks. */
static void on_event(void *user, const di_event *ev)
{
    npc *c = user;
    size_t n;
    switch (di_event_kind_of(ev)) {
    case DI_EVENT_TOKENS:
        di_event_tokens(ev, &n);
        c->tokens += (unsigned)n;
        break;
    case DI_EVENT_TEXT: {
        /* Words computed before the cancel may still arrive: the player has left. */
        if (c->cut_at) break;
        const char *text = di_event_text(ev, &n);
        if (n > sizeof c->line - 1 - c->len) n = sizeof c->line - 1 - c->len;
        memcpy(c->line + c->len, text, n);
        c->len += n;
        c->line[c->len] = '\0';
        break;
    }
    case DI_EVENT_DONE:
        c->n_done++;
        c->status = di_event_status(ev);
        c->done_tokens = di_event_completion_tokens(ev);
        break;
    default: break;
    }
}

/* Start an NPC's line: `chat` is the Chat Completions body for a model with a
 * prompt encoding, `story` the text any other model continues. */
static di_status npc_speak(di_engine *engine, npc *c, const char *chat, const char *story,
                           int64_t max_tokens, di_error **err)
{
    di_request req;
    di_request_init(&req);
    req.max_tokens = max_tokens;
    req.temperature = 0; /* greedy: the same line on every run */
    req.on_event = on_event;
    req.user_data = c;
    int32_t *ids = NULL;
    di_status st = DI_OK;
    if (di_engine_encoding(engine)) {
        req.protocol = DI_PROTOCOL_CHAT;
        req.json = chat;
        req.json_len = strlen(chat);
    } else {
        st = di_tokenizer_encode(di_engine_tokenizer(engine), story, strlen(story),
                                 DI_TOKENIZE_HF_DEFAULT, &ids, &req.n_tokens, err);
        req.tokens = ids;
    }
    if (st == DI_OK) st = di_submit(engine, &req, &c->id, err);
    di_tokens_free(ids);
    return st;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Draw what an NPC said since the last frame (a real game would render it). */
static void draw(long frame, npc *c)
{
    if (c->drawn == c->len) return;
    printf("frame %4ld  %-10s +\"%.*s\"\n", frame, c->name, (int)(c->len - c->drawn),
           c->line + c->drawn);
    c->drawn = c->len;
}

int main(int argc, char **argv)
{
    if (argc != 2) return fprintf(stderr, "usage: game MODEL.gguf\n"), 2;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = argv[1];
    cfg.n_ctx = 1024;
    di_engine *engine = NULL;
    di_error *err = NULL;
    npc smith = {.name = "blacksmith"}, inn = {.name = "innkeeper"};
    di_status st = di_engine_create(&cfg, &engine, &err);
    if (st == DI_OK)
        st = npc_speak(engine, &smith,
                       "{\"messages\": [{\"role\": \"system\", \"content\": \"You are Brom, the "
                       "village blacksmith.\"}, {\"role\": \"user\", \"content\": \"Hello! Tell "
                       "me about the swords you make.\"}]}",
                       "The old blacksmith put down his hammer and said to the traveller: \"",
                       SMITH_MAX_TOKENS, &err);
    if (st != DI_OK) goto fail;

    long frame, skipped = 0, over = 0;
    int64_t poll_max = 0, poll_sum = 0, work_max = 0, wake_max = 0;
    int64_t next = now_ns();
    for (frame = 0; frame < MAX_FRAMES && (smith.n_done == 0 || inn.n_done == 0); frame++) {
        int64_t start = now_ns();
        if (start - next > wake_max) wake_max = start - next; /* the OS woke us late */
        int64_t got = di_poll(engine, 0); /* the callbacks run here; never waits */
        int64_t polled = now_ns();
        if (got < 0) {
            fprintf(stderr, "game: di_poll: %s\n", di_status_string((di_status)-got));
            break;
        }
        /* The game's tick: the player leaves once the blacksmith has said enough. */
        if (!smith.cut_at && !smith.n_done && smith.tokens >= CUT_AFTER) {
            smith.cut_at = smith.tokens;
            if ((st = di_cancel(engine, smith.id, &err)) != DI_OK) goto fail;
            printf("frame %4ld  the player walks away after %u tokens: di_cancel\n", frame,
                   smith.cut_at);
            st = npc_speak(engine, &inn,
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"I would like a "
                           "room for the night.\"}]}",
                           "The innkeeper smiled at the tired traveller and said: \"", 32, &err);
            if (st != DI_OK) goto fail;
        }
        draw(frame, &smith);
        draw(frame, &inn);

        int64_t end = now_ns();
        poll_sum += polled - start;
        if (polled - start > poll_max) poll_max = polled - start;
        if (end - start > work_max) work_max = end - start;
        if (end - start > FRAME_NS) over++;
        next += FRAME_NS; /* sleep to the next frame's start, or skip frames when late */
        if (next < end) {
            skipped += (end - next) / FRAME_NS + 1;
            next += ((end - next) / FRAME_NS + 1) * FRAME_NS;
        }
        struct timespec wake = {(time_t)(next / 1000000000), (long)(next % 1000000000)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wake, NULL) != 0) {
        }
    }
    di_engine_destroy(engine); /* delivers the DONE of a request still running */
    engine = NULL;

    printf("blacksmith: \"%s\"\n  cut after %u tokens (%u more arrived after di_cancel); DONE "
           "x%d: %s\n",
           smith.line, smith.cut_at, smith.tokens - smith.cut_at, smith.n_done,
           di_status_string(smith.status));
    printf("innkeeper:  \"%s\"\n  DONE x%d: %s, %u tokens generated\n", inn.line, inn.n_done,
           di_status_string(inn.status), inn.done_tokens);
    printf("frames: %ld at 60 Hz (budget %.2f ms); di_poll(0): max %.3f ms, mean %.3f ms; "
           "longest frame %.3f ms; %ld over budget; woke up to %.3f ms late, %ld frames skipped\n",
           frame, FRAME_NS / 1e6, poll_max / 1e6, frame ? poll_sum / 1e6 / (double)frame : 0.0,
           work_max / 1e6, over, wake_max / 1e6, skipped);
    int ok = smith.n_done == 1 && smith.status == DI_ERR_CANCELLED && smith.cut_at >= CUT_AFTER &&
             smith.cut_at < SMITH_MAX_TOKENS && inn.n_done == 1 && inn.status == DI_OK;
    printf("%s\n", ok ? "ok: one DONE each; the cancel landed mid-stream"
                      : "FAIL: a request did not end as expected");
    return ok ? 0 : 1;

fail:
    fprintf(stderr, "game: %s\n", di_error_message(err));
    di_error_free(err);
    di_engine_destroy(engine);
    return 1;
}
