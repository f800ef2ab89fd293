//! Log probabilities and Chat `n` > 1 choices through the safe API, each
//! against an independent oracle: transformers' logits of the committed tiny
//! checkpoint (log-softmaxed here, in f64), and the protocol JSON the C library
//! wrote (chunks and the complete response) plus separately seeded n = 1
//! requests.

mod common;

use common::json;
use deepinfer::{Engine, Event, Request, Status};

const TINY: &str = "tests/fixtures/model/qwen2-tied-f16";

fn log_softmax(row: &[f32]) -> Vec<f64> {
    let mx = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let sum: f64 = row.iter().map(|&x| (x as f64 - mx).exp()).sum();
    row.iter().map(|&x| x as f64 - mx - sum.ln()).collect()
}

#[test]
fn token_logprobs_equal_transformers_log_softmax() {
    let dir = common::repo_root().join(TINY);
    let reference = json::parse(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
        .expect("reference.json parses");
    let prompt = common::ids(reference.get("prompt"));
    let greedy: Vec<i32> = common::ids(reference.get("greedy"))[..8].to_vec();
    let shape = reference.get("sequence_logits_shape");
    let vocab = shape.at(1).as_i64() as usize;
    let raw = std::fs::read(dir.join("sequence_logits.f32")).unwrap();
    assert_eq!(raw.len(), shape.at(0).as_i64() as usize * vocab * 4);
    let row = |r: usize| -> Vec<f32> {
        raw[r * vocab * 4..(r + 1) * vocab * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    let engine = Engine::builder(&dir)
        .n_threads(2)
        .build()
        .expect("tiny loads");
    let req = Request::tokens(&prompt)
        .temperature(0.0)
        .max_tokens(greedy.len() as u64)
        .ignore_eos(true)
        .logprobs(true)
        .top_logprobs(20);
    let c = engine.submit(&req).unwrap().wait().into_result().unwrap();
    assert_eq!(c.tokens, greedy);
    assert_eq!(c.choices.len(), 1);
    let lps = c.choices[0].logprobs.as_ref().expect("logprobs asked for");
    let tops = c.choices[0]
        .top_logprobs
        .as_ref()
        .expect("top_logprobs asked for");
    assert_eq!((lps.len(), tops.len()), (greedy.len(), greedy.len()));
    let mut worst = 0f64;
    for (k, &tok) in greedy.iter().enumerate() {
        let want = log_softmax(&row(prompt.len() - 1 + k));
        worst = worst.max((lps[k] as f64 - want[tok as usize]).abs());
        assert_eq!(tops[k].len(), 20);
        assert_eq!(tops[k][0].0, tok, "greedy: the most likely token first");
        for (j, &(id, lp)) in tops[k].iter().enumerate() {
            worst = worst.max((lp as f64 - want[id as usize]).abs());
            if j > 0 {
                assert!(lp <= tops[k][j - 1].1);
            }
        }
        let last = tops[k][19].1 as f64;
        assert!(want.iter().filter(|&&w| w > last + 1e-3).count() <= 19);
    }
    assert!(worst < 2e-3, "max |deepinfer - transformers| = {}", worst);

    // not asked for: none; the errors are the library's, named
    let plain = engine
        .submit(&Request::tokens(&prompt).max_tokens(2))
        .unwrap();
    for ev in plain {
        if let Event::Tokens(t) = ev {
            assert!(t.logprobs.is_none() && t.top_logprobs.is_none());
            assert_eq!(t.choice_index, 0);
        }
    }
    let e = engine
        .submit(&Request::tokens(&prompt).logprobs(true).top_logprobs(21))
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("top_logprobs"), "{}", e);
    let e = engine
        .submit(&Request::tokens(&prompt).json_schema("{\"type\":\"x\0\"}"))
        .unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(
        e.message().contains("json_schema: contains a NUL byte"),
        "{}",
        e
    );
}

fn chat_body(n: u32, seed: u32, extra: &str) -> String {
    format!(
        r#"{{"model": "m", "n": {}, "seed": {}, "temperature": 1.2, "max_tokens": 10,{} "messages": [{{"role": "user", "content": "Name a fruit."}}]}}"#,
        n, seed, extra
    )
}

#[test]
fn chat_choices_carry_choice_index_and_logprobs() {
    let path = match common::asset(common::SMOL) {
        Some(p) => p,
        None => return,
    };
    let engine = Engine::builder(&path)
        .n_threads(2)
        .max_running(8)
        .build()
        .unwrap();
    let body = chat_body(
        3,
        11,
        r#" "stream": true, "logprobs": true, "top_logprobs": 2,"#,
    );
    let c = engine
        .submit(&Request::chat(&body))
        .unwrap()
        .wait()
        .into_result()
        .unwrap();
    // every chunk's choice_index is the index its JSON names
    let mut texts = vec![String::new(); 3];
    for ch in &c.chunks {
        let v = match &ch.json {
            Some(j) => json::parse(j).unwrap(),
            None => continue,
        };
        let choices = v.get("choices").as_array();
        if choices.is_empty() {
            assert_eq!(ch.choice_index, 0, "the usage chunk");
            continue;
        }
        assert_eq!(choices.len(), 1);
        let choice = &choices[0];
        assert_eq!(choice.get("index").as_i64(), ch.choice_index as i64);
        if let Some(t) = choice.get("delta").get("content").as_str() {
            texts[ch.choice_index as usize].push_str(t);
        }
    }
    assert_eq!(c.choices.len(), 3);
    for (i, ch) in c.choices.iter().enumerate() {
        assert_eq!(ch.index as usize, i);
        assert_eq!(ch.text, texts[i], "choice {}: Text events vs its chunks", i);
        let lps = ch.logprobs.as_ref().expect("Chat logprobs");
        assert_eq!(lps.len(), ch.tokens.len());
        assert_eq!(ch.top_logprobs.as_ref().unwrap().len(), ch.tokens.len());
    }
    assert_eq!(c.text, c.choices[0].text);
    // choice i equals an n = 1 request seeded 11 + i, and its response's
    // logprobs are the same values
    for i in 0..3u32 {
        let one = engine
            .submit(&Request::chat(&chat_body(
                1,
                11 + i,
                r#" "logprobs": true,"#,
            )))
            .unwrap()
            .wait()
            .into_result()
            .unwrap();
        let mine = &c.choices[i as usize];
        assert_eq!(one.tokens, mine.tokens, "choice {}", i);
        let resp = json::parse(one.done.response_json.as_deref().unwrap()).unwrap();
        let entries = resp.get("choices").at(0).get("logprobs").get("content");
        let entries = entries.as_array();
        assert!(!entries.is_empty());
        let lps = mine.logprobs.as_ref().unwrap();
        for (k, e) in entries.iter().enumerate() {
            let want = match e.get("logprob") {
                json::Value::Number(x) => *x,
                other => panic!("logprob: {:?}", other),
            };
            assert!(
                (lps[k] as f64 - want).abs() < 1e-5,
                "choice {} token {}",
                i,
                k
            );
        }
    }
}
