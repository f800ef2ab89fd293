//! The codec, input side: API requests rendered into prompts and token ids
//! (`di_codec_*`, `di_prompt_*`).

use std::marker::PhantomData;
use std::os::raw::c_char;
use std::ptr::{self, NonNull};

use deepinfer_sys as sys;

use crate::error::{check, Result};
use crate::tokenizer::Tokenizer;
use crate::util::cstring;

/// The wire protocol of a request body (`di_protocol`).
///
/// ```
/// assert_eq!(deepinfer::Protocol::Messages.code(), 2);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// OpenAI Chat Completions (`DI_PROTOCOL_CHAT`).
    Chat,
    /// Anthropic Messages (`DI_PROTOCOL_MESSAGES`).
    Messages,
    /// OpenAI Responses (`DI_PROTOCOL_RESPONSES`).
    Responses,
}

impl Protocol {
    /// The C value.
    ///
    /// ```
    /// assert_eq!(deepinfer::Protocol::Chat.code(), 1);
    /// ```
    pub fn code(self) -> i32 {
        (match self {
            Protocol::Chat => sys::DI_PROTOCOL_CHAT,
            Protocol::Messages => sys::DI_PROTOCOL_MESSAGES,
            Protocol::Responses => sys::DI_PROTOCOL_RESPONSES,
        }) as i32
    }
}

/// A prompt encoding (`di_encoding`): the layout a model was trained on.
///
/// ```
/// use deepinfer::Encoding;
/// assert_eq!(Encoding::from_code(5), Some(Encoding::ChatMl));
/// assert_eq!(Encoding::ChatMl.code(), 5);
/// assert_eq!(Encoding::from_code(0), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// DeepSeek V4 (deepseek-recipe's `DeepseekV4Encoding`).
    Dsv4,
    /// DeepSeek V4.1 (`DeepseekV41Encoding`).
    Dsv41,
    /// DeepSeek V3: the chat template of its tokenizer_config.json.
    Dsv3,
    /// The DeepSeek-R1 distills: the chat template of their GGUF.
    R1,
    /// ChatML with Hermes-style tool calls (SmolLM2, Qwen2 chat models).
    ChatMl,
}

impl Encoding {
    /// The C value.
    ///
    /// ```
    /// assert_eq!(deepinfer::Encoding::Dsv4.code(), 1);
    /// ```
    pub fn code(self) -> i32 {
        (match self {
            Encoding::Dsv4 => sys::DI_ENCODING_DSV4,
            Encoding::Dsv41 => sys::DI_ENCODING_DSV41,
            Encoding::Dsv3 => sys::DI_ENCODING_DSV3,
            Encoding::R1 => sys::DI_ENCODING_R1,
            Encoding::ChatMl => sys::DI_ENCODING_CHATML,
        }) as i32
    }

    /// The encoding of a C value; `None` for 0 (no encoding) and for values this
    /// crate does not know.
    ///
    /// ```
    /// assert_eq!(deepinfer::Encoding::from_code(4), Some(deepinfer::Encoding::R1));
    /// ```
    pub fn from_code(code: i32) -> Option<Encoding> {
        match code as u32 {
            sys::DI_ENCODING_DSV4 => Some(Encoding::Dsv4),
            sys::DI_ENCODING_DSV41 => Some(Encoding::Dsv41),
            sys::DI_ENCODING_DSV3 => Some(Encoding::Dsv3),
            sys::DI_ENCODING_R1 => Some(Encoding::R1),
            sys::DI_ENCODING_CHATML => Some(Encoding::ChatMl),
            _ => None,
        }
    }
}

/// A codec (`di_codec`): renders Chat Completions, Messages and Responses bodies
/// into the exact prompt an encoding defines, and into token ids when it has a
/// tokenizer. For hosts with their own inference; needs no model.
///
/// Immutable once made, so `Send` and `Sync` (`di_codec_render` may run on many
/// threads at once); it borrows its tokenizer.
///
/// ```
/// use deepinfer::{Codec, Encoding, Protocol};
/// let codec = Codec::new(None, Encoding::ChatMl)?;
/// let prompt = codec.render(Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
/// assert_eq!(prompt.text(), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Debug)]
pub struct Codec<'t> {
    raw: NonNull<sys::di_codec>,
    _tok: PhantomData<&'t Tokenizer>,
}

// SAFETY: deepinfer.h: "Immutable once created: di_codec_render may run from many
// threads at once." The one mutating call, di_codec_set_default_system, takes
// &mut self; the tokenizer it borrows is Sync.
unsafe impl Send for Codec<'_> {}
unsafe impl Sync for Codec<'_> {}

impl<'t> Codec<'t> {
    /// A codec for `encoding`, with `tokenizer` to make token ids (`None`:
    /// prompts have text only), `di_codec_create`.
    ///
    /// ```
    /// let codec = deepinfer::Codec::new(None, deepinfer::Encoding::Dsv4)?;
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn new(tokenizer: Option<&'t Tokenizer>, encoding: Encoding) -> Result<Codec<'t>> {
        let tok = tokenizer.map_or(ptr::null(), |t| t.as_ptr());
        let mut out = ptr::null_mut();
        // SAFETY: tok is NULL or a tokenizer that outlives 't, which the codec borrows.
        check(|err| unsafe { sys::di_codec_create(tok, encoding.code() as _, &mut out, err) })?;
        Ok(Codec {
            raw: NonNull::new(out).expect("di_codec_create returned DI_OK and NULL"),
            _tok: PhantomData,
        })
    }

    /// ChatML only: the system prompt of a conversation that opens without a
    /// system message (`None`: none, the default), `di_codec_set_default_system`.
    /// Another encoding is `InvalidArgument`.
    ///
    /// ```
    /// use deepinfer::{Codec, Encoding, Protocol};
    /// let mut codec = Codec::new(None, Encoding::ChatMl)?;
    /// codec.set_default_system(Some("Be brief."))?;
    /// let p = codec.render(Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// assert!(p.text().starts_with("<|im_start|>system\nBe brief.<|im_end|>"));
    /// let mut dsv4 = Codec::new(None, Encoding::Dsv4)?;
    /// assert!(dsv4.set_default_system(Some("x")).is_err());
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn set_default_system(&mut self, text: Option<&str>) -> Result<()> {
        let c = match text {
            Some(t) => Some(cstring(t, "text")?),
            None => None,
        };
        let p = c.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        // SAFETY: &mut self: no render runs; the text is copied.
        check(|err| unsafe { sys::di_codec_set_default_system(self.raw.as_ptr(), p, err) })
    }

    /// Renders the request body `json` of `protocol` into a prompt
    /// (`di_codec_render`). Errors: `InvalidRequest` for every body the
    /// reference rejects, the message naming the field; `Unsupported` for a
    /// protocol the encoding does not take.
    ///
    /// ```
    /// use deepinfer::{Codec, Encoding, Protocol, Status};
    /// let codec = Codec::new(None, Encoding::Dsv4)?;
    /// let err = codec
    ///     .render(Protocol::Chat, r#"{"model": "DeepSeek-V4-Pro", "messages": [{"role": "wizard", "content": "Hi"}]}"#)
    ///     .unwrap_err();
    /// assert_eq!(err.status(), Status::InvalidRequest);
    /// assert_eq!(err.message(), "messages[0].role: unknown role \"wizard\"");
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn render(&self, protocol: Protocol, json: &str) -> Result<Prompt> {
        let mut out = ptr::null_mut();
        // SAFETY: json is json.len() bytes; out receives an owned prompt.
        check(|err| unsafe {
            sys::di_codec_render(
                self.raw.as_ptr(),
                protocol.code() as _,
                json.as_ptr() as *const c_char,
                json.len(),
                &mut out,
                err,
            )
        })?;
        Ok(Prompt {
            raw: NonNull::new(out).expect("di_codec_render returned DI_OK and NULL"),
        })
    }
}

impl Drop for Codec<'_> {
    fn drop(&mut self) {
        // SAFETY: we own it; no render runs (renders borrow self).
        unsafe { sys::di_codec_free(self.raw.as_ptr()) };
    }
}

/// A rendered prompt (`di_prompt`): its text, its token ids (with a tokenizer)
/// and what the request asks of generation. Independent of the codec once made.
///
/// `Send` but not `Sync` (the header: read it from one thread at a time), so
/// this does not compile:
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<deepinfer::Prompt>();
/// ```
///
/// ```
/// use deepinfer::{Codec, Encoding, Protocol};
/// let codec = Codec::new(None, Encoding::Dsv4)?;
/// let p = codec.render(Protocol::Chat, r#"{"model": "DeepSeek-V4-Pro", "stop": ["END"],
///     "messages": [{"role": "user", "content": "Hi"}]}"#)?;
/// assert!(p.text().ends_with("<｜User｜>Hi<｜Assistant｜><think>"));
/// assert!(p.thinking());
/// assert_eq!(p.stop_sequences(), vec!["END"]);
/// assert!(p.tokens().is_err());                      // no tokenizer
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Debug)]
pub struct Prompt {
    raw: NonNull<sys::di_prompt>,
}

// SAFETY: a prompt is owned by one value and read through &self or moved; it is
// not Sync because the header asks one reading thread at a time.
unsafe impl Send for Prompt {}

impl Prompt {
    pub(crate) fn as_ptr(&self) -> *const sys::di_prompt {
        self.raw.as_ptr()
    }

    /// The prompt text (`di_prompt_text`).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let p = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// assert!(p.text().contains("Hi"));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn text(&self) -> &str {
        let mut len = 0usize;
        // SAFETY: owned by the prompt, which self borrows.
        let p = unsafe { sys::di_prompt_text(self.as_ptr(), &mut len) };
        match unsafe { crate::util::text(p, len) } {
            Some(std::borrow::Cow::Borrowed(s)) => s,
            _ => "",
        }
    }

    /// The prompt's token ids: special tokens by their ids, the text between
    /// them encoded as plain text (`di_prompt_tokens`). Errors: `InvalidState`
    /// (the codec had no tokenizer), `Unsupported` (the tokenizer lacks a
    /// special token of the encoding).
    ///
    /// ```no_run
    /// use deepinfer::{Codec, Encoding, Protocol, Tokenizer};
    /// let tok = Tokenizer::load("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let codec = Codec::new(Some(&tok), Encoding::ChatMl)?;
    /// let p = codec.render(Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// assert_eq!(p.tokens()?[0], tok.token_id("<|im_start|>").unwrap());
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn tokens(&self) -> Result<&[i32]> {
        let mut ids: *const i32 = ptr::null();
        let mut n = 0usize;
        // SAFETY: the ids are owned by the prompt, which self borrows.
        check(|err| unsafe { sys::di_prompt_tokens(self.as_ptr(), &mut ids, &mut n, err) })?;
        if ids.is_null() || n == 0 {
            return Ok(&[]);
        }
        Ok(unsafe { std::slice::from_raw_parts(ids, n) })
    }

    /// Thinking mode, as deepseek-recipe resolves it (`false` for the template
    /// encodings), `di_prompt_thinking`.
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let p = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// assert!(!p.thinking());
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn thinking(&self) -> bool {
        // SAFETY: a live prompt.
        unsafe { sys::di_prompt_thinking(self.as_ptr()) != 0 }
    }

    /// The request's stream flag (`di_prompt_stream`; `false` for the template
    /// encodings).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::Dsv4)?;
    /// let p = codec.render(deepinfer::Protocol::Chat,
    ///     r#"{"model": "DeepSeek-V4-Pro", "stream": true, "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// assert!(p.stream());
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn stream(&self) -> bool {
        // SAFETY: a live prompt.
        unsafe { sys::di_prompt_stream(self.as_ptr()) != 0 }
    }

    /// The sampling temperature to use, as the reference resolves it
    /// (`di_prompt_temperature`; the V4 encodings only: the template and
    /// ChatML encodings leave sampling to the engine, and give 0).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::Dsv4)?;
    /// # let p = codec.render(deepinfer::Protocol::Chat, r#"{"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// assert_eq!(p.temperature(), 1.0);          // thinking mode forces 1.0
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn temperature(&self) -> f32 {
        // SAFETY: a live prompt.
        unsafe { sys::di_prompt_temperature(self.as_ptr()) }
    }

    /// The top_p to use, as the reference resolves it (`di_prompt_top_p`; the
    /// V4 encodings only, as [`Prompt::temperature`]).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::Dsv4)?;
    /// # let p = codec.render(deepinfer::Protocol::Chat, r#"{"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// assert_eq!(p.top_p(), 1.0);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn top_p(&self) -> f32 {
        // SAFETY: a live prompt.
        unsafe { sys::di_prompt_top_p(self.as_ptr()) }
    }

    /// The request's stop sequences in order (Chat `stop`, Messages
    /// `stop_sequences`), `di_prompt_stop`; the V4 encodings only (a ChatML or
    /// template prompt lists none).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::Dsv4)?;
    /// let p = codec.render(deepinfer::Protocol::Chat,
    ///     r#"{"model": "DeepSeek-V4-Pro", "stop": ["a", "b"], "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// assert_eq!(p.stop_sequences(), vec!["a", "b"]);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn stop_sequences(&self) -> Vec<&str> {
        // SAFETY: strings owned by the prompt, which self borrows.
        let n = unsafe { sys::di_prompt_stop_count(self.as_ptr()) };
        (0..n)
            .filter_map(|i| unsafe { borrowed_cstr(sys::di_prompt_stop(self.as_ptr(), i)) })
            .collect()
    }

    /// The sources of the images the prompt's image tokens stand for (V4.1),
    /// in order: http(s) or base64 data URLs (`di_prompt_image_url`).
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::ChatMl)?;
    /// # let p = codec.render(deepinfer::Protocol::Chat, r#"{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// assert!(p.image_urls().is_empty());
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn image_urls(&self) -> Vec<&str> {
        // SAFETY: strings owned by the prompt, which self borrows.
        let n = unsafe { sys::di_prompt_image_count(self.as_ptr()) };
        (0..n)
            .filter_map(|i| unsafe { borrowed_cstr(sys::di_prompt_image_url(self.as_ptr(), i)) })
            .collect()
    }

    /// The completion budget for a prompt of `prompt_tokens` in a context of
    /// `context_limit` tokens, as deepseek-recipe's `resolve_max_tokens`
    /// (`di_prompt_max_tokens`; a chat template's prompt records the body's
    /// `max_completion_tokens` or `max_tokens`). `ContextLength` when the
    /// request's max_tokens does not fit, the message giving the numbers.
    ///
    /// ```
    /// # let codec = deepinfer::Codec::new(None, deepinfer::Encoding::Dsv4)?;
    /// let p = codec.render(deepinfer::Protocol::Chat,
    ///     r#"{"model": "DeepSeek-V4-Pro", "max_tokens": 100, "messages": [{"role": "user", "content": "Hi"}]}"#)?;
    /// assert_eq!(p.max_tokens(10, 4096)?, 100);
    /// assert_eq!(p.max_tokens(4000, 4096).unwrap_err().status(), deepinfer::Status::ContextLength);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn max_tokens(&self, prompt_tokens: u32, context_limit: u32) -> Result<u32> {
        let mut out = 0u32;
        // SAFETY: a live prompt; out is written on success.
        check(|err| unsafe {
            sys::di_prompt_max_tokens(self.as_ptr(), prompt_tokens, context_limit, &mut out, err)
        })?;
        Ok(out)
    }
}

impl Drop for Prompt {
    fn drop(&mut self) {
        // SAFETY: we own it.
        unsafe { sys::di_prompt_free(self.raw.as_ptr()) };
    }
}

/// A NUL-terminated UTF-8 string borrowed from its owner (NULL or not UTF-8:
/// `None`).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn borrowed_cstr<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        None
    } else {
        std::ffi::CStr::from_ptr(p).to_str().ok()
    }
}
