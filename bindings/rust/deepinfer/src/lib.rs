//! Run DeepSeek models (and the dense Llama/Qwen2 models) inside a Rust program:
//! the safe API over libdeepinfer's C ABI (`deepinfer.h`, through the
//! `deepinfer-sys` crate).
//!
//! - [`Engine`] loads a model ([`Engine::builder`] for the settings) and runs
//!   requests with continuous batching on its own worker thread; dropping it
//!   frees it.
//! - [`Engine::submit`] takes a [`Request`] — token ids, or a Chat Completions,
//!   Messages or Responses body — and returns a [`RequestHandle`], a blocking
//!   iterator over the request's [`Event`]s: tokens, text, reasoning, tool-call
//!   deltas and calls, protocol chunks, and last, exactly once,
//!   [`Event::Done`]. [`Engine::submit_with_callback`] hands the events to a
//!   closure instead, borrowed, inside [`Engine::poll`].
//! - [`RequestHandle::cancel`] and [`Canceller`] stop a request from any thread.
//! - For hosts with their own inference: [`Tokenizer`], [`Codec`] (requests
//!   into prompts and token ids) and [`ResponseStream`] (generated text into
//!   reasoning, tool calls and protocol chunks).
//!
//! Every fallible call returns [`Result`]: an [`Error`] carries the library's
//! [`Status`] (the C `di_status`) and its message, which names the offending
//! field (`messages[0].role: unknown role "wizard"`). Nothing public is
//! `unsafe`. `Send`/`Sync` follow the header's thread-safety promises:
//! `Engine`, `Tokenizer` and `Codec` are `Send + Sync`; a `Prompt`, a
//! `ResponseStream` and a `Detokenizer` are `Send` only.
//!
//! Building needs only the standard library and libdeepinfer installed where
//! `pkg-config --libs deepinfer` finds it (set `PKG_CONFIG_PATH`); the minimum
//! Rust version is 1.63 (Debian 12's). docs/rust.md is the guide.
//!
//! ```no_run
//! use deepinfer::{Engine, Event, Request};
//!
//! let engine = Engine::builder("SmolLM2-135M-Instruct.Q4_1.gguf").n_threads(2).build()?;
//! let body = r#"{"model": "smollm2", "max_tokens": 64, "temperature": 0,
//!                "messages": [{"role": "user", "content": "What is the capital of France?"}]}"#;
//! for event in engine.submit(&Request::chat(body))? {
//!     match event {
//!         Event::Text(text) => print!("{}", text),
//!         Event::ToolCall(call) => println!("[{}({})]", call.name, call.arguments),
//!         Event::Done(done) => println!("\n{} {:?}", done.status, done.finish_text),
//!         _ => {}
//!     }
//! }
//! # Ok::<(), deepinfer::Error>(())
//! ```
#![deny(missing_docs)]

mod codec;
mod engine;
mod error;
mod event;
mod request;
mod stream;
mod tokenizer;
mod util;

pub use codec::{Codec, Encoding, Prompt, Protocol};
pub use engine::{
    Canceller, Choice, Completion, Device, Draft, Engine, EngineBuilder, KvCacheStats, KvCacheType,
    LogLevel, RequestHandle,
};
pub use error::{Error, Result, Status};
pub use event::{Chunk, Done, Event, TextDelta, Tokens, ToolCall, ToolCallDelta, Usage};
pub use request::Request;
pub use stream::{
    Chunks, FinishReason, Parsing, ResponseStream, StreamEvent, StreamEvents, StreamOptions,
    ThinkingStage,
};
pub use tokenizer::{Detokenizer, Encode, Tokenizer};

/// The version of the libdeepinfer that is running, `"MAJOR.MINOR.PATCH"`
/// (`di_version_string`).
///
/// ```
/// assert_eq!(deepinfer::version(), deepinfer_sys::DI_VERSION_STRING);
/// ```
pub fn version() -> &'static str {
    // SAFETY: a static NUL-terminated string, never NULL.
    let s = unsafe { std::ffi::CStr::from_ptr(deepinfer_sys::di_version_string()) };
    s.to_str().unwrap_or("")
}

/// The CPU kernels the products take on this machine, in words
/// (`di_cpu_kernels`): chosen at run time from the CPU's features, the AMX
/// tile state Linux grants and `DI_CPU_AMX`; for display (bug reports, logs),
/// the wording may change between versions. Asks the operating system for
/// nothing.
///
/// ```
/// let k = deepinfer::cpu_kernels();
/// assert!(k.contains("avx2") || k.contains("scalar"));
/// ```
pub fn cpu_kernels() -> &'static str {
    // SAFETY: a static NUL-terminated string, never NULL.
    let s = unsafe { std::ffi::CStr::from_ptr(deepinfer_sys::di_cpu_kernels()) };
    s.to_str().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    #[test]
    fn thread_safety_follows_the_header() {
        send_sync::<Engine>();
        send_sync::<RequestHandle>();
        send_sync::<Canceller>();
        send_sync::<Tokenizer>();
        send_sync::<Codec<'static>>();
        send_sync::<Error>();
        send_sync::<Event<'static>>();
        send_sync::<Completion>();
        send::<Prompt>();
        send::<ResponseStream<'static>>();
        send::<Detokenizer<'static>>();
    }

    #[test]
    fn statuses_round_trip_through_their_codes() {
        for code in 0..=14 {
            let s = Status::from_code(code);
            assert_eq!(s.code(), code);
            assert_eq!(s.is_ok(), code == 0);
        }
        assert_eq!(Status::from_code(14), Status::Other(14));
        assert_eq!(Status::Other(14).description(), "unknown status");
        assert_eq!(Status::Other(14).to_string(), "DI_ERR_UNKNOWN(14)");
    }
}
