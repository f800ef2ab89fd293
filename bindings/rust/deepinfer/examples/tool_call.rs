//! An agent loop: the model calls a local tool (`get_weather`), the result goes
//! back into the conversation, and the model answers in text.
//!
//!     cargo run --example tool_call -- [MODEL.gguf]
//!
//! A 135M model seldom calls a tool unasked, so the first request names the
//! function in `tool_choice`: the prompt writes its name, the model its arguments.

use deepinfer::{Engine, Event, Request};

const TOOLS: &str = r#"[{"type": "function", "function": {"name": "get_weather",
  "description": "Get the current weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]"#;

fn default_model() -> std::path::PathBuf {
    let assets = std::env::var_os("DI_ASSET_DIR")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/deepinfer/assets")
        });
    assets.join("smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The local tool: a real host would look the city up.
fn get_weather(arguments: &str) -> String {
    format!("sunny, 24 C (asked with {})", arguments)
}

fn json_string(s: &str) -> String {
    format!(
        "\"{}\"",
        s.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    )
}

fn main() -> deepinfer::Result<()> {
    let model = std::env::args()
        .nth(1)
        .map(Into::into)
        .unwrap_or_else(default_model);
    let engine = Engine::builder(&model).n_threads(2).build()?;
    let user = r#"{"role": "user", "content": "What is the weather in London?"}"#;
    let first = format!(
        r#"{{"model": "smollm2", "temperature": 0, "max_tokens": 64, "tools": {},
            "tool_choice": {{"type": "function", "function": {{"name": "get_weather"}}}},
            "messages": [{}]}}"#,
        TOOLS, user
    );
    let mut calls = Vec::new();
    for event in engine.submit(&Request::chat(&first))? {
        match event {
            Event::ToolCallDelta(d) => eprint!("{}", d.arguments_delta),
            Event::ToolCall(call) => calls.push(call),
            Event::Done(done) => done.to_result()?,
            _ => {}
        }
    }
    eprintln!();
    let call = calls.first().expect("the named tool is called");
    let result = get_weather(&call.arguments);
    println!(
        "model called {}({}) -> {}",
        call.name, call.arguments, result
    );

    let second = format!(
        r#"{{"model": "smollm2", "temperature": 0, "max_tokens": 48, "tools": {},
            "messages": [{},
              {{"role": "assistant", "content": null, "tool_calls": [{{"id": {}, "type": "function",
                "function": {{"name": {}, "arguments": {}}}}}]}},
              {{"role": "tool", "tool_call_id": {}, "content": {}}}]}}"#,
        TOOLS,
        user,
        json_string(&call.id),
        json_string(&call.name),
        json_string(&call.arguments),
        json_string(&call.id),
        json_string(&result)
    );
    let answer = engine
        .submit(&Request::chat(&second))?
        .wait()
        .into_result()?;
    println!("answer: {}", answer.text);
    Ok(())
}
