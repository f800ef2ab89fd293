/* safetensors reader: see safetensors.h. The format is Hugging Face's
 * safetensors (docs: "safetensors format"): u64 LE header length N, N bytes of
 * UTF-8 JSON, then the byte buffer the data_offsets index. */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The safetensors library refuses headers over 100 MB; so do we. */
#define MAX_HEADER 100000000ULL

size_t safetensors_dtype_size(safetensors_dtype dt)
{
    switch (dt) {
    case SAFETENSORS_F32: return 4;
    case SAFETENSORS_F16:
    case SAFETENSORS_BF16: return 2;
    case SAFETENSORS_F8_E4M3: return 1;
    case SAFETENSORS_I64: return 8;
    case SAFETENSORS_I32: return 4;
    case SAFETENSORS_F8_E8M0:
    case SAFETENSORS_I8: return 1;
    }
    return 0;
}

static di_status fail(char *msg, size_t msg_size, const char *name, di_status st, const char *fmt,
                      ...) __attribute__((format(printf, 5, 6)));
static di_status fail(char *msg, size_t msg_size, const char *name, di_status st, const char *fmt,
                      ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    snprintf(msg, msg_size, "%s: safetensors %s", name, detail);
    return st;
}

/* Known dtypes of the format that deepinfer does not load. */
static const char *const other_dtypes[] = {"F64", "U64",  "U32",     "I16",     "U16",
                                           "U8",  "BOOL", "F8_E5M2", "F6_E2M3", "F6_E3M2",
                                           "F4",  "C64",  "E8M0"};

static int cmp_begin(const void *a, const void *b)
{
    const safetensors_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static di_status parse_tensor(safetensors_file *f, const char *name, const char *key, json_t *info,
                              safetensors_tensor *t, uint64_t buf_size, char *msg, size_t msg_size)
{
    const uint64_t hdr_end = 8 + f->header_len;
    if (!json_is_object(info))
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                    "tensor '%s': entry is not an object (header bytes 8 to %llu)", key,
                    (unsigned long long)hdr_end);
    json_t *jd = json_object_get(info, "dtype"), *js = json_object_get(info, "shape"),
           *jo = json_object_get(info, "data_offsets");
    if (!json_is_string(jd))
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT, "tensor '%s': dtype is %s", key,
                    jd ? "not a string" : "missing");
    const char *d = json_string_value(jd);
    if (strcmp(d, "F32") == 0)
        t->dtype = SAFETENSORS_F32;
    else if (strcmp(d, "F16") == 0)
        t->dtype = SAFETENSORS_F16;
    else if (strcmp(d, "BF16") == 0)
        t->dtype = SAFETENSORS_BF16;
    else if (strcmp(d, "F8_E4M3") == 0)
        t->dtype = SAFETENSORS_F8_E4M3;
    else if (strcmp(d, "I64") == 0)
        t->dtype = SAFETENSORS_I64;
    else if (strcmp(d, "I32") == 0)
        t->dtype = SAFETENSORS_I32;
    else if (strcmp(d, "F8_E8M0") == 0)
        t->dtype = SAFETENSORS_F8_E8M0;
    else if (strcmp(d, "I8") == 0)
        t->dtype = SAFETENSORS_I8;
    else {
        for (size_t i = 0; i < sizeof other_dtypes / sizeof other_dtypes[0]; i++)
            if (strcmp(d, other_dtypes[i]) == 0)
                return fail(msg, msg_size, name, DI_ERR_UNSUPPORTED,
                            "tensor '%s': dtype %s is not supported (F32, F16, BF16, F8_E4M3, "
                            "F8_E8M0, I64, I32, I8 are)",
                            key, d);
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT, "tensor '%s': unknown dtype '%.32s'",
                    key, d);
    }
    if (!json_is_array(js))
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT, "tensor '%s': shape is %s", key,
                    js ? "not an array" : "missing");
    size_t rank = json_array_size(js);
    if (rank > SAFETENSORS_MAX_DIMS)
        return fail(msg, msg_size, name, DI_ERR_UNSUPPORTED,
                    "tensor '%s': %zu dimensions (at most %d are supported)", key, rank,
                    SAFETENSORS_MAX_DIMS);
    t->n_dims = (uint32_t)rank;
    uint64_t elements = 1;
    for (size_t i = 0; i < rank; i++) {
        json_t *v = json_array_get(js, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                        "tensor '%s': shape[%zu] is not a non-negative integer", key, i);
        uint64_t n = (uint64_t)json_integer_value(v);
        if (n > (1ULL << 40) || (n && elements > UINT64_MAX / n))
            return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                        "tensor '%s': shape[%zu] = %llu is too large", key, i,
                        (unsigned long long)n);
        t->shape[i] = n;
        elements *= n;
    }
    for (size_t i = rank; i < SAFETENSORS_MAX_DIMS; i++) t->shape[i] = 1;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)) || json_integer_value(json_array_get(jo, 0)) < 0 ||
        json_integer_value(json_array_get(jo, 1)) < 0)
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT, "tensor '%s': data_offsets is %s",
                    key, jo ? "not two non-negative integers" : "missing");
    t->begin = (uint64_t)json_integer_value(json_array_get(jo, 0));
    t->end = (uint64_t)json_integer_value(json_array_get(jo, 1));
    if (t->begin > t->end)
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                    "tensor '%s': data_offsets [%llu, %llu) end before they begin", key,
                    (unsigned long long)t->begin, (unsigned long long)t->end);
    unsigned long long at = hdr_end;
    at += t->end;
    if (t->end > buf_size)
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                    "tensor '%s': data_offsets [%llu, %llu) run past the end of the file (byte "
                    "offset %llu of %zu)",
                    key, (unsigned long long)t->begin, (unsigned long long)t->end, at, f->size);
    uint64_t es = safetensors_dtype_size(t->dtype);
    if (elements > UINT64_MAX / es || t->end - t->begin != elements * es)
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                    "tensor '%s': data_offsets [%llu, %llu) hold %llu bytes, but shape and dtype "
                    "%s need %llu",
                    key, (unsigned long long)t->begin, (unsigned long long)t->end,
                    (unsigned long long)(t->end - t->begin), d,
                    elements > UINT64_MAX / es ? 0ULL : (unsigned long long)(elements * es));
    t->data = f->map + hdr_end + t->begin;
    t->name = strdup(key);
    if (!t->name)
        return fail(msg, msg_size, name, DI_ERR_OUT_OF_MEMORY, "out of memory reading the header");
    return DI_OK;
}

static di_status parse(safetensors_file *f, const char *name, char *msg, size_t msg_size)
{
    if (f->size < 8)
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                    "file of %zu bytes is too short for the 8-byte header length", f->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | f->map[i];
    if (n > f->size - 8)
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                    "header length %llu runs past the end of the file (%zu bytes)",
                    (unsigned long long)n, f->size);
    if (n > MAX_HEADER)
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                    "header length %llu is over the 100 MB limit", (unsigned long long)n);
    if (n < 2 || f->map[8] != '{')
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                    "header does not start with '{' (byte offset 8)");
    f->header_len = n;
    json_error_t je;
    json_t *root = json_loadb((const char *)f->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    unsigned long long at = (unsigned long long)je.position;
    at += 8;
    if (!root)
        return fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                    "header is not valid JSON: %s (byte offset %llu)", je.text, at);
    di_status st = DI_OK;
    if (!json_is_object(root)) {
        st = fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT, "header is not a JSON object");
        goto done;
    }
    f->tensors = calloc(json_object_size(root) + 1, sizeof *f->tensors);
    if (!f->tensors) {
        st = fail(msg, msg_size, name, DI_ERR_OUT_OF_MEMORY, "out of memory reading the header");
        goto done;
    }
    const uint64_t buf_size = f->size - 8 - n;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value)
    {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(value)) {
                st =
                    fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT, "__metadata__ is not an object");
                goto done;
            }
            json_object_foreach(value, mk, mv)
            {
                if (!json_is_string(mv)) {
                    st = fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                              "__metadata__.%.64s is not a string", mk);
                    goto done;
                }
            }
            continue;
        }
        st = parse_tensor(f, name, key, value, &f->tensors[f->n_tensors], buf_size, msg, msg_size);
        if (f->tensors[f->n_tensors].name) f->n_tensors++;
        if (st != DI_OK) goto done;
    }
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, cmp_begin);
    if (di_bytes_map_init(&f->by_name, f->n_tensors) != 0) {
        st = fail(msg, msg_size, name, DI_ERR_OUT_OF_MEMORY, "out of memory reading the header");
        goto done;
    }
    for (size_t i = 0; i < f->n_tensors; i++)
        if (di_bytes_map_put(&f->by_name, f->tensors[i].name, strlen(f->tensors[i].name),
                             (int32_t)i) < 0) {
            st =
                fail(msg, msg_size, name, DI_ERR_OUT_OF_MEMORY, "out of memory reading the header");
            goto done;
        }
    for (size_t i = 1; i < f->n_tensors; i++) {
        const safetensors_tensor *a = &f->tensors[i - 1], *b = &f->tensors[i];
        if (b->begin < a->end) {
            unsigned long long pos = n;
            pos += 8 + b->begin;
            st = fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                      "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap (byte offset %llu)",
                      a->name, (unsigned long long)a->begin, (unsigned long long)a->end, b->name,
                      (unsigned long long)b->begin, (unsigned long long)b->end, pos);
            goto done;
        }
    }
    /* the tensors tile the data exactly, as the safetensors format requires: a
     * gap or an uncovered tail means the header does not describe the file (a
     * header length off by one would otherwise shift every tensor) */
    uint64_t covered = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const safetensors_tensor *t = &f->tensors[i];
        if (t->begin != covered) {
            st = fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                      "data bytes [%llu, %llu) belong to no tensor (before '%s'): the header does "
                      "not describe the file",
                      (unsigned long long)covered, (unsigned long long)t->begin, t->name);
            goto done;
        }
        covered = t->end;
    }
    if (covered != buf_size) {
        st = fail(msg, msg_size, name, DI_ERR_MODEL_FORMAT,
                  "the tensors cover %llu of the %llu data bytes after the header: the header "
                  "does not describe the file",
                  (unsigned long long)covered, (unsigned long long)buf_size);
        goto done;
    }
done:
    json_decref(root);
    return st;
}

const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name)
{
    if (!f->by_name.capacity) return NULL;
    int32_t i = di_bytes_map_get(&f->by_name, name, strlen(name));
    return i < 0 ? NULL : &f->tensors[i];
}

di_status safetensors_open_memory(const void *data, size_t size, const char *name,
                                  safetensors_file **out, char *msg, size_t msg_size)
{
    *out = NULL;
    safetensors_file *f = calloc(1, sizeof *f);
    if (!f) return fail(msg, msg_size, name, DI_ERR_OUT_OF_MEMORY, "out of memory");
    f->map = data;
    f->size = size;
    di_status st = parse(f, name, msg, msg_size);
    if (st != DI_OK) {
        safetensors_close(f);
        return st;
    }
    *out = f;
    return DI_OK;
}

di_status safetensors_open(const char *path, safetensors_file **out, char *msg, size_t msg_size)
{
    *out = NULL;
    /* O_NONBLOCK: a FIFO must not block the open; fstat rejects it below */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(msg, msg_size, "%s: cannot open: %s", path, strerror(errno));
        return DI_ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        snprintf(msg, msg_size, "%s: not a regular file", path);
        return DI_ERR_IO;
    }
    size_t size = (size_t)sb.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            close(fd);
            snprintf(msg, msg_size, "%s: cannot map the file: %s", path, strerror(errno));
            return DI_ERR_IO;
        }
    }
    close(fd);
    static const uint8_t empty[1];
    di_status st =
        safetensors_open_memory(map ? map : (void *)empty, size, path, out, msg, msg_size);
    if (st != DI_OK || !*out) {
        if (map) munmap(map, size);
        return st;
    }
    (*out)->mapped = map != NULL;
    return DI_OK;
}

void safetensors_close(safetensors_file *f)
{
    if (!f) return;
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    di_bytes_map_free(&f->by_name);
    if (f->mapped) munmap((void *)f->map, f->size);
    free(f);
}
