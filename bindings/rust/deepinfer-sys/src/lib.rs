//! Raw declarations of `deepinfer.h`, the C ABI of libdeepinfer, an embeddable SDK
//! that runs DeepSeek models.
//!
//! Every `di_*` function, type and `DI_*` constant of the header, generated with
//! Debian's `bindgen` by `scripts/rust-bindgen.sh` and committed (CI checks that a
//! fresh run gives the same file). Each item carries the header's own comment:
//! the header is the reference. C enums are integer type aliases with one
//! constant per value (`di_status`, `DI_ERR_INVALID_REQUEST`), so a value a newer
//! library adds is still a valid Rust value.
//!
//! The build script links libdeepinfer through `pkg-config --libs deepinfer`
//! (set `PKG_CONFIG_PATH` for an install outside the system paths, and
//! `DEEPINFER_STATIC=1` to link the static library). Everything here is `unsafe`
//! to call; the `deepinfer` crate is the safe API over it (docs/rust.md).
//!
//! ```no_run
//! use std::ffi::CStr;
//! let v = unsafe { CStr::from_ptr(deepinfer_sys::di_version_string()) };
//! assert_eq!(unsafe { deepinfer_sys::di_version() }, deepinfer_sys::DI_VERSION_NUMBER);
//! println!("libdeepinfer {}", v.to_string_lossy());
//! ```
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
#![allow(clippy::all)]

include!("bindings.rs");

/// The header's version as a string, `"MAJOR.MINOR.PATCH"` (the C macro
/// `DI_VERSION_STRING`, which bindgen cannot translate).
///
/// ```
/// assert_eq!(deepinfer_sys::DI_VERSION_STRING, "0.1.0");
/// ```
pub const DI_VERSION_STRING: &str = "0.1.0";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_string_matches_the_numbers() {
        let want = format!(
            "{}.{}.{}",
            DI_VERSION_MAJOR, DI_VERSION_MINOR, DI_VERSION_PATCH
        );
        assert_eq!(DI_VERSION_STRING, want);
        assert_eq!(
            DI_VERSION_NUMBER,
            DI_VERSION_MAJOR * 10000 + DI_VERSION_MINOR * 100 + DI_VERSION_PATCH
        );
    }

    #[test]
    fn the_linked_library_is_the_header_version() {
        let s = unsafe { std::ffi::CStr::from_ptr(di_version_string()) };
        assert_eq!(s.to_str().unwrap(), DI_VERSION_STRING);
        assert_eq!(unsafe { di_version() }, DI_VERSION_NUMBER);
    }
}
