/* libFuzzer target: util/utf8's scan agrees with the utf8proc-based oracle on any
 * input, and its result is self-consistent. */
#include <stdint.h>
#include <stdlib.h>

#include "utf8_oracle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    di_utf8_scan got = di_utf8_scan_bytes(data, size);
    di_utf8_scan want = oracle_scan(data, size);
    if (got.valid != want.valid || got.state != want.state) abort();
    if (got.valid > size) abort();
    if (got.state == DI_UTF8_INCOMPLETE && size - got.valid > 3) abort();
    /* The valid prefix rescans as entirely valid. */
    di_utf8_scan again = di_utf8_scan_bytes(data, got.valid);
    if (again.state != DI_UTF8_VALID || again.valid != got.valid) abort();
    return 0;
}
