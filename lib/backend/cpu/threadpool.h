/* A fixed pool of worker threads that run one parallel loop at a time.
 *
 * cpu_threadpool_run(pool, n_tasks, fn, ctx) calls fn(ctx, task, thread) for
 * every task in [0, n_tasks) across the pool's threads and the calling thread
 * (thread in [0, n_threads)), and returns when all have finished. Tasks are
 * handed out from an atomic counter, so uneven tasks balance themselves.
 * Workers spin briefly after a loop before sleeping on a condition variable,
 * since the forward pass runs hundreds of short loops per token.
 *
 * A pool is driven by one thread at a time (the model's); it holds no global
 * state.
 *
 * Each thread index also owns a scratch buffer (cpu_threadpool_reserve,
 * cpu_threadpool_scratch): the kernels' per-task workspace (K/V staging
 * tiles, softmax states), kept off the stack because the calling thread, a
 * host's with perhaps 64 KiB of stack, runs tasks too. */
#ifndef DI_BACKEND_CPU_THREADPOOL_H
#define DI_BACKEND_CPU_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "deepinfer/deepinfer.h"

typedef struct cpu_threadpool cpu_threadpool;
typedef void (*cpu_task_fn)(void *ctx, int64_t task, int thread);

/* n_threads >= 1 counts the caller; n_threads - 1 workers are started.
 * Errors: DI_ERR_INVALID_ARGUMENT, DI_ERR_OUT_OF_MEMORY, DI_ERR_BACKEND (thread
 * creation failed). */
di_status cpu_threadpool_create(int n_threads, cpu_threadpool **out);
void cpu_threadpool_free(cpu_threadpool *pool);
int cpu_threadpool_size(const cpu_threadpool *pool);
void cpu_threadpool_run(cpu_threadpool *pool, int64_t n_tasks, cpu_task_fn fn, void *ctx);

/* Grow every thread index's scratch to at least `bytes` (contents not kept);
 * a comparison when it is that large already, so a kernel calls it on every
 * op call (the CPU backend reserves the kernels' most when it is created, so
 * no op allocates there). Called by the thread driving the pool, never from a
 * task. Errors: DI_ERR_INVALID_ARGUMENT (NULL pool), DI_ERR_OUT_OF_MEMORY (the
 * scratch then stays as it was). */
di_status cpu_threadpool_reserve(cpu_threadpool *pool, size_t bytes);

/* Thread index `thread`'s scratch: 64-byte aligned, at least the bytes last
 * reserved (NULL before any), owned by the pool, valid until the next
 * cpu_threadpool_reserve that grows it or cpu_threadpool_free. Within a loop
 * only the tasks run as `thread` may use it. */
void *cpu_threadpool_scratch(cpu_threadpool *pool, int thread);

#endif
