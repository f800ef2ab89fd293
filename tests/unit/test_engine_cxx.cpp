// A C++ host whose callbacks throw (issue: "host integration as embedders
// expect it"): an exception leaving a callback propagates out of di_poll, and
// the engine stays usable — the event being delivered counts as delivered, the
// ones after it arrive at the next di_poll, every request still gets exactly one
// DI_EVENT_DONE, another di_poll and di_engine_destroy work. One thrown out of
// di_engine_destroy leaves the engine freed (LeakSanitizer checks it under ASan).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "deepinfer/deepinfer.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);          \
            std::exit(1);                                                                          \
        }                                                                                          \
    } while (0)

namespace
{

struct Rec {
    std::vector<int32_t> tokens;
    int done = 0, events = 0;
    int throw_at_event = -1; // throw when this many events have come (counting this one)
    bool throw_on_done = false;
};

struct Boom : std::runtime_error {
    Boom() : std::runtime_error("thrown by the host's callback") {}
};

extern "C" void on_event(void *user, const di_event *ev)
{
    Rec *r = static_cast<Rec *>(user);
    r->events++;
    if (di_event_kind_of(ev) == DI_EVENT_TOKENS) {
        size_t n = 0;
        const int32_t *t = di_event_tokens(ev, &n);
        r->tokens.insert(r->tokens.end(), t, t + n);
    } else if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        r->done++;
        if (r->throw_on_done) throw Boom();
    }
    if (r->events == r->throw_at_event) throw Boom();
}

di_engine *make_engine()
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = DI_FIXTURE_DIR "/model/qwen2-tied-f16";
    cfg.n_threads = 2;
    di_engine *e = nullptr;
    di_error *err = nullptr;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) {
        std::fprintf(stderr, "di_engine_create: %s\n", di_error_message(err));
        std::exit(1);
    }
    return e;
}

void submit(di_engine *e, Rec *r, int32_t first, int max_tokens)
{
    static int32_t prompts[8][4];
    int32_t *p = prompts[first % 8];
    for (int i = 0; i < 4; i++) p[i] = first + 3 * i + 5;
    di_request q;
    di_request_init(&q);
    q.tokens = p;
    q.n_tokens = 4;
    q.max_tokens = max_tokens;
    q.temperature = 0.0f;
    q.ignore_eos = 1;
    q.on_event = on_event;
    q.user_data = r;
    uint64_t id = 0;
    CHECK(di_submit(e, &q, &id, nullptr) == DI_OK);
}

// Polls until nothing is pending; returns how many exceptions came out of di_poll.
int poll_all(di_engine *e)
{
    int thrown = 0;
    for (int i = 0; i < 100000 && di_engine_pending(e) > 0; i++) {
        try {
            CHECK(di_poll(e, 50) >= 0); // never -DI_ERR_INVALID_STATE after a throw
        } catch (const Boom &) {
            thrown++;
        }
    }
    CHECK(di_engine_pending(e) == 0);
    return thrown;
}

void test_throwing_callbacks_leave_the_engine_usable()
{
    di_engine *e = make_engine();
    // The same requests without exceptions: the tokens each should get.
    Rec alone[3];
    for (int k = 0; k < 3; k++) submit(e, &alone[k], k, 12);
    CHECK(poll_all(e) == 0);

    Rec got[3];
    got[0].throw_at_event = 2;   // mid-stream, while other events wait behind it
    got[1].throw_on_done = true; // out of the terminal event
    got[2].throw_at_event = 1;   // the first event
    for (int k = 0; k < 3; k++) submit(e, &got[k], k, 12);
    int thrown = poll_all(e);
    CHECK(thrown == 3);
    for (int k = 0; k < 3; k++) {
        CHECK(got[k].done == 1);
        CHECK(got[k].tokens == alone[k].tokens); // nothing lost, nothing repeated
    }
    // Still usable: a new request runs and destroy succeeds.
    Rec after;
    submit(e, &after, 0, 4);
    CHECK(poll_all(e) == 0);
    CHECK(after.done == 1);
    CHECK(after.tokens.size() == 4);
    CHECK(di_engine_destroy(e) == DI_OK);
}

void test_a_throw_out_of_destroy_frees_the_engine()
{
    di_engine *e = make_engine();
    Rec r[2];
    r[0].throw_on_done = true;
    submit(e, &r[0], 1, 64);
    submit(e, &r[1], 2, 64);
    bool caught = false;
    try {
        di_engine_destroy(e); // delivers the cancelled requests' DONE events
    } catch (const Boom &) {
        caught = true;
    }
    CHECK(caught);
    CHECK(r[0].done == 1);
}

} // namespace

int main()
{
    test_throwing_callbacks_leave_the_engine_usable();
    std::puts("ok: throwing callbacks leave the engine usable");
    test_a_throw_out_of_destroy_frees_the_engine();
    std::puts("ok: a throw out of di_engine_destroy frees the engine");
    return 0;
}
