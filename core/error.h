/*
 * error.h - one way to fail: return a negative coli_status and leave a
 * one-line message that names the thing and the reason.
 *
 *   if (n_dims > 4)
 *       return coli_fail(COLI_EFORMAT, "tensor '%s': n_dims %u > 4", name, n_dims);
 *
 * The message lives in a thread-local buffer (coli_last_error), so callers
 * up the stack may add context with coli_fail_prefix without allocating.
 */
#ifndef COLI_CORE_ERROR_H
#define COLI_CORE_ERROR_H

#include "colibri.h" /* coli_status, coli_last_error, coli_status_str */

/* Set the thread's error message (printf format) and return code. */
int coli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepend "prefix: " to the current message; returns code unchanged. */
int coli_fail_prefix(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void coli_clear_error(void);

#endif
