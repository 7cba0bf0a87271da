/*
 * xdna_package.c - registry parsing, SHA-256 verification and the per-expert
 * gates of the NPU lane; see xdna_package.h.
 */
#include "plugins/xdna/xdna_package.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "core/file_io.h"
#include "core/tensor.h"

static const char *const s_diag_names[XDNA_DIAG_COUNT] = {
    "OK",
    "NOT_REQUESTED",
    "PACKAGE_MISSING",
    "REGISTRY_INVALID",
    "PACKAGE_INCOMPLETE",
    "INTEGRITY_FAILED",
    "HELPER_UNAVAILABLE",
    "DEVICE_UNAVAILABLE",
    "XCLBIN_LOAD_FAILED",
    "HW_CONTEXT_FAILED",
    "BO_ALLOC_FAILED",
    "SYNC_FAILED",
    "RUN_START_FAILED",
    "RUN_FAILED",
    "RUN_TIMEOUT",
    "NAN_OUTPUT",
    "HELPER_EXCEPTION",
    "HELPER_BAD_ARGUMENT",
    "DECLINED_OP",
    "DECLINED_SHAPE",
    "DECLINED_DTYPE",
    "DECLINED_ROWS",
    "DECLINED_BUCKET",
    "IMAGE_FAILED",
};

const char *xdna_diag_name(xdna_diag d) { return (unsigned)d < XDNA_DIAG_COUNT ? s_diag_names[d] : "UNKNOWN"; }

static const char *const s_op_names[XDNA_N_OPS] = {"ffn_gate", "ffn_up", "ffn_down"};

const char *xdna_op_name(xdna_op op) { return (unsigned)op < XDNA_N_OPS ? s_op_names[op] : "?"; }

static xdna_diag s_diag(xdna_diag d, char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void xdna_vwhy(xdna_diag d, const char *prefix, char *why, size_t why_len, const char *fmt, va_list ap) {
    if (!why || !why_len) return;
    int n = snprintf(why, why_len, "%s: %s", xdna_diag_name(d), prefix);
    if (n >= 0 && (size_t)n < why_len) vsnprintf(why + n, why_len - (size_t)n, fmt, ap);
}

static xdna_diag s_diag(xdna_diag d, char *why, size_t why_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    xdna_vwhy(d, "", why, why_len, fmt, ap);
    va_end(ap);
    return d;
}

void xdna_package_default_dir(const char *package, const char *plugin_dir, char *out, size_t n) {
    if (package && *package)
        snprintf(out, n, "%s", package);
    else
        snprintf(out, n, "%s/%s", plugin_dir, XDNA_PACKAGE_DIRNAME);
}

int64_t xdna_bucket_of(int64_t n_rows) {
    if (n_rows >= 1 && n_rows <= 64) return 64;
    if (n_rows > 64 && n_rows <= 256) return 256;
    return 0;
}

// ---------------------------------------------------------------------------
// SHA-256

int xdna_sha256_file(const char *path, unsigned char out[32], char *why, size_t why_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_len, "%s: %s", path, strerror(errno));
        return -1;
    }
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) crypto_hash_sha256_update(&st, buf, got);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(why, why_len, "%s: read error", path);
        return -1;
    }
    crypto_hash_sha256_final(&st, out);
    return 0;
}

void xdna_sha256_hex(const unsigned char h[32], char out[65]) {
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}

static int s_hex_digest(const char *s, unsigned char out[32]) {
    if (strlen(s) != 64) return -1;
    for (int i = 0; i < 32; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char c = s[2 * i + j];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0) return -1;
            v = v * 16 + (unsigned)d;
        }
        out[i] = (unsigned char)v;
    }
    return 0;
}

// ---------------------------------------------------------------------------
// registry

/* A relative name that stays inside the package: no leading '/', no ".."
 * component, only [A-Za-z0-9._/-]. (Symbolic links are checked on disk.) */
static int s_name_ok(const char *s) {
    if (!*s || *s == '/' || strlen(s) >= XDNA_NAME_MAX) return 0;
    if (strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-") != strlen(s)) return 0;
    for (const char *p = s; *p;) {
        size_t len = strcspn(p, "/");
        if (len == 0 || (len == 2 && p[0] == '.' && p[1] == '.') || (len == 1 && p[0] == '.')) return 0;
        p += len;
        if (*p == '/') p++;
    }
    return 1;
}

static int s_int(const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

/* One key=value of an artifact line; 0 or -1. */
static int s_field(xdna_artifact *a, const char *key, const char *v, unsigned *seen) {
    static const char *const keys[] = {
        "op", "bucket", "k", "n", "wtype", "a", "b", "c", "kernel", "xclbin", "xclbin_sha256", "instr", "instr_sha256"};
    int i = 0;
    while (i < 13 && strcmp(key, keys[i])) i++;
    if (i == 13 || (*seen >> i & 1u)) return -1; /* unknown or repeated key */
    *seen |= 1u << i;
    coli_dtype t;
    switch (i) {
    case 0:
        for (int o = 0; o < XDNA_N_OPS; o++)
            if (!strcmp(v, s_op_names[o])) {
                a->op = (xdna_op)o;
                return 0;
            }
        return -1;
    case 1: return s_int(v, 64, 256, &a->bucket) || (a->bucket != 64 && a->bucket != 256) ? -1 : 0;
    case 2: return s_int(v, 1, 1 << 20, &a->k);
    case 3: return s_int(v, 1, 1 << 20, &a->n);
    case 4:
        if (coli_dtype_from_name(v, &t) != 0 || !coli_dtype_valid((uint32_t)t)) return -1;
        a->wtype = (int32_t)t;
        return 0;
    case 5:
    case 6: return strcmp(v, "BF16") ? -1 : 0;
    case 7: return strcmp(v, "F32") ? -1 : 0;
    case 8: return strlen(v) < sizeof a->kernel && *v ? (snprintf(a->kernel, sizeof a->kernel, "%s", v), 0) : -1;
    case 9: return s_name_ok(v) ? (snprintf(a->xclbin, sizeof a->xclbin, "%s", v), 0) : -1;
    case 10: return s_hex_digest(v, a->xclbin_sha);
    case 11: return s_name_ok(v) ? (snprintf(a->instr, sizeof a->instr, "%s", v), 0) : -1;
    default: return s_hex_digest(v, a->instr_sha);
    }
}

/* "artifact key=value ..." (line is modified). */
static xdna_diag s_artifact_line(char *line, int lineno, xdna_package *p, char *why, size_t why_len) {
    if (p->n == XDNA_MAX_ARTIFACTS)
        return s_diag(XDNA_REGISTRY_INVALID, why, why_len, "line %d: more than %d artifacts", lineno,
                      XDNA_MAX_ARTIFACTS);
    xdna_artifact a;
    memset(&a, 0, sizeof a);
    unsigned seen = 0;
    char *save = NULL;
    strtok_r(line, " \t", &save); /* "artifact" */
    for (char *tok = strtok_r(NULL, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) return s_diag(XDNA_REGISTRY_INVALID, why, why_len, "line %d: '%.40s' is not key=value", lineno, tok);
        *eq = '\0';
        if (s_field(&a, tok, eq + 1, &seen) != 0)
            return s_diag(XDNA_REGISTRY_INVALID, why, why_len, "line %d: bad, repeated or unknown field %.20s=%.70s",
                          lineno, tok, eq + 1);
    }
    if (seen != (1u << 13) - 1)
        return s_diag(XDNA_REGISTRY_INVALID, why, why_len,
                      "line %d: incomplete artifact (every one of op, bucket, "
                      "k, n, wtype, a, b, c, kernel, xclbin, xclbin_sha256, instr, instr_sha256)",
                      lineno);
    for (int i = 0; i < p->n; i++) {
        const xdna_artifact *o = &p->art[i];
        if (o->op == a.op && o->bucket == a.bucket && o->k == a.k && o->n == a.n && o->wtype == a.wtype)
            return s_diag(XDNA_REGISTRY_INVALID, why, why_len,
                          "line %d: duplicate of artifact %d (%s M%lld K%lld "
                          "N%lld %s)",
                          lineno, i + 1, xdna_op_name(a.op), (long long)a.bucket, (long long)a.k, (long long)a.n,
                          coli_dtype_name((uint32_t)a.wtype));
    }
    p->art[p->n++] = a;
    return XDNA_OK;
}

xdna_diag xdna_registry_parse(const char *text, xdna_package *p, char *why, size_t why_len) {
    p->n = 0;
    char *copy = strdup(text);
    if (!copy) return s_diag(XDNA_REGISTRY_INVALID, why, why_len, "out of memory");
    xdna_diag d = XDNA_OK;
    int lineno = 0, header = 0;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line && d == XDNA_OK; line = strtok_r(NULL, "\n", &save)) {
        lineno++; /* blank lines are skipped by strtok_r: numbers count non-empty lines */
        line[strcspn(line, "\r")] = '\0';
        const char *s = line + strspn(line, " \t");
        if (!*s || *s == '#') continue;
        if (!header) {
            int version = 0;
            char tail;
            if (sscanf(s, XDNA_REGISTRY_MAGIC " %d %c", &version, &tail) != 1 || version != 1)
                d = s_diag(XDNA_REGISTRY_INVALID, why, why_len, "line %d: want '" XDNA_REGISTRY_MAGIC " 1'", lineno);
            header = 1;
        } else if (!strncmp(s, "artifact", 8) && (s[8] == ' ' || s[8] == '\t')) {
            d = s_artifact_line(line, lineno, p, why, why_len);
        } else {
            d = s_diag(XDNA_REGISTRY_INVALID, why, why_len, "line %d: '%.40s' is not an artifact line", lineno, s);
        }
    }
    free(copy);
    if (d == XDNA_OK && !header)
        d = s_diag(XDNA_REGISTRY_INVALID, why, why_len, "empty registry (no '" XDNA_REGISTRY_MAGIC " 1' line)");
    if (d == XDNA_OK && p->n == 0) d = s_diag(XDNA_REGISTRY_INVALID, why, why_len, "the registry lists no artifact");
    if (d != XDNA_OK) p->n = 0;
    return d;
}

// ---------------------------------------------------------------------------
// the package on disk

/* dir/name exists as a regular file inside the package (after symbolic links)?
 * 0 yes, 1 absent, 2 escapes the package. */
static int s_locate(const xdna_package *p, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s", p->real, name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 1;
    char *real = realpath(path, NULL);
    if (!real) return 1;
    size_t len = strlen(p->real);
    int inside = !strncmp(real, p->real, len) && real[len] == '/';
    free(real);
    return inside ? 0 : 2;
}

static char *s_slurp(const char *path, size_t max) {
    struct stat st;
    int fd = coli_open_regular(path, &st); /* a FIFO registry is refused, not waited on */
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t got = buf ? fread(buf, 1, max + 1, f) : 0;
    fclose(f);
    if (!buf || got > max) {
        free(buf);
        return NULL;
    }
    buf[got] = '\0';
    return buf;
}

/* Every file present and inside (cheap), then every digest (reads it all). */
static xdna_diag s_check_files(const xdna_package *p, char *why, size_t why_len) {
    char path[PATH_MAX + XDNA_NAME_MAX + 2];
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < p->n; i++) {
            const xdna_artifact *a = &p->art[i];
            const char *names[2] = {a->xclbin, a->instr};
            const unsigned char *sha[2] = {a->xclbin_sha, a->instr_sha};
            for (int j = 0; j < 2; j++) {
                int where = s_locate(p, names[j], path, sizeof path);
                if (pass == 0 && where == 2)
                    return s_diag(XDNA_REGISTRY_INVALID, why, why_len, "%s resolves outside the package", names[j]);
                if (pass == 0 && where == 1)
                    return s_diag(XDNA_PACKAGE_INCOMPLETE, why, why_len,
                                  "artifact %s M%lld K%lld N%lld %s: %s is "
                                  "missing from %s",
                                  xdna_op_name(a->op), (long long)a->bucket, (long long)a->k, (long long)a->n,
                                  coli_dtype_name((uint32_t)a->wtype), names[j], p->dir);
                if (pass == 0) continue;
                unsigned char got[32];
                char err[256];
                if (xdna_sha256_file(path, got, err, sizeof err) != 0)
                    return s_diag(XDNA_INTEGRITY_FAILED, why, why_len, "%s", err);
                if (memcmp(got, sha[j], 32) != 0) {
                    char hex[65];
                    xdna_sha256_hex(got, hex);
                    return s_diag(XDNA_INTEGRITY_FAILED, why, why_len, "%s: SHA-256 %.16s... is not the registry's",
                                  names[j], hex);
                }
            }
        }
    return XDNA_OK;
}

xdna_diag xdna_package_load(const char *dir, xdna_package *p, char *why, size_t why_len) {
    memset(p, 0, sizeof *p);
    if (sodium_init() < 0) return s_diag(XDNA_INTEGRITY_FAILED, why, why_len, "libsodium did not initialise");
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || !realpath(dir, p->real))
        return s_diag(XDNA_PACKAGE_MISSING, why, why_len, "no package directory %s", dir);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", p->real, XDNA_REGISTRY_FILE);
    if (stat(path, &st) != 0) return s_diag(XDNA_PACKAGE_MISSING, why, why_len, "no %s in %s", XDNA_REGISTRY_FILE, dir);
    if (!S_ISREG(st.st_mode))
        return s_diag(XDNA_REGISTRY_INVALID, why, why_len, "%s: not a regular file (%s)", path, coli_file_kind(&st));
    char *text = s_slurp(path, 1u << 20);
    if (!text) return s_diag(XDNA_REGISTRY_INVALID, why, why_len, "%s: unreadable or over 1 MiB", path);
    xdna_diag d = xdna_registry_parse(text, p, why, why_len);
    free(text);
    if (d == XDNA_OK) d = s_check_files(p, why, why_len);
    if (d != XDNA_OK) p->n = 0;
    return d;
}

// ---------------------------------------------------------------------------
// gates

static void s_op_shape(const xdna_expert_shape *e, xdna_op op, int64_t *k, int64_t *n) {
    *k = op == XDNA_OP_DOWN ? e->n_ff : e->n_embd;
    *n = op == XDNA_OP_DOWN ? e->n_embd : e->n_ff;
}

xdna_diag xdna_gate_op(const xdna_package *p, const xdna_expert_shape *e, xdna_op op, char *why, size_t why_len) {
    int64_t k, n;
    s_op_shape(e, op, &k, &n);
    int any_op = 0, any_shape = 0;
    for (int i = 0; i < p->n; i++) {
        const xdna_artifact *a = &p->art[i];
        if (a->op != op) continue;
        any_op = 1;
        if (a->k != k || a->n != n) continue;
        any_shape = 1;
        if (a->wtype == e->types[op]) return XDNA_OK;
    }
    if (!any_op) return s_diag(XDNA_DECLINED_OP, why, why_len, "%s is not qualified in the registry", xdna_op_name(op));
    if (!any_shape)
        return s_diag(XDNA_DECLINED_SHAPE, why, why_len, "%s K %lld N %lld is not registered", xdna_op_name(op),
                      (long long)k, (long long)n);
    return s_diag(XDNA_DECLINED_DTYPE, why, why_len, "%s K %lld N %lld is not registered for %s weights",
                  xdna_op_name(op), (long long)k, (long long)n, coli_dtype_name((uint32_t)e->types[op]));
}

int xdna_find_artifact(const xdna_package *p, const xdna_expert_shape *e, xdna_op op, int64_t bucket) {
    int64_t k, n;
    s_op_shape(e, op, &k, &n);
    for (int i = 0; i < p->n; i++) {
        const xdna_artifact *a = &p->art[i];
        if (a->op == op && a->bucket == bucket && a->k == k && a->n == n && a->wtype == e->types[op]) return i;
    }
    return -1;
}
