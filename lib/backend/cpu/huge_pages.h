/* Large allocations backed by transparent huge pages where the kernel allows
 * it: the KV cache and the packed weights, which every decode step streams.
 * With 4 KiB pages a step's walk over them misses the TLB once a page (94 MB
 * of SmolLM2's f16 cache after 4,096 tokens is 23,000 pages); 2 MiB pages
 * cut that 512-fold (bench/attention_bench: GQA decode at 4,096, 1 thread,
 * 63 -> 75 tokens/s). Linux's THP "madvise" mode (a common default) gives
 * huge pages only to ranges that ask with madvise(MADV_HUGEPAGE); "always"
 * gives them anyway and "never" refuses: the advice is only advice, and the
 * memory is the same either way.
 *
 * Memory is mapped anonymous and zero, committed as it is first touched (a
 * huge page at a time where granted: zeroing 2 MiB, about 0.1 ms; in a VM
 * whose host backs guest memory lazily, up to about 8 ms the first time the
 * guest uses that memory, bench/README.md, kernels_bench). Not thread-safe per object: an arena
 * is built by one thread (model load); what it hands out may be read by any. */
#ifndef DI_BACKEND_CPU_HUGE_PAGES_H
#define DI_BACKEND_CPU_HUGE_PAGES_H

#include <stddef.h>

enum { CPU_HUGE_PAGE = 2 << 20 };

/* bytes zeroed bytes, 2 MiB-aligned and advised for huge pages when bytes
 * is at least CPU_HUGE_PAGE, from calloc below that; NULL when out of memory
 * (or bytes is 0). Free with cpu_huge_free and the same bytes. */
void *cpu_huge_alloc(size_t bytes);
void cpu_huge_free(void *p, size_t bytes);

/* A bump allocator over huge-page regions (CPU_ARENA_REGION bytes, or one
 * allocation's size when larger): many read-mostly buffers that live as long
 * as their owner, freed together. Zero-initialize before use. */
enum { CPU_ARENA_REGION = 32 << 20 };
typedef struct cpu_arena_region cpu_arena_region;
typedef struct cpu_arena {
    cpu_arena_region *head; /* the newest region; earlier ones chained behind it */
} cpu_arena;

/* bytes zeroed bytes, 64-byte aligned, owned by the arena; NULL when out of
 * memory or bytes is 0. */
void *cpu_arena_alloc(cpu_arena *a, size_t bytes);
/* Every region; the arena is empty after. */
void cpu_arena_free(cpu_arena *a);

#endif
