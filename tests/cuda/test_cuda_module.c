/* The CUDA module seam on any host (GPU or not): how DI_DEVICE_CUDA fails and
 * what each failure says (backend/module.h, lib/backend/cuda/module.c).
 *   test_cuda_module SCENARIO
 * Each scenario runs in its own process (ctest entry): the module and the
 * driver check are loaded once per process.
 *   module_missing     DI_CUDA_MODULE names no file: "module not found at PATH"
 *   module_not_library DI_CUDA_MODULE names a text file (argv[2]): dlopen's message
 *   module_no_entry    DI_CUDA_MODULE names libdeepinfer.so (no entry point)
 *   driver_missing     the real module, DI_CUDA_DRIVER naming no file
 *   driver_stub        the real module, DI_CUDA_DRIVER naming the CUDA
 *                      toolkit's stub libcuda.so, whose cuInit returns
 *                      CUDA_ERROR_STUB_LIBRARY (34) by design
 *   device_rules       cuda_device_usable's refusals (no device, below 9.0)
 *   this_host          the real module and driver: DI_OK where a Hopper GPU
 *                      is, else DI_ERR_UNSUPPORTED starting "cuda backend: "
 *   refuses MODULE MODEL OP
 *                      on a GPU: MODEL (a DeepSeek fixture) is refused at load
 *                      with "cuda backend: OP not implemented yet"; exits 77
 *                      where this host cannot run the module at all
 *   default_path PATH built|absent
 *                      no DI_CUDA_MODULE: the module is looked for at PATH
 *                      (next to libdeepinfer.so); absent: "module not found at
 *                      PATH"; built: found (no module error) */
#include <deepinfer/deepinfer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/device_check.h"

static int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL: %s\n", what);
        failures++;
    }
}

/* di_engine_create on model (NULL: the tiny Llama fixture) with
 * DI_DEVICE_CUDA; its status, and its message copied to msg. */
static di_status create_cuda_model(const char *model, char *msg, size_t cap)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = model ? model : DI_FIXTURE_DIR "/model/llama-gqa-f16";
    cfg.device = DI_DEVICE_CUDA;
    cfg.n_threads = 1;
    di_engine *e = NULL;
    di_error *err = NULL;
    di_status st = di_engine_create(&cfg, &e, &err);
    snprintf(msg, cap, "%s", err ? di_error_message(err) : "");
    printf("status %d: %s\n", (int)st, msg);
    di_error_free(err);
    di_engine_destroy(e);
    return st;
}

static di_status create_cuda(char *msg, size_t cap)
{
    return create_cuda_model(NULL, msg, cap);
}

static void expect(const char *want_prefix)
{
    char msg[2048];
    check(create_cuda(msg, sizeof msg) == DI_ERR_UNSUPPORTED, "DI_ERR_UNSUPPORTED");
    if (strncmp(msg, want_prefix, strlen(want_prefix)) != 0) {
        fprintf(stderr, "FAIL: message \"%s\"\n  expected to start \"%s\"\n", msg, want_prefix);
        failures++;
    }
}

int main(int argc, char **argv)
{
    const char *s = argc > 1 ? argv[1] : "";
    char want[4096], msg[512];
    if (strcmp(s, "module_missing") == 0) {
        setenv("DI_CUDA_MODULE", "/nonexistent/libdeepinfer-cuda.so", 1);
        expect("cuda backend: module not found at /nonexistent/libdeepinfer-cuda.so (build with "
               "-DDI_CUDA=ON, or set DI_CUDA_MODULE to its path)");
    } else if (strcmp(s, "module_not_library") == 0 && argc > 2) {
        setenv("DI_CUDA_MODULE", argv[2], 1);
        snprintf(want, sizeof want, "cuda backend: cannot load module %s: ", argv[2]);
        expect(want);
    } else if (strcmp(s, "module_no_entry") == 0 && argc > 2) {
        setenv("DI_CUDA_MODULE", argv[2], 1);
        snprintf(want, sizeof want,
                 "cuda backend: %s has no entry point di_backend_module_create (not a deepinfer "
                 "module)",
                 argv[2]);
        expect(want);
    } else if (strcmp(s, "driver_missing") == 0 && argc > 2) {
        setenv("DI_CUDA_MODULE", argv[2], 1);
        setenv("DI_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
        expect("cuda backend: no NVIDIA driver: cannot load /nonexistent/libcuda.so.1 (");
    } else if (strcmp(s, "driver_stub") == 0 && argc > 3) {
        setenv("DI_CUDA_MODULE", argv[2], 1);
        setenv("DI_CUDA_DRIVER", argv[3], 1);
        expect("cuda backend: cuInit failed: CUDA_ERROR_STUB_LIBRARY (");
    } else if (strcmp(s, "device_rules") == 0) {
        check(!cuda_device_usable(0, NULL, 0, 0, msg, sizeof msg), "no device refused");
        check(strcmp(msg, "cuda backend: no CUDA device (cudaGetDeviceCount found 0; check "
                          "CUDA_VISIBLE_DEVICES)") == 0,
              "no device: message");
        check(!cuda_device_usable(1, "NVIDIA A100-SXM4-80GB", 8, 0, msg, sizeof msg),
              "8.0 refused");
        check(strcmp(msg, "cuda backend: device 0 (NVIDIA A100-SXM4-80GB) has compute "
                          "capability 8.0, below the 9.0 this build needs (sm_90a, compute_90: "
                          "Hopper or newer)") == 0,
              "8.0: message");
        check(!cuda_device_usable(2, "NVIDIA GeForce RTX 4090", 8, 9, msg, sizeof msg),
              "8.9 refused");
        check(cuda_device_usable(1, "NVIDIA H200", 9, 0, msg, sizeof msg), "9.0 usable");
        check(cuda_device_usable(1, "NVIDIA B200", 10, 0, msg, sizeof msg), "10.0 usable");
    } else if (strcmp(s, "refuses") == 0 && argc > 4) {
        setenv("DI_CUDA_MODULE", argv[2], 1);
        char m[2048];
        di_status st = create_cuda_model(argv[3], m, sizeof m);
        if (st == DI_ERR_UNSUPPORTED && !strstr(m, "not implemented yet")) {
            printf("SKIP: this host cannot run the CUDA backend: %s\n", m);
            return 77;
        }
        snprintf(want, sizeof want, "cuda backend: %s not implemented yet", argv[4]);
        check(st == DI_ERR_UNSUPPORTED && strstr(m, want) != NULL,
              "refused at load, naming the operation");
    } else if (strcmp(s, "default_path") == 0 && argc > 3) {
        unsetenv("DI_CUDA_MODULE");
        if (strcmp(argv[3], "absent") == 0) {
            snprintf(want, sizeof want, "cuda backend: module not found at %s (", argv[2]);
            expect(want);
        } else {
            di_status st = create_cuda(msg, sizeof msg);
            check(st == DI_OK || (st == DI_ERR_UNSUPPORTED &&
                                  strncmp(msg, "cuda backend: module not found", 30) != 0 &&
                                  strncmp(msg, "cuda backend: cannot load module", 32) != 0),
                  "the module next to libdeepinfer is found and loaded");
        }
    } else if (strcmp(s, "this_host") == 0 && argc > 2) {
        setenv("DI_CUDA_MODULE", argv[2], 1);
        di_status st = create_cuda(msg, sizeof msg);
        if (st == DI_OK)
            printf("this host runs the CUDA backend\n");
        else
            check(st == DI_ERR_UNSUPPORTED && strncmp(msg, "cuda backend: ", 14) == 0,
                  "DI_ERR_UNSUPPORTED with a message naming the cuda backend");
    } else {
        fprintf(stderr, "usage: test_cuda_module SCENARIO [MODULE [DRIVER]]\n");
        return 2;
    }
    if (failures) return 1;
    printf("ok: %s\n", s);
    return 0;
}
