/* Device backends built as their own shared modules (libdeepinfer-cuda.so), so
 * that libdeepinfer itself links no device runtime and loads on any host: the
 * core dlopen()s a module the first time a model asks for its device
 * (backend_create), as llama.cpp loads its ggml backends. A module exports one
 * symbol, DI_BACKEND_MODULE_ENTRY, of type backend_module_create_fn; everything
 * else of it is hidden, and it reaches back into the core only through the
 * backend_module_host table below (it never links libdeepinfer).
 *
 * The module and the core are built from the same tree: abi and the struct
 * sizes must match exactly (a module from another build is refused with both
 * numbers in the message). */
#ifndef DI_BACKEND_MODULE_H
#define DI_BACKEND_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* Bumped whenever backend_ops, backend_options, backend_module_host or the
 * types of backend/types.h change. */
enum { BACKEND_MODULE_ABI = 1 };

#define DI_BACKEND_MODULE_ENTRY "di_backend_module_create"

/* What the core lends a module: di_error construction (the module's messages
 * become ordinary di_errors the host frees with di_error_free). */
typedef struct backend_module_host {
    uint32_t abi;               /* BACKEND_MODULE_ABI */
    uint32_t ops_size;          /* sizeof(backend_ops) */
    uint32_t options_size;      /* sizeof(backend_options) */
    uint32_t model_tensor_size; /* sizeof(model_tensor) */
    /* di_error_set (util/error.h): sets *err (when err is not NULL), returns status. */
    di_status (*error_set)(di_error **err, di_status status, const char *message);
} backend_module_host;

/* The module's entry point: a backend for opt (backend_create's contract) or
 * an error naming why this host cannot run one (DI_ERR_UNSUPPORTED: no driver,
 * no device, a device too old; DI_ERR_BACKEND: a module from another build).
 * host outlives every backend the module makes. Called on the thread creating
 * a model; the module serialises its own one-time initialisation. */
typedef di_status (*backend_module_create_fn)(const backend_module_host *host,
                                              const backend_options *opt, backend **out,
                                              di_error **err);

/* The module for DI_DEVICE_CUDA: the path named by the environment variable
 * DI_CUDA_MODULE when it is set and not empty, else libdeepinfer-cuda.so in
 * the directory of the file holding libdeepinfer's code (the shared library,
 * or the executable a static libdeepinfer is linked into). Writes the path
 * (NUL-terminated, truncated to cap) to path. */
void backend_cuda_module_path(char *path, size_t cap);

/* backend_create for DI_DEVICE_CUDA: loads the module (once per process; it is
 * never unloaded) and calls its entry. Errors: DI_ERR_UNSUPPORTED "cuda
 * backend: module not found at PATH" (or dlopen's own message when the file
 * exists but cannot be loaded, e.g. a missing libcublasLt.so.13; strerror
 * when it cannot be reached, e.g. a symlink loop; "DI_CUDA_MODULE is N bytes"
 * for a path too long to open whole), and the
 * module's own errors. Thread-safe. */
di_status backend_cuda_create(const backend_options *opt, backend **out, di_error **err);

#endif
