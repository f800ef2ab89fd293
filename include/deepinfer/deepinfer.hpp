/* deepinfer.hpp — a header-only C++17 wrapper over deepinfer.h.
 *
 * Nothing here is compiled into the library: the wrapper is inline C++ over the
 * stable C ABI, so a host's C++ standard library and exceptions never cross it.
 * docs/cpp.md is the guide; the C header's doc comments remain the reference for
 * what each call does.
 *
 *   - Owning handles (RAII, move-only, no copies): deepinfer::engine, model,
 *     tokenizer, detokenizer, codec, prompt, stream. Each frees its C object in
 *     its destructor; get() gives the C pointer for calls the wrapper lacks.
 *     tokenizer_view is a borrowed tokenizer (the engine's own).
 *   - Errors: a C call that fails throws deepinfer::error, which carries the
 *     di_status (status()) and the library's message (what()).
 *   - Callbacks are any callable (lambdas): engine::submit takes a
 *     void(const deepinfer::event &). An exception thrown by a callback is caught
 *     at the C boundary (the C callback is noexcept), the events after it are
 *     still delivered, and the first such exception is rethrown from the
 *     engine::poll() (or engine::close()) that ran the callback; the engine stays
 *     usable.
 *   - Borrowed text is std::string_view: an event's views live until its callback
 *     returns (copy what you keep), a prompt's or stream's as the C header says.
 *
 * Thread-safety is the C API's: engine::submit and engine::cancel from any
 * thread; poll() from one thread at a time (callbacks run inside it, on that
 * thread); a tokenizer is immutable and may be shared; a model, detokenizer or
 * stream is used by one thread at a time. Moving a handle while another thread
 * uses it is a data race, as for any C++ object.
 */
#ifndef DEEPINFER_HPP
#define DEEPINFER_HPP

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "deepinfer.h"

namespace deepinfer
{

/* ------------------------------------------------------------------------- */
/* Errors                                                                     */
/* ------------------------------------------------------------------------- */

/* A failed C call: status() is its di_status, what() the library's message
 * (di_error_message: it names the offending field, file or byte offset), or the
 * status's description (di_status_string) for calls that report a status
 * alone. */
class error : public std::runtime_error
{
  public:
    error(di_status status, const std::string &message)
        : std::runtime_error(message), status_(status)
    {
    }
    /* The status of the failed call (never DI_OK). */
    di_status status() const noexcept { return status_; }
    /* Its name as the C header spells it, e.g. "invalid request"
     * (di_status_string). */
    const char *status_string() const noexcept { return di_status_string(status_); }

  private:
    di_status status_;
};

namespace detail
{

/* Throw for a failed call: takes ownership of `err` (freed here). */
[[noreturn]] inline void raise(di_status st, di_error *err)
{
    std::string msg = err != nullptr ? di_error_message(err) : di_status_string(st);
    di_error_free(err);
    throw error(st, msg);
}

/* `err` is read after the call that fills it has run (the arguments of check()
 * are all evaluated first): check(di_x(..., &e), &e). */
inline void check(di_status st, di_error **err)
{
    if (st != DI_OK) raise(st, *err);
}

/* A status alone (no di_error): the message is di_status_string's. */
inline void check(di_status st)
{
    if (st != DI_OK) raise(st, nullptr);
}

inline std::string_view view(const char *p, size_t n) noexcept
{
    return p != nullptr ? std::string_view(p, n) : std::string_view();
}

inline std::string_view view(const char *p) noexcept
{
    return p != nullptr ? std::string_view(p) : std::string_view();
}

/* A NUL-terminated copy of a string_view for the C calls that take one. */
inline std::string c_str(std::string_view s)
{
    return std::string(s);
}

template <typename T, void (*Free)(T *)> struct deleter {
    void operator()(T *p) const noexcept { Free(p); }
};

} // namespace detail

/* The library's version (di_version / di_version_string): compare with
 * DI_VERSION_NUMBER to see whether the header and the library agree. */
inline unsigned version() noexcept
{
    return di_version();
}
inline std::string_view version_string() noexcept
{
    return di_version_string();
}

/* A borrowed array of token ids (an event's, a prompt's): valid as long as what
 * it was read from. */
class token_span
{
  public:
    token_span() noexcept = default;
    token_span(const int32_t *data, size_t size) noexcept : data_(data), size_(size) {}
    const int32_t *data() const noexcept { return data_; }
    size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    const int32_t *begin() const noexcept { return data_; }
    const int32_t *end() const noexcept { return data_ + size_; }
    int32_t operator[](size_t i) const noexcept { return data_[i]; }
    std::vector<int32_t> to_vector() const { return std::vector<int32_t>(begin(), end()); }

  private:
    const int32_t *data_ = nullptr;
    size_t size_ = 0;
};

/* A borrowed array of log probabilities (an event's): valid as long as what
 * it was read from. */
class logprob_span
{
  public:
    logprob_span() noexcept = default;
    logprob_span(const float *data, size_t size) noexcept : data_(data), size_(size) {}
    const float *data() const noexcept { return data_; }
    size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    const float *begin() const noexcept { return data_; }
    const float *end() const noexcept { return data_ + size_; }
    float operator[](size_t i) const noexcept { return data_[i]; }
    std::vector<float> to_vector() const { return std::vector<float>(begin(), end()); }

  private:
    const float *data_ = nullptr;
    size_t size_ = 0;
};

/* The most likely tokens at one output position (event::top_logprobs): ids[j]
 * and logprobs[j], most likely first; both borrowed from the event. */
struct top_logprobs {
    token_span ids;
    logprob_span logprobs;
    size_t size() const noexcept { return ids.size(); }
    bool empty() const noexcept { return ids.empty(); }
};

/* ------------------------------------------------------------------------- */
/* Tokenizer                                                                  */
/* ------------------------------------------------------------------------- */

/* The calls of a loaded tokenizer (di_tokenizer_*), on a borrowed pointer: the
 * engine's tokenizer (engine::tokenizer()) or an owning tokenizer's. All are
 * const and thread-safe. A default-constructed view is empty (operator bool is
 * false) and must not be used. */
class tokenizer_view
{
  public:
    tokenizer_view() noexcept = default;
    explicit tokenizer_view(const di_tokenizer *tok) noexcept : tok_(tok) {}

    const di_tokenizer *get() const noexcept { return tok_; }
    explicit operator bool() const noexcept { return tok_ != nullptr; }

    int32_t vocab_size() const noexcept { return di_tokenizer_vocab_size(tok_); }

    /* Encode UTF-8 text (flags: DI_TOKENIZE_*; 0: plain text, as
     * di_tokenizer_encode). Throws error (DI_ERR_INVALID_UTF8 with the byte
     * offset, …). */
    std::vector<int32_t> encode(std::string_view text, unsigned flags = 0) const
    {
        int32_t *ids = nullptr;
        size_t n = 0;
        di_error *err = nullptr;
        detail::check(di_tokenizer_encode(tok_, text.data(), text.size(), flags, &ids, &n, &err),
                      &err);
        std::unique_ptr<int32_t, detail::deleter<int32_t, di_tokens_free>> own(ids);
        return std::vector<int32_t>(ids, ids + n);
    }

    /* Decode token ids into text (flags: 0 or DI_DECODE_SKIP_SPECIAL). Throws
     * error (DI_ERR_INVALID_ARGUMENT naming the position of an id outside the
     * vocabulary). */
    std::string decode(const int32_t *ids, size_t n, unsigned flags = 0) const
    {
        char *text = nullptr;
        size_t len = 0;
        di_error *err = nullptr;
        detail::check(di_tokenizer_decode(tok_, ids, n, flags, &text, &len, &err), &err);
        std::unique_ptr<char, detail::deleter<char, di_text_free>> own(text);
        return std::string(text, len);
    }
    std::string decode(const std::vector<int32_t> &ids, unsigned flags = 0) const
    {
        return decode(ids.data(), ids.size(), flags);
    }
    /* An event's ids as they come (event::tokens()), without a copy; the span
     * must stay valid for the call (within the callback, for an event's). */
    std::string decode(token_span ids, unsigned flags = 0) const
    {
        return decode(ids.data(), ids.size(), flags);
    }

    /* The id of the token spelled exactly `text`, or -1 when none is
     * (di_tokenizer_token_id's DI_ERR_NOT_FOUND). */
    int32_t token_id(std::string_view text) const
    {
        int32_t id = -1;
        di_status st = di_tokenizer_token_id(tok_, text.data(), text.size(), &id);
        if (st == DI_ERR_NOT_FOUND) return -1;
        detail::check(st);
        return id;
    }

  protected:
    const di_tokenizer *tok_ = nullptr;
};

/* An owning tokenizer (di_tokenizer_load / _load_json; freed by the destructor).
 * Move-only; a moved-from tokenizer is empty. */
class tokenizer : public tokenizer_view
{
  public:
    /* Load from a tokenizer.json, a folder holding one, or a GGUF file. Throws
     * error (DI_ERR_IO, DI_ERR_MODEL_FORMAT, DI_ERR_UNSUPPORTED naming the
     * component, …). */
    explicit tokenizer(std::string_view path)
    {
        di_tokenizer *t = nullptr;
        di_error *err = nullptr;
        detail::check(di_tokenizer_load(detail::c_str(path).c_str(), &t, &err), &err);
        tok_ = t;
    }
    /* Load from the text of a tokenizer.json held in memory (not kept). */
    static tokenizer from_json(std::string_view json)
    {
        di_tokenizer *t = nullptr;
        di_error *err = nullptr;
        detail::check(di_tokenizer_load_json(json.data(), json.size(), &t, &err), &err);
        return tokenizer(t);
    }
    /* Take ownership of a C tokenizer. */
    static tokenizer adopt(di_tokenizer *t) noexcept { return tokenizer(t); }

    tokenizer(tokenizer &&o) noexcept : tokenizer_view(std::exchange(o.tok_, nullptr)) {}
    tokenizer &operator=(tokenizer &&o) noexcept
    {
        if (this != &o) {
            reset();
            tok_ = std::exchange(o.tok_, nullptr);
        }
        return *this;
    }
    tokenizer(const tokenizer &) = delete;
    tokenizer &operator=(const tokenizer &) = delete;
    ~tokenizer() { reset(); }

    /* Give up ownership: the caller frees the result with di_tokenizer_free. */
    di_tokenizer *release() noexcept
    {
        return const_cast<di_tokenizer *>(std::exchange(tok_, nullptr));
    }

  private:
    explicit tokenizer(di_tokenizer *t) noexcept : tokenizer_view(t) {}
    void reset() noexcept { di_tokenizer_free(release()); }
};

/* An incremental detokenizer (di_detokenizer_*): one per stream of generated
 * tokens, used by one thread at a time; the tokenizer must outlive it. */
class detokenizer
{
  public:
    explicit detokenizer(tokenizer_view tok, unsigned flags = 0)
    {
        detail::check(di_detokenizer_create(tok.get(), flags, &d_));
    }
    detokenizer(detokenizer &&o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
    detokenizer &operator=(detokenizer &&o) noexcept
    {
        if (this != &o) {
            di_detokenizer_free(d_);
            d_ = std::exchange(o.d_, nullptr);
        }
        return *this;
    }
    detokenizer(const detokenizer &) = delete;
    detokenizer &operator=(const detokenizer &) = delete;
    ~detokenizer() { di_detokenizer_free(d_); }

    di_detokenizer *get() const noexcept { return d_; }

    /* Feed one id; returns the newly completed text, valid until the next call
     * on this detokenizer. Throws error (DI_ERR_INVALID_ARGUMENT: an id outside
     * the vocabulary). */
    std::string_view push(int32_t id)
    {
        const char *t = nullptr;
        size_t n = 0;
        detail::check(di_detokenizer_push(d_, id, &t, &n));
        return detail::view(t, n);
    }
    /* End the stream: what was held back (same lifetime as push's). */
    std::string_view flush()
    {
        const char *t = nullptr;
        size_t n = 0;
        detail::check(di_detokenizer_flush(d_, &t, &n));
        return detail::view(t, n);
    }

  private:
    di_detokenizer *d_ = nullptr;
};

/* ------------------------------------------------------------------------- */
/* Codec: prompts and response streams                                        */
/* ------------------------------------------------------------------------- */

/* A rendered prompt (di_prompt; owning, move-only). Read from one thread at a
 * time; the views it returns live as long as it. */
class prompt
{
  public:
    explicit prompt(di_prompt *p) noexcept : p_(p) {}
    prompt(prompt &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    prompt &operator=(prompt &&o) noexcept
    {
        if (this != &o) {
            di_prompt_free(p_);
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    prompt(const prompt &) = delete;
    prompt &operator=(const prompt &) = delete;
    ~prompt() { di_prompt_free(p_); }

    const di_prompt *get() const noexcept { return p_; }

    std::string_view text() const noexcept
    {
        size_t n = 0;
        const char *t = di_prompt_text(p_, &n);
        return detail::view(t, n);
    }
    /* The token ids. Throws error (DI_ERR_INVALID_STATE: the codec has no
     * tokenizer; DI_ERR_UNSUPPORTED: a special token the tokenizer lacks). */
    token_span tokens() const
    {
        const int32_t *ids = nullptr;
        size_t n = 0;
        di_error *err = nullptr;
        detail::check(di_prompt_tokens(p_, &ids, &n, &err), &err);
        return token_span(ids, n);
    }
    bool thinking() const noexcept { return di_prompt_thinking(p_) != 0; }
    bool stream() const noexcept { return di_prompt_stream(p_) != 0; }
    float temperature() const noexcept { return di_prompt_temperature(p_); }
    float top_p() const noexcept { return di_prompt_top_p(p_); }
    std::vector<std::string_view> stop() const
    {
        std::vector<std::string_view> out;
        for (size_t i = 0, n = di_prompt_stop_count(p_); i < n; i++)
            out.push_back(detail::view(di_prompt_stop(p_, i)));
        return out;
    }

  private:
    di_prompt *p_ = nullptr;
};

/* A codec (di_codec; owning, move-only): immutable once made, so render() may
 * run from many threads at once. The tokenizer, when given, must outlive it. */
class codec
{
  public:
    explicit codec(di_encoding encoding, tokenizer_view tok = tokenizer_view())
    {
        di_error *err = nullptr;
        detail::check(di_codec_create(tok.get(), encoding, &c_, &err), &err);
    }
    codec(codec &&o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
    codec &operator=(codec &&o) noexcept
    {
        if (this != &o) {
            di_codec_free(c_);
            c_ = std::exchange(o.c_, nullptr);
        }
        return *this;
    }
    codec(const codec &) = delete;
    codec &operator=(const codec &) = delete;
    ~codec() { di_codec_free(c_); }

    di_codec *get() const noexcept { return c_; }

    /* Render a request body of `protocol` into a prompt. Throws error
     * (DI_ERR_INVALID_REQUEST naming the field, …). */
    prompt render(di_protocol protocol, std::string_view json) const
    {
        di_prompt *p = nullptr;
        di_error *err = nullptr;
        detail::check(di_codec_render(c_, protocol, json.data(), json.size(), &p, &err), &err);
        return prompt(p);
    }

  private:
    di_codec *c_ = nullptr;
};

/* A response stream (di_stream; owning, move-only), for a host with its own
 * inference backend: push what it generates, read the parsed events and the
 * protocol chunks of the last call. One thread at a time; the views live until
 * the next call on the stream. */
class stream
{
  public:
    /* opts: NULL for the defaults (di_stream_options otherwise). */
    explicit stream(const prompt &p, tokenizer_view tok = tokenizer_view(),
                    const di_stream_options *opts = nullptr)
    {
        di_error *err = nullptr;
        detail::check(di_stream_create(p.get(), tok.get(), opts, &s_, &err), &err);
    }
    stream(stream &&o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    stream &operator=(stream &&o) noexcept
    {
        if (this != &o) {
            di_stream_free(s_);
            s_ = std::exchange(o.s_, nullptr);
        }
        return *this;
    }
    stream(const stream &) = delete;
    stream &operator=(const stream &) = delete;
    ~stream() { di_stream_free(s_); }

    di_stream *get() const noexcept { return s_; }

    void ready(uint32_t prompt_tokens, uint32_t cache_hit_tokens = 0)
    {
        di_error *err = nullptr;
        detail::check(di_stream_ready(s_, prompt_tokens, cache_hit_tokens, nullptr, &err), &err);
    }
    void push_text(std::string_view text, uint32_t n_tokens)
    {
        di_error *err = nullptr;
        detail::check(di_stream_push_text(s_, text.data(), text.size(), n_tokens, &err), &err);
    }
    void push_tokens(const int32_t *ids, size_t n)
    {
        di_error *err = nullptr;
        detail::check(di_stream_push_tokens(s_, ids, n, &err), &err);
    }
    void finish(di_finish reason)
    {
        di_error *err = nullptr;
        detail::check(di_stream_finish(s_, reason, &err), &err);
    }
    bool finished() const noexcept { return di_stream_finished(s_) != 0; }

    size_t event_count() const noexcept { return di_stream_event_count(s_); }
    di_stream_event_kind event_kind(size_t i) const noexcept
    {
        return di_stream_event_kind_at(s_, i);
    }
    std::string_view event_text(size_t i) const noexcept
    {
        size_t n = 0;
        const char *t = di_stream_event_text(s_, i, &n);
        return detail::view(t, n);
    }
    size_t chunk_count() const noexcept { return di_stream_chunk_count(s_); }
    /* Chunk i's JSON; an empty view with data() == nullptr for Chat's "[DONE]". */
    std::string_view chunk_json(size_t i) const noexcept
    {
        size_t n = 0;
        const char *t = di_stream_chunk_json(s_, i, &n);
        return detail::view(t, n);
    }
    std::string_view chunk_sse(size_t i) const noexcept
    {
        size_t n = 0;
        const char *t = di_stream_chunk_sse(s_, i, &n);
        return detail::view(t, n);
    }
    /* The complete response JSON once finished; empty before. */
    std::string_view response_json() const noexcept
    {
        size_t n = 0;
        const char *t = di_stream_response_json(s_, &n);
        return detail::view(t, n);
    }

  private:
    di_stream *s_ = nullptr;
};

/* ------------------------------------------------------------------------- */
/* Model (the low-level single-sequence API)                                  */
/* ------------------------------------------------------------------------- */

/* A loaded model with one token sequence (di_model; owning, move-only). Used by
 * one thread at a time. */
class model
{
  public:
    /* opts: NULL for the defaults. Throws error (DI_ERR_IO naming the file,
     * DI_ERR_MODEL_FORMAT, DI_ERR_UNSUPPORTED, …). */
    explicit model(std::string_view path, const di_model_options *opts = nullptr)
    {
        di_error *err = nullptr;
        detail::check(di_model_load(detail::c_str(path).c_str(), opts, &m_, &err), &err);
    }
    model(model &&o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
    model &operator=(model &&o) noexcept
    {
        if (this != &o) {
            di_model_free(m_);
            m_ = std::exchange(o.m_, nullptr);
        }
        return *this;
    }
    model(const model &) = delete;
    model &operator=(const model &) = delete;
    ~model() { di_model_free(m_); }

    di_model *get() const noexcept { return m_; }
    int32_t vocab_size() const noexcept { return di_model_vocab_size(m_); }
    int64_t context_length() const noexcept { return di_model_context_length(m_); }
    int64_t n_past() const noexcept { return di_model_n_past(m_); }
    void reset() noexcept { di_model_reset(m_); }

    /* Append tokens and run the forward pass; returns the last token's logits
     * (vocab_size floats), or every token's with DI_EVAL_ALL_LOGITS (row-major
     * [n, vocab]). Throws error (DI_ERR_INVALID_ARGUMENT naming the bad id's
     * index, DI_ERR_CONTEXT_LENGTH); the sequence is then unchanged. */
    std::vector<float> eval(const int32_t *tokens, size_t n, unsigned flags = 0)
    {
        size_t rows = (flags & DI_EVAL_ALL_LOGITS) != 0 ? n : 1;
        std::vector<float> logits(rows * static_cast<size_t>(vocab_size()));
        di_error *err = nullptr;
        detail::check(di_model_eval(m_, tokens, n, logits.data(), flags, &err), &err);
        return logits;
    }
    std::vector<float> eval(const std::vector<int32_t> &tokens, unsigned flags = 0)
    {
        return eval(tokens.data(), tokens.size(), flags);
    }

  private:
    di_model *m_ = nullptr;
};

/* ------------------------------------------------------------------------- */
/* Engine                                                                     */
/* ------------------------------------------------------------------------- */

/* An event handed to a request's callback (a view of the C di_event): it and
 * every view read from it live until the callback returns. */
class event
{
  public:
    explicit event(const di_event *ev) noexcept : ev_(ev) {}
    const di_event *get() const noexcept { return ev_; }

    di_event_kind kind() const noexcept { return di_event_kind_of(ev_); }
    uint64_t request_id() const noexcept { return di_event_request_id(ev_); }
    /* TEXT, REASONING, TOOL_CALL_DELTA: the delta; TOOL_CALL: the arguments
     * JSON; CHUNK: the chunk's JSON (data() == nullptr for Chat's "[DONE]"). */
    std::string_view text() const noexcept
    {
        size_t n = 0;
        const char *t = di_event_text(ev_, &n);
        return detail::view(t, n);
    }
    /* TEXT, REASONING: the text delta; empty for other kinds (di_event_delta). */
    std::string_view delta() const noexcept
    {
        size_t n = 0;
        const char *t = di_event_delta(ev_, &n);
        return detail::view(t, n);
    }
    /* TOOL_CALL_DELTA: a piece of the arguments JSON; TOOL_CALL: all of it;
     * empty for other kinds (di_event_tool_call_arguments). */
    std::string_view tool_call_arguments() const noexcept
    {
        size_t n = 0;
        const char *t = di_event_tool_call_arguments(ev_, &n);
        return detail::view(t, n);
    }
    /* The kind's name ("text", "done", …; di_event_kind_name). */
    std::string_view kind_name() const noexcept { return detail::view(di_event_kind_name(kind())); }
    /* TOKENS: the ids. */
    token_span tokens() const noexcept
    {
        size_t n = 0;
        const int32_t *t = di_event_tokens(ev_, &n);
        return token_span(t, t != nullptr ? n : 0);
    }
    /* TOKENS of a request that asked for log probabilities (request::logprobs,
     * or a protocol body's Chat logprobs / Responses top_logprobs): one per
     * id, natural log, the log-softmax of the model's raw logits whatever the
     * sampling settings (di_event_logprobs); empty otherwise. */
    logprob_span logprobs() const noexcept
    {
        size_t n = 0;
        const float *p = di_event_logprobs(ev_, &n);
        return logprob_span(p, p != nullptr ? n : 0);
    }
    /* TOKENS with request::top_logprobs k > 0: the k most likely tokens at the
     * position of token i, most likely first, a tie to the lower id
     * (di_event_top_logprobs); empty for other events and i out of range. */
    deepinfer::top_logprobs top_logprobs(size_t i) const noexcept
    {
        const int32_t *ids = nullptr;
        const float *lps = nullptr;
        size_t k = di_event_top_logprobs(ev_, i, &ids, &lps);
        return deepinfer::top_logprobs{token_span(ids, k), logprob_span(lps, k)};
    }
    /* The Chat choice (n > 1) the event belongs to, the OpenAI API's
     * choices[i].index; 0 for DONE, the usage chunk, [DONE] and every event of
     * other requests (di_event_choice_index). */
    uint32_t choice_index() const noexcept { return di_event_choice_index(ev_); }
    int32_t tool_call_index() const noexcept { return di_event_tool_call_index(ev_); }
    std::string_view tool_call_id() const noexcept
    {
        return detail::view(di_event_tool_call_id(ev_));
    }
    std::string_view tool_call_name() const noexcept
    {
        return detail::view(di_event_tool_call_name(ev_));
    }
    std::string_view chunk_sse() const noexcept
    {
        size_t n = 0;
        const char *t = di_event_chunk_sse(ev_, &n);
        return detail::view(t, n);
    }
    /* CHUNK: the SSE event name; empty for Chat's unnamed events. */
    std::string_view chunk_name() const noexcept { return detail::view(di_event_chunk_name(ev_)); }
    /* DONE: DI_OK, DI_ERR_CANCELLED or the error that ended the request. */
    di_status status() const noexcept { return di_event_status(ev_); }
    bool ok() const noexcept { return status() == DI_OK; }
    std::string_view message() const noexcept { return detail::view(di_event_message(ev_)); }
    di_finish finish_reason() const noexcept { return di_event_finish_reason(ev_); }
    std::string_view finish_text() const noexcept
    {
        return detail::view(di_event_finish_text(ev_));
    }
    uint32_t prompt_tokens() const noexcept { return di_event_prompt_tokens(ev_); }
    uint32_t prompt_cache_hit_tokens() const noexcept
    {
        return di_event_prompt_cache_hit_tokens(ev_);
    }
    uint32_t completion_tokens() const noexcept { return di_event_completion_tokens(ev_); }
    uint32_t reasoning_tokens() const noexcept { return di_event_reasoning_tokens(ev_); }
    /* DONE of a protocol request that finished: the complete response JSON. */
    std::string_view response_json() const noexcept
    {
        size_t n = 0;
        const char *t = di_event_response_json(ev_, &n);
        return detail::view(t, n);
    }

  private:
    const di_event *ev_;
};

/* What engine::submit sends (di_request): a protocol request (chat(),
 * messages(), responses(): a JSON body) or a token request (tokens()), with the
 * sampling settings as chainable setters. Defaults are di_request_init's. The
 * request keeps copies of the body and arrays until submit, which copies them
 * again: it may be reused or dropped afterwards. */
class request
{
  public:
    request() noexcept { di_request_init(&r_); }

    static request chat(std::string_view body) { return protocol(DI_PROTOCOL_CHAT, body); }
    static request messages(std::string_view body) { return protocol(DI_PROTOCOL_MESSAGES, body); }
    static request responses(std::string_view body)
    {
        return protocol(DI_PROTOCOL_RESPONSES, body);
    }
    static request protocol(di_protocol p, std::string_view body)
    {
        request r;
        r.r_.protocol = p;
        r.json_.assign(body.data(), body.size());
        return r;
    }
    static request tokens(std::vector<int32_t> ids)
    {
        request r;
        r.tokens_ = std::move(ids);
        return r;
    }

    request &max_tokens(int64_t n) noexcept
    {
        r_.max_tokens = n;
        return *this;
    }
    request &temperature(float v) noexcept
    {
        r_.temperature = v;
        return *this;
    }
    request &top_p(float v) noexcept
    {
        r_.top_p = v;
        return *this;
    }
    request &top_k(int32_t v) noexcept
    {
        r_.top_k = v;
        return *this;
    }
    request &min_p(float v) noexcept
    {
        r_.min_p = v;
        return *this;
    }
    request &repetition_penalty(float v) noexcept
    {
        r_.repetition_penalty = v;
        return *this;
    }
    request &presence_penalty(float v) noexcept
    {
        r_.presence_penalty = v;
        return *this;
    }
    request &frequency_penalty(float v) noexcept
    {
        r_.frequency_penalty = v;
        return *this;
    }
    request &seed(int64_t v) noexcept
    {
        r_.seed = v;
        return *this;
    }
    request &ignore_eos(bool v = true) noexcept
    {
        r_.ignore_eos = v ? 1 : 0;
        return *this;
    }
    request &logit_bias(int32_t id, float bias)
    {
        bias_ids_.push_back(id);
        bias_values_.push_back(bias);
        return *this;
    }
    request &stop_token(int32_t id)
    {
        stop_.push_back(id);
        return *this;
    }
    /* Token requests: report each output token's log probability
     * (event::logprobs) and, k in [0, 20], the k most likely tokens at each
     * position (event::top_logprobs); di_request.logprobs / .top_logprobs.
     * Refused at submit (deepinfer::error, DI_ERR_INVALID_ARGUMENT) on a
     * protocol request, for k outside [0, 20], and k > 0 without logprobs. */
    request &logprobs(bool v = true) noexcept
    {
        r_.logprobs = v ? 1 : 0;
        return *this;
    }
    request &top_logprobs(int32_t k) noexcept
    {
        r_.top_logprobs = k;
        return *this;
    }
    /* Token requests: constrain the output (docs/grammar.md) to one JSON text a
     * JSON Schema accepts, a GBNF grammar (start rule `root`) or a regular
     * expression — at most one; di_request.json_schema / .grammar / .regex.
     * One that does not compile is DI_ERR_INVALID_REQUEST at submit, the
     * message naming the schema path, rule or offset. The text is copied; one
     * holding a NUL byte throws deepinfer::error (DI_ERR_INVALID_ARGUMENT)
     * here, naming the setter. */
    request &json_schema(std::string_view schema)
    {
        set_constraint(0, "json_schema", schema, json_schema_);
        return *this;
    }
    request &grammar(std::string_view gbnf)
    {
        set_constraint(1, "grammar", gbnf, grammar_);
        return *this;
    }
    request &regex(std::string_view re)
    {
        set_constraint(2, "regex", re, regex_);
        return *this;
    }

    /* The C struct as submit will send it (pointers into this request, valid
     * while it lives unchanged); on_event/user_data are set by submit. */
    di_request c_request() const noexcept
    {
        di_request r = r_;
        if (r.protocol != 0) {
            r.json = json_.data();
            r.json_len = json_.size();
        }
        if (!tokens_.empty()) {
            r.tokens = tokens_.data();
            r.n_tokens = tokens_.size();
        }
        if (!bias_ids_.empty()) {
            r.logit_bias_ids = bias_ids_.data();
            r.logit_bias_values = bias_values_.data();
            r.n_logit_bias = bias_ids_.size();
        }
        if (!stop_.empty()) {
            r.stop_tokens = stop_.data();
            r.n_stop_tokens = stop_.size();
        }
        if (has_constraint_[0]) r.json_schema = json_schema_.c_str();
        if (has_constraint_[1]) r.grammar = grammar_.c_str();
        if (has_constraint_[2]) r.regex = regex_.c_str();
        return r;
    }

  private:
    void set_constraint(int which, const char *name, std::string_view text, std::string &out)
    {
        size_t nul = text.find('\0');
        if (nul != std::string_view::npos)
            throw error(DI_ERR_INVALID_ARGUMENT, std::string(name) +
                                                     ": contains a NUL byte at offset " +
                                                     std::to_string(nul));
        out.assign(text.data(), text.size());
        has_constraint_[which] = true;
    }

    di_request r_{};
    std::string json_, json_schema_, grammar_, regex_;
    bool has_constraint_[3] = {false, false, false};
    std::vector<int32_t> tokens_, bias_ids_, stop_;
    std::vector<float> bias_values_;
};

/* Settings of an engine (di_engine_config; defaults di_engine_config_init's).
 * Set the C fields through c (c.n_threads, c.n_ctx, …); the strings and the
 * callbacks through the members below, which own them. */
struct engine_config {
    engine_config() noexcept { di_engine_config_init(&c); }
    explicit engine_config(std::string_view model) : engine_config() { model_path = model; }

    di_engine_config c{};
    std::string model_path;        /* required */
    std::string tokenizer_path;    /* empty: the model's own */
    std::string kv_cache_dir;      /* empty: no disk tier */
    std::string served_model_name; /* empty: the model file's name (di_engine_config) */
    /* Load progress, fraction in [0, 1], on the constructing thread; return
     * false to cancel the load (the constructor then throws error with
     * DI_ERR_CANCELLED). An exception it throws cancels the load and is
     * rethrown by the constructor. */
    std::function<bool(float)> progress;
    /* A log sink: called from the engine's own threads, possibly at once, so it
     * must be thread-safe and must not call into the engine. An exception it
     * throws is dropped (the message is lost, never the engine). */
    std::function<void(di_log_level, std::string_view)> log;
};

/* An engine (di_engine; owning, move-only): a loaded model and the worker thread
 * that computes every request. submit() registers a callback per request;
 * poll() runs the callbacks of queued events on the calling thread.
 *
 * Callback rules: a callback may call submit() and cancel() (on any request),
 * not poll() or close() (they throw error DI_ERR_INVALID_STATE). An exception
 * it throws is caught before it reaches the C library; the event counts as
 * delivered, the other events queued with it are still delivered, and the
 * first exception of the poll is rethrown from poll() once they all were (later
 * ones of the same poll are dropped). The request's DONE still comes, to the
 * same callback. The destructor destroys the engine: requests still running
 * get their DONE (DI_ERR_CANCELLED) there, and exceptions from those callbacks
 * are dropped (call close() to have them rethrown). */
class engine
{
  public:
    using callback = std::function<void(const event &)>;

    /* Load the model and start the worker. Throws error: DI_ERR_IO (a missing
     * file, named), DI_ERR_MODEL_FORMAT, DI_ERR_INVALID_ARGUMENT (a bad field,
     * named), DI_ERR_CANCELLED (progress returned false), …; or what the
     * progress callback threw. */
    explicit engine(const engine_config &cfg) : state_(std::make_unique<state>())
    {
        di_engine_config c = cfg.c;
        c.model_path = cfg.model_path.c_str();
        c.tokenizer_path = cfg.tokenizer_path.empty() ? nullptr : cfg.tokenizer_path.c_str();
        c.kv_cache_dir = cfg.kv_cache_dir.empty() ? nullptr : cfg.kv_cache_dir.c_str();
        c.served_model_name =
            cfg.served_model_name.empty() ? nullptr : cfg.served_model_name.c_str();
        if (cfg.log) {
            state_->log = cfg.log;
            c.log = &engine::on_log;
            c.log_user = state_.get();
        }
        struct progress_ctx {
            const std::function<bool(float)> *fn;
            std::exception_ptr thrown;
        } pc{&cfg.progress, nullptr};
        if (cfg.progress) {
            c.progress = [](void *user, float fraction) noexcept -> int {
                auto *p = static_cast<progress_ctx *>(user);
                try {
                    return (*p->fn)(fraction) ? 0 : 1;
                } catch (...) {
                    p->thrown = std::current_exception();
                    return 1;
                }
            };
            c.progress_user = &pc;
        }
        di_error *err = nullptr;
        di_status st = di_engine_create(&c, &e_, &err);
        if (st != DI_OK) {
            if (pc.thrown) {
                di_error_free(err);
                std::rethrow_exception(pc.thrown);
            }
            detail::raise(st, err);
        }
    }
    explicit engine(std::string_view model_path) : engine(engine_config(model_path)) {}

    engine(engine &&o) noexcept : e_(std::exchange(o.e_, nullptr)), state_(std::move(o.state_)) {}
    engine &operator=(engine &&o) noexcept
    {
        if (this != &o) {
            destroy();
            e_ = std::exchange(o.e_, nullptr);
            state_ = std::move(o.state_);
        }
        return *this;
    }
    engine(const engine &) = delete;
    engine &operator=(const engine &) = delete;
    ~engine() { destroy(); }

    di_engine *get() const noexcept { return e_; }

    /* Submit a request; `on_event` (any callable taking const event &) gets its
     * events inside poll(), the last one DI_EVENT_DONE, exactly once. Returns
     * the request's id. Throws error with nothing queued (DI_ERR_INVALID_ARGUMENT
     * naming the field, DI_ERR_INVALID_REQUEST, DI_ERR_UNSUPPORTED,
     * DI_ERR_CONTEXT_LENGTH, DI_ERR_INVALID_STATE, …). Thread-safe; may be called
     * from a callback. */
    template <typename F> uint64_t submit(const request &req, F &&on_event)
    {
        auto s = std::make_unique<slot>(slot{callback(std::forward<F>(on_event)), state_.get()});
        di_request c = req.c_request();
        c.on_event = &engine::on_event;
        c.user_data = s.get();
        uint64_t id = 0;
        di_error *err = nullptr;
        detail::check(di_submit(e_, &c, &id, &err), &err);
        s.release(); /* freed after its DONE (on_event) */
        return id;
    }

    /* Cancel request `id`: true when accepted (also when already being
     * cancelled), false when it had already finished or the engine is being
     * destroyed. Throws error DI_ERR_NOT_FOUND for an id never given.
     * Thread-safe; may be called from a callback. */
    bool cancel(uint64_t id)
    {
        di_error *err = nullptr;
        di_status st = di_cancel(e_, id, &err);
        if (st == DI_ERR_INVALID_STATE) {
            di_error_free(err);
            return false;
        }
        detail::check(st, &err);
        return true;
    }

    /* Deliver queued events to their callbacks on this thread, waiting up to
     * timeout_ms for the first (0: no wait; -1: until one arrives, or at once
     * when nothing is pending). Returns how many were delivered. Rethrows the
     * first exception a callback threw during this call, after every event was
     * delivered. Throws error DI_ERR_INVALID_STATE when called from a callback
     * or while another thread polls. */
    int64_t poll(int32_t timeout_ms = 0)
    {
        int64_t n = di_poll(e_, timeout_ms);
        rethrow_pending();
        if (n < 0) detail::raise(static_cast<di_status>(-n), nullptr);
        return n;
    }

    /* Requests accepted whose DONE was not delivered yet. Thread-safe. */
    size_t pending() const noexcept { return di_engine_pending_count(e_); }

    /* The KV cache's occupancy now (di_engine_kv_cache_stats: blocks used,
     * cached and free, tokens held, the prefix cache's counters), one snapshot.
     * Thread-safe. Throws error on a bad engine. */
    di_kv_cache_stats kv_cache_stats() const
    {
        di_kv_cache_stats k;
        di_kv_cache_stats_init(&k);
        di_error *err = nullptr;
        detail::check(di_engine_kv_cache_stats(e_, &k, &err), &err);
        return k;
    }

    /* A descriptor readable while events are queued, for epoll / poll / an event
     * loop: call poll(0) when it wakes (di_engine_event_fd). Owned by the
     * engine. Throws error (DI_ERR_UNSUPPORTED off Linux, …). */
    int event_fd() const
    {
        int fd = di_engine_event_fd(e_);
        if (fd < 0) detail::raise(static_cast<di_status>(-fd), nullptr);
        return fd;
    }

    /* The engine's prompt encoding, DI_ENCODING_NONE when it has none. */
    di_encoding encoding() const noexcept { return di_engine_prompt_encoding(e_); }
    /* The name responses give as `model` (di_engine_served_model_name). */
    std::string_view served_model_name() const noexcept
    {
        return detail::view(di_engine_served_model_name(e_));
    }
    /* What the engine loaded, as JSON (di_engine_model_info: name,
     * architecture, parameters, formats, context, chat template, special
     * tokens); a view into the engine, valid while it lives. */
    std::string_view model_info() const noexcept
    {
        size_t n = 0;
        const char *t = di_engine_model_info(e_, &n);
        return detail::view(t, n);
    }
    int32_t vocab_size() const noexcept { return di_engine_vocab_size(e_); }
    int64_t context_length() const noexcept { return di_engine_context_length(e_); }
    /* The engine's tokenizer (borrowed; valid while the engine lives), empty
     * when it has none. */
    tokenizer_view tokenizer() const noexcept { return tokenizer_view(di_engine_tokenizer(e_)); }

    /* Destroy the engine now (di_engine_destroy): requests still running get
     * their DONE (DI_ERR_CANCELLED) on this thread; then the first exception a
     * callback threw meanwhile is rethrown. The engine is empty afterwards.
     * Throws error DI_ERR_INVALID_STATE, destroying nothing, from inside a
     * callback or while another thread polls. */
    void close()
    {
        if (e_ == nullptr) return;
        di_status st = di_engine_destroy(e_);
        if (st != DI_OK) detail::raise(st, nullptr);
        e_ = nullptr;
        rethrow_pending();
    }

  private:
    struct state {
        std::exception_ptr pending; /* the first exception of the poll under way */
        std::function<void(di_log_level, std::string_view)> log;
    };
    struct slot {
        callback fn;
        state *st;
    };

    /* The C callback of every request: runs the request's callable; catches
     * what it throws (nothing unwinds into the C library) and keeps the first
     * exception for poll(); frees the slot after DONE. */
    static void on_event(void *user, const di_event *ev) noexcept
    {
        slot *s = static_cast<slot *>(user);
        bool done = di_event_kind_of(ev) == DI_EVENT_DONE;
        try {
            s->fn(event(ev));
        } catch (...) {
            if (!s->st->pending) s->st->pending = std::current_exception();
        }
        if (done) delete s;
    }

    static void on_log(void *user, di_log_level level, const char *message) noexcept
    {
        try {
            static_cast<state *>(user)->log(level, detail::view(message));
        } catch (...) {
        }
    }

    void rethrow_pending()
    {
        if (state_ && state_->pending) std::rethrow_exception(std::exchange(state_->pending, {}));
    }

    void destroy() noexcept
    {
        if (e_ != nullptr) {
            (void)di_engine_destroy(e_);
            e_ = nullptr;
        }
        if (state_) state_->pending = nullptr;
    }

    di_engine *e_ = nullptr;
    std::unique_ptr<state> state_;
};

} // namespace deepinfer

#endif /* DEEPINFER_HPP */
