//! Stream a Chat Completions answer: text as it is generated, then the finish
//! reason and usage. `--logprobs` also prints each generated token's log
//! probability (and its two likeliest alternatives); `--n N` asks for N
//! choices (sampled, seed 1) and prints each one's text by `choice_index`.
//!
//!     cargo run --example chat -- [--logprobs] [--n N] [MODEL.gguf] ["question"]
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
    let mut logprobs = false;
    let mut n = 1u32;
    let mut rest = Vec::new();
    let mut argv = std::env::args().skip(1);
    while let Some(a) = argv.next() {
        match a.as_str() {
            "--logprobs" => logprobs = true,
            "--n" => n = argv.next().and_then(|v| v.parse().ok()).unwrap_or(1),
            _ => rest.push(a),
        }
    }
    let mut args = rest.into_iter();
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
    // greedy for one choice; n > 1 samples (seeded), or every choice is the same
    let sampling = if n > 1 {
        format!(r#""n": {}, "seed": 1, "temperature": 0.8"#, n)
    } else {
        r#""temperature": 0"#.to_string()
    };
    let scores = if logprobs {
        r#""logprobs": true, "top_logprobs": 2,"#
    } else {
        ""
    };
    let body = format!(
        r#"{{"model": "smollm2", "max_tokens": 64, {}, {} "stream": true,
            "messages": [{{"role": "user", "content": "{}"}}]}}"#,
        sampling, scores, q
    );
    let tokenizer = engine.tokenizer();
    let mut out = std::io::stdout();
    let mut choices = vec![String::new(); n as usize];
    for event in engine.submit(&Request::chat(&body))? {
        match event {
            // several choices interleave: keep each one's text, print at the end
            Event::Reasoning(t) | Event::Text(t) if n > 1 => {
                choices[t.choice_index as usize].push_str(&t);
            }
            Event::Reasoning(t) | Event::Text(t) => {
                out.write_all(t.as_bytes()).ok();
                out.flush().ok();
            }
            Event::Tokens(t) if logprobs => {
                let (lps, tops) = (t.logprobs.as_deref(), t.top_logprobs.as_deref());
                for (i, id) in t.iter().enumerate() {
                    let piece = tokenizer.map(|k| k.decode(&[*id], false).unwrap_or_default());
                    eprintln!(
                        "[choice {} token {} {:?}: logprob {:.3}, likeliest {:?}]",
                        t.choice_index,
                        id,
                        piece.unwrap_or_default(),
                        lps.map_or(f32::NAN, |l| l[i]),
                        tops.map(|t| t[i].clone()).unwrap_or_default()
                    );
                }
            }
            Event::Done(done) => {
                done.to_result()?;
                for (i, text) in choices.iter().enumerate().filter(|_| n > 1) {
                    println!("[choice {}] {}", i, text);
                }
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
