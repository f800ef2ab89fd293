/* The CUDA module's entry point (backend/module.h): checks, in order, that the
 * module and the core come from the same build, that the NVIDIA driver is
 * there and initialises (cuInit, through dlopen so the module links no
 * libcuda), that the runtime sees a device and that device 0 is Hopper or
 * newer; then makes the backend (backend_cuda.c). Each refusal is
 * DI_ERR_UNSUPPORTED naming what failed, with the driver's or runtime's error
 * string. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/backend_cuda.h"
#include "backend/cuda/device_check.h"

di_status cuda_errorf(const backend_module_host *host, di_error **err, di_status st,
                      const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return host->error_set(err, st, msg);
}

/* The driver API's entry points we need, by dlsym (CUresult is an int enum). */
typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_get_error_fn)(int result, const char **str);

/* What cuInit may answer on a host that cannot run CUDA, for drivers whose
 * cuGetErrorName fails too (the toolkit's stub library answers every call
 * with CUDA_ERROR_STUB_LIBRARY). Values and descriptions from cuda.h. */
static const struct {
    int code;
    const char *name, *desc;
} cu_errors[] = {
    {3, "CUDA_ERROR_NOT_INITIALIZED", "the driver is not initialized"},
    {34, "CUDA_ERROR_STUB_LIBRARY",
     "the CUDA driver is a stub library, not the real driver (the toolkit's stubs/libcuda.so)"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "the device is unavailable (exclusive or prohibited)"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "an OS call failed"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "the system is not ready (fabric manager?)"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "the kernel-mode driver and the user-mode libcuda differ in version"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     "forward compatibility is not supported on this device"},
};

/* The driver check runs once per process; its result is kept (a driver does
 * not appear while a process runs). */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_driver_msg[512]; /* empty: the driver initialised */

static void driver_check(void)
{
    const char *lib = getenv("DI_CUDA_DRIVER");
    if (!lib || !lib[0]) lib = "libcuda.so.1";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(g_driver_msg, sizeof g_driver_msg,
                 "cuda backend: no NVIDIA driver: cannot load %s (%s)", lib,
                 why ? why : "unknown dlopen error");
        return;
    }
    cu_init_fn cu_init;
    cu_get_error_fn cu_name, cu_string;
    void *s_init = dlsym(h, "cuInit"), *s_name = dlsym(h, "cuGetErrorName"),
         *s_string = dlsym(h, "cuGetErrorString");
    if (!s_init || !s_name || !s_string) {
        snprintf(g_driver_msg, sizeof g_driver_msg,
                 "cuda backend: %s lacks cuInit/cuGetErrorName/cuGetErrorString (not an NVIDIA "
                 "driver library)",
                 lib);
        return;
    }
    /* POSIX: dlsym's data pointers convert to function pointers. */
    memcpy(&cu_init, &s_init, sizeof cu_init);
    memcpy(&cu_name, &s_name, sizeof cu_name);
    memcpy(&cu_string, &s_string, sizeof cu_string);
    int r = cu_init(0);
    if (r != 0) {
        const char *name = NULL, *str = NULL;
        if (cu_name(r, &name) != 0) name = NULL;
        if (cu_string(r, &str) != 0) str = NULL;
        for (size_t i = 0; i < sizeof cu_errors / sizeof cu_errors[0] && !name; i++)
            if (cu_errors[i].code == r) {
                name = cu_errors[i].name;
                str = cu_errors[i].desc;
            }
        snprintf(g_driver_msg, sizeof g_driver_msg,
                 "cuda backend: cuInit failed: %s (%s), error %d", name ? name : "?",
                 str ? str : "no description", r);
    }
    /* h stays loaded: the runtime uses the same driver library */
}

__attribute__((visibility("default"))) di_status
di_backend_module_create(const backend_module_host *host, const backend_options *opt, backend **out,
                         di_error **err);

di_status di_backend_module_create(const backend_module_host *host, const backend_options *opt,
                                   backend **out, di_error **err)
{
    *out = NULL;
    if (host->abi != BACKEND_MODULE_ABI || host->ops_size != sizeof(backend_ops) ||
        host->options_size != sizeof(backend_options) ||
        host->model_tensor_size != sizeof(model_tensor))
        return cuda_errorf(host, err, DI_ERR_BACKEND,
                           "cuda backend: the module is from another build of deepinfer (module "
                           "ABI %u, ops %zu bytes; the library's: ABI %u, ops %u bytes)",
                           (unsigned)BACKEND_MODULE_ABI, sizeof(backend_ops), (unsigned)host->abi,
                           (unsigned)host->ops_size);
    pthread_once(&g_once, driver_check);
    if (g_driver_msg[0]) return host->error_set(err, DI_ERR_UNSUPPORTED, g_driver_msg);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return cuda_errorf(host, err, DI_ERR_UNSUPPORTED,
                           "cuda backend: cudaGetDeviceCount failed: %s (%s)", cudaGetErrorName(e),
                           cudaGetErrorString(e));
    struct cudaDeviceProp prop;
    int major = 0, minor = 0;
    const char *name = NULL;
    if (n > 0) {
        if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
            return cuda_errorf(host, err, DI_ERR_UNSUPPORTED,
                               "cuda backend: cudaGetDeviceProperties(0) failed: %s (%s)",
                               cudaGetErrorName(e), cudaGetErrorString(e));
        major = prop.major;
        minor = prop.minor;
        name = prop.name;
    }
    char msg[512];
    if (!cuda_device_usable(n, name, major, minor, msg, sizeof msg))
        return host->error_set(err, DI_ERR_UNSUPPORTED, msg);
    return backend_cuda_new(host, 0, opt, out, err);
}
