//! The codec, output side: generated text or token ids into reasoning, answer,
//! tool calls and protocol chunks (`di_stream_*`).

use std::ffi::CString;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::os::raw::c_char;
use std::ptr::{self, NonNull};

use deepinfer_sys as sys;

use crate::codec::{borrowed_cstr, Prompt};
use crate::error::{check, check_status, Result};
use crate::event::Chunk;
use crate::tokenizer::Tokenizer;
use crate::util::cstring;

/// Why generation stopped (`di_finish`, deepseek-recipe's
/// `InferenceFinishReason`).
///
/// ```
/// use deepinfer::FinishReason;
/// assert_eq!(FinishReason::from_code(2), Some(FinishReason::Length));
/// assert_eq!(FinishReason::Stop.code(), 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// The end of sequence, a stop token or a stop sequence.
    Stop,
    /// The max_tokens budget (or the context) ran out.
    Length,
    /// The backend filtered the output.
    ContentFilter,
    /// The input ended without a reason (reported as stop).
    Unknown,
}

impl FinishReason {
    /// The C value.
    ///
    /// ```
    /// assert_eq!(deepinfer::FinishReason::ContentFilter.code(), 3);
    /// ```
    pub fn code(self) -> u32 {
        match self {
            FinishReason::Stop => sys::DI_FINISH_STOP,
            FinishReason::Length => sys::DI_FINISH_LENGTH,
            FinishReason::ContentFilter => sys::DI_FINISH_CONTENT_FILTER,
            FinishReason::Unknown => sys::DI_FINISH_UNKNOWN,
        }
    }

    /// The reason of a C value; `None` for 0 (did not finish) and unknown values.
    ///
    /// ```
    /// assert_eq!(deepinfer::FinishReason::from_code(0), None);
    /// ```
    pub fn from_code(code: u32) -> Option<FinishReason> {
        match code {
            sys::DI_FINISH_STOP => Some(FinishReason::Stop),
            sys::DI_FINISH_LENGTH => Some(FinishReason::Length),
            sys::DI_FINISH_CONTENT_FILTER => Some(FinishReason::ContentFilter),
            sys::DI_FINISH_UNKNOWN => Some(FinishReason::Unknown),
            _ => None,
        }
    }
}

/// Where parsing starts in thinking mode (`di_thinking_stage`,
/// deepseek-recipe's `ThinkingInitialStage`).
///
/// ```
/// assert_eq!(deepinfer::ThinkingStage::default(), deepinfer::ThinkingStage::Off);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ThinkingStage {
    /// Thinking off: all output is answer.
    #[default]
    Off,
    /// A new turn: reasoning first.
    ReasoningStart,
    /// Continuing a prefix's reasoning.
    ReasoningContinuation,
    /// Continuing a prefix's answer.
    ContentContinuation,
}

impl ThinkingStage {
    fn code(self) -> i32 {
        (match self {
            ThinkingStage::Off => sys::DI_THINKING_OFF,
            ThinkingStage::ReasoningStart => sys::DI_THINKING_REASONING_START,
            ThinkingStage::ReasoningContinuation => sys::DI_THINKING_REASONING_CONTINUATION,
            ThinkingStage::ContentContinuation => sys::DI_THINKING_CONTENT_CONTINUATION,
        }) as i32
    }

    fn from_code(code: i32) -> ThinkingStage {
        match code as u32 {
            sys::DI_THINKING_REASONING_START => ThinkingStage::ReasoningStart,
            sys::DI_THINKING_REASONING_CONTINUATION => ThinkingStage::ReasoningContinuation,
            sys::DI_THINKING_CONTENT_CONTINUATION => ThinkingStage::ContentContinuation,
            _ => ThinkingStage::Off,
        }
    }
}

/// Parsing settings that replace what a request implies (deepseek-recipe's
/// `ParsingOptions`), for hosts that prompt the model differently. Start from
/// [`Parsing::from_prompt`] and change what differs.
///
/// ```
/// use deepinfer::{Codec, Encoding, Parsing, Protocol};
/// let codec = Codec::new(None, Encoding::Dsv4)?;
/// let p = codec.render(Protocol::Chat, r#"{"model": "DeepSeek-V4-Pro", "stop": ["END"],
///     "messages": [{"role": "user", "content": "Hi"}]}"#)?;
/// let mut parsing = Parsing::from_prompt(&p)?;
/// assert_eq!(parsing.stop_sequences, vec!["END".to_string()]);
/// parsing.stop_sequences.clear();
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Parsing {
    /// DSML (or the encoding's) tool calls are parsed.
    pub tool_calls: bool,
    /// The output begins inside the tool-call block (a required tool choice).
    pub starts_in_tool_calls: bool,
    /// JSON mode: the JSON in the answer is kept, the text around it blanked.
    pub json_output: bool,
    /// Where parsing starts.
    pub thinking: ThinkingStage,
    /// Stop sequences (non-empty UTF-8).
    pub stop_sequences: Vec<String>,
}

impl Parsing {
    /// What `prompt`'s request implies (`di_stream_options_from_prompt`).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let p = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// let parsing = deepinfer::Parsing::from_prompt(&p)?;
    /// assert!(parsing.stop_sequences.is_empty());
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn from_prompt(prompt: &Prompt) -> Result<Parsing> {
        let mut o = init_options();
        // SAFETY: an initialised struct of this release; the stop pointers point
        // into the prompt, which outlives the copies made below.
        check_status(unsafe { sys::di_stream_options_from_prompt(prompt.as_ptr(), &mut o) })?;
        let mut stops = Vec::with_capacity(o.n_stop_sequences);
        for i in 0..o.n_stop_sequences {
            // SAFETY: n_stop_sequences pointers to NUL-terminated strings.
            let p = unsafe { *o.stop_sequences.add(i) };
            if let Some(s) = unsafe { borrowed_cstr(p) } {
                stops.push(s.to_string());
            }
        }
        Ok(Parsing {
            tool_calls: o.parse_tool_calls != 0,
            starts_in_tool_calls: o.starts_in_tool_calls != 0,
            json_output: o.parse_json_output != 0,
            thinking: ThinkingStage::from_code(o.thinking_stage),
            stop_sequences: stops,
        })
    }
}

fn init_options() -> sys::di_stream_options {
    let mut o = MaybeUninit::<sys::di_stream_options>::zeroed();
    // SAFETY: di_stream_options_init_size writes exactly the binding's struct
    // (its size_of): struct_size and every field; the struct is all integers
    // and pointers, so zeroed is a valid value before.
    unsafe {
        sys::di_stream_options_init_size(
            o.as_mut_ptr(),
            std::mem::size_of::<sys::di_stream_options>(),
        );
        o.assume_init()
    }
}

/// Settings of a [`ResponseStream`] (`di_stream_options`): the defaults give a
/// random response id, the request's model name, the clock's time, and the
/// parsing the request implies.
///
/// ```
/// let opts = deepinfer::StreamOptions::new().response_id("chatcmpl-1").created(1700000000).seed(7);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    response_id: Option<String>,
    model: Option<String>,
    created: i64,
    seed: u64,
    signature: Option<String>,
    parsing: Option<Parsing>,
}

impl StreamOptions {
    /// The defaults.
    ///
    /// ```
    /// assert_eq!(deepinfer::StreamOptions::new(), deepinfer::StreamOptions::default());
    /// ```
    pub fn new() -> StreamOptions {
        StreamOptions::default()
    }

    /// The response id every chunk reports (default: random, in the protocol's
    /// style, `"chatcmpl-…"`).
    ///
    /// ```
    /// let o = deepinfer::StreamOptions::new().response_id("msg_1");
    /// ```
    pub fn response_id(mut self, id: impl Into<String>) -> StreamOptions {
        self.response_id = Some(id.into());
        self
    }

    /// The model name reported (default: the request's `model`).
    ///
    /// ```
    /// let o = deepinfer::StreamOptions::new().model("deepseek-v4");
    /// ```
    pub fn model(mut self, model: impl Into<String>) -> StreamOptions {
        self.model = Some(model.into());
        self
    }

    /// Unix time in seconds reported as `created` (default 0: the clock).
    ///
    /// ```
    /// let o = deepinfer::StreamOptions::new().created(1700000000);
    /// ```
    pub fn created(mut self, unix_seconds: i64) -> StreamOptions {
        self.created = unix_seconds;
        self
    }

    /// Seeds the random part of tool-call ids and of a default response id, so
    /// tests are repeatable (default 0: the clock).
    ///
    /// ```
    /// let o = deepinfer::StreamOptions::new().seed(42);
    /// ```
    pub fn seed(mut self, seed: u64) -> StreamOptions {
        self.seed = seed;
        self
    }

    /// Messages only: the signature of each thinking block (default: the
    /// response id).
    ///
    /// ```
    /// let o = deepinfer::StreamOptions::new().signature("sig");
    /// ```
    pub fn signature(mut self, signature: impl Into<String>) -> StreamOptions {
        self.signature = Some(signature.into());
        self
    }

    /// Parsing settings that replace what the request implies.
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let p = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// let mut parsing = deepinfer::Parsing::from_prompt(&p)?;
    /// parsing.stop_sequences.push("###".into());
    /// let o = deepinfer::StreamOptions::new().parsing(parsing);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn parsing(mut self, parsing: Parsing) -> StreamOptions {
        self.parsing = Some(parsing);
        self
    }
}

/// A response stream (`di_stream`): what a model generates for one rendered
/// prompt turned into what the request's protocol sends back, exactly as
/// deepseek-recipe's `StreamProcessor` does. For hosts with their own
/// inference: render, generate, push each output here, finish.
///
/// Each call's parsed events ([`ResponseStream::events`]) and protocol chunks
/// ([`ResponseStream::chunks`]) borrow the stream until the next call. `Send`,
/// not `Sync` (one thread at a time); it borrows its tokenizer.
///
/// ```
/// use deepinfer::{Codec, Encoding, FinishReason, Protocol, ResponseStream, StreamEvent, StreamOptions};
/// let codec = Codec::new(None, Encoding::ChatMl)?;
/// let prompt = codec.render(Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
/// let mut s = ResponseStream::new(&prompt, None, &StreamOptions::new().response_id("chatcmpl-1").created(1))?;
/// let mut sse = String::new();
/// for piece in ["Hel", "lo", "!"] {
///     s.push_text(piece, 1)?;
///     for ev in s.events() {
///         if let StreamEvent::Text(t) = ev { print!("{}", t); }
///     }
///     sse.extend(s.chunks().map(|c| c.sse.into_owned()));
/// }
/// s.finish(FinishReason::Stop)?;
/// sse.extend(s.chunks().map(|c| c.sse.into_owned()));
/// assert!(sse.ends_with("data: [DONE]\n\n"));
/// assert!(s.response_json().unwrap().contains(r#""content":"Hello!""#));
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Debug)]
pub struct ResponseStream<'t> {
    raw: NonNull<sys::di_stream>,
    _tok: PhantomData<&'t Tokenizer>,
}

// SAFETY: one stream is used by one thread at a time (every call that changes it
// takes &mut self); its tokenizer is Sync. Not Sync: the header promises no
// concurrent reads.
unsafe impl Send for ResponseStream<'_> {}

/// One parsed event of a [`ResponseStream`] call, borrowing the stream.
///
/// ```
/// fn show(ev: &deepinfer::StreamEvent<'_>) -> String {
///     match ev {
///         deepinfer::StreamEvent::Text(t) => t.to_string(),
///         other => format!("{:?}", other),
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEvent<'a> {
    /// A reasoning_content delta.
    Reasoning(&'a str),
    /// An answer (content) delta.
    Text(&'a str),
    /// A tool call starts.
    ToolCallBegin {
        /// The call's 0-based index in the response.
        index: u32,
        /// The call id.
        id: &'a str,
        /// The function name.
        name: &'a str,
    },
    /// A piece of the call's arguments JSON.
    ToolCallArguments {
        /// The call's index.
        index: u32,
        /// The call id.
        id: &'a str,
        /// The function name.
        name: &'a str,
        /// The piece.
        delta: &'a str,
    },
    /// The call is complete.
    ToolCallEnd {
        /// The call's index.
        index: u32,
        /// The call id.
        id: &'a str,
        /// The function name.
        name: &'a str,
        /// The whole arguments text, as the model wrote it (unvalidated).
        arguments: &'a str,
    },
    /// The end: the protocol's finish reason (`"stop"`, `"tool_calls"`, …).
    Finish(&'a str),
}

/// The parsed events of the last call on a stream ([`ResponseStream::events`]).
///
/// ```
/// # fn f(s: &deepinfer::ResponseStream<'_>) {
/// let n = s.events().len();
/// # }
/// ```
#[derive(Debug)]
pub struct StreamEvents<'a> {
    s: &'a ResponseStream<'a>,
    i: usize,
    n: usize,
}

impl<'a> Iterator for StreamEvents<'a> {
    type Item = StreamEvent<'a>;

    fn next(&mut self) -> Option<StreamEvent<'a>> {
        while self.i < self.n {
            let i = self.i;
            self.i += 1;
            if let Some(ev) = self.s.event(i) {
                return Some(ev);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.n - self.i))
    }
}

impl ExactSizeIterator for StreamEvents<'_> {
    fn len(&self) -> usize {
        self.n - self.i
    }
}

/// The protocol chunks of the last call on a stream ([`ResponseStream::chunks`]).
///
/// ```
/// # fn f(s: &deepinfer::ResponseStream<'_>) {
/// let sse: String = s.chunks().map(|c| c.sse.into_owned()).collect();
/// # }
/// ```
#[derive(Debug)]
pub struct Chunks<'a> {
    s: &'a ResponseStream<'a>,
    i: usize,
    n: usize,
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Chunk<'a>;

    fn next(&mut self) -> Option<Chunk<'a>> {
        if self.i >= self.n {
            return None;
        }
        let i = self.i;
        self.i += 1;
        // SAFETY: i < the chunk count of the last call; the chunk borrows the
        // stream for 'a, so no call on it happens before 'a ends.
        Some(unsafe { Chunk::from_stream(self.s.raw.as_ptr(), i) })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.n - self.i, Some(self.n - self.i))
    }
}

impl ExactSizeIterator for Chunks<'_> {}

impl<'t> ResponseStream<'t> {
    /// The response stream of `prompt` (`di_stream_create`): its parsing follows
    /// the request (or `options`' override), its writer the request's protocol.
    /// `tokenizer` decodes [`ResponseStream::push_tokens`] and counts reasoning
    /// tokens (`None`: neither). The prompt is not kept.
    ///
    /// Errors: `InvalidUtf8` (a stop sequence), `InvalidArgument` (a string
    /// option holding a NUL byte, named).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let prompt = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// let s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// let err = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new().model("a\0b"))
    ///     .unwrap_err();
    /// assert_eq!(err.message(), "model: contains a NUL byte");
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn new(
        prompt: &Prompt,
        tokenizer: Option<&'t Tokenizer>,
        options: &StreamOptions,
    ) -> Result<ResponseStream<'t>> {
        let opt_c = |s: &Option<String>, field: &str| -> Result<Option<CString>> {
            match s {
                Some(s) => Ok(Some(cstring(s, field)?)),
                None => Ok(None),
            }
        };
        let ptr_of = |c: &Option<CString>| c.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        let response_id = opt_c(&options.response_id, "response_id")?;
        let model = opt_c(&options.model, "model")?;
        let signature = opt_c(&options.signature, "signature")?;
        let mut stops: Vec<CString> = Vec::new();
        let mut o = init_options();
        o.response_id = ptr_of(&response_id);
        o.model = ptr_of(&model);
        o.signature = ptr_of(&signature);
        o.created = options.created;
        o.seed = options.seed;
        if let Some(p) = &options.parsing {
            for (i, s) in p.stop_sequences.iter().enumerate() {
                stops.push(cstring(s, &format!("stop_sequences[{}]", i))?);
            }
            o.override_parsing = 1;
            o.parse_tool_calls = p.tool_calls as i32;
            o.starts_in_tool_calls = p.starts_in_tool_calls as i32;
            o.parse_json_output = p.json_output as i32;
            o.thinking_stage = p.thinking.code();
        }
        let stop_ptrs: Vec<*const c_char> = stops.iter().map(|c| c.as_ptr()).collect();
        o.stop_sequences = if stop_ptrs.is_empty() {
            ptr::null()
        } else {
            stop_ptrs.as_ptr()
        };
        o.n_stop_sequences = stop_ptrs.len();
        let tok = tokenizer.map_or(ptr::null(), |t| t.as_ptr());
        let mut out = ptr::null_mut();
        // SAFETY: every pointer in o lives through the call (the strings are
        // copied); tok outlives 't, which the stream borrows.
        check(|err| unsafe { sys::di_stream_create(prompt.as_ptr(), tok, &o, &mut out, err) })?;
        Ok(ResponseStream {
            raw: NonNull::new(out).expect("di_stream_create returned DI_OK and NULL"),
            _tok: PhantomData,
        })
    }

    /// The backend is ready: the prompt's token count, how many came from a
    /// prefix cache, and an optional system_fingerprint (Chat). Produces the
    /// opening chunks; optional (`di_stream_ready`). `InvalidState` after the
    /// stream finished.
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let prompt = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// # let mut s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// s.ready(12, 0, None)?;
    /// assert!(s.chunks().next().unwrap().sse.contains(r#""role":"assistant""#));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn ready(
        &mut self,
        prompt_tokens: u32,
        prompt_cache_hit_tokens: u32,
        system_fingerprint: Option<&str>,
    ) -> Result<()> {
        let fp = match system_fingerprint {
            Some(s) => Some(cstring(s, "system_fingerprint")?),
            None => None,
        };
        let fp_ptr = fp.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        // SAFETY: a live stream; fp is copied.
        check(|err| unsafe {
            sys::di_stream_ready(
                self.raw.as_ptr(),
                prompt_tokens,
                prompt_cache_hit_tokens,
                fp_ptr,
                err,
            )
        })
    }

    /// Pushes one backend output: generated text, accounting for `n_tokens`
    /// completion tokens (`di_stream_push_text`). Text that may still become a
    /// marker or a stop sequence is held back until decided. `InvalidState`
    /// once the stream has finished (also by a stop sequence: check
    /// [`ResponseStream::is_finished`]).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let prompt = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// # let mut s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// s.push_text("Hello", 1)?;
    /// s.finish(deepinfer::FinishReason::Stop)?;
    /// assert_eq!(s.push_text("more", 1).unwrap_err().status(), deepinfer::Status::InvalidState);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn push_text(&mut self, text: &str, n_tokens: u32) -> Result<()> {
        // SAFETY: a live stream; text is text.len() bytes, not kept.
        check(|err| unsafe {
            sys::di_stream_push_text(
                self.raw.as_ptr(),
                text.as_ptr() as *const c_char,
                text.len(),
                n_tokens,
                err,
            )
        })
    }

    /// Pushes one backend output as token ids, decoded with the stream's
    /// tokenizer as the reference decodes them (`di_stream_push_tokens`). Do
    /// not push the end-of-sequence token: finish instead. `InvalidState`
    /// without a tokenizer; `InvalidArgument` for an id outside the vocabulary.
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let prompt = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// let mut s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// assert_eq!(s.push_tokens(&[1]).unwrap_err().status(), deepinfer::Status::InvalidState);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn push_tokens(&mut self, ids: &[i32]) -> Result<()> {
        // SAFETY: a live stream; ids.len() ids, not kept.
        check(|err| unsafe {
            sys::di_stream_push_tokens(self.raw.as_ptr(), ids.as_ptr(), ids.len(), err)
        })
    }

    /// The backend finished for `reason`: held text is released, the final
    /// chunks (finish_reason, usage) are produced and the complete response
    /// becomes available (`di_stream_finish`). A second call produces nothing.
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let prompt = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// # let mut s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// s.finish(deepinfer::FinishReason::Length)?;
    /// assert!(s.events().any(|e| e == deepinfer::StreamEvent::Finish("length")));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn finish(&mut self, reason: FinishReason) -> Result<()> {
        // SAFETY: a live stream.
        check(|err| unsafe { sys::di_stream_finish(self.raw.as_ptr(), reason.code(), err) })
    }

    /// `true` once the stream finished (by [`ResponseStream::finish`], or a stop
    /// sequence matched), `di_stream_finished`.
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let prompt = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// # let s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// assert!(!s.is_finished());
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn is_finished(&self) -> bool {
        // SAFETY: a live stream.
        unsafe { sys::di_stream_finished(self.raw.as_ptr()) != 0 }
    }

    /// The stop sequence that ended the stream, if one did
    /// (`di_stream_stop_sequence`).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// let prompt = codec.render(deepinfer::Protocol::Chat,
    ///     r#"{"model": "m", "stop": ["END"], "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// let mut s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// s.push_text("one END two", 3)?;
    /// assert!(s.is_finished());
    /// assert_eq!(s.stop_sequence(), Some("END"));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn stop_sequence(&self) -> Option<&str> {
        // SAFETY: owned by the stream, which self borrows.
        unsafe { borrowed_cstr(sys::di_stream_stop_sequence(self.raw.as_ptr())) }
    }

    /// The parsed events of the last ready/push/finish call, in order.
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let prompt = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// # let mut s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// s.push_text("Hi", 1)?;
    /// assert_eq!(s.events().collect::<Vec<_>>(), vec![deepinfer::StreamEvent::Text("Hi")]);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn events(&self) -> StreamEvents<'_> {
        // SAFETY: a live stream.
        let n = unsafe { sys::di_stream_event_count(self.raw.as_ptr()) };
        StreamEvents { s: self, i: 0, n }
    }

    /// The protocol chunks of the last ready/push/finish call, in order.
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let prompt = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// # let mut s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// s.push_text("Hi", 1)?;
    /// for c in s.chunks() {
    ///     assert!(c.sse.starts_with("data: ") && c.name.is_none());
    /// }
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn chunks(&self) -> Chunks<'_> {
        // SAFETY: a live stream.
        let n = unsafe { sys::di_stream_chunk_count(self.raw.as_ptr()) };
        Chunks { s: self, i: 0, n }
    }

    /// The complete (non-streaming) response JSON, once finished
    /// (`di_stream_response_json`).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let prompt = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// # let mut s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// assert!(s.response_json().is_none());
    /// s.finish(deepinfer::FinishReason::Stop)?;
    /// assert!(s.response_json().unwrap().starts_with('{'));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn response_json(&self) -> Option<&str> {
        let mut len = 0usize;
        // SAFETY: owned by the stream, which self borrows.
        let p = unsafe { sys::di_stream_response_json(self.raw.as_ptr(), &mut len) };
        match unsafe { crate::util::text(p, len) } {
            Some(std::borrow::Cow::Borrowed(s)) => Some(s),
            _ => None,
        }
    }

    /// Usage so far: (completion tokens, reasoning tokens), `di_stream_usage`.
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let prompt = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// # let mut s = deepinfer::ResponseStream::new(&prompt, None, &deepinfer::StreamOptions::new())?;
    /// s.push_text("Hi", 2)?;
    /// assert_eq!(s.usage(), (2, 0));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn usage(&self) -> (u32, u32) {
        let mut c = 0u32;
        let mut r = 0u32;
        // SAFETY: a live stream.
        unsafe { sys::di_stream_usage(self.raw.as_ptr(), &mut c, &mut r) };
        (c, r)
    }

    fn event(&self, i: usize) -> Option<StreamEvent<'_>> {
        let s = self.raw.as_ptr() as *const sys::di_stream;
        let mut len = 0usize;
        // SAFETY: i < the event count; the strings are owned by the stream until
        // its next call, which the borrow of self prevents.
        unsafe {
            let kind = sys::di_stream_event_kind_at(s, i);
            let p = sys::di_stream_event_text(s, i, &mut len);
            let text = match crate::util::text(p, len) {
                Some(std::borrow::Cow::Borrowed(t)) => t,
                _ => "",
            };
            let index = sys::di_stream_event_call_index(s, i).max(0) as u32;
            let id = borrowed_cstr(sys::di_stream_event_call_id(s, i)).unwrap_or("");
            let name = borrowed_cstr(sys::di_stream_event_call_name(s, i)).unwrap_or("");
            Some(match kind {
                sys::DI_STREAM_REASONING => StreamEvent::Reasoning(text),
                sys::DI_STREAM_TEXT => StreamEvent::Text(text),
                sys::DI_STREAM_TOOL_CALL_BEGIN => StreamEvent::ToolCallBegin { index, id, name },
                sys::DI_STREAM_TOOL_CALL_ARGUMENTS => StreamEvent::ToolCallArguments {
                    index,
                    id,
                    name,
                    delta: text,
                },
                sys::DI_STREAM_TOOL_CALL_END => StreamEvent::ToolCallEnd {
                    index,
                    id,
                    name,
                    arguments: text,
                },
                sys::DI_STREAM_FINISH => StreamEvent::Finish(text),
                _ => return None,
            })
        }
    }
}

impl Drop for ResponseStream<'_> {
    fn drop(&mut self) {
        // SAFETY: we own it; no borrow of its events or chunks is alive.
        unsafe { sys::di_stream_free(self.raw.as_ptr()) };
    }
}
