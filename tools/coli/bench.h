/*
 * bench.h - the pieces of `coli bench` (cmd_bench.c): the read-bandwidth
 * test, the weight bytes a decode token reads, and small statistics.
 */
#ifndef COLI_CLI_BENCH_H
#define COLI_CLI_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* STREAM-style read test: n_threads threads sum disjoint parts of a
 * buffer of mib MiB (far larger than the caches), best of `passes`
 * passes after one warm-up. GB/s (1e9 bytes/s) in *gbs. 0 or CLI_FAIL
 * (printed). */
int bench_read_bandwidth(int n_threads, int mib, int passes, double *gbs);
/* The sum (wrapping) of the 64-bit words of p[0..bytes) (bytes a multiple
 * of 32, p 32-byte aligned), read with the bandwidth test's loads. */
unsigned long long bench_sum_bytes(const void *p, size_t bytes);

/* The machine's token-latency floor (bench_floor.c): a pool of n_threads
 * whose "tokens" are n_jobs jobs reading bytes_per_token of a buffer larger
 * than the caches, as a decode token reads its weights. NULL on failure
 * (printed). bench_floor_run: n_tokens tokens after a warm-up one, each
 * token's seconds in lat_s[0..n_tokens). */
typedef struct bench_floor bench_floor;
bench_floor *bench_floor_new(int n_threads, size_t bytes_per_token, int n_jobs);
void bench_floor_run(bench_floor *f, int n_tokens, double *lat_s);
void bench_floor_free(bench_floor *f);

/* Weight bytes one decode token reads in the GGUF at path: every tensor
 * in full except the token embedding (one row) and the routed expert
 * stacks (*_exps: n_expert_used of n_expert). Also the whole file's
 * tensor bytes. 0 or CLI_FAIL (printed). */
typedef struct bench_bytes {
    int64_t per_token;    /* the sum above */
    int64_t experts;      /* of which routed experts */
    int64_t output;       /* of which the output head */
    int64_t all_tensors;  /* every tensor of the file */
    char expert_type[16]; /* type of the expert stacks ("Q8_0"), or of the output head */
} bench_bytes;
int bench_decode_bytes(const char *path, bench_bytes *out);

/* Per worker of a configuration with workers (bench_hosts.c), from its stats
 * JSON (coli_model_stats_json): address, dispatch p50/p99 of its batches (send
 * to reply), rows served, bytes sent and received per evaluated token
 * (n_tokens: the tokens the run evaluated), fallbacks by reason.
 * bench_hosts_json: a new cJSON array (caller deletes), NULL when the stats
 * have no workers (in-process). bench_hosts_print: the same as lines on stdout. */
struct cJSON;
struct cJSON *bench_hosts_json(const char *stats_json, double n_tokens);
void bench_hosts_print(const char *stats_json, double n_tokens);
/* The stats' expert_moves (hosts lost, experts and bytes moved, time): a new
 * cJSON object (caller deletes), NULL without workers. */
struct cJSON *bench_moves_json(const char *stats_json);
/* `coli bench --batch LIST` (bench_batch.c): for each level N of levels,
 * N contexts decode n_decode greedy tokens each through one coli_batch on
 * their own threads; prints step time, aggregate tok/s and the ratio to
 * the first level (medians over repeats, levels interleaved). */
#define BENCH_BATCH_MAX_LEVELS 8
#define BENCH_BATCH_MAX_REPEAT 100
typedef struct bench_batch_opts {
    const char *model, *devices; /* devices, xdna: as coli_model_params' */
    int n_threads, n_decode, repeat, xdna;
    int n_levels, levels[BENCH_BATCH_MAX_LEVELS]; /* rows per step, each 1..64 */
    double gbs; /* measured read bandwidth (GB/s) for the bytes limit, 0: not measured */
} bench_batch_opts;
/* 0 or CLI_FAIL (printed). */
int bench_batch(const bench_batch_opts *o);

/* Sorts v[0..n) in place; the q-quantile (0..1) by nearest rank; 0 if n is 0. */
double bench_quantile(double *v, int n, double q);

#endif
