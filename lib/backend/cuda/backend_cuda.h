/* The CUDA backend's host side (backend_cuda.c): backend.h's table over the
 * kernels of kernels/ (kernels/kernels.h), inside the module
 * libdeepinfer-cuda.so (module.c is its entry point). */
#ifndef DI_BACKEND_CUDA_BACKEND_CUDA_H
#define DI_BACKEND_CUDA_BACKEND_CUDA_H

#include "backend/backend.h"
#include "backend/module.h"

/* A backend on CUDA device `device` (already checked usable by module.c).
 * Errors: DI_ERR_INVALID_ARGUMENT (max_rows or max_ctx below 1),
 * DI_ERR_BACKEND (a CUDA call failing: its error string in the message),
 * DI_ERR_OUT_OF_MEMORY. */
di_status backend_cuda_new(const backend_module_host *host, int device, const backend_options *opt,
                           backend **out, di_error **err);

/* host->error_set with a printf-style message. */
di_status cuda_errorf(const backend_module_host *host, di_error **err, di_status st,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
