//! Every error path: the status the library gives, its message naming the
//! field, and the engine serving on afterwards.

mod common;

use std::ops::ControlFlow;
use std::path::PathBuf;

use deepinfer::{
    Codec, Device, Encode, Encoding, Engine, Error, FinishReason, Protocol, Request,
    ResponseStream, Status, StreamOptions, Tokenizer,
};

fn tiny_model() -> PathBuf {
    common::repo_root().join("tests/fixtures/model/qwen2-tied-f16")
}

fn smol() -> Option<Engine> {
    let path = common::asset(common::SMOL)?;
    Some(
        Engine::builder(path)
            .n_threads(2)
            .build()
            .expect("SmolLM2 loads"),
    )
}

fn assert_err<T: std::fmt::Debug>(r: deepinfer::Result<T>, status: Status, needle: &str) -> Error {
    let e = r.expect_err("an error");
    assert_eq!(e.status(), status, "{}", e);
    assert!(
        e.message().contains(needle),
        "{:?} should contain {:?}",
        e.message(),
        needle
    );
    assert_eq!(e.to_string(), format!("{}: {}", status.name(), e.message()));
    e
}

#[test]
fn engine_creation_errors() {
    assert_err(
        Engine::new("/no/such/model.gguf"),
        Status::Io,
        "/no/such/model.gguf",
    );
    let bad = common::temp_file("bad.gguf", "this is not a GGUF file");
    assert_err(Engine::new(&bad), Status::ModelFormat, "bad.gguf");
    let tiny = tiny_model();
    assert_err(
        Engine::builder(&tiny).n_threads(5000).build(),
        Status::InvalidArgument,
        "n_threads: expected 0 (all CPUs) to 1024",
    );
    assert_err(
        Engine::builder(&tiny).max_running(1000).build(),
        Status::InvalidArgument,
        "max_running",
    );
    assert_err(
        Engine::builder(&tiny).device(Device::Cuda).build(),
        Status::Unsupported,
        "",
    );
    assert_err(
        Engine::builder(&tiny).encoding(Encoding::ChatMl).build(),
        Status::Unsupported,
        "encoding",
    );
    assert_err(
        Engine::builder("a\0b").build(),
        Status::InvalidArgument,
        "model_path: the path contains a NUL byte",
    );
    assert_err(
        Engine::builder(&tiny)
            .tokenizer_path("/no/such/tokenizer.json")
            .build(),
        Status::Io,
        "/no/such/tokenizer.json",
    );
}

#[test]
fn progress_can_cancel_the_load_and_its_panic_is_resumed() {
    let tiny = tiny_model();
    let mut calls = 0;
    let err = Engine::builder(&tiny)
        .progress(|f| {
            calls += 1;
            assert!((0.0..=1.0).contains(&f));
            ControlFlow::Break(())
        })
        .build()
        .unwrap_err();
    assert_eq!(err.status(), Status::Cancelled);
    assert_eq!(err.message(), "the model load was cancelled by the host");
    assert_eq!(calls, 1);
    let mut fractions = Vec::new();
    let engine = Engine::builder(&tiny)
        .progress(|f| {
            fractions.push(f);
            ControlFlow::Continue(())
        })
        .build()
        .unwrap();
    drop(engine);
    assert!(!fractions.is_empty() && fractions.windows(2).all(|w| w[0] <= w[1]));
    let caught = std::panic::catch_unwind(|| {
        Engine::builder(tiny_model())
            .progress(|_| panic!("progress panic"))
            .build()
    });
    assert_eq!(
        caught.unwrap_err().downcast_ref::<&str>(),
        Some(&"progress panic")
    );
}

#[test]
fn submit_errors_on_a_model_without_tokenizer() {
    let engine = Engine::builder(tiny_model()).n_threads(2).build().unwrap();
    assert!(engine.tokenizer().is_none());
    assert_eq!(engine.encoding(), None);
    assert_eq!(engine.vocab_size(), 512);
    assert_err(
        engine.submit(&Request::tokens(&[1, 600, 2])),
        Status::InvalidArgument,
        "tokens[1]: token id 600 is outside the model's vocabulary of 512",
    );
    assert_err(
        engine.submit(&Request::tokens(&[])),
        Status::InvalidArgument,
        "tokens: a token request needs at least one prompt token",
    );
    assert_err(
        engine.submit(&Request::tokens(&[1]).temperature(500.0)),
        Status::InvalidArgument,
        "temperature: expected 0 (greedy) to 100",
    );
    assert_err(
        engine.submit(&Request::tokens(&[1]).top_p(0.0)),
        Status::InvalidArgument,
        "top_p",
    );
    assert_err(
        engine.submit(&Request::tokens(&[1]).seed(u64::MAX)),
        Status::InvalidArgument,
        "seed: expected -1 (random) or >= 0",
    );
    assert_err(
        engine.submit(&Request::tokens(&[1]).stop_tokens(&[9999])),
        Status::InvalidArgument,
        "stop_tokens[0]: token id 9999 is outside the vocabulary of 512",
    );
    assert_err(
        engine.submit(&Request::tokens(&[1]).logit_bias(&[(3, 500.0)])),
        Status::InvalidArgument,
        "logit_bias",
    );
    let long: Vec<i32> = (0..300).map(|i| i % 500).collect();
    assert_err(
        engine.submit(&Request::tokens(&long)),
        Status::ContextLength,
        "leave no room for output in the context of 256 tokens",
    );
    assert_err(
        engine.submit(&Request::chat(r#"{"model": "m", "messages": []}"#)),
        Status::Unsupported,
        "protocol requests cannot be rendered",
    );
    assert_eq!(engine.pending(), 0, "nothing was queued");
    // and the engine still serves
    let ok = engine
        .submit(&Request::tokens(&[1, 2]).max_tokens(3))
        .unwrap()
        .wait();
    assert!(ok.done.is_ok());
    assert_eq!(ok.tokens.len(), 3);
    assert!(ok.text.is_empty(), "no tokenizer, no text");
}

#[test]
fn bad_bodies_and_cancels_on_smollm2() {
    let engine = match smol() {
        Some(e) => e,
        None => return,
    };
    assert_err(
        engine.submit(&Request::chat(r#"{"model": "x", "messages": ["#)),
        Status::InvalidRequest,
        "",
    );
    assert_err(
        engine.submit(&Request::chat(r#"{"model": "x", "messages": 3}"#)),
        Status::InvalidRequest,
        "messages",
    );
    assert_err(
        engine.submit(&Request::chat(
            r#"{"model": "x", "messages": [{"role": "wizard", "content": "hi"}]}"#,
        )),
        Status::InvalidRequest,
        "messages[0].role",
    );
    assert_err(
        engine.submit(&Request::chat(
            r#"{"model": "x", "temperature": 5, "messages": [{"role": "user", "content": "hi"}]}"#,
        )),
        Status::InvalidRequest,
        "temperature",
    );
    assert_err(
        engine.submit(&Request::tokens(&[1, 49152])),
        Status::InvalidArgument,
        "tokens[1]: token id 49152 is outside the model's vocabulary of 49152",
    );
    // a cancel of a finished request names it
    let h = engine
        .submit(&Request::tokens(&[1, 2]).max_tokens(1))
        .unwrap();
    let id = h.id();
    let c = h.canceller();
    let done = h.wait().done;
    assert!(done.is_ok());
    assert_err(
        c.cancel(),
        Status::InvalidState,
        &format!("request {} has already finished", id),
    );
    let ok = engine
        .submit(&Request::messages(
            r#"{"model": "x", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}"#,
        ))
        .unwrap()
        .wait();
    assert!(ok.done.is_ok(), "{:?}", ok.done);
    assert!(
        ok.chunks.iter().all(|c| c.name.is_some()),
        "Messages events are named"
    );
}

#[test]
fn tokenizer_errors() {
    assert_err(
        Tokenizer::load("/no/such/tokenizer.json"),
        Status::Io,
        "/no/such/tokenizer.json",
    );
    assert_err(Tokenizer::from_json("{"), Status::ModelFormat, "");
    assert_err(
        Tokenizer::load("a\0b"),
        Status::InvalidArgument,
        "path: the path contains a NUL byte",
    );
    let tok = Tokenizer::from_json(include_str!("data/tiny_tokenizer.json")).unwrap();
    assert_err(
        tok.decode(&[0, 1, 7], false),
        Status::InvalidArgument,
        "ids[2]",
    );
    assert_err(
        tok.encode_bytes(b"h\xc3", Encode::PLAIN),
        Status::InvalidUtf8,
        "offset 1",
    );
    assert_err(
        tok.encode("h", Encode::from_bits(1 << 20)),
        Status::InvalidArgument,
        "",
    );
    let mut d = tok.detokenizer(false).unwrap();
    assert_err(d.push(99), Status::InvalidArgument, "invalid argument");
    assert_eq!(d.push(2).unwrap(), "hi", "a failed push changes nothing");
}

#[test]
fn codec_and_stream_errors() {
    let dsv4 = Codec::new(None, Encoding::Dsv4).unwrap();
    assert_err(
        dsv4.render(
            Protocol::Chat,
            r#"{"model": "DeepSeek-V4-Pro", "messages": [{"role": "wizard", "content": "x"}]}"#,
        ),
        Status::InvalidRequest,
        "messages[0].role: unknown role \"wizard\"",
    );
    assert_err(
        dsv4.render(Protocol::Chat, "[1, 2"),
        Status::InvalidRequest,
        "",
    );
    let r1 = Codec::new(None, Encoding::R1).unwrap();
    assert_err(
        r1.render(
            Protocol::Messages,
            r#"{"model": "x", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}"#,
        ),
        Status::Unsupported,
        "",
    );
    let mut dsv4m = Codec::new(None, Encoding::Dsv4).unwrap();
    assert_err(
        dsv4m.set_default_system(Some("x")),
        Status::InvalidArgument,
        "",
    );
    let mut chatml = Codec::new(None, Encoding::ChatMl).unwrap();
    assert_err(
        chatml.set_default_system(Some("a\0b")),
        Status::InvalidArgument,
        "text: contains a NUL byte",
    );
    let prompt = dsv4
        .render(Protocol::Chat, r#"{"model": "DeepSeek-V4-Pro", "max_tokens": 100, "messages": [{"role": "user", "content": "x"}]}"#)
        .unwrap();
    assert_err(prompt.tokens(), Status::InvalidState, "");
    assert_err(prompt.max_tokens(4000, 4096), Status::ContextLength, "4096");

    let mut s = ResponseStream::new(&prompt, None, &StreamOptions::new()).unwrap();
    assert_err(s.push_tokens(&[1]), Status::InvalidState, "");
    s.finish(FinishReason::Stop).unwrap();
    assert_err(s.push_text("x", 1), Status::InvalidState, "");
    assert_err(s.ready(1, 0, None), Status::InvalidState, "");
    assert_err(
        ResponseStream::new(&prompt, None, &StreamOptions::new().response_id("a\0")),
        Status::InvalidArgument,
        "response_id: contains a NUL byte",
    );
    let mut parsing = deepinfer::Parsing::from_prompt(&prompt).unwrap();
    parsing.stop_sequences = vec!["ok".into(), "a\0".into()];
    assert_err(
        ResponseStream::new(&prompt, None, &StreamOptions::new().parsing(parsing)),
        Status::InvalidArgument,
        "stop_sequences[1]: contains a NUL byte",
    );
    if let Some(path) = common::asset(common::V4_TOKENIZER) {
        let tok = Tokenizer::load(path).unwrap();
        let mut s = ResponseStream::new(&prompt, Some(&tok), &StreamOptions::new()).unwrap();
        assert_err(s.push_tokens(&[1, i32::MAX]), Status::InvalidArgument, "");
        s.push_tokens(&[tok.token_id("Hello").unwrap()]).unwrap();
    }
}

#[test]
fn log_sink_gets_the_engines_messages_and_its_panics_are_contained() {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    let engine = Engine::builder(tiny_model())
        .n_threads(2)
        .log(move |level, message| sink.lock().unwrap().push((level, message.to_string())))
        .build()
        .unwrap();
    let done = engine
        .submit(&Request::tokens(&[1, 2]).max_tokens(2))
        .unwrap()
        .wait()
        .done;
    assert!(done.is_ok());
    drop(engine);
    let lines = lines.lock().unwrap();
    let (level, first) = &lines[0];
    assert_eq!(*level, deepinfer::LogLevel::Info);
    assert!(
        first.starts_with("engine: ") && first.contains("vocabulary 512"),
        "{}",
        first
    );
    // a sink that panics: the panic stays in the sink, the engine works
    let engine = Engine::builder(tiny_model())
        .log(|_, _| panic!("log panic"))
        .build()
        .unwrap();
    assert!(engine
        .submit(&Request::tokens(&[1]).max_tokens(1))
        .unwrap()
        .wait()
        .done
        .is_ok());
}
