/* libFuzzer target: the GGUF reader on arbitrary bytes — it must reject or accept
 * without reading out of bounds, and everything an accepted file reports must lie
 * inside it. Both with and without GGUF_OPEN_METADATA_ONLY. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy, so an overread past `size` is caught by ASan. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    for (unsigned flags = 0; flags < 2; flags++) {
        gguf_file *f = NULL;
        char msg[256];
        if (gguf_open_memory(copy, size, flags, &f, msg, sizeof msg) != DI_OK) continue;
        for (uint64_t i = 0; i < f->n_kv; i++) {
            const gguf_kv *kv = &f->kv[i];
            if ((const uint8_t *)kv->key < copy ||
                (const uint8_t *)kv->key + kv->key_len > copy + size)
                abort();
            if (kv->type == GGUF_TYPE_ARRAY && kv->elem_type == GGUF_TYPE_STRING) {
                const uint8_t *pos = kv->value;
                for (uint64_t j = 0; j < kv->count; j++) {
                    const char *s;
                    size_t len;
                    gguf_next_string(&pos, &s, &len);
                    if ((const uint8_t *)s + len > copy + size) abort();
                }
            }
        }
        if (!flags)
            for (uint64_t i = 0; i < f->n_tensors; i++)
                if (f->data_offset + f->tensors[i].offset + f->tensors[i].n_bytes > size) abort();
        gguf_close(f);
    }
    free(copy);
    return 0;
}
