/*
 * disk_read.h - large reads of a model file for the disk tier (disk_tier.c):
 * O_DIRECT where the file system allows it (no page cache: the bytes land
 * once, in the expert cache, and a memory cgroup does not count them twice),
 * else ordinary reads through the page cache. Thread-safe: reader threads
 * share one disk_file. Counts reads, bytes and each read's latency.
 */
#ifndef COLI_COORD_SCHED_DISK_READ_H
#define COLI_COORD_SCHED_DISK_READ_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define DISK_LAT_RING 4096 /* latencies kept for the percentiles (the latest) */

typedef struct disk_file {
    int fd;             /* ordinary reads (page cache) */
    int fd_direct;      /* O_DIRECT, -1 when the file system refuses it */
    size_t align;       /* O_DIRECT alignment of offset, length and buffer */
    pthread_mutex_t mu; /* the counters below */
    uint64_t reads;     /* disk_read_parts calls (one expert each) */
    uint64_t bytes;     /* bytes read, alignment padding included */
    uint64_t direct;    /* of those reads, the ones O_DIRECT served */
    uint32_t lat_us[DISK_LAT_RING];
    uint64_t n_lat;
    double lat_sum_us; /* of every read */
} disk_file;

/* One range of the file to read: [off, off + len). */
typedef struct disk_range {
    uint64_t off;
    size_t len;
} disk_range;

/* Open path; direct: try O_DIRECT (0: the page cache only). */
int disk_open(disk_file *f, const char *path, int direct);
void disk_close(disk_file *f);
/* Bytes of buffer ranges[0..n) need, each range aligned on its own. */
size_t disk_buffer_bytes(const disk_file *f, const disk_range *r, int n);
/* Read ranges[0..n) into buf (from disk_alloc, disk_buffer_bytes long):
 * one pread per range; data[i] points at range i's bytes inside buf. One read
 * counted, its latency the whole call's. 0 or a coli_status naming the range. */
int disk_read_ranges(disk_file *f, const disk_range *r, int n, void *buf, const void **data);
/* A buffer aligned for O_DIRECT; free() releases it. */
void *disk_alloc(const disk_file *f, size_t bytes);
/* Latency percentile q (0..1) of the kept reads, in microseconds; 0 when none. */
double disk_latency_us(disk_file *f, double q);

#endif
