/* Starting the library's own threads (the engine's worker, the CPU pool's
 * workers, the KV tiers' writer) with a stack of a known size.
 *
 * The CPU kernels keep tiles of up to about 130 KB on the stack
 * (attention_mla.c's and deepseek_v4_ops.c's key chunks); a C library's
 * default thread stack can be smaller than that (musl's is 128 KB). Every
 * thread is started with at least DI_THREAD_STACK bytes (the default where it
 * is larger, glibc's 8 MB from RLIMIT_STACK). Thread-safe. */
#ifndef DI_UTIL_THREAD_H
#define DI_UTIL_THREAD_H

#include <pthread.h>

enum { DI_THREAD_STACK = 4 << 20 };

/* pthread_create(thread, attrs with that stack, fn, arg): its return value
 * (0, or an errno value; ENOMEM where the stack cannot be had). */
int di_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg);

#endif
