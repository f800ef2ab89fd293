/* The KV cache's occupancy for hosts (deepinfer.h, di_engine_kv_cache_stats):
 * the counts the scheduler's worker publishes (sched_kv_stats), copied into the
 * caller's versioned struct as far as its struct_size reaches. */
#include <string.h>

#include "api/engine_internal.h"
#include "util/error.h"
#include "util/struct_size.h"

_Static_assert(sizeof(di_kv_cache_stats) ==
                   DI_STRUCT_SIZE_UNTIL(di_kv_cache_stats, prefill_tokens_total),
               "di_kv_cache_stats has no trailing padding");

/* The struct's first release ends at blocks_evicted_total. */
#define KV_STATS_MIN_SIZE DI_STRUCT_SIZE_UNTIL(di_kv_cache_stats, blocks_evicted_total)

/* The size the exported di_kv_cache_stats_init writes: the struct of the
 * release that added di_kv_cache_stats_init_size. Frozen: binaries compiled
 * before the di_kv_cache_stats_init macro pass a struct no larger, so a field
 * appended later must not change it (it names today's last field, not sizeof). */
#define KV_STATS_INIT_SIZE DI_STRUCT_SIZE_UNTIL(di_kv_cache_stats, prefill_tokens_total)
_Static_assert(KV_STATS_INIT_SIZE <= sizeof(di_kv_cache_stats),
               "di_kv_cache_stats_init's frozen size is a release of the struct");

DI_API void di_kv_cache_stats_init_size(di_kv_cache_stats *stats, size_t struct_size)
{
    di_struct_init(stats, struct_size); /* every field starts at 0 */
}

DI_API void(di_kv_cache_stats_init)(di_kv_cache_stats *stats)
{
    di_kv_cache_stats_init_size(stats, KV_STATS_INIT_SIZE);
}

DI_API di_status di_engine_kv_cache_stats(const di_engine *engine, di_kv_cache_stats *stats,
                                          di_error **err)
{
    if (!engine) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "engine: NULL");
    if (!stats) return di_error_set(err, DI_ERR_INVALID_ARGUMENT, "stats: NULL");
    if (stats->struct_size < KV_STATS_MIN_SIZE)
        return di_error_setf(err, DI_ERR_INVALID_ARGUMENT,
                             "stats->struct_size: %zu is smaller than the struct's first release "
                             "(%zu bytes; was it set with di_kv_cache_stats_init?)",
                             stats->struct_size, (size_t)KV_STATS_MIN_SIZE);
    sched_kv_stats k;
    sched_kv_stats_get(engine->sched, &k);
    di_kv_cache_stats v;
    di_kv_cache_stats_init(&v);
    v.block_tokens = MODEL_KV_BLOCK;
    v.blocks_total = k.blocks_total;
    v.blocks_used = k.blocks_used;
    v.blocks_cached = k.blocks_cached;
    v.blocks_free = k.blocks_free;
    v.tokens_used = k.tokens_used;
    v.running_requests = k.running_requests;
    v.prefix_cache_queries_total = k.prefix_queries;
    v.prefix_cache_hits_total = k.prefix_hits;
    v.blocks_evicted_total = k.blocks_evicted;
    v.prefill_tokens_total = k.prefill_tokens;
    /* A newer caller's fields past ours keep what it set; an older caller's
     * struct gets only the fields it has (struct_size itself stays). */
    size_t n = stats->struct_size < sizeof v ? stats->struct_size : sizeof v;
    memcpy((char *)stats + sizeof v.struct_size, (const char *)&v + sizeof v.struct_size,
           n - sizeof v.struct_size);
    return DI_OK;
}
