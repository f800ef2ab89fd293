/* di_status_string: the kind of an error, in words. */
#include "deepinfer/deepinfer.h"

DI_API const char *di_status_string(di_status status)
{
    switch (status) {
    case DI_OK: return "ok";
    case DI_ERR_INVALID_ARGUMENT: return "invalid argument";
    case DI_ERR_INVALID_REQUEST: return "invalid request";
    case DI_ERR_OUT_OF_MEMORY: return "out of memory";
    case DI_ERR_IO: return "input/output error";
    case DI_ERR_MODEL_FORMAT: return "corrupt or truncated model file";
    case DI_ERR_UNSUPPORTED: return "unsupported";
    case DI_ERR_NOT_FOUND: return "not found";
    case DI_ERR_CONTEXT_LENGTH: return "context length exceeded";
    case DI_ERR_CANCELLED: return "cancelled";
    case DI_ERR_INVALID_STATE: return "invalid state";
    case DI_ERR_INVALID_UTF8: return "invalid UTF-8";
    case DI_ERR_BACKEND: return "backend error";
    case DI_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
