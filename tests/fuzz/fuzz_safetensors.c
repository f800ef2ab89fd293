/* libFuzzer target: the safetensors reader on arbitrary bytes — it must reject or
 * accept without reading out of bounds, and every tensor an accepted file reports
 * must lie inside its data buffer, hold shape × dtype-size bytes and not overlap
 * the next one. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy, so an overread past `size` is caught by ASan. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    safetensors_file *f = NULL;
    char msg[256];
    if (safetensors_open_memory(copy, size, "fuzz", &f, msg, sizeof msg) == DI_OK) {
        const uint8_t *buf = copy + 8 + f->header_len;
        for (size_t i = 0; i < f->n_tensors; i++) {
            const safetensors_tensor *t = &f->tensors[i];
            uint64_t elements = 1;
            for (uint32_t d = 0; d < t->n_dims; d++) elements *= t->shape[d];
            if (t->data != buf + t->begin || t->begin > t->end || t->end > size - 8 - f->header_len)
                abort();
            if (t->end - t->begin != elements * safetensors_dtype_size(t->dtype)) abort();
            if (i + 1 < f->n_tensors && f->tensors[i + 1].begin < t->end) abort();
            if (safetensors_find(f, t->name) == NULL) abort();
            volatile uint8_t sink = 0;
            if (t->end > t->begin) sink ^= t->data[t->end - t->begin - 1];
            (void)sink;
        }
        safetensors_close(f);
    }
    free(copy);
    return 0;
}
