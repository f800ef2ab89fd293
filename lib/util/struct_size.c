/* di_struct_copy_in and di_struct_init: see struct_size.h. */
#include "util/struct_size.h"

#include <string.h>

di_status di_struct_copy_in(void *dst, size_t dst_size, const void *src, size_t min_size,
                            const char **message)
{
    size_t src_size;

    *message = NULL;
    if (src == NULL) {
        *message = "struct pointer is NULL";
        return DI_ERR_INVALID_ARGUMENT;
    }
    memcpy(&src_size, src, sizeof src_size);
    if (src_size < min_size || src_size < sizeof(size_t)) {
        *message = "struct_size is smaller than the struct's first release "
                   "(was the struct initialised with its _init function?)";
        return DI_ERR_INVALID_ARGUMENT;
    }
    if (src_size > DI_STRUCT_SIZE_MAX) { /* not read that far: clone3's rule */
        *message = "struct_size is larger than any deepinfer struct can be "
                   "(was the struct initialised with its _init function?)";
        return DI_ERR_INVALID_ARGUMENT;
    }
    if (src_size > dst_size) {
        const unsigned char *tail = (const unsigned char *)src + dst_size;
        for (size_t i = 0; i < src_size - dst_size; i++) {
            if (tail[i] != 0) {
                *message = "struct sets a field this library version does not know "
                           "(the host was built against a newer deepinfer.h)";
                return DI_ERR_INVALID_ARGUMENT;
            }
        }
    }
    memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
    memcpy(dst, &dst_size, sizeof dst_size);
    return DI_OK;
}

int di_struct_init(void *p, size_t struct_size)
{
    if (p == NULL || struct_size < sizeof struct_size) return 0;
    if (struct_size > DI_STRUCT_SIZE_MAX) {          /* no struct is that large: a mistake */
        memcpy(p, &struct_size, sizeof struct_size); /* which the reader refuses */
        return 0;
    }
    memset(p, 0, struct_size);
    memcpy(p, &struct_size, sizeof struct_size);
    return 1;
}
