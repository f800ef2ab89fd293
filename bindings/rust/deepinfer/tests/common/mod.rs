//! Shared by the integration tests: where the model, the fixtures and the
//! `deepinfer` command are, a small JSON reader, and normalising the random
//! parts (ids, times) of protocol output.
//!
//! Environment (the Python binding's tests use the same):
//!   DI_ASSET_DIR     the asset folder (scripts/fetch_assets.py --asset-dir); else
//!                    $DI_CACHE/assets or ~/.cache/deepinfer/assets
//!   DEEPINFER_CLI    the `deepinfer` command of the library under test (the oracle
//!                    of `generate`, `run`, `render`, `parse`); else
//!                    `$(pkg-config --variable=prefix deepinfer)/bin/deepinfer`
//!   DI_REQUIRE_ASSETS=1  a missing model or command fails the test instead of
//!                    skipping it (scripts/test.sh sets it)

#![allow(dead_code)]

pub mod json;

use std::path::{Path, PathBuf};
use std::process::Command;

pub const SMOL: &str = "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const V4_TOKENIZER: &str = "deepseek-v4/tokenizer.json";

/// The repository's root (the tests live in bindings/rust/deepinfer/tests).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn asset_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DI_ASSET_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("DI_CACHE") {
        return PathBuf::from(d).join("assets");
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
        });
    cache.join("deepinfer").join("assets")
}

fn missing(what: &str) -> Option<PathBuf> {
    if std::env::var("DI_REQUIRE_ASSETS")
        .map(|v| v == "1")
        .unwrap_or(false)
    {
        panic!("{} is missing and DI_REQUIRE_ASSETS=1", what);
    }
    eprintln!("skipped: {} is missing (scripts/fetch_assets.py)", what);
    None
}

/// An asset's path, or `None` (the test skips) when it was not fetched.
pub fn asset(rel: &str) -> Option<PathBuf> {
    let p = asset_dir().join(rel);
    if p.is_file() {
        Some(p)
    } else {
        missing(&format!("asset {}", p.display()))
    }
}

/// The `deepinfer` command, or `None` (the test skips).
pub fn cli() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("DEEPINFER_CLI") {
        return Some(PathBuf::from(p));
    }
    let out = Command::new("pkg-config")
        .args(["--variable=prefix", "deepinfer"])
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("bin/deepinfer");
    if p.is_file() {
        Some(p)
    } else {
        missing("the deepinfer command (DEEPINFER_CLI)")
    }
}

/// Runs the command; its stdout (panics, with stderr, when it fails).
pub fn run(cmd: &Path, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .expect("run the deepinfer command");
    assert!(
        out.status.success(),
        "{} {:?} failed: {}",
        cmd.display(),
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// A file in a fresh temporary folder of this test process.
pub fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("deepinfer-rust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, contents).unwrap();
    p
}

/// The committed llama.cpp fixture of SmolLM2: prompts and greedy ids.
pub fn smol_fixture() -> json::Value {
    let p = repo_root().join("tests/fixtures/model/gguf/smollm2-135m-instruct.json");
    json::parse(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The ids of a JSON array of integers.
pub fn ids(v: &json::Value) -> Vec<i32> {
    v.as_array().iter().map(|x| x.as_i64() as i32).collect()
}

/// Protocol output with its random and clock-dependent parts replaced: the
/// response id (the first `"id":"…"` value), tool-call ids (`call_NN_…`) and
/// `created` / `created_at` / `completed_at` times.
pub fn normalize(s: &str) -> String {
    let mut out = s.to_string();
    if let Some(i) = out.find("\"id\":\"") {
        let start = i + 6;
        let end = start + out[start..].find('"').unwrap();
        let id = out[start..end].to_string();
        if !id.starts_with("call_") {
            out = out.replace(&id, "RESPONSE_ID");
        }
    }
    for key in ["\"created\":", "\"created_at\":", "\"completed_at\":"] {
        out = replace_numbers_after(&out, key);
    }
    replace_call_ids(&out)
}

fn replace_numbers_after(s: &str, key: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(key) {
        out.push_str(&rest[..i + key.len()]);
        rest = &rest[i + key.len()..];
        let n = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
        if n > 0 {
            out.push('0');
            rest = &rest[n..];
        }
    }
    out.push_str(rest);
    out
}

fn replace_call_ids(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("call_") {
        out.push_str(&rest[..i]);
        out.push_str("call_ID");
        rest = &rest[i + 5..];
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        rest = &rest[n..];
    }
    out.push_str(rest);
    out
}
