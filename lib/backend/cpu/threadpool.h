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
 * state. */
#ifndef DI_BACKEND_CPU_THREADPOOL_H
#define DI_BACKEND_CPU_THREADPOOL_H

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

#endif
