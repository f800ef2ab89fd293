/* di_thread_create (thread.h). */
#include "util/thread.h"

int di_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0) return rc;
    size_t size = 0;
    if (pthread_attr_getstacksize(&attr, &size) != 0 || size < (size_t)DI_THREAD_STACK)
        (void)pthread_attr_setstacksize(&attr, (size_t)DI_THREAD_STACK);
    rc = pthread_create(thread, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    return rc;
}
