/* GGUF reader: see gguf.h. Layout (little-endian): magic "GGUF", uint32 version,
 * uint64 tensor_count, uint64 kv_count; kv_count × (string key, uint32 type,
 * value); tensor_count × (string name, uint32 n_dims, uint64 dims[n_dims],
 * uint32 type, uint64 offset); padding to `alignment`; tensor data. A string is
 * a uint64 length and that many bytes; an array is uint32 element type, uint64
 * count and the elements. */
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Block size (elements) and bytes per block of the ggml types a GGUF may hold;
 * bytes 0 marks a type this reader does not know. From ggml's type traits. */
static const struct {
    uint32_t block, bytes;
    const char *name;
} ggml_types[] = {
    [0] = {1, 4, "F32"},         [1] = {1, 2, "F16"},       [2] = {32, 18, "Q4_0"},
    [3] = {32, 20, "Q4_1"},      [6] = {32, 22, "Q5_0"},    [7] = {32, 24, "Q5_1"},
    [8] = {32, 34, "Q8_0"},      [9] = {32, 36, "Q8_1"},    [10] = {256, 84, "Q2_K"},
    [11] = {256, 110, "Q3_K"},   [12] = {256, 144, "Q4_K"}, [13] = {256, 176, "Q5_K"},
    [14] = {256, 210, "Q6_K"},   [15] = {256, 292, "Q8_K"}, [24] = {1, 1, "I8"},
    [25] = {1, 2, "I16"},        [26] = {1, 4, "I32"},      [27] = {1, 8, "I64"},
    [28] = {1, 8, "F64"},        [30] = {1, 2, "BF16"},     [20] = {32, 18, "IQ4_NL"},
    [23] = {256, 136, "IQ4_XS"}, [39] = {32, 17, "MXFP4"},
};

const char *gguf_tensor_type_name(uint32_t type)
{
    if (type >= sizeof ggml_types / sizeof ggml_types[0]) return NULL;
    return ggml_types[type].name;
}

size_t gguf_type_size(gguf_type t)
{
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64: return 8;
    case GGUF_TYPE_STRING:
    case GGUF_TYPE_ARRAY: return 0;
    }
    return 0;
}

typedef struct cursor {
    const uint8_t *base;
    size_t size, pos;
    char *msg;
    size_t msg_size;
} cursor;

static di_status bad(cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static di_status bad(cursor *c, const char *fmt, ...)
{
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    snprintf(c->msg, c->msg_size, "GGUF %s (at byte offset %zu of %zu)", detail, c->pos, c->size);
    return DI_ERR_MODEL_FORMAT;
}

static int take(cursor *c, void *dst, size_t n)
{
    if (c->size - c->pos < n) return -1;
    if (dst) memcpy(dst, c->base + c->pos, n);
    c->pos += n;
    return 0;
}

static di_status read_string(cursor *c, const char *what, const char **s, size_t *len)
{
    uint64_t n;
    if (take(c, &n, 8)) return bad(c, "truncated in the length of %s", what);
    if (n > c->size - c->pos)
        return bad(c, "%s claims %llu bytes, past the end of the file", what,
                   (unsigned long long)n);
    *s = (const char *)c->base + c->pos;
    *len = (size_t)n;
    c->pos += (size_t)n;
    return DI_OK;
}

static di_status skip_value(cursor *c, gguf_type type, const char *key, int depth);

static di_status skip_array(cursor *c, const char *key, gguf_kv *kv, int depth)
{
    uint32_t et;
    uint64_t count;
    if (take(c, &et, 4) || take(c, &count, 8))
        return bad(c, "truncated in array header of %s", key);
    if (et > GGUF_TYPE_FLOAT64) return bad(c, "array %s has unknown element type %u", key, et);
    if (kv) {
        kv->elem_type = (gguf_type)et;
        kv->count = count;
        kv->value = c->base + c->pos;
    }
    size_t es = gguf_type_size((gguf_type)et);
    if (es) {
        if (count > (c->size - c->pos) / es)
            return bad(c, "array %s of %llu elements runs past the end of the file", key,
                       (unsigned long long)count);
        c->pos += (size_t)count * es;
        return DI_OK;
    }
    if (count > c->size - c->pos)
        return bad(c, "array %s claims %llu elements", key, (unsigned long long)count);
    for (uint64_t i = 0; i < count; i++) {
        di_status st = skip_value(c, (gguf_type)et, key, depth + 1);
        if (st != DI_OK) return st;
    }
    return DI_OK;
}

static di_status skip_value(cursor *c, gguf_type type, const char *key, int depth)
{
    if (depth > 4) return bad(c, "arrays nested too deeply in %s", key);
    if (type == GGUF_TYPE_STRING) {
        const char *s;
        size_t n;
        return read_string(c, key, &s, &n);
    }
    if (type == GGUF_TYPE_ARRAY) return skip_array(c, key, NULL, depth);
    size_t es = gguf_type_size(type);
    if (!es) return bad(c, "value of %s has unknown type %u", key, (unsigned)type);
    if (take(c, NULL, es)) return bad(c, "truncated in the value of %s", key);
    return DI_OK;
}

/* A tensor's data extent, for the overlap check. */
typedef struct extent {
    uint64_t offset, n_bytes, index;
} extent;

static int cmp_extent(const void *a, const void *b)
{
    const extent *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static di_status parse(gguf_file *f, unsigned flags, char *msg, size_t msg_size)
{
    cursor c = {f->data, f->size, 0, msg, msg_size};
    uint32_t magic;
    if (take(&c, &magic, 4) || memcmp(&magic, "GGUF", 4) != 0)
        return bad(&c, "magic is missing: not a GGUF file");
    if (take(&c, &f->version, 4)) return bad(&c, "truncated in the header");
    if (f->version != 2 && f->version != 3)
        return bad(&c, "version %u is not supported (2 and 3 are)", f->version);
    if (take(&c, &f->n_tensors, 8) || take(&c, &f->n_kv, 8))
        return bad(&c, "truncated in the header");
    /* Each kv takes at least 8+4+1 bytes, each tensor info at least 8+4+4+8. */
    if (f->n_kv > f->size / 13)
        return bad(&c, "kv_count %llu is impossible for the file size",
                   (unsigned long long)f->n_kv);
    if (f->n_tensors > f->size / 24)
        return bad(&c, "tensor_count %llu is impossible for the file size",
                   (unsigned long long)f->n_tensors);
    f->kv = calloc((size_t)f->n_kv + 1, sizeof *f->kv);
    f->tensors = calloc((size_t)f->n_tensors + 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) {
        snprintf(msg, msg_size, "out of memory reading the GGUF header");
        return DI_ERR_OUT_OF_MEMORY;
    }
    f->alignment = 32;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        char what[48];
        snprintf(what, sizeof what, "metadata key %llu", (unsigned long long)i);
        di_status st = read_string(&c, what, &kv->key, &kv->key_len);
        if (st != DI_OK) return st;
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(kv->key_len < 100 ? kv->key_len : 100), kv->key);
        uint32_t type;
        if (take(&c, &type, 4)) return bad(&c, "truncated in the type of %s", key);
        if (type > GGUF_TYPE_FLOAT64) return bad(&c, "%s has unknown type %u", key, type);
        kv->type = (gguf_type)type;
        kv->count = 1;
        kv->value = c.base + c.pos;
        st =
            type == GGUF_TYPE_ARRAY ? skip_array(&c, key, kv, 0) : skip_value(&c, kv->type, key, 0);
        if (st != DI_OK) return st;
        if (kv->key_len == 17 && memcmp(kv->key, "general.alignment", 17) == 0) {
            uint32_t a;
            if (kv->type != GGUF_TYPE_UINT32) return bad(&c, "general.alignment is not a uint32");
            memcpy(&a, kv->value, 4);
            /* GGUF's specification: a multiple of 8 (so every tensor's data
             * is aligned for its elements: an F16 row read in place) */
            if (a < 8 || (a & (a - 1)) != 0 || a > 1u << 20)
                return bad(&c,
                           "general.alignment %u is not a power of two from 8 to 1 MiB (GGUF asks "
                           "for a multiple of 8)",
                           a);
            f->alignment = a;
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor_info *t = &f->tensors[i];
        char what[48];
        snprintf(what, sizeof what, "tensor name %llu", (unsigned long long)i);
        di_status st = read_string(&c, what, &t->name, &t->name_len);
        if (st != DI_OK) return st;
        char name[96];
        snprintf(name, sizeof name, "tensor '%.*s'", (int)(t->name_len < 64 ? t->name_len : 64),
                 t->name);
        if (take(&c, &t->n_dims, 4)) return bad(&c, "truncated in %s", name);
        if (t->n_dims == 0 || t->n_dims > 4)
            return bad(&c, "%s has %u dimensions (1 to 4 allowed)", name, t->n_dims);
        uint64_t elements = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (take(&c, &t->dims[d], 8)) return bad(&c, "truncated in %s", name);
            if (t->dims[d] == 0 || t->dims[d] > (1ULL << 40) || elements > UINT64_MAX / t->dims[d])
                return bad(&c, "%s has dimension %u of %llu", name, d,
                           (unsigned long long)t->dims[d]);
            elements *= t->dims[d];
        }
        for (uint32_t d = t->n_dims; d < 4; d++) t->dims[d] = 1;
        if (take(&c, &t->type, 4) || take(&c, &t->offset, 8))
            return bad(&c, "truncated in %s", name);
        if (t->type >= sizeof ggml_types / sizeof ggml_types[0] || ggml_types[t->type].bytes == 0) {
            /* A reader of metadata alone need not know every tensor type. */
            if (flags & GGUF_OPEN_METADATA_ONLY) continue;
            return bad(&c, "%s has unknown ggml type %u", name, t->type);
        }
        uint32_t block = ggml_types[t->type].block;
        if (t->dims[0] % block != 0)
            return bad(&c, "%s: row of %llu elements is not a whole number of %s blocks", name,
                       (unsigned long long)t->dims[0], ggml_types[t->type].name);
        if (elements / block > UINT64_MAX / ggml_types[t->type].bytes)
            return bad(&c, "%s: %llu elements of %s are more bytes than 64 bits count", name,
                       (unsigned long long)elements, ggml_types[t->type].name);
        t->n_bytes = elements / block * ggml_types[t->type].bytes;
        if (t->offset % f->alignment != 0)
            return bad(&c, "%s: data offset %llu is not aligned to %u", name,
                       (unsigned long long)t->offset, f->alignment);
    }
    f->data_offset = (c.pos + f->alignment - 1) / f->alignment * f->alignment;
    if (!(flags & GGUF_OPEN_METADATA_ONLY)) {
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor_info *t = &f->tensors[i];
            if (t->offset > f->size || t->n_bytes > f->size ||
                f->data_offset + t->offset + t->n_bytes > f->size) {
                c.pos = f->size;
                /* (the offset as the file gives it: data_offset + offset can wrap) */
                return bad(&c,
                           "data of tensor '%.*s' (%llu bytes at offset %llu of the data section, "
                           "which starts at byte %llu) runs past the end: the file is truncated",
                           (int)(t->name_len < 64 ? t->name_len : 64), t->name,
                           (unsigned long long)t->n_bytes, (unsigned long long)t->offset,
                           (unsigned long long)f->data_offset);
            }
        }
        /* no two tensors may share bytes (a retyped or re-pointed tensor would
         * otherwise read another's data) */
        extent *order = malloc((size_t)f->n_tensors * sizeof(extent) + 1);
        if (!order) return bad(&c, "out of memory checking tensor extents");
        for (uint64_t i = 0; i < f->n_tensors; i++)
            order[i] = (extent){f->tensors[i].offset, f->tensors[i].n_bytes, i};
        qsort(order, (size_t)f->n_tensors, sizeof(extent), cmp_extent);
        for (uint64_t i = 1; i < f->n_tensors; i++) {
            const extent *a = &order[i - 1], *b = &order[i];
            if (b->offset < a->offset + a->n_bytes && b->n_bytes && a->n_bytes) {
                const gguf_tensor_info *ta = &f->tensors[a->index], *tb = &f->tensors[b->index];
                unsigned long long at = f->data_offset;
                at += b->offset;
                c.pos = (size_t)at;
                free(order);
                return bad(&c, "tensors '%.*s' and '%.*s' overlap in the data section",
                           (int)(ta->name_len < 64 ? ta->name_len : 64), ta->name,
                           (int)(tb->name_len < 64 ? tb->name_len : 64), tb->name);
            }
        }
        free(order);
    }
    return DI_OK;
}

di_status gguf_open(const char *path, unsigned flags, gguf_file **out, char *msg, size_t msg_size)
{
    *out = NULL;
    /* O_NONBLOCK: a FIFO must not block the open; fstat rejects it below */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(msg, msg_size, "%s: cannot open: %s", path, strerror(errno));
        return DI_ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(msg, msg_size, "%s: not a regular file", path);
        return DI_ERR_IO;
    }
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        snprintf(msg, msg_size, "out of memory");
        return DI_ERR_OUT_OF_MEMORY;
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(f);
            snprintf(msg, msg_size, "%s: cannot map the file (%zu bytes): %s", path,
                     (size_t)st.st_size, strerror(e));
            return e == ENOMEM ? DI_ERR_OUT_OF_MEMORY : DI_ERR_IO;
        }
        f->data = map;
        f->mapped = 1;
    }
    close(fd);
    char detail[400];
    di_status s = parse(f, flags, detail, sizeof detail);
    if (s != DI_OK) {
        snprintf(msg, msg_size, "%s: %s", path, detail);
        gguf_close(f);
        return s;
    }
    *out = f;
    return DI_OK;
}

di_status gguf_open_memory(const void *data, size_t size, unsigned flags, gguf_file **out,
                           char *msg, size_t msg_size)
{
    *out = NULL;
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(msg, msg_size, "out of memory");
        return DI_ERR_OUT_OF_MEMORY;
    }
    f->data = data;
    f->size = size;
    di_status s = parse(f, flags, msg, msg_size);
    if (s != DI_OK) {
        gguf_close(f);
        return s;
    }
    *out = f;
    return DI_OK;
}

void gguf_close(gguf_file *f)
{
    if (!f) return;
    if (f->mapped) munmap((void *)f->data, f->size);
    free(f->kv);
    free(f->tensors);
    free(f);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key)
{
    size_t n = strlen(key);
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key_len == n && memcmp(f->kv[i].key, key, n) == 0) return &f->kv[i];
    return NULL;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    switch (kv->type) {
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32: {
        uint32_t v;
        memcpy(&v, kv->value, 4);
        if (kv->type == GGUF_TYPE_INT32 && (int32_t)v < 0) return 0;
        *out = v;
        return 1;
    }
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64: {
        uint64_t v;
        memcpy(&v, kv->value, 8);
        if (v > UINT32_MAX) return 0;
        *out = (uint32_t)v;
        return 1;
    }
    default: return 0;
    }
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type == GGUF_TYPE_FLOAT32) {
        memcpy(out, kv->value, 4);
        return 1;
    }
    if (kv->type == GGUF_TYPE_FLOAT64) {
        double d;
        memcpy(&d, kv->value, 8);
        *out = (float)d;
        return 1;
    }
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL) return 0;
    *out = kv->value[0] != 0;
    return 1;
}

int gguf_get_string(const gguf_file *f, const char *key, const char **s, size_t *len)
{
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_STRING) return 0;
    uint64_t n;
    memcpy(&n, kv->value, 8);
    *s = (const char *)kv->value + 8;
    *len = (size_t)n;
    return 1;
}

void gguf_next_string(const uint8_t **pos, const char **s, size_t *len)
{
    uint64_t n;
    memcpy(&n, *pos, 8);
    *s = (const char *)*pos + 8;
    *len = (size_t)n;
    *pos += 8 + n;
}
