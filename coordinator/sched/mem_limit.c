/*
 * mem_limit.c - the memory this process may use: the kernel's MemAvailable,
 * or less when a memory cgroup (v1 or v2) limits the process (its limit
 * minus what the cgroup already uses, page cache included, since the kernel
 * counts that cache against the limit); and from it the disk tier's RAM
 * budget when a file does not fit (disk_tier.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/sched/sched_internal.h"
#include "core/gguf/gguf.h"

/* The first unsigned number in file (0 when unreadable, "max" is 0 too). */
static uint64_t s_read_u64(const char *path) {
    FILE *f = fopen(path, "r");
    char buf[64] = "";
    if (!f) return 0;
    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
    fclose(f);
    return strtoull(buf, NULL, 10);
}

static uint64_t s_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024;
}

/* The least room (limit - usage) under the cgroup at dir (below root) and
 * its parents, which limit it too; 0 when none has a limit. */
static uint64_t s_room_up(const char *root, const char *rel, const char *limit_file, const char *usage_file) {
    char dir[1024], path[1200];
    uint64_t room = 0;
    snprintf(dir, sizeof dir, "%s", rel);
    for (;;) {
        snprintf(path, sizeof path, "%s%s/%s", root, dir, limit_file);
        uint64_t limit = s_read_u64(path);
        snprintf(path, sizeof path, "%s%s/%s", root, dir, usage_file);
        uint64_t usage = s_read_u64(path);
        if (limit && limit < (1ull << 60)) {
            uint64_t r = limit > usage ? limit - usage : 0;
            if (!room || r < room) room = r;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || !dir[0]) return room;
        *slash = 0; /* "/a/b" -> "/a" -> "" (the root) */
    }
}

/* Room left under this process's memory cgroup: 0 when none limits it. */
static uint64_t s_cgroup_room(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024];
    uint64_t room = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        uint64_t r = 0;
        if (!c2) continue;
        if (!strncmp(c1 + 1, "memory:", 7)) /* v1 */
            r = s_room_up("/sys/fs/cgroup/memory", c2 + 1, "memory.limit_in_bytes", "memory.usage_in_bytes");
        else if (c2 == c1 + 1 && !strncmp(line, "0:", 2)) /* v2 */
            r = s_room_up("/sys/fs/cgroup", c2 + 1, "memory.max", "memory.current");
        if (r && (!room || r < room)) room = r;
    }
    if (f) fclose(f);
    return room;
}

uint64_t sched_memory_allowed(void) {
    uint64_t avail = s_mem_available(), room = s_cgroup_room();
    return room && (room < avail || !avail) ? room : avail;
}

/* The default when the file does not fit in the memory this process may use
 * (bench-bigmem: the disk tier is then far ahead of the mapped file, which
 * the kernel evicts by its LRU; when it fits, the mapping is as fast and copies
 * nothing): 70% of what is left after the dense weights, for the cache. */
static uint64_t s_auto_ram(const gguf_file *f) {
    uint64_t size = gguf_size(f), allowed = sched_memory_allowed(), experts = 0;
    if (!allowed || size <= allowed / 10 * 9) return 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) { /* blk.L.ffn_{gate,up,down}_exps.weight */
        const coli_tensor *t = gguf_tensor(f, i);
        if (strstr(t->name, "_exps.weight")) experts += t->nbytes;
    }
    uint64_t dense = size > experts ? size - experts : 0;
    uint64_t ram = allowed > dense ? (allowed - dense) / 10 * 7 : 0;
    return ram > (64u << 20) ? ram : 64u << 20;
}

int moe_exec_ram_budget(const char *devices, const gguf_file *f, const coli_settings *set, uint64_t *bytes) {
    *bytes = 0;
    if (devices && strncmp(devices, "inproc@ram=", 11) == 0) return sched_parse_budget(devices + 11, bytes);
    int in_process = !devices || !*devices || !strcmp(devices, "inproc") || !strcmp(devices, "auto");
    if (in_process && f && (!set || set->disk_auto)) *bytes = s_auto_ram(f);
    return 0;
}
