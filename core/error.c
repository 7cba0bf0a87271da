/* error.c - thread-local error messages; see error.h. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define COLI_ERR_MAX 512

static _Thread_local char s_message[COLI_ERR_MAX];

int coli_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s_message, sizeof s_message, fmt, ap);
    va_end(ap);
    return code;
}

int coli_fail_prefix(int code, const char *fmt, ...) {
    char prefix[COLI_ERR_MAX], old[COLI_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, s_message, sizeof old);
    /* Build in a buffer big enough for both, then cut to the message size:
     * a long prefix chain loses its tail, never its head. */
    char joined[2 * COLI_ERR_MAX + 2];
    snprintf(joined, sizeof joined, "%s: %s", prefix, old);
    memcpy(s_message, joined, sizeof s_message - 1);
    s_message[sizeof s_message - 1] = '\0';
    return code;
}

void coli_clear_error(void) { s_message[0] = '\0'; }

const char *coli_last_error(void) { return s_message; }

const char *coli_status_str(int status) {
    switch (status) {
    case COLI_OK: return "OK";
    case COLI_EINVAL: return "EINVAL";
    case COLI_EIO: return "EIO";
    case COLI_EFORMAT: return "EFORMAT";
    case COLI_EUNSUPPORTED: return "EUNSUPPORTED";
    case COLI_ENOMEM: return "ENOMEM";
    case COLI_ERANGE: return "ERANGE";
    case COLI_EDEVICE: return "EDEVICE";
    case COLI_ETIMEOUT: return "ETIMEOUT";
    case COLI_EPROTO: return "EPROTO";
    case COLI_ECANCELLED: return "ECANCELLED";
    case COLI_EINTERNAL: return "EINTERNAL";
    default: return "EUNKNOWN";
    }
}
