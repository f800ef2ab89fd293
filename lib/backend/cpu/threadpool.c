/* The thread pool (threadpool.h).
 *
 * A loop lives in one of two job slots, alternating by generation. The caller
 * publishes a generation, takes tasks itself, and waits only until every task
 * has finished — not for every worker: on a machine shared with other
 * processes a worker that is not scheduled in time simply finds no task left.
 * A slot is reused two generations later, once no worker is inside it; a late
 * worker checks, after announcing itself, that the slot still holds the
 * generation it woke for (or a newer one, whose fields are then complete). */
#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/thread.h"

enum { WORKER_SPIN = 20000, CALLER_SPIN = 2000 };

static const unsigned SLOT_BUSY = 0;

typedef struct job_slot {
    atomic_uint gen; /* the generation it holds; SLOT_BUSY while being filled */
    cpu_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_llong next_task;
    atomic_llong n_finished;
    atomic_int active; /* workers inside */
} job_slot;

typedef struct worker {
    cpu_threadpool *pool;
    int index;
    pthread_t thread;
} worker;

struct cpu_threadpool {
    int n_threads;
    worker *workers;
    int n_started;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    int n_sleeping; /* under mutex */
    atomic_uint generation;
    atomic_int stop;
    job_slot slots[2];
    char *scratch;         /* n_threads x scratch_stride bytes, 64-byte aligned */
    size_t scratch_stride; /* bytes a thread, a multiple of 64 */
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

static void run_slot(job_slot *s, int thread)
{
    for (;;) {
        long long t = atomic_fetch_add(&s->next_task, 1);
        if (t >= s->n_tasks) break;
        s->fn(s->ctx, t, thread);
        atomic_fetch_add_explicit(&s->n_finished, 1, memory_order_release);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    cpu_threadpool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
        for (int i = 0; g == seen && i < WORKER_SPIN && !atomic_load(&p->stop); i++) {
            /* let a thread waiting for this core (the caller, on a machine shared
             * with other work) run now and then */
            if (i % 256 == 255)
                sched_yield();
            else
                cpu_relax();
            g = atomic_load_explicit(&p->generation, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mutex);
            p->n_sleeping++;
            while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mutex);
            p->n_sleeping--;
            pthread_mutex_unlock(&p->mutex);
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        job_slot *s = &p->slots[g & 1];
        atomic_fetch_add(&s->active, 1);
        unsigned sg = atomic_load(&s->gen);
        if (sg != SLOT_BUSY && sg - g < 0x80000000u) run_slot(s, w->index); /* sg >= g */
        atomic_fetch_sub(&s->active, 1);
    }
    return NULL;
}

di_status cpu_threadpool_create(int n_threads, cpu_threadpool **out)
{
    if (!out || n_threads < 1 || n_threads > 1024) return DI_ERR_INVALID_ARGUMENT;
    cpu_threadpool *p = calloc(1, sizeof *p);
    if (!p) return DI_ERR_OUT_OF_MEMORY;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->wake, NULL);
    atomic_init(&p->generation, 0);
    atomic_init(&p->stop, 0);
    for (int i = 0; i < 2; i++) {
        atomic_init(&p->slots[i].gen, SLOT_BUSY);
        atomic_init(&p->slots[i].next_task, 0);
        atomic_init(&p->slots[i].n_finished, 0);
        atomic_init(&p->slots[i].active, 0);
    }
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            cpu_threadpool_free(p);
            return DI_ERR_OUT_OF_MEMORY;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].index = i + 1;
            if (di_thread_create(&p->workers[i].thread, worker_main, &p->workers[i]) != 0) {
                cpu_threadpool_free(p);
                return DI_ERR_BACKEND;
            }
            p->n_started++;
        }
    }
    *out = p;
    return DI_OK;
}

void cpu_threadpool_free(cpu_threadpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mutex);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mutex);
    free(p->workers);
    free(p->scratch);
    free(p);
}

int cpu_threadpool_size(const cpu_threadpool *p)
{
    return p ? p->n_threads : 1;
}

static void wait_until(atomic_llong *v, long long target)
{
    for (int i = 0; atomic_load_explicit(v, memory_order_acquire) < target; i++) {
        if (i < CALLER_SPIN)
            cpu_relax();
        else
            sched_yield();
    }
}

void cpu_threadpool_run(cpu_threadpool *p, int64_t n_tasks, cpu_task_fn fn, void *ctx)
{
    if (n_tasks <= 0) return;
    if (!p || p->n_started == 0 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    unsigned g = atomic_load(&p->generation) + 1;
    if (g == SLOT_BUSY) g++; /* wrapped: skip the reserved value (and keep parity apart) */
    job_slot *s = &p->slots[g & 1];
    atomic_store(&s->gen, SLOT_BUSY);
    for (int i = 0; atomic_load(&s->active) != 0; i++) {
        if (i < CALLER_SPIN)
            cpu_relax();
        else
            sched_yield();
    }
    s->fn = fn;
    s->ctx = ctx;
    s->n_tasks = n_tasks;
    atomic_store(&s->next_task, 0);
    atomic_store(&s->n_finished, 0);
    atomic_store(&s->gen, g);
    pthread_mutex_lock(&p->mutex);
    atomic_store(&p->generation, g);
    if (p->n_sleeping) pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    run_slot(s, 0);
    wait_until(&s->n_finished, n_tasks);
}

di_status cpu_threadpool_reserve(cpu_threadpool *p, size_t bytes)
{
    if (!p) return DI_ERR_INVALID_ARGUMENT;
    if (bytes <= p->scratch_stride) return DI_OK;
    if (bytes > SIZE_MAX / 2 / (size_t)p->n_threads) return DI_ERR_OUT_OF_MEMORY;
    const size_t stride = (bytes + 63) & ~(size_t)63;
    char *s = aligned_alloc(64, stride * (size_t)p->n_threads);
    if (!s) return DI_ERR_OUT_OF_MEMORY;
    free(p->scratch);
    p->scratch = s;
    p->scratch_stride = stride;
    return DI_OK;
}

void *cpu_threadpool_scratch(cpu_threadpool *p, int thread)
{
    return p->scratch ? p->scratch + (size_t)thread * p->scratch_stride : NULL;
}
