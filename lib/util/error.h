/* Creating di_error objects for the public API (deepinfer.h, "Errors"). */
#ifndef DI_UTIL_ERROR_H
#define DI_UTIL_ERROR_H

#include "deepinfer/deepinfer.h"

/* When err is not NULL, set *err to a new di_error holding status and a copy of
 * message (control bytes and ill-formed UTF-8 written \xNN, as
 * di_error_message documents); when memory runs out, *err is a static out-of-memory error that
 * di_error_free ignores. Returns status, so a failing path can end with
 * `return di_error_set(err, st, msg);`. */
di_status di_error_set(di_error **err, di_status status, const char *message);

/* A malloc'd copy of message escaped as di_error_set escapes it (control
 * bytes and ill-formed UTF-8 written \xNN; an escaped text comes back the
 * same), for messages the API hands out outside a di_error
 * (di_event_message); NULL when message is NULL or memory runs out. */
char *di_escape_dup(const char *message);

/* di_error_set with a printf-style message (formatted whole, not truncated). */
di_status di_error_setf(di_error **err, di_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
