//! Small conversions shared by the modules.

use std::borrow::Cow;
use std::ffi::CString;
use std::os::raw::c_char;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Error, Result};

/// A path as a C string; a NUL byte in it is `InvalidArgument` naming `field`.
pub(crate) fn path_cstring(path: &Path, field: &str) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::invalid_argument(format!("{}: the path contains a NUL byte", field)))
}

/// A string as a C string; a NUL byte in it is `InvalidArgument` naming `field`.
pub(crate) fn cstring(s: &str, field: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid_argument(format!("{}: contains a NUL byte", field)))
}

/// `len` bytes at `p` (NULL: `None`), borrowed for `'a`, as text: borrowed when
/// UTF-8 (the library's promise), invalid sequences replaced otherwise.
///
/// # Safety
/// `p` is NULL or `len` readable bytes that outlive `'a`.
pub(crate) unsafe fn text<'a>(p: *const c_char, len: usize) -> Option<Cow<'a, str>> {
    if p.is_null() {
        None
    } else if len == 0 {
        Some(Cow::Borrowed(""))
    } else {
        Some(String::from_utf8_lossy(std::slice::from_raw_parts(
            p as *const u8,
            len,
        )))
    }
}

/// A NUL-terminated string at `p` (NULL: `None`), borrowed for `'a`.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn ctext<'a>(p: *const c_char) -> Option<Cow<'a, str>> {
    if p.is_null() {
        None
    } else {
        Some(String::from_utf8_lossy(
            std::ffi::CStr::from_ptr(p).to_bytes(),
        ))
    }
}
