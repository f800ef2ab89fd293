/* backend_create: the device a model runs on (backend.h). Only the CPU exists
 * today; the CUDA backend joins here. */
#include "backend/backend.h"

#include "backend/cpu/backend_cpu.h"

di_status backend_create(const backend_options *opt, backend **out, di_error **err)
{
    return backend_cpu_create(opt, out, err);
}
