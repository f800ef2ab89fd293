/* Loading a device backend's shared module (backend/module.h). */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/module.h"
#include "util/error.h"

#define CUDA_MODULE_NAME "libdeepinfer-cuda.so"

/* An object of this library, whose address dladdr maps to the file holding it. */
static const char g_anchor = 0;

void backend_cuda_module_path(char *path, size_t cap)
{
    const char *env = getenv("DI_CUDA_MODULE");
    if (env && env[0]) {
        snprintf(path, cap, "%s", env);
        return;
    }
    Dl_info info;
    const char *self = NULL;
    if (dladdr(&g_anchor, &info) && info.dli_fname) self = info.dli_fname;
    const char *slash = self ? strrchr(self, '/') : NULL;
    if (slash)
        snprintf(path, cap, "%.*s/%s", (int)(slash - self), self, CUDA_MODULE_NAME);
    else
        snprintf(path, cap, "%s", CUDA_MODULE_NAME); /* the loader's search path */
}

/* The module, loaded once per process and kept: backends it made may outlive
 * any one engine, and unloading a library holding CUDA's runtime is unsafe. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static backend_module_create_fn g_create;

static const backend_module_host g_host = {
    BACKEND_MODULE_ABI,   sizeof(backend_ops), sizeof(backend_options),
    sizeof(model_tensor), di_error_set,
};

static di_status load_module(backend_module_create_fn *out, di_error **err)
{
    char path[4096];
    const char *env = getenv("DI_CUDA_MODULE");
    if (env && strlen(env) >= sizeof path) /* cut, it would name another file */
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "cuda backend: DI_CUDA_MODULE is %zu bytes, longer than a path "
                             "(at most %zu)",
                             strlen(env), sizeof path - 1);
    backend_cuda_module_path(path, sizeof path);
    struct stat sb;
    if (strchr(path, '/') && stat(path, &sb) != 0 && errno != ENOENT)
        return di_error_setf(err, DI_ERR_UNSUPPORTED, "cuda backend: cannot load module %s: %s",
                             path, strerror(errno)); /* a symlink loop, a file in no folder */
    if (strchr(path, '/') && stat(path, &sb) != 0)
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "cuda backend: module not found at %s (build with -DDI_CUDA=ON, "
                             "or set DI_CUDA_MODULE to its path)",
                             path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return di_error_setf(err, DI_ERR_UNSUPPORTED, "cuda backend: cannot load module %s: %s",
                             path, why ? why : "unknown dlopen error");
    }
    void *sym = dlsym(h, DI_BACKEND_MODULE_ENTRY);
    if (!sym) {
        dlclose(h);
        return di_error_setf(err, DI_ERR_UNSUPPORTED,
                             "cuda backend: %s has no entry point %s (not a deepinfer module)",
                             path, DI_BACKEND_MODULE_ENTRY);
    }
    /* POSIX: a data pointer from dlsym converts to a function pointer. */
    memcpy(out, &sym, sizeof *out);
    return DI_OK;
}

di_status backend_cuda_create(const backend_options *opt, backend **out, di_error **err)
{
    pthread_mutex_lock(&g_mu);
    di_status st = DI_OK;
    if (!g_create) st = load_module(&g_create, err);
    backend_module_create_fn create = g_create;
    pthread_mutex_unlock(&g_mu);
    if (st != DI_OK) return st;
    return create(&g_host, opt, out, err);
}
