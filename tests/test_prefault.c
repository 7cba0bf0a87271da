/*
 * test_prefault.c - core/prefault.h: the background pass fills this
 * process's page tables for the ranges (the mapping's Rss in
 * /proc/self/smaps, the kernel's own count, says so), stops on request,
 * refuses what does not fit; a model load starts it unless COLI_PREFAULT=0.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "colibri.h"
#include "coordinator/moe_exec.h"
#include "core/gguf/gguf.h"
#include "core/kernels/expert_ffn.h"
#include "core/prefault.h"
#include "tests/sched_util.h"

#define BUNDLED "models/tiny-moe-4e2r-f16.gguf"

/* Rss in bytes of process pid's (0: this one's) mapping that contains
 * addr (or, addr NULL, of its first mapping of a file whose path ends with
 * name); -1 if none. */
static long long process_mapping_rss(int pid, const void *addr, const char *name) {
    char path[64];
    snprintf(path, sizeof path, pid ? "/proc/%d/smaps" : "/proc/self/smaps", pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[512];
    int in = 0;
    long long rss = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            if (in) break;
            const size_t len = strlen(line);
            if (len && line[len - 1] == '\n') line[len - 1] = '\0';
            in = addr ? (uintptr_t)addr >= lo && (uintptr_t)addr < hi
                      : strlen(line) >= strlen(name) && !strcmp(line + strlen(line) - strlen(name), name);
            continue;
        }
        long long kib;
        if (in && sscanf(line, "Rss: %lld kB", &kib) == 1) rss = kib * 1024;
    }
    fclose(f);
    return rss;
}

static long long mapping_rss(const void *addr, const char *name) { return process_mapping_rss(0, addr, name); }

/* A file of n bytes (every page written), mapped read-only. */
static const unsigned char *map_file(size_t n, int *fd_out) {
    char path[] = "/tmp/coli-prefault-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    unsigned char *buf = malloc(1 << 16);
    memset(buf, 7, 1 << 16);
    for (size_t off = 0; off < n; off += 1 << 16) cr_assert_eq(write(fd, buf, 1 << 16), 1 << 16);
    free(buf);
    const unsigned char *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    cr_assert_neq((void *)p, MAP_FAILED);
    *fd_out = fd;
    return p;
}

/* Polls done() until it reaches want, for at most ~20 s (a loaded machine). */
static size_t wait_done(const coli_prefault *pf, size_t want) {
    for (int i = 0; i < 2000 && coli_prefault_done(pf) < want; i++) usleep(10000);
    return coli_prefault_done(pf);
}

Test(prefault, fills_the_page_tables_of_the_ranges) {
    const size_t n = (size_t)16 << 20;
    int fd;
    const unsigned char *p = map_file(n, &fd);
    cr_assert_lt(mapping_rss(p, NULL), (long long)n / 4, "pages mapped before any read");
    /* two ranges, the second starting off a page boundary */
    const coli_byte_range r[2] = {{p, n / 2}, {p + n / 2 + 100, n / 2 - 100}};
    coli_prefault *pf = coli_prefault_start(r, 2);
    cr_assert_not_null(pf);
    cr_assert_eq(wait_done(pf, n - 100), n - 100);
    coli_prefault_stop(&pf);
    cr_assert_null(pf);
    cr_expect_geq(mapping_rss(p, NULL), (long long)n - 4096, "Rss %lld of %zu", mapping_rss(p, NULL), n);
    munmap((void *)p, n);
    close(fd);
}

Test(prefault, stops_on_request_before_the_mapping_goes) {
    const size_t n = (size_t)64 << 20;
    int fd;
    const unsigned char *p = map_file(n, &fd);
    const coli_byte_range r = {p, n};
    coli_prefault *pf = coli_prefault_start(&r, 1);
    cr_assert_not_null(pf);
    coli_prefault_stop(&pf); /* joins: nothing touches p after this */
    munmap((void *)p, n);
    close(fd);
    coli_prefault_stop(&pf); /* NULL: a no-op */
}

Test(prefault, refuses_what_does_not_fit_or_is_empty) {
    static const unsigned char byte = 1;
    const coli_byte_range huge = {&byte, SIZE_MAX / 4}; /* never read: refused before */
    cr_expect_null(coli_prefault_start(&huge, 1));
    const coli_byte_range empty = {&byte, 0};
    cr_expect_null(coli_prefault_start(&empty, 1));
    cr_expect_null(coli_prefault_start(&empty, 0));
    cr_expect_eq(coli_prefault_done(NULL), 0);
}

/* Process pid's Rss of the bundled model's mapping some time after a
 * load: with the pass on, once it reaches want (polled for up to ~20 s on
 * a loaded machine); off, after 200 ms. */
static long long rss_after_load(int pid, int on, long long want) {
    long long rss = process_mapping_rss(pid, NULL, "tiny-moe-4e2r-f16.gguf");
    for (int i = 0; i < 2000 && on && rss < want; i++, usleep(10000))
        rss = process_mapping_rss(pid, NULL, "tiny-moe-4e2r-f16.gguf");
    if (!on) usleep(200000);
    return process_mapping_rss(pid, NULL, "tiny-moe-4e2r-f16.gguf");
}

/* The bundled model's mapping after a load, with COLI_PREFAULT as given:
 * on, its Rss reaches the file's size; off, the load itself maps little of
 * it (headers, vocabulary), far from all. */
static void check_model_load(int on) {
    setenv("COLI_PREFAULT", on ? "1" : "0", 1);
    coli_model *m = sched_load(BUNDLED, "inproc");
    FILE *f = fopen(BUNDLED, "rb");
    fseek(f, 0, SEEK_END);
    const long long size = ftell(f);
    fclose(f);
    const long long rss = rss_after_load(0, on, size - 4096);
    if (on)
        cr_expect_geq(rss, size - 4096, "COLI_PREFAULT=1: Rss %lld of %lld", rss, size);
    else
        cr_expect_lt(rss, size / 2, "COLI_PREFAULT=0: Rss %lld of %lld", rss, size);
    coli_model_free(&m);
    unsetenv("COLI_PREFAULT");
}

Test(prefault, model_load_fills_the_mapping) { check_model_load(1); }

Test(prefault, model_load_leaves_it_with_prefault_off) { check_model_load(0); }

/* Bytes of the routed expert stacks (*_exps) of the GGUF at path. */
static long long expert_bytes(const char *path) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(path, &f), 0, "%s", coli_last_error());
    long long n = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++)
        if (strstr(gguf_tensor(f, i)->name, "_exps.")) n += (long long)gguf_tensor(f, i)->nbytes;
    gguf_close(&f);
    return n;
}

/* A cpu:1 worker holding every expert: on, its mapping's Rss reaches the
 * expert stacks' bytes before any token; off, it stays far below. The
 * worker inherits the setting. */
static void check_worker(int on) {
    sched_env_defaults();
    setenv("COLI_PREFAULT", on ? "1" : "0", 1);
    const long long want = expert_bytes(BUNDLED);
    coli_model *m = sched_load(BUNDLED, "cpu:1");
    const int pid = sched_worker_pid(m, 0);
    cr_assert_gt(pid, 0);
    const long long rss = rss_after_load(pid, on, want);
    if (on)
        cr_expect_geq(rss, want, "COLI_PREFAULT=1: worker Rss %lld of %lld expert bytes", rss, want);
    else
        cr_expect_lt(rss, want / 2, "COLI_PREFAULT=0: worker Rss %lld of %lld expert bytes", rss, want);
    coli_model_free(&m);
    unsetenv("COLI_PREFAULT");
}

Test(prefault, worker_fills_its_experts) { check_worker(1); }

Test(prefault, worker_leaves_them_with_prefault_off) { check_worker(0); }

/* The coordinator's share of the file (moe_exec_prefault_ranges): with
 * workers holding every expert but (0, 1), the ranges are the dense weights
 * and that one expert; no other byte of an expert stack is in them. */
static int computes_only_0_1(moe_exec *self, int layer, int expert) {
    (void)self;
    return layer == 0 && expert == 1;
}

Test(prefault, coordinator_leaves_out_the_experts_workers_hold) {
    gguf_file *f = NULL;
    cr_assert_eq(gguf_open(BUNDLED, &f), 0, "%s", coli_last_error());
    moe_exec all = {0}, some = {.computes_here = computes_only_0_1};
    coli_byte_range *r = NULL;
    int n = 0;
    cr_assert_eq(moe_exec_prefault_ranges(&all, f, 4, 4, &r, &n), 0, "%s", coli_last_error());
    cr_expect(n == 1 && r[0].p == gguf_base(f) && r[0].n == gguf_size(f), "in-process: the whole file");
    free(r);
    cr_assert_eq(moe_exec_prefault_ranges(&some, f, 4, 4, &r, &n), 0, "%s", coli_last_error());
    expert_weights ew;
    cr_assert_eq(expert_weights_from_gguf(f, 0, 1, &ew), 0);
    const long long one = (long long)expert_weights_bytes(&ew);
    long long total = 0;
    for (int i = 0; i < n; i++) {
        total += (long long)r[i].n;
        for (int64_t t = 0; t < gguf_n_tensors(f); t++) { /* inside an expert stack only as (0, 1)'s parts */
            const coli_tensor *x = gguf_tensor(f, t);
            const char *a = r[i].p, *b = a + r[i].n, *ta = x->data, *tb = ta + x->nbytes;
            if (!strstr(x->name, "_exps.") || b <= ta || a >= tb) continue;
            const expert_part_bytes pb = expert_parts_bytes(&ew);
            cr_expect((a == ew.gate && r[i].n == pb.gate) || (a == ew.up && r[i].n == pb.up) ||
                          (a == ew.down && r[i].n == pb.down),
                      "range %d overlaps %s beyond expert (0, 1)", i, x->name);
        }
    }
    cr_expect_eq(total, (long long)gguf_size(f) - expert_bytes(BUNDLED) + one, "dense bytes + one expert");
    free(r);
    gguf_close(&f);
}
