//! A frame loop that owns its threading: a request streams through a callback
//! run inside `Engine::poll` once per frame, a second one is iterated on
//! another thread, and both are cancelled mid-stream — the iterated one from
//! the frame loop, through a `Canceller`.
//!
//!     cargo run --example cancel -- [MODEL.gguf]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deepinfer::{Encode, Engine, Event, Request};

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
    let model = std::env::args()
        .nth(1)
        .map(Into::into)
        .unwrap_or_else(default_model);
    let engine = Engine::builder(&model).n_threads(2).build()?;
    let prompt = engine
        .tokenizer()
        .expect("a tokenizer")
        .encode("Once upon a time", Encode::PLAIN)?;
    let story = Request::tokens(&prompt)
        .max_tokens(2000)
        .temperature(0.8)
        .seed(7);

    // the iterated request, on its own thread
    let mut handle = engine.submit(&story)?;
    let canceller = handle.canceller();
    let reader = std::thread::spawn(move || {
        let mut n = 0;
        let status = loop {
            match handle.next() {
                Some(Event::Tokens(t)) => n += t.len(),
                Some(Event::Done(d)) => break d.status,
                Some(_) => {}
                None => unreachable!("the Done comes last"),
            }
        };
        (n, status)
    });

    // the callback request, driven by a 60 Hz frame loop
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    let game = engine.submit_with_callback(&story.clone().seed(8), move |ev| {
        if let Event::Text(t) = ev {
            sink.lock().unwrap().push_str(&t); // borrowed from the engine for this call
        }
    })?;
    let start = Instant::now();
    let mut frames = 0;
    while !game.is_done() {
        let frame = Instant::now();
        // Err while the reader thread polls: its poll delivers our events too
        let _ = engine.poll(Some(Duration::ZERO));
        frames += 1;
        if frames == 30 {
            game.cancel()?;
            canceller.cancel()?;
        }
        std::thread::sleep(Duration::from_millis(16).saturating_sub(frame.elapsed()));
    }
    let (n, status) = reader.join().unwrap();
    println!(
        "frame loop: {} frames in {:.2} s, then cancelled; it streamed {:?}…",
        frames,
        start.elapsed().as_secs_f64(),
        text.lock().unwrap().chars().take(60).collect::<String>()
    );
    println!("reader thread: {} tokens, then {}", n, status);
    Ok(())
}
