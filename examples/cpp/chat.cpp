// chat: the C++17 wrapper (deepinfer/deepinfer.hpp) in one program — three Chat
// Completions requests on one engine at once, their events handled by lambdas:
//   1. a question whose answer streams to stdout;
//   2. a tool call ("tool_choice": "required", "parallel_tool_calls": false: one
//      call only): the complete call is printed;
//   3. a long story, cancelled from its own callback after a few deltas.
// With --logprobs, request 1 also asks for log probabilities (the body's
// "logprobs"/"top_logprobs") and each answer token is printed with its own and
// its two likeliest alternatives (event::logprobs, event::top_logprobs).
// Errors are exceptions (deepinfer::error: the status and the library's message).
//
//   c++ -std=c++17 chat.cpp $(pkg-config --cflags --libs deepinfer) -o chat
//   ./chat SmolLM2-135M-Instruct.Q4_1.gguf [--logprobs]
//
// Greedy decoding (temperature 0) repeats itself on one machine. Exits 0 when
// the answer finished, the tool call came and the story was cancelled; 1
// otherwise (an error says why on stderr).
#include <cstdio>
#include <deepinfer/deepinfer.hpp>
#include <iostream>
#include <string>

namespace
{

const char *const QUESTION = R"({"max_tokens": 64, "messages": [
    {"role": "user", "content": "Name three primary colors."}]})";

const char *const QUESTION_LOGPROBS = R"({"max_tokens": 64, "logprobs": true,
  "top_logprobs": 2, "messages": [
    {"role": "user", "content": "Name three primary colors."}]})";

const char *const TOOL_TURN =
    R"({"max_tokens": 96, "tool_choice": "required", "parallel_tool_calls": false,
  "tools": [{"type": "function", "function": {"name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}],
  "messages": [{"role": "user", "content": "Check the weather in Tokyo for me."}]})";

const char *const STORY = R"({"max_tokens": 400, "messages": [
    {"role": "user", "content": "Write a long story about a dragon."}]})";

} // namespace

int main(int argc, char **argv)
{
    bool logprobs = argc == 3 && std::string(argv[2]) == "--logprobs";
    if (argc != 2 && !logprobs) {
        std::fprintf(stderr, "usage: chat MODEL.gguf [--logprobs]\n");
        return 2;
    }
    try {
        deepinfer::engine_config cfg(argv[1]);
        cfg.c.n_ctx = 1024;
        deepinfer::engine engine(cfg); // throws deepinfer::error (a missing file: DI_ERR_IO)

        // Callbacks run inside engine.poll(), on this thread: plain variables do.
        std::string answer, scores;
        di_status answer_status = DI_ERR_INTERNAL;
        engine.submit(
            deepinfer::request::chat(logprobs ? QUESTION_LOGPROBS : QUESTION).temperature(0),
            [&](const deepinfer::event &ev) {
                if (ev.kind() == DI_EVENT_TOKENS && !ev.logprobs().empty()) {
                    // one logprob per token; the views live until we return
                    deepinfer::token_span ids = ev.tokens();
                    for (size_t i = 0; i < ids.size(); i++) {
                        deepinfer::top_logprobs top = ev.top_logprobs(i);
                        scores += "  token " + std::to_string(ids[i]) + ": " +
                                  std::to_string(ev.logprobs()[i]);
                        for (size_t k = 0; k < top.size(); k++)
                            scores += (k ? ", " : " (likeliest ") + std::to_string(top.ids[k]) +
                                      " " + std::to_string(top.logprobs[k]);
                        scores += top.empty() ? "\n" : ")\n";
                    }
                } else if (ev.kind() == DI_EVENT_TEXT) {
                    std::cout << ev.text() << std::flush; // a view: print or copy it
                    answer += ev.text();
                } else if (ev.kind() == DI_EVENT_DONE) {
                    answer_status = ev.status();
                    std::cout << "\n[answer: " << di_status_string(ev.status()) << ", "
                              << ev.completion_tokens() << " tokens]\n";
                }
            });

        int tool_calls = 0;
        engine.submit(deepinfer::request::chat(TOOL_TURN).temperature(0),
                      [&](const deepinfer::event &ev) {
                          if (ev.kind() == DI_EVENT_TOOL_CALL) {
                              tool_calls++;
                              std::cout << "[tool call: " << ev.tool_call_name() << "(" << ev.text()
                                        << ")]\n";
                          }
                      });

        int deltas = 0;
        di_status story_status = DI_OK;
        uint64_t story = 0;
        story = engine.submit(deepinfer::request::chat(STORY).temperature(0),
                              [&](const deepinfer::event &ev) {
                                  // The request may be cancelled from its own callback.
                                  if (ev.kind() == DI_EVENT_TEXT && ++deltas == 5)
                                      engine.cancel(story);
                                  if (ev.kind() == DI_EVENT_DONE) story_status = ev.status();
                              });

        while (engine.pending() > 0) engine.poll(-1); // rethrows what a callback threw

        std::cout << "[story: " << di_status_string(story_status) << " after " << deltas
                  << " deltas]\n";
        if (logprobs) std::cout << "[answer log probabilities]\n" << scores;
        bool ok = answer_status == DI_OK && !answer.empty() && tool_calls >= 1 &&
                  story_status == DI_ERR_CANCELLED && (!logprobs || !scores.empty());
        std::cout << (ok ? "ok: answered, called a tool, cancelled the story\n" : "FAILED\n");
        return ok ? 0 : 1;
    } catch (const deepinfer::error &e) {
        std::cerr << "chat: " << e.status_string() << ": " << e.what() << "\n";
        return 1;
    }
}
