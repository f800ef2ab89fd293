/* The tokenizer's internal model: a byte-level BPE vocabulary with its merges,
 * added tokens, a normalizer and a pre-tokenizer pipeline, loaded from a Hugging
 * Face tokenizer.json (tokenizer_json.c) or GGUF metadata (tokenizer_gguf.c).
 *
 * Behaviour follows Hugging Face `tokenizers` (the Rust crate behind
 * PreTrainedTokenizerFast): AddedVocabulary splitting, the Split / ByteLevel
 * pre-tokenizers, BPE merge order (lowest rank first, leftmost on ties), and the
 * ByteLevel decoder. A loaded tokenizer is immutable: encode and decode are
 * thread-safe on a shared tokenizer. */
#ifndef DI_TOKENIZER_TOKENIZER_H
#define DI_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"
#include "util/hashmap.h"

/* Normalizers that byte-level tokenizers use (the Unicode forms come from utf8proc). */
typedef enum tok_normalizer {
    TOK_NORM_NONE = 0,
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
} tok_normalizer;

/* SplitDelimiterBehavior of the HF Split pre-tokenizer. */
typedef enum tok_split_behavior {
    TOK_SPLIT_REMOVED = 0,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef struct tok_regex tok_regex; /* a compiled Oniguruma pattern (pretokenize.c) */

/* One step of the pre-tokenizer pipeline; each step splits every piece the
 * previous steps produced, as HF's pre_tokenizers.Sequence does. */
typedef struct tok_split_step {
    tok_regex *regex; /* the pattern (a literal String pattern is compiled escaped) */
    tok_split_behavior behavior;
    int invert;
} tok_split_step;

typedef struct tok_added_token {
    uint8_t *content; /* UTF-8, as written in the file */
    size_t len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added_token;

/* The fast pre-tokenizers: hand-written matchers for pipelines whose patterns are
 * recognised at load time, tested against the general (Oniguruma) path. */
typedef enum tok_fast_path {
    TOK_FAST_NONE = 0,
    TOK_FAST_DEEPSEEK_V3, /* DeepSeek V3/V4: digits{1,3} | CJK | the main pattern */
    TOK_FAST_QWEN2,       /* Qwen2 / DeepSeek-R1-Distill-Qwen */
} tok_fast_path;

/* A byte trie over the added tokens of one matching pass: edges keyed by
 * (node << 8 | byte); terminal[node] is the index into `added` of the token
 * ending there, or -1. Node 0 is the root. */
typedef struct tok_trie {
    di_u64_map edges;
    int32_t *terminal;
    size_t n_nodes;
    uint8_t first_byte[256]; /* 1 when some token of the pass starts with that byte */
} tok_trie;

typedef struct di_tokenizer di_tokenizer_impl;

struct di_tokenizer {
    /* Every token's bytes (byte-level tokens decoded to raw bytes; added tokens
     * as their UTF-8 content). [n_vocab] offsets into pool. */
    uint8_t *pool;
    size_t pool_len;
    uint32_t *tok_off, *tok_len;
    uint8_t *tok_flags; /* TOK_FLAG_* per id */
    int32_t n_vocab;    /* one past the largest id */

    di_bytes_map vocab;      /* raw token bytes -> id, the BPE model's vocabulary */
    di_u64_map merges;       /* (left id << 32 | right id) -> (rank << 32 | merged id) */
    int32_t byte_token[256]; /* id of each single byte, -1 when the vocab lacks it */
    int ignore_merges;       /* BPE.ignore_merges: a word in the vocab is one token */

    tok_added_token *added; /* in file order */
    size_t n_added;
    tok_trie added_trie[2]; /* [0]: normalized=false tokens, [1]: normalized=true */

    tok_normalizer normalizer;
    tok_split_step *steps;
    size_t n_steps;
    int byte_level_split;    /* ByteLevel use_regex: the GPT-2 split, the last step */
    int byte_level_seen;     /* the ByteLevel pre-tokenizer was loaded (must be last) */
    int byte_level_prefix;   /* ByteLevel add_prefix_space */
    tok_fast_path fast_path; /* chosen at load; TOK_FAST_NONE uses the steps */
    int decoder_byte_level;  /* 1: ByteLevel decoder (tokens are byte-level) */

    int32_t *prefix_ids, *suffix_ids; /* post-processor (BOS/EOS) for add_special_tokens */
    size_t n_prefix, n_suffix;
    int32_t bos_id, eos_id; /* -1 when unknown */
};

/* TOK_FLAG_WHOLE: a vocabulary token whose own bytes BPE-merge back into exactly
 * this token, so a pre-token spelled like it needs no merging (set at load). */
enum { TOK_FLAG_ADDED = 1, TOK_FLAG_SPECIAL = 2, TOK_FLAG_WHOLE = 4 };

/* Buffers of token IDs grow through this helper; -1 when out of memory. */
typedef struct tok_ids {
    int32_t *ids;
    size_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *v, int32_t id);

/* Error reporting inside the tokenizer: a status and a formatted message. */
typedef struct tok_error {
    di_status status;
    char message[512];
} tok_error;
di_status tok_fail(tok_error *err, di_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* --- loading (tokenizer_json.c, tokenizer_gguf.c, tokenizer.c) --- */
di_status tok_load_json(di_tokenizer_impl **out, const char *path, tok_error *err);
di_status tok_load_json_text(di_tokenizer_impl **out, const char *text, size_t len, tok_error *err);
di_status tok_load_gguf(di_tokenizer_impl **out, const char *path, tok_error *err);
void tok_free(di_tokenizer_impl *tok);

/* Shared by both loaders: allocate an empty tokenizer with room for n_vocab ids;
 * set a token's bytes; add merges; finish (derive byte tokens, sort added tokens,
 * pick the fast path). */
di_tokenizer_impl *tok_alloc(int32_t n_vocab);
int tok_set_token(di_tokenizer_impl *tok, int32_t id, const uint8_t *bytes, size_t len,
                  unsigned flags);
di_status tok_add_merge(di_tokenizer_impl *tok, uint32_t rank, const uint8_t *left, size_t left_len,
                        const uint8_t *right, size_t right_len, tok_error *err);
di_status tok_finish(di_tokenizer_impl *tok, tok_error *err);

/* Encode text (flags are DI_TOKENIZE_*), appending IDs to out. */
di_status tok_encode(const di_tokenizer_impl *tok, const uint8_t *text, size_t len, unsigned flags,
                     tok_ids *out, tok_error *err);
/* The bytes a token decodes to (byte-level tokens as raw bytes). */
di_status tok_token_bytes(const di_tokenizer_impl *tok, int32_t id, const uint8_t **bytes,
                          size_t *len, tok_error *err);

/* Rust's char::is_whitespace (the White_Space property), as HF's Strip and
 * whitespace splits test a code point (tokenizer.c). */
int tok_is_white_space(int32_t cp);

/* DeepSeek-V4.1 Engram's compressed vocabulary (compressed_vocab.c), as DeepInfer
 * 0.1.0's CompressedVocabulary builds it from tokenizer.json
 * (model_executor/models/v4_modules/engram_metadata.py): each token is decoded
 * alone (special tokens kept, ill-formed UTF-8 as U+FFFD) and keyed by its text
 * through HF's normalizers NFKC, NFD, StripAccents, Lowercase, runs of
 * [ \t\r\n] replaced by one space, Strip (a lone space kept) — the text itself
 * when that leaves nothing, the token's vocabulary spelling when the text holds
 * U+FFFD; tokens with one key share a compressed ID, numbered by first
 * appearance. As DeepInfer, the IDs mapped are [0, the count of the tokens)
 * (the largest ID + 1 only without holes). *old2new: [*n_ids] compressed IDs
 * (malloc'd, the caller frees it); *n_keys: how many there are.
 * Unicode: utf8proc's tables (Debian 12: Unicode 15) where HF tokenizers uses
 * Rust's (lowercase, Unicode 16) and an older NFKC: about 190 code points past
 * Unicode 9 are keyed differently (none is in DeepSeek-V3's or V4's tokenizer).
 * Errors: DI_ERR_MODEL_FORMAT when <｜▁pad▁｜> is not token 2 (DeepInfer
 * asserts it), DI_ERR_OUT_OF_MEMORY, DI_ERR_INTERNAL when utf8proc refuses a
 * token's text (named). Thread-safe. */
di_status tok_compressed_vocab(const di_tokenizer_impl *tok, int32_t **old2new, int32_t *n_ids,
                               int32_t *n_keys, tok_error *err);

/* --- byte-level alphabet (byte_level.c) --- */
/* Decode a byte-level token string (GPT-2's bytes_to_unicode alphabet) into raw
 * bytes. Returns the byte count, or -1 when a character is outside the alphabet
 * (then the token is kept as its UTF-8 text, as HF's ByteLevel decoder does). */
long tok_byte_level_decode(const uint8_t *s, size_t len, uint8_t *out);
/* Encode raw bytes into the byte-level alphabet (UTF-8, up to 2 bytes per byte). */
size_t tok_byte_level_encode(const uint8_t *s, size_t len, uint8_t *out);

/* --- pre-tokenization (pretokenize.c, pretokenize_fast.c) --- */
typedef struct tok_span {
    uint32_t start, len;
} tok_span;
typedef struct tok_spans {
    tok_span *v;
    size_t n, cap;
} tok_spans;
int tok_spans_push(tok_spans *s, uint32_t start, uint32_t len);

/* The GPT-2 pattern the ByteLevel pre-tokenizer splits with when use_regex is set. */
extern const char tok_gpt2_pattern[];

tok_regex *tok_regex_compile(const char *pattern, size_t len, int literal, tok_error *err);
void tok_regex_free(tok_regex *re);
/* Split text[0, len) into pieces with the general pipeline (steps + ByteLevel
 * split). Appends spans (offsets into text) to out. Returns 0, -1 (out of memory)
 * or -2 (the regex engine gave up on this text: its backtracking limit). */
int tok_pretokenize_general(const di_tokenizer_impl *tok, const uint8_t *text, size_t len,
                            tok_spans *out);
int tok_pretokenize_fast(tok_fast_path path, const uint8_t *text, size_t len, tok_spans *out);
/* Recognise a known pipeline from its patterns. */
tok_fast_path tok_detect_fast_path(const char *const *patterns, size_t n_patterns,
                                   int byte_level_split);

/* --- BPE (bpe.c) --- */
typedef struct tok_bpe_scratch tok_bpe_scratch;
tok_bpe_scratch *tok_bpe_scratch_new(void);
void tok_bpe_scratch_free(tok_bpe_scratch *s);
/* Append the BPE tokens of one pre-token (raw bytes) to out. -1 on OOM. */
int tok_bpe_word(const di_tokenizer_impl *tok, tok_bpe_scratch *s, const uint8_t *word, size_t len,
                 tok_ids *out);
/* As tok_bpe_word; force_heap runs the heap merge whatever the word's length (tests
 * compare the two implementations). */
int tok_bpe_word_with(const di_tokenizer_impl *tok, tok_bpe_scratch *s, const uint8_t *word,
                      size_t len, tok_ids *out, int force_heap);

#endif
