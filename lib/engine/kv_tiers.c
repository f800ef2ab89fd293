/* The prefix cache's host and disk tiers (kv_tiers.h). */
#include "engine/kv_tiers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "util/error.h"
#include "util/thread.h"

enum {
    HEADER = 64,
    VERSION = 1,
    MIN_QUEUED = 64,  /* puts waiting at most: 64 blocks, or 256 MiB when that is more */
    MAX_FETCHES = 512 /* fetches pending or ready at most */
};
static const char MAGIC[8] = {'D', 'I', 'K', 'V', 'B', 'L', 'K', '1'};

typedef struct job {
    struct job *next;
    struct job *pnext; /* a put's chain in `pending`, until it is done */
    uint64_t key;
    int where; /* KV_TIER_*, or 0: a fetch */
    unsigned char data[];
} job;

typedef struct host_entry {
    struct host_entry *hnext, *prev, *next; /* bucket chain; LRU list (head oldest) */
    uint64_t key, raw_hash;
    size_t len;
    unsigned char comp[];
} host_entry;

typedef struct fetch {
    uint64_t key;
    int state; /* 0 pending, 1 ready, -1 failed */
    int from_disk;
    unsigned char *buf;
} fetch;

struct kv_tiers {
    kv_tiers_options o;
    char *dir; /* DIR/<fingerprint> */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv, done_cv;
    int closing;
    job *head, *tail;
    int n_queued, max_queued;
    job **pending; /* puts queued or being written, by key: has() sees them at once */
    host_entry **buckets;
    size_t n_buckets;
    host_entry *lru_head, *lru_tail;
    fetch fetches[MAX_FETCHES];
    int n_fetches;
    int disk_on;
    kv_tiers_stats st;
    /* the thread's own */
    unsigned char *comp;
    size_t comp_cap;
    unsigned long long tmp_seq;
    uint64_t nonce; /* in temporary names: engines of one pid (or pid 1 in containers) differ */
};

static void tlog(kv_tiers *t, di_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void tlog(kv_tiers *t, di_log_level level, const char *fmt, ...)
{
    if (!t->o.log) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    t->o.log(t->o.log_user, level, msg);
}

/* ---- the host tier (under mu) ---- */

static host_entry **bucket(kv_tiers *t, uint64_t key)
{
    return &t->buckets[(key ^ (key >> 31)) & (t->n_buckets - 1)];
}

static host_entry *host_find(kv_tiers *t, uint64_t key)
{
    for (host_entry *e = *bucket(t, key); e; e = e->hnext)
        if (e->key == key) return e;
    return NULL;
}

/* ---- puts not done yet (under mu) ---- */

static job **pending_bucket(kv_tiers *t, uint64_t key)
{
    return &t->pending[(key ^ (key >> 31)) & (t->n_buckets - 1)];
}

static job *pending_find(kv_tiers *t, uint64_t key)
{
    for (job *j = *pending_bucket(t, key); j; j = j->pnext)
        if (j->key == key) return j;
    return NULL;
}

static void pending_remove(kv_tiers *t, job *j)
{
    job **pp = pending_bucket(t, j->key);
    while (*pp != j) pp = &(*pp)->pnext;
    *pp = j->pnext;
}

/* Drop the entry released longest ago (the list's head). */
static void host_evict_oldest(kv_tiers *t)
{
    host_entry *e = t->lru_head;
    t->lru_head = e->next;
    if (t->lru_head)
        t->lru_head->prev = NULL;
    else
        t->lru_tail = NULL;
    host_entry **pp = bucket(t, e->key);
    while (*pp != e) pp = &(*pp)->hnext;
    *pp = e->hnext;
    t->st.host_blocks--;
    t->st.host_bytes -= (int64_t)e->len;
    free(e);
}

static void host_insert(kv_tiers *t, uint64_t key, uint64_t raw_hash, const void *comp, size_t len)
{
    if ((int64_t)len > t->o.host_bytes || host_find(t, key)) return;
    while (t->st.host_bytes + (int64_t)len > t->o.host_bytes && t->lru_head) host_evict_oldest(t);
    host_entry *e = malloc(sizeof *e + len);
    if (!e) return;
    e->key = key;
    e->raw_hash = raw_hash;
    e->len = len;
    memcpy(e->comp, comp, len);
    host_entry **b = bucket(t, key);
    e->hnext = *b;
    *b = e;
    e->next = NULL;
    e->prev = t->lru_tail;
    if (t->lru_tail)
        t->lru_tail->next = e;
    else
        t->lru_head = e;
    t->lru_tail = e;
    t->st.host_blocks++;
    t->st.host_bytes += (int64_t)len;
}

/* ---- the disk tier (the thread's, except has) ---- */

static void file_path(const kv_tiers *t, uint64_t key, char *out, size_t n)
{
    snprintf(out, n, "%s/%016llx.kvb", t->dir, (unsigned long long)key);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The disk tier off, once, saying why. */
static void disk_off(kv_tiers *t, const char *what, int e)
{
    pthread_mutex_lock(&t->mu);
    int was = t->disk_on;
    t->disk_on = 0;
    pthread_mutex_unlock(&t->mu);
    if (was)
        tlog(t, DI_LOG_WARN, "prefix cache: disk tier off: %s %s: %s", what, t->dir, strerror(e));
}

static int mkdirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return errno;
            *p = '/';
        }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return errno;
    return 0;
}

typedef struct file_age {
    char name[32];
    time_t mtime;
    off_t size;
} file_age;

static int by_age(const void *a, const void *b)
{
    const file_age *x = a, *y = b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* Scan the directory: remove temporary files whose writer is gone (a
 * killed engine's), sum the block files; with `trim`, remove the oldest
 * until they take at most 90 % of the budget. */
static void disk_scan(kv_tiers *t, int trim)
{
    DIR *d = opendir(t->dir);
    if (!d) {
        disk_off(t, "cannot read", errno);
        return;
    }
    file_age *files = NULL;
    size_t n = 0, cap = 0;
    int64_t total = 0;
    char path[4200];
    for (struct dirent *de; (de = readdir(d));) {
        const char *nm = de->d_name;
        snprintf(path, sizeof path, "%s/%s", t->dir, nm);
        if (strncmp(nm, ".tmp-", 5) == 0) { /* .tmp-<pid>-<nonce>-<key>-<n> */
            /* A writer that is gone left it — its pid is not running here and
             * the file is over a second old (a pid of another namespace may be
             * live: its writes take milliseconds) — or it is ten minutes old. */
            char *end;
            long pid = strtol(nm + 5, &end, 10);
            struct stat sb;
            if (*end != '-' || stat(path, &sb) != 0) continue;
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            double age = (double)(now.tv_sec - sb.st_mtim.tv_sec) +
                         (double)(now.tv_nsec - sb.st_mtim.tv_nsec) * 1e-9;
            int gone = pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
            if ((gone && age > 1) || age > 600) unlink(path);
            continue;
        }
        size_t len = strlen(nm);
        struct stat sb;
        if (len != 20 || strcmp(nm + 16, ".kvb") != 0 || stat(path, &sb) != 0) continue;
        total += (int64_t)sb.st_size;
        if (!trim) continue;
        if (n == cap) {
            size_t c = cap ? 2 * cap : 256;
            file_age *p = realloc(files, c * sizeof *p);
            if (!p) break;
            files = p;
            cap = c;
        }
        memcpy(files[n].name, nm, len + 1); /* len is 20: checked above */
        files[n].mtime = sb.st_mtime;
        files[n++].size = sb.st_size;
    }
    closedir(d);
    if (trim && files && total > t->o.disk_bytes) {
        qsort(files, n, sizeof *files, by_age);
        for (size_t i = 0; i < n && total > t->o.disk_bytes / 10 * 9; i++) {
            snprintf(path, sizeof path, "%s/%s", t->dir, files[i].name);
            if (unlink(path) == 0) total -= (int64_t)files[i].size;
        }
    }
    free(files);
    pthread_mutex_lock(&t->mu);
    t->st.disk_bytes = total;
    pthread_mutex_unlock(&t->mu);
}

static void disk_write(kv_tiers *t, uint64_t key, uint64_t raw_hash, const void *comp, size_t len)
{
    char path[4200], tmp[4200];
    file_path(t, key, path, sizeof path);
    struct stat sb;
    if (stat(path, &sb) == 0) return; /* written already, by us or another engine */
    unsigned char h[HEADER] = {0};
    memcpy(h, MAGIC, 8);
    put_u32(h + 8, VERSION);
    put_u32(h + 12, HEADER);
    put_u64(h + 16, t->o.fingerprint);
    put_u64(h + 24, key);
    put_u64(h + 32, t->o.block_bytes);
    put_u64(h + 40, len);
    put_u64(h + 48, raw_hash);
    put_u64(h + 56, XXH3_64bits(h, 56));
    snprintf(tmp, sizeof tmp, "%s/.tmp-%ld-%016llx-%016llx-%llu", t->dir, (long)getpid(),
             (unsigned long long)t->nonce, (unsigned long long)key, ++t->tmp_seq);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno == EEXIST) return; /* another writer's name: its block, skipped */
        disk_off(t, "cannot write in", errno);
        return;
    }
    int ok = write(fd, h, HEADER) == HEADER && write(fd, comp, len) == (ssize_t)len;
    int e = errno;
    ok = (close(fd) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        e = ok ? errno : (e ? e : EIO);
        unlink(tmp);
        /* the temporary file vanished while the directory stays (a scan of
         * another engine took it): this block is skipped, the tier stays */
        struct stat db;
        if (ok && e == ENOENT && stat(t->dir, &db) == 0) return;
        disk_off(t, "cannot write in", e);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->st.disk_writes++;
    t->st.disk_bytes += HEADER + (int64_t)len;
    int over = t->st.disk_bytes > t->o.disk_bytes;
    pthread_mutex_unlock(&t->mu);
    if (over) disk_scan(t, 1);
}

/* Read and check the file of key into raw (block_bytes). 0, or -1 (absent,
 * or rejected with a log line). */
static int disk_read(kv_tiers *t, uint64_t key, unsigned char *raw)
{
    char path[4200];
    file_path(t, key, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat sb;
    const char *why = NULL;
    unsigned char h[HEADER];
    unsigned char *comp = NULL;
    size_t len = 0;
    if (fstat(fd, &sb) != 0 || sb.st_size < HEADER || read(fd, h, HEADER) != HEADER) {
        why = "truncated header";
    } else if (memcmp(h, MAGIC, 8) != 0 || get_u64(h + 56) != XXH3_64bits(h, 56)) {
        why = "not a block file, or a corrupt header";
    } else if (get_u32(h + 8) != VERSION || get_u32(h + 12) != HEADER) {
        why = "another format version";
    } else if (get_u64(h + 16) != t->o.fingerprint || get_u64(h + 24) != key ||
               get_u64(h + 32) != t->o.block_bytes) {
        why = "for another model, cache dtype or block";
    } else if ((len = (size_t)get_u64(h + 40)) != (size_t)(sb.st_size - HEADER)) {
        why = "truncated contents";
    } else if (!(comp = malloc(len ? len : 1)) || read(fd, comp, len) != (ssize_t)len) {
        why = "unreadable contents";
    } else {
        size_t got = ZSTD_decompress(raw, t->o.block_bytes, comp, len);
        if (ZSTD_isError(got) || got != t->o.block_bytes)
            why = "corrupt contents (zstd)";
        else if (XXH3_64bits(raw, got) != get_u64(h + 48))
            why = "corrupt contents (checksum)";
    }
    close(fd);
    free(comp);
    if (!why) return 0;
    tlog(t, DI_LOG_WARN, "prefix cache: skipping %s: %s", path, why);
    if (strncmp(why, "another", 7) != 0) unlink(path); /* never usable */
    pthread_mutex_lock(&t->mu);
    t->st.rejected++;
    pthread_mutex_unlock(&t->mu);
    return -1;
}

/* ---- the thread ---- */

static fetch *find_fetch(kv_tiers *t, uint64_t key)
{
    for (int i = 0; i < t->n_fetches; i++)
        if (t->fetches[i].key == key) return &t->fetches[i];
    return NULL;
}

static void run_fetch(kv_tiers *t, uint64_t key)
{
    unsigned char *raw = malloc(t->o.block_bytes);
    int state = -1, from_disk = 0;
    if (raw) {
        pthread_mutex_lock(&t->mu);
        host_entry *e = host_find(t, key);
        size_t len = e ? e->len : 0;
        uint64_t want = e ? e->raw_hash : 0;
        if (e && len <= t->comp_cap) memcpy(t->comp, e->comp, len);
        int disk = t->disk_on;
        pthread_mutex_unlock(&t->mu);
        if (e && len <= t->comp_cap) {
            size_t got = ZSTD_decompress(raw, t->o.block_bytes, t->comp, len);
            if (!ZSTD_isError(got) && got == t->o.block_bytes && XXH3_64bits(raw, got) == want)
                state = 1;
        }
        if (state != 1 && disk && disk_read(t, key, raw) == 0) {
            state = 1;
            from_disk = 1;
        }
    }
    pthread_mutex_lock(&t->mu);
    fetch *f = find_fetch(t, key);
    if (f && f->state == -2) { /* forgotten while it was read */
        *f = t->fetches[--t->n_fetches];
    } else if (f) {
        f->state = state;
        f->from_disk = from_disk;
        f->buf = state == 1 ? raw : NULL;
        if (state == 1) raw = NULL;
    }
    pthread_cond_broadcast(&t->done_cv);
    pthread_mutex_unlock(&t->mu);
    free(raw);
}

static void run_put(kv_tiers *t, job *j)
{
    uint64_t raw_hash = XXH3_64bits(j->data, t->o.block_bytes);
    size_t len = ZSTD_compress(t->comp, t->comp_cap, j->data, t->o.block_bytes, 1);
    if (ZSTD_isError(len)) return;
    if (j->where & KV_TIER_HOST) {
        pthread_mutex_lock(&t->mu);
        host_insert(t, j->key, raw_hash, t->comp, len);
        pthread_mutex_unlock(&t->mu);
    }
    pthread_mutex_lock(&t->mu);
    int disk = t->disk_on;
    pthread_mutex_unlock(&t->mu);
    if ((j->where & KV_TIER_DISK) && disk) disk_write(t, j->key, raw_hash, t->comp, len);
}

static void *tier_thread(void *arg)
{
    kv_tiers *t = arg;
    if (t->disk_on) disk_scan(t, 1);
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->head && !t->closing) pthread_cond_wait(&t->cv, &t->mu);
        job *j = t->head;
        if (!j) break; /* closing, and every queued write done */
        t->head = j->next;
        if (!t->head) t->tail = NULL;
        t->n_queued -= j->where != 0;
        pthread_mutex_unlock(&t->mu);
        if (j->where)
            run_put(t, j);
        else
            run_fetch(t, j->key);
        pthread_mutex_lock(&t->mu);
        if (j->where) pending_remove(t, j);
        free(j);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void enqueue(kv_tiers *t, job *j)
{
    j->next = NULL;
    if (t->tail)
        t->tail->next = j;
    else
        t->head = j;
    t->tail = j;
    pthread_cond_signal(&t->cv);
}

/* ---- the interface ---- */

di_status kv_tiers_create(const kv_tiers_options *o, kv_tiers **out, di_error **err)
{
    *out = NULL;
    kv_tiers *t = calloc(1, sizeof *t);
    if (!t) return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the cache tiers");
    t->o = *o;
    t->o.disk_dir = NULL;
    if (t->o.disk_bytes <= 0) t->o.disk_bytes = (int64_t)4 << 30;
    size_t by_bytes = ((size_t)256 << 20) / (o->block_bytes ? o->block_bytes : 1);
    t->max_queued = by_bytes > MIN_QUEUED ? (int)(by_bytes < 65536 ? by_bytes : 65536) : MIN_QUEUED;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t seed[3] = {(uint64_t)(uintptr_t)t, (uint64_t)now.tv_nsec, (uint64_t)now.tv_sec};
    t->nonce = XXH3_64bits(seed, sizeof seed);
    t->n_buckets = 1024;
    t->buckets = calloc(t->n_buckets, sizeof(host_entry *));
    t->pending = calloc(t->n_buckets, sizeof(job *));
    t->comp_cap = ZSTD_compressBound(o->block_bytes);
    t->comp = malloc(t->comp_cap);
    if (o->disk_dir) {
        size_t n = strlen(o->disk_dir) + 32;
        t->dir = malloc(n);
        if (t->dir)
            snprintf(t->dir, n, "%s/%016llx", o->disk_dir, (unsigned long long)o->fingerprint);
    }
    if (!t->buckets || !t->pending || !t->comp || (o->disk_dir && !t->dir)) {
        free(t->buckets);
        free(t->pending);
        free(t->comp);
        free(t->dir);
        free(t);
        return di_error_set(err, DI_ERR_OUT_OF_MEMORY, "out of memory for the cache tiers");
    }
    if (t->dir) {
        int e = mkdirs(t->dir);
        if (e == 0 && access(t->dir, W_OK | X_OK) != 0) e = errno;
        if (e == 0) {
            t->disk_on = 1;
            tlog(t, DI_LOG_INFO, "prefix cache: disk tier %s (at most %lld bytes)", t->dir,
                 (long long)t->o.disk_bytes);
        } else {
            tlog(t, DI_LOG_WARN, "prefix cache: no disk tier: cannot use %s: %s", t->dir,
                 strerror(e));
        }
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_cond_init(&t->done_cv, NULL);
    if (di_thread_create(&t->thread, tier_thread, t) != 0) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        pthread_cond_destroy(&t->done_cv);
        free(t->buckets);
        free(t->pending);
        free(t->comp);
        free(t->dir);
        free(t);
        return di_error_set(err, DI_ERR_BACKEND, "cannot start the cache tiers' thread");
    }
    *out = t;
    return DI_OK;
}

void kv_tiers_destroy(kv_tiers *t)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->closing = 1;
    /* pending fetches are of no use any more; queued writes still run */
    for (job **pp = &t->head; *pp;) {
        job *j = *pp;
        if (j->where == 0) {
            *pp = j->next;
            free(j);
        } else {
            pp = &j->next;
        }
    }
    t->tail = NULL;
    for (job *j = t->head; j; j = j->next) t->tail = j;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    for (host_entry *e = t->lru_head, *next; e; e = next) {
        next = e->next;
        free(e);
    }
    for (int i = 0; i < t->n_fetches; i++) free(t->fetches[i].buf);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    pthread_cond_destroy(&t->done_cv);
    free(t->buckets);
    free(t->pending);
    free(t->comp);
    free(t->dir);
    free(t);
}

void kv_tiers_put(kv_tiers *t, uint64_t key, const void *data, int where)
{
    pthread_mutex_lock(&t->mu);
    if (t->o.host_bytes <= 0) where &= ~KV_TIER_HOST;
    if (!t->disk_on) where &= ~KV_TIER_DISK;
    if (where & KV_TIER_HOST) {
        job *q = pending_find(t, key);
        if (host_find(t, key) || (q && (q->where & KV_TIER_HOST))) where &= ~KV_TIER_HOST;
    }
    int full = t->n_queued >= t->max_queued;
    if (where && full) t->st.dropped++;
    pthread_mutex_unlock(&t->mu);
    if (!where || full) return;
    job *j = malloc(sizeof *j + t->o.block_bytes);
    if (!j) return;
    j->key = key;
    j->where = where;
    memcpy(j->data, data, t->o.block_bytes);
    pthread_mutex_lock(&t->mu);
    t->n_queued++;
    job **pb = pending_bucket(t, key);
    j->pnext = *pb;
    *pb = j;
    enqueue(t, j);
    pthread_mutex_unlock(&t->mu);
}

int kv_tiers_has(kv_tiers *t, uint64_t key)
{
    pthread_mutex_lock(&t->mu);
    job *q = pending_find(t, key); /* a disk-only put with the disk tier off now lands nowhere */
    int disk = t->disk_on;
    int has = host_find(t, key) || find_fetch(t, key) || (q && ((q->where & KV_TIER_HOST) || disk));
    pthread_mutex_unlock(&t->mu);
    if (has || !disk) return has;
    char path[4200];
    file_path(t, key, path, sizeof path);
    struct stat sb;
    return stat(path, &sb) == 0;
}

void kv_tiers_fetch(kv_tiers *t, uint64_t key)
{
    job *j = malloc(sizeof *j);
    if (!j) return;
    j->key = key;
    j->where = 0;
    pthread_mutex_lock(&t->mu);
    fetch *f = find_fetch(t, key);
    if (f && f->state == -2) f->state = 0; /* forgotten while read: wanted again */
    if (!f && t->n_fetches == MAX_FETCHES) /* full: the ones read but never taken go */
        for (int i = t->n_fetches - 1; i >= 0; i--)
            if (t->fetches[i].state == 1 || t->fetches[i].state == -1) {
                free(t->fetches[i].buf);
                t->fetches[i] = t->fetches[--t->n_fetches];
            }
    if (f || t->n_fetches == MAX_FETCHES || t->closing) {
        pthread_mutex_unlock(&t->mu);
        free(j);
        return;
    }
    t->fetches[t->n_fetches++] = (fetch){key, 0, 0, NULL};
    enqueue(t, j);
    pthread_mutex_unlock(&t->mu);
}

void kv_tiers_forget(kv_tiers *t, const uint64_t *keys, size_t n)
{
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < n; i++) {
        fetch *f = find_fetch(t, keys[i]);
        if (!f || f->state == -2) continue;
        if (f->state == 0) { /* being read: dropped when the read ends */
            f->state = -2;
            continue;
        }
        free(f->buf);
        *f = t->fetches[--t->n_fetches];
    }
    pthread_mutex_unlock(&t->mu);
}

int kv_tiers_take(kv_tiers *t, uint64_t key, void *dst)
{
    pthread_mutex_lock(&t->mu);
    fetch *f = find_fetch(t, key);
    int state = f ? f->state : -1;
    if (state == -2) state = 0; /* forgotten, still being read: not for the taking */
    if (f && state != 0) {
        if (state == 1) {
            memcpy(dst, f->buf, t->o.block_bytes);
            free(f->buf);
            if (f->from_disk)
                t->st.restored_disk++;
            else
                t->st.restored_host++;
        }
        *f = t->fetches[--t->n_fetches];
    }
    pthread_mutex_unlock(&t->mu);
    return state;
}

void kv_tiers_wait(kv_tiers *t, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)timeout_ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&t->mu);
    int pending = 0;
    for (int i = 0; i < t->n_fetches; i++) pending |= t->fetches[i].state == 0;
    if (pending) pthread_cond_timedwait(&t->done_cv, &t->mu, &ts);
    pthread_mutex_unlock(&t->mu);
}

int kv_tiers_disk_on(kv_tiers *t)
{
    pthread_mutex_lock(&t->mu);
    int on = t->disk_on;
    pthread_mutex_unlock(&t->mu);
    return on;
}

void kv_tiers_get_stats(kv_tiers *t, kv_tiers_stats *out)
{
    pthread_mutex_lock(&t->mu);
    *out = t->st;
    pthread_mutex_unlock(&t->mu);
}
