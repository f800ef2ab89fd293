//! The events of an engine request (`di_event`), as one enum.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;
use std::os::raw::c_char;

use deepinfer_sys as sys;

use crate::error::{Error, Result, Status};
use crate::stream::FinishReason;
use crate::util::{ctext, text};

/// One event of a request, in the order the request produced it; the last one
/// is always [`Event::Done`], exactly once.
///
/// The callback of [`Engine::submit_with_callback`](crate::Engine::submit_with_callback)
/// gets events that borrow the library's memory (`Cow::Borrowed`): they cannot
/// outlive the call, and [`Event::into_owned`] copies one that must. The
/// iterator of a [`RequestHandle`](crate::RequestHandle) yields owned events
/// (`Event<'static>`).
///
/// Every event but `Done` carries a `choice_index`: the choice it belongs to
/// when a Chat Completions body asks for `n` > 1 choices (the OpenAI API's
/// `choices[i].index`, `di_event_choice_index`; the choices' events interleave
/// as they are generated), 0 for every other request.
///
/// ```no_run
/// use deepinfer::{Engine, Event, Request};
/// let engine = Engine::builder("SmolLM2-135M-Instruct.Q4_1.gguf").build()?;
/// let body = r#"{"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "Hi"}]}"#;
/// for ev in engine.submit(&Request::chat(body))? {
///     match ev {
///         Event::Text(t) => print!("{}", t),              // a TextDelta, derefs to str
///         Event::Reasoning(_) | Event::Tokens(_) | Event::Chunk(_) => {}
///         Event::ToolCallDelta(_) => {}
///         Event::ToolCall(call) => println!("call {}({})", call.name, call.arguments),
///         Event::Done(done) => println!("\n{} {:?}", done.status, done.finish_text),
///         _ => {}                                     // kinds a newer crate adds
///     }
/// }
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The token ids generated in one step, every output token included (the
    /// end-of-sequence token and stop tokens too), with their log probabilities
    /// when asked for, `DI_EVENT_TOKENS`. Derefs to the ids (`&[i32]`).
    Tokens(Tokens<'a>),
    /// An answer text delta: a token request's decoded output (UTF-8 safe), or
    /// a protocol request's content, `DI_EVENT_TEXT`. Derefs to `str`.
    Text(TextDelta<'a>),
    /// A reasoning_content delta (thinking mode), `DI_EVENT_REASONING`.
    Reasoning(TextDelta<'a>),
    /// A piece of a tool call's arguments JSON while it streams,
    /// `DI_EVENT_TOOL_CALL_DELTA`.
    ToolCallDelta(ToolCallDelta<'a>),
    /// A complete tool call, `DI_EVENT_TOOL_CALL`.
    ToolCall(ToolCall<'a>),
    /// A protocol chunk ready to send, `DI_EVENT_CHUNK`.
    Chunk(Chunk<'a>),
    /// The terminal event, `DI_EVENT_DONE`.
    Done(Done<'a>),
}

/// A piece of a streaming tool call ([`Event::ToolCallDelta`]).
///
/// ```
/// use deepinfer::ToolCallDelta;
/// fn show(d: &ToolCallDelta<'_>) -> String {
///     format!("call {} ({}): +{}", d.index, d.name, d.arguments_delta)
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCallDelta<'a> {
    /// The call's 0-based index in the response (in its choice).
    pub index: u32,
    /// The Chat choice (`n` > 1) the call belongs to; 0 otherwise.
    pub choice_index: u32,
    /// The call id (`"call_00_…"`, as the protocol chunks carry it).
    pub id: Cow<'a, str>,
    /// The function name the model wrote.
    pub name: Cow<'a, str>,
    /// The next piece of the arguments JSON.
    pub arguments_delta: Cow<'a, str>,
}

/// A complete tool call ([`Event::ToolCall`]): its arguments are the JSON the
/// model wrote, unvalidated (parse it before use).
///
/// ```
/// use deepinfer::ToolCall;
/// fn run(call: &ToolCall<'_>) -> String {
///     match &*call.name {
///         "get_weather" => format!("sunny ({})", call.arguments),
///         other => format!("no tool {}", other),
///     }
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolCall<'a> {
    /// The call's 0-based index in the response (in its choice).
    pub index: u32,
    /// The Chat choice (`n` > 1) the call belongs to; 0 otherwise.
    pub choice_index: u32,
    /// The call id (`"call_00_…"`).
    pub id: Cow<'a, str>,
    /// The function name.
    pub name: Cow<'a, str>,
    /// The whole arguments JSON.
    pub arguments: Cow<'a, str>,
}

/// A protocol chunk ([`Event::Chunk`], and a response stream's
/// [`ResponseStream::chunks`](crate::ResponseStream::chunks)): Chat Completions
/// chunks, Messages events or Responses events, as JSON and as the SSE message
/// to send.
///
/// ```
/// use deepinfer::Chunk;
/// fn send(out: &mut Vec<u8>, chunk: &Chunk<'_>) {
///     out.extend_from_slice(chunk.sse.as_bytes());   // "data: {...}\n\n"
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Chunk<'a> {
    /// The chunk's JSON (the SSE `data`); `None` for Chat's closing `[DONE]`.
    pub json: Option<Cow<'a, str>>,
    /// The whole SSE message (`"event: NAME\n"` when named, `"data: …\n\n"`).
    pub sse: Cow<'a, str>,
    /// The SSE event name (Messages and Responses); `None` for Chat.
    pub name: Option<Cow<'a, str>>,
    /// The Chat choice (`n` > 1) whose delta the chunk carries (its
    /// `choices[0].index`); 0 for the usage chunk, `[DONE]`, other requests and
    /// a response stream's chunks.
    pub choice_index: u32,
}

/// The tokens of one step ([`Event::Tokens`]): their ids, the choice they
/// belong to and, when asked for, their log probabilities. Derefs to the ids.
///
/// `logprobs[i]` is `ids[i]`'s natural-log probability: the log-softmax of the
/// model's raw logits at that position, before logit_bias, penalties,
/// temperature, the grammar mask and top-k/top-p/min-p (`di_event_logprobs`;
/// always <= 0). `top_logprobs[i]` lists the k most likely tokens at that
/// position as (id, log probability), most likely first, a tie to the lower id
/// (`di_event_top_logprobs`); the sampled token is among them only when it is
/// that likely. Both are `None` unless asked for
/// ([`Request::logprobs`](crate::Request::logprobs), or a protocol body's Chat
/// `logprobs` / Responses `top_logprobs`; `top_logprobs` is `None` for k 0).
///
/// ```
/// fn show(t: &deepinfer::Tokens<'_>) {
///     for (i, id) in t.iter().enumerate() {
///         let lp = t.logprobs.as_ref().map(|l| l[i]);
///         println!("choice {} token {} logprob {:?}", t.choice_index, id, lp);
///     }
/// }
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Tokens<'a> {
    /// The token ids, in order.
    pub ids: Cow<'a, [i32]>,
    /// The Chat choice (`n` > 1) they belong to; 0 otherwise.
    pub choice_index: u32,
    /// One log probability per id, or `None` when not asked for.
    pub logprobs: Option<Cow<'a, [f32]>>,
    /// Per id, the k most likely tokens and their log probabilities, or `None`.
    pub top_logprobs: Option<Vec<Vec<(i32, f32)>>>,
}

// Log probabilities are never NaN (the library's logits are finite).
impl Eq for Tokens<'_> {}

impl Tokens<'_> {
    /// A copy that owns its data.
    ///
    /// ```
    /// # fn f(t: deepinfer::Tokens<'_>) -> deepinfer::Tokens<'static> {
    /// t.into_owned()
    /// # }
    /// ```
    pub fn into_owned(self) -> Tokens<'static> {
        Tokens {
            ids: Cow::Owned(self.ids.into_owned()),
            choice_index: self.choice_index,
            logprobs: self.logprobs.map(|l| Cow::Owned(l.into_owned())),
            top_logprobs: self.top_logprobs,
        }
    }
}

impl Deref for Tokens<'_> {
    type Target = [i32];
    fn deref(&self) -> &[i32] {
        &self.ids
    }
}

/// A text delta ([`Event::Text`], [`Event::Reasoning`]) and the choice it
/// belongs to. Derefs to `str` and displays as the text.
///
/// ```
/// let d = deepinfer::TextDelta::from("Hi");
/// assert_eq!(&*d, "Hi");
/// assert_eq!(d.choice_index, 0);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TextDelta<'a> {
    /// The delta.
    pub text: Cow<'a, str>,
    /// The Chat choice (`n` > 1) it belongs to; 0 otherwise.
    pub choice_index: u32,
}

impl TextDelta<'_> {
    /// A copy that owns its text.
    ///
    /// ```
    /// let kept: deepinfer::TextDelta<'static> = deepinfer::TextDelta::from("x").into_owned();
    /// ```
    pub fn into_owned(self) -> TextDelta<'static> {
        TextDelta {
            text: owned(self.text),
            choice_index: self.choice_index,
        }
    }
}

impl<'a> From<&'a str> for TextDelta<'a> {
    fn from(text: &'a str) -> TextDelta<'a> {
        TextDelta {
            text: Cow::Borrowed(text),
            choice_index: 0,
        }
    }
}

impl From<String> for TextDelta<'static> {
    fn from(text: String) -> TextDelta<'static> {
        TextDelta {
            text: Cow::Owned(text),
            choice_index: 0,
        }
    }
}

impl Deref for TextDelta<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for TextDelta<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Token counts of a finished request.
///
/// ```
/// let u = deepinfer::Usage::default();
/// assert_eq!(u.prompt_tokens + u.completion_tokens + u.reasoning_tokens, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Usage {
    /// Tokens of the prompt the request prefilled (after rendering).
    pub prompt_tokens: u32,
    /// Tokens generated, the end-of-sequence token included.
    pub completion_tokens: u32,
    /// Of the completion tokens, those inside the reasoning block (protocol
    /// requests with a tokenizer).
    pub reasoning_tokens: u32,
    /// Of the prompt tokens, those the prefix cache held, so not computed again
    /// (a multiple of 16; docs/prefix-cache.md).
    pub prompt_cache_hit_tokens: u32,
    /// Draft tokens verified by speculative decoding
    /// ([`EngineBuilder::speculative_tokens`](crate::EngineBuilder::speculative_tokens)).
    pub draft_tokens: u32,
    /// Of them, those kept (each a decode step saved).
    pub accepted_draft_tokens: u32,
}

/// The terminal event of a request ([`Event::Done`]).
///
/// ```no_run
/// # let engine = deepinfer::Engine::builder("SmolLM2-135M-Instruct.Q4_1.gguf").build()?;
/// let completion = engine.submit(&deepinfer::Request::tokens(&[1, 2, 3]).max_tokens(4))?.wait();
/// let done = &completion.done;
/// done.to_result()?;                                   // Err for a cancelled or failed request
/// println!("{:?}, {} tokens", done.finish_reason, done.usage.completion_tokens);
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Done<'a> {
    /// `Ok` when the request ran to its end; `Cancelled` (by a cancel or by
    /// dropping the engine); or the error that ended it (`ContextLength`, …).
    pub status: Status,
    /// Why it ended, e.g. `"cancelled by di_cancel"`; empty when it finished.
    pub message: Cow<'a, str>,
    /// Why generation stopped; `None` when the request did not finish.
    pub finish_reason: Option<FinishReason>,
    /// The protocol's finish reason (`"stop"`, `"length"`, `"tool_calls"`,
    /// `"end_turn"`, …); `None` for token requests.
    pub finish_text: Option<Cow<'a, str>>,
    /// Token counts.
    pub usage: Usage,
    /// The complete (non-streaming) response JSON of a protocol request that
    /// finished; `None` otherwise.
    pub response_json: Option<Cow<'a, str>>,
}

impl Done<'_> {
    /// `true` when the request ran to its end ([`Status::Ok`]).
    ///
    /// ```no_run
    /// # fn f(done: &deepinfer::Done<'_>) {
    /// if !done.is_ok() { eprintln!("{}: {}", done.status, done.message); }
    /// # }
    /// ```
    pub fn is_ok(&self) -> bool {
        self.status.is_ok()
    }

    /// `Ok(())` for a request that ran to its end, else its status and message
    /// as an [`Error`].
    ///
    /// ```no_run
    /// # fn f(done: &deepinfer::Done<'_>) -> deepinfer::Result<()> {
    /// done.to_result()?;
    /// # Ok(()) }
    /// ```
    pub fn to_result(&self) -> Result<()> {
        if self.is_ok() {
            Ok(())
        } else {
            Err(Error::new(self.status, self.message.clone().into_owned()))
        }
    }

    /// A copy that owns its strings.
    ///
    /// ```no_run
    /// # fn f(done: &deepinfer::Done<'_>) {
    /// let kept: deepinfer::Done<'static> = done.clone().into_owned();
    /// # }
    /// ```
    pub fn into_owned(self) -> Done<'static> {
        Done {
            status: self.status,
            message: Cow::Owned(self.message.into_owned()),
            finish_reason: self.finish_reason,
            finish_text: self.finish_text.map(owned),
            usage: self.usage,
            response_json: self.response_json.map(owned),
        }
    }
}

fn owned(c: Cow<'_, str>) -> Cow<'static, str> {
    Cow::Owned(c.into_owned())
}

impl Chunk<'_> {
    /// A copy that owns its strings.
    ///
    /// ```
    /// # fn f(c: deepinfer::Chunk<'_>) -> deepinfer::Chunk<'static> {
    /// c.into_owned()
    /// # }
    /// ```
    pub fn into_owned(self) -> Chunk<'static> {
        Chunk {
            json: self.json.map(owned),
            sse: owned(self.sse),
            name: self.name.map(owned),
            choice_index: self.choice_index,
        }
    }

    /// Chunk `i` of the last call on a response stream.
    ///
    /// # Safety
    /// `s` is a live stream, and `'a` ends before the next call on it.
    pub(crate) unsafe fn from_stream<'a>(s: *const sys::di_stream, i: usize) -> Chunk<'a> {
        let mut jl = 0usize;
        let mut sl = 0usize;
        let json = text(sys::di_stream_chunk_json(s, i, &mut jl), jl);
        let sse = text(sys::di_stream_chunk_sse(s, i, &mut sl), sl).unwrap_or_default();
        let name = ctext(sys::di_stream_chunk_event(s, i));
        Chunk {
            json,
            sse,
            name,
            choice_index: 0,
        }
    }
}

impl ToolCall<'_> {
    /// A copy that owns its strings.
    ///
    /// ```
    /// # fn f(c: deepinfer::ToolCall<'_>) -> deepinfer::ToolCall<'static> {
    /// c.into_owned()
    /// # }
    /// ```
    pub fn into_owned(self) -> ToolCall<'static> {
        ToolCall {
            index: self.index,
            choice_index: self.choice_index,
            id: owned(self.id),
            name: owned(self.name),
            arguments: owned(self.arguments),
        }
    }
}

impl ToolCallDelta<'_> {
    /// A copy that owns its strings.
    ///
    /// ```
    /// # fn f(c: deepinfer::ToolCallDelta<'_>) -> deepinfer::ToolCallDelta<'static> {
    /// c.into_owned()
    /// # }
    /// ```
    pub fn into_owned(self) -> ToolCallDelta<'static> {
        ToolCallDelta {
            index: self.index,
            choice_index: self.choice_index,
            id: owned(self.id),
            name: owned(self.name),
            arguments_delta: owned(self.arguments_delta),
        }
    }
}

impl Event<'_> {
    /// A copy that owns its data, to keep an event past its callback.
    ///
    /// ```
    /// use std::borrow::Cow;
    /// let ev = deepinfer::Event::Text("hi".into());
    /// let kept: deepinfer::Event<'static> = ev.into_owned();
    /// assert_eq!(kept, deepinfer::Event::Text("hi".to_string().into()));
    /// assert!(matches!(kept, deepinfer::Event::Text(deepinfer::TextDelta { text: Cow::Owned(_), .. })));
    /// ```
    pub fn into_owned(self) -> Event<'static> {
        match self {
            Event::Tokens(t) => Event::Tokens(t.into_owned()),
            Event::Text(t) => Event::Text(t.into_owned()),
            Event::Reasoning(t) => Event::Reasoning(t.into_owned()),
            Event::ToolCallDelta(d) => Event::ToolCallDelta(d.into_owned()),
            Event::ToolCall(c) => Event::ToolCall(c.into_owned()),
            Event::Chunk(c) => Event::Chunk(c.into_owned()),
            Event::Done(d) => Event::Done(d.into_owned()),
        }
    }

    /// `true` for [`Event::Done`].
    ///
    /// ```
    /// assert!(!deepinfer::Event::Text("x".into()).is_done());
    /// ```
    pub fn is_done(&self) -> bool {
        matches!(self, Event::Done(_))
    }

    /// The event behind `ev`, borrowing its data; `None` for a kind this crate
    /// does not know (a newer library's), which is skipped.
    ///
    /// # Safety
    /// `ev` is a live event, and `'a` ends before its callback returns.
    pub(crate) unsafe fn from_raw<'a>(ev: *const sys::di_event) -> Option<Event<'a>> {
        let kind = sys::di_event_kind_of(ev);
        let mut len = 0usize;
        let ev_text = |len: &mut usize| text(sys::di_event_text(ev, len), *len).unwrap_or_default();
        let call_index = || sys::di_event_tool_call_index(ev).max(0) as u32;
        let call_str = |p: *const c_char| ctext(p).unwrap_or_default();
        let choice_index = sys::di_event_choice_index(ev);
        let delta = |text| TextDelta { text, choice_index };
        Some(match kind {
            sys::DI_EVENT_TOKENS => Event::Tokens(tokens_from_raw(ev, choice_index)),
            sys::DI_EVENT_TEXT => Event::Text(delta(ev_text(&mut len))),
            sys::DI_EVENT_REASONING => Event::Reasoning(delta(ev_text(&mut len))),
            sys::DI_EVENT_TOOL_CALL_DELTA => Event::ToolCallDelta(ToolCallDelta {
                index: call_index(),
                choice_index,
                id: call_str(sys::di_event_tool_call_id(ev)),
                name: call_str(sys::di_event_tool_call_name(ev)),
                arguments_delta: ev_text(&mut len),
            }),
            sys::DI_EVENT_TOOL_CALL => Event::ToolCall(ToolCall {
                index: call_index(),
                choice_index,
                id: call_str(sys::di_event_tool_call_id(ev)),
                name: call_str(sys::di_event_tool_call_name(ev)),
                arguments: ev_text(&mut len),
            }),
            sys::DI_EVENT_CHUNK => {
                let mut jl = 0usize;
                let mut sl = 0usize;
                Event::Chunk(Chunk {
                    json: text(sys::di_event_chunk_json(ev, &mut jl), jl),
                    sse: text(sys::di_event_chunk_sse(ev, &mut sl), sl).unwrap_or_default(),
                    name: ctext(sys::di_event_chunk_name(ev)),
                    choice_index,
                })
            }
            sys::DI_EVENT_DONE => {
                let mut rl = 0usize;
                Event::Done(Done {
                    status: Status::from_code(sys::di_event_status(ev)),
                    message: ctext(sys::di_event_message(ev)).unwrap_or_default(),
                    finish_reason: FinishReason::from_code(sys::di_event_finish_reason(ev)),
                    finish_text: ctext(sys::di_event_finish_text(ev)),
                    usage: Usage {
                        prompt_tokens: sys::di_event_prompt_tokens(ev),
                        completion_tokens: sys::di_event_completion_tokens(ev),
                        reasoning_tokens: sys::di_event_reasoning_tokens(ev),
                        prompt_cache_hit_tokens: sys::di_event_prompt_cache_hit_tokens(ev),
                        draft_tokens: sys::di_event_draft_tokens(ev),
                        accepted_draft_tokens: sys::di_event_accepted_draft_tokens(ev),
                    },
                    response_json: text(sys::di_event_response_json(ev, &mut rl), rl),
                })
            }
            _ => return None,
        })
    }
}

/// A `DI_EVENT_TOKENS` event's ids and log probabilities, borrowed.
///
/// # Safety
/// `ev` is a live tokens event, and `'a` ends before its callback returns.
unsafe fn tokens_from_raw<'a>(ev: *const sys::di_event, choice_index: u32) -> Tokens<'a> {
    let mut n = 0usize;
    let p = sys::di_event_tokens(ev, &mut n);
    let ids: &'a [i32] = if p.is_null() || n == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(p, n)
    };
    let mut n_lp = 0usize;
    let lp = sys::di_event_logprobs(ev, &mut n_lp);
    let logprobs: Option<Cow<'a, [f32]>> = if lp.is_null() {
        None
    } else if n_lp == 0 {
        Some(Cow::Borrowed(&[]))
    } else {
        Some(Cow::Borrowed(std::slice::from_raw_parts(lp, n_lp)))
    };
    let mut top_logprobs = None;
    if logprobs.is_some()
        && !ids.is_empty()
        && sys::di_event_top_logprobs(ev, 0, std::ptr::null_mut(), std::ptr::null_mut()) > 0
    {
        let mut all = Vec::with_capacity(ids.len());
        for i in 0..ids.len() {
            let mut tid: *const i32 = std::ptr::null();
            let mut tlp: *const f32 = std::ptr::null();
            let k = sys::di_event_top_logprobs(ev, i, &mut tid, &mut tlp);
            let row = if k == 0 || tid.is_null() || tlp.is_null() {
                Vec::new()
            } else {
                let a = std::slice::from_raw_parts(tid, k);
                let b = std::slice::from_raw_parts(tlp, k);
                a.iter().copied().zip(b.iter().copied()).collect()
            };
            all.push(row);
        }
        top_logprobs = Some(all);
    }
    Tokens {
        ids: Cow::Borrowed(ids),
        choice_index,
        logprobs,
        top_logprobs,
    }
}
