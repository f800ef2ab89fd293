/* Starting the library's own threads (the engine's worker, the CPU pool's
 * workers, the KV tiers' writer) with a stack of a known size.
 *
 * A C library's default thread stack can be small (musl's is 128 KB). The
 * CPU kernels' tiles live in the thread pool's per-thread scratch
 * (backend/cpu/threadpool.h), not on the stack, so they run on a host's
 * thread of 64 KiB too; the library's own threads keep a margin all the
 * same. Every thread is started with at least DI_THREAD_STACK bytes (the
 * default where it is larger, glibc's 8 MB from RLIMIT_STACK). Thread-safe. */
#ifndef DI_UTIL_THREAD_H
#define DI_UTIL_THREAD_H

#include <pthread.h>

enum { DI_THREAD_STACK = 4 << 20 };

/* pthread_create(thread, attrs with that stack, fn, arg): its return value
 * (0, or an errno value; ENOMEM where the stack cannot be had). */
int di_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg);

#endif
