/* di_version, di_version_string: the version of the running library. */
#include "deepinfer/deepinfer.h"

DI_API unsigned di_version(void)
{
    return DI_VERSION_NUMBER;
}

DI_API const char *di_version_string(void)
{
    return DI_VERSION_STRING;
}
