/*
 * disk_read.c - large aligned reads of a model file (disk_read.h).
 */
#define _GNU_SOURCE /* O_DIRECT */
#include "coordinator/sched/disk_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"

#define DISK_ALIGN 4096 /* covers 512-byte and 4 KiB logical blocks */

int disk_open(disk_file *f, const char *path, int direct) {
    memset(f, 0, sizeof *f);
    f->align = DISK_ALIGN;
    f->fd_direct = -1;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) return coli_fail(COLI_EIO, "disk tier: %s: cannot open: %s", path, strerror(errno));
    /* tmpfs and some others refuse O_DIRECT at open (EINVAL): the page cache then */
    if (direct) f->fd_direct = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    pthread_mutex_init(&f->mu, NULL);
    return 0;
}

void disk_close(disk_file *f) {
    if (f->fd > 0) close(f->fd);
    if (f->fd_direct >= 0) close(f->fd_direct);
    if (f->fd > 0) pthread_mutex_destroy(&f->mu);
    f->fd = f->fd_direct = -1;
}

static uint64_t s_down(uint64_t v, size_t a) { return v / a * a; }
static uint64_t s_up(uint64_t v, size_t a) { return (v + a - 1) / a * a; }

/* The aligned envelope of a range: what one O_DIRECT read fetches. */
static size_t s_span(const disk_file *f, const disk_range *r) {
    return (size_t)(s_up(r->off + r->len, f->align) - s_down(r->off, f->align));
}

size_t disk_buffer_bytes(const disk_file *f, const disk_range *r, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += s_span(f, &r[i]);
    return total;
}

void *disk_alloc(const disk_file *f, size_t bytes) {
    void *p = NULL;
    return posix_memalign(&p, f->align, bytes ? bytes : f->align) == 0 ? p : NULL;
}

/* pread all of [off, off + len) (short reads continue); 0 or errno (EIO at end of file). */
static int s_pread_all(int fd, char *buf, size_t len, uint64_t off) {
    while (len) {
        ssize_t got = pread(fd, buf, len, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return errno;
        if (got == 0) return EIO;
        buf += got, len -= (size_t)got, off += (uint64_t)got;
    }
    return 0;
}

/* One range into dst: O_DIRECT when open and accepted, else the page cache.
 * *direct says which served it. */
static int s_read_one(disk_file *f, const disk_range *r, char *dst, const void **data, int *direct) {
    uint64_t start = s_down(r->off, f->align);
    size_t span = s_span(f, r);
    int err = EINVAL;
    /* the envelope may end past the end of the file: a short final read is fine for O_DIRECT */
    if (f->fd_direct >= 0) {
        err = 0;
        size_t done = 0;
        while (done < span) {
            ssize_t got = pread(f->fd_direct, dst + done, span - done, (off_t)(start + done));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                err = got < 0 ? errno : (start + done >= r->off + r->len ? 0 : EIO);
                break;
            }
            done += (size_t)got;
        }
        if (!err && start + done < r->off + r->len) err = EIO;
    }
    *direct = !err;
    if (err == EINVAL) /* the file system refused this read: the page cache then */
        err = s_pread_all(f->fd, dst + (r->off - start), r->len, r->off);
    if (err)
        return coli_fail(COLI_EIO, "disk tier: read of %zu bytes at %llu: %s", r->len, (unsigned long long)r->off,
                         strerror(err));
    *data = dst + (r->off - start);
    return 0;
}

int disk_read_ranges(disk_file *f, const disk_range *r, int n, void *buf, const void **data) {
    double t0 = coli_now_s();
    char *dst = buf;
    int rc = 0, all_direct = 1;
    uint64_t bytes = 0;
    for (int i = 0; i < n && !rc; i++) {
        int direct = 0;
        rc = s_read_one(f, &r[i], dst, &data[i], &direct);
        all_direct &= direct;
        bytes += direct ? s_span(f, &r[i]) : r[i].len;
        dst += s_span(f, &r[i]);
    }
    double us = (coli_now_s() - t0) * 1e6;
    pthread_mutex_lock(&f->mu);
    f->reads++;
    f->bytes += bytes;
    f->direct += (uint64_t)(all_direct && !rc);
    f->lat_sum_us += us;
    f->lat_us[f->n_lat++ % DISK_LAT_RING] = us > 4e9 ? 4000000000u : (uint32_t)us;
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int s_cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

double disk_latency_us(disk_file *f, double q) {
    uint32_t v[DISK_LAT_RING];
    pthread_mutex_lock(&f->mu);
    size_t n = f->n_lat < DISK_LAT_RING ? (size_t)f->n_lat : DISK_LAT_RING;
    memcpy(v, f->lat_us, n * sizeof *v);
    pthread_mutex_unlock(&f->mu);
    if (!n) return 0;
    qsort(v, n, sizeof *v, s_cmp_u32);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}
