/*
 * memcg_util.h - run a program inside a memory cgroup of its own (v1: the
 * memory controller's hierarchy; v2: the unified hierarchy with the memory
 * controller) and read its peak usage, page cache included. Tests skip
 * where neither can be created (no cgroup file system, not root).
 */
#ifndef COLI_TEST_MEMCG_UTIL_H
#define COLI_TEST_MEMCG_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct memcg {
    char dir[256];
    int v2;
} memcg;

static inline int memcg_write(const memcg *m, const char *file, const char *text) {
    char path[320];
    snprintf(path, sizeof path, "%s/%s", m->dir, file);
    int fd = open(path, O_WRONLY);
    if (fd < 0) return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

static inline uint64_t memcg_read_u64(const memcg *m, const char *file) {
    char path[320], buf[64] = "";
    snprintf(path, sizeof path, "%s/%s", m->dir, file);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
    fclose(f);
    return strtoull(buf, NULL, 10);
}

/* A new cgroup limited to limit bytes; 0, or -1 with why filled. */
static inline int memcg_create(memcg *m, const char *name, uint64_t limit, char *why, size_t why_len) {
    char lim[32];
    snprintf(lim, sizeof lim, "%llu", (unsigned long long)limit);
    memset(m, 0, sizeof *m);
    snprintf(m->dir, sizeof m->dir, "/sys/fs/cgroup/memory/%s-%d", name, (int)getpid());
    if (access("/sys/fs/cgroup/memory/memory.limit_in_bytes", F_OK) == 0) {
        if (mkdir(m->dir, 0755) != 0 && errno != EEXIST) goto fail;
        if (memcg_write(m, "memory.limit_in_bytes", lim) == 0) return 0;
        rmdir(m->dir);
        goto fail;
    }
    m->v2 = 1;
    snprintf(m->dir, sizeof m->dir, "/sys/fs/cgroup/%s-%d", name, (int)getpid());
    if (access("/sys/fs/cgroup/cgroup.subtree_control", F_OK) != 0) goto fail;
    memcg root = {"/sys/fs/cgroup", 1};
    (void)memcg_write(&root, "cgroup.subtree_control", "+memory");
    if (mkdir(m->dir, 0755) != 0 && errno != EEXIST) goto fail;
    if (memcg_write(m, "memory.max", lim) == 0) return 0;
    rmdir(m->dir);
fail:
    snprintf(why, why_len, "no memory cgroup could be created (%s: %s)", m->dir, strerror(errno));
    return -1;
}

/* Peak usage in bytes (page cache included) since creation. */
static inline uint64_t memcg_peak(const memcg *m) {
    return memcg_read_u64(m, m->v2 ? "memory.peak" : "memory.max_usage_in_bytes");
}

static inline void memcg_destroy(memcg *m) {
    if (m->dir[0]) rmdir(m->dir);
    m->dir[0] = 0;
}

/* Run argv inside m, stdout to out_path (NULL: /dev/null); exit status or -1. */
static inline int memcg_run(const memcg *m, char *const argv[], const char *out_path) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        char me[32];
        snprintf(me, sizeof me, "%d", (int)getpid());
        if (memcg_write(m, "cgroup.procs", me) != 0) _exit(126);
        int fd = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Drop path's pages from the page cache (written back first), so the next
 * reader is charged for what it brings in. */
static inline void memcg_drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

#endif
