//! `Request`: what to submit to an engine (`di_request`).

use std::ffi::CString;
use std::mem::MaybeUninit;
use std::os::raw::c_char;

use deepinfer_sys as sys;

use crate::codec::Protocol;
use crate::error::{Error, Result, Status};

/// A request to submit ([`Engine::submit`](crate::Engine::submit)): a token
/// prompt, or a Chat Completions / Messages / Responses body, with sampling
/// settings. It borrows its prompt and lists; the engine copies what it needs
/// at submit, so one `Request` may be submitted many times.
///
/// Settings left unset keep the library's defaults (temperature 1, top_p 1,
/// top_k off, a seed from the clock, …); for protocol requests the body's own
/// `max_tokens`, `temperature`, … win over these defaults, and a set
/// `max_tokens` here wins over the body (docs/api.md).
///
/// ```
/// use deepinfer::Request;
/// let greedy = Request::tokens(&[1, 2, 3]).max_tokens(16).temperature(0.0).ignore_eos(true);
/// let chat = Request::chat(r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#).seed(42);
/// let bias = [(50256, -100.0)];
/// let sampled = Request::tokens(&[1, 2, 3]).top_k(40).top_p(0.9).logit_bias(&bias).stop_tokens(&[2]);
/// let scored = Request::tokens(&[1, 2, 3]).logprobs(true).top_logprobs(5);
/// let json = Request::tokens(&[1, 2, 3]).json_schema(r#"{"type": "object"}"#);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Request<'a> {
    protocol: Option<Protocol>,
    body: &'a str,
    tokens: &'a [i32],
    max_tokens: Option<u64>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<u32>,
    min_p: Option<f32>,
    repetition_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    seed: Option<u64>,
    logit_bias: &'a [(i32, f32)],
    stop_tokens: &'a [i32],
    ignore_eos: bool,
    logprobs: bool,
    top_logprobs: u32,
    grammar: Option<&'a str>,
    json_schema: Option<&'a str>,
    regex: Option<&'a str>,
}

/// What a `di_request` points into besides the `Request`: the split
/// logit_bias and the NUL-terminated constraint strings.
pub(crate) struct RawParts {
    bias: (Vec<i32>, Vec<f32>),
    grammar: Option<CString>,
    json_schema: Option<CString>,
    regex: Option<CString>,
}

fn c_string(field: &str, s: Option<&str>) -> Result<Option<CString>> {
    s.map(|s| {
        CString::new(s).map_err(|e| {
            Error::new(
                Status::InvalidArgument,
                format!(
                    "{}: contains a NUL byte at offset {}",
                    field,
                    e.nul_position()
                ),
            )
        })
    })
    .transpose()
}

impl<'a> Request<'a> {
    fn new(protocol: Option<Protocol>, body: &'a str, tokens: &'a [i32]) -> Request<'a> {
        Request {
            protocol,
            body,
            tokens,
            max_tokens: None,
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
            repetition_penalty: None,
            presence_penalty: None,
            frequency_penalty: None,
            seed: None,
            logit_bias: &[],
            stop_tokens: &[],
            ignore_eos: false,
            logprobs: false,
            top_logprobs: 0,
            grammar: None,
            json_schema: None,
            regex: None,
        }
    }

    /// A token request: `prompt` ids (below the engine's vocabulary size); its
    /// output arrives as [`Event::Tokens`](crate::Event::Tokens) and, with a
    /// tokenizer, decoded [`Event::Text`](crate::Event::Text).
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1, 2, 3]);
    /// ```
    pub fn tokens(prompt: &'a [i32]) -> Request<'a> {
        Request::new(None, "", prompt)
    }

    /// An OpenAI Chat Completions body (JSON), rendered with the engine's encoding
    /// and answered with Chat chunks.
    ///
    /// ```
    /// let r = deepinfer::Request::chat(r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#);
    /// ```
    pub fn chat(body: &'a str) -> Request<'a> {
        Request::protocol(Protocol::Chat, body)
    }

    /// An Anthropic Messages body (JSON).
    ///
    /// ```
    /// let r = deepinfer::Request::messages(r#"{"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}"#);
    /// ```
    pub fn messages(body: &'a str) -> Request<'a> {
        Request::protocol(Protocol::Messages, body)
    }

    /// An OpenAI Responses body (JSON).
    ///
    /// ```
    /// let r = deepinfer::Request::responses(r#"{"model": "m", "input": "Hi"}"#);
    /// ```
    pub fn responses(body: &'a str) -> Request<'a> {
        Request::protocol(Protocol::Responses, body)
    }

    /// A body of `protocol` (JSON).
    ///
    /// ```
    /// let r = deepinfer::Request::protocol(deepinfer::Protocol::Chat, "{}");
    /// ```
    pub fn protocol(protocol: Protocol, body: &'a str) -> Request<'a> {
        Request::new(Some(protocol), body, &[])
    }

    /// Output tokens at most (a protocol body's `max_tokens` is used otherwise;
    /// a token request runs to the context limit).
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).max_tokens(32);
    /// ```
    pub fn max_tokens(mut self, n: u64) -> Request<'a> {
        self.max_tokens = Some(n);
        self
    }

    /// Temperature in [0, 100]; 0 is greedy (the most likely token), and so is
    /// any temperature below 1e-5 (vLLM's `_SAMPLING_EPS`).
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).temperature(0.0);
    /// ```
    pub fn temperature(mut self, t: f32) -> Request<'a> {
        self.temperature = Some(t);
        self
    }

    /// Nucleus sampling: top_p in (0, 1].
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).top_p(0.95);
    /// ```
    pub fn top_p(mut self, p: f32) -> Request<'a> {
        self.top_p = Some(p);
        self
    }

    /// Keep the `k` most likely tokens (0: off).
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).top_k(40);
    /// ```
    pub fn top_k(mut self, k: u32) -> Request<'a> {
        self.top_k = Some(k);
        self
    }

    /// min_p in [0, 1] (0: off).
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).min_p(0.05);
    /// ```
    pub fn min_p(mut self, p: f32) -> Request<'a> {
        self.min_p = Some(p);
        self
    }

    /// Repetition penalty in (0, 100] over prompt and output (1: off).
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).repetition_penalty(1.1);
    /// ```
    pub fn repetition_penalty(mut self, p: f32) -> Request<'a> {
        self.repetition_penalty = Some(p);
        self
    }

    /// Presence penalty in [-2, 2] over output tokens, as OpenAI's.
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).presence_penalty(0.5);
    /// ```
    pub fn presence_penalty(mut self, p: f32) -> Request<'a> {
        self.presence_penalty = Some(p);
        self
    }

    /// Frequency penalty in [-2, 2] over output tokens, as OpenAI's.
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).frequency_penalty(0.5);
    /// ```
    pub fn frequency_penalty(mut self, p: f32) -> Request<'a> {
        self.frequency_penalty = Some(p);
        self
    }

    /// The seed of the request's own random generator: the same seed, prompt
    /// and settings give the same tokens whatever else the engine runs
    /// (default: drawn from the clock). At most `i64::MAX`.
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).seed(7);
    /// ```
    pub fn seed(mut self, seed: u64) -> Request<'a> {
        self.seed = Some(seed);
        self
    }

    /// Biases added to the logits of token ids, each in [-100, 100] (OpenAI's
    /// `logit_bias`).
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).logit_bias(&[(7, 100.0)]);
    /// ```
    pub fn logit_bias(mut self, bias: &'a [(i32, f32)]) -> Request<'a> {
        self.logit_bias = bias;
        self
    }

    /// Token requests: more token ids that end the output, besides the model's
    /// end of sequence.
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).stop_tokens(&[13]);
    /// ```
    pub fn stop_tokens(mut self, ids: &'a [i32]) -> Request<'a> {
        self.stop_tokens = ids;
        self
    }

    /// Token requests: `true` stops at none of the end-of-sequence tokens.
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).ignore_eos(true);
    /// ```
    pub fn ignore_eos(mut self, ignore: bool) -> Request<'a> {
        self.ignore_eos = ignore;
        self
    }

    /// Token requests: `true` reports each output token's log probability
    /// ([`Tokens::logprobs`](crate::Tokens::logprobs)): the log-softmax of the
    /// model's raw logits, whatever the sampling settings (`di_request.logprobs`).
    /// A protocol request sets it in its body (Chat `logprobs`); set here it is
    /// `InvalidArgument` at submit.
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).logprobs(true);
    /// ```
    pub fn logprobs(mut self, on: bool) -> Request<'a> {
        self.logprobs = on;
        self
    }

    /// Token requests: the `k` (0 to 20) most likely tokens at each output
    /// position with their log probabilities
    /// ([`Tokens::top_logprobs`](crate::Tokens::top_logprobs)); needs
    /// [`Request::logprobs`] (else `InvalidArgument` at submit, as for k > 20).
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).logprobs(true).top_logprobs(3);
    /// ```
    pub fn top_logprobs(mut self, k: u32) -> Request<'a> {
        self.top_logprobs = k;
        self
    }

    /// Token requests: constrain the output to one JSON text that the JSON
    /// Schema `schema` accepts (`di_request.json_schema`; docs/grammar.md lists
    /// the keywords). A schema that does not compile is `InvalidRequest` at
    /// submit, naming the schema path and keyword. At most one of
    /// `json_schema`, `grammar` and `regex`.
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).json_schema(r#"{"type": "integer"}"#);
    /// ```
    pub fn json_schema(mut self, schema: &'a str) -> Request<'a> {
        self.json_schema = Some(schema);
        self
    }

    /// Token requests: constrain the output to a GBNF grammar (llama.cpp's
    /// format, start rule `root`; `di_request.grammar`).
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).grammar(r#"root ::= "yes" | "no""#);
    /// ```
    pub fn grammar(mut self, gbnf: &'a str) -> Request<'a> {
        self.grammar = Some(gbnf);
        self
    }

    /// Token requests: constrain the whole output to match a regular
    /// expression (`di_request.regex`).
    ///
    /// ```
    /// let r = deepinfer::Request::tokens(&[1]).regex("[0-9]{3}");
    /// ```
    pub fn regex(mut self, re: &'a str) -> Request<'a> {
        self.regex = Some(re);
        self
    }

    /// The owned parts the C struct points into; `InvalidArgument` for a
    /// constraint string holding a NUL byte.
    pub(crate) fn raw_parts(&self) -> Result<RawParts> {
        Ok(RawParts {
            bias: self.logit_bias.iter().cloned().unzip(),
            grammar: c_string("grammar", self.grammar)?,
            json_schema: c_string("json_schema", self.json_schema)?,
            regex: c_string("regex", self.regex)?,
        })
    }

    /// The C struct, pointing into `self` and `parts`, without the callback.
    pub(crate) fn to_raw(&self, parts: &RawParts) -> sys::di_request {
        let bias = &parts.bias;
        let mut r = MaybeUninit::<sys::di_request>::zeroed();
        // SAFETY: di_request_init_size writes exactly the binding's struct (its
        // size_of): struct_size and every default; zeroed (integers, floats, NULL
        // pointers, no callback) is valid before.
        let mut r = unsafe {
            sys::di_request_init_size(r.as_mut_ptr(), std::mem::size_of::<sys::di_request>());
            r.assume_init()
        };
        if let Some(p) = self.protocol {
            r.protocol = p.code();
            r.json = self.body.as_ptr() as *const c_char;
            r.json_len = self.body.len();
        } else {
            r.tokens = self.tokens.as_ptr();
            r.n_tokens = self.tokens.len();
        }
        r.ignore_eos = self.ignore_eos as i32;
        if let Some(n) = self.max_tokens {
            // Beyond i64 the library's range check reports it.
            r.max_tokens = i64::try_from(n).unwrap_or(-1);
        }
        if let Some(v) = self.temperature {
            r.temperature = v;
        }
        if let Some(v) = self.top_p {
            r.top_p = v;
        }
        if let Some(v) = self.top_k {
            r.top_k = i32::try_from(v).unwrap_or(-1);
        }
        if let Some(v) = self.min_p {
            r.min_p = v;
        }
        if let Some(v) = self.repetition_penalty {
            r.repetition_penalty = v;
        }
        if let Some(v) = self.presence_penalty {
            r.presence_penalty = v;
        }
        if let Some(v) = self.frequency_penalty {
            r.frequency_penalty = v;
        }
        if let Some(s) = self.seed {
            // -2 is refused by the library with its message naming `seed`.
            r.seed = i64::try_from(s).unwrap_or(-2);
        }
        if !bias.0.is_empty() {
            r.logit_bias_ids = bias.0.as_ptr();
            r.logit_bias_values = bias.1.as_ptr();
            r.n_logit_bias = bias.0.len();
        }
        if !self.stop_tokens.is_empty() {
            r.stop_tokens = self.stop_tokens.as_ptr();
            r.n_stop_tokens = self.stop_tokens.len();
        }
        r.logprobs = self.logprobs as i32;
        // Beyond i32 the library's range check reports it.
        r.top_logprobs = i32::try_from(self.top_logprobs).unwrap_or(-1);
        let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        r.grammar = ptr(&parts.grammar);
        r.json_schema = ptr(&parts.json_schema);
        r.regex = ptr(&parts.regex);
        r
    }
}
