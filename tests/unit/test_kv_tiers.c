/* The prefix cache's host and disk tiers (lib/engine/kv_tiers.h), alone and
 * through the engine: blocks come back bit-exact from memory and from disk
 * (after a restart too), bad files are skipped with a log line, an unusable
 * directory turns the disk tier off without failing anything, kill -9 during
 * writes leaves a directory the next engine opens cleanly, and an engine
 * restoring blocks gives the tokens an engine without any cache gives. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "deepinfer/deepinfer.h"
#include "engine/kv_tiers.h"

#include <xxhash.h>

#define TINY DI_FIXTURE_DIR "/model/qwen2-tied-f16"
#define DSV3 DI_FIXTURE_DIR "/model/dsv3-qlora-bf16"

enum { BLOCK_BYTES = 8192, FP = 0x5eed };

/* What the log said, for the checks. */
static char logged[8192];
static void on_log(void *user, di_log_level level, const char *message)
{
    (void)user;
    (void)level;
    size_t n = strlen(logged);
    if (n + strlen(message) + 2 < sizeof logged) {
        strcat(logged, message);
        strcat(logged, "\n");
    }
}

/* Block contents derived from the key: checkable after any restart. */
static void contents(uint64_t key, unsigned char *out)
{
    uint64_t x = key * 0x9e3779b97f4a7c15ULL + 1;
    for (int i = 0; i < BLOCK_BYTES; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (unsigned char)(i % 64 < 40 ? 0 : x); /* compressible, as f16 rows are */
    }
}

static kv_tiers *open_tiers(const char *dir, int64_t host_bytes, uint64_t fp)
{
    kv_tiers_options o = {BLOCK_BYTES, fp, host_bytes, dir, 0, on_log, NULL};
    kv_tiers *t = NULL;
    assert_int_equal(kv_tiers_create(&o, &t, NULL), DI_OK);
    return t;
}

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

/* Fetch key and wait for it: 1 with dst filled, or -1. */
static int restore(kv_tiers *t, uint64_t key, unsigned char *dst)
{
    kv_tiers_fetch(t, key);
    for (int i = 0; i < 2000; i++) {
        int got = kv_tiers_take(t, key, dst);
        if (got != 0) return got;
        kv_tiers_wait(t, 5);
    }
    fail_msg("restore of %llx never completed", (unsigned long long)key);
    return -1;
}

static void wait_stats(kv_tiers *t, int64_t host_blocks, int64_t disk_writes)
{
    kv_tiers_stats st;
    for (int i = 0; i < 2000; i++) {
        kv_tiers_get_stats(t, &st);
        if (st.host_blocks >= host_blocks && st.disk_writes >= disk_writes) return;
        sleep_ms(2);
    }
    fail_msg("the tiers' thread did not catch up");
}

static void make_dir(char *out, size_t n)
{
    snprintf(out, n, "/tmp/di-tiers-XXXXXX");
    assert_non_null(mkdtemp(out));
}

static void remove_tree(const char *path)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static void test_host_tier_round_trip_and_budget(void **state)
{
    (void)state;
    unsigned char want[BLOCK_BYTES], got[BLOCK_BYTES];
    kv_tiers *t = open_tiers(NULL, 64 * 1024, FP);
    assert_int_equal(kv_tiers_disk_on(t), 0);
    for (uint64_t k = 1; k <= 5; k++) {
        contents(k, want);
        kv_tiers_put(t, k, want, KV_TIER_HOST | KV_TIER_DISK);
    }
    wait_stats(t, 5, 0);
    for (uint64_t k = 1; k <= 5; k++) {
        assert_int_equal(kv_tiers_has(t, k), 1);
        assert_int_equal(restore(t, k, got), 1);
        contents(k, want);
        assert_memory_equal(got, want, BLOCK_BYTES);
    }
    assert_int_equal(kv_tiers_has(t, 99), 0);
    assert_int_equal(restore(t, 99, got), -1);
    /* over the budget the oldest go: 200 blocks of ~3 KB compressed in 64 KB */
    for (uint64_t k = 100; k < 300; k++) {
        contents(k, want);
        kv_tiers_put(t, k, want, KV_TIER_HOST);
        if (k % 32 == 0) sleep_ms(20); /* let the thread keep up */
    }
    for (int i = 0; i < 2000 && kv_tiers_has(t, 1); i++) sleep_ms(5);
    assert_int_equal(kv_tiers_has(t, 1), 0);
    kv_tiers_stats st;
    kv_tiers_get_stats(t, &st);
    assert_true(st.host_bytes <= 64 * 1024);
    assert_true(st.host_blocks > 5);
    assert_int_equal(st.restored_host, 5);
    kv_tiers_destroy(t);
}

/* A block put is there for has() and a fetch at once, while the thread
 * still has it queued: an engine that evicts a block and asks for it again a
 * moment later finds it (the fetch is served after the put). */
static void test_queued_puts_are_found_at_once(void **state)
{
    (void)state;
    unsigned char want[BLOCK_BYTES], got[BLOCK_BYTES];
    kv_tiers *t = open_tiers(NULL, 1 << 20, FP);
    for (uint64_t k = 1; k <= 48; k++) {
        contents(k, want);
        kv_tiers_put(t, k, want, KV_TIER_HOST);
        kv_tiers_put(t, k, want, KV_TIER_HOST); /* again: queued once */
    }
    for (uint64_t k = 1; k <= 48; k++) assert_int_equal(kv_tiers_has(t, k), 1);
    for (uint64_t k = 48; k >= 1; k--) {
        assert_int_equal(restore(t, k, got), 1);
        contents(k, want);
        assert_memory_equal(got, want, BLOCK_BYTES);
    }
    kv_tiers_stats st;
    kv_tiers_get_stats(t, &st);
    assert_int_equal(st.host_blocks, 48);
    assert_int_equal(st.restored_host, 48);
    kv_tiers_destroy(t);
}

static void test_disk_tier_survives_restart(void **state)
{
    (void)state;
    char dir[64];
    make_dir(dir, sizeof dir);
    unsigned char want[BLOCK_BYTES], got[BLOCK_BYTES];
    kv_tiers *t = open_tiers(dir, 0, FP);
    assert_int_equal(kv_tiers_disk_on(t), 1);
    for (uint64_t k = 1; k <= 20; k++) {
        contents(k, want);
        kv_tiers_put(t, k, want, KV_TIER_DISK);
    }
    kv_tiers_destroy(t); /* finishes the queued writes */
    t = open_tiers(dir, 0, FP);
    for (uint64_t k = 1; k <= 20; k++) {
        assert_int_equal(kv_tiers_has(t, k), 1);
        assert_int_equal(restore(t, k, got), 1);
        contents(k, want);
        assert_memory_equal(got, want, BLOCK_BYTES);
    }
    kv_tiers_stats st;
    kv_tiers_get_stats(t, &st);
    assert_int_equal(st.restored_disk, 20);
    kv_tiers_destroy(t);
    /* another model's engine sees none of them */
    t = open_tiers(dir, 0, FP + 1);
    assert_int_equal(kv_tiers_has(t, 1), 0);
    assert_int_equal(restore(t, 1, got), -1);
    kv_tiers_destroy(t);
    remove_tree(dir);
}

static void file_of(const char *dir, uint64_t fp, uint64_t key, char *out, size_t n)
{
    snprintf(out, n, "%s/%016llx/%016llx.kvb", dir, (unsigned long long)fp,
             (unsigned long long)key);
}

static void test_bad_files_are_skipped_with_a_log_line(void **state)
{
    (void)state;
    char dir[64], path[256], other[256];
    make_dir(dir, sizeof dir);
    unsigned char want[BLOCK_BYTES], got[BLOCK_BYTES];
    kv_tiers *t = open_tiers(dir, 0, FP);
    for (uint64_t k = 1; k <= 5; k++) {
        contents(k, want);
        kv_tiers_put(t, k, want, KV_TIER_DISK);
    }
    kv_tiers_destroy(t);
    /* 1: a flipped byte in the compressed contents */
    file_of(dir, FP, 1, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 100, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 100, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    /* 2: truncated */
    file_of(dir, FP, 2, path, sizeof path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size / 2), 0);
    /* 3: a file under another block's name */
    file_of(dir, FP, 3, path, sizeof path);
    file_of(dir, FP, 33, other, sizeof other);
    assert_int_equal(rename(path, other), 0);
    /* 4: not a block file at all */
    file_of(dir, FP, 4, path, sizeof path);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs("hello", f);
    fclose(f);
    logged[0] = 0;
    t = open_tiers(dir, 0, FP);
    assert_int_equal(restore(t, 1, got), -1);
    assert_non_null(strstr(logged, "corrupt contents"));
    assert_int_equal(restore(t, 2, got), -1);
    assert_non_null(strstr(logged, "truncated"));
    assert_int_equal(restore(t, 33, got), -1);
    assert_non_null(strstr(logged, "for another model"));
    assert_int_equal(restore(t, 4, got), -1);
    assert_non_null(strstr(logged, "truncated header"));
    /* the good one still restores; the corrupt ones are gone */
    assert_int_equal(restore(t, 5, got), 1);
    contents(5, want);
    assert_memory_equal(got, want, BLOCK_BYTES);
    file_of(dir, FP, 1, path, sizeof path);
    assert_int_not_equal(access(path, F_OK), 0);
    kv_tiers_stats st;
    kv_tiers_get_stats(t, &st);
    assert_int_equal(st.rejected, 4);
    kv_tiers_destroy(t);
    remove_tree(dir);
}

static void test_unusable_directory_turns_the_disk_tier_off(void **state)
{
    (void)state;
    char dir[64], path[128];
    make_dir(dir, sizeof dir);
    /* a directory under a regular file cannot be made */
    snprintf(path, sizeof path, "%s/file", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/file/cache", dir);
    logged[0] = 0;
    kv_tiers *t = open_tiers(path, 0, FP);
    assert_int_equal(kv_tiers_disk_on(t), 0);
    assert_non_null(strstr(logged, "no disk tier"));
    unsigned char data[BLOCK_BYTES];
    contents(1, data);
    kv_tiers_put(t, 1, data, KV_TIER_DISK);
    assert_int_equal(kv_tiers_has(t, 1), 0);
    kv_tiers_destroy(t);
    /* a directory that disappears while in use: the first write turns it off */
    snprintf(path, sizeof path, "%s/gone", dir);
    logged[0] = 0;
    t = open_tiers(path, 0, FP);
    assert_int_equal(kv_tiers_disk_on(t), 1);
    remove_tree(path); /* before or after the opening scan: either turns it off */
    kv_tiers_put(t, 1, data, KV_TIER_DISK);
    for (int i = 0; i < 5000 && kv_tiers_disk_on(t); i++) sleep_ms(2);
    assert_int_equal(kv_tiers_disk_on(t), 0);
    assert_non_null(strstr(logged, "disk tier off"));
    kv_tiers_destroy(t);
    /* a full disk: writes past a file-size limit fail (EFBIG) as on ENOSPC */
    snprintf(path, sizeof path, "%s/full", dir);
    logged[0] = 0;
    t = open_tiers(path, 0, FP);
    assert_int_equal(kv_tiers_disk_on(t), 1);
    struct rlimit old, small = {100, 100};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    kv_tiers_put(t, 2, data, KV_TIER_DISK);
    for (int i = 0; i < 5000 && kv_tiers_disk_on(t); i++) sleep_ms(2);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, was);
    assert_int_equal(kv_tiers_disk_on(t), 0);
    assert_non_null(strstr(logged, "disk tier off"));
    assert_int_equal(kv_tiers_has(t, 2), 0); /* nothing half-written is left to find */
    kv_tiers_destroy(t);
    remove_tree(dir);
}

/* A file of another format version is skipped, said, and left for the
 * engine that knows it. */
static void test_another_format_version_is_skipped(void **state)
{
    (void)state;
    char dir[64], path[256];
    make_dir(dir, sizeof dir);
    unsigned char data[BLOCK_BYTES], got[BLOCK_BYTES];
    contents(7, data);
    kv_tiers *t = open_tiers(dir, 0, FP);
    kv_tiers_put(t, 7, data, KV_TIER_DISK);
    kv_tiers_destroy(t);
    file_of(dir, FP, 7, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    unsigned char h[64];
    assert_int_equal(fread(h, 1, 64, f), 64);
    h[8] = 2; /* version 2, the header's checksum made to match */
    uint64_t sum = XXH3_64bits(h, 56);
    for (int i = 0; i < 8; i++) h[56 + i] = (unsigned char)(sum >> (8 * i));
    fseek(f, 0, SEEK_SET);
    assert_int_equal(fwrite(h, 1, 64, f), 64);
    fclose(f);
    logged[0] = 0;
    t = open_tiers(dir, 0, FP);
    assert_int_equal(restore(t, 7, got), -1);
    assert_non_null(strstr(logged, "another format version"));
    assert_int_equal(access(path, F_OK), 0);
    kv_tiers_destroy(t);
    remove_tree(dir);
}

/* A child writing blocks is killed with SIGKILL mid-way, several times; the
 * next opener removes the dead writer's temporary files, and every block file
 * left restores exactly. */
static void test_kill_9_during_writes_leaves_a_clean_directory(void **state)
{
    (void)state;
    char dir[64], sub[128];
    make_dir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/%016llx", dir, (unsigned long long)FP);
    for (int round = 0; round < 3; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            kv_tiers_options o = {BLOCK_BYTES, FP, 0, dir, 0, NULL, NULL};
            kv_tiers *t = NULL;
            if (kv_tiers_create(&o, &t, NULL) != DI_OK) _exit(2);
            unsigned char data[BLOCK_BYTES];
            for (uint64_t k = 1;; k++) {
                contents(k + (uint64_t)round * 100000, data);
                kv_tiers_put(t, k + (uint64_t)round * 100000, data, KV_TIER_DISK);
            }
        }
        sleep_ms(60 + 40 * round);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        assert_true(WIFSIGNALED(status));
    }
    sleep_ms(1100); /* a dead writer's temporary file goes once it is a second old */
    kv_tiers *t = open_tiers(dir, 0, FP);
    /* the scan runs on the tiers' thread: wait for the temporary files to go */
    int tmp_left = 1;
    for (int i = 0; i < 5000 && tmp_left; i++) {
        tmp_left = 0;
        DIR *d = opendir(sub);
        assert_non_null(d);
        for (struct dirent *de; (de = readdir(d));)
            tmp_left |= strncmp(de->d_name, ".tmp-", 5) == 0;
        closedir(d);
        if (tmp_left) sleep_ms(2);
    }
    assert_int_equal(tmp_left, 0);
    int n_files = 0;
    unsigned char want[BLOCK_BYTES], got[BLOCK_BYTES];
    DIR *d = opendir(sub);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d));) {
        unsigned long long key;
        if (sscanf(de->d_name, "%16llx.kvb", &key) != 1) continue;
        n_files++;
        assert_int_equal(restore(t, key, got), 1);
        contents(key, want);
        assert_memory_equal(got, want, BLOCK_BYTES);
    }
    closedir(d);
    assert_true(n_files > 0);
    kv_tiers_stats st;
    kv_tiers_get_stats(t, &st);
    assert_int_equal(st.rejected, 0);
    kv_tiers_destroy(t);
    remove_tree(dir);
}

/* Two engines of one process (or of pid 1 in two containers) writing the same
 * blocks into one directory: neither loses its disk tier. */
static void test_two_writers_of_one_pid_share_a_directory(void **state)
{
    (void)state;
    char dir[64];
    make_dir(dir, sizeof dir);
    unsigned char data[BLOCK_BYTES], got[BLOCK_BYTES];
    logged[0] = 0;
    kv_tiers *a = open_tiers(dir, 0, FP), *b = open_tiers(dir, 0, FP);
    for (uint64_t k = 1; k <= 200; k++) {
        contents(k, data);
        kv_tiers_put(a, k, data, KV_TIER_DISK);
        kv_tiers_put(b, k, data, KV_TIER_DISK);
    }
    kv_tiers_destroy(a);
    kv_tiers_destroy(b);
    assert_null(strstr(logged, "disk tier off"));
    kv_tiers *t = open_tiers(dir, 0, FP);
    for (uint64_t k = 1; k <= 200; k += 37) {
        assert_int_equal(restore(t, k, got), 1);
        contents(k, data);
        assert_memory_equal(got, data, BLOCK_BYTES);
    }
    kv_tiers_destroy(t);
    remove_tree(dir);
}

/* A fresh temporary file whose writer's pid is not running here (a writer in
 * another pid namespace) is left alone; an old one goes. */
static void test_fresh_temporary_files_of_other_writers_stay(void **state)
{
    (void)state;
    char dir[64], sub[128], fresh[256], old[256];
    make_dir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/%016llx", dir, (unsigned long long)FP);
    assert_int_equal(mkdir(sub, 0755), 0);
    /* pid 4194304 is past Linux's pid_max: never running here */
    snprintf(fresh, sizeof fresh, "%s/.tmp-4194304-0-1-1", sub);
    snprintf(old, sizeof old, "%s/.tmp-4194304-0-2-1", sub);
    FILE *f = fopen(fresh, "w");
    assert_non_null(f);
    fclose(f);
    f = fopen(old, "w");
    assert_non_null(f);
    fclose(f);
    struct timespec times[2] = {{time(NULL) - 5, 0}, {time(NULL) - 5, 0}};
    assert_int_equal(utimensat(AT_FDCWD, old, times, 0), 0);
    kv_tiers *t = open_tiers(dir, 0, FP);
    for (int i = 0; i < 5000 && access(old, F_OK) == 0; i++) sleep_ms(2);
    assert_int_not_equal(access(old, F_OK), 0);
    assert_int_equal(access(fresh, F_OK), 0);
    kv_tiers_destroy(t);
    remove_tree(dir);
}

/* Fetches nobody takes do not use up the table: failed and forgotten ones go,
 * and a block stored afterwards still restores. */
static void test_fetches_never_taken_do_not_fill_the_table(void **state)
{
    (void)state;
    unsigned char data[BLOCK_BYTES], got[BLOCK_BYTES];
    kv_tiers *t = open_tiers(NULL, 1 << 20, FP);
    contents(5, data);
    kv_tiers_put(t, 5, data, KV_TIER_HOST);
    contents(6, data);
    kv_tiers_put(t, 6, data, KV_TIER_HOST);
    wait_stats(t, 2, 0);
    kv_tiers_fetch(t, 6); /* read, then forgotten (or forgotten while it is read) */
    for (uint64_t k = 1000; k < 2000; k++) kv_tiers_fetch(t, k); /* absent: they fail */
    for (int i = 0; i < 200; i++) kv_tiers_wait(t, 5);
    kv_tiers_forget(t, (uint64_t[]){6}, 1);
    /* A loaded machine may still be reading it: then take says 0 until the
     * read ends and the forgotten fetch goes; never 1. */
    int taken = 0;
    for (int i = 0; i < 2000 && (taken = kv_tiers_take(t, 6, got)) == 0; i++) kv_tiers_wait(t, 5);
    assert_int_equal(taken, -1);
    assert_int_equal(restore(t, 5, got), 1);
    contents(5, data);
    assert_memory_equal(got, data, BLOCK_BYTES);
    kv_tiers_destroy(t);
}

/* ---- through the engine ---- */

enum { MAX_OUT = 64 };
typedef struct rec {
    int32_t toks[MAX_OUT];
    int n_toks, n_done;
    di_status status;
    uint32_t cache_hit;
} rec;

static void on_event(void *user, const di_event *ev)
{
    rec *r = user;
    size_t n;
    if (di_event_kind_of(ev) == DI_EVENT_TOKENS) {
        const int32_t *t = di_event_tokens(ev, &n);
        for (size_t i = 0; i < n && r->n_toks < MAX_OUT; i++) r->toks[r->n_toks++] = t[i];
    } else if (di_event_kind_of(ev) == DI_EVENT_DONE) {
        r->n_done++;
        r->status = di_event_status(ev);
        r->cache_hit = di_event_prompt_cache_hit_tokens(ev);
    }
}

static di_engine *engine(const char *path, int64_t kv_bytes, int disable, int64_t host,
                         const char *dir)
{
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = path;
    cfg.n_threads = 2;
    cfg.max_running = 4;
    cfg.n_batch = 64;
    cfg.kv_cache_bytes = kv_bytes;
    cfg.disable_prefix_cache = disable;
    cfg.kv_host_cache_bytes = host;
    cfg.kv_cache_dir = dir;
    cfg.log = on_log;
    di_engine *e = NULL;
    di_error *err = NULL;
    if (di_engine_create(&cfg, &e, &err) != DI_OK) fail_msg("%s", di_error_message(err));
    return e;
}

static void run(di_engine *e, const int32_t *prompt, size_t n, rec *r)
{
    memset(r, 0, sizeof *r);
    di_request q;
    di_request_init(&q);
    q.tokens = prompt;
    q.n_tokens = n;
    q.max_tokens = 12;
    q.ignore_eos = 1;
    q.temperature = 0.7f;
    q.seed = 9;
    q.on_event = on_event;
    q.user_data = r;
    assert_int_equal(di_submit(e, &q, &(uint64_t){0}, NULL), DI_OK);
    while (di_engine_pending(e) > 0) assert_true(di_poll(e, 50) >= 0);
    assert_int_equal(r->n_done, 1);
    assert_int_equal(r->status, DI_OK);
}

static void prompt_of(int which, int32_t *p, int n)
{
    for (int i = 0; i < n; i++) p[i] = (int32_t)((i * (7 + which) + which * 31 + 3) % 512);
}

/* Blocks evicted from a KV cache of 12 blocks come back from the host tier. */
static void test_engine_restores_evicted_blocks_from_the_host_tier(void **state)
{
    (void)state;
    /* one block: 2 (K, V) x 2 layers x 16 dims x 16 tokens x 2 bytes */
    di_engine *on = engine(TINY, 12 * 2048, 0, 1 << 20, NULL), *off = engine(TINY, 0, 1, 0, NULL);
    int32_t a[100], b[100];
    prompt_of(0, a, 100);
    rec want, got;
    run(off, a, 100, &want);
    run(on, a, 100, &got);
    assert_int_equal(got.cache_hit, 0);
    for (int other = 1; other <= 3; other++) { /* push a's blocks out */
        prompt_of(other, b, 100);
        run(on, b, 100, &got);
    }
    run(on, a, 100, &got);
    assert_int_equal(got.cache_hit, 96);
    assert_int_equal(got.n_toks, want.n_toks);
    assert_memory_equal(got.toks, want.toks, (size_t)want.n_toks * 4);
    assert_int_equal(di_engine_destroy(on), DI_OK);
    assert_int_equal(di_engine_destroy(off), DI_OK);
}

/* A second engine on the same directory finds the first one's prompt; an
 * engine of another model finds nothing there. */
static void test_engine_disk_tier_across_restarts(void **state)
{
    (void)state;
    char dir[64];
    make_dir(dir, sizeof dir);
    int32_t a[100];
    prompt_of(5, a, 100);
    rec want, got;
    di_engine *off = engine(TINY, 0, 1, 0, NULL);
    run(off, a, 100, &want);
    assert_int_equal(di_engine_destroy(off), DI_OK);
    di_engine *e = engine(TINY, 0, 0, 0, dir);
    run(e, a, 100, &got);
    assert_int_equal(got.cache_hit, 0);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    e = engine(TINY, 0, 0, 0, dir);
    run(e, a, 100, &got);
    assert_int_equal(got.cache_hit, 96);
    assert_memory_equal(got.toks, want.toks, (size_t)want.n_toks * 4);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    e = engine(DSV3, 0, 0, 0, dir);
    run(e, a, 100, &got);
    assert_int_equal(got.cache_hit, 0);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    /* an unusable directory: a log line, and requests are served */
    logged[0] = 0;
    char bad[128];
    snprintf(bad, sizeof bad, "%s/x", dir);
    FILE *f = fopen(bad, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(bad, sizeof bad, "%s/x/y", dir);
    e = engine(TINY, 0, 0, 0, bad);
    assert_non_null(strstr(logged, "no disk tier"));
    run(e, a, 100, &got);
    assert_memory_equal(got.toks, want.toks, (size_t)want.n_toks * 4);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    remove_tree(dir);
}

/* A copy of the tiny model with one byte changed in the middle of its
 * weights (past the first and last 4 KiB of every tensor) is another model:
 * it finds none of the original's blocks on disk. */
static void test_engine_of_a_slightly_different_model_finds_nothing(void **state)
{
    (void)state;
    char dir[64], copy[160], cmd[512];
    make_dir(dir, sizeof dir);
    snprintf(copy, sizeof copy, "%s/model", dir);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", TINY, copy);
    assert_int_equal(system(cmd), 0);
    /* the embedding (512 x 64 f16, 64 KiB): a byte at its middle */
    char st[256], header[16384];
    snprintf(st, sizeof st, "%s/model.safetensors", copy);
    FILE *f = fopen(st, "r+b");
    assert_non_null(f);
    uint64_t hlen = 0;
    assert_int_equal(fread(&hlen, 8, 1, f), 1);
    assert_true(hlen < sizeof header);
    assert_int_equal(fread(header, 1, hlen, f), hlen);
    header[hlen] = 0;
    const char *t = strstr(header, "\"model.embed_tokens.weight\"");
    assert_non_null(t);
    const char *off = strstr(t, "\"data_offsets\"");
    assert_non_null(off);
    long begin = 0, end = 0;
    assert_int_equal(sscanf(strchr(off, '[') + 1, "%ld,%ld", &begin, &end), 2);
    assert_true(end - begin >= 3 * 4096);
    long at = 8 + (long)hlen + (begin + end) / 2;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
    char cache[160];
    snprintf(cache, sizeof cache, "%s/kv", dir);
    int32_t a[100];
    prompt_of(8, a, 100);
    rec got;
    di_engine *e = engine(TINY, 0, 0, 0, cache);
    run(e, a, 100, &got);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    e = engine(copy, 0, 0, 0, cache);
    run(e, a, 100, &got);
    assert_int_equal(got.cache_hit, 0);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    e = engine(TINY, 0, 0, 0, cache);
    run(e, a, 100, &got);
    assert_int_equal(got.cache_hit, 96);
    assert_int_equal(di_engine_destroy(e), DI_OK);
    remove_tree(dir);
}

/* A directory name that is not UTF-8 is logged as UTF-8 ('?' for the bad
 * bytes), as di_log_fn promises. */
static void test_log_lines_stay_utf8(void **state)
{
    (void)state;
    char dir[64], bad[128];
    make_dir(dir, sizeof dir);
    snprintf(bad, sizeof bad, "%s/file\xff\xfe", dir);
    FILE *f = fopen(bad, "w"); /* a file: the tier cannot use it, and says so */
    assert_non_null(f);
    fclose(f);
    logged[0] = 0;
    di_engine *e = engine(TINY, 0, 0, 0, bad);
    assert_non_null(strstr(logged, "no disk tier"));
    assert_null(strchr(logged, '\xff'));
    assert_non_null(strstr(logged, "file??"));
    assert_int_equal(di_engine_destroy(e), DI_OK);
    remove_tree(dir);
}

static void test_config_errors(void **state)
{
    (void)state;
    di_engine_config cfg;
    di_engine_config_init(&cfg);
    cfg.model_path = TINY;
    di_engine *e = NULL;
    di_error *err = NULL;
    cfg.kv_host_cache_bytes = -1;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "kv_host_cache_bytes"));
    di_error_free(err);
    err = NULL;
    cfg.kv_host_cache_bytes = 0;
    cfg.kv_disk_cache_bytes = -5;
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "kv_disk_cache_bytes"));
    di_error_free(err);
    err = NULL;
    cfg.kv_disk_cache_bytes = 0;
    cfg.kv_cache_dir = "";
    assert_int_equal(di_engine_create(&cfg, &e, &err), DI_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(di_error_message(err), "kv_cache_dir"));
    di_error_free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_tier_round_trip_and_budget),
        cmocka_unit_test(test_queued_puts_are_found_at_once),
        cmocka_unit_test(test_disk_tier_survives_restart),
        cmocka_unit_test(test_bad_files_are_skipped_with_a_log_line),
        cmocka_unit_test(test_unusable_directory_turns_the_disk_tier_off),
        cmocka_unit_test(test_another_format_version_is_skipped),
        cmocka_unit_test(test_kill_9_during_writes_leaves_a_clean_directory),
        cmocka_unit_test(test_two_writers_of_one_pid_share_a_directory),
        cmocka_unit_test(test_fresh_temporary_files_of_other_writers_stay),
        cmocka_unit_test(test_fetches_never_taken_do_not_fill_the_table),
        cmocka_unit_test(test_engine_restores_evicted_blocks_from_the_host_tier),
        cmocka_unit_test(test_engine_disk_tier_across_restarts),
        cmocka_unit_test(test_engine_of_a_slightly_different_model_finds_nothing),
        cmocka_unit_test(test_log_lines_stay_utf8),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
