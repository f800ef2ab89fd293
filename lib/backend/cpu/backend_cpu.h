/* The CPU backend (backend_cpu.c): backend.h's table over the kernels of
 * backend/cpu/. */
#ifndef DI_BACKEND_CPU_BACKEND_CPU_H
#define DI_BACKEND_CPU_BACKEND_CPU_H

#include "backend/backend.h"

/* Errors: DI_ERR_INVALID_ARGUMENT (n_threads, max_rows or max_ctx below 1),
 * DI_ERR_OUT_OF_MEMORY, DI_ERR_BACKEND (threads). use_ref runs one thread. */
di_status backend_cpu_create(const backend_options *opt, backend **out, di_error **err);

#endif
