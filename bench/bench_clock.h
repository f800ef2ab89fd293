/* Clocks of the C benchmark drivers: wall time on the monotonic clock, and the
 * CPU seconds of the whole process (all threads), steadier than wall time on a
 * shared machine. Both in seconds. */
#ifndef DI_BENCH_CLOCK_H
#define DI_BENCH_CLOCK_H

#include <sys/resource.h>
#include <time.h>

static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

#endif
