/* args.c - the shared flag parser; see args.h. */
#include "tools/coli/args.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "colibri.h"
#include "core/file_io.h"

int args_error(const char *cmd, const char *what, const char *fmt, ...) {
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    fprintf(stderr, "coli %s: %s: %s\n", cmd, what, reason);
    return ARGS_ERROR;
}

int cli_fail(void) {
    const char *msg = coli_last_error();
    fprintf(stderr, "coli: %s\n", msg && *msg ? msg : "unknown error");
    return CLI_FAIL;
}

static const arg_spec *s_find_spec(const arg_spec *specs, int n, const char *name, size_t len) {
    for (int i = 0; i < n; i++) {
        if (strlen(specs[i].name) == len && strncmp(specs[i].name, name, len) == 0) return &specs[i];
        if (specs[i].alias && strlen(specs[i].alias) == len && strncmp(specs[i].alias, name, len) == 0)
            return &specs[i];
    }
    return NULL;
}

/* Describe the allowed range for a message: ">= 0", "in (0, 1]", ... */
static void s_range_text(const arg_spec *s, char *buf, size_t cap) {
    int has_max = s->max > s->min;
    if (!has_max)
        snprintf(buf, cap, "must be %s %.10g", s->min_open ? ">" : ">=", s->min);
    else
        snprintf(buf, cap, "must be in %s%.10g, %.10g]", s->min_open ? "(" : "[", s->min, s->max);
}

static int s_in_range(const arg_spec *s, double v) {
    if (s->min_open ? !(v > s->min) : !(v >= s->min)) return 0;
    return !(s->max > s->min) || v <= s->max;
}

/* shown: the flag as the user typed it (-n or --n-predict), for messages. */
static int s_set_number(const char *cmd, const arg_spec *s, const char *shown, const char *val) {
    char *end = NULL, range[64];
    errno = 0;
    if (s->kind == ARG_U64) {
        unsigned long long v = strtoull(val, &end, 10);
        if (errno || end == val || *end || strchr(val, '-'))
            return args_error(cmd, shown, "'%s' is not a non-negative integer", val);
        *(uint64_t *)s->dest = v;
        return ARGS_OK;
    }
    s_range_text(s, range, sizeof range);
    if (s->kind == ARG_INT) {
        long v = strtol(val, &end, 10);
        if (errno || end == val || *end) return args_error(cmd, shown, "'%s' is not an integer", val);
        /* a flag without a maximum still lands in an int */
        if (v < INT_MIN || v > INT_MAX) return args_error(cmd, shown, "'%s' is out of range", val);
        if (!s_in_range(s, (double)v)) return args_error(cmd, shown, "'%s' %s", val, range);
        *(int *)s->dest = (int)v;
        return ARGS_OK;
    }
    double v = strtod(val, &end);
    if (errno || end == val || *end || !isfinite(v)) return args_error(cmd, shown, "'%s' is not a number", val);
    if (!isfinite((float)v)) return args_error(cmd, shown, "'%s' is out of range", val);
    if (!s_in_range(s, v)) return args_error(cmd, shown, "'%s' %s", val, range);
    *(float *)s->dest = (float)v;
    return ARGS_OK;
}

/* One flag argument (argv[*i] starts with '-'); may consume the next one. */
static int s_parse_flag(const char *cmd, int argc, char **argv, int *i, const arg_spec *specs, int n) {
    const char *arg = argv[*i];
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    char shown[64];
    snprintf(shown, sizeof shown, "%.*s", (int)(name_len < 63 ? name_len : 63), arg);
    const arg_spec *s = s_find_spec(specs, n, arg, name_len);
    if (!s) return args_error(cmd, shown, "unknown flag (see coli %s --help)", cmd);
    if (s->kind == ARG_FLAG) {
        if (eq) return args_error(cmd, shown, "takes no value");
        *(int *)s->dest = 1;
        return ARGS_OK;
    }
    const char *val = eq ? eq + 1 : NULL;
    if (!val) {
        if (*i + 1 >= argc) return args_error(cmd, shown, "missing value");
        val = argv[++*i];
    }
    if (s->kind == ARG_STR || s->kind == ARG_TEXT) {
        if (!*val && s->kind == ARG_STR) return args_error(cmd, shown, "empty value");
        *(const char **)s->dest = val;
        return ARGS_OK;
    }
    return s_set_number(cmd, s, shown, val);
}

int args_parse(const char *cmd, int argc, char **argv, const arg_spec *specs, int n_specs, const char **pos,
               int max_pos, int *n_pos) {
    int np = 0, only_positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_positional && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) return ARGS_HELP;
        if (!only_positional && strcmp(a, "--") == 0) {
            only_positional = 1;
            continue;
        }
        if (!only_positional && a[0] == '-' && a[1] != '\0') {
            int rc = s_parse_flag(cmd, argc, argv, &i, specs, n_specs);
            if (rc != ARGS_OK) return rc;
            continue;
        }
        if (np >= max_pos)
            return args_error(cmd, a,
                              max_pos ? "unexpected extra argument" : "unexpected argument (flags start with -)");
        pos[np++] = a;
    }
    if (n_pos) *n_pos = np;
    return ARGS_OK;
}

void args_usage(FILE *f, const char *cmd, const char *synopsis, const char *description, const arg_spec *specs,
                int n_specs) {
    fprintf(f, "usage: coli %s %s\n%s\n", cmd, synopsis, description);
    if (n_specs) fprintf(f, "\noptions:\n");
    for (int i = 0; i < n_specs; i++) {
        char left[64];
        const arg_spec *s = &specs[i];
        snprintf(left, sizeof left, "%s%s%s%s%s", s->alias ? s->alias : "", s->alias ? ", " : "", s->name,
                 s->meta ? " " : "", s->meta ? s->meta : "");
        fprintf(f, "  %-24s %s\n", left, s->help);
    }
    fprintf(f, "  %-24s %s\n", "-h, --help", "show this help");
}

int cli_check_input_file(const char *flag, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0; /* missing: the reader says so, with its own reason */
    if (S_ISREG(st.st_mode)) return 0;
    fprintf(stderr, "coli: %s %s: not a regular file (%s)\n", flag, path, coli_file_kind(&st));
    return CLI_FAIL;
}

int cli_read_file(const char *flag, const char *path, char **out, size_t *len) {
    struct stat st;
    int fd = coli_open_regular(path, &st); /* a FIFO is refused, not waited on */
    if (fd < 0 && errno) {
        fprintf(stderr, "coli: %s %s: cannot open: %s\n", flag, path, strerror(errno));
        return CLI_FAIL;
    }
    if (fd < 0 || (uint64_t)st.st_size > CLI_MAX_READ_FILE) {
        if (fd >= 0)
            fprintf(stderr, "coli: %s %s: %lld bytes, more than the limit of %d MiB\n", flag, path,
                    (long long)st.st_size, CLI_MAX_READ_FILE >> 20);
        else
            fprintf(stderr, "coli: %s %s: not a regular file (%s)\n", flag, path, coli_file_kind(&st));
        if (fd >= 0) close(fd);
        return CLI_FAIL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        fprintf(stderr, "coli: %s %s: cannot open: %s\n", flag, path, strerror(errno));
        close(fd);
        return CLI_FAIL;
    }
    size_t cap = 1 << 16, n = 0, got;
    int too_big = 0;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n > CLI_MAX_READ_FILE) { /* it grew while we read */
            too_big = 1;
            break;
        }
        if (n + 1 == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (!buf || failed || too_big) {
        fprintf(stderr, "coli: %s %s: %s\n", flag, path,
                too_big ? "grew past the size limit while being read"
                : buf   ? "read error"
                        : "out of memory");
        free(buf);
        return CLI_FAIL;
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return 0;
}
