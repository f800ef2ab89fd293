//! The events of an engine request (`di_event`), as one enum.

use std::borrow::Cow;
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
/// ```no_run
/// use deepinfer::{Engine, Event, Request};
/// let engine = Engine::builder("SmolLM2-135M-Instruct.Q4_1.gguf").build()?;
/// let body = r#"{"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "Hi"}]}"#;
/// for ev in engine.submit(&Request::chat(body))? {
///     match ev {
///         Event::Text(t) => print!("{}", t),
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
    /// end-of-sequence token and stop tokens too), `DI_EVENT_TOKENS`.
    Tokens(Cow<'a, [i32]>),
    /// An answer text delta: a token request's decoded output (UTF-8 safe), or
    /// a protocol request's content, `DI_EVENT_TEXT`.
    Text(Cow<'a, str>),
    /// A reasoning_content delta (thinking mode), `DI_EVENT_REASONING`.
    Reasoning(Cow<'a, str>),
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
    /// The call's 0-based index in the response.
    pub index: u32,
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
    /// The call's 0-based index in the response.
    pub index: u32,
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
        Chunk { json, sse, name }
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
    /// let ev = deepinfer::Event::Text(Cow::Borrowed("hi"));
    /// let kept: deepinfer::Event<'static> = ev.into_owned();
    /// assert_eq!(kept, deepinfer::Event::Text(Cow::Owned("hi".to_string())));
    /// ```
    pub fn into_owned(self) -> Event<'static> {
        match self {
            Event::Tokens(t) => Event::Tokens(Cow::Owned(t.into_owned())),
            Event::Text(t) => Event::Text(owned(t)),
            Event::Reasoning(t) => Event::Reasoning(owned(t)),
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
        Some(match kind {
            sys::DI_EVENT_TOKENS => {
                let mut n = 0usize;
                let p = sys::di_event_tokens(ev, &mut n);
                if p.is_null() || n == 0 {
                    Event::Tokens(Cow::Borrowed(&[]))
                } else {
                    Event::Tokens(Cow::Borrowed(std::slice::from_raw_parts(p, n)))
                }
            }
            sys::DI_EVENT_TEXT => Event::Text(ev_text(&mut len)),
            sys::DI_EVENT_REASONING => Event::Reasoning(ev_text(&mut len)),
            sys::DI_EVENT_TOOL_CALL_DELTA => Event::ToolCallDelta(ToolCallDelta {
                index: call_index(),
                id: call_str(sys::di_event_tool_call_id(ev)),
                name: call_str(sys::di_event_tool_call_name(ev)),
                arguments_delta: ev_text(&mut len),
            }),
            sys::DI_EVENT_TOOL_CALL => Event::ToolCall(ToolCall {
                index: call_index(),
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
