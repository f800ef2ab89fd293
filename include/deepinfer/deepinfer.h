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
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DI_API marks a declaration as exported from the shared library. The library is
 * built with -fvisibility=hidden and a linker version script, so only what is
 * declared with DI_API here is visible to hosts. On Windows (not built there
 * yet: README, "Platforms") a DLL exports with __declspec(dllexport) when
 * DI_BUILDING_LIBRARY is defined (the library's own build) and hosts import
 * with __declspec(dllimport); define DI_STATIC for a static library. */
#if defined(_WIN32) && defined(DI_STATIC)
#    define DI_API
#elif defined(_WIN32) && defined(DI_BUILDING_LIBRARY)
#    define DI_API __declspec(dllexport)
#elif defined(_WIN32)
#    define DI_API __declspec(dllimport)
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

/* The CPU kernels the products take on this machine, in words, e.g.
 * "amx-int8 (prefill tiles of 16 rows x 16 tokens: Q8_0/...), avx512-vnni
 * (8-bit products; ...), avx512f (F32/F16/BF16 tiles of 4 rows x 4 tokens),
 * avx2+fma+f16c (the rest)": chosen at run time from the CPU's features
 * (CPUID), the AMX tile state Linux grants and DI_CPU_AMX (docs/api.md,
 * "Process-wide effects"); `deepinfer generate --verbose` and `run --verbose`
 * print it.
 * Asks for nothing: where AMX is possible but no product has asked Linux for
 * it yet, the string ends by saying so; after a refusal it no longer names
 * AMX. For display only: the wording may change between versions. The string
 * is static (do not free it). Thread-safe; never fails. */
DI_API const char *di_cpu_kernels(void);

/* ------------------------------------------------------------------------- */
/* Status codes                                                               */
/* ------------------------------------------------------------------------- */

/* Every fallible call returns a di_status. DI_OK is zero, every error is positive.
 * Values are explicit, are never renumbered, and new ones are only appended; a host
 * must treat an unknown positive value as a generic error (di_status_string still
 * names it "unknown status"). A call that fails also reports a human-readable
 * message naming the offending field or byte offset, through its `di_error **`
 * argument (see "Errors"). */
typedef enum di_status {
    DI_OK = 0,                   /* success */
    DI_ERR_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad size, an out-of-range value */
    DI_ERR_INVALID_REQUEST = 2,  /* a request body the protocol does not accept */
    DI_ERR_OUT_OF_MEMORY = 3,    /* an allocation failed; nothing was changed */
    DI_ERR_IO = 4,               /* a file could not be opened, read or mapped */
    DI_ERR_MODEL_FORMAT = 5,     /* a model or tokenizer file is corrupt or truncated */
    DI_ERR_UNSUPPORTED = 6,      /* valid input this build cannot handle (type, arch) */
    DI_ERR_NOT_FOUND = 7,      /* an id or name that does not exist (a missing file is DI_ERR_IO) */
    DI_ERR_CONTEXT_LENGTH = 8, /* a prompt or request longer than the context limit */
    DI_ERR_CANCELLED = 9,      /* the operation was cancelled by the host */
    DI_ERR_INVALID_STATE = 10, /* the call is not allowed now (e.g. after destroy) */
    DI_ERR_INVALID_UTF8 = 11,  /* text that is not well-formed UTF-8 */
    DI_ERR_BACKEND = 12,       /* the compute backend failed (device error, driver) */
    DI_ERR_INTERNAL = 13       /* a broken invariant inside the library: a bug */
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
 * and comes with an initialiser that sets struct_size and every field to its
 * documented default, writing no byte past the caller's struct:
 *
 *     DI_API void di_<name>_init_size(di_<name> *p, size_t struct_size);
 *     #define di_<name>_init(p) di_<name>_init_size((p), sizeof *(p))
 *
 * di_<name>_init_size writes exactly the first struct_size bytes of *p: zeros,
 * struct_size itself (the caller's value), and the defaults of the fields that
 * lie wholly inside those bytes. The macro passes the caller's own sizeof (the
 * size travels as an argument, as clone3(2) and openat2(2) take theirs), so a
 * host compiled against any header gets its own struct initialised, whatever
 * release of the library it runs with; a binding that mirrors a struct (ctypes,
 * Rust) passes its mirror's size. NULL, or a struct_size too small to hold
 * the struct_size field (below sizeof(size_t)), writes nothing. A struct_size
 * below the first release's struct is written as said, and one above 4096 bytes
 * is stored alone (no struct comes near it: nothing else is written); the call
 * that reads the struct then fails with DI_ERR_INVALID_ARGUMENT naming
 * struct_size.
 * Thread-safe; touches nothing but *p.
 *
 *     di_engine_config cfg;
 *     di_engine_config_init(&cfg);     // di_engine_config_init_size(&cfg, sizeof cfg)
 *     cfg.n_threads = 4;
 *
 * The exported function di_<name>_init(di_<name> *), which the macro hides from
 * every host compiled against this header, stays for the binaries that already
 * call it. It cannot know the caller's size, so it writes the struct as of the
 * release that added di_<name>_init_size: its size is frozen, and fields
 * appended later are neither written nor defaulted by it. A binary compiled
 * against an older header whose struct is smaller than that must be rebuilt
 * before it runs with this library (rebuilt, it calls di_<name>_init_size).
 * The function is still reached by name, bypassing the macro, as
 * (di_<name>_init)(p). A host compiled against this header needs a library
 * that exports di_<name>_init_size (this release or later).
 *
 * Fields are only ever appended, and a field appended after the first release
 * has all-zero bytes as its default. The library reads a field only when
 * struct_size shows the caller's struct contains it, and uses the default
 * otherwise; so a host built against an older header keeps working with a newer
 * library. A host built against a newer header works with an older library as
 * long as every field the older library does not know is still zero; otherwise
 * the call fails with DI_ERR_INVALID_ARGUMENT rather than silently ignoring a
 * setting (the rule Linux's clone3 and openat2 apply to their extensible
 * argument structs). A struct_size smaller than the first release's struct is
 * DI_ERR_INVALID_ARGUMENT, and so is one above 4096 bytes (no struct comes near
 * it; it is what an uninitialised struct looks like, and the library does not
 * read that far, as clone3 refuses a size over a page).
 *
 * Public input structs have no trailing padding: every release's struct ends on a
 * field whose end is a multiple of 8 bytes (explicit reserved fields fill the
 * gap), and the library asserts at compile time that
 * sizeof(type) == DI_STRUCT_SIZE_UNTIL(type, last_field). So a field appended
 * later never lands in an older release's padding, and the struct_size a caller
 * reports names exactly the fields it knows.
 *
 * DI_STRUCT_SIZE_UNTIL(type, field) is the offset of the end of `field`: the
 * sizeof of the release whose last field is `field`. C++ gets the same value
 * without a cast (sizeof names the member), so the macro is clean under
 * -Wold-style-cast -pedantic. */
#ifdef __cplusplus
#    define DI_STRUCT_SIZE_UNTIL(type, field) (offsetof(type, field) + sizeof(type::field))
#else
#    define DI_STRUCT_SIZE_UNTIL(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#endif

/* ------------------------------------------------------------------------- */
/* Errors                                                                     */
/* ------------------------------------------------------------------------- */

/* The details of a failed call that has no handle to keep them (a load, an
 * encode on a shared tokenizer): its status and a message naming the offending
 * file, field or byte offset, e.g. "tokenizer.json: model.merges[12]: the merged
 * token is not in the vocabulary" or "text is not valid UTF-8 at byte offset 7".
 *
 * Functions that take `di_error **err` set *err to a new di_error when they fail
 * and leave it untouched when they succeed; pass NULL to get the status alone (as
 * GLib's GError is used). *err must be NULL on entry: a second failure would
 * overwrite (and leak) an error the caller has not freed. The caller owns the
 * error and frees it with di_error_free. A di_error is immutable, so it may be
 * read from any thread. */
typedef struct di_error di_error;

/* The status of the failed call. Returns DI_ERR_INVALID_ARGUMENT for NULL. */
DI_API di_status di_error_status(const di_error *err);

/* The message, NUL-terminated UTF-8 on one line, owned by `err` (valid until
 * di_error_free): control bytes (C0, DEL, the C1 range U+0080..U+009F) and
 * bytes that are not well-formed UTF-8, as a name read from a corrupt file or a
 * request's text may hold, are written \xNN (hex, upper case; for reading: a
 * backslash in the text stays as it is). Never NULL: a NULL err gives "no
 * error". */
DI_API const char *di_error_message(const di_error *err);

/* Free an error; NULL is a no-op. */
DI_API void di_error_free(di_error *err);

/* ------------------------------------------------------------------------- */
/* Tokenizer                                                                  */
/* ------------------------------------------------------------------------- */

/* A byte-level BPE tokenizer: the vocabulary, merges, added (special) tokens,
 * normalizer and pre-tokenizer of a model. Behaviour follows Hugging Face
 * `tokenizers` (the tokenizer.json format and its encode/decode); GGUF metadata
 * is read as llama.cpp writes it. A loaded tokenizer is immutable: every function
 * that takes a `const di_tokenizer *` is thread-safe on a shared tokenizer. */
typedef struct di_tokenizer di_tokenizer;

/* Load a tokenizer from `path`: a Hugging Face tokenizer.json, a directory that
 * holds one, or a GGUF model file (only its metadata is read, so a truncated or
 * split model file works). Supported: byte-level BPE with Split / ByteLevel /
 * Digits pre-tokenizers, NFC/NFD/NFKC/NFKD or no normalizer, a ByteLevel decoder,
 * ByteLevel or TemplateProcessing post-processors — what the DeepSeek V3/V4,
 * Qwen2 (DeepSeek-R1 distills), Llama 3, GPT-2 and SmolLM tokenizers use. The
 * GGUF pre-tokenizer names known are deepseek-v3; qwen2, deepseek-r1-qwen; llama3,
 * llama-bpe, smaug-bpe, dbrx; smollm, starcoder, refact, command-r, codeshell;
 * gpt2, default (docs/tokenizer.md).
 *
 * On success *out is a new tokenizer to free with di_tokenizer_free. Errors:
 * DI_ERR_INVALID_ARGUMENT (NULL path/out), DI_ERR_IO (cannot open),
 * DI_ERR_MODEL_FORMAT (invalid JSON or GGUF, a merge naming an unknown token, an
 * id out of range, …), DI_ERR_UNSUPPORTED (a component listed as unsupported
 * above, named in the message), DI_ERR_OUT_OF_MEMORY. Thread-safe. */
DI_API di_status di_tokenizer_load(const char *path, di_tokenizer **out, di_error **err);

/* As di_tokenizer_load, from the text of a tokenizer.json held in memory
 * (`len` bytes; it need not be NUL-terminated and is not kept). */
DI_API di_status di_tokenizer_load_json(const char *json, size_t len, di_tokenizer **out,
                                        di_error **err);

/* Free a tokenizer; NULL is a no-op. No other call may be using it. */
DI_API void di_tokenizer_free(di_tokenizer *tok);

/* The number of token IDs: one more than the largest ID of the vocabulary and the
 * added tokens (HF's get_vocab_size(with_added_tokens=True)). */
DI_API int32_t di_tokenizer_vocab_size(const di_tokenizer *tok);

/* The ID of the token whose decoded text is exactly `text` (`len` bytes), in *id:
 * an added token's spelling ("<think>", "<｜end▁of▁sentence｜>") or a vocabulary
 * token's bytes (" world", not its byte-level form "Ġworld"). Of two added tokens
 * with one spelling, the later wins, as in encode. Returns DI_ERR_NOT_FOUND when no
 * token matches. Thread-safe. */
DI_API di_status di_tokenizer_token_id(const di_tokenizer *tok, const char *text, size_t len,
                                       int32_t *id);

/* Flags for di_tokenizer_encode. A tokenizer's added tokens are either special or
 * not (tokenizer.json "special"; GGUF control vs user-defined), and which is which
 * varies by model: in the DeepSeek V4 tokenizer <think> and </think> are
 * non-special, so recognising them needs DI_TOKENIZE_ADDED. To recognise every
 * added token, as HF does by default, pass both flags. */
/* Recognise the spellings of special added tokens (HF: special=true; GGUF:
 * control tokens) in the text. Without it they are encoded as plain text, as
 * deepseek-recipe encodes user text and HF's encode_special_tokens does. */
#define DI_TOKENIZE_SPECIAL 1u
/* Recognise the spellings of non-special added tokens (GGUF: user-defined
 * tokens). HF tokenizers always does; llama.cpp does even when it does not parse
 * special tokens. */
#define DI_TOKENIZE_ADDED 2u
/* Add the post-processor's tokens (the BOS of a TemplateProcessing template, or
 * GGUF's add_bos_token / add_eos_token), as HF's add_special_tokens=True and
 * llama.cpp's add_special do. */
#define DI_TOKENIZE_ADD_SPECIAL_TOKENS 4u
/* What HF tokenizers' Tokenizer.encode(text) does by default. */
#define DI_TOKENIZE_HF_DEFAULT                                                                     \
    (DI_TOKENIZE_SPECIAL | DI_TOKENIZE_ADDED | DI_TOKENIZE_ADD_SPECIAL_TOKENS)

/* Encode `len` bytes of UTF-8 text into token IDs. Plain text (flags 0) is
 * encoded exactly as HF tokenizers encodes it with no added tokens and no
 * post-processing; the flags above add those steps.
 *
 * On success *ids is a new array of *n_ids IDs (NULL when *n_ids is 0) that the
 * caller frees with di_tokens_free (di_tokens_free(NULL) is a no-op). Errors:
 * DI_ERR_INVALID_ARGUMENT (NULL pointers, unknown flags, text over 4 GiB), DI_ERR_INVALID_UTF8 (the
 * message gives the byte offset of the first ill-formed sequence), DI_ERR_OUT_OF_MEMORY.
 * Thread-safe. */
DI_API di_status di_tokenizer_encode(const di_tokenizer *tok, const char *text, size_t len,
                                     unsigned flags, int32_t **ids, size_t *n_ids, di_error **err);

/* Free an ID array from di_tokenizer_encode; NULL is a no-op. */
DI_API void di_tokens_free(int32_t *ids);

/* Flag for di_tokenizer_decode and di_detokenizer_create: leave special added
 * tokens out of the text (HF's skip_special_tokens=True). */
#define DI_DECODE_SKIP_SPECIAL 1u

/* Decode token IDs into text, as HF tokenizers' decode does: each token's bytes
 * (byte-level tokens map back to raw bytes, added tokens give their spelling)
 * are joined, and bytes that do not form well-formed UTF-8 become U+FFFD, one per
 * maximal ill-formed subpart (Rust's String::from_utf8_lossy).
 *
 * On success *text is a new NUL-terminated string of *len bytes (the NUL not
 * counted) that the caller frees with di_text_free. Errors:
 * DI_ERR_INVALID_ARGUMENT (NULL pointers, an ID outside [0, vocab size), unknown
 * flags — the message names the position of the bad ID), DI_ERR_OUT_OF_MEMORY.
 * Thread-safe. */
DI_API di_status di_tokenizer_decode(const di_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                     unsigned flags, char **text, size_t *len, di_error **err);

/* Free a string returned by the library; NULL is a no-op. */
DI_API void di_text_free(char *text);

/* An incremental detokenizer for one stream of generated tokens: fed one token
 * at a time, it returns only complete UTF-8 — a character whose bytes are split
 * across tokens is held back until its last byte arrives — and never stalls:
 * bytes that can no longer become well-formed are emitted at once as U+FFFD.
 * The concatenation of every piece it returns, flush included, equals
 * di_tokenizer_decode of the whole sequence with the same flags.
 *
 * Not thread-safe: one detokenizer per stream, used by one thread at a time. The
 * tokenizer must outlive it. */
typedef struct di_detokenizer di_detokenizer;

/* Create a detokenizer (flags: 0 or DI_DECODE_SKIP_SPECIAL). Errors (status only:
 * the causes are the arguments themselves): DI_ERR_INVALID_ARGUMENT (NULL
 * tokenizer or out, unknown flags), DI_ERR_OUT_OF_MEMORY. */
DI_API di_status di_detokenizer_create(const di_tokenizer *tok, unsigned flags,
                                       di_detokenizer **out);

/* Feed one token ID. *text receives the newly completed text (*len bytes,
 * NUL-terminated, possibly empty), owned by the detokenizer and valid until the
 * next call on it. Errors: DI_ERR_INVALID_ARGUMENT (NULL arguments or an ID outside
 * [0, di_tokenizer_vocab_size)), DI_ERR_OUT_OF_MEMORY; on error the detokenizer
 * and *text / *len are unchanged. */
DI_API di_status di_detokenizer_push(di_detokenizer *d, int32_t id, const char **text, size_t *len);

/* End the stream: *text receives what was held back (an incomplete sequence at
 * the end becomes U+FFFD). The detokenizer is then empty and can start a new
 * stream. Same lifetime rules as di_detokenizer_push. */
DI_API di_status di_detokenizer_flush(di_detokenizer *d, const char **text, size_t *len);

/* Free a detokenizer; NULL is a no-op. */
DI_API void di_detokenizer_free(di_detokenizer *d);

/* ------------------------------------------------------------------------- */
/* Codec (experimental: the protocol list grows)                             */
/* ------------------------------------------------------------------------- */

/* The recipe codec turns an API request into exactly the prompt a DeepSeek model
 * was trained on — byte-identical with DeepSeek's deepseek-recipe 0.2.0
 * (`ChatCompletionRequest(body).convert(ConversionOptions())` then
 * `DeepseekV4Encoding` / `DeepseekV41Encoding().render_conversation(...)`) — and
 * into token IDs. It needs no model: a host with its own inference backend can
 * use it alone. docs/codec.md and docs/recipe-spec.md describe the behaviour. */

/* Wire protocols of requests. Values are never renumbered; new ones are appended. */
typedef enum di_protocol {
    DI_PROTOCOL_CHAT = 1,     /* OpenAI Chat Completions */
    DI_PROTOCOL_MESSAGES = 2, /* Anthropic Messages */
    DI_PROTOCOL_RESPONSES = 3 /* OpenAI Responses */
} di_protocol;

/* Prompt encodings. */
typedef enum di_encoding {
    DI_ENCODING_NONE = 0,  /* no encoding: an engine that takes token requests only */
    DI_ENCODING_DSV4 = 1,  /* DeepSeek V4 (deepseek-recipe's DeepseekV4Encoding) */
    DI_ENCODING_DSV41 = 2, /* DeepSeek V4.1 (DeepseekV41Encoding) */
    DI_ENCODING_DSV3 = 3,  /* DeepSeek V3: the chat template of its tokenizer_config.json */
    DI_ENCODING_R1 = 4,    /* DeepSeek-R1 distills: the chat template in their GGUF */
    /* ChatML (<|im_start|>ROLE\n…<|im_end|>\n: SmolLM2, Qwen2 chat models), with
     * tools in the system turn and calls written as Hermes-style
     * <tool_call>{"name": …, "arguments": …}</tool_call> blocks (docs/codec.md,
     * "ChatML"). */
    DI_ENCODING_CHATML = 5
} di_encoding;

/* A codec: an encoding, and optionally the tokenizer that turns prompts into IDs.
 * Immutable once created: di_codec_render may run from many threads at once. */
typedef struct di_codec di_codec;

/* A rendered prompt: its text and, when the codec has a tokenizer, its token
 * IDs. Owned by the caller (di_prompt_free); read it from one thread at a time. */
typedef struct di_prompt di_prompt;

/* The encoding's name as the CLI and docs spell it ("dsv4", "dsv41", "dsv3",
 * "r1", "chatml"; a static string), or NULL for DI_ENCODING_NONE and unknown
 * values. Thread-safe. */
DI_API const char *di_encoding_name(int32_t encoding);

/* Create a codec for `encoding`. `tok` may be NULL (prompts then have text but no
 * IDs); otherwise it must outlive the codec. Errors: DI_ERR_INVALID_ARGUMENT (NULL
 * out, unknown encoding), DI_ERR_OUT_OF_MEMORY. Thread-safe. */
DI_API di_status di_codec_create(const di_tokenizer *tok, di_encoding encoding, di_codec **out,
                                 di_error **err);

/* DI_ENCODING_CHATML: the system prompt a conversation that opens without a
 * system message gets (`text`, UTF-8, copied; NULL: none, the default). Models'
 * chat templates carry one (SmolLM2's: "You are a helpful AI assistant named
 * SmolLM, trained by Hugging Face"); di_engine_create sets it from the GGUF's
 * tokenizer.chat_template. Errors: DI_ERR_INVALID_ARGUMENT (NULL codec, another
 * encoding), DI_ERR_INVALID_UTF8, DI_ERR_OUT_OF_MEMORY (the codec keeps its
 * previous setting). Not thread-safe: call it before the codec renders. */
DI_API di_status di_codec_set_default_system(di_codec *codec, const char *text, di_error **err);

/* Free a codec; NULL is a no-op. No render may be running on it. */
DI_API void di_codec_free(di_codec *codec);

/* The largest request body di_codec_render accepts, in bytes (256 MiB). */
#ifdef __cplusplus
#    define DI_CODEC_MAX_REQUEST_BYTES (static_cast<size_t>(256) << 20)
#else
#    define DI_CODEC_MAX_REQUEST_BYTES ((size_t)256 << 20)
#endif

/* Render the request `json` (`len` bytes of UTF-8 JSON in `protocol`'s format)
 * into a new prompt in *out. The request's `model` selects the conversion rules
 * (DeepSeek-V4-Pro or DeepSeek-V4.1-Flash, as in the reference); the codec's
 * encoding selects the prompt layout. Special-token spellings inside user text
 * stay plain text.
 *
 * DI_ENCODING_DSV3 and DI_ENCODING_R1 apply the model's own chat template to the
 * messages of a Chat Completions request, as transformers' apply_chat_template
 * does (add_generation_prompt on; the request's other fields and its model name
 * are not used; DI_PROTOCOL_CHAT only). DI_ENCODING_CHATML renders a Chat
 * Completions request's messages, tools and tool_choice as ChatML, and a
 * Messages or Responses request as the Chat request it converts to (docs/codec.md,
 * "ChatML").
 *
 * Errors: DI_ERR_INVALID_REQUEST for every request the reference rejects —
 * malformed JSON, nesting deeper than 127, wrong types, unknown roles, tool
 * messages without a call, empty messages, unsupported models, out-of-range
 * parameters, bodies over DI_CODEC_MAX_REQUEST_BYTES — with a message naming the
 * field (e.g. "messages[2].role: unknown role \"wizard\""); DI_ERR_UNSUPPORTED (a
 * protocol other than Chat with the dsv3 or r1 template); DI_ERR_INVALID_ARGUMENT
 * (NULL pointers, unknown protocol);
 * DI_ERR_OUT_OF_MEMORY. Thread-safe on a shared codec. */
DI_API di_status di_codec_render(const di_codec *codec, di_protocol protocol, const char *json,
                                 size_t len, di_prompt **out, di_error **err);

/* The prompt text (NUL-terminated UTF-8, *len bytes when len is not NULL), owned
 * by the prompt. NULL for a NULL prompt. */
DI_API const char *di_prompt_text(const di_prompt *prompt, size_t *len);

/* The prompt's token IDs (*n_ids of them, owned by the prompt): special tokens by
 * their IDs, the text between them encoded as plain text (no added vocabulary),
 * as deepseek-recipe's `encode` does. Errors: DI_ERR_INVALID_STATE (the codec has
 * no tokenizer), DI_ERR_UNSUPPORTED (the tokenizer lacks a special token the
 * encoding uses, e.g. <｜System｜> of V4.1 in the V4 tokenizer). */
DI_API di_status di_prompt_tokens(const di_prompt *prompt, const int32_t **ids, size_t *n_ids,
                                  di_error **err);

/* What the request asks of generation, as deepseek-recipe resolves it
 * (docs/recipe-spec.md §3): thinking mode (1/0) and the stream flag. Thinking
 * is 0 for the template encodings (an R1 distill's template opens its <think>
 * block itself) and for NULL. */
DI_API int di_prompt_thinking(const di_prompt *prompt);
/* The request's stream flag (1/0), as di_prompt_thinking. */
DI_API int di_prompt_stream(const di_prompt *prompt);

/* The sampling temperature and top_p to use, as float32 like the reference
 * (thinking mode forces temperature 1.0; top_p follows the model's rules: V4-Pro
 * 0.95 when thinking with tools, V4.1-Flash at least 0.95 when thinking and 1.0
 * otherwise); for the chat templates (DSV3, R1, ChatML), the body's values as
 * OpenAI defines them (top_p 0: temperature 0, top_p 1). 1.0 when the body
 * sets none, and for NULL. */
DI_API float di_prompt_temperature(const di_prompt *prompt);
/* The top_p to use, under the rules given for di_prompt_temperature. */
DI_API float di_prompt_top_p(const di_prompt *prompt);

/* The request's stop sequences (Chat `stop`, Messages `stop_sequences`), in
 * order, for every encoding; strings owned by the prompt. di_prompt_stop
 * returns NULL past the end. */
DI_API size_t di_prompt_stop_count(const di_prompt *prompt);
/* Stop sequence i (UTF-8, owned by the prompt), or NULL when i is past the end. */
DI_API const char *di_prompt_stop(const di_prompt *prompt, size_t i);

/* The sources of the images whose <｜image｜> image tokens the prompt holds (V4.1
 * models), in the order of their <｜image｜> tokens: http(s) URLs or base64 data URLs, owned by the
 * prompt. Pixel preprocessing is left to the host. NULL past the end. */
DI_API size_t di_prompt_image_count(const di_prompt *prompt);
/* The source of image i (owned by the prompt), or NULL when i is past the end. */
DI_API const char *di_prompt_image_url(const di_prompt *prompt, size_t i);

/* The completion budget for a prompt of `prompt_tokens` tokens in a context of
 * `context_limit`, in *max_tokens: the requested max_tokens (the chat
 * templates: max_completion_tokens, else max_tokens), or the reference's
 * default (8192 without thinking, 65536 with it, 131072 with effort max) lowered
 * to the room left and at least 1, as deepseek-recipe's resolve_max_tokens does.
 * Errors: DI_ERR_CONTEXT_LENGTH when the prompt plus the requested completion
 * exceed the context (the message gives the numbers), DI_ERR_INVALID_ARGUMENT. */
DI_API di_status di_prompt_max_tokens(const di_prompt *prompt, uint32_t prompt_tokens,
                                      uint32_t context_limit, uint32_t *max_tokens, di_error **err);

/* Free a prompt; NULL is a no-op. */
DI_API void di_prompt_free(di_prompt *prompt);

/* ------------------------------------------------------------------------- */
/* The codec, output side: generated text → reasoning, answer, tool calls and  */
/* protocol chunks                                                            */
/* ------------------------------------------------------------------------- */

/* A response stream turns what a model generates for one rendered prompt into
 * what the request's protocol sends back, exactly as deepseek-recipe 0.2.0's
 * `StreamProcessor` does with the protocol's chunk generator
 * (ChatCompletionRequest / MessagesRequest / ResponsesRequest.chunk_generator):
 * the text is split into reasoning, answer and DeepSeek DSML tool calls, stop
 * sequences end it, and every push yields
 *   - parsed events (di_stream_event_*): reasoning and answer deltas, tool calls
 *     beginning, their argument JSON growing, and complete; and
 *   - protocol chunks (di_stream_chunk_*): Chat Completions chunks, Messages
 *     events or Responses events, as JSON and as the SSE message to send;
 * and after di_stream_finish the complete (non-streaming) response JSON.
 * docs/stream.md describes the behaviour, with the reference's quirks.
 *
 * A host with its own inference backend uses it as deepseek-recipe is used:
 * render the request (di_codec_render), generate from the prompt's tokens, push
 * each backend output here. One stream is used by one thread at a time; streams
 * are independent of one another and of the prompt after creation. */
typedef struct di_stream di_stream;

/* Why the backend stopped generating (deepseek-recipe's InferenceFinishReason).
 * The protocol's finish reason is derived from it and from the output: a stop
 * with tool calls reports tool calls, as the reference does. */
typedef enum di_finish {
    DI_FINISH_STOP = 1,           /* end of sequence or a stop sequence */
    DI_FINISH_LENGTH = 2,         /* the max_tokens budget ran out */
    DI_FINISH_CONTENT_FILTER = 3, /* the backend filtered the output */
    DI_FINISH_UNKNOWN = 4         /* the input ended without a reason (the reference's finish()
                                     with no finish chunk): reported as stop, even after tool calls */
} di_finish;

/* Where parsing starts in thinking mode (deepseek-recipe's ThinkingInitialStage). */
typedef enum di_thinking_stage {
    DI_THINKING_OFF = 0,                    /* thinking mode off: all output is answer */
    DI_THINKING_REASONING_START = 1,        /* a new turn: reasoning first, leading '\n's dropped */
    DI_THINKING_REASONING_CONTINUATION = 2, /* continuing a prefix's reasoning */
    DI_THINKING_CONTENT_CONTINUATION = 3    /* continuing a prefix's answer */
} di_thinking_stage;

/* Settings of a stream, read by di_stream_create (the struct_size convention
 * above: di_stream_options_init, the macro over di_stream_options_init_size,
 * sets the defaults). */
typedef struct di_stream_options {
    size_t struct_size;
    /* The response id reported in every chunk; copied. NULL (default): a random
     * id in the protocol's style ("chatcmpl-…", "msg_…", "resp_…"). */
    const char *response_id;
    /* The model name reported; copied. NULL (default): the request's `model`. */
    const char *model;
    /* Unix time in seconds reported as `created` / `created_at` / `completed_at`.
     * 0 (default): the clock, read at creation (created) and at the end
     * (completed_at), as the reference reads it. */
    int64_t created;
    /* Seeds the random part of tool-call ids ("call_00_" + 20 letters and digits
     * + 4 digits, as the reference draws them) and of a default response id, so
     * tests are repeatable. 0 (default): seeded from the clock — not
     * unguessable: a host that needs unguessable ids sets response_id. */
    uint64_t seed;
    /* Messages only: the signature sent at the end of each thinking block; copied.
     * NULL (default): the response id, as MessagesChunkGenerator.with_signature's
     * default. */
    const char *signature;
    /* Parsing settings that replace what the request implies, for hosts that
     * prompt the model differently (deepseek-recipe's ParsingOptions): used when
     * override_parsing is 1, ignored when 0 (default). With the override on, all
     * six fields below replace the request's — zero means off, no stop sequences —
     * so start from di_stream_options_from_prompt, which fills them with what the
     * request implies, and change what differs. */
    int32_t override_parsing;
    int32_t parse_tool_calls;     /* 1: DSML tool calls are parsed */
    int32_t starts_in_tool_calls; /* 1: output begins inside the tool-call block */
    int32_t parse_json_output;    /* 1: the JSON in the answer is kept, text around it blanked */
    int32_t thinking_stage;       /* a di_thinking_stage */
    int32_t reserved;             /* must be 0 */
    /* Stop sequences (non-empty UTF-8, copied at creation): n_stop_sequences
     * pointers. Part of the override: ignored when override_parsing is 0. */
    const char *const *stop_sequences;
    size_t n_stop_sequences;
} di_stream_options;

/* Initialise the first struct_size bytes of *opts: struct_size, and every field
 * inside them to its default (all zero: a random response id, the request's
 * model, the clock, a clock-seeded seed, no parsing override). Writes nothing
 * past struct_size; NULL or a struct_size below sizeof(size_t) writes nothing
 * (see "Versioned input structs"). Thread-safe. */
DI_API void di_stream_options_init_size(di_stream_options *opts, size_t struct_size);
/* Exported for the binaries compiled before di_stream_options_init_size: it
 * initialises this release's struct, a size frozen for good (see "Versioned
 * input structs"). The macro of the same name hides it from later hosts. */
DI_API void di_stream_options_init(di_stream_options *opts);
/* Initialise *opts as the caller compiled it: di_stream_options_init_size with
 * sizeof *opts. */
#define di_stream_options_init(opts) di_stream_options_init_size((opts), sizeof *(opts))

/* Fill the parsing override of *opts (an initialised struct of this or a later release) with
 * what `prompt`'s request implies, and turn the override on: tool-call parsing,
 * starting inside a tool-call block (a required tool choice), JSON mode, the
 * thinking stage, the stop sequences (pointers into the prompt: valid while it
 * lives — di_stream_create copies them). A host changes what differs and passes
 * opts to di_stream_create. Returns DI_ERR_INVALID_ARGUMENT for NULL arguments or
 * a struct_size too small for the fields it fills (the first release's). */
DI_API di_status di_stream_options_from_prompt(const di_prompt *prompt, di_stream_options *opts);

/* Create the response stream of `prompt`. The parsing follows the request —
 * thinking mode, tool choice, response format, stop sequences, continuation of a
 * prefix message — and the writer follows its protocol. Prompts of the DSV4 and
 * DSV41 encodings parse DeepSeek V4 DSML tool calls, as deepseek-recipe does;
 * prompts of the DSV3 and R1 chat templates parse the V3 / V3.1 / R1 tool-call
 * tokens those templates teach (<｜tool▁calls▁begin｜>…; R1 output starts in its
 * reasoning), which the reference does not define (docs/stream.md). `tok` may be
 * NULL: then di_stream_push_tokens fails and no reasoning tokens are counted. The
 * prompt may be freed after this call; `tok` must outlive the stream. `opts` may be
 * NULL for the defaults.
 * Errors: DI_ERR_INVALID_ARGUMENT (NULL prompt/out, bad opts), DI_ERR_INVALID_UTF8
 * (a stop sequence in opts), DI_ERR_OUT_OF_MEMORY. Thread-safe. */
DI_API di_status di_stream_create(const di_prompt *prompt, const di_tokenizer *tok,
                                  const di_stream_options *opts, di_stream **out, di_error **err);

/* The backend is ready: the prompt's usage (tokens in the prompt, and how many
 * of them came from a prefix cache, reported as prompt_cache_hit_tokens /
 * cached_tokens / cache_read_input_tokens as each protocol names them) and an
 * optional system_fingerprint (Chat; may be NULL). Produces the opening chunks
 * (Chat's role delta, Messages' message_start, Responses' response.created …).
 * Calling it is optional: a first push or finish without it reports zero prompt
 * tokens, and a call after the stream started changes nothing, as the
 * reference does (a hit count above the prompt's reports zero cache misses).
 * Errors: DI_ERR_INVALID_STATE (after the stream finished). */
DI_API di_status di_stream_ready(di_stream *s, uint32_t prompt_tokens,
                                 uint32_t prompt_cache_hit_tokens, const char *system_fingerprint,
                                 di_error **err);

/* Push one backend output: `len` bytes of generated UTF-8 text, accounting for
 * `n_tokens` completion tokens (summed into usage). Text that may still become a
 * marker or a stop sequence is held back until it is decided, and never forever:
 * di_stream_finish releases it. Do not push the end-of-sequence token: finish the
 * stream instead (pushed, "<｜end▁of▁sentence｜>" is answer text, as in the
 * reference; the dsv3/r1 template streams end at it).
 * Every call's chunks and events replace the last call's, a failed call's too
 * (then there are none). Errors: DI_ERR_INVALID_UTF8 (the message gives the byte
 * offset), DI_ERR_INVALID_ARGUMENT, DI_ERR_INVALID_STATE (the stream finished — also
 * by a stop sequence, which ends it inside the push that completes it, as the
 * reference does: check di_stream_finished after each push); none of them changes
 * the stream. DI_ERR_OUT_OF_MEMORY ends it. */
DI_API di_status di_stream_push_text(di_stream *s, const char *text, size_t len, uint32_t n_tokens,
                                     di_error **err);

/* Push one backend output as token IDs, decoded with the stream's tokenizer as the
 * reference decodes them: ordinary IDs in groups, an added token on its own (its
 * spelling is text), and a group whose text ends in an incomplete character held
 * until the next token push — dropped, uncounted, by di_stream_finish or a text
 * push. IDs count as completion tokens when their text is decoded. Errors: as
 * di_stream_push_text, plus DI_ERR_INVALID_STATE (no tokenizer) and
 * DI_ERR_INVALID_ARGUMENT (an ID outside the vocabulary); none changes the stream. */
DI_API di_status di_stream_push_tokens(di_stream *s, const int32_t *ids, size_t n_ids,
                                       di_error **err);
/* As di_stream_push_tokens, with each token's log probability: logprobs[i]
 * (n_logprobs of them, one per ID) is ids[i]'s, and top_ids / top_logprobs
 * ([n_ids, n_top], row-major; NULL when n_top is 0) its n_top alternatives —
 * what di_event_logprobs and di_event_top_logprobs give. The chunks carry them
 * as the reference's StreamProcessor does with an InferenceChunk's
 * log_probs: Chat Completions as the choice's `logprobs` ({"content": […]} or
 * {"reasoning_content": […]}, each entry OpenAI's {token, logprob, bytes,
 * top_logprobs}: the token's text, or its bytes as "\xNN" escapes when they are
 * not UTF-8 on their own; logprob as float32), accumulated into the complete
 * response; Responses as the output_text deltas' and the message's `logprobs`
 * (reasoning carries none); Messages carry none. A push's entries go with the
 * first reasoning or answer delta its text produces, and are dropped when it
 * produces none (a marker, a tool call, stripped newlines). Errors: as
 * di_stream_push_tokens, plus DI_ERR_INVALID_ARGUMENT for n_logprobs other
 * than n_ids ("invalid log probabilities: N log probabilities for M token
 * IDs", the reference's words), NULL arrays, n_top above 20 or an
 * alternative's ID outside the vocabulary; none changes the stream. */
DI_API di_status di_stream_push_tokens_logprobs(di_stream *s, const int32_t *ids, size_t n_ids,
                                                const float *logprobs, size_t n_logprobs,
                                                const int32_t *top_ids, const float *top_logprobs,
                                                size_t n_top, di_error **err);

/* The backend finished for `reason`: held text is released, open blocks are
 * closed, the final chunks (finish_reason and usage) are produced, and the
 * complete response becomes available. A second call produces nothing and
 * returns DI_OK, as the reference's finish() does. Errors: DI_ERR_INVALID_ARGUMENT
 * (unknown reason). */
DI_API di_status di_stream_finish(di_stream *s, di_finish reason, di_error **err);

/* 1 once the stream has finished (di_stream_finish, or a stop sequence matched:
 * then the final chunks came from that push and further pushes fail), 0
 * otherwise. */
DI_API int di_stream_finished(const di_stream *s);

/* The stop sequence that ended the stream (owned by the stream), or NULL when none
 * did or the stream has not finished. */
DI_API const char *di_stream_stop_sequence(const di_stream *s);

/* Kinds of parsed events. */
typedef enum di_stream_event_kind {
    DI_STREAM_REASONING = 1,           /* text: a reasoning_content delta */
    DI_STREAM_TEXT = 2,                /* text: an answer (content) delta */
    DI_STREAM_TOOL_CALL_BEGIN = 3,     /* a tool call starts: index, id, name */
    DI_STREAM_TOOL_CALL_ARGUMENTS = 4, /* text: a piece of the call's arguments JSON */
    DI_STREAM_TOOL_CALL_END = 5,       /* the call is complete: index, id, name, arguments */
    DI_STREAM_FINISH = 6               /* the end: finish_reason (the protocol's word) */
} di_stream_event_kind;

/* The parsed events produced by the last ready/push/finish call, in order; they
 * live until the next call on the stream or di_stream_free. */
DI_API size_t di_stream_event_count(const di_stream *s);
/* Kind of event i; 0 (no kind) when i is out of range. */
DI_API di_stream_event_kind di_stream_event_kind_at(const di_stream *s, size_t i);
/* The kind's name ("reasoning", "text", "tool_call_begin",
 * "tool_call_arguments", "tool_call_end", "finish"; static), NULL for unknown
 * values. See di_event_kind_name on the two enums. */
DI_API const char *di_stream_event_kind_name(di_stream_event_kind kind);
/* The event's text, *len bytes, NUL-terminated, owned by the stream: REASONING,
 * TEXT, TOOL_CALL_ARGUMENTS: the delta; TOOL_CALL_BEGIN: the function name;
 * TOOL_CALL_END: the whole arguments text — JSON as the model wrote it, which the
 * reference does not validate (a string="false" parameter is pasted verbatim), so
 * a host parses it before use; FINISH: the protocol's finish reason ("stop",
 * "tool_calls", "length", "end_turn", "tool_use", "max_tokens", "stop_sequence",
 * "refusal", "completed", "incomplete"…). "" when i is out of range. */
DI_API const char *di_stream_event_text(const di_stream *s, size_t i, size_t *len);
/* Tool-call events: the call's 0-based index in the response, its id and its
 * function name (strings owned by the stream); -1 / NULL for other events. */
DI_API int di_stream_event_call_index(const di_stream *s, size_t i);
/* Tool-call events: the call id ("call_NN_…", as the protocol chunks carry it),
 * NUL-terminated, owned by the stream and valid until di_stream_free; NULL for
 * other events or i out of range. */
DI_API const char *di_stream_event_call_id(const di_stream *s, size_t i);
/* Tool-call events: the function name the model wrote (NUL-terminated; a name
 * holding U+0000 is cut there — the chunks keep it whole), owned by the stream and
 * valid until di_stream_free; NULL for other events or i out of range. */
DI_API const char *di_stream_event_call_name(const di_stream *s, size_t i);

/* The protocol chunks produced by the last ready/push/finish call, in order;
 * they live until the next call on the stream or di_stream_free. Chunk i as
 * compact JSON (the chunk's `data`), its SSE event name (Messages and Responses
 * name every event; Chat's are unnamed: NULL), and the whole SSE message to write
 * ("event: NAME\n" when named, "data: JSON\n\n"). After the final chunk of a Chat
 * stream, one more chunk has JSON NULL and SSE "data: [DONE]\n\n". */
DI_API size_t di_stream_chunk_count(const di_stream *s);
/* Chunk i's compact JSON (the SSE `data`), *len bytes when len is not NULL,
 * NUL-terminated, owned by the stream until its next call; NULL for Chat's final
 * "[DONE]" chunk and for i out of range (then *len is 0). */
DI_API const char *di_stream_chunk_json(const di_stream *s, size_t i, size_t *len);
/* Chunk i's SSE event name ("message_start", "response.output_text.delta", …;
 * the JSON's `type`), owned by the stream until its next call; NULL for Chat's
 * unnamed events and for i out of range. */
DI_API const char *di_stream_chunk_event(const di_stream *s, size_t i);
/* di_stream_chunk_event under the name di_event_chunk_event_name shares. */
DI_API const char *di_stream_chunk_event_name(const di_stream *s, size_t i);
/* Chunk i as the whole SSE message to write ("event: NAME\n" when named, then
 * "data: JSON\n\n"; Chat's last is "data: [DONE]\n\n"), *len bytes when len is not
 * NULL, owned by the stream until its next call; NULL for i out of range. */
DI_API const char *di_stream_chunk_sse(const di_stream *s, size_t i, size_t *len);

/* The complete response JSON (what a non-streaming request returns: the chunks
 * accumulated as ChatCompletionResponse / MessagesResponse / ResponsesResponse
 * do), owned by the stream, once it has finished; NULL before. */
DI_API const char *di_stream_response_json(const di_stream *s, size_t *len);

/* Usage so far: completion tokens (the n_tokens of text pushes plus the token IDs
 * decoded), and reasoning tokens (after the finish: the reasoning text re-encoded
 * with the tokenizer's full vocabulary, as the reference counts them — it can
 * exceed the completion tokens; 0 without a tokenizer). Either out may be NULL. */
DI_API void di_stream_usage(const di_stream *s, uint32_t *completion_tokens,
                            uint32_t *reasoning_tokens);

/* Free a stream; NULL is a no-op. */
DI_API void di_stream_free(di_stream *s);

/* ------------------------------------------------------------------------- */
/* Models (CPU)                                                               */
/* ------------------------------------------------------------------------- */

/* A loaded model with one token sequence: its weights (memory-mapped), a CPU
 * thread pool and a KV cache. The low-level way to run a model: append tokens,
 * read logits; sampling and scheduling belong to the engine (di_engine_*).
 * Architectures: dense Llama and Qwen2 (the DeepSeek-R1 distills),
 * DeepSeek-V3 / DeepSeek-V2 (Multi-head Latent Attention, DeepSeekMoE) and
 * DeepSeek-V4 (docs/deepseek-v4.md) from Hugging Face directories in bf16,
 * f16, f32 or fp8-e4m3 with block scales. A di_model is used by one thread at
 * a time; calls on different models may run concurrently. */
typedef struct di_model di_model;

/* The KV cache's storage type (di_model_options.kv_cache_type,
 * di_engine_config.kv_cache_type): llama.cpp's --cache-type-k/--cache-type-v
 * (the same for keys and values). Values are never renumbered. */
typedef enum di_kv_cache_type {
    /* f16, 2 bytes a value: llama.cpp's default. */
    DI_KV_CACHE_F16 = 0,
    /* f32, 4 bytes a value. */
    DI_KV_CACHE_F32 = 1,
    /* ggml's Q8_0: blocks of 32 values, an f16 scale and 32 int8 (34 bytes,
     * 1.0625 bytes a value: 0.53 of f16). */
    DI_KV_CACHE_Q8_0 = 2,
    /* ggml's Q4_0: blocks of 32 values, an f16 scale and 32 4-bit values (18
     * bytes, 0.5625 bytes a value: 0.28 of f16). */
    DI_KV_CACHE_Q4_0 = 3,
} di_kv_cache_type;

/* Options of di_model_load (a versioned input struct: see "Versioned input
 * structs"; di_model_options_init, the macro over di_model_options_init_size,
 * sets the defaults). */
typedef struct di_model_options {
    size_t struct_size;
    /* CPU threads running the forward pass, counting the caller's; 0 (default):
     * the number of CPUs online. At most 1024. */
    int32_t n_threads;
    /* 1: keep the KV cache in f32; 0 (default): f16, as llama.cpp does. */
    int32_t kv_cache_f32;
    /* Tokens the sequence may hold; 0 (default): the model's training context,
     * at most 4096. */
    int64_t n_ctx;
    /* The KV cache's storage type, a di_kv_cache_type; 0 (DI_KV_CACHE_F16,
     * default): f16, or f32 with kv_cache_f32 = 1. Q8_0 and Q4_0 keep each
     * token's keys and values in blocks of 32 (quantized once, when stored;
     * attention dequantizes them exactly to f32): 0.53 and 0.28 of the f16
     * cache's bytes (DeepSeek-V4: of its entries and window; its compressors'
     * pending rows stay f32), so long contexts read less memory per decoded token, at
     * the cost of the rounding (docs/kv-cache.md gives the logits' distance
     * from the f32 reference beside llama.cpp's with the same type). They
     * need head_dim (an MLA model's kv_lora_rank + qk_rope_head_dim) a
     * multiple of 32, and the CPU (DI_ERR_UNSUPPORTED otherwise, naming the
     * dimension; DeepSeek-V4's window, compressed entries and indexer keys
     * take every type, with head_dim and index_head_dim whole blocks). An
     * unknown value, or kv_cache_f32 = 1 with a type other than F32 or F16, is
     * DI_ERR_INVALID_ARGUMENT. */
    int32_t kv_cache_type;
    int32_t reserved; /* must be 0 */
} di_model_options;

/* Initialise the first struct_size bytes of *opts: struct_size, and every field
 * inside them to its default (all zero: every CPU, an f16 KV cache, the
 * model's context). Writes nothing past struct_size; NULL or a struct_size below
 * sizeof(size_t) writes nothing (see "Versioned input structs"). Thread-safe. */
DI_API void di_model_options_init_size(di_model_options *opts, size_t struct_size);
/* Exported for the binaries compiled before di_model_options_init_size: it
 * initialises this release's struct, a size frozen for good (see "Versioned
 * input structs"). The macro of the same name hides it from later hosts. */
DI_API void di_model_options_init(di_model_options *opts);
/* Initialise *opts as the caller compiled it: di_model_options_init_size with
 * sizeof *opts. */
#define di_model_options_init(opts) di_model_options_init_size((opts), sizeof *(opts))

/* Load the model at `path`: a .gguf file, or a Hugging Face directory
 * (config.json, *.safetensors). opts may be NULL for the defaults. On success
 * *out owns the model; free it with di_model_free. A DeepSeek-V4.1 directory
 * with Engram layers also reads its tokenizer.json (their compressed
 * vocabulary, docs/deepseek-v41.md).
 * Errors: DI_ERR_INVALID_ARGUMENT (NULL path/out, bad options), DI_ERR_IO
 * (cannot open or map), DI_ERR_MODEL_FORMAT (corrupt or inconsistent file: the
 * message names the file, tensor or field; an Engram model's tokenizer.json
 * missing or not the one its config describes), DI_ERR_UNSUPPORTED (an architecture
 * or weight type the CPU backend does not run), DI_ERR_OUT_OF_MEMORY,
 * DI_ERR_BACKEND (threads could not start). Thread-safe. */
DI_API di_status di_model_load(const char *path, const di_model_options *opts, di_model **out,
                               di_error **err);

/* Free a model; NULL is a no-op. */
DI_API void di_model_free(di_model *model);

/* Logits per token: the size of a logits row. 0 for NULL. */
DI_API int32_t di_model_vocab_size(const di_model *model);
/* Tokens the sequence may hold (the context length chosen at load). 0 for NULL. */
DI_API int64_t di_model_context_length(const di_model *model);
/* Tokens in the sequence now: the position the next token gets. 0 for NULL. */
DI_API int64_t di_model_n_past(const di_model *model);
/* Empty the sequence (free its KV cache). NULL is a no-op. */
DI_API void di_model_reset(di_model *model);
/* Bytes of KV cache one token of the sequence takes, summed over the layers, in
 * the cache's element type (2 bytes for f16, 4 with kv_cache_f32, 34 per 32
 * values for Q8_0 and 18 per 32 for Q4_0: kv_cache_type). Dense models
 * keep every KV head's key and value: 2 * layers * kv_heads * head_dim *
 * element. DeepSeek-V3/V2 keep only MLA's compressed latent and the shared rope
 * key: layers * (kv_lora_rank + qk_rope_head_dim) * element (DeepSeek-V2 paper,
 * section 2.1.4). DeepSeek-V4 keeps one compressed entry per compress rate
 * tokens of its CSA and HCA layers (and the CSA indexer's keys), in the
 * element type, plus a fixed part per sequence (the sliding window in the
 * element type, the compressors' pending rows in f32), which this spreads
 * over the context length (docs/deepseek-v4.md). 0 for NULL. Thread-safe. */
DI_API int64_t di_model_kv_bytes_per_token(const di_model *model);

/* Flags of di_model_eval. */
enum {
    /* Write the logits of every evaluated token, not only the last one's. */
    DI_EVAL_ALL_LOGITS = 1u << 0
};

/* Append tokens[0, n_tokens) to the model's sequence and run the forward pass
 * over them (a prefill for many tokens, a decode step for one), reusing the KV
 * cache of the tokens before.
 *
 * logits, when not NULL, receives little-endian host f32 logits (unnormalised,
 * before any sampling): with DI_EVAL_ALL_LOGITS, n_tokens rows of
 * di_model_vocab_size floats, row-major [n_tokens, vocab]; otherwise one row for
 * the last token. The caller owns the buffer.
 *
 * Errors, after which the sequence is unchanged: DI_ERR_INVALID_ARGUMENT (NULL
 * model, n_tokens 0, unknown flags, a token id outside [0, vocab): the message
 * gives its index), DI_ERR_CONTEXT_LENGTH (di_model_n_past + n_tokens exceeds
 * di_model_context_length). Not thread-safe on one model.
 *
 * On a CPU with AMX, the first prefill of 16 or more tokens that the AMX
 * kernels take, or the first eval of any size of a model with BF16 weights
 * (their products run on AMX-BF16 at decode too), asks Linux for the AMX tile
 * state for the whole process: later
 * alternate signal stacks need AT_MINSIGSTKSZ (about 12 KiB), not 8 KiB
 * (docs/api.md, "Process-wide effects"; DI_CPU_AMX=0 turns AMX off). */
DI_API di_status di_model_eval(di_model *model, const int32_t *tokens, size_t n_tokens,
                               float *logits, unsigned flags, di_error **err);

/* ------------------------------------------------------------------------- */
/* Engine: requests, events, polling (experimental)                           */
/* ------------------------------------------------------------------------- */

/* An engine owns a loaded model, its tokenizer and prompt encoding, a paged KV
 * cache and one worker thread that computes every request: it batches the
 * decode steps of all running requests into one forward pass (continuous
 * batching), feeds long prompts in chunks, and pre-empts requests when the KV
 * cache runs out. The host talks to it as to libcurl's multi interface:
 *
 *     di_engine_create(&cfg, &engine, &err);
 *     di_submit(engine, &req, &id, &err);        // any thread, returns at once
 *     while (running) di_poll(engine, 100);      // callbacks run here, on this thread
 *     di_cancel(engine, id, &err);               // any thread
 *     di_engine_destroy(engine);
 *
 * Guarantees (docs/api.md has the whole lifecycle and threading model):
 *   - callbacks (di_request.on_event) run only inside di_poll (and inside
 *     di_engine_destroy, which delivers what is left), on the calling thread,
 *     never concurrently with each other;
 *   - every request di_submit accepted gets exactly one terminal event
 *     (DI_EVENT_DONE), last of its events, whatever happens: completion,
 *     cancellation, an error, or the engine's destruction;
 *   - a request's tokens depend only on its prompt, its sampling parameters and
 *     its seed — not on what else runs in the batch, nor on pre-emption;
 *   - di_submit and di_cancel may be called from any thread, including from a
 *     callback.
 * The engine holds no global state: engines are independent of one another. */
typedef struct di_engine di_engine;

/* Compute devices. */
typedef enum di_device {
    DI_DEVICE_CPU = 1, /* the CPU backend (lib/backend/cpu) */
    /* An NVIDIA GPU (compute capability 9.0+: Hopper) through the module
     * libdeepinfer-cuda.so, loaded by di_engine_create from libdeepinfer's
     * directory or from the path in the environment variable DI_CUDA_MODULE.
     * Dense Llama/Qwen2 models only so far (docs/cuda.md). Where it cannot run,
     * di_engine_create fails with DI_ERR_UNSUPPORTED naming why: the module
     * not found, the driver missing or failing (its error string), no device,
     * a device below 9.0, or an operation the model needs not implemented. */
    DI_DEVICE_CUDA = 2
} di_device;

/* Severities of log messages. */
typedef enum di_log_level {
    DI_LOG_ERROR = 1,
    DI_LOG_WARN = 2,
    DI_LOG_INFO = 3,
    DI_LOG_DEBUG = 4
} di_log_level;

/* A log sink: `message` (NUL-terminated UTF-8, no trailing newline) lives until
 * the call returns. Called from the engine's own threads as well as the host's,
 * possibly concurrently: it must be thread-safe, must not block for long, and
 * must not call into the engine. */
typedef void (*di_log_fn)(void *user, di_log_level level, const char *message);

/* Model-load progress: `fraction` in [0, 1], non-decreasing, called on the
 * thread running di_engine_create. Return 0 to continue, non-zero to cancel the
 * load (di_engine_create then fails with DI_ERR_CANCELLED). */
typedef int (*di_progress_fn)(void *user, float fraction);

/* Settings of di_engine_create (a versioned input struct: see "Versioned input
 * structs"; di_engine_config_init, the macro over di_engine_config_init_size,
 * sets the defaults given here). */
typedef struct di_engine_config {
    size_t struct_size;
    /* The model: a .gguf file or a Hugging Face directory (config.json,
     * *.safetensors). Required; copied. */
    const char *model_path;
    /* The tokenizer: a tokenizer.json, a directory holding one, or a GGUF file.
     * NULL (default): the model's own — the GGUF's metadata, or the
     * tokenizer.json of the model's directory when there is one; a GGUF whose
     * tokenizer.ggml.model is "none" or absent has none. Without a
     * tokenizer the engine accepts token requests only, and reports tokens but
     * no text. Copied. */
    const char *tokenizer_path;
    /* A di_device. Default DI_DEVICE_CPU. */
    int32_t device;
    /* The prompt encoding of protocol requests, a di_encoding; 0 (default): the
     * one the model declares — a GGUF (the model's or the tokenizer's) whose
     * tokenizer.ggml.pre is "deepseek-r1-qwen" (the DeepSeek-R1 distills) is
     * DI_ENCODING_R1, "deepseek-v3" is DI_ENCODING_DSV3; otherwise a tokenizer
     * with DeepSeek's "<｜Assistant｜>" token is DI_ENCODING_DSV3 for DeepSeek-V3
     * weights and DI_ENCODING_R1 for Llama/Qwen2 weights (the distills); a
     * tokenizer with "<|im_start|>" and "<|im_end|>" tokens (SmolLM2, Qwen2
     * chat models) is DI_ENCODING_CHATML, whose default system prompt is the
     * one the GGUF's tokenizer.chat_template writes when a conversation has
     * none. Other models have no encoding the codec knows, and their protocol
     * requests fail with DI_ERR_UNSUPPORTED; so do those of a model whose file
     * declares an encoding its tokenizer lacks the turn tokens of, or holds
     * them past the model's vocabulary (another model's tokenizer; the refusal
     * says which), while an encoding set here that the tokenizer cannot render
     * fails di_engine_create. */
    int32_t encoding;
    /* CPU threads of the forward pass, counting the engine's worker; 0 (default):
     * the CPUs online. At most 1024. */
    int32_t n_threads;
    /* Requests computed together at most (the rest wait their turn); 0
     * (default): 16. At most 256, and at most n_batch (every running request
     * decodes one token in every step). */
    int32_t max_running;
    /* Tokens one sequence may hold, prompt and output (the context length); 0
     * (default): the model's training context, at most 4096. */
    int64_t n_ctx;
    /* Tokens one forward step takes at most (decode tokens of every running
     * request plus prompt chunks); 0 (default): 256; lowered to n_ctx. At most
     * 65536. */
    int64_t n_batch;
    /* The KV cache budget in bytes, shared by all requests (keys and values in
     * kv_cache_type: f16 by default, as llama.cpp stores them); 0 (default): room for 4 sequences
     * of n_ctx tokens. It is rounded down to whole blocks of 16 tokens; less than one block is
     * DI_ERR_INVALID_ARGUMENT. A prompt that does not fit it is refused by di_submit; a request
     * that outgrows it alone ends with DI_ERR_CONTEXT_LENGTH. */
    int64_t kv_cache_bytes;
    /* A log sink and its argument; NULL (default): no logging. */
    di_log_fn log;
    void *log_user;
    /* A load-progress callback and its argument; NULL (default): none. */
    di_progress_fn progress;
    void *progress_user;
    /* The prefix cache. 0 (default): on — every full block of 16 tokens a
     * request computes stays in the KV cache, keyed by the tokens up to its end
     * (vLLM's automatic prefix caching), until its room is needed (the block
     * released longest ago goes first); a later request whose prompt starts
     * with such blocks takes them and prefills only the rest — bit-identical
     * logits to a full prefill, as the engine's arithmetic does not depend on
     * how a prompt is chunked. The count is the usage's prompt_cache_hit_tokens
     * / cached_tokens / cache_read_input_tokens (di_event_prompt_cache_hit_tokens).
     * At least the prompt's last token is always computed. 1: off, every
     * request prefills its whole prompt. */
    int32_t disable_prefix_cache;
    int32_t reserved; /* must be 0 */
    /* The prefix cache's host tier: blocks evicted from the KV cache are kept
     * in memory compressed with zstd, up to this many bytes (the blocks
     * released longest ago go first), and restored — checked against an XXH3
     * checksum — when a later prompt starts with them. 0 (default): none. */
    int64_t kv_host_cache_bytes;
    /* The prefix cache's disk tier: a directory (created when missing) where
     * every full block computed is written, compressed, in the background, so
     * prompts are found again after the engine restarts; engines opening the
     * same directory share it (files are written whole, then renamed, and
     * never modified). A file that is truncated, corrupt, of another format
     * version or for another model or cache dtype is skipped with a log line;
     * a directory that cannot be written, or a full disk, turns the tier off
     * with a log line, and requests go on without it. NULL (default): none.
     * Copied. Layout: docs/prefix-cache.md. */
    const char *kv_cache_dir;
    /* The disk tier's budget in bytes: over it, the oldest files are removed.
     * 0 (default): 4 GiB. */
    int64_t kv_disk_cache_bytes;
    /* The name responses give as `model` (di_engine_served_model_name), UTF-8,
     * copied. NULL (default): the model file's name without .gguf, or the
     * model folder's name (as llama-server names a model by its path; the
     * name the file gives itself is di_engine_model_info's `name`). The V4
     * encodings answer with the request body's `model` instead: it selects
     * their rules (DeepSeek-V4-Pro or DeepSeek-V4.1-Flash), as
     * deepseek-recipe echoes it. */
    const char *served_model_name;
    /* Speculative decoding: draft tokens each decoding request verifies per
     * step at most, drafted by the drafter `draft` chooses — by default prompt
     * lookup (the longest suffix of the request's prompt and output, up to 16
     * tokens, that occurred before, and what followed it: llama.cpp's lookup
     * decoding, vLLM's ngram speculation), or a draft model, or the model's
     * own MTP layer when it has one. The drafts are computed in the same batched step as
     * everyone else's work and a draft is kept only while it equals the token
     * the request would have sampled there, so the output is token for token
     * the same as without speculation — greedy or seeded — only sooner when
     * the output copies its context (code edits, quotes, JSON echoing a
     * prompt). di_event_draft_tokens / di_event_accepted_draft_tokens count
     * them. 0 (default): off; at most 64 (docs/speculative.md). A step
     * holds n_batch tokens, so a request proposes at most n_batch - 1. */
    int32_t speculative_tokens;
    /* 0 (default): how many of a request's drafts a step verifies is chosen
     * by confidence-scheduled verification (the request's acceptance rate so
     * far against a step-time profile every step measures, so a busy engine
     * verifies fewer and an idle one more: docs/speculative.md); 1: every
     * proposal, up to speculative_tokens (fixed-length drafting, as
     * llama.cpp's lookup decoding does). The output is the same either way. */
    int32_t speculative_fixed;
    /* The drafter of speculative decoding (di_draft; used when
     * speculative_tokens > 0): DI_DRAFT_AUTO (0, default), DI_DRAFT_PROMPT_LOOKUP,
     * DI_DRAFT_MODEL (draft_model_path) or DI_DRAFT_MTP (the model's own MTP
     * module or DSpark head). An unknown value is DI_ERR_INVALID_ARGUMENT;
     * DI_DRAFT_MTP for a model without either is DI_ERR_UNSUPPORTED
     * (docs/speculative.md). */
    int32_t draft;
    int32_t reserved_draft; /* must be 0 */
    /* A draft model for speculative decoding: a .gguf file or Hugging Face
     * folder of a smaller model sharing the model's tokenizer, loaded with
     * the engine's threads, context and batch size and a KV cache of its own
     * (room for 4 sequences of n_ctx tokens). It runs ahead of each decoding
     * request: greedy requests get its argmax (kept when it is the model's, so
     * the output is the greedy output), sampling requests a sample of its
     * distribution after their temperature, top-k, top-p and min-p, kept with
     * probability min(1, p/q) and corrected from the residual (speculative
     * sampling: the output is distributed as without speculation).
     * Copied. NULL (default): none. Set, it needs speculative_tokens > 0 and
     * draft DI_DRAFT_AUTO or DI_DRAFT_MODEL (or DI_DRAFT_MTP with an MTP
     * GGUF: below); its vocabulary must have the
     * model's size and, when both files carry a tokenizer, the same token
     * strings: otherwise DI_ERR_INVALID_ARGUMENT naming the first token that
     * differs. Its load errors are di_model_load's, the message prefixed with
     * "draft_model_path: ".
     * llama.cpp's MTP GGUF of a DeepSeek-V4 GGUF model (its
     * convert_hf_to_gguf.py --mtp output: the MTP layer alone) is no model of
     * its own: given here (with DI_DRAFT_AUTO, _MODEL or _MTP) it becomes the
     * model's MTP layer, which then drafts as DI_DRAFT_MTP does; one whose
     * config is not the model's is DI_ERR_MODEL_FORMAT naming the field, and
     * DI_DRAFT_MTP with a file that is not an MTP GGUF is
     * DI_ERR_INVALID_ARGUMENT (docs/deepseek-v4.md). llama.cpp's DSpark GGUF
     * of such a model (convert_hf_to_gguf.py --dspark: the DSpark head
     * alone) likewise becomes the model's DSpark head, which then drafts as
     * DI_DRAFT_MTP does; a model with an MTP layer already refuses it
     * (DI_ERR_UNSUPPORTED). */
    const char *draft_model_path;
    /* The KV cache's storage type, a di_kv_cache_type: DI_KV_CACHE_F16 (0,
     * default), _F32, _Q8_0 or _Q4_0, as di_model_options.kv_cache_type (the
     * same limits and errors). An explicit kv_cache_bytes holds 1.9x (Q8_0)
     * or 3.6x (Q4_0) the tokens of f16 (DeepSeek-V4: less, its compressors'
     * f32 rows spread over the context); the default budget (4 sequences of
     * n_ctx tokens) holds the same tokens in 0.53x or 0.28x the memory;
     * the prefix cache's tiers keep each type's blocks apart (another
     * type's files are skipped). A draft model's cache has the same type. */
    int32_t kv_cache_type;
    int32_t reserved_kv; /* must be 0 */
} di_engine_config;

/* Drafters of speculative decoding (di_engine_config.draft). Values are
 * never renumbered; new drafters are appended. */
typedef enum di_draft {
    /* A draft model when draft_model_path is set (or, an MTP or DSpark GGUF
     * there, the MTP layer or DSpark head it holds), else the model's MTP layer or DSpark head when
     * it has one (DI_DRAFT_MTP), else prompt lookup. */
    DI_DRAFT_AUTO = 0,
    /* Prompt lookup: the longest suffix (up to 16 tokens) of the request's
     * prompt and output that occurred before, and what followed it (of equal
     * ones, the most recent: llama.cpp's lookup decoding, vLLM's ngram
     * speculation; docs/speculative.md). */
    DI_DRAFT_PROMPT_LOOKUP = 1,
    /* A separate draft model sharing the tokenizer (draft_model_path), or, an
     * MTP or DSpark GGUF there, the layer or head it holds (as DI_DRAFT_MTP). */
    DI_DRAFT_MODEL = 2,
    /* The model's own multi-token prediction layer: DeepSeek-V3's NextN
     * module (DeepSeek-V3 §2.2) or DeepSeek-V4's MTP layer (as llama.cpp's
     * deepseek4 runs it; docs/deepseek-v4.md). It drafts from the model's
     * hidden states, one draft and then as many as speculative_tokens by
     * chaining its own output (as vLLM's and llama.cpp's MTP drafting).
     * Greedy requests get its argmax, sampling requests a sample of its
     * distribution (verified as a draft model's). For a DeepSeek-V4 model
     * with a DSpark head (DeepSeek-V4-Flash-DSpark: dspark_block_size in its
     * config), that head instead: a block of up to dspark_block_size drafts a
     * request in one pass from the model's features, greedy requests getting
     * its Markov chain's argmaxes, sampling requests samples of its rows (as
     * llama.cpp's draft-dspark; docs/deepseek-v4.md), and for a DeepSeek-V4.1
     * model with one, V4.1's (as DeepInfer's DFlash; docs/deepseek-v41.md).
     * DI_ERR_UNSUPPORTED at di_engine_create for a model without an MTP layer
     * or DSpark head (a DeepSeek-V3, V4 or V4.1 checkpoint with
     * num_nextn_predict_layers and its tensors, or a V4 GGUF given its MTP or
     * DSpark GGUF as draft_model_path). */
    DI_DRAFT_MTP = 3
} di_draft;

/* Initialise the first struct_size bytes of *cfg: struct_size, and every field
 * inside them to the default given with it (device DI_DEVICE_CPU; every other
 * field zero). Writes nothing past struct_size; NULL or a struct_size below
 * sizeof(size_t) writes nothing (see "Versioned input structs"). Thread-safe. */
DI_API void di_engine_config_init_size(di_engine_config *cfg, size_t struct_size);
/* Exported for the binaries compiled before di_engine_config_init_size: it
 * initialises this release's struct, a size frozen for good (see "Versioned
 * input structs"). The macro of the same name hides it from later hosts. */
DI_API void di_engine_config_init(di_engine_config *cfg);
/* Initialise *cfg as the caller compiled it: di_engine_config_init_size with
 * sizeof *cfg. */
#define di_engine_config_init(cfg) di_engine_config_init_size((cfg), sizeof *(cfg))

/* Load the model and start the engine's worker thread. On success *out owns
 * the engine; destroy it with di_engine_destroy.
 * Errors: DI_ERR_INVALID_ARGUMENT (NULL cfg/out/model_path, a bad field — the
 * message names it), DI_ERR_UNSUPPORTED (a device that is not built, an
 * encoding and tokenizer that do not fit), the errors of di_model_load and
 * di_tokenizer_load, DI_ERR_CANCELLED (the progress callback asked it),
 * DI_ERR_BACKEND (threads could not start). Thread-safe. */
DI_API di_status di_engine_create(const di_engine_config *cfg, di_engine **out, di_error **err);

/* Stop the engine and free it. Requests still running are cancelled; their
 * events, terminal ones included (status DI_ERR_CANCELLED, message "the engine
 * was destroyed"), are delivered by this call to their callbacks, on this
 * thread, before it returns — so every accepted request still gets exactly one
 * terminal event. Callbacks run here may call di_submit and di_cancel: they
 * fail with DI_ERR_INVALID_STATE. Returns DI_OK; DI_ERR_INVALID_STATE, freeing
 * nothing, when called from inside a callback of this engine or while another
 * thread is in di_poll on it (as sqlite3_close refuses with SQLITE_BUSY).
 * NULL is a no-op returning DI_OK. The handle must not be used after a DI_OK
 * return. Call it from one thread, once. */
DI_API di_status di_engine_destroy(di_engine *engine);

/* The engine's prompt encoding, DI_ENCODING_NONE when it has none (protocol
 * requests are then refused) and for NULL; di_encoding_name names it.
 * Thread-safe. */
DI_API di_encoding di_engine_prompt_encoding(const di_engine *engine);
/* di_engine_prompt_encoding as an int32_t: the older name, kept as an alias. */
DI_API int32_t di_engine_encoding(const di_engine *engine);
/* The name responses give as `model` (di_engine_config.served_model_name as
 * resolved), UTF-8, owned by the engine until di_engine_destroy; NULL for NULL.
 * Thread-safe. */
DI_API const char *di_engine_served_model_name(const di_engine *engine);
/* What the engine loaded, as one JSON object (UTF-8, *len bytes when len is
 * not NULL, owned by the engine until di_engine_destroy; NULL for NULL):
 *   name, served_model_name, architecture (the file's: GGUF
 *   general.architecture, config.json architectures[0]), family ("llama",
 *   "qwen2", "deepseek_v3", "deepseek_v2"), parameters (elements of every
 *   weight, block scales not counted), formats ({"Q4_1": {tensors,
 *   parameters, bytes}, …}: the storage types as stored), context_length (of
 *   a request), training_context_length, vocab_size, layers,
 *   embedding_length, heads, kv_heads, experts, experts_used (0 for dense
 *   models), kv_bytes_per_token, encoding (di_encoding_name, or null),
 *   chat_template (the GGUF's tokenizer.chat_template, or null),
 *   special_tokens {bos: {id, text} or null, eos: [{id, text}, …]} (every
 *   token that ends the output).
 * Members may be added; none is removed. Thread-safe. */
DI_API const char *di_engine_model_info(const di_engine *engine, size_t *len);
/* The engine's tokenizer (owned by the engine, valid until di_engine_destroy),
 * or NULL when it has none. Thread-safe to use as di_tokenizer is. */
DI_API const di_tokenizer *di_engine_tokenizer(const di_engine *engine);
/* The model's vocabulary size (the token ids a request may hold are below it);
 * 0 for NULL. Thread-safe. */
DI_API int32_t di_engine_vocab_size(const di_engine *engine);
/* The context length of a request (di_engine_config.n_ctx as resolved); 0 for
 * NULL. Thread-safe. */
DI_API int64_t di_engine_context_length(const di_engine *engine);

/* An event of a request, handed to its callback. Read it through the getters
 * below; it and every pointer read from it live until the callback returns. */
typedef struct di_event di_event;

/* Kinds of events. A request's events arrive in the order it produced them;
 * the last one is always DI_EVENT_DONE. New kinds may be appended: ignore the
 * ones you do not know. */
typedef enum di_event_kind {
    /* Tokens the request generated in one step (di_event_tokens), in order:
     * every output token, end-of-sequence and stop tokens included. */
    DI_EVENT_TOKENS = 1,
    /* An answer text delta (di_event_text): decoded output of a token request
     * (UTF-8 safe: a character split across tokens waits for its last byte),
     * or the content of a protocol request, as di_stream parses it. */
    DI_EVENT_TEXT = 2,
    /* A reasoning text delta (di_event_text): protocol requests in thinking
     * mode (reasoning_content). */
    DI_EVENT_REASONING = 3,
    /* A piece of a tool call's arguments JSON while it streams
     * (di_event_text; di_event_tool_call_index / _id / _name say which call). */
    DI_EVENT_TOOL_CALL_DELTA = 4,
    /* A complete tool call: id, name (di_event_tool_call_id / _name) and the
     * whole arguments JSON (di_event_text). */
    DI_EVENT_TOOL_CALL = 5,
    /* A protocol chunk ready to send: di_event_chunk_json (the chunk's data;
     * NULL for Chat's closing "[DONE]"), di_event_chunk_sse (the SSE message,
     * always set) and di_event_chunk_name (the SSE event name, NULL for Chat). */
    DI_EVENT_CHUNK = 6,
    /* The terminal event: di_event_status (DI_OK for a finished request),
     * di_event_message, di_event_finish_reason, the usage getters and, for a
     * protocol request that finished, di_event_response_json. */
    DI_EVENT_DONE = 7
} di_event_kind;

/* The callback of a request: called inside di_poll on the polling thread, once
 * per event, with the user_data given in di_request. It may call di_submit and
 * di_cancel (on any request); di_poll and di_engine_destroy from a callback fail
 * with DI_ERR_INVALID_STATE.
 * Unwinding: a C++ exception (or other unwinding) may leave the callback; it
 * propagates out of di_poll, and the engine stays usable — the event being
 * delivered counts as delivered, the events queued after it are delivered by
 * the next di_poll, and the poller slot is free again. Out of
 * di_engine_destroy, the engine is still freed (the events not yet delivered
 * are dropped). longjmp out of a callback is not supported (it runs no
 * cleanup: the engine is left unusable). The log and load-progress callbacks
 * must not throw (the log one runs on the engine's worker thread). */
typedef void (*di_event_fn)(void *user_data, const di_event *ev);

/* A request (a versioned input struct; di_request_init, the macro over
 * di_request_init_size, sets the defaults).
 * Either a protocol request — `protocol` set and `json` the body, rendered with
 * the engine's encoding (di_codec_render) and answered as di_stream answers it
 * — or a token request — `protocol` 0 and `tokens` the prompt's IDs, with the
 * output reported as tokens and (with a tokenizer) decoded text. di_submit
 * copies everything it needs: the pointers need only live through the call. */
typedef struct di_request {
    size_t struct_size;
    /* A di_protocol, or 0 (default) for a token request. */
    int32_t protocol;
    /* 1: stop at none of the end-of-sequence tokens (token requests only: a
     * protocol request with 1 is DI_ERR_INVALID_ARGUMENT; default 0). */
    int32_t ignore_eos;
    /* Protocol requests: the request body, json_len bytes of UTF-8 JSON
     * (a token request with json set is DI_ERR_INVALID_ARGUMENT). */
    const char *json;
    size_t json_len;
    /* Token requests: the prompt, n_tokens IDs below di_engine_vocab_size (a
     * protocol request with tokens set is DI_ERR_INVALID_ARGUMENT). */
    const int32_t *tokens;
    size_t n_tokens;
    /* Output tokens at most; 0 (default): a token request runs to the context
     * limit, a protocol request whose body sets none gets the reference's
     * default (di_prompt_max_tokens), lowered to the room left. More than the
     * context leaves after the prompt is DI_ERR_CONTEXT_LENGTH. */
    int64_t max_tokens;
    /* Sampling (lib/sampler/README.md has the order the processors run in).
     * Precedence, one rule for every encoding and protocol: what a protocol
     * request's body decides wins — its own field (max_tokens /
     * max_completion_tokens / max_output_tokens, temperature, top_p, Messages'
     * top_k, seed, presence_penalty, frequency_penalty, logit_bias, as the
     * codec reads them: di_prompt_temperature, di_prompt_top_p, …) or a rule
     * of its model that fixes a value (the V4 encodings' thinking mode forces
     * temperature 1.0, as deepseek-recipe does) — and these fields give what
     * the body leaves open. logit_bias entries merge, the body's winning for a
     * token both name. docs/api.md, "Sampling precedence". */
    float temperature;        /* [0, 100], default 1; 0: greedy (the most likely token), and
                               * below 1e-5 too (vLLM's _SAMPLING_EPS) */
    float top_p;              /* (0, 1], default 1 (off) */
    int32_t top_k;            /* >= 0, default 0 (off) */
    float min_p;              /* [0, 1], default 0 (off) */
    float repetition_penalty; /* (0, 100], default 1 (off); over prompt and output */
    float presence_penalty;   /* [-2, 2], default 0; over output tokens, as OpenAI's */
    float frequency_penalty;  /* [-2, 2], default 0; over output tokens, as OpenAI's */
    int32_t reserved;         /* must be 0 */
    /* The seed of the request's own random generator (xoshiro256**, seeded
     * through splitmix64); -1 (default): drawn from the clock. The same seed,
     * prompt and parameters give the same tokens whatever else the engine runs
     * and however often the request is pre-empted. */
    int64_t seed;
    /* logit_bias: n_logit_bias token ids and the bias added to each one's logit
     * (in [-100, 100], as OpenAI's logit_bias). */
    const int32_t *logit_bias_ids;
    const float *logit_bias_values;
    size_t n_logit_bias;
    /* More token ids that end the output (reported in DI_EVENT_TOKENS, finish
     * reason DI_FINISH_STOP; a protocol request's text does not include them),
     * besides the model's end of sequence. */
    const int32_t *stop_tokens;
    size_t n_stop_tokens;
    /* The callback (required) and its argument. */
    di_event_fn on_event;
    void *user_data;
    /* Constrained decoding (token requests; appended in 0.x: zero, the
     * default, is off). At most one of the three, each a NUL-terminated UTF-8
     * string that di_submit compiles (and copies) before it returns:
     *   grammar      a GBNF grammar, llama.cpp's format, start rule `root`;
     *   json_schema  a JSON Schema (the keywords docs/grammar.md lists): the
     *                output is one JSON text the schema accepts, with any
     *                whitespace between tokens (xgrammar's default);
     *   regex        a regular expression the whole output matches.
     * Every step the tokens that cannot continue a sentence of the grammar get
     * logit -infinity before logit_bias, penalties, temperature, top_k, top_p
     * and min_p, so sampling stays seeded and batch-invariant; the model's end
     * of sequence is allowed exactly when the output so far is complete, and
     * special tokens never. The constraint's state advances with each output
     * token and survives pre-emption and speculative decoding (the tokens are
     * the same). docs/grammar.md has the formats, the subset and the errors.
     * Errors (di_submit): DI_ERR_INVALID_ARGUMENT (more than one set, or one
     * set on a protocol request), DI_ERR_INVALID_REQUEST (it does not compile:
     * the message names the rule and line:column, the schema path and
     * keyword, or the regex offset), DI_ERR_UNSUPPORTED (an engine without a
     * tokenizer: the token strings are unknown). */
    const char *grammar;
    const char *json_schema;
    const char *regex;
    /* Log probabilities (token requests; appended in 0.x: zero, the default,
     * is off). logprobs 1: each output token's log probability comes with its
     * DI_EVENT_TOKENS event (di_event_logprobs), and top_logprobs, in
     * [0, 20], the most likely tokens at that position with theirs
     * (di_event_top_logprobs) — the fields and bound of OpenAI's Chat
     * Completions. The values are the log-softmax of the model's raw logits
     * (natural log), before logit_bias, penalties, temperature, the grammar
     * mask and top-k/top-p/min-p, as OpenAI and vLLM (its default
     * raw_logprobs mode) report them: they do not depend on the sampling
     * settings, and a token the sampler could only pick because of them
     * still gets the model's own probability. Errors (di_submit):
     * DI_ERR_INVALID_ARGUMENT for logprobs other than 0 or 1, top_logprobs
     * outside [0, 20] or set without logprobs, and either set on a protocol
     * request (whose body decides). */
    int32_t logprobs;
    int32_t top_logprobs;
    /* Stop strings (token requests; appended in 0.x: none by default):
     * n_stop_strings NUL-terminated UTF-8 strings (at most 16, each 1 to 256
     * bytes), matched on the decoded output text — across token boundaries,
     * as vLLM and llama.cpp match `stop` — so a string the tokenizer splits
     * over several tokens still ends the output. The one that completes first
     * (at the earliest byte of the text; of those ending there, the longest)
     * ends the request with DI_FINISH_STOP; the DI_EVENT_TEXT deltas stop just
     * before it (the string and what the last token wrote after it are not
     * text), while DI_EVENT_TOKENS still reports every generated token. Text
     * that may be the start of a stop string is held back until the next
     * tokens decide it, and released at the end when none completes. di_submit
     * copies them. Errors (di_submit): DI_ERR_INVALID_ARGUMENT (on a protocol
     * request — its body's `stop` — NULL array or entry, more than 16, an
     * empty one, one over 256 bytes or not UTF-8: the message names its index),
     * DI_ERR_UNSUPPORTED (an engine without a tokenizer: there is no text). */
    const char *const *stop_strings;
    size_t n_stop_strings;
} di_request;

/* Initialise the first struct_size bytes of *req: struct_size, and every field
 * inside them to the default given with it (temperature 1, top_p 1,
 * repetition_penalty 1, seed -1; every other field zero: a token request with
 * no limits, no callback). Writes nothing past struct_size; NULL or a
 * struct_size below sizeof(size_t) writes nothing (see "Versioned input
 * structs"). Thread-safe. */
DI_API void di_request_init_size(di_request *req, size_t struct_size);
/* Exported for the binaries compiled before di_request_init_size: it
 * initialises this release's struct, a size frozen for good (see "Versioned
 * input structs"). The macro of the same name hides it from later hosts. */
DI_API void di_request_init(di_request *req);
/* Initialise *req as the caller compiled it: di_request_init_size with
 * sizeof *req. */
#define di_request_init(req) di_request_init_size((req), sizeof *(req))

/* Submit a request. It is checked and its prompt rendered and tokenized on the
 * calling thread, so a bad request fails here, at once, with nothing queued;
 * an accepted one is queued for the worker and *id receives its id (> 0,
 * unique within the engine). Its events then arrive through di_poll.
 * Errors: DI_ERR_INVALID_ARGUMENT (NULL engine/req/id/on_event, a bad field or
 * a token id outside the vocabulary — the message names it), the errors of
 * di_codec_render (DI_ERR_INVALID_REQUEST naming the field, …),
 * DI_ERR_UNSUPPORTED (a protocol request to an engine without an encoding, or
 * whose encoding does not take the protocol: the message says which; or a body
 * field the engine cannot honour yet — more Chat choices (n) than it decodes
 * at once, stored responses, reasoning switches a chat template decides itself:
 * the message names the field, and
 * docs/api.md, "Request fields", lists every field),
 * DI_ERR_CONTEXT_LENGTH (the prompt leaves no room for an output token in the
 * context, does not fit the KV cache budget, or max_tokens asks for more than
 * the room left: the message gives the numbers), DI_ERR_INVALID_STATE (the
 * engine is being destroyed), DI_ERR_OUT_OF_MEMORY. Thread-safe; may be called
 * from a callback. */
DI_API di_status di_submit(di_engine *engine, const di_request *req, uint64_t *id, di_error **err);

/* Cancel request `id`. Its computation stops at the next step and its terminal
 * event reports DI_ERR_CANCELLED (events it produced before may still arrive
 * first). Cancelling a request already being cancelled is DI_OK and changes
 * nothing. Errors: DI_ERR_NOT_FOUND (no request ever had this id),
 * DI_ERR_INVALID_STATE (the request has already finished — its terminal event
 * is queued or delivered —, or the engine is being destroyed),
 * DI_ERR_INVALID_ARGUMENT (NULL engine). Thread-safe; may be called from a
 * callback. */
DI_API di_status di_cancel(di_engine *engine, uint64_t id, di_error **err);

/* Deliver queued events to their callbacks on the calling thread. Waits up to
 * timeout_ms milliseconds for the first event (0: do not wait; -1: wait until
 * one arrives, or return 0 at once when no request is pending), then delivers
 * every event queued at that moment, in order.
 * Returns the number of events delivered (0 on a timeout), or minus a
 * di_status: -DI_ERR_INVALID_ARGUMENT (NULL engine, timeout below -1),
 * -DI_ERR_INVALID_STATE (called from a callback, or while another thread is in
 * di_poll on this engine). */
DI_API int64_t di_poll(di_engine *engine, int32_t timeout_ms);

/* Requests accepted and not yet given their terminal event to a callback:
 * queued, running, or finished with events still to deliver. 0 for NULL.
 * Thread-safe. */
DI_API size_t di_engine_pending(di_engine *engine);
/* di_engine_pending on a const engine (the older name takes a non-const one
 * and stays as an alias). */
DI_API size_t di_engine_pending_count(const di_engine *engine);

/* A file descriptor for event loops (epoll, poll, select, asyncio's add_reader,
 * libuv): readable exactly while events are queued for di_poll, so a host can
 * sleep in its own loop and call di_poll(engine, 0) when it wakes — as libcurl's
 * multi interface and c-ares hand out their sockets. Level-triggered: it stays
 * readable until di_poll takes the queue (a wake-up always finds events), and
 * becomes readable again when new events arrive. Made on the first call (the
 * same descriptor after that); owned by the engine and closed by
 * di_engine_destroy: never read, write or close it yourself.
 *
 *     int fd = di_engine_event_fd(engine);
 *     struct epoll_event ev = {.events = EPOLLIN};
 *     epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
 *     while (di_engine_pending(engine) > 0)
 *         if (epoll_wait(ep, &ev, 1, -1) == 1) di_poll(engine, 0);
 *
 * Returns the descriptor (>= 0), or minus a di_status: -DI_ERR_INVALID_ARGUMENT
 * (NULL engine), -DI_ERR_INVALID_STATE (the engine is being destroyed),
 * -DI_ERR_OUT_OF_MEMORY (the process is out of descriptors), -DI_ERR_UNSUPPORTED
 * (not Linux: eventfd). Thread-safe. Source: eventfd(2). */
DI_API int di_engine_event_fd(di_engine *engine);

/* The KV cache's occupancy, as di_engine_kv_cache_stats reads it (a versioned
 * struct the library writes: the caller sets struct_size, with
 * di_kv_cache_stats_init — the macro over di_kv_cache_stats_init_size —, and
 * the library writes the fields that struct_size shows the caller's struct
 * contains, leaving the rest as they were; fields are only appended). The
 * cache is paged (vLLM's PagedAttention): block_tokens tokens a block, every
 * block in exactly one of three states —
 * blocks_used + blocks_cached + blocks_free == blocks_total. Counts are blocks
 * or tokens; the *_total counters only grow, from 0 at di_engine_create. */
typedef struct di_kv_cache_stats {
    size_t struct_size;
    /* Tokens one block holds (16). */
    int64_t block_tokens;
    /* Blocks of the cache in all (di_engine_config.kv_cache_bytes rounded
     * down to whole blocks). */
    int64_t blocks_total;
    /* Blocks held by at least one running request (a prefix block two
     * requests share counts once). */
    int64_t blocks_used;
    /* Blocks held by no request that keep a computed prompt prefix for later
     * requests (the prefix cache: reused when a prompt starts with them,
     * evicted — released longest ago first — when a request needs room); 0
     * with di_engine_config.disable_prefix_cache. */
    int64_t blocks_cached;
    /* Blocks neither used nor cached. */
    int64_t blocks_free;
    /* Tokens whose keys and values the running requests hold, counting the
     * tokens the step in progress is computing, summed over requests (a
     * shared prefix counts once for each request holding it, so it may
     * exceed blocks_used * block_tokens); each request holds
     * ceil(its tokens / block_tokens) blocks. */
    int64_t tokens_used;
    /* Running requests: those holding blocks (admitted, not yet ended or
     * pre-empted). Requests still waiting for room hold none. */
    int64_t running_requests;
    /* Tokens looked up in the prefix cache: every token of every request
     * admitted (its prompt, and a pre-empted request's output so far when it
     * is admitted again); 0 with the prefix cache off. Cumulative. */
    int64_t prefix_cache_queries_total;
    /* Of prefix_cache_queries_total, the tokens found computed (taken from the
     * prefix cache, not computed again: whole blocks; the usage's cached
     * tokens count a request's first admission only). Cumulative. As vLLM's
     * prefix_cache_queries / prefix_cache_hits count tokens. */
    int64_t prefix_cache_hits_total;
    /* Cached blocks whose room was taken by a request (evictions; the host
     * tier, when on, keeps their contents). Cumulative. */
    int64_t blocks_evicted_total;
    /* Prompt tokens the forward pass computed (prefill), in tokens: those taken
     * from the prefix cache are not computed, nor those the choices of a Chat
     * request with `n` > 1 share (its prompt is prefilled once; each further
     * choice computes only the tokens after the prompt's last full block of 16);
     * a pre-empted request's prompt computed again counts again. Cumulative.
     * (Appended in 0.1: a caller whose struct_size ends before it does not get
     * it.) */
    int64_t prefill_tokens_total;
} di_kv_cache_stats;

/* Initialise the first struct_size bytes of *stats: struct_size, and every
 * field inside them to 0. Writes nothing past struct_size, and
 * di_engine_kv_cache_stats then writes no further; NULL or a struct_size below
 * sizeof(size_t) writes nothing (see "Versioned input structs"). Thread-safe. */
DI_API void di_kv_cache_stats_init_size(di_kv_cache_stats *stats, size_t struct_size);
/* Exported for the binaries compiled before di_kv_cache_stats_init_size: it
 * initialises this release's struct, a size frozen for good (see "Versioned
 * input structs"). The macro of the same name hides it from later hosts. */
DI_API void di_kv_cache_stats_init(di_kv_cache_stats *stats);
/* Initialise *stats as the caller compiled it: di_kv_cache_stats_init_size
 * with sizeof *stats. */
#define di_kv_cache_stats_init(stats) di_kv_cache_stats_init_size((stats), sizeof *(stats))

/* Read the engine's KV cache occupancy into *stats (see di_kv_cache_stats),
 * e.g. for a /metrics endpoint. The counts are one consistent snapshot: the
 * engine's worker publishes them, under its lock, as it builds each step's
 * batch (before computing it), at the end of each step, and whenever a request
 * gives its blocks back — before that request's terminal event is queued, so
 * once a host has seen a request's DI_EVENT_DONE, the counts no longer include
 * its blocks (they may already include later work). Does not wait for the
 * worker: O(1), a lock held for a copy.
 * Thread-safe: callable from any thread, from a callback, and while other
 * threads submit, cancel and poll; not after di_engine_destroy has begun.
 * Errors: DI_ERR_INVALID_ARGUMENT (NULL engine or stats, a struct_size below
 * the struct's first release: the message says which); *stats is then
 * unchanged. */
DI_API di_status di_engine_kv_cache_stats(const di_engine *engine, di_kv_cache_stats *stats,
                                          di_error **err);

/* The event's kind; 0 for NULL. */
DI_API di_event_kind di_event_kind_of(const di_event *ev);
/* The kind's name ("tokens", "text", "reasoning", "tool_call_delta",
 * "tool_call", "chunk", "done"; a static string), NULL for unknown values.
 * di_event_kind and di_stream_event_kind are separate enums with different
 * values (DI_EVENT_REASONING is 3, DI_STREAM_REASONING 1): compare kinds
 * only within one, or by name. */
DI_API const char *di_event_kind_name(di_event_kind kind);
/* The id di_submit gave the request; 0 for NULL. */
DI_API uint64_t di_event_request_id(const di_event *ev);
/* TEXT, REASONING, TOOL_CALL_DELTA: the delta; TOOL_CALL: the whole arguments
 * JSON; CHUNK: the chunk's JSON; *len (when len is not NULL) gets its length.
 * NUL-terminated, owned by the event. "" for other kinds; NULL for NULL and for
 * Chat's "[DONE]" chunk. */
DI_API const char *di_event_text(const di_event *ev, size_t *len);
/* TEXT and REASONING: the text delta (as di_event_text); NULL for other kinds
 * and for NULL. The clear name for what di_event_text gives these kinds. */
DI_API const char *di_event_delta(const di_event *ev, size_t *len);
/* TOOL_CALL_DELTA: the piece of arguments JSON; TOOL_CALL: the whole arguments
 * JSON (as di_event_text); NULL for other kinds and for NULL. */
DI_API const char *di_event_tool_call_arguments(const di_event *ev, size_t *len);
/* TOKENS: the token ids (*n of them), owned by the event; NULL and 0 otherwise. */
DI_API const int32_t *di_event_tokens(const di_event *ev, size_t *n);
/* The log probability of each token of a DI_EVENT_TOKENS event, in the order
 * of di_event_tokens (*n gets their count when n is not NULL), for a token
 * request submitted with di_request.logprobs 1, or a protocol request whose
 * body asks for them (Chat logprobs; Responses top_logprobs > 0 or include
 * "message.output_text.logprobs": its chunks carry them too, as
 * di_stream_push_tokens_logprobs writes them): the log-softmax of the raw
 * logits the token was sampled from (di_request.logprobs says which values);
 * always <= 0, -infinity never (the model's logits are finite). NULL, and *n
 * 0, for other events and requests. The array lives until the callback
 * returns. Thread-safe as the event is. */
DI_API const float *di_event_logprobs(const di_event *ev, size_t *n);
/* The most likely tokens at the position of token i of a DI_EVENT_TOKENS
 * event (i below di_event_tokens' count) for a request with
 * di_request.top_logprobs k > 0: *ids and *logprobs (when not NULL) get k
 * token ids and their log probabilities, most likely first (a tie goes to
 * the lower id), as di_event_logprobs computes them; the sampled token is
 * among them only when it is that likely. Returns k, or 0 (the pointers set
 * to NULL) for other events and requests, and for i out of range. The arrays
 * live until the callback returns. Thread-safe as the event is. */
DI_API size_t di_event_top_logprobs(const di_event *ev, size_t i, const int32_t **ids,
                                    const float **logprobs);
/* TOOL_CALL and TOOL_CALL_DELTA: the call's 0-based index in the response, its
 * id and its function name (owned by the event); -1 / NULL otherwise. */
DI_API int32_t di_event_tool_call_index(const di_event *ev);
/* TOOL_CALL and TOOL_CALL_DELTA: the call id ("call_NN_…", as the protocol chunks
 * carry it), NUL-terminated, owned by the event (valid while the callback runs);
 * NULL for other kinds and for NULL. */
DI_API const char *di_event_tool_call_id(const di_event *ev);
/* TOOL_CALL and TOOL_CALL_DELTA: the function name the model wrote,
 * NUL-terminated, owned by the event (valid while the callback runs); NULL for
 * other kinds and for NULL. */
DI_API const char *di_event_tool_call_name(const di_event *ev);
/* CHUNK: the JSON (as di_event_text), the whole SSE message and the SSE event
 * name (NULL for Chat's unnamed events). NULL for other kinds. */
DI_API const char *di_event_chunk_json(const di_event *ev, size_t *len);
/* CHUNK: the whole SSE message to write ("event: NAME\n" when named, then
 * "data: JSON\n\n"; Chat's last is "data: [DONE]\n\n"), *len bytes when len is not
 * NULL, owned by the event (valid while the callback runs); NULL for other kinds. */
DI_API const char *di_event_chunk_sse(const di_event *ev, size_t *len);
/* CHUNK: the SSE event name (the JSON's `type` for Messages and Responses), owned
 * by the event; NULL for Chat's unnamed events and for other kinds. */
DI_API const char *di_event_chunk_name(const di_event *ev);
/* di_event_chunk_name under the name di_stream_chunk_event_name shares: the
 * SSE event name of a CHUNK event. */
DI_API const char *di_event_chunk_event_name(const di_event *ev);
/* DONE: DI_OK when the request ran to its end (end of sequence, a stop, its
 * token budget), DI_ERR_CANCELLED when cancelled (by di_cancel or the engine's
 * destruction), or the error that ended it (DI_ERR_CONTEXT_LENGTH when the KV
 * cache cannot hold it even alone, DI_ERR_BACKEND, …). DI_OK for other kinds. */
DI_API di_status di_event_status(const di_event *ev);
/* DONE: a message saying why the request ended, e.g. "cancelled by di_cancel";
 * "" when it finished normally and for other kinds. Owned by the event. Control
 * bytes and ill-formed UTF-8 in it are written \xNN, as in di_error_message. */
DI_API const char *di_event_message(const di_event *ev);
/* DONE: why generation stopped (DI_FINISH_STOP: end of sequence, a stop token
 * or stop sequence; DI_FINISH_LENGTH: max_tokens or the context limit); 0 when
 * the request did not finish (cancelled, failed) and for other kinds. */
DI_API di_finish di_event_finish_reason(const di_event *ev);
/* DONE: the protocol's finish reason ("stop", "length", "tool_calls",
 * "end_turn", …) for protocol requests; NULL otherwise. */
DI_API const char *di_event_finish_text(const di_event *ev);
/* DONE: tokens of the prompt the request prefilled (after rendering, for
 * protocol requests); 0 for other kinds. */
DI_API uint32_t di_event_prompt_tokens(const di_event *ev);
/* DONE: of di_event_prompt_tokens, those the prefix cache held when the
 * request was first admitted, so not computed again (a multiple of 16; see
 * di_engine_config.disable_prefix_cache); 0 for other kinds. */
DI_API uint32_t di_event_prompt_cache_hit_tokens(const di_event *ev);
/* DONE: draft tokens the request verified, in tokens, over its whole life
 * (di_engine_config.speculative_tokens; docs/speculative.md); 0 without
 * speculation, for other kinds and for NULL. Thread-safe (reads the event). */
DI_API uint32_t di_event_draft_tokens(const di_event *ev);
/* DONE: of di_event_draft_tokens, those kept because they equalled the token
 * the request sampled there (each one a decode step saved), in tokens; 0
 * without speculation, for other kinds and for NULL. */
DI_API uint32_t di_event_accepted_draft_tokens(const di_event *ev);
/* DONE: tokens the request generated (every sampled token, the end-of-sequence
 * token included); 0 for other kinds. */
DI_API uint32_t di_event_completion_tokens(const di_event *ev);
/* DONE: of the completion tokens, those inside the reasoning block (protocol
 * requests with a tokenizer); 0 otherwise. */
DI_API uint32_t di_event_reasoning_tokens(const di_event *ev);
/* DONE of a protocol request that finished: the complete response JSON (what a
 * non-streaming request returns, di_stream_response_json); NULL otherwise. */
DI_API const char *di_event_response_json(const di_event *ev, size_t *len);

/* The choice an event belongs to: a Chat Completions request with `n` > 1
 * produces n choices (the OpenAI API's `choices[i].index`), each with its own
 * TOKENS, TEXT, REASONING, TOOL_CALL_DELTA, TOOL_CALL and CHUNK events (its
 * chunks carry the same index), interleaved in the order they are generated;
 * the request's one DONE event, its last chunk (usage, `choices` []) and its
 * [DONE] give 0. 0 for every event of any other request, and for NULL.
 * Thread-safe (reads the event). */
DI_API uint32_t di_event_choice_index(const di_event *ev);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DEEPINFER_H */
