//! Stream a Chat Completions answer: text as it is generated, then the finish
//! reason and usage.
//!
//!     cargo run --example chat -- [MODEL.gguf] ["question"]
//!
//! MODEL defaults to SmolLM2 as scripts/fetch_assets.py caches it.

use std::io::Write;

use deepinfer::{Engine, Event, Request};

fn default_model() -> std::path::PathBuf {
    let assets = std::env::var_os("DI_ASSET_DIR")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/deepinfer/assets")
        });
    assets.join("smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn main() -> deepinfer::Result<()> {
    let mut args = std::env::args().skip(1);
    let model = args.next().map(Into::into).unwrap_or_else(default_model);
    let question = args
        .next()
        .unwrap_or_else(|| "What is the capital of France?".to_string());
    let engine = Engine::builder(&model).n_threads(2).build()?;
    // the body is JSON; escape the question as a JSON string
    let q = question
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    let body = format!(
        r#"{{"model": "smollm2", "max_tokens": 64, "temperature": 0, "stream": true,
            "messages": [{{"role": "user", "content": "{}"}}]}}"#,
        q
    );
    let mut out = std::io::stdout();
    for event in engine.submit(&Request::chat(&body))? {
        match event {
            Event::Reasoning(t) | Event::Text(t) => {
                out.write_all(t.as_bytes()).ok();
                out.flush().ok();
            }
            Event::Done(done) => {
                done.to_result()?;
                println!(
                    "\n[{} — {} prompt tokens, {} generated]",
                    done.finish_text.as_deref().unwrap_or("?"),
                    done.usage.prompt_tokens,
                    done.usage.completion_tokens
                );
            }
            _ => {}
        }
    }
    Ok(())
}
