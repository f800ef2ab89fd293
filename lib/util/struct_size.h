/* Reading the caller's versioned input structs (the struct_size convention that
 * deepinfer.h documents under "Versioned input structs").
 *
 * A public input struct begins with `size_t struct_size`. The library never reads
 * the caller's struct in place: di_struct_copy_in copies it into a local struct of
 * the library's own layout that starts out holding the defaults, so every field
 * of the library's version is defined whatever release the caller was built
 * against. Not thread-safe with respect to concurrent writers of `src` (the caller
 * owns it); otherwise pure. */
#ifndef DI_UTIL_STRUCT_SIZE_H
#define DI_UTIL_STRUCT_SIZE_H

#include <stddef.h>

#include "deepinfer/deepinfer.h"

/* The largest struct_size read (deepinfer.h, "Versioned input structs"): a
 * page, as clone3(2) caps its argument struct. A larger value is what an
 * uninitialised struct looks like, and scanning its "unknown fields" would read
 * past the caller's memory. */
enum { DI_STRUCT_SIZE_MAX = 4096 };

/* Copy the caller's struct `src` into `dst` (the library's layout, `dst_size`
 * bytes, already holding the defaults — including a struct_size field that this
 * call overwrites with dst_size).
 *
 * `min_size` is the size of the struct in its first release; `src->struct_size`
 * (the leading size_t) must be at least that. When the caller's struct is larger
 * than the library's, every byte past dst_size must be zero: a non-zero byte is a
 * field this library does not know, and the call fails instead of ignoring it.
 *
 * Returns DI_OK; DI_ERR_INVALID_ARGUMENT when src is NULL, struct_size is below
 * min_size or above DI_STRUCT_SIZE_MAX, or an unknown trailing field is set; then *message is a
 * static sentence saying which (NULL on success) and `dst` is unchanged. */
di_status di_struct_copy_in(void *dst, size_t dst_size, const void *src, size_t min_size,
                            const char **message);

/* The common part of every di_<name>_init_size (deepinfer.h, "Versioned input
 * structs"): zero the first `struct_size` bytes of `p` and store struct_size in
 * its leading size_t, writing nothing past them. Returns 1 when it wrote, and
 * the caller then sets the non-zero defaults of the fields that lie wholly
 * inside struct_size (struct_size >= DI_STRUCT_SIZE_UNTIL(type, field));
 * returns 0, writing nothing, when p is NULL or struct_size is below
 * sizeof(size_t) (the size cannot even be stored), and 0 having stored only
 * struct_size when it is above DI_STRUCT_SIZE_MAX (no struct is that large:
 * the reader refuses it). A struct_size below the
 * struct's first release is written all the same: di_struct_copy_in refuses
 * it later, naming struct_size. Touches nothing but p's bytes. */
int di_struct_init(void *p, size_t struct_size);

#endif
