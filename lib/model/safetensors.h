/* A validating reader of safetensors files (Hugging Face's format: an 8-byte
 * little-endian header length N, N bytes of a JSON object, then the data
 * buffer), over a read-only memory map.
 *
 * The header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end)} with offsets relative to the data buffer; "__metadata__" (an
 * object of strings) is allowed and ignored. safetensors_open checks that the
 * header length lies inside the file, the JSON is well formed (no duplicate
 * names), every dtype is known, every extent lies inside the data buffer and
 * holds exactly shape × dtype-size bytes, and no two extents overlap — so the
 * tensors it hands out can be read without further checks.
 *
 * A safetensors_file is immutable after opening: reads are thread-safe. */
#ifndef DI_MODEL_SAFETENSORS_H
#define DI_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"
#include "util/hashmap.h"

typedef enum safetensors_dtype {
    SAFETENSORS_F32 = 0,
    SAFETENSORS_F16 = 1,
    SAFETENSORS_BF16 = 2,
    SAFETENSORS_F8_E4M3 = 3,
    SAFETENSORS_I64 = 4, /* integer tables (DeepSeek-V4's tid2eid) */
    SAFETENSORS_I32 = 5,
    SAFETENSORS_F8_E8M0 = 6, /* power-of-two block scales (DeepSeek-V4's ue8m0) */
    SAFETENSORS_I8 = 7,      /* DeepSeek-V4's MXFP4 experts: two e2m1 codes a byte */
} safetensors_dtype;

enum { SAFETENSORS_MAX_DIMS = 4 };

typedef struct safetensors_tensor {
    char *name; /* NUL-terminated, owned by the safetensors_file */
    safetensors_dtype dtype;
    uint32_t n_dims;                      /* 0 for a scalar */
    uint64_t shape[SAFETENSORS_MAX_DIMS]; /* as written: shape[0] is the slowest dimension */
    uint64_t begin, end;                  /* bytes, relative to the data buffer */
    const uint8_t *data;                  /* in the map: the data buffer + begin */
} safetensors_tensor;

typedef struct safetensors_file {
    const uint8_t *map; /* the whole file */
    size_t size;        /* bytes */
    uint64_t header_len;
    size_t n_tensors;
    safetensors_tensor *tensors; /* sorted by begin */
    int mapped;                  /* 1 when safetensors_close unmaps `map` */
    di_bytes_map by_name;        /* name -> index in tensors */
} safetensors_file;

/* Open and validate `path`. Returns DI_ERR_IO (cannot open or map),
 * DI_ERR_MODEL_FORMAT (corrupt: the message names the field or tensor and the
 * byte offset), DI_ERR_UNSUPPORTED (a valid dtype other than F32, F16, BF16 and
 * F8_E4M3, or more than 4 dimensions: the message names the tensor) or
 * DI_ERR_OUT_OF_MEMORY, with a message in msg[0, msg_size) that starts with
 * the path. */
di_status safetensors_open(const char *path, safetensors_file **out, char *msg, size_t msg_size);
/* As safetensors_open over `size` bytes the caller keeps alive until
 * safetensors_close; messages start with `name`. */
di_status safetensors_open_memory(const void *data, size_t size, const char *name,
                                  safetensors_file **out, char *msg, size_t msg_size);
void safetensors_close(safetensors_file *f);

/* The tensor named `name`, or NULL. */
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

/* Bytes per element of a dtype. */
size_t safetensors_dtype_size(safetensors_dtype dt);

#endif
