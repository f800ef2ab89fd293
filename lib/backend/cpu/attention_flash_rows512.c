/* A prefill's attention tiles where AVX-512 runs (attention_flash.c's
 * header gives the arithmetic; avx512_rows.h the chunk step): a task is one
 * KV head and up to GROUP_TILES tiles of up to 16 rows (query heads x
 * tokens), a row in each lane. Each chunk's K and V rows are converted to f32 once for
 * the task's tiles, then rows_chunk512 takes up to ROWS512_TILES of them at a
 * time, each key's values broadcast once for all of those. Every row's
 * result is the AVX2 step's bit for bit (tests/unit/test_cpu_kernels.c).
 * Roofline per task over n keys: reads 2 n head_dim cache elements once for
 * its tiles; 4 n head_dim FLOPs a row. */
#include "backend/cpu/attention_flash.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#    include "backend/cpu/avx512_rows.h"

_Static_assert((int)CHUNK == (int)ROWS512_KEYS, "one chunk of keys for both layouts");

/* stage_chunk for the AVX-512 tiles (ld = head_dim, a multiple of 16; kr and v
 * 64-byte aligned): an f16 cache's rows converted 16 values an instruction,
 * the others as stage_chunk. */
AVX512 static void stage_chunk512(const flash_job *j, int g, int64_t p0, int len, ptrdiff_t ld,
                                  float *kr, float *v)
{
    const cpu_kv_cache *c = j->c;
    if (c->dtype != MODEL_DTYPE_F16) {
        stage_chunk(j, g, p0, len, ld, kr, v);
        return;
    }
    const char *krow[CHUNK], *vrow[CHUNK];
    chunk_rows(c, j->s, j->layer, g, p0, len, krow, vrow);
    for (int i = 0; i < len; i++) {
        const uint16_t *kh = (const uint16_t *)krow[i], *vh = (const uint16_t *)vrow[i];
        for (ptrdiff_t e = 0; e < ld; e += 16) {
            _mm512_store_ps(kr + i * ld + e,
                            _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(kh + e))));
            _mm512_store_ps(v + i * ld + e,
                            _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(vh + e))));
        }
    }
    if (len < CHUNK) memset(kr + len * ld, 0, (size_t)((CHUNK - len) * ld) * sizeof *kr);
}

/* A tile of one head's rows for flash_segment_rows512: its queries
 * transposed (qt [hd][16], zero past `rows`), the keys each row sees, the
 * segment's state st (flash_segment's layout) and the rows' running max and
 * sum. */
typedef struct rows_tile {
    int64_t t0, limit[TILE_ROWS];
    int rows;
    float *qt, *st;
    _Alignas(64) float m[16], l[16];
} rows_tile;

static void rows_tile_init(const flash_job *j, int g, int64_t tile, float *qt, float *st,
                           rows_tile *t)
{
    int64_t t1;
    t->rows = tile_rows(j, tile, &t->t0, &t1);
    t->qt = qt, t->st = st;
    const float *q[TILE_ROWS];
    for (int r = 0; r < t->rows; r++) q[r] = row_query(j, g, t->t0, r, &t->limit[r]);
    rows_transpose_queries(q, t->rows, j->c->head_dim, qt);
}

/* flash_segment for nt tiles of head g with a row in each AVX-512 lane
 * (avx512_rows.h): each chunk's K and V rows converted once (ld = head_dim)
 * for all the tiles, into kv (the thread's workspace: [2][CHUNK][head_dim]
 * f32, then rows_chunk512's ROWS512_SCORES, 64-byte aligned), then
 * rows_chunk512 for the tiles that see a key of it, ROWS512_TILES at a time.
 * A tile whose rows see none of [k0, k1) keeps the initial state (m = -inf:
 * no fold). */
AVX512 static void flash_segment_rows512(const flash_job *j, int g, rows_tile *tiles, int nt,
                                         int64_t k0, int64_t k1, float *kv)
{
    const cpu_kv_cache *c = j->c;
    const ptrdiff_t hd = c->head_dim, stride = state_stride(j);
    float *kr = kv, *v = kv + CHUNK * hd, *sc = kv + (ptrdiff_t)2 * CHUNK * hd;
    const float *krow[CHUNK];
    for (int i = 0; i < CHUNK; i++) krow[i] = kr + i * hd;
    for (int i = 0; i < nt; i++) {
        state_init(j, tiles[i].rows, tiles[i].st);
        _mm512_store_ps(tiles[i].m, _mm512_set1_ps(-INFINITY));
        _mm512_store_ps(tiles[i].l, _mm512_setzero_ps());
    }
    for (int64_t p0 = k0; p0 < k1; p0 += CHUNK) {
        const int len = k1 - p0 < CHUNK ? (int)(k1 - p0) : CHUNK;
        stage_chunk512(j, g, p0, len, hd, kr, v);
        /* the tiles that see a key of the chunk */
        _Alignas(64) int valid[GROUP_TILES][16];
        const int *vt[GROUP_TILES];
        const float *qt[GROUP_TILES];
        float *o[GROUP_TILES];
        rows_tile *seen[GROUP_TILES];
        __m512 m[GROUP_TILES], l[GROUP_TILES];
        int na = 0;
        for (int i = 0; i < nt; i++) {
            rows_tile *t = &tiles[i];
            int any = 0;
            for (int r = 0; r < 16; r++) {
                int64_t lim = r < t->rows ? t->limit[r] - p0 : 0;
                valid[na][r] = lim <= 0 ? 0 : lim < len ? (int)lim : len;
                any |= valid[na][r];
            }
            if (!any) continue;
            vt[na] = valid[na], qt[na] = t->qt, o[na] = t->st + STATE_O, seen[na] = t;
            m[na] = _mm512_load_ps(t->m), l[na] = _mm512_load_ps(t->l);
            na++;
        }
        for (int a = 0; a < na; a += ROWS512_TILES) {
            const int nb = na - a < ROWS512_TILES ? na - a : ROWS512_TILES;
            rows_chunk512(krow, hd, qt + a, nb, j->scale, vt + a, m + a, l + a, o + a, stride, v,
                          hd, hd, sc);
        }
        for (int i = 0; i < na; i++) {
            _mm512_store_ps(seen[i]->m, m[i]);
            _mm512_store_ps(seen[i]->l, l[i]);
        }
    }
    for (int i = 0; i < nt; i++)
        for (int r = 0; r < tiles[i].rows; r++)
            tiles[i].st[r * stride] = tiles[i].m[r], tiles[i].st[r * stride + 1] = tiles[i].l[r];
}

/* Where AVX-512 runs, a prefill's task: one KV head and j->group_tiles tiles,
 * every segment in turn (each chunk's keys converted once for the tiles, then
 * rows_chunk512 for up to ROWS512_TILES of them at a time: eight tiles a
 * conversion, not four, measured 1.10-1.11x on the attention op alone at
 * 4,096 keys and 1 thread, 1.19-1.30x at 2; bench/README.md, session 53),
 * each tile's states folded as flash_task folds them: the same results. Its
 * workspace (the thread's): group_ws_floats (a multiple of 16 floats), each
 * tile's queries transposed, segment state and output, then
 * flash_segment_rows512's K and V rows and rows_chunk512's scores
 * (cpu_flash_group_ws_floats). */

/* Each tile's queries transposed, segment state and output. */
static size_t group_ws_floats(ptrdiff_t hd)
{
    return (size_t)GROUP_TILES * (size_t)(16 * hd + TILE_ROWS * (hd + STATE_O) + TILE_ROWS * hd);
}

AVX512 void cpu_flash_group_task(void *ctx, int64_t task, int thread)
{
    const flash_job *j = ctx;
    const ptrdiff_t hd = j->c->head_dim, stride = state_stride(j);
    const int g = (int)(task % j->c->n_head_kv);
    const int64_t first = task / j->c->n_head_kv * j->group_tiles;
    const int nt = j->n_tiles - first < j->group_tiles ? (int)(j->n_tiles - first) : j->group_tiles;
    float *ws = cpu_threadpool_scratch(j->pool, thread);
    rows_tile tiles[GROUP_TILES];
    float M[GROUP_TILES][TILE_ROWS], L[GROUP_TILES][TILE_ROWS], *O[GROUP_TILES];
    for (int i = 0; i < nt; i++) {
        float *base =
            ws + (size_t)i * (size_t)(16 * hd + TILE_ROWS * (hd + STATE_O) + TILE_ROWS * hd);
        rows_tile_init(j, g, first + i, base, base + 16 * hd, &tiles[i]);
        O[i] = base + 16 * hd + TILE_ROWS * (hd + STATE_O);
        for (int r = 0; r < TILE_ROWS; r++) M[i][r] = -INFINITY, L[i][r] = 0; /* (every row) */
        memset(O[i], 0, (size_t)tiles[i].rows * (size_t)hd * sizeof *O[i]);
    }
    int64_t t0, t1;
    tile_rows(j, first + nt - 1, &t0, &t1);
    const int64_t n = j->pos0 + t1; /* the last tile's last token sees the most keys */
    for (int64_t seg = 0; seg * FLASH_SEGMENT < n; seg++) {
        int64_t k0, k1;
        segment_keys(seg, n, &k0, &k1);
        flash_segment_rows512(j, g, tiles, nt, k0, k1, ws + group_ws_floats(hd));
        for (int i = 0; i < nt; i++)
            for (int r = 0; r < tiles[i].rows; r++)
                merge_segment(hd, &M[i][r], &L[i][r], O[i] + r * hd, tiles[i].st + r * stride);
    }
    for (int i = 0; i < nt; i++) write_rows(j, g, tiles[i].t0, tiles[i].rows, L[i], O[i]);
}

size_t cpu_flash_group_ws_floats(ptrdiff_t hd)
{
    return group_ws_floats(hd) + (size_t)(hd * 2 * CHUNK) + ROWS512_SCORES;
}

#endif
