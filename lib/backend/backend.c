/* backend_create: the device a model runs on (backend.h): the CPU backend built
 * into the library, or the CUDA backend's module (backend/module.h). */
#include "backend/backend.h"

#include "backend/cpu/backend_cpu.h"
#include "backend/module.h"
#include "util/error.h"

di_status backend_create(const backend_options *opt, backend **out, di_error **err)
{
    if (opt->device == 0 || opt->device == DI_DEVICE_CPU) return backend_cpu_create(opt, out, err);
    if (opt->device == DI_DEVICE_CUDA) return backend_cuda_create(opt, out, err);
    return di_error_setf(err, DI_ERR_INVALID_ARGUMENT, "device: unknown device %d", opt->device);
}
