/* Whether a CUDA device can run this build of the CUDA backend, as a pure
 * function of what the runtime reported, so that every refusal's message is
 * tested on hosts without a GPU (tests/cuda/test_cuda_module.c). */
#ifndef DI_BACKEND_CUDA_DEVICE_CHECK_H
#define DI_BACKEND_CUDA_DEVICE_CHECK_H

#include <stddef.h>

/* The oldest compute capability the module's code runs on (sm_90a cubins plus
 * compute_90 PTX: Hopper and newer). */
enum { CUDA_MIN_CC_MAJOR = 9, CUDA_MIN_CC_MINOR = 0 };

/* device 0 of n_devices (CUDA_VISIBLE_DEVICES applies), named name, with
 * compute capability major.minor: 1 when usable; else 0 and msg (cap bytes,
 * NUL-terminated) says why: "no device" (n_devices 0) or the capability below
 * 9.0. name may be NULL when n_devices is 0. Thread-safe. */
int cuda_device_usable(int n_devices, const char *name, int major, int minor, char *msg,
                       size_t cap);

#endif
