/* huge_pages.h: the KV cache's and the packed weights' memory. The oracle for
 * "advised for huge pages" is the kernel's own account, /proc/self/smaps: the
 * mapping holding the allocation says THPeligible: 1 wherever the system's
 * THP mode is not "never" (where it is, the test says so and checks the rest). */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/cpu/huge_pages.h"
#include "backend/cpu/kv_cache.h"

/* The system's THP mode: 1 unless it is "never" (or unknown). */
static int thp_enabled(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return 0;
    char line[128] = {0};
    int ok = fgets(line, sizeof line, f) != NULL && strstr(line, "[never]") == NULL;
    fclose(f);
    return ok;
}

/* THPeligible of the mapping containing p, from /proc/self/smaps; -1 when
 * the mapping or the field is not found. A mapping's line starts
 * "lo-hi perms ..." in hex; its fields follow, one a line. */
static int thp_eligible(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0, r = -1;
    const char *field = "THPeligible:";
    while (fgets(line, sizeof line, f)) {
        char *end = NULL;
        unsigned long lo = strtoul(line, &end, 16);
        if (end != line && *end == '-') {
            unsigned long hi = strtoul(end + 1, &end, 16);
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (in && strncmp(line, field, strlen(field)) == 0) {
            r = (int)strtol(line + strlen(field), NULL, 10);
            break;
        }
    }
    fclose(f);
    return r;
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static void test_large_allocations_are_aligned_zero_and_advised(void **state)
{
    (void)state;
    const size_t sizes[] = {CPU_HUGE_PAGE, CPU_HUGE_PAGE + 1, 3 * (size_t)CPU_HUGE_PAGE + 4096};
    const int thp = thp_enabled();
    printf("THP %s on this system\n", thp ? "available (madvise or always)" : "off (never)");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = cpu_huge_alloc(sizes[i]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % CPU_HUGE_PAGE, 0);
        assert_true(all_zero(p, sizes[i]));
        memset(p, 0x5a, sizes[i]); /* every byte writable */
        assert_int_equal(p[sizes[i] - 1], 0x5a);
        if (thp) assert_int_equal(thp_eligible(p), 1);
        cpu_huge_free(p, sizes[i]);
    }
}

static void test_small_and_empty_allocations(void **state)
{
    (void)state;
    assert_null(cpu_huge_alloc(0));
    unsigned char *p = cpu_huge_alloc(100);
    assert_non_null(p);
    assert_true(all_zero(p, 100));
    cpu_huge_free(p, 100);
    cpu_huge_free(NULL, 100);
    cpu_huge_free(NULL, CPU_HUGE_PAGE);
    assert_null(cpu_huge_alloc(SIZE_MAX)); /* out of memory, not an overflowed size */
}

static void test_arena_hands_out_disjoint_aligned_zero_blocks(void **state)
{
    (void)state;
    cpu_arena a = {0};
    assert_null(cpu_arena_alloc(&a, 0));
    enum { N = 40 };
    unsigned char *blk[N];
    size_t len[N];
    for (int i = 0; i < N; i++) {
        /* 1 byte to 5 MiB: several per region, and regions filled up */
        len[i] = i % 7 == 6 ? (size_t)5 << 20 : (size_t)(i * 37 + 1) * 1000 + 1;
        blk[i] = cpu_arena_alloc(&a, len[i]);
        assert_non_null(blk[i]);
        assert_int_equal((uintptr_t)blk[i] % 64, 0);
        assert_true(all_zero(blk[i], len[i]));
        memset(blk[i], i + 1, len[i]);
    }
    unsigned char *big = cpu_arena_alloc(&a, (size_t)CPU_ARENA_REGION + 12345); /* its own region */
    assert_non_null(big);
    assert_true(all_zero(big, (size_t)CPU_ARENA_REGION + 12345));
    memset(big, 0xff, (size_t)CPU_ARENA_REGION + 12345);
    for (int i = 0; i < N; i++) /* nothing overwritten by a later block */
        for (size_t k = 0; k < len[i]; k += 997) assert_int_equal(blk[i][k], i + 1);
    assert_null(cpu_arena_alloc(&a, SIZE_MAX - 10));
    cpu_arena_free(&a);
    assert_null(a.head);
    cpu_arena_free(&a); /* twice: a no-op */
}

/* Bytes of [p, p + n) resident in memory (mincore; p page-aligned). */
static size_t resident_bytes(const void *p, size_t n)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (n + page - 1) / page;
    unsigned char *vec = malloc(pages);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)p, n, vec), 0);
    size_t r = 0;
    for (size_t i = 0; i < pages; i++) r += (vec[i] & 1) ? page : 0;
    free(vec);
    return r;
}

/* A sequence's first tokens cost memory in proportion to them: a block keeps
 * its layers together (kv_cache.h), so storing 16 tokens in every layer of a
 * SmolLM2-shaped f16 cache (30 layers, 3 heads of 64: 180 KiB of keys) makes
 * at most one 2 MiB page of each pool resident. Laid out layer by layer it
 * made 30 (60 MiB over both pools: a helper measured RSS 197 -> 318 MiB after
 * one token through the engine). Where THP is off the bound holds anyway. */
static void test_kv_cache_first_tokens_touch_one_stretch(void **state)
{
    (void)state;
    enum { LAYERS = 30, HEADS = 3, HD = 64, BS = 16, BLOCKS = 256 };
    cpu_kv_cache c;
    assert_int_equal(cpu_kv_cache_init(&c, MODEL_DTYPE_F16, LAYERS, HEADS, HD, BS, BLOCKS), DI_OK);
    assert_true(c.bytes >= (size_t)CPU_HUGE_PAGE); /* the huge-page path */
    int32_t table[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) table[i] = i;
    cpu_kv_seq s = {table, BLOCKS, BLOCKS, BS, 0};
    static float k[BS * HEADS * HD], v[BS * HEADS * HD];
    for (int i = 0; i < BS * HEADS * HD; i++) k[i] = v[i] = 0.5f;
    for (int l = 0; l < LAYERS; l++) cpu_kv_store(&c, &s, l, 0, BS, k, v);
    size_t rk = resident_bytes(c.k, c.bytes), rv = resident_bytes(c.v, c.bytes);
    printf("resident after 16 tokens in %d layers: K %zu KiB, V %zu KiB\n", LAYERS, rk >> 10,
           rv >> 10);
    assert_true(rk <= (size_t)CPU_HUGE_PAGE && rv <= (size_t)CPU_HUGE_PAGE);
    cpu_kv_cache_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_large_allocations_are_aligned_zero_and_advised),
        cmocka_unit_test(test_small_and_empty_allocations),
        cmocka_unit_test(test_arena_hands_out_disjoint_aligned_zero_blocks),
        cmocka_unit_test(test_kv_cache_first_tokens_touch_one_stretch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
