//! The codec for a host with its own inference, no model loaded: a Chat
//! Completions request rendered into the exact DeepSeek V4 prompt, and a
//! model's answer (reasoning, then a DSML tool call) pushed through a response
//! stream into the Chat Completions SSE chunks a server sends.
//!
//!     cargo run --example codec

use deepinfer::{
    Codec, Encoding, FinishReason, Protocol, ResponseStream, StreamEvent, StreamOptions,
};

const REQUEST: &str = r#"{"model": "DeepSeek-V4-Pro", "stream": true,
  "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
  "tools": [{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}"#;

/// What a DeepSeek V4 model might generate, one backend output per piece.
const OUTPUT: &[&str] = &[
    "The user wants",
    " the weather.",
    "</think>",
    "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n",
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n",
    "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
];

fn main() -> deepinfer::Result<()> {
    let codec = Codec::new(None, Encoding::Dsv4)?; // Codec::new(Some(&tokenizer), …) also gives ids
    let prompt = codec.render(Protocol::Chat, REQUEST)?;
    println!(
        "== prompt ({} bytes, thinking: {}):\n{}\n",
        prompt.text().len(),
        prompt.thinking(),
        prompt.text()
    );

    let opts = StreamOptions::new()
        .response_id("chatcmpl-example")
        .created(1_700_000_000)
        .seed(1);
    let mut stream = ResponseStream::new(&prompt, None, &opts)?;
    println!("== SSE:");
    stream.ready(42, 0, None)?;
    stream.chunks().for_each(|c| print!("{}", c.sse));
    for piece in OUTPUT {
        stream.push_text(piece, 1)?;
        for ev in stream.events() {
            if let StreamEvent::ToolCallEnd {
                name, arguments, ..
            } = ev
            {
                eprintln!("(parsed tool call: {}({}))", name, arguments);
            }
        }
        stream.chunks().for_each(|c| print!("{}", c.sse));
    }
    stream.finish(FinishReason::Stop)?;
    stream.chunks().for_each(|c| print!("{}", c.sse));
    println!("== response:\n{}", stream.response_json().unwrap_or(""));
    Ok(())
}
