/* The tiled attention's shared parts (attention_flash.c's paths and
 * attention_flash_rows512.c's AVX-512 prefill tiles): the job a call hands
 * its tasks, the tiles' rows and queries, a segment's softmax state, a
 * chunk's rows staged in f32, and the fold of segments into a row's output.
 * Internal to those two files; attention_flash.c's header describes the
 * arithmetic. Its inline parts: x86-64 with GCC or Clang. */
#ifndef DI_BACKEND_CPU_ATTENTION_FLASH_H
#define DI_BACKEND_CPU_ATTENTION_FLASH_H

#include <stddef.h>
#include <stdint.h>

/* Where AVX-512 runs, a prefill's task: one KV head and the job's
 * group_tiles tiles (attention_flash_rows512.c); ctx is the call's flash_job. */
void cpu_flash_group_task(void *ctx, int64_t task, int thread);

/* The floats of a thread's workspace cpu_flash_group_task takes at
 * head_dim hd (a multiple of 16 floats). */
size_t cpu_flash_group_ws_floats(ptrdiff_t hd);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include <math.h>
#    include <string.h>

#    include "backend/cpu/attention.h"
#    include "backend/cpu/avx2_math.h"

/* FLASH_SEGMENT: keys per segment. A row's keys are split at multiples of it
 * and each segment's softmax state folded into the row's in order, in every
 * mode, so a row's result depends on its own context length alone.
 * GROUP_TILES: the most tiles a task of cpu_flash_group_task takes (the
 * job's group_tiles: this many where the threads have tasks enough,
 * GROUP_TILES / 2 where they would not). */
enum { CHUNK = 16, TILE_ROWS = 16, FLASH_SEGMENT = 256, GROUP_TILES = 8 };

/* Row p of the sequence's K or V pool for KV head g in layer l. */
static inline const char *kv_row(const cpu_kv_cache *c, const void *pool, const cpu_kv_seq *s,
                                 int l, int g, int64_t p)
{
    return (const char *)pool + cpu_kv_block_offset(c, l, s->block_table[p / c->block_size]) +
           (size_t)(p % c->block_size) * c->row_bytes + (size_t)g * c->head_bytes;
}

/* Rows [p0, p0 + len) of the sequence in layer l, each row's first byte of
 * KV head g: K into k[], V into v[]. A block's rows lie row_bytes apart, so
 * one block-table lookup a block. */
static inline void chunk_rows(const cpu_kv_cache *c, const cpu_kv_seq *s, int l, int g, int64_t p0,
                              int len, const char **k, const char **v)
{
    for (int i = 0; i < len;) {
        const char *kb = kv_row(c, c->k, s, l, g, p0 + i), *vb = kv_row(c, c->v, s, l, g, p0 + i);
        for (int64_t r = 0, in_block = c->block_size - (p0 + i) % c->block_size;
             r < in_block && i < len; r++, i++) {
            k[i] = kb + (size_t)r * c->row_bytes;
            v[i] = vb + (size_t)r * c->row_bytes;
        }
    }
}

typedef struct flash_job {
    const cpu_kv_cache *c;
    const cpu_kv_seq *s;
    int layer, n_head, group, tile_tokens;
    const float *q; /* rotated where the cache is (kv_cache.h) */
    int64_t pos0, n_tokens, n_tiles, n_seg;
    float scale;
    float *out;
    float *part;          /* split mode: per (tile, KV head, segment) a state (below) */
    int wide;             /* a prefill's tiles on AVX-512 (cpu_flash_group_task) */
    int group_tiles;      /* tiles a cpu_flash_group_task task, at most GROUP_TILES */
    int in_place;         /* flash_segment's tiles read the cache in place
                           * (flash_segment_cache): 1 AVX-512, 2 AVX2 (f16, tiles of
                           * up to IN_PLACE_AVX2_ROWS) */
    cpu_threadpool *pool; /* its scratch: each thread's workspace (cpu_attention_scratch_bytes) */
} flash_job;

/* A tile's rows' softmax state over a segment of keys, row r at
 * st + r (head_dim + STATE_O): the running max m, the running sum l, then
 * from STATE_O on the unnormalized output O[head_dim] (64-byte aligned where
 * st is and head_dim is a multiple of 16: the AVX-512 steps' loads and stores
 * of O never split a cache line, measured 1.1-1.2x on the prefill tiles'
 * chunk step). */
enum { STATE_O = 16 };

static inline ptrdiff_t state_stride(const flash_job *j)
{
    return j->c->head_dim + STATE_O;
}

/* A tile's rows: the first token, the token past the last, the row count. */
static inline int tile_rows(const flash_job *j, int64_t tile, int64_t *t0, int64_t *t1)
{
    *t0 = tile * j->tile_tokens;
    *t1 = *t0 + j->tile_tokens < j->n_tokens ? *t0 + j->tile_tokens : j->n_tokens;
    return (int)(*t1 - *t0) * j->group;
}

/* Row r of KV head g's tile from token t0: its query (r = token offset x
 * group + head in the group) and the keys it sees, [0, *limit). */
static inline const float *row_query(const flash_job *j, int g, int64_t t0, int r, int64_t *limit)
{
    int64_t t = t0 + r / j->group;
    *limit = j->pos0 + t + 1;
    return j->q + (t * j->n_head + (int64_t)g * j->group + r % j->group) * j->c->head_dim;
}

/* A segment's state for a tile's rows before its first key: m = -inf, l = 0,
 * O = 0. */
static inline void state_init(const flash_job *j, int rows, float *st)
{
    const ptrdiff_t stride = state_stride(j);
    memset(st, 0, (size_t)rows * (size_t)stride * sizeof *st);
    for (int r = 0; r < rows; r++) st[r * stride] = -INFINITY;
}

/* Keys [p0, p0 + len) of KV heads from g (ld / head_dim of them, side by side
 * in a cache row) as f32 rows ld floats apart: K into kr, V into v; K's rows
 * past len zero (finite, then masked; V's are never read). */
AVX2 static inline void stage_chunk(const flash_job *j, int g, int64_t p0, int len, ptrdiff_t ld,
                                    float *kr, float *v)
{
    const cpu_kv_cache *c = j->c;
    const char *krow[CHUNK], *vrow[CHUNK];
    chunk_rows(c, j->s, j->layer, g, p0, len, krow, vrow);
    for (int i = 0; i < len; i++) {
        load_kv_row(c->dtype, krow[i], ld, kr + i * ld);
        load_kv_row(c->dtype, vrow[i], ld, v + i * ld);
    }
    if (len < CHUNK) memset(kr + len * ld, 0, (size_t)((CHUNK - len) * ld) * sizeof *kr);
}

/* Fold one segment's state (m, l, o) into a row's running (*M, *L, O), in
 * segment order: M' = max(M, m), O = O e^(M - M') + o e^(m - M'), L alike. */
AVX2 static inline void merge_segment(ptrdiff_t hd, float *M, float *L, float *O, const float *seg)
{
    const float m = seg[0], l = seg[1], *o = seg + STATE_O;
    if (m == -INFINITY) return; /* no key of the row in the segment, or only -inf: l, o 0 */
    if (*M == -INFINITY) {
        *M = m, *L = l;
        memcpy(O, o, (size_t)hd * sizeof *O);
        return;
    }
    float mx = *M > m ? *M : m, a = expf(*M - mx), b = expf(m - mx);
    *L = *L * a + l * b;
    *M = mx;
    __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
    for (ptrdiff_t d = 0; d < hd; d += 8)
        _mm256_storeu_ps(O + d, _mm256_fmadd_ps(_mm256_loadu_ps(o + d), bv,
                                                _mm256_mul_ps(_mm256_loadu_ps(O + d), av)));
}

/* The tile's rows' output, O / L. */
static inline void write_rows(const flash_job *j, int g, int64_t t0, int rows, const float *L,
                              const float *O)
{
    const ptrdiff_t hd = j->c->head_dim;
    for (int r = 0; r < rows; r++) {
        int64_t t = t0 + r / j->group;
        int h = g * j->group + r % j->group;
        float *dst = j->out + (t * j->n_head + h) * hd;
        float inv = 1.0f / L[r];
        for (ptrdiff_t d = 0; d < hd; d++) dst[d] = O[r * hd + d] * inv;
        if (j->c->rotated) cpu_kv_rotate(dst, hd); /* a sum of rotated values, rotated back */
    }
}

/* Keys [k0, k1) of segment seg for a tile whose last token sees n keys. */
static inline void segment_keys(int64_t seg, int64_t n, int64_t *k0, int64_t *k1)
{
    *k0 = seg * FLASH_SEGMENT;
    *k1 = *k0 + FLASH_SEGMENT < n ? *k0 + FLASH_SEGMENT : n;
}

#endif

#endif
