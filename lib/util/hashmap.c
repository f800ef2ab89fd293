/* Open-addressing hash maps: see hashmap.h. */
#include "util/hashmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static size_t capacity_for(size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2) cap *= 2;
    return cap;
}

static uint64_t bytes_hash(const void *key, size_t len)
{
    uint64_t h = XXH3_64bits(key, len);
    return h ? h : 1;
}

static int bytes_map_alloc(di_bytes_map *m, size_t cap)
{
    m->hashes = calloc(cap, sizeof *m->hashes);
    m->key_off = malloc(cap * sizeof *m->key_off);
    m->key_len = malloc(cap * sizeof *m->key_len);
    m->values = malloc(cap * sizeof *m->values);
    m->capacity = cap;
    if (!m->hashes || !m->key_off || !m->key_len || !m->values) return -1;
    return 0;
}

int di_bytes_map_init(di_bytes_map *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    if (bytes_map_alloc(m, capacity_for(expected)) != 0) {
        di_bytes_map_free(m);
        return -1;
    }
    return 0;
}

void di_bytes_map_free(di_bytes_map *m)
{
    free(m->hashes);
    free(m->key_off);
    free(m->key_len);
    free(m->values);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

static size_t bytes_map_find(const di_bytes_map *m, uint64_t h, const void *key, size_t len)
{
    size_t mask = m->capacity - 1;
    size_t i = (size_t)h & mask;
    while (m->hashes[i] != 0) {
        /* an empty key compares equal without touching the pool, which does not
         * exist while every key so far is empty */
        if (m->hashes[i] == h && m->key_len[i] == len &&
            (len == 0 || memcmp(m->pool + m->key_off[i], key, len) == 0))
            return i;
        i = (i + 1) & mask;
    }
    return i;
}

static int bytes_map_grow(di_bytes_map *m)
{
    di_bytes_map old = *m;
    if (bytes_map_alloc(m, old.capacity * 2) != 0) {
        free(m->hashes);
        free(m->key_off);
        free(m->key_len);
        free(m->values);
        m->hashes = old.hashes;
        m->key_off = old.key_off;
        m->key_len = old.key_len;
        m->values = old.values;
        m->capacity = old.capacity;
        return -1;
    }
    size_t mask = m->capacity - 1;
    for (size_t j = 0; j < old.capacity; j++) {
        if (old.hashes[j] == 0) continue;
        size_t i = (size_t)old.hashes[j] & mask;
        while (m->hashes[i] != 0) i = (i + 1) & mask;
        m->hashes[i] = old.hashes[j];
        m->key_off[i] = old.key_off[j];
        m->key_len[i] = old.key_len[j];
        m->values[i] = old.values[j];
    }
    free(old.hashes);
    free(old.key_off);
    free(old.key_len);
    free(old.values);
    return 0;
}

int di_bytes_map_put(di_bytes_map *m, const void *key, size_t len, int32_t value)
{
    uint64_t h = bytes_hash(key, len);
    size_t i = bytes_map_find(m, h, key, len);
    if (m->hashes[i] != 0) return 1;
    if ((m->count + 1) * 2 > m->capacity) {
        if (bytes_map_grow(m) != 0) return -1;
        i = bytes_map_find(m, h, key, len);
    }
    if (m->pool_len + len > UINT32_MAX) return -1;
    if (m->pool_len + len > m->pool_cap) {
        size_t cap = m->pool_cap ? m->pool_cap : 4096;
        while (cap < m->pool_len + len) cap *= 2;
        uint8_t *pool = realloc(m->pool, cap);
        if (!pool) return -1;
        m->pool = pool;
        m->pool_cap = cap;
    }
    if (len) memcpy(m->pool + m->pool_len, key, len);
    m->hashes[i] = h;
    m->key_off[i] = (uint32_t)m->pool_len;
    m->key_len[i] = (uint32_t)len;
    m->values[i] = value;
    m->pool_len += len;
    m->count++;
    return 0;
}

int32_t di_bytes_map_get(const di_bytes_map *m, const void *key, size_t len)
{
    if (m->capacity == 0) return -1;
    size_t i = bytes_map_find(m, bytes_hash(key, len), key, len);
    return m->hashes[i] ? m->values[i] : -1;
}

static uint64_t u64_hash(uint64_t k)
{
    /* splitmix64's finaliser: a cheap, well-mixed hash for integer keys */
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebULL;
    k ^= k >> 31;
    return k;
}

static int u64_map_alloc(di_u64_map *m, size_t cap)
{
    m->keys = malloc(cap * sizeof *m->keys);
    m->values = malloc(cap * sizeof *m->values);
    m->capacity = cap;
    if (!m->keys || !m->values) return -1;
    memset(m->keys, 0xFF, cap * sizeof *m->keys);
    return 0;
}

int di_u64_map_init(di_u64_map *m, size_t expected)
{
    memset(m, 0, sizeof *m);
    if (u64_map_alloc(m, capacity_for(expected)) != 0) {
        di_u64_map_free(m);
        return -1;
    }
    return 0;
}

void di_u64_map_free(di_u64_map *m)
{
    free(m->keys);
    free(m->values);
    memset(m, 0, sizeof *m);
}

static size_t u64_find(const di_u64_map *m, uint64_t key)
{
    size_t mask = m->capacity - 1;
    size_t i = (size_t)u64_hash(key) & mask;
    while (m->keys[i] != UINT64_MAX && m->keys[i] != key) i = (i + 1) & mask;
    return i;
}

int di_u64_map_put(di_u64_map *m, uint64_t key, uint64_t value)
{
    size_t i = u64_find(m, key);
    if (m->keys[i] == key) return 1;
    if ((m->count + 1) * 2 > m->capacity) {
        di_u64_map old = *m;
        if (u64_map_alloc(m, old.capacity * 2) != 0) {
            free(m->keys);
            free(m->values);
            *m = old;
            return -1;
        }
        m->count = old.count;
        for (size_t j = 0; j < old.capacity; j++) {
            if (old.keys[j] == UINT64_MAX) continue;
            size_t k = u64_find(m, old.keys[j]);
            m->keys[k] = old.keys[j];
            m->values[k] = old.values[j];
        }
        free(old.keys);
        free(old.values);
        i = u64_find(m, key);
    }
    m->keys[i] = key;
    m->values[i] = value;
    m->count++;
    return 0;
}

int di_u64_map_get(const di_u64_map *m, uint64_t key, uint64_t *value)
{
    size_t i = u64_find(m, key);
    if (m->keys[i] != key) return 0;
    *value = m->values[i];
    return 1;
}
