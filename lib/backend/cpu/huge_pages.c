/* Huge-page-backed allocations (huge_pages.h). */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "backend/cpu/huge_pages.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

void *cpu_huge_alloc(size_t bytes)
{
    if (bytes == 0) return NULL;
    if (bytes < CPU_HUGE_PAGE) return calloc(1, bytes);
    if (bytes > SIZE_MAX - 2 * (size_t)CPU_HUGE_PAGE) return NULL;
    const size_t len = round_up(bytes, CPU_HUGE_PAGE), over = len + CPU_HUGE_PAGE;
    /* mapped a huge page too long, then trimmed to a 2 MiB boundary: the
     * kernel backs a range with huge pages only where it is aligned */
    char *p = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    char *a = p + (CPU_HUGE_PAGE - (uintptr_t)p % CPU_HUGE_PAGE) % CPU_HUGE_PAGE;
    if (a > p) munmap(p, (size_t)(a - p));
    if (p + over > a + len) munmap(a + len, (size_t)(p + over - (a + len)));
#ifdef MADV_HUGEPAGE
    (void)madvise(a, len, MADV_HUGEPAGE); /* advice: refused where THP is off */
#endif
    return a;
}

void cpu_huge_free(void *p, size_t bytes)
{
    if (!p) return;
    if (bytes < CPU_HUGE_PAGE) {
        free(p);
        return;
    }
    munmap(p, round_up(bytes, CPU_HUGE_PAGE));
}

struct cpu_arena_region {
    cpu_arena_region *next;
    size_t size, used; /* bytes of the region, bytes handed out (this header first) */
};

enum { ARENA_ALIGN = 64 };

void *cpu_arena_alloc(cpu_arena *a, size_t bytes)
{
    if (bytes == 0 || bytes > SIZE_MAX / 2) return NULL;
    const size_t need = round_up(bytes, ARENA_ALIGN);
    cpu_arena_region *r = a->head;
    if (!r || r->size - r->used < need) {
        const size_t head = round_up(sizeof *r, ARENA_ALIGN);
        const size_t size = need + head > CPU_ARENA_REGION ? need + head : CPU_ARENA_REGION;
        if (!(r = cpu_huge_alloc(size))) return NULL;
        *r = (cpu_arena_region){.next = a->head, .size = size, .used = head};
        a->head = r;
    }
    void *p = (char *)r + r->used;
    r->used += need;
    return p;
}

void cpu_arena_free(cpu_arena *a)
{
    for (cpu_arena_region *r = a->head, *next; r; r = next) {
        next = r->next;
        cpu_huge_free(r, r->size);
    }
    a->head = NULL;
}
