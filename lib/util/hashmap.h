/* Open-addressing hash maps used on the tokenizer's hot paths.
 *
 * di_bytes_map: byte string -> int32 value (vocabularies, the per-call word cache).
 *   Keys are copied into the map's own pool; hashing is XXH3 (xxHash, Debian's
 *   libxxhash). Linear probing, power-of-two capacity, load factor <= 1/2.
 * di_u64_map: uint64 key -> uint64 value (BPE merges keyed by the token pair).
 *
 * Neither map supports deletion (nothing here needs it). Lookups on a map that
 * is no longer modified are thread-safe; inserts are not. */
#ifndef DI_UTIL_HASHMAP_H
#define DI_UTIL_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct di_bytes_map {
    uint64_t *hashes;  /* [capacity]; 0 marks an empty slot (real hashes are forced non-zero) */
    uint32_t *key_off; /* [capacity] offset of the key in pool */
    uint32_t *key_len; /* [capacity] bytes */
    int32_t *values;   /* [capacity] */
    size_t capacity;   /* slots, a power of two */
    size_t count;      /* keys stored */
    uint8_t *pool;     /* key bytes */
    size_t pool_len, pool_cap;
} di_bytes_map;

/* Initialise an empty map with room for about `expected` keys without growing.
 * Returns 0, or -1 when out of memory (the map is then empty and safe to free). */
int di_bytes_map_init(di_bytes_map *m, size_t expected);
void di_bytes_map_free(di_bytes_map *m);

/* Insert key -> value; an existing key keeps its first value and 1 is returned.
 * Returns 0 when inserted, 1 when the key was present, -1 when out of memory or
 * when the pool would pass 4 GiB. */
int di_bytes_map_put(di_bytes_map *m, const void *key, size_t len, int32_t value);

/* The value stored for key, or -1 when absent. */
int32_t di_bytes_map_get(const di_bytes_map *m, const void *key, size_t len);

typedef struct di_u64_map {
    uint64_t *keys;   /* [capacity]; UINT64_MAX marks an empty slot (not a valid key) */
    uint64_t *values; /* [capacity] */
    size_t capacity, count;
} di_u64_map;

int di_u64_map_init(di_u64_map *m, size_t expected);
void di_u64_map_free(di_u64_map *m);
/* Insert; keeps the first value for a repeated key (returns 1 then). key must not
 * be UINT64_MAX. Returns 0 inserted, 1 present, -1 out of memory. */
int di_u64_map_put(di_u64_map *m, uint64_t key, uint64_t value);
/* Sets *value and returns 1 when present; returns 0 when absent. */
int di_u64_map_get(const di_u64_map *m, uint64_t key, uint64_t *value);

#endif
