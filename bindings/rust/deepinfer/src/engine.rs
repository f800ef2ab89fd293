//! `Engine` (`di_engine_*`, `di_submit`, `di_poll`, `di_cancel`) and the handles
//! of submitted requests.
//!
//! How events travel: every request gets a channel in the engine's state, keyed
//! before `di_submit` so that an event another thread delivers before
//! `di_submit` returns still finds it. `di_poll` runs on one thread at a time:
//! a thread that wants an event takes the *poller* role when nobody holds it,
//! polls for at most `POLL_MS`, and wakes the others, who find their events
//! queued. Callback requests get their events inside that poll, borrowed.
//! Dropping the engine waits for the poller and for cancels in flight, then
//! `di_engine_destroy` delivers every remaining terminal event.

use std::any::Any;
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::ops::ControlFlow;
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::io::RawFd;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use deepinfer_sys as sys;

use crate::codec::Encoding;
use crate::error::{check, Error, Result, Status};
use crate::event::{Chunk, Done, Event, ToolCall, Usage};
use crate::request::Request;
use crate::tokenizer::Tokenizer;
use crate::util::{cstring, ctext, path_cstring, text};

/// How long a thread waiting for its request's events sits in one `di_poll`
/// (milliseconds): the longest a dropped engine waits for a poller.
const POLL_MS: i32 = 100;

mod callback_thread {
    // Clippy 1.63 takes thread_local!'s const initialiser for an interior
    // mutable const (a false positive fixed later).
    #![allow(clippy::declare_interior_mutable_const)]
    use std::cell::Cell;

    thread_local! {
        /// The engine whose request callback runs on this thread (inside its
        /// di_poll), or NULL.
        pub(super) static IN_CALLBACK: Cell<*const super::Inner> =
            const { Cell::new(std::ptr::null()) };
    }
}
use callback_thread::IN_CALLBACK;

/// `true` inside a request callback of `inner`'s engine on this thread.
fn in_callback(inner: &Inner) -> bool {
    IN_CALLBACK.with(|c| ptr::eq(c.get(), inner))
}

/// A compute device (`di_device`).
///
/// ```
/// assert_eq!(deepinfer::Device::default(), deepinfer::Device::Cpu);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU backend.
    #[default]
    Cpu,
    /// An NVIDIA GPU (Hopper or newer) through the module libdeepinfer-cuda.so: dense
    /// Llama/Qwen2 models only, not yet run on a GPU; `Unsupported` naming why where
    /// it cannot run (docs/cuda.md).
    Cuda,
}

/// The drafter of speculative decoding (`di_draft`; docs/speculative.md).
///
/// ```
/// assert_eq!(deepinfer::Draft::default(), deepinfer::Draft::Auto);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Draft {
    /// A draft model when [`EngineBuilder::draft_model_path`] is set (or, an
    /// MTP or DSpark GGUF there, the layer or head it holds), else the model's
    /// MTP module or DSpark head when it has one, else prompt lookup.
    #[default]
    Auto,
    /// Prompt lookup: the longest recent n-gram of the request's tokens that
    /// occurred before, and what followed it.
    PromptLookup,
    /// A separate draft model sharing the tokenizer
    /// ([`EngineBuilder::draft_model_path`]), or llama.cpp's MTP or DSpark
    /// GGUF of a DeepSeek-V4 GGUF model there.
    DraftModel,
    /// The model's own extra layers: DeepSeek-V3's MTP (NextN) module,
    /// DeepSeek-V4's MTP layer, or DeepSeek-V4-Flash-DSpark's DSpark head
    /// (a block of drafts a step); `Unsupported` at build for a model without
    /// one.
    Mtp,
}

/// The KV cache's storage type (`di_kv_cache_type`; llama.cpp's
/// `--cache-type-k`/`--cache-type-v`, the CLI's `--kv-cache-type`), the same for
/// keys and values.
///
/// ```
/// assert_eq!(deepinfer::KvCacheType::default(), deepinfer::KvCacheType::F16);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvCacheType {
    /// f16, 2 bytes a value (llama.cpp's default).
    #[default]
    F16,
    /// f32, 4 bytes a value.
    F32,
    /// ggml's Q8_0: blocks of 32 values, an f16 scale and 32 int8 (34 bytes:
    /// 0.53 of f16).
    Q8_0,
    /// ggml's Q4_0: blocks of 32 values, an f16 scale and 32 4-bit values (18
    /// bytes: 0.28 of f16).
    Q4_0,
}

/// The severity of a log message (`di_log_level`).
///
/// ```
/// assert!(deepinfer::LogLevel::Error < deepinfer::LogLevel::Debug);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `DI_LOG_ERROR`.
    Error,
    /// `DI_LOG_WARN`.
    Warn,
    /// `DI_LOG_INFO`.
    Info,
    /// `DI_LOG_DEBUG`.
    Debug,
}

type LogFn = dyn Fn(LogLevel, &str) + Send + Sync;
type ProgressFn<'p> = dyn FnMut(f32) -> ControlFlow<()> + 'p;
type Callback = Box<dyn FnMut(Event<'_>) + Send>;

/// The settings of an engine (`di_engine_config`); [`Engine::builder`] makes
/// one. Unset settings keep the library's defaults.
///
/// ```no_run
/// use deepinfer::Engine;
/// let engine = Engine::builder("SmolLM2-135M-Instruct.Q4_1.gguf")
///     .n_threads(2)
///     .max_running(8)
///     .n_ctx(2048)
///     .progress(|fraction| {
///         eprint!("\rloading {:3.0}%", fraction * 100.0);
///         std::ops::ControlFlow::Continue(())
///     })
///     .build()?;
/// # Ok::<(), deepinfer::Error>(())
/// ```
pub struct EngineBuilder<'p> {
    model_path: PathBuf,
    tokenizer_path: Option<PathBuf>,
    device: Device,
    encoding: Option<Encoding>,
    n_threads: u32,
    max_running: u32,
    n_ctx: u64,
    n_batch: u64,
    kv_cache_bytes: u64,
    kv_cache_type: KvCacheType,
    prefix_cache: bool,
    kv_host_cache_bytes: u64,
    kv_cache_dir: Option<PathBuf>,
    kv_disk_cache_bytes: u64,
    served_model_name: Option<String>,
    speculative_tokens: u32,
    speculative_fixed: bool,
    draft: Draft,
    draft_model_path: Option<PathBuf>,
    log: Option<Box<LogFn>>,
    progress: Option<Box<ProgressFn<'p>>>,
}

impl std::fmt::Debug for EngineBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("model_path", &self.model_path)
            .field("tokenizer_path", &self.tokenizer_path)
            .field("device", &self.device)
            .field("encoding", &self.encoding)
            .field("n_threads", &self.n_threads)
            .field("max_running", &self.max_running)
            .field("n_ctx", &self.n_ctx)
            .field("n_batch", &self.n_batch)
            .field("kv_cache_bytes", &self.kv_cache_bytes)
            .field("kv_cache_type", &self.kv_cache_type)
            .field("prefix_cache", &self.prefix_cache)
            .field("kv_host_cache_bytes", &self.kv_host_cache_bytes)
            .field("kv_cache_dir", &self.kv_cache_dir)
            .field("kv_disk_cache_bytes", &self.kv_disk_cache_bytes)
            .field("served_model_name", &self.served_model_name)
            .field("speculative_tokens", &self.speculative_tokens)
            .field("speculative_fixed", &self.speculative_fixed)
            .field("draft", &self.draft)
            .field("draft_model_path", &self.draft_model_path)
            .field("log", &self.log.is_some())
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

fn clamp_i32(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl<'p> EngineBuilder<'p> {
    /// The tokenizer: a tokenizer.json, a folder holding one, or a GGUF file
    /// (default: the model's own).
    ///
    /// ```no_run
    /// let b = deepinfer::Engine::builder("model/").tokenizer_path("model/tokenizer.json");
    /// ```
    pub fn tokenizer_path(mut self, path: impl AsRef<Path>) -> Self {
        self.tokenizer_path = Some(path.as_ref().to_path_buf());
        self
    }

    /// The compute device (default CPU).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").device(deepinfer::Device::Cpu);
    /// ```
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// The prompt encoding of protocol requests (default: the one the model
    /// declares; an encoding its tokenizer cannot render fails `build`).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").encoding(deepinfer::Encoding::ChatMl);
    /// ```
    pub fn encoding(mut self, encoding: Encoding) -> Self {
        self.encoding = Some(encoding);
        self
    }

    /// CPU threads of the forward pass, counting the worker (default: the CPUs
    /// online; at most 1024).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").n_threads(4);
    /// ```
    pub fn n_threads(mut self, n: u32) -> Self {
        self.n_threads = n;
        self
    }

    /// Requests computed together at most (default 16; at most 256 and at most
    /// n_batch).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").max_running(4);
    /// ```
    pub fn max_running(mut self, n: u32) -> Self {
        self.max_running = n;
        self
    }

    /// Tokens one sequence may hold, prompt and output (default: the model's
    /// training context, at most 4096).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").n_ctx(1024);
    /// ```
    pub fn n_ctx(mut self, n: u64) -> Self {
        self.n_ctx = n;
        self
    }

    /// Tokens one forward step takes at most (default 256).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").n_batch(128);
    /// ```
    pub fn n_batch(mut self, n: u64) -> Self {
        self.n_batch = n;
        self
    }

    /// The KV cache budget in bytes, shared by all requests (default: room for
    /// 4 sequences of n_ctx tokens).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").kv_cache_bytes(64 << 20);
    /// ```
    pub fn kv_cache_bytes(mut self, bytes: u64) -> Self {
        self.kv_cache_bytes = bytes;
        self
    }

    /// The KV cache's storage type (default [`KvCacheType::F16`]).
    /// [`KvCacheType::Q8_0`] and [`KvCacheType::Q4_0`] keep each token's keys
    /// and values in blocks of 32, quantized once when stored: the same
    /// [`kv_cache_bytes`](Self::kv_cache_bytes) holds 1.9x and 3.6x the tokens
    /// of f16, and long contexts read less memory per decoded token, at the
    /// cost of the rounding. They need a head dimension that is a multiple of
    /// 32 and the CPU (`Unsupported` at [`build`](Self::build) otherwise,
    /// naming the dimension); a draft model's cache has the same type.
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").kv_cache_type(deepinfer::KvCacheType::Q8_0);
    /// ```
    pub fn kv_cache_type(mut self, kv_cache_type: KvCacheType) -> Self {
        self.kv_cache_type = kv_cache_type;
        self
    }

    /// The prefix cache (default on): a prompt starting with full 16-token
    /// blocks an earlier request computed reuses them
    /// ([`Usage::prompt_cache_hit_tokens`] counts them); `false` prefills every
    /// prompt whole.
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").prefix_cache(false);
    /// ```
    pub fn prefix_cache(mut self, on: bool) -> Self {
        self.prefix_cache = on;
        self
    }

    /// The prefix cache's host tier: blocks evicted from the KV cache kept in
    /// memory compressed with zstd, up to this many bytes (default 0: none).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").kv_host_cache_bytes(256 << 20);
    /// ```
    pub fn kv_host_cache_bytes(mut self, bytes: u64) -> Self {
        self.kv_host_cache_bytes = bytes;
        self
    }

    /// The prefix cache's disk tier: a directory where computed blocks are kept
    /// across restarts and shared with other engines (default: none); an
    /// unusable directory is a log line, not an error.
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").kv_cache_dir("/tmp/kv");
    /// ```
    pub fn kv_cache_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.kv_cache_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// The name responses give as `model` (default: the model file's name
    /// without `.gguf`; the V4 encodings answer with the body's `model`).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").served_model_name("smol");
    /// ```
    pub fn served_model_name(mut self, name: &str) -> Self {
        self.served_model_name = Some(name.to_owned());
        self
    }

    /// Speculative decoding by prompt lookup: draft tokens each decoding
    /// request verifies per step at most (default 0: off; at most 64). The
    /// output is token for token the same; [`Usage::draft_tokens`] and
    /// [`Usage::accepted_draft_tokens`](crate::Usage::accepted_draft_tokens)
    /// count the drafts (docs/speculative.md).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").speculative_tokens(8);
    /// ```
    pub fn speculative_tokens(mut self, n: u32) -> Self {
        self.speculative_tokens = n;
        self
    }

    /// `false` (default): how many drafts a step verifies is chosen from each
    /// request's acceptance rate against the measured step time; `true`: every
    /// proposal (fixed-length drafting, as llama.cpp's lookup decoding).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").speculative_tokens(8).speculative_fixed(true);
    /// ```
    pub fn speculative_fixed(mut self, fixed: bool) -> Self {
        self.speculative_fixed = fixed;
        self
    }

    /// The drafter of speculative decoding (default [`Draft::Auto`]); used when
    /// [`speculative_tokens`](Self::speculative_tokens) is above 0.
    /// [`Draft::Mtp`] for a model without an MTP layer or DSpark head is `Unsupported` at
    /// [`build`](Self::build); [`Draft::DraftModel`] needs
    /// [`draft_model_path`](Self::draft_model_path) (`InvalidArgument`).
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m").speculative_tokens(4).draft(deepinfer::Draft::Mtp);
    /// ```
    pub fn draft(mut self, draft: Draft) -> Self {
        self.draft = draft;
        self
    }

    /// A draft model sharing the model's tokenizer (a .gguf file or Hugging
    /// Face folder), for [`Draft::Auto`] or [`Draft::DraftModel`]; needs
    /// [`speculative_tokens`](Self::speculative_tokens) above 0. Its load
    /// errors name `draft_model_path`.
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").speculative_tokens(4).draft_model_path("d.gguf");
    /// ```
    pub fn draft_model_path(mut self, path: impl AsRef<Path>) -> Self {
        self.draft_model_path = Some(path.as_ref().to_path_buf());
        self
    }

    /// The disk tier's budget in bytes (default 0: 4 GiB); over it the oldest
    /// files go.
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf").kv_disk_cache_bytes(1 << 30);
    /// ```
    pub fn kv_disk_cache_bytes(mut self, bytes: u64) -> Self {
        self.kv_disk_cache_bytes = bytes;
        self
    }

    /// A log sink, called from the engine's own threads as well as the host's,
    /// possibly at once (hence `Send + Sync`); it must not block for long. A
    /// panic in it is caught and dropped.
    ///
    /// ```
    /// let b = deepinfer::Engine::builder("m.gguf")
    ///     .log(|level, message| eprintln!("[{:?}] {}", level, message));
    /// ```
    pub fn log(mut self, f: impl Fn(LogLevel, &str) + Send + Sync + 'static) -> Self {
        self.log = Some(Box::new(f));
        self
    }

    /// A load-progress callback, called on the thread in [`EngineBuilder::build`]
    /// with a fraction in [0, 1]; `ControlFlow::Break(())` cancels the load
    /// (`build` then fails with `Cancelled`). A panic in it cancels the load and
    /// is resumed once `build` has cleaned up.
    ///
    /// ```
    /// use std::ops::ControlFlow;
    /// let b = deepinfer::Engine::builder("m.gguf").progress(|f| {
    ///     if f > 0.5 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    /// });
    /// ```
    pub fn progress(mut self, f: impl FnMut(f32) -> ControlFlow<()> + 'p) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    /// Loads the model and starts the engine (`di_engine_create`).
    ///
    /// Errors: `Io` / `ModelFormat` (the model or tokenizer file, named),
    /// `InvalidArgument` (a setting out of range, named), `Unsupported` (a
    /// device not built, an encoding the tokenizer cannot render, an
    /// architecture the CPU does not run), `Cancelled` (the progress callback).
    ///
    /// ```
    /// let err = deepinfer::Engine::builder("/no/such/model.gguf").build().unwrap_err();
    /// assert_eq!(err.status(), deepinfer::Status::Io);
    /// assert!(err.message().contains("/no/such/model.gguf"));
    /// ```
    pub fn build(self) -> Result<Engine> {
        let model = path_cstring(&self.model_path, "model_path")?;
        let tokenizer = match &self.tokenizer_path {
            Some(p) => Some(path_cstring(p, "tokenizer_path")?),
            None => None,
        };
        let cache_dir = match &self.kv_cache_dir {
            Some(p) => Some(path_cstring(p, "kv_cache_dir")?),
            None => None,
        };
        let served = match &self.served_model_name {
            Some(s) => Some(cstring(s, "served_model_name")?),
            None => None,
        };
        let draft_model = match &self.draft_model_path {
            Some(p) => Some(path_cstring(p, "draft_model_path")?),
            None => None,
        };
        let mut cfg = std::mem::MaybeUninit::<sys::di_engine_config>::zeroed();
        // SAFETY: di_engine_config_init_size writes exactly the binding's struct
        // (its size_of): struct_size and every default; a zeroed struct
        // (integers, NULL pointers, no callbacks) is valid before.
        let mut cfg = unsafe {
            sys::di_engine_config_init_size(
                cfg.as_mut_ptr(),
                std::mem::size_of::<sys::di_engine_config>(),
            );
            cfg.assume_init()
        };
        cfg.model_path = model.as_ptr();
        cfg.tokenizer_path = tokenizer.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        cfg.device = match self.device {
            Device::Cpu => sys::DI_DEVICE_CPU,
            Device::Cuda => sys::DI_DEVICE_CUDA,
        } as i32;
        cfg.encoding = self.encoding.map_or(0, |e| e.code());
        cfg.n_threads = clamp_i32(self.n_threads);
        cfg.max_running = clamp_i32(self.max_running);
        cfg.n_ctx = clamp_i64(self.n_ctx);
        cfg.n_batch = clamp_i64(self.n_batch);
        cfg.kv_cache_bytes = clamp_i64(self.kv_cache_bytes);
        cfg.kv_cache_type = match self.kv_cache_type {
            KvCacheType::F16 => sys::DI_KV_CACHE_F16,
            KvCacheType::F32 => sys::DI_KV_CACHE_F32,
            KvCacheType::Q8_0 => sys::DI_KV_CACHE_Q8_0,
            KvCacheType::Q4_0 => sys::DI_KV_CACHE_Q4_0,
        } as i32;
        cfg.disable_prefix_cache = i32::from(!self.prefix_cache);
        cfg.kv_host_cache_bytes = clamp_i64(self.kv_host_cache_bytes);
        cfg.kv_disk_cache_bytes = clamp_i64(self.kv_disk_cache_bytes);
        cfg.kv_cache_dir = cache_dir.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        cfg.served_model_name = served.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        cfg.speculative_tokens = clamp_i32(self.speculative_tokens);
        cfg.speculative_fixed = i32::from(self.speculative_fixed);
        cfg.draft = match self.draft {
            Draft::Auto => sys::DI_DRAFT_AUTO,
            Draft::PromptLookup => sys::DI_DRAFT_PROMPT_LOOKUP,
            Draft::DraftModel => sys::DI_DRAFT_MODEL,
            Draft::Mtp => sys::DI_DRAFT_MTP,
        } as i32;
        cfg.draft_model_path = draft_model.as_ref().map_or(ptr::null(), |c| c.as_ptr());

        // The log sink lives in the engine (a thin pointer to the boxed closure)
        // until after di_engine_destroy.
        let log: Option<Box<Box<LogFn>>> = self.log.map(Box::new);
        if let Some(l) = &log {
            cfg.log = Some(log_trampoline);
            cfg.log_user = &**l as *const Box<LogFn> as *mut c_void;
        }
        let mut progress = self.progress.map(|f| ProgressCtx { f, panic: None });
        if let Some(p) = progress.as_mut() {
            cfg.progress = Some(progress_trampoline);
            cfg.progress_user = p as *mut ProgressCtx<'_> as *mut c_void;
        }
        let mut raw = ptr::null_mut();
        // SAFETY: every pointer in cfg lives through the call (paths are copied);
        // the log box outlives the engine, the progress context the call.
        let res = check(|err| unsafe { sys::di_engine_create(&cfg, &mut raw, err) });
        if let Some(p) = progress.and_then(|p| p.panic) {
            if res.is_ok() {
                // SAFETY: a live engine with nothing submitted.
                unsafe { sys::di_engine_destroy(raw) };
            }
            resume_unwind(p);
        }
        res?;
        let raw = NonNull::new(raw).expect("di_engine_create returned DI_OK and NULL");
        // SAFETY: the engine's tokenizer lives until di_engine_destroy, i.e. as
        // long as the Engine that lends it.
        let tok = unsafe { sys::di_engine_tokenizer(raw.as_ptr()) };
        Ok(Engine {
            inner: Arc::new(Inner {
                raw: raw.as_ptr(),
                state: Mutex::new(State::default()),
                cond: Condvar::new(),
                _log: log,
            }),
            tokenizer: NonNull::new(tok as *mut sys::di_tokenizer).map(Tokenizer::borrowed),
        })
    }
}

struct ProgressCtx<'p> {
    f: Box<ProgressFn<'p>>,
    panic: Option<Box<dyn Any + Send>>,
}

extern "C" fn progress_trampoline(user: *mut c_void, fraction: f32) -> c_int {
    // SAFETY: user is the ProgressCtx of the di_engine_create running on this
    // thread (progress runs on the creating thread only).
    let ctx = unsafe { &mut *(user as *mut ProgressCtx<'_>) };
    if ctx.panic.is_some() {
        return 1;
    }
    match catch_unwind(AssertUnwindSafe(|| (ctx.f)(fraction))) {
        Ok(ControlFlow::Continue(())) => 0,
        Ok(ControlFlow::Break(())) => 1,
        Err(p) => {
            ctx.panic = Some(p);
            1
        }
    }
}

extern "C" fn log_trampoline(user: *mut c_void, level: sys::di_log_level, message: *const c_char) {
    // SAFETY: user is the engine's boxed log sink, alive until after
    // di_engine_destroy; message lives until this call returns.
    let f = unsafe { &*(user as *const Box<LogFn>) };
    let msg = unsafe { crate::util::ctext(message) }.unwrap_or_default();
    let level = match level {
        sys::DI_LOG_ERROR => LogLevel::Error,
        sys::DI_LOG_WARN => LogLevel::Warn,
        sys::DI_LOG_INFO => LogLevel::Info,
        _ => LogLevel::Debug,
    };
    // A panic cannot be resumed on the engine's worker thread: it is dropped.
    let _ = catch_unwind(AssertUnwindSafe(|| f(level, &msg)));
}

/// An engine (`di_engine`): a loaded model, its tokenizer and prompt encoding, a
/// paged KV cache and a worker thread that batches every request. Dropping it
/// cancels what still runs (each request still gets its one
/// [`Event::Done`], `Cancelled`, "the engine was destroyed"), and frees it.
///
/// `Send` and `Sync`: submit and cancel from any thread, as the C API allows;
/// the binding gives `di_poll` to one thread at a time itself.
///
/// ```no_run
/// use deepinfer::{Engine, Event, Request};
/// let engine = Engine::builder("SmolLM2-135M-Instruct.Q4_1.gguf").build()?;
/// let prompt = engine.tokenizer().unwrap().encode("Once upon a time", deepinfer::Encode::PLAIN)?;
/// let completion = engine.submit(&Request::tokens(&prompt).max_tokens(32).temperature(0.0))?.wait();
/// println!("{}", completion.text);
/// # Ok::<(), deepinfer::Error>(())
/// ```
pub struct Engine {
    inner: Arc<Inner>,
    tokenizer: Option<Tokenizer>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("raw", &self.inner.raw)
            .field("encoding", &self.encoding())
            .finish()
    }
}

struct Inner {
    /// Valid until `State::destroyed`.
    raw: *mut sys::di_engine,
    state: Mutex<State>,
    cond: Condvar,
    _log: Option<Box<Box<LogFn>>>,
}

// SAFETY: deepinfer.h: di_submit and di_cancel may be called from any thread;
// di_poll from one thread at a time (the poller role in State), di_engine_destroy
// once, with no poller and no call in flight (Engine::drop). Everything else in
// Inner is behind the mutex; the log sink is Send + Sync.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

#[derive(Default)]
struct State {
    channels: HashMap<u64, Channel>,
    next_key: u64,
    /// A thread is in di_poll or di_engine_destroy.
    poller: bool,
    /// di_cancel calls through handles running now.
    in_flight: usize,
    /// Engine::drop has begun: no new poll or cancel starts.
    closing: bool,
    /// The engine was dropped inside a callback: the poller destroys it.
    destroy_deferred: bool,
    /// di_engine_destroy has returned: `raw` is gone.
    destroyed: bool,
    /// The first panic out of a callback, resumed by the polling thread.
    panic: Option<Box<dyn Any + Send>>,
    /// Callbacks of finished requests, dropped outside any callback.
    graveyard: Vec<Callback>,
}

struct Channel {
    /// Owned events waiting for the handle's iterator (a callback request
    /// queues only a copy of its Done).
    queue: VecDeque<Event<'static>>,
    /// The callback of a callback request, taken out while it runs.
    callback: Option<Callback>,
    is_callback: bool,
    done: bool,
    handle_dropped: bool,
}

/// The user_data of a request: which engine and which channel.
struct Ctx {
    inner: *const Inner,
    key: u64,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic never happens while the lock is held by this module's code; a
    // poisoned lock still holds consistent state.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

extern "C" fn event_trampoline(user: *mut c_void, ev: *const sys::di_event) {
    let ctx = user as *mut Ctx;
    // SAFETY: user is the Ctx made at submit, freed here at the request's one
    // terminal event; its engine is alive, as callbacks run only inside the
    // di_poll / di_engine_destroy of a thread holding an Arc<Inner>.
    let (inner, key) = unsafe { (&*(*ctx).inner, (*ctx).key) };
    let is_done = unsafe { sys::di_event_kind_of(ev) } == sys::DI_EVENT_DONE;
    // Unwinding must not cross into C: everything is caught.
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| inner.deliver(key, ev))) {
        let mut st = lock(&inner.state);
        if st.panic.is_none() {
            st.panic = Some(p);
        }
    }
    if is_done {
        // SAFETY: the terminal event is the last use of ctx.
        drop(unsafe { Box::from_raw(ctx) });
    }
}

impl Inner {
    /// Routes one event to its channel (queue or callback).
    fn deliver(&self, key: u64, ev: *const sys::di_event) {
        // SAFETY: ev is live for this call; the borrowed event does not escape it
        // (queued copies are owned).
        let event = match unsafe { Event::from_raw(ev) } {
            Some(e) => e,
            None => return, // a kind this crate does not know
        };
        let done = event.is_done();
        let mut st = lock(&self.state);
        let ch = match st.channels.get_mut(&key) {
            Some(ch) => ch,
            None => return,
        };
        if done {
            ch.done = true;
        }
        if !ch.is_callback {
            if ch.handle_dropped {
                if done {
                    st.channels.remove(&key);
                }
            } else {
                ch.queue.push_back(event.into_owned());
            }
            return;
        }
        if done && !ch.handle_dropped {
            ch.queue.push_back(event.clone().into_owned());
        }
        let cb = ch.callback.take();
        drop(st); // the callback may submit or cancel: never under the lock
        let mut cb = match cb {
            Some(cb) => cb,
            None => return,
        };
        let outer = IN_CALLBACK.with(|c| c.replace(self as *const Inner));
        let res = catch_unwind(AssertUnwindSafe(|| cb(event)));
        IN_CALLBACK.with(|c| c.set(outer));
        let mut st = lock(&self.state);
        if done {
            st.graveyard.push(cb);
            if st.channels.get(&key).map_or(false, |c| c.handle_dropped) {
                st.channels.remove(&key);
            }
        } else if let Some(ch) = st.channels.get_mut(&key) {
            ch.callback = Some(cb);
        }
        if let Err(p) = res {
            if st.panic.is_none() {
                st.panic = Some(p);
            }
        }
    }

    /// Polls once as the poller (the caller set `poller` and holds no lock),
    /// then gives the role up, wakes the waiters, and does what the poll left:
    /// drops finished callbacks, destroys a deferred engine, resumes a panic.
    fn poll_as_poller(&self, timeout_ms: i32) -> i64 {
        // SAFETY: raw is alive (not destroyed: checked when the role was taken)
        // and this thread is the only poller.
        let n = unsafe { sys::di_poll(self.raw, timeout_ms) };
        let mut st = lock(&self.state);
        let graveyard = std::mem::take(&mut st.graveyard);
        let panic = st.panic.take();
        // The engine was dropped inside a callback of this poll: keep the
        // poller role and destroy it once no cancel is in flight.
        let destroy = st.destroy_deferred && !st.destroyed;
        if destroy {
            while st.in_flight > 0 {
                st = self.cond.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        } else {
            st.poller = false;
        }
        self.cond.notify_all();
        drop(st);
        drop(graveyard);
        if destroy {
            self.destroy_as_poller();
        }
        if let Some(p) = panic {
            resume_unwind(p);
        }
        n
    }

    /// di_engine_destroy, as the poller: every remaining event is delivered.
    fn destroy_as_poller(&self) {
        // SAFETY: no poller but us, no call in flight, not in a callback: the
        // header's conditions for di_engine_destroy.
        unsafe { sys::di_engine_destroy(self.raw) };
        let mut st = lock(&self.state);
        st.destroyed = true;
        st.poller = false;
        let graveyard = std::mem::take(&mut st.graveyard);
        let panic = st.panic.take();
        self.cond.notify_all();
        drop(st);
        drop(graveyard);
        if let Some(p) = panic {
            if !std::thread::panicking() {
                resume_unwind(p);
            }
        }
    }

    /// The next event of channel `key`, polling or waiting for it; `None` after
    /// its Done was returned (or when the engine is gone without one).
    fn next_event(&self, key: u64) -> Option<Event<'static>> {
        let mut st = lock(&self.state);
        loop {
            let ch = st.channels.get_mut(&key)?;
            if let Some(ev) = ch.queue.pop_front() {
                return Some(ev);
            }
            if ch.done || st.destroyed {
                return None;
            }
            if in_callback(self) {
                panic!(
                    "deepinfer: a RequestHandle cannot wait for events inside a request callback"
                );
            }
            if !st.poller && !st.closing {
                st.poller = true;
                drop(st);
                self.poll_as_poller(POLL_MS);
                st = lock(&self.state);
            } else {
                st = self.cond.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// di_cancel from a handle, counted in flight so that the engine is never
    /// destroyed under it.
    fn cancel(&self, id: u64) -> Result<()> {
        let mut st = lock(&self.state);
        if st.closing || st.destroyed {
            return Err(Error::invalid_state("cancel: the engine was dropped"));
        }
        st.in_flight += 1;
        drop(st);
        // SAFETY: raw is alive: Engine::drop waits for in_flight to reach 0.
        let res = check(|err| unsafe { sys::di_cancel(self.raw, id, err) });
        let mut st = lock(&self.state);
        st.in_flight -= 1;
        if st.in_flight == 0 {
            self.cond.notify_all();
        }
        res
    }
}

impl Engine {
    /// A builder for an engine on the model at `model_path` (a .gguf file or a
    /// Hugging Face folder).
    ///
    /// ```no_run
    /// let engine = deepinfer::Engine::builder("SmolLM2-135M-Instruct.Q4_1.gguf").n_threads(2).build()?;
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn builder<'p>(model_path: impl AsRef<Path>) -> EngineBuilder<'p> {
        EngineBuilder {
            model_path: model_path.as_ref().to_path_buf(),
            tokenizer_path: None,
            device: Device::Cpu,
            encoding: None,
            n_threads: 0,
            max_running: 0,
            n_ctx: 0,
            n_batch: 0,
            kv_cache_bytes: 0,
            kv_cache_type: KvCacheType::F16,
            prefix_cache: true,
            kv_host_cache_bytes: 0,
            kv_cache_dir: None,
            kv_disk_cache_bytes: 0,
            served_model_name: None,
            speculative_tokens: 0,
            speculative_fixed: false,
            draft: Draft::Auto,
            draft_model_path: None,
            log: None,
            progress: None,
        }
    }

    /// An engine with the default settings: `Engine::builder(model_path).build()`.
    ///
    /// ```no_run
    /// let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn new(model_path: impl AsRef<Path>) -> Result<Engine> {
        Engine::builder(model_path).build()
    }

    fn raw(&self) -> *mut sys::di_engine {
        self.inner.raw
    }

    /// The engine's tokenizer, lent for the engine's life; `None` when the model
    /// has none (token requests only, no text).
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let tok = engine.tokenizer().expect("the GGUF has a vocabulary");
    /// let ids = tok.encode("Hello", deepinfer::Encode::PLAIN)?;
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// The prompt encoding of protocol requests; `None` when the engine has
    /// none (protocol requests are then `Unsupported`).
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// assert_eq!(engine.encoding(), Some(deepinfer::Encoding::ChatMl));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn encoding(&self) -> Option<Encoding> {
        // SAFETY: a live engine.
        Encoding::from_code(unsafe { sys::di_engine_encoding(self.raw()) })
    }

    /// The name responses give as `model` (`di_engine_served_model_name`).
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// assert_eq!(engine.served_model_name(), "SmolLM2-135M-Instruct.Q4_1");
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn served_model_name(&self) -> Cow<'_, str> {
        // SAFETY: a live engine; the string lives as long as it.
        unsafe { ctext(sys::di_engine_served_model_name(self.raw())) }.unwrap_or_default()
    }

    /// What the engine loaded, as a JSON object (`di_engine_model_info`):
    /// name, architecture, family, parameters, formats, context_length,
    /// chat_template, special_tokens, encoding, …
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// assert!(engine.model_info().contains("\"family\":\"llama\""));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn model_info(&self) -> Cow<'_, str> {
        let mut len = 0usize;
        // SAFETY: a live engine; the JSON lives as long as it.
        unsafe { text(sys::di_engine_model_info(self.raw(), &mut len), len) }.unwrap_or_default()
    }

    /// The model's vocabulary size: a token request's ids are below it.
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// assert_eq!(engine.vocab_size(), 49152);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn vocab_size(&self) -> usize {
        // SAFETY: a live engine.
        unsafe { sys::di_engine_vocab_size(self.raw()) }.max(0) as usize
    }

    /// The context length of a request, in tokens (n_ctx as resolved).
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// assert!(engine.context_length() <= 4096);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn context_length(&self) -> u64 {
        // SAFETY: a live engine.
        unsafe { sys::di_engine_context_length(self.raw()) }.max(0) as u64
    }

    /// Requests accepted whose Done has not been delivered yet.
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// assert_eq!(engine.pending(), 0);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn pending(&self) -> usize {
        // SAFETY: a live engine.
        unsafe { sys::di_engine_pending(self.raw()) }
    }

    /// The KV cache's occupancy now (`di_engine_kv_cache_stats`): one
    /// snapshot the engine's worker published, readable from any thread. Once
    /// a request's Done has been delivered its blocks are no longer counted as
    /// used.
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let kv = engine.kv_cache_stats()?;
    /// assert_eq!(kv.blocks_used + kv.blocks_cached + kv.blocks_free, kv.blocks_total);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn kv_cache_stats(&self) -> Result<KvCacheStats> {
        let mut raw = std::mem::MaybeUninit::<sys::di_kv_cache_stats>::zeroed();
        // SAFETY: di_kv_cache_stats_init_size writes exactly the binding's struct
        // (its size_of): struct_size and zeros; the struct is integers only, so
        // zeroed is valid before.
        let mut raw = unsafe {
            sys::di_kv_cache_stats_init_size(
                raw.as_mut_ptr(),
                std::mem::size_of::<sys::di_kv_cache_stats>(),
            );
            raw.assume_init()
        };
        // SAFETY: a live engine; the library writes struct_size bytes at most.
        check(|err| unsafe { sys::di_engine_kv_cache_stats(self.raw(), &mut raw, err) })?;
        let n = |v: i64| v.max(0) as u64;
        Ok(KvCacheStats {
            block_tokens: n(raw.block_tokens),
            blocks_total: n(raw.blocks_total),
            blocks_used: n(raw.blocks_used),
            blocks_cached: n(raw.blocks_cached),
            blocks_free: n(raw.blocks_free),
            tokens_used: n(raw.tokens_used),
            running_requests: n(raw.running_requests),
            prefix_cache_queries_total: n(raw.prefix_cache_queries_total),
            prefix_cache_hits_total: n(raw.prefix_cache_hits_total),
            blocks_evicted_total: n(raw.blocks_evicted_total),
        })
    }

    /// A file descriptor readable exactly while events wait for
    /// [`Engine::poll`], for hosts that sleep in their own event loop (epoll,
    /// mio): owned by the engine; never read or close it
    /// (`di_engine_event_fd`).
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let fd = engine.event_fd()?;              // register with epoll; when readable:
    /// engine.poll(Some(std::time::Duration::ZERO))?;
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn event_fd(&self) -> Result<RawFd> {
        // SAFETY: a live engine.
        let fd = unsafe { sys::di_engine_event_fd(self.raw()) };
        if fd < 0 {
            Err(Error::from_raw((-fd) as sys::di_status, ptr::null_mut()))
        } else {
            Ok(fd)
        }
    }

    /// Submits a request whose events the returned handle yields as an
    /// iterator (`di_submit`). The request is checked, and a protocol body
    /// rendered and tokenized, on this thread: a bad one fails here, with
    /// nothing queued.
    ///
    /// Errors: `InvalidArgument` (a bad field, a token id outside the
    /// vocabulary: the message names it), `InvalidRequest` (a body the codec
    /// refuses, the field named), `Unsupported` (a protocol the engine's
    /// encoding does not take), `ContextLength` (a prompt with no room for
    /// output).
    ///
    /// ```no_run
    /// use deepinfer::{Engine, Event, Request};
    /// let engine = Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let body = r#"{"model": "m", "max_tokens": 32, "stream": true, "messages": [{"role": "user", "content": "Hi"}]}"#;
    /// for ev in engine.submit(&Request::chat(body))? {
    ///     if let Event::Chunk(c) = ev {
    ///         print!("{}", c.sse);                 // the SSE stream a server sends
    ///     }
    /// }
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn submit(&self, request: &Request<'_>) -> Result<RequestHandle> {
        self.submit_routed(request, None)
    }

    /// Submits a request whose events go to `callback`, called inside a poll
    /// on the polling thread ([`Engine::poll`], or a thread iterating any
    /// handle of this engine) with events that borrow the library's memory
    /// for the call. The handle cancels it and waits for it: its iterator
    /// yields only a copy of the [`Event::Done`], once the callback has had it.
    ///
    /// The callback may [`Canceller::cancel`]; it must not wait on a handle.
    /// A panic in it is resumed on the polling thread once the poll has
    /// finished, the event counting as delivered.
    ///
    /// The borrowed event cannot be kept past the call (this does not compile;
    /// `ev.into_owned()` would):
    ///
    /// ```compile_fail
    /// use std::sync::Mutex;
    /// static KEPT: Mutex<Option<deepinfer::Event<'static>>> = Mutex::new(None);
    /// # let engine = deepinfer::Engine::new("m.gguf").unwrap();
    /// engine.submit_with_callback(&deepinfer::Request::tokens(&[1]), |ev| {
    ///     *KEPT.lock().unwrap() = Some(ev);
    /// });
    /// ```
    ///
    /// ```no_run
    /// use deepinfer::{Engine, Event, Request};
    /// use std::time::Duration;
    /// let engine = Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let prompt = [1, 2, 3];
    /// let handle = engine.submit_with_callback(&Request::tokens(&prompt).max_tokens(8), |ev| {
    ///     if let Event::Text(t) = ev {
    ///         print!("{}", t);                     // borrowed: no copy
    ///     }
    /// })?;
    /// while !handle.is_done() {
    ///     engine.poll(Some(Duration::from_millis(16)))?;   // a frame of a game loop
    /// }
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn submit_with_callback<F>(
        &self,
        request: &Request<'_>,
        callback: F,
    ) -> Result<RequestHandle>
    where
        F: FnMut(Event<'_>) + Send + 'static,
    {
        self.submit_routed(request, Some(Box::new(callback)))
    }

    fn submit_routed(
        &self,
        request: &Request<'_>,
        callback: Option<Callback>,
    ) -> Result<RequestHandle> {
        let is_callback = callback.is_some();
        let parts = request.raw_parts()?;
        let key = {
            let mut st = lock(&self.inner.state);
            st.next_key += 1;
            let key = st.next_key;
            st.channels.insert(
                key,
                Channel {
                    queue: VecDeque::new(),
                    callback,
                    is_callback,
                    done: false,
                    handle_dropped: false,
                },
            );
            key
        };
        let ctx = Box::into_raw(Box::new(Ctx {
            inner: Arc::as_ptr(&self.inner),
            key,
        }));
        let mut raw = request.to_raw(&parts);
        raw.on_event = Some(event_trampoline);
        raw.user_data = ctx as *mut c_void;
        let mut id = 0u64;
        // SAFETY: raw's pointers live through the call (di_submit copies them);
        // ctx lives until the request's terminal event.
        match check(|err| unsafe { sys::di_submit(self.raw(), &raw, &mut id, err) }) {
            Ok(()) => Ok(RequestHandle {
                inner: self.inner.clone(),
                key,
                id,
                is_callback,
            }),
            Err(e) => {
                // SAFETY: a refused request queues nothing: ctx was never handed out.
                drop(unsafe { Box::from_raw(ctx) });
                let ch = lock(&self.inner.state).channels.remove(&key);
                drop(ch); // the callback, dropped outside the lock
                Err(e)
            }
        }
    }

    /// Delivers queued events (`di_poll`): runs the callbacks of callback
    /// requests and queues the events of iterated ones. Waits up to `timeout`
    /// for the first event (`Some(Duration::ZERO)`: not at all; `None`: until
    /// one arrives, or returns at once when nothing is pending), then delivers
    /// every event queued at that moment. Returns how many it delivered.
    ///
    /// Errors: `InvalidState` while another thread polls (a handle's iterator,
    /// or another `poll`) and when called from inside a callback.
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let delivered = engine.poll(Some(std::time::Duration::ZERO))?;
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn poll(&self, timeout: Option<Duration>) -> Result<usize> {
        if in_callback(&self.inner) {
            return Err(Error::invalid_state("poll: called from a request callback"));
        }
        let ms = match timeout {
            None => -1,
            Some(d) => i32::try_from(d.as_millis()).unwrap_or(i32::MAX),
        };
        {
            let mut st = lock(&self.inner.state);
            if st.poller {
                return Err(Error::invalid_state(
                    "poll: another thread is polling this engine",
                ));
            }
            st.poller = true;
        }
        let n = self.inner.poll_as_poller(ms);
        if n < 0 {
            Err(Error::from_raw((-n) as sys::di_status, ptr::null_mut()))
        } else {
            Ok(n as usize)
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let mut st = lock(&self.inner.state);
        st.closing = true;
        if in_callback(&self.inner) {
            // This thread is inside di_poll: the poller destroys the engine once
            // its poll returns (di_engine_destroy refuses to run in a callback).
            st.destroy_deferred = true;
            return;
        }
        while st.poller || st.in_flight > 0 {
            st = self.inner.cond.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.poller = true;
        drop(st);
        self.inner.destroy_as_poller();
    }
}

/// The handle of a submitted request: an iterator over its events (each
/// owned), ending after its [`Event::Done`]; [`RequestHandle::cancel`] stops it.
///
/// `next` blocks until the request's next event is computed. Handles of one
/// engine may be iterated from many threads at once (one thread per handle).
/// Dropping the handle of an iterated request that has not finished cancels
/// it (nobody would read its events); a callback request runs on.
///
/// ```no_run
/// use deepinfer::{Engine, Event, Request};
/// let engine = Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
/// let prompt = engine.tokenizer().unwrap().encode("Once upon a time", deepinfer::Encode::PLAIN)?;
/// let mut handle = engine.submit(&Request::tokens(&prompt).max_tokens(4000))?;
/// let canceller = handle.canceller();
/// std::thread::spawn(move || {
///     std::thread::sleep(std::time::Duration::from_secs(1));
///     let _ = canceller.cancel();                // from another thread
/// });
/// let done = handle.find_map(|ev| match ev { Event::Done(d) => Some(d), _ => None }).unwrap();
/// assert_eq!(done.status, deepinfer::Status::Cancelled);
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[must_use = "dropping the handle of an unfinished request cancels it"]
pub struct RequestHandle {
    inner: Arc<Inner>,
    key: u64,
    id: u64,
    is_callback: bool,
}

impl std::fmt::Debug for RequestHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHandle")
            .field("id", &self.id)
            .field("callback", &self.is_callback)
            .finish()
    }
}

impl RequestHandle {
    /// The id the engine gave the request (> 0, unique within the engine).
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let h = engine.submit(&deepinfer::Request::tokens(&[1]).max_tokens(1))?;
    /// assert!(h.id() > 0);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Cancels the request (`di_cancel`): it stops at the next step and its Done
    /// says `Cancelled` (events produced before may still come first).
    /// Cancelling twice is `Ok`. Errors: `InvalidState` when it has already
    /// finished (its Done is queued or delivered: "request 7 has already
    /// finished") or the engine was dropped.
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let h = engine.submit(&deepinfer::Request::tokens(&[1]).max_tokens(1000))?;
    /// h.cancel()?;
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn cancel(&self) -> Result<()> {
        self.inner.cancel(self.id)
    }

    /// A cancel handle for other threads (`Clone + Send + Sync`).
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let h = engine.submit(&deepinfer::Request::tokens(&[1]).max_tokens(1000))?;
    /// let c = h.canceller();
    /// std::thread::spawn(move || c.cancel()).join().unwrap()?;
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn canceller(&self) -> Canceller {
        Canceller {
            inner: self.inner.clone(),
            id: self.id,
        }
    }

    /// `true` once the request's Done has been delivered (to this handle's
    /// queue, or to its callback).
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let mut h = engine.submit(&deepinfer::Request::tokens(&[1]).max_tokens(1))?;
    /// while h.next().is_some() {}
    /// assert!(h.is_done());
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn is_done(&self) -> bool {
        let st = lock(&self.inner.state);
        st.destroyed || st.channels.get(&self.key).map_or(true, |c| c.done)
    }

    /// Iterates to the end and gathers the output: token ids, text, reasoning,
    /// tool calls, chunks and the Done (for a callback request, only the Done).
    /// Never fails: a cancelled or failed request says so in
    /// `done.status` ([`Completion::into_result`] makes it an error).
    ///
    /// ```no_run
    /// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let c = engine.submit(&deepinfer::Request::tokens(&[1, 2]).max_tokens(8).temperature(0.0))?.wait();
    /// assert_eq!(c.tokens.len() as u32, c.done.usage.completion_tokens);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn wait(mut self) -> Completion {
        let mut choices: Vec<Choice> = vec![Choice::default()];
        let mut c = Completion {
            tokens: Vec::new(),
            text: String::new(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
            chunks: Vec::new(),
            choices: Vec::new(),
            done: Done {
                status: Status::InvalidState,
                message: "the engine ended without a terminal event".into(),
                finish_reason: None,
                finish_text: None,
                usage: Usage::default(),
                response_json: None,
            },
        };
        fn choice(choices: &mut Vec<Choice>, i: u32) -> &mut Choice {
            let i = i as usize;
            while choices.len() <= i {
                let index = choices.len() as u32;
                choices.push(Choice {
                    index,
                    ..Choice::default()
                });
            }
            &mut choices[i]
        }
        for ev in &mut self {
            match ev {
                Event::Tokens(t) => {
                    let ch = choice(&mut choices, t.choice_index);
                    ch.tokens.extend_from_slice(&t);
                    if let Some(lp) = &t.logprobs {
                        ch.logprobs
                            .get_or_insert_with(Vec::new)
                            .extend_from_slice(lp);
                    }
                    if let Some(top) = t.top_logprobs {
                        ch.top_logprobs.get_or_insert_with(Vec::new).extend(top);
                    }
                }
                Event::Text(t) => choice(&mut choices, t.choice_index).text.push_str(&t),
                Event::Reasoning(t) => choice(&mut choices, t.choice_index).reasoning.push_str(&t),
                Event::ToolCall(call) => choice(&mut choices, call.choice_index)
                    .tool_calls
                    .push(call),
                Event::Chunk(ch) => c.chunks.push(ch),
                Event::Done(d) => c.done = d,
                Event::ToolCallDelta(_) => {}
            }
        }
        let first = &choices[0];
        c.tokens = first.tokens.clone();
        c.text = first.text.clone();
        c.reasoning = first.reasoning.clone();
        c.tool_calls = first.tool_calls.clone();
        c.choices = choices;
        c
    }
}

impl Iterator for RequestHandle {
    type Item = Event<'static>;

    /// The next event, blocking until it is computed; `None` after the Done.
    fn next(&mut self) -> Option<Event<'static>> {
        self.inner.next_event(self.key)
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        let mut st = lock(&self.inner.state);
        let cancel = match st.channels.get_mut(&self.key) {
            None => false,
            Some(ch) if ch.done => {
                st.channels.remove(&self.key);
                false
            }
            Some(ch) => {
                ch.handle_dropped = true;
                ch.queue.clear();
                !ch.is_callback
            }
        };
        drop(st);
        if cancel {
            // Err: it finished meanwhile, or the engine is closing — both end it.
            let _ = self.inner.cancel(self.id);
        }
    }
}

/// Cancels one request from any thread ([`RequestHandle::canceller`]).
///
/// ```no_run
/// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
/// let h = engine.submit(&deepinfer::Request::tokens(&[1]).max_tokens(1000))?;
/// let c = h.canceller();
/// let c2 = c.clone();
/// c.cancel()?;
/// c2.cancel()?;                                  // twice is fine
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Clone)]
pub struct Canceller {
    inner: Arc<Inner>,
    id: u64,
}

impl std::fmt::Debug for Canceller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canceller").field("id", &self.id).finish()
    }
}

impl Canceller {
    /// As [`RequestHandle::cancel`].
    ///
    /// ```no_run
    /// # fn f(c: &deepinfer::Canceller) -> deepinfer::Result<()> {
    /// c.cancel()?;
    /// # Ok(()) }
    /// ```
    pub fn cancel(&self) -> Result<()> {
        self.inner.cancel(self.id)
    }

    /// The request's id.
    ///
    /// ```no_run
    /// # fn f(c: &deepinfer::Canceller) { let _ = c.id(); }
    /// ```
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// A finished request's output, gathered by [`RequestHandle::wait`]: choice
/// 0's (a Chat request with `n` > 1 has every choice in `choices`).
///
/// ```no_run
/// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
/// let body = r#"{"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]}"#;
/// let c = engine.submit(&deepinfer::Request::chat(body))?.wait().into_result()?;
/// println!("{} ({})", c.text, c.done.finish_text.as_deref().unwrap_or(""));
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Completion {
    /// Every generated token id.
    pub tokens: Vec<i32>,
    /// The answer text.
    pub text: String,
    /// The reasoning text.
    pub reasoning: String,
    /// The complete tool calls.
    pub tool_calls: Vec<ToolCall<'static>>,
    /// The protocol chunks.
    pub chunks: Vec<Chunk<'static>>,
    /// Every choice's output, `choices[i].index == i`: one for every request
    /// but a Chat request with `n` > 1 (`choices[0]` is what the fields above
    /// hold), with the log probabilities when asked for.
    pub choices: Vec<Choice>,
    /// The terminal event.
    pub done: Done<'static>,
}

/// One choice of a [`Completion`]: a Chat request with `n` > 1 has `n`
/// (`di_event_choice_index`), every other request one.
///
/// ```no_run
/// # let engine = deepinfer::Engine::new("SmolLM2-135M-Instruct.Q4_1.gguf")?;
/// let body = r#"{"model": "m", "n": 2, "seed": 1, "messages": [{"role": "user", "content": "Hi"}]}"#;
/// for choice in engine.submit(&deepinfer::Request::chat(body))?.wait().into_result()?.choices {
///     println!("{}: {}", choice.index, choice.text);
/// }
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Choice {
    /// The choice's index (the OpenAI API's `choices[i].index`).
    pub index: u32,
    /// Its generated token ids.
    pub tokens: Vec<i32>,
    /// Its answer text.
    pub text: String,
    /// Its reasoning text.
    pub reasoning: String,
    /// Its complete tool calls.
    pub tool_calls: Vec<ToolCall<'static>>,
    /// Each token's log probability ([`Tokens::logprobs`](crate::Tokens::logprobs)
    /// joined), or `None` when not asked for.
    pub logprobs: Option<Vec<f32>>,
    /// Each token's most likely alternatives, or `None`.
    pub top_logprobs: Option<Vec<Vec<(i32, f32)>>>,
}

// Log probabilities are never NaN (the library's logits are finite).
impl Eq for Choice {}

impl Completion {
    /// `Ok(self)` when the request ran to its end, else its status and message.
    ///
    /// ```no_run
    /// # fn f(c: deepinfer::Completion) -> deepinfer::Result<()> {
    /// let text = c.into_result()?.text;
    /// # Ok(()) }
    /// ```
    pub fn into_result(self) -> Result<Completion> {
        self.done.to_result()?;
        Ok(self)
    }
}

/// The KV cache's occupancy ([`Engine::kv_cache_stats`], `di_kv_cache_stats`).
/// The cache is paged: blocks of `block_tokens` tokens, each used, cached or
/// free (`blocks_used + blocks_cached + blocks_free == blocks_total`). The
/// `*_total` counters only grow, from 0 when the engine was made. Fields may be
/// added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct KvCacheStats {
    /// Tokens one block holds (16).
    pub block_tokens: u64,
    /// Blocks of the cache in all.
    pub blocks_total: u64,
    /// Blocks held by running requests (a shared prefix block counts once).
    pub blocks_used: u64,
    /// Blocks held by no request that keep a computed prefix (the prefix cache).
    pub blocks_cached: u64,
    /// Blocks neither used nor cached.
    pub blocks_free: u64,
    /// Tokens whose keys and values the running requests hold, summed over
    /// requests (a shared prefix counts once per request).
    pub tokens_used: u64,
    /// Requests holding blocks.
    pub running_requests: u64,
    /// Tokens of admitted requests looked up in the prefix cache.
    pub prefix_cache_queries_total: u64,
    /// Of those, tokens found computed (not computed again).
    pub prefix_cache_hits_total: u64,
    /// Cached blocks whose room a request took.
    pub blocks_evicted_total: u64,
}
