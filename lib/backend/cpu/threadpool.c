/* The thread pool (threadpool.h): a generation counter under a mutex starts a
 * loop; an atomic task counter hands out tasks; an atomic count of finished
 * threads ends it. */
#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

enum { SPIN_ITERATIONS = 20000 };

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
    atomic_uint generation; /* bumped to start a loop */
    atomic_int stop;
    /* the current loop */
    cpu_task_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_llong next_task;
    atomic_int n_done; /* workers finished with this generation */
};

static void run_tasks(cpu_threadpool *p, int thread)
{
    for (;;) {
        long long t = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, thread);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    cpu_threadpool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
        for (int i = 0; g == seen && i < SPIN_ITERATIONS; i++) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
            g = atomic_load_explicit(&p->generation, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mutex);
            while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
                   !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mutex);
            pthread_mutex_unlock(&p->mutex);
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        run_tasks(p, w->index);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_acq_rel);
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
    atomic_init(&p->next_task, 0);
    atomic_init(&p->n_done, 0);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            cpu_threadpool_free(p);
            return DI_ERR_OUT_OF_MEMORY;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].index = i + 1;
            if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
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
    free(p);
}

int cpu_threadpool_size(const cpu_threadpool *p)
{
    return p ? p->n_threads : 1;
}

void cpu_threadpool_run(cpu_threadpool *p, int64_t n_tasks, cpu_task_fn fn, void *ctx)
{
    if (n_tasks <= 0) return;
    if (p->n_started == 0 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->mutex);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    run_tasks(p, 0);
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) < p->n_started) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
}
