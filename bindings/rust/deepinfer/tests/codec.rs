//! The tokenizer and the codec for hosts with their own inference, against the
//! committed llama.cpp fixture and the `deepinfer render` / `parse` commands
//! (whose output the C tests hold to deepseek-recipe).

mod common;

use deepinfer::{
    Codec, Encode, Encoding, FinishReason, Parsing, Protocol, ResponseStream, StreamEvent,
    StreamOptions, Tokenizer,
};

#[test]
fn smollm2_tokenizer_equals_llama_cpp() {
    let path = match common::asset(common::SMOL) {
        Some(p) => p,
        None => return,
    };
    let tok = Tokenizer::load(path).unwrap();
    let fixture = common::smol_fixture();
    assert_eq!(tok.vocab_size() as i64, fixture.get("n_vocab").as_i64());
    for case in fixture.get("cases").as_array() {
        let text = case.get("text").as_str().unwrap();
        let flags = if text.contains("<|im_start|>") {
            Encode::SPECIAL
        } else {
            Encode::PLAIN
        };
        assert_eq!(
            tok.encode(text, flags).unwrap(),
            common::ids(case.get("prompt"))
        );
        let greedy = common::ids(case.get("greedy"));
        // llama.cpp detokenizes with special=false: control tokens give no text
        assert_eq!(
            tok.decode(&greedy, true).unwrap(),
            case.get("greedy_text").as_str().unwrap()
        );
        // the streaming detokenizer joins to the same text
        let mut d = tok.detokenizer(true).unwrap();
        let mut joined = String::new();
        for &id in &greedy {
            joined += d.push(id).unwrap();
        }
        joined += d.flush().unwrap();
        assert_eq!(joined, case.get("greedy_text").as_str().unwrap());
    }
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
    assert_eq!(tok.token_id("no such token at all"), None);
}

#[test]
fn tokenizer_is_shared_across_threads() {
    let tok = Tokenizer::from_json(include_str!("data/tiny_tokenizer.json")).unwrap();
    let want = tok.encode("hi hi hi", Encode::PLAIN).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| assert_eq!(tok.encode("hi hi hi", Encode::PLAIN).unwrap(), want));
        }
    });
    assert_eq!(tok.decode(&want, false).unwrap(), "hi hi hi");
}

fn request_path() -> std::path::PathBuf {
    common::repo_root().join("examples/requests/chat_tool.json")
}

#[test]
fn render_equals_deepinfer_render() {
    let (tok_path, cli) = match (common::asset(common::V4_TOKENIZER), common::cli()) {
        (Some(t), Some(c)) => (t, c),
        _ => return,
    };
    let req = request_path();
    let body = std::fs::read_to_string(&req).unwrap();
    let tok = Tokenizer::load(&tok_path).unwrap();
    for (enc, name) in [(Encoding::Dsv4, "dsv4"), (Encoding::Dsv41, "dsv41")] {
        let codec = Codec::new(Some(&tok), enc).unwrap();
        let prompt = codec.render(Protocol::Chat, &body).unwrap();
        let text = common::run(
            &cli,
            &[
                "render",
                "--protocol",
                "chat",
                "--encoding",
                name,
                req.to_str().unwrap(),
            ],
        );
        assert_eq!(prompt.text(), text);
        if enc == Encoding::Dsv41 {
            // the V4 tokenizer lacks V4.1's <｜System｜>, as the command says too
            let e = prompt.tokens().unwrap_err();
            assert_eq!(e.status(), deepinfer::Status::Unsupported);
            assert!(e.message().contains("<｜System｜>"), "{}", e.message());
            continue;
        }
        let ids = common::run(
            &cli,
            &[
                "render",
                "--protocol",
                "chat",
                "--encoding",
                name,
                "--tokenizer",
                tok_path.to_str().unwrap(),
                "--tokens",
                req.to_str().unwrap(),
            ],
        );
        let want = common::ids(&common::json::parse(ids.trim()).unwrap());
        assert_eq!(prompt.tokens().unwrap(), &want[..]);
        assert_eq!(tok.decode(&want, false).unwrap(), prompt.text());
    }
}

#[test]
fn response_stream_equals_deepinfer_parse() {
    let (tok_path, cli) = match (common::asset(common::V4_TOKENIZER), common::cli()) {
        (Some(t), Some(c)) => (t, c),
        _ => return,
    };
    let req = request_path();
    let out_path = common::repo_root().join("examples/requests/chat_tool_output.json");
    let output = common::json::parse(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    let tok = Tokenizer::load(&tok_path).unwrap();
    let codec = Codec::new(Some(&tok), Encoding::Dsv4).unwrap();
    let prompt = codec
        .render(Protocol::Chat, &std::fs::read_to_string(&req).unwrap())
        .unwrap();
    let args = [
        "parse",
        "--protocol",
        "chat",
        "--request",
        req.to_str().unwrap(),
        "--tokenizer",
        tok_path.to_str().unwrap(),
        "--id",
        "chatcmpl-rust",
        "--created",
        "1700000000",
        "--stream",
        out_path.to_str().unwrap(),
    ];
    let want = common::run(&cli, &args);

    let opts = StreamOptions::new()
        .response_id("chatcmpl-rust")
        .created(1700000000);
    let mut s = ResponseStream::new(&prompt, Some(&tok), &opts).unwrap();
    let mut sse = String::new();
    s.ready(
        output.get("prompt_tokens").as_i64() as u32,
        output.get("prompt_cache_hit_tokens").as_i64() as u32,
        None,
    )
    .unwrap();
    sse.extend(s.chunks().map(|c| c.sse.into_owned()));
    let (mut reasoning, mut args_text, mut calls) = (String::new(), String::new(), Vec::new());
    for chunk in output.get("chunks").as_array() {
        s.push_text(chunk.as_str().unwrap(), 1).unwrap();
        for ev in s.events() {
            match ev {
                StreamEvent::Reasoning(t) => reasoning.push_str(t),
                StreamEvent::ToolCallArguments { delta, .. } => args_text.push_str(delta),
                StreamEvent::ToolCallEnd {
                    name, arguments, ..
                } => calls.push((name.to_string(), arguments.to_string())),
                _ => {}
            }
        }
        sse.extend(s.chunks().map(|c| c.sse.into_owned()));
    }
    s.finish(FinishReason::Stop).unwrap();
    assert!(s.events().any(|e| e == StreamEvent::Finish("tool_calls")));
    sse.extend(s.chunks().map(|c| c.sse.into_owned()));
    assert!(s.is_finished());
    assert_eq!(common::normalize(&sse), common::normalize(&want));
    assert_eq!(
        reasoning,
        "The user wants the current weather in Paris. I should call get_weather."
    );
    assert_eq!(calls, vec![("get_weather".to_string(), args_text.clone())]);
    let args = common::json::parse(&args_text).unwrap();
    assert_eq!(args.get("city").as_str(), Some("Paris"));
    let (completion, reasoning_tokens) = s.usage();
    assert_eq!(completion as usize, output.get("chunks").as_array().len());
    assert!(reasoning_tokens > 0);
    let resp = common::json::parse(s.response_json().unwrap()).unwrap();
    assert_eq!(resp.get("id").as_str(), Some("chatcmpl-rust"));
    assert_eq!(
        resp.get("choices").at(0).get("finish_reason").as_str(),
        Some("tool_calls")
    );
}

#[test]
fn parsing_override_replaces_what_the_request_implies() {
    let codec = Codec::new(None, Encoding::ChatMl).unwrap();
    let prompt = codec
        .render(
            Protocol::Chat,
            r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#,
        )
        .unwrap();
    let mut parsing = Parsing::from_prompt(&prompt).unwrap();
    assert!(parsing.stop_sequences.is_empty());
    parsing.stop_sequences.push("###".into());
    let mut s = ResponseStream::new(&prompt, None, &StreamOptions::new().parsing(parsing)).unwrap();
    s.push_text("one ### two", 3).unwrap();
    assert!(s.is_finished());
    assert_eq!(s.stop_sequence(), Some("###"));
    let text: String = s
        .events()
        .filter_map(|e| match e {
            StreamEvent::Text(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(text, "one ");
}
