/*
 * curve_keys.c - reading, writing and applying CURVE key files (see
 * curve_keys.h). A secret key that others could read is refused, as ssh
 * refuses a private key with loose permissions: whoever can read it can
 * pose as its owner.
 */
#define _GNU_SOURCE
#include "proto/curve_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "core/error.h"
#include "core/file_io.h"

int curve_available(void) { return zmq_has("curve"); }

/* 40 characters of Z85 that decode (zmq_z85_decode checks the alphabet). */
static int s_key_valid(const char *k) {
    uint8_t raw[32];
    return strlen(k) == CURVE_KEY_CHARS && zmq_z85_decode(raw, k) != NULL;
}

int curve_key_read(const char *dir, const char *name, int secret, curve_key key) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return coli_fail(COLI_EIO, "key file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return coli_fail(COLI_EIO, "key file %s: not a regular file", path);
    }
    if (secret && (st.st_mode & 077)) {
        close(fd);
        return coli_fail(COLI_EINVAL, "key file %s: mode %03o lets others read a secret key (chmod 600 it)", path,
                         (unsigned)(st.st_mode & 0777));
    }
    char buf[CURVE_KEY_CHARS + 8];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) return coli_fail(COLI_EIO, "key file %s: %s", path, strerror(errno));
    buf[n] = 0;
    buf[strcspn(buf, "\r\n")] = 0;
    if (!s_key_valid(buf)) return coli_fail(COLI_EFORMAT, "key file %s: not a Z85 CURVE key (40 characters)", path);
    memcpy(key, buf, CURVE_KEY_CHARS + 1);
    return 0;
}

int curve_key_write(const char *dir, const char *name, const char *key, int secret) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    /* never over an existing key; a secret is 0600 from its first byte */
    return coli_outfile_write_line("key file", path, key, COLI_OUTFILE_NO_REPLACE | (secret ? COLI_OUTFILE_SECRET : 0));
}

/* Each non-empty, non-# line of dir/authorized_coordinators is one key. */
static int s_authorized_file(const char *dir, curve_key *keys, int cap, int *n) {
    char path[4096], line[256];
    snprintf(path, sizeof path, "%s/authorized_coordinators", dir);
    FILE *f = fopen(path, "re");
    if (!f) return errno == ENOENT ? 0 : coli_fail(COLI_EIO, "%s: %s", path, strerror(errno));
    int rc = 0;
    for (int no = 1; rc == 0 && fgets(line, sizeof line, f); no++) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        if (!s_key_valid(line))
            rc = coli_fail(COLI_EFORMAT, "%s:%d: not a Z85 CURVE key", path, no);
        else if (*n == cap)
            rc = coli_fail(COLI_EINVAL, "%s: more than %d keys", path, cap);
        else
            memcpy(keys[(*n)++], line, CURVE_KEY_CHARS + 1);
    }
    fclose(f);
    return rc;
}

int curve_authorized_load(const char *dir, curve_key *keys, int cap, int *n) {
    *n = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/coordinator.pub", dir);
    if (access(path, F_OK) == 0) {
        int rc = curve_key_read(dir, "coordinator.pub", 0, keys[0]);
        if (rc) return rc;
        *n = 1;
    }
    int rc = s_authorized_file(dir, keys, cap, n);
    if (rc) return rc;
    if (*n == 0)
        return coli_fail(COLI_EINVAL,
                         "keys %s: no coordinator.pub and no authorized_coordinators: "
                         "no coordinator could connect",
                         dir);
    return 0;
}

// ---------------------------------------------------------------------------
//  worker-HOST-PORT.pub for tcp://HOST:PORT (other characters as '_').
static void s_worker_key_name(const char *endpoint, char *out, size_t n) {
    const char *hp = strstr(endpoint, "://");
    hp = hp ? hp + 3 : endpoint;
    size_t len = (size_t)snprintf(out, n, "worker-%s", hp);
    char *colon = strrchr(out, ':');
    if (colon) *colon = '-';
    for (size_t i = 7; i < len && i < n; i++)
        if (!(out[i] == '.' || out[i] == '-' || (out[i] >= '0' && out[i] <= '9') || (out[i] >= 'a' && out[i] <= 'z') ||
              (out[i] >= 'A' && out[i] <= 'Z')))
            out[i] = '_';
    strncat(out, ".pub", n - strlen(out) - 1);
}

int curve_client_setup(void *sock, const char *dir, const char *endpoint) {
    curve_key secret, public, server;
    char name[300];
    s_worker_key_name(endpoint, name, sizeof name);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = curve_key_read(dir, "coordinator.key", 1, secret);
    if (rc == 0) rc = curve_key_read(dir, access(path, F_OK) == 0 ? name : "worker.pub", 0, server);
    if (rc) return rc;
    if (zmq_curve_public(public, secret) != 0)
        return coli_fail(COLI_EFORMAT, "key file %s/coordinator.key: not a secret key", dir);
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server, CURVE_KEY_CHARS) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, public, CURVE_KEY_CHARS) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret, CURVE_KEY_CHARS) != 0)
        return coli_fail(COLI_EIO, "CURVE client options: %s", zmq_strerror(errno));
    return 0;
}

int curve_server_setup(void *sock, const char *dir) {
    curve_key secret;
    int rc = curve_key_read(dir, "worker.key", 1, secret);
    if (rc) return rc;
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret, CURVE_KEY_CHARS) != 0)
        return coli_fail(COLI_EIO, "CURVE server options: %s", zmq_strerror(errno));
    return 0;
}
