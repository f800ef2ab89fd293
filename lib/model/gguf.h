/* A validating reader of GGUF files (ggml's docs/gguf.md, versions 2 and 3):
 * header, metadata key/values and tensor infos, over a read-only memory map.
 *
 * GGUF files are untrusted input. gguf_open checks every length, type, count and
 * offset before anything else reads the file, so the accessors below can walk
 * the mapped bytes without further checks. With GGUF_OPEN_METADATA_ONLY the
 * tensor infos are still parsed and checked for shape and type, but their data
 * extents are not required to lie inside the file — what a tokenizer needs from
 * a model file that is truncated or split (the metadata lives at its start).
 *
 * A gguf_file is immutable after gguf_open: reads are thread-safe. */
#ifndef DI_MODEL_GGUF_H
#define DI_MODEL_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
} gguf_type;

typedef struct gguf_kv {
    const char *key; /* points into the map; NOT NUL-terminated: use key_len */
    size_t key_len;
    gguf_type type;
    gguf_type elem_type;  /* for arrays */
    uint64_t count;       /* elements for arrays, 1 otherwise */
    const uint8_t *value; /* the value (arrays: the first element) in the map */
} gguf_kv;

typedef struct gguf_tensor_info {
    const char *name;
    size_t name_len;
    uint32_t n_dims;
    uint64_t dims[4]; /* ne[0] is the fastest-varying dimension, as ggml orders them */
    uint32_t type;    /* ggml_type */
    uint64_t offset;  /* bytes, relative to the data section */
    uint64_t n_bytes; /* size of the data, from the type's block layout */
} gguf_tensor_info;

typedef struct gguf_file {
    const uint8_t *data; /* the whole file, mapped read-only */
    size_t size;         /* bytes */
    uint32_t version;
    uint32_t alignment; /* general.alignment, default 32 */
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor_info *tensors;
    uint64_t data_offset; /* start of the tensor data section */
    int mapped;           /* 1 when gguf_open mapped `data` and gguf_close unmaps it */
} gguf_file;

enum { GGUF_OPEN_METADATA_ONLY = 1 };

/* Open and validate `path`. On failure returns DI_ERR_IO (cannot open or map),
 * DI_ERR_MODEL_FORMAT (corrupt or truncated: the message names the field and
 * byte offset) or DI_ERR_OUT_OF_MEMORY, and writes a message to msg[0, msg_size). */
di_status gguf_open(const char *path, unsigned flags, gguf_file **out, char *msg, size_t msg_size);
/* As gguf_open, over `size` bytes at `data` that the caller keeps alive and
 * unchanged until gguf_close (which then does not unmap them). */
di_status gguf_open_memory(const void *data, size_t size, unsigned flags, gguf_file **out,
                           char *msg, size_t msg_size);
void gguf_close(gguf_file *f);

/* The key/value named `key`, or NULL. */
const gguf_kv *gguf_find(const gguf_file *f, const char *key);

/* Scalar readers: return 1 and set *out when kv exists with a compatible type. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_bool(const gguf_file *f, const char *key, int *out);
/* A float value (FLOAT32 or FLOAT64, converted): return 1 and set *out when kv
 * exists with one of those types. */
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
/* A string value: pointer into the map (not NUL-terminated) and its length. */
int gguf_get_string(const gguf_file *f, const char *key, const char **s, size_t *len);

/* Iterate a validated string array: *pos starts at kv->value; each call yields
 * one string and advances *pos. */
void gguf_next_string(const uint8_t **pos, const char **s, size_t *len);

/* The name of ggml tensor type `type` ("Q4_K", "F16", …), or NULL when this
 * reader does not know it. */
const char *gguf_tensor_type_name(uint32_t type);

/* Bytes of one element of a scalar type; 0 for STRING/ARRAY or unknown. */
size_t gguf_type_size(gguf_type t);

#endif
