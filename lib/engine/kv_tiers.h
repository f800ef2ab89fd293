/* The prefix cache's tiers below the working KV cache: a host tier holding
 * blocks evicted from the cache compressed with zstd, and a disk tier of
 * block files under a directory the host names, which survives restarts and
 * may be shared by engines opening the same directory.
 *
 * A block moves whole, as the backend lays it out (model_kv_block_bytes),
 * under its prefix key (model/kv_pool.h: the key names every token up to the
 * block's end and, through its seed, the model and cache dtype). Copies in
 * (kv_tiers_put) cost the caller one memcpy; compression, file writes,
 * reads, decompression and checks run on the tiers' own thread, so a step
 * never waits on them. A restored block is checked (XXH3-64 of its contents,
 * recorded when it was stored) before it is handed out.
 *
 * Disk layout: DIR/<fingerprint, 16 hex digits>/<key, 16 hex digits>.kvb, each
 * file a 64-byte header (magic "DIKVBLK1", format version, fingerprint, key,
 * contents size, compressed size, XXH3-64 of the contents, XXH3-64 of the
 * header before it) and the zstd frame. A file is written under a temporary
 * name and renamed into place, so a reader sees a whole file or none (kill -9
 * during a write leaves only a temporary file, removed by the next engine
 * that opens the directory once it is over a second old and its pid is not
 * running, or ten minutes old); files are never
 * modified, so engines share a directory without a lock. A file that is
 * truncated, corrupt, of another version or for another model is skipped
 * with a log line (and removed when corrupt). A directory that cannot be
 * created or written, or a full disk, turns the disk tier off with a log
 * line; requests never fail for it. Over its byte budget, the oldest files
 * (by modification time) are removed.
 *
 * Thread-safety: every function may be called from any thread; the log
 * function is called from the tiers' thread and the callers'. */
#ifndef DI_ENGINE_KV_TIERS_H
#define DI_ENGINE_KV_TIERS_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"

typedef struct kv_tiers kv_tiers;

typedef struct kv_tiers_options {
    size_t block_bytes;   /* the contents of one block */
    uint64_t fingerprint; /* model_kv_fingerprint_of */
    int64_t host_bytes;   /* compressed bytes the host tier keeps; 0: no host tier */
    const char *disk_dir; /* NULL: no disk tier; created when missing */
    int64_t disk_bytes;   /* bytes of files the disk tier keeps; 0: 4 GiB */
    void (*log)(void *user, di_log_level level, const char *message); /* may be NULL */
    void *log_user;
} kv_tiers_options;

/* Start the tiers' thread. A disk directory that cannot be used is not an
 * error (a log line; no disk tier). Errors: DI_ERR_OUT_OF_MEMORY,
 * DI_ERR_BACKEND (no thread). */
di_status kv_tiers_create(const kv_tiers_options *o, kv_tiers **out, di_error **err);
/* Finish the writes queued, then stop. NULL is a no-op. */
void kv_tiers_destroy(kv_tiers *t);

enum {
    KV_TIER_HOST = 1, /* an evicted block: keep it in memory */
    KV_TIER_DISK = 2  /* a block computed: write it to disk (when not there yet) */
};
/* Queue a copy of data (block_bytes) for the tiers in `where`. Never blocks
 * on I/O; dropped (and counted) when 256 MiB of blocks (at least 64) wait
 * already. */
void kv_tiers_put(kv_tiers *t, uint64_t key, const void *data, int where);

/* Whether the tiers may hold the block: 1 (host tier, a put of it still
 * queued or being written, a fetch of it, or a file named by the key on
 * disk), else 0. A fetch asked after a put is served after it: the queue is
 * FIFO. Cheap: table lookups and at most one stat. */
int kv_tiers_has(kv_tiers *t, uint64_t key);
/* Ask for the block to be read, checked and made ready (idempotent). */
void kv_tiers_fetch(kv_tiers *t, uint64_t key);
/* 1: the block is ready and copied to dst (block_bytes), and forgotten here;
 * 0: still being read; -1: not fetched, or it could not be restored. */
int kv_tiers_take(kv_tiers *t, uint64_t key, void *dst);
/* Drop the fetches of these keys, taken or not (a request that stopped
 * waiting for them, or ended): their slots and buffers are freed. */
void kv_tiers_forget(kv_tiers *t, const uint64_t *keys, size_t n);
/* Wait until a fetch completes or timeout_ms pass. */
void kv_tiers_wait(kv_tiers *t, int timeout_ms);
/* 1 when the disk tier is on. */
int kv_tiers_disk_on(kv_tiers *t);

typedef struct kv_tiers_stats {
    int64_t host_blocks, host_bytes;      /* kept now */
    int64_t disk_writes, disk_bytes;      /* written, and the files' bytes now */
    int64_t restored_host, restored_disk; /* handed out by kv_tiers_take */
    int64_t rejected;                     /* files skipped: corrupt, truncated, foreign */
    int64_t dropped;                      /* puts dropped with the queue full */
} kv_tiers_stats;
void kv_tiers_get_stats(kv_tiers *t, kv_tiers_stats *out);

#endif
