/* deepinfer — an embeddable C SDK that runs DeepSeek models inside other programs.
 *
 * This is the whole public interface: every symbol the shared library exports is
 * declared here, and every one is named di_*. The library keeps a stable C ABI:
 *
 *   - Handles are opaque. The caller never lays out a struct the library reads,
 *     except small input structs that begin with a `struct_size` field (see
 *     "Versioned input structs" below).
 *   - What will grow (events, results) is read through getter functions.
 *   - Enum values are explicit and never renumbered; new values are appended.
 *   - Exported symbols carry the version node DEEPINFER_0 and the shared library's
 *     SONAME is libdeepinfer.so.0; CI compares each build against a committed ABI
 *     baseline (libabigail's abidiff) and fails on an incompatible change.
 *
 * Sections marked "experimental" may change between minor releases, as zstd.h
 * separates its stable and experimental parts. Everything else is stable.
 *
 * Behaviour anchors: SQLite's C interface (lifetimes, error messages), libcurl's
 * multi interface (submit, poll, one terminal message per transfer) and zstd.h
 * (version macros, stable/experimental split).
 */
#ifndef DEEPINFER_H
#define DEEPINFER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DI_API marks a declaration as exported from the shared library. The library is
 * built with -fvisibility=hidden and a linker version script, so only what is
 * declared with DI_API here is visible to hosts. */
#if defined(_WIN32)
#    define DI_API
#elif defined(__GNUC__) || defined(__clang__)
#    define DI_API __attribute__((visibility("default")))
#else
#    define DI_API
#endif

/* ------------------------------------------------------------------------- */
/* Version                                                                    */
/* ------------------------------------------------------------------------- */

/* The version of this header, as semantic versioning defines MAJOR.MINOR.PATCH.
 * While MAJOR is 0, the ABI version (the SONAME's number) is 0 and only
 * compatible changes are made to the stable section; CI enforces this. */
#define DI_VERSION_MAJOR 0
#define DI_VERSION_MINOR 1
#define DI_VERSION_PATCH 0

/* The version as one integer, MAJOR * 10000 + MINOR * 100 + PATCH (0.1.0 is 100),
 * so it can be compared with < and >, as ZSTD_VERSION_NUMBER is built. */
#define DI_VERSION_NUMBER (DI_VERSION_MAJOR * 10000 + DI_VERSION_MINOR * 100 + DI_VERSION_PATCH)

#define DI_VERSION_STRINGIFY_(x) #x
#define DI_VERSION_STRINGIFY(x)  DI_VERSION_STRINGIFY_(x)
/* The version as a string literal, "MAJOR.MINOR.PATCH". */
#define DI_VERSION_STRING                                                                          \
    DI_VERSION_STRINGIFY(DI_VERSION_MAJOR)                                                         \
    "." DI_VERSION_STRINGIFY(DI_VERSION_MINOR) "." DI_VERSION_STRINGIFY(DI_VERSION_PATCH)

/* Return the version number of the library that is running, in the encoding of
 * DI_VERSION_NUMBER. Compare it with DI_VERSION_NUMBER to detect a host built
 * against a different header than the library it loaded (as sqlite3_libversion_number
 * is used). Thread-safe; never fails. */
DI_API unsigned di_version(void);

/* Return the version string of the library that is running, "MAJOR.MINOR.PATCH".
 * The string is static: the caller must not free it; it lives as long as the
 * library is loaded. Thread-safe; never fails. */
DI_API const char *di_version_string(void);

/* ------------------------------------------------------------------------- */
/* Status codes                                                               */
/* ------------------------------------------------------------------------- */

/* Every fallible call returns a di_status. DI_OK is zero, every error is positive.
 * Values are explicit, are never renumbered, and new ones are only appended; a host
 * must treat an unknown positive value as a generic error (di_status_string still
 * names it "unknown status"). Where a call fails, the handle it was given keeps a
 * human-readable message that names the offending field or byte offset; the
 * functions that return it arrive with the handles that carry it. */
typedef enum di_status {
    DI_OK = 0,                   /* success */
    DI_ERR_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad size, an out-of-range value */
    DI_ERR_INVALID_REQUEST = 2,  /* a request body the protocol does not accept */
    DI_ERR_OUT_OF_MEMORY = 3,    /* an allocation failed; nothing was changed */
    DI_ERR_IO = 4,               /* a file could not be opened, read or mapped */
    DI_ERR_MODEL_FORMAT = 5,     /* a model or tokenizer file is corrupt or truncated */
    DI_ERR_UNSUPPORTED = 6,      /* valid input this build cannot handle (type, arch) */
    DI_ERR_NOT_FOUND = 7,        /* an id, name or file that does not exist */
    DI_ERR_CONTEXT_LENGTH = 8,   /* a prompt or request longer than the context limit */
    DI_ERR_CANCELLED = 9,        /* the operation was cancelled by the host */
    DI_ERR_INVALID_STATE = 10,   /* the call is not allowed now (e.g. after destroy) */
    DI_ERR_INVALID_UTF8 = 11,    /* text that is not well-formed UTF-8 */
    DI_ERR_BACKEND = 12,         /* the compute backend failed (device error, driver) */
    DI_ERR_INTERNAL = 13         /* a broken invariant inside the library: a bug */
} di_status;

/* Return a static, human-readable English description of `status`, e.g.
 * "invalid request". The string is never NULL and must not be freed; an unknown
 * value gives "unknown status". It describes the kind of error only: the message
 * with the offending field lives on the handle that failed. Thread-safe. */
DI_API const char *di_status_string(di_status status);

/* ------------------------------------------------------------------------- */
/* Versioned input structs                                                    */
/* ------------------------------------------------------------------------- */

/* Every struct that the caller lays out and the library reads (engine config,
 * sampling parameters, …) begins with
 *
 *     size_t struct_size;   // sizeof the struct as the caller compiled it
 *
 * and comes with an initialiser function di_<name>_init(di_<name> *) that sets
 * struct_size and every field to its documented default. Fields are only ever
 * appended, and a field appended after the first release has all-zero bytes as
 * its default. The library reads a field only when struct_size shows the caller's
 * struct contains it, and uses the default otherwise; so a host built against an
 * older header keeps working with a newer library. A host built against a newer
 * header works with an older library as long as every field the older library
 * does not know is still zero; otherwise the call fails with
 * DI_ERR_INVALID_ARGUMENT rather than silently ignoring a setting (the rule
 * Linux's clone3 and openat2 apply to their extensible argument structs).
 * A struct_size smaller than the first release's struct is DI_ERR_INVALID_ARGUMENT.
 *
 *     di_engine_config cfg;
 *     di_engine_config_init(&cfg);     // struct_size = sizeof cfg, defaults
 *     cfg.n_threads = 4;
 *
 * Public input structs have no trailing padding: every release's struct ends on a
 * field whose end is a multiple of 8 bytes (explicit reserved fields fill the
 * gap), and the library asserts at compile time that
 * sizeof(type) == DI_STRUCT_SIZE_UNTIL(type, last_field). So a field appended
 * later never lands in an older release's padding, and the struct_size a caller
 * reports names exactly the fields it knows.
 *
 * DI_STRUCT_SIZE_UNTIL(type, field) is the offset of the end of `field`: the
 * sizeof of the release whose last field is `field`. */
#define DI_STRUCT_SIZE_UNTIL(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DEEPINFER_H */
