/* cuda_device_usable (device_check.h). */
#include "backend/cuda/device_check.h"

#include <stdio.h>

int cuda_device_usable(int n_devices, const char *name, int major, int minor, char *msg, size_t cap)
{
    if (n_devices <= 0) {
        snprintf(msg, cap,
                 "cuda backend: no CUDA device (cudaGetDeviceCount found 0; check "
                 "CUDA_VISIBLE_DEVICES)");
        return 0;
    }
    if (major < CUDA_MIN_CC_MAJOR || (major == CUDA_MIN_CC_MAJOR && minor < CUDA_MIN_CC_MINOR)) {
        snprintf(msg, cap,
                 "cuda backend: device 0 (%s) has compute capability %d.%d, below the %d.%d "
                 "this build needs (sm_90a, compute_90: Hopper or newer)",
                 name ? name : "?", major, minor, CUDA_MIN_CC_MAJOR, CUDA_MIN_CC_MINOR);
        return 0;
    }
    return 1;
}
