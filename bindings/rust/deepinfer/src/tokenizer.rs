//! The tokenizer (`di_tokenizer_*`) and the streaming detokenizer.

use std::ops::BitOr;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr::{self, NonNull};

use deepinfer_sys as sys;

use crate::error::{check, check_status, Error, Result};
use crate::util::path_cstring;

/// A byte-level BPE tokenizer: Hugging Face `tokenizers`' encode and decode, from a
/// tokenizer.json or a GGUF file's metadata (`di_tokenizer`).
///
/// Immutable once loaded, so it is `Send` and `Sync`: one tokenizer may encode
/// on many threads at once (the header's promise for `const di_tokenizer *`).
/// Dropping a loaded tokenizer frees it; the one an [`Engine`](crate::Engine)
/// lends ([`Engine::tokenizer`](crate::Engine::tokenizer)) lives as long as the
/// engine.
///
/// ```
/// # let json = include_str!("../tests/data/tiny_tokenizer.json");
/// use deepinfer::{Encode, Tokenizer};
/// let tok = Tokenizer::from_json(json)?;          // or Tokenizer::load("tokenizer.json")
/// let ids = tok.encode("hi hi", Encode::PLAIN)?;
/// assert_eq!(tok.decode(&ids, false)?, "hi hi");
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Debug)]
pub struct Tokenizer {
    raw: NonNull<sys::di_tokenizer>,
    owned: bool,
}

// SAFETY: deepinfer.h: "A loaded tokenizer is immutable: every function that
// takes a `const di_tokenizer *` is thread-safe on a shared tokenizer." Only
// Drop (di_tokenizer_free, with no other call using it) mutates.
unsafe impl Send for Tokenizer {}
unsafe impl Sync for Tokenizer {}

/// Flags of [`Tokenizer::encode`]: which added tokens are recognised in the
/// text, and whether the post-processor's tokens (a BOS) are added. Combine
/// with `|`.
///
/// ```
/// use deepinfer::Encode;
/// assert_eq!(Encode::SPECIAL | Encode::ADDED | Encode::ADD_SPECIAL_TOKENS, Encode::HF_DEFAULT);
/// assert!(Encode::HF_DEFAULT.contains(Encode::ADDED));
/// assert_eq!(Encode::PLAIN.bits(), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Encode(u32);

impl Encode {
    /// Plain text: added-token spellings are encoded as text, nothing is added
    /// (as deepseek-recipe encodes user text).
    pub const PLAIN: Encode = Encode(0);
    /// Recognise the spellings of special added tokens (`DI_TOKENIZE_SPECIAL`).
    pub const SPECIAL: Encode = Encode(sys::DI_TOKENIZE_SPECIAL);
    /// Recognise the spellings of non-special added tokens (`DI_TOKENIZE_ADDED`).
    pub const ADDED: Encode = Encode(sys::DI_TOKENIZE_ADDED);
    /// Add the post-processor's tokens, as HF's `add_special_tokens=True`
    /// (`DI_TOKENIZE_ADD_SPECIAL_TOKENS`).
    pub const ADD_SPECIAL_TOKENS: Encode = Encode(sys::DI_TOKENIZE_ADD_SPECIAL_TOKENS);
    /// What HF tokenizers' `Tokenizer.encode(text)` does by default.
    pub const HF_DEFAULT: Encode = Encode(sys::DI_TOKENIZE_HF_DEFAULT);

    /// The C flag bits.
    ///
    /// ```
    /// assert_eq!(deepinfer::Encode::SPECIAL.bits(), 1);
    /// ```
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Flags from C bits, unchecked (the library refuses unknown bits).
    ///
    /// ```
    /// assert_eq!(deepinfer::Encode::from_bits(2), deepinfer::Encode::ADDED);
    /// ```
    pub fn from_bits(bits: u32) -> Encode {
        Encode(bits)
    }

    /// `true` when every flag of `other` is set.
    ///
    /// ```
    /// use deepinfer::Encode;
    /// assert!(!Encode::SPECIAL.contains(Encode::ADDED));
    /// ```
    pub fn contains(self, other: Encode) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Encode {
    type Output = Encode;
    /// Both sets of flags.
    fn bitor(self, rhs: Encode) -> Encode {
        Encode(self.0 | rhs.0)
    }
}

impl Tokenizer {
    /// Loads a tokenizer: a tokenizer.json, a folder holding one, or a GGUF model
    /// file (only its metadata is read), `di_tokenizer_load`.
    ///
    /// Errors: `Io` (cannot open: the message names the path), `ModelFormat`
    /// (invalid JSON or GGUF, a merge naming an unknown token), `Unsupported` (a
    /// pre-tokenizer or normalizer it does not implement), `InvalidArgument` (a
    /// path holding a NUL byte).
    ///
    /// ```no_run
    /// let tok = deepinfer::Tokenizer::load("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// assert_eq!(tok.vocab_size(), 49152);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path_cstring(path.as_ref(), "path")?;
        let mut out = ptr::null_mut();
        // SAFETY: path is NUL-terminated; out receives an owned tokenizer on success.
        check(|err| unsafe { sys::di_tokenizer_load(path.as_ptr(), &mut out, err) })?;
        Ok(Tokenizer::owned(out))
    }

    /// Loads a tokenizer from the text of a tokenizer.json
    /// (`di_tokenizer_load_json`). Errors as [`Tokenizer::load`].
    ///
    /// ```
    /// let err = deepinfer::Tokenizer::from_json("{").unwrap_err();
    /// assert_eq!(err.status(), deepinfer::Status::ModelFormat);
    /// ```
    pub fn from_json(json: &str) -> Result<Tokenizer> {
        let mut out = ptr::null_mut();
        // SAFETY: json is json.len() bytes, not kept by the library.
        check(|err| unsafe {
            sys::di_tokenizer_load_json(json.as_ptr() as *const c_char, json.len(), &mut out, err)
        })?;
        Ok(Tokenizer::owned(out))
    }

    fn owned(raw: *mut sys::di_tokenizer) -> Tokenizer {
        Tokenizer {
            raw: NonNull::new(raw).expect("di_tokenizer_load returned DI_OK and NULL"),
            owned: true,
        }
    }

    /// A tokenizer the engine owns (never freed here).
    pub(crate) fn borrowed(raw: NonNull<sys::di_tokenizer>) -> Tokenizer {
        Tokenizer { raw, owned: false }
    }

    pub(crate) fn as_ptr(&self) -> *const sys::di_tokenizer {
        self.raw.as_ptr()
    }

    /// The number of token ids: one more than the largest id of the vocabulary
    /// and the added tokens (`di_tokenizer_vocab_size`).
    ///
    /// ```
    /// # let tok = deepinfer::Tokenizer::from_json(include_str!("../tests/data/tiny_tokenizer.json"))?;
    /// assert_eq!(tok.vocab_size(), 7);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn vocab_size(&self) -> usize {
        // SAFETY: a live tokenizer.
        unsafe { sys::di_tokenizer_vocab_size(self.as_ptr()) }.max(0) as usize
    }

    /// The id of the token whose decoded text is exactly `text` (an added
    /// token's spelling such as `"<|im_end|>"`, or a vocabulary token's bytes such
    /// as `" world"`); `None` when no token is spelled so
    /// (`di_tokenizer_token_id`).
    ///
    /// ```
    /// # let tok = deepinfer::Tokenizer::from_json(include_str!("../tests/data/tiny_tokenizer.json"))?;
    /// assert_eq!(tok.token_id("<|end|>"), Some(6));
    /// assert_eq!(tok.token_id("no such token"), None);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn token_id(&self, text: &str) -> Option<i32> {
        let mut id = 0i32;
        // SAFETY: text is text.len() bytes; id is written on success.
        let st = unsafe {
            sys::di_tokenizer_token_id(
                self.as_ptr(),
                text.as_ptr() as *const c_char,
                text.len(),
                &mut id,
            )
        };
        if st == sys::DI_OK {
            Some(id)
        } else {
            None
        }
    }

    /// Encodes text into token ids, as HF tokenizers encodes it
    /// (`di_tokenizer_encode`); `flags` adds the added-token and post-processor
    /// steps.
    ///
    /// ```
    /// # let tok = deepinfer::Tokenizer::from_json(include_str!("../tests/data/tiny_tokenizer.json"))?;
    /// use deepinfer::Encode;
    /// assert_eq!(tok.encode("hi<|end|>", Encode::SPECIAL)?.last(), Some(&6));
    /// assert_ne!(tok.encode("hi<|end|>", Encode::PLAIN)?.last(), Some(&6));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn encode(&self, text: &str, flags: Encode) -> Result<Vec<i32>> {
        self.encode_bytes(text.as_bytes(), flags)
    }

    /// As [`Tokenizer::encode`], from bytes that should be UTF-8: ill-formed
    /// input is `InvalidUtf8`, the message giving the byte offset.
    ///
    /// ```
    /// # let tok = deepinfer::Tokenizer::from_json(include_str!("../tests/data/tiny_tokenizer.json"))?;
    /// let err = tok.encode_bytes(b"hi\xff", deepinfer::Encode::PLAIN).unwrap_err();
    /// assert_eq!(err.status(), deepinfer::Status::InvalidUtf8);
    /// assert!(err.message().contains("offset 2"));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn encode_bytes(&self, text: &[u8], flags: Encode) -> Result<Vec<i32>> {
        let mut ids: *mut i32 = ptr::null_mut();
        let mut n = 0usize;
        // SAFETY: text is text.len() bytes; on success ids is an array of n ids
        // the caller frees with di_tokens_free (NULL when n is 0).
        check(|err| unsafe {
            sys::di_tokenizer_encode(
                self.as_ptr(),
                text.as_ptr() as *const c_char,
                text.len(),
                flags.0,
                &mut ids,
                &mut n,
                err,
            )
        })?;
        let v = if ids.is_null() {
            Vec::new()
        } else {
            // SAFETY: n ids at ids, freed right after the copy.
            let v = unsafe { std::slice::from_raw_parts(ids, n) }.to_vec();
            unsafe { sys::di_tokens_free(ids) };
            v
        };
        Ok(v)
    }

    /// Decodes token ids into text, as HF tokenizers' `decode` does: bytes that
    /// are not UTF-8 become U+FFFD; `skip_special` leaves special added tokens
    /// out (`di_tokenizer_decode`). An id outside the vocabulary is
    /// `InvalidArgument`, the message naming its position.
    ///
    /// ```
    /// # let tok = deepinfer::Tokenizer::from_json(include_str!("../tests/data/tiny_tokenizer.json"))?;
    /// assert_eq!(tok.decode(&[2, 6], false)?, "hi<|end|>");
    /// assert_eq!(tok.decode(&[2, 6], true)?, "hi");
    /// assert!(tok.decode(&[2, 700], false).unwrap_err().message().contains("ids[1]"));
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn decode(&self, ids: &[i32], skip_special: bool) -> Result<String> {
        let flags = if skip_special {
            sys::DI_DECODE_SKIP_SPECIAL
        } else {
            0
        };
        let mut text: *mut c_char = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: ids.len() ids; on success text is a new string of len bytes
        // to free with di_text_free.
        check(|err| unsafe {
            sys::di_tokenizer_decode(
                self.as_ptr(),
                ids.as_ptr(),
                ids.len(),
                flags,
                &mut text,
                &mut len,
                err,
            )
        })?;
        if text.is_null() {
            return Ok(String::new());
        }
        // SAFETY: len bytes at text, freed right after the copy.
        let bytes = unsafe { std::slice::from_raw_parts(text as *const u8, len) }.to_vec();
        unsafe { sys::di_text_free(text) };
        String::from_utf8(bytes).map_err(|_| {
            Error::new(
                crate::Status::Internal,
                "di_tokenizer_decode gave invalid UTF-8",
            )
        })
    }

    /// A streaming detokenizer for one stream of generated tokens: fed one id at
    /// a time, it returns only complete UTF-8, and everything it returns joined
    /// equals [`Tokenizer::decode`] of the whole sequence (`di_detokenizer_*`).
    ///
    /// ```
    /// # let tok = deepinfer::Tokenizer::from_json(include_str!("../tests/data/tiny_tokenizer.json"))?;
    /// let mut d = tok.detokenizer(false)?;
    /// let mut text = String::new();
    /// for id in [2, 3, 2] {
    ///     text += d.push(id)?;           // borrowed until the next call on d
    /// }
    /// text += d.flush()?;
    /// assert_eq!(text, tok.decode(&[2, 3, 2], false)?);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn detokenizer(&self, skip_special: bool) -> Result<Detokenizer<'_>> {
        let flags = if skip_special {
            sys::DI_DECODE_SKIP_SPECIAL
        } else {
            0
        };
        let mut out = ptr::null_mut();
        // SAFETY: a live tokenizer, which the returned value borrows.
        check_status(unsafe { sys::di_detokenizer_create(self.as_ptr(), flags, &mut out) })?;
        Ok(Detokenizer {
            raw: NonNull::new(out).expect("di_detokenizer_create returned DI_OK and NULL"),
            _tok: std::marker::PhantomData,
        })
    }
}

impl Drop for Tokenizer {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: we own it and no borrow of self is alive.
            unsafe { sys::di_tokenizer_free(self.raw.as_ptr()) };
        }
    }
}

/// An incremental detokenizer ([`Tokenizer::detokenizer`]): the text each push
/// completes, borrowed until the next call on it.
///
/// `Send` but not `Sync`: one stream, one thread at a time (the header's rule).
/// The text a push returns lives until the next call on the detokenizer, so
/// this does not compile:
///
/// ```compile_fail
/// # let tok = deepinfer::Tokenizer::from_json(include_str!("../tests/data/tiny_tokenizer.json")).unwrap();
/// let mut d = tok.detokenizer(false).unwrap();
/// let first = d.push(2).unwrap();
/// let second = d.push(3).unwrap();       // `first` is still borrowed
/// println!("{}{}", first, second);
/// ```
///
/// ```
/// # let tok = deepinfer::Tokenizer::from_json(include_str!("../tests/data/tiny_tokenizer.json"))?;
/// let mut d = tok.detokenizer(true)?;
/// assert_eq!(d.push(2)?, "hi");
/// assert_eq!(d.push(6)?, "");          // skipped: a special token
/// # Ok::<(), deepinfer::Error>(())
/// ```
#[derive(Debug)]
pub struct Detokenizer<'t> {
    raw: NonNull<sys::di_detokenizer>,
    _tok: std::marker::PhantomData<&'t Tokenizer>,
}

// SAFETY: the detokenizer is used by one thread at a time (&mut self for every
// call), and its tokenizer is Sync.
unsafe impl Send for Detokenizer<'_> {}

impl Detokenizer<'_> {
    /// Feeds one token id; returns the text it completed (possibly empty).
    /// An id outside the vocabulary is `InvalidArgument` (status only, as the
    /// C call reports it), and changes nothing.
    ///
    /// ```
    /// # let tok = deepinfer::Tokenizer::from_json(include_str!("../tests/data/tiny_tokenizer.json"))?;
    /// let mut d = tok.detokenizer(false)?;
    /// assert_eq!(d.push(-1).unwrap_err().status(), deepinfer::Status::InvalidArgument);
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn push(&mut self, id: i32) -> Result<&str> {
        let mut text: *const c_char = ptr::null();
        let mut len = 0usize;
        // SAFETY: a live detokenizer; text is valid until the next call on it,
        // which the &mut borrow of the result prevents.
        check_status(unsafe {
            sys::di_detokenizer_push(self.raw.as_ptr(), id, &mut text, &mut len)
        })?;
        Ok(unsafe { borrowed_text(text, len) })
    }

    /// Ends the stream: the text held back (an incomplete character becomes
    /// U+FFFD). The detokenizer can then start a new stream.
    ///
    /// ```
    /// # let tok = deepinfer::Tokenizer::from_json(include_str!("../tests/data/tiny_tokenizer.json"))?;
    /// let mut d = tok.detokenizer(false)?;
    /// assert_eq!(d.flush()?, "");
    /// # Ok::<(), deepinfer::Error>(())
    /// ```
    pub fn flush(&mut self) -> Result<&str> {
        let mut text: *const c_char = ptr::null();
        let mut len = 0usize;
        // SAFETY: as push.
        check_status(unsafe { sys::di_detokenizer_flush(self.raw.as_ptr(), &mut text, &mut len) })?;
        Ok(unsafe { borrowed_text(text, len) })
    }
}

impl Drop for Detokenizer<'_> {
    fn drop(&mut self) {
        // SAFETY: we own it.
        unsafe { sys::di_detokenizer_free(self.raw.as_ptr()) };
    }
}

/// `len` bytes at `text` as UTF-8 ("" for NULL). The detokenizer promises
/// complete UTF-8; anything else would be a library bug and reads as "".
///
/// # Safety
/// `text` is NULL or `len` readable bytes that outlive `'a`.
unsafe fn borrowed_text<'a>(text: *const c_char, len: usize) -> &'a str {
    if text.is_null() || len == 0 {
        return "";
    }
    let bytes = std::slice::from_raw_parts(text as *const u8, len);
    std::str::from_utf8(bytes).unwrap_or("\u{FFFD}")
}
