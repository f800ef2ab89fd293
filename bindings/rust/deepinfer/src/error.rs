//! `Status` (the C `di_status`) and `Error`, the one error type of the crate.

use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_char;

use deepinfer_sys as sys;

/// The status of a call or of a finished request: the C `di_status`, value for
/// value (`Status::InvalidRequest` is `DI_ERR_INVALID_REQUEST`, 2).
///
/// A value a newer library adds arrives as [`Status::Other`], which the header
/// says to treat as a generic error.
///
/// ```
/// use deepinfer::Status;
/// assert_eq!(Status::from_code(2), Status::InvalidRequest);
/// assert_eq!(Status::InvalidRequest.code(), 2);
/// assert_eq!(Status::InvalidRequest.name(), "DI_ERR_INVALID_REQUEST");
/// assert_eq!(Status::InvalidRequest.description(), "invalid request");
/// assert!(Status::Ok.is_ok() && !Status::Cancelled.is_ok());
/// assert_eq!(Status::from_code(99), Status::Other(99));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// `DI_OK`: success (a request that ran to its end).
    Ok,
    /// `DI_ERR_INVALID_ARGUMENT`: a bad size, an out-of-range value, a token id
    /// outside the vocabulary.
    InvalidArgument,
    /// `DI_ERR_INVALID_REQUEST`: a request body the protocol does not accept.
    InvalidRequest,
    /// `DI_ERR_OUT_OF_MEMORY`: an allocation failed.
    OutOfMemory,
    /// `DI_ERR_IO`: a file could not be opened, read or mapped.
    Io,
    /// `DI_ERR_MODEL_FORMAT`: a model or tokenizer file is corrupt or truncated.
    ModelFormat,
    /// `DI_ERR_UNSUPPORTED`: valid input this build cannot handle.
    Unsupported,
    /// `DI_ERR_NOT_FOUND`: an id or name that does not exist.
    NotFound,
    /// `DI_ERR_CONTEXT_LENGTH`: a prompt or request longer than the context limit.
    ContextLength,
    /// `DI_ERR_CANCELLED`: cancelled by the host (or by the engine's destruction).
    Cancelled,
    /// `DI_ERR_INVALID_STATE`: the call is not allowed now (a finished request,
    /// a dropped engine, a call from inside a callback).
    InvalidState,
    /// `DI_ERR_INVALID_UTF8`: text that is not well-formed UTF-8.
    InvalidUtf8,
    /// `DI_ERR_BACKEND`: the compute backend failed.
    Backend,
    /// `DI_ERR_INTERNAL`: a broken invariant inside the library (a bug).
    Internal,
    /// A status this crate does not know (a newer library's): a generic error.
    Other(u32),
}

impl Status {
    /// The status of the C value `code`.
    ///
    /// ```
    /// assert_eq!(deepinfer::Status::from_code(9), deepinfer::Status::Cancelled);
    /// ```
    pub fn from_code(code: u32) -> Status {
        match code {
            sys::DI_OK => Status::Ok,
            sys::DI_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::DI_ERR_INVALID_REQUEST => Status::InvalidRequest,
            sys::DI_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::DI_ERR_IO => Status::Io,
            sys::DI_ERR_MODEL_FORMAT => Status::ModelFormat,
            sys::DI_ERR_UNSUPPORTED => Status::Unsupported,
            sys::DI_ERR_NOT_FOUND => Status::NotFound,
            sys::DI_ERR_CONTEXT_LENGTH => Status::ContextLength,
            sys::DI_ERR_CANCELLED => Status::Cancelled,
            sys::DI_ERR_INVALID_STATE => Status::InvalidState,
            sys::DI_ERR_INVALID_UTF8 => Status::InvalidUtf8,
            sys::DI_ERR_BACKEND => Status::Backend,
            sys::DI_ERR_INTERNAL => Status::Internal,
            other => Status::Other(other),
        }
    }

    /// The C value (`DI_ERR_CONTEXT_LENGTH` is 8).
    ///
    /// ```
    /// assert_eq!(deepinfer::Status::ContextLength.code(), 8);
    /// ```
    pub fn code(self) -> u32 {
        match self {
            Status::Ok => sys::DI_OK,
            Status::InvalidArgument => sys::DI_ERR_INVALID_ARGUMENT,
            Status::InvalidRequest => sys::DI_ERR_INVALID_REQUEST,
            Status::OutOfMemory => sys::DI_ERR_OUT_OF_MEMORY,
            Status::Io => sys::DI_ERR_IO,
            Status::ModelFormat => sys::DI_ERR_MODEL_FORMAT,
            Status::Unsupported => sys::DI_ERR_UNSUPPORTED,
            Status::NotFound => sys::DI_ERR_NOT_FOUND,
            Status::ContextLength => sys::DI_ERR_CONTEXT_LENGTH,
            Status::Cancelled => sys::DI_ERR_CANCELLED,
            Status::InvalidState => sys::DI_ERR_INVALID_STATE,
            Status::InvalidUtf8 => sys::DI_ERR_INVALID_UTF8,
            Status::Backend => sys::DI_ERR_BACKEND,
            Status::Internal => sys::DI_ERR_INTERNAL,
            Status::Other(code) => code,
        }
    }

    /// The C enumerator's name, `"DI_ERR_IO"`; `"DI_ERR_UNKNOWN"` for
    /// [`Status::Other`].
    ///
    /// ```
    /// assert_eq!(deepinfer::Status::Ok.name(), "DI_OK");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "DI_OK",
            Status::InvalidArgument => "DI_ERR_INVALID_ARGUMENT",
            Status::InvalidRequest => "DI_ERR_INVALID_REQUEST",
            Status::OutOfMemory => "DI_ERR_OUT_OF_MEMORY",
            Status::Io => "DI_ERR_IO",
            Status::ModelFormat => "DI_ERR_MODEL_FORMAT",
            Status::Unsupported => "DI_ERR_UNSUPPORTED",
            Status::NotFound => "DI_ERR_NOT_FOUND",
            Status::ContextLength => "DI_ERR_CONTEXT_LENGTH",
            Status::Cancelled => "DI_ERR_CANCELLED",
            Status::InvalidState => "DI_ERR_INVALID_STATE",
            Status::InvalidUtf8 => "DI_ERR_INVALID_UTF8",
            Status::Backend => "DI_ERR_BACKEND",
            Status::Internal => "DI_ERR_INTERNAL",
            Status::Other(_) => "DI_ERR_UNKNOWN",
        }
    }

    /// The library's description of the kind of status (`di_status_string`):
    /// `"invalid request"`, `"unknown status"` for a value it does not know.
    ///
    /// ```
    /// assert_eq!(deepinfer::Status::Io.description(), "input/output error");
    /// ```
    pub fn description(self) -> &'static str {
        // SAFETY: di_status_string returns a static NUL-terminated string, never NULL.
        let s = unsafe { CStr::from_ptr(sys::di_status_string(self.code())) };
        s.to_str().unwrap_or("unknown status")
    }

    /// `true` for [`Status::Ok`].
    ///
    /// ```
    /// assert!(deepinfer::Status::Ok.is_ok());
    /// ```
    pub fn is_ok(self) -> bool {
        self == Status::Ok
    }
}

impl fmt::Display for Status {
    /// The enumerator's name, as [`Status::name`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Other(code) => write!(f, "DI_ERR_UNKNOWN({})", code),
            s => f.write_str(s.name()),
        }
    }
}

/// The error of every fallible call: the library's status and its message, which
/// names the offending field, file or byte offset
/// (`messages[0].role: unknown role "wizard"`).
///
/// Calls that fail in the binding itself before reaching the library (a path
/// with a NUL byte, an engine already dropped) use the status the library gives
/// the same fault, `InvalidArgument` or `InvalidState`.
///
/// ```
/// use deepinfer::{Status, Tokenizer};
/// let err = Tokenizer::load("/no/such/tokenizer.json").unwrap_err();
/// assert_eq!(err.status(), Status::Io);
/// assert!(err.message().contains("/no/such/tokenizer.json"));
/// assert!(err.to_string().starts_with("DI_ERR_IO: "));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    /// An error with `status` and `message` (hosts reporting their own failures
    /// in the crate's terms).
    ///
    /// ```
    /// let e = deepinfer::Error::new(deepinfer::Status::NotFound, "no such tool");
    /// assert_eq!(e.message(), "no such tool");
    /// ```
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
        }
    }

    /// The status (never [`Status::Ok`] for an error the library reported).
    ///
    /// ```
    /// let e = deepinfer::Error::new(deepinfer::Status::Io, "x");
    /// assert_eq!(e.status(), deepinfer::Status::Io);
    /// ```
    pub fn status(&self) -> Status {
        self.status
    }

    /// The library's message (`di_error_message`), or the status's description
    /// when the call reports no message.
    ///
    /// ```
    /// let e = deepinfer::Error::new(deepinfer::Status::Io, "model.gguf: cannot open");
    /// assert_eq!(e.message(), "model.gguf: cannot open");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Takes a `di_error` the library allocated (NULL: only the status is known)
    /// and frees it.
    pub(crate) fn from_raw(status: sys::di_status, err: *mut sys::di_error) -> Error {
        let message = if err.is_null() {
            Status::from_code(status).description().to_string()
        } else {
            // SAFETY: err is a live di_error from the failed call; its message is
            // NUL-terminated and lives until di_error_free, after the copy.
            let m = unsafe { cstr_lossy(sys::di_error_message(err)) };
            unsafe { sys::di_error_free(err) };
            m
        };
        Error {
            status: Status::from_code(status),
            message,
        }
    }

    pub(crate) fn invalid_argument(message: impl Into<String>) -> Error {
        Error::new(Status::InvalidArgument, message)
    }

    pub(crate) fn invalid_state(message: impl Into<String>) -> Error {
        Error::new(Status::InvalidState, message)
    }
}

impl fmt::Display for Error {
    /// `STATUS: message`, e.g. `DI_ERR_IO: model.gguf: cannot open`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

/// The crate's result type.
///
/// ```
/// fn vocab(path: &str) -> deepinfer::Result<usize> {
///     Ok(deepinfer::Tokenizer::load(path)?.vocab_size())
/// }
/// assert!(vocab("/no/such/file").is_err());
/// ```
pub type Result<T> = std::result::Result<T, Error>;

/// Calls `f` with an error out-parameter; maps a failing status to an `Error`.
pub(crate) fn check<F>(f: F) -> Result<()>
where
    F: FnOnce(*mut *mut sys::di_error) -> sys::di_status,
{
    let mut err: *mut sys::di_error = std::ptr::null_mut();
    let status = f(&mut err);
    if status == sys::DI_OK {
        if !err.is_null() {
            // SAFETY: a library error we own (never set on success, but freed if so).
            unsafe { sys::di_error_free(err) };
        }
        Ok(())
    } else {
        Err(Error::from_raw(status, err))
    }
}

/// Maps a status of a call without an error out-parameter.
pub(crate) fn check_status(status: sys::di_status) -> Result<()> {
    if status == sys::DI_OK {
        Ok(())
    } else {
        Err(Error::from_raw(status, std::ptr::null_mut()))
    }
}

/// Copies a NUL-terminated C string (invalid UTF-8 replaced); "" for NULL.
///
/// # Safety
/// `p` is NULL or a live NUL-terminated string.
pub(crate) unsafe fn cstr_lossy(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}
