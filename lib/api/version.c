/* di_version, di_version_string: the version of the running library;
 * di_cpu_kernels: the CPU kernels it runs on this machine. */
#include "backend/cpu/vec_dot.h"
#include "deepinfer/deepinfer.h"

DI_API unsigned di_version(void)
{
    return DI_VERSION_NUMBER;
}

DI_API const char *di_version_string(void)
{
    return DI_VERSION_STRING;
}

DI_API const char *di_cpu_kernels(void)
{
    return cpu_kernels_describe();
}
