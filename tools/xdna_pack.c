/*
 * xdna_pack.c - build an XDNA artifact package: copy the artifact files into
 * a directory and write its registry.txt with the SHA-256 of each file
 * (plugins/xdna/xdna_package.h has the format; docs/xdna.md the rest).
 *
 *   xdna_pack OUT_DIR SPEC...
 *       SPEC = op=ffn_gate,bucket=64,k=4096,n=14336,wtype=Q4_0,kernel=MLIR_AIE,
 *              xclbin=PATH,instr=PATH
 *       (real artifacts, built elsewhere with AMD's NPU toolchain)
 *   xdna_pack --synth MODEL.gguf OUT_DIR
 *       synthetic artifacts for every expert shape and weight type of MODEL,
 *       buckets 64 and 256: what the synthetic XRT runtime of the tests
 *       executes (plugins/xdna/xrt_synth). Never for a real device.
 *
 * The package is checked with the lane's own gate before the tool says OK.
 * Exit status 0, 1 (failure, one line on stderr), 2 (usage).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/kernels/expert_ffn.h"
#include "core/gguf/gguf.h"
#include "plugins/xdna/xdna_package.h"
#include "core/tensor.h"

typedef struct pack_item {
    xdna_artifact a;
    char xclbin_src[PATH_MAX], instr_src[PATH_MAX];
} pack_item;

static int s_copy(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    int rc = in && out ? 0 : -1;
    char buf[1 << 16];
    size_t n;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) rc = -1;
    if (in && ferror(in)) rc = -1;
    if (in) fclose(in);
    if (out && fclose(out) != 0) rc = -1;
    if (rc) fprintf(stderr, "xdna_pack: copy %s -> %s: %s\n", src, dst, strerror(errno ? errno : EIO));
    return rc;
}

static const char *s_base(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Copy both files of it into dir (under their base names) and hash them. */
static int s_add_files(const char *dir, pack_item *it) {
    const char *src[2] = {it->xclbin_src, it->instr_src};
    char *name[2] = {it->a.xclbin, it->a.instr};
    unsigned char *sha[2] = {it->a.xclbin_sha, it->a.instr_sha};
    for (int j = 0; j < 2; j++) {
        char dst[PATH_MAX + XDNA_NAME_MAX + 2], why[512];
        snprintf(name[j], XDNA_NAME_MAX, "%s", s_base(src[j]));
        snprintf(dst, sizeof dst, "%s/%s", dir, name[j]);
        if (strcmp(src[j], dst) && s_copy(src[j], dst)) return -1;
        if (xdna_sha256_file(dst, sha[j], why, sizeof why)) {
            fprintf(stderr, "xdna_pack: %s\n", why);
            return -1;
        }
    }
    return 0;
}

static int s_write_registry(const char *dir, const pack_item *items, int n) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, XDNA_REGISTRY_FILE);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "xdna_pack: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, XDNA_REGISTRY_MAGIC " 1\n# written by xdna_pack; one artifact per line\n");
    for (int i = 0; i < n; i++) {
        const xdna_artifact *a = &items[i].a;
        char hx[65], hi[65];
        xdna_sha256_hex(a->xclbin_sha, hx);
        xdna_sha256_hex(a->instr_sha, hi);
        fprintf(f,
                "artifact op=%s bucket=%lld k=%lld n=%lld wtype=%s a=BF16 b=BF16 c=F32 kernel=%s "
                "xclbin=%s xclbin_sha256=%s instr=%s instr_sha256=%s\n",
                xdna_op_name(a->op), (long long)a->bucket, (long long)a->k, (long long)a->n,
                coli_dtype_name((uint32_t)a->wtype), a->kernel, a->xclbin, hx, a->instr, hi);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* "op=..,bucket=..,...,xclbin=PATH,instr=PATH" -> it (the files are not read here). */
static int s_parse_spec(const char *spec, pack_item *it) {
    char line[4096], fields[4096] = "", text[4400];
    snprintf(line, sizeof line, "%s", spec);
    it->xclbin_src[0] = it->instr_src[0] = '\0';
    char *save = NULL;
    for (char *tok = strtok_r(line, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strncmp(tok, "xclbin=", 7))
            snprintf(it->xclbin_src, sizeof it->xclbin_src, "%s", tok + 7);
        else if (!strncmp(tok, "instr=", 6))
            snprintf(it->instr_src, sizeof it->instr_src, "%s", tok + 6);
        else if (strlen(fields) + strlen(tok) + 2 < sizeof fields)
            strcat(strcat(fields, " "), tok);
    }
    /* the registry parser checks the fields; names and digests are placeholders here */
    static const char zeros[] = "0000000000000000000000000000000000000000000000000000000000000000";
    snprintf(text, sizeof text,
             XDNA_REGISTRY_MAGIC " 1\nartifact%s xclbin=a.x xclbin_sha256=%s instr=a.i "
                                 "instr_sha256=%s\n",
             fields, zeros, zeros);
    xdna_package p;
    char why[512];
    memset(&p, 0, sizeof p);
    if (!it->xclbin_src[0] || !it->instr_src[0] || xdna_registry_parse(text, &p, why, sizeof why) != XDNA_OK) {
        fprintf(stderr, "xdna_pack: spec '%.200s': %s\n", spec,
                it->xclbin_src[0] && it->instr_src[0] ? why : "needs xclbin=PATH and instr=PATH");
        return -1;
    }
    it->a = p.art[0];
    return 0;
}

/* The synthetic xclbin and instruction stream of one artifact, in dir. */
static int s_write_synth(const char *dir, pack_item *it) {
    const xdna_artifact *a = &it->a;
    snprintf(it->xclbin_src, sizeof it->xclbin_src, "%s/%s_m%lld_k%lld_n%lld_%s.xclbin", dir, xdna_op_name(a->op),
             (long long)a->bucket, (long long)a->k, (long long)a->n, coli_dtype_name((uint32_t)a->wtype));
    snprintf(it->instr_src, sizeof it->instr_src, "%.*s.insts", (int)(strlen(it->xclbin_src) - 7), it->xclbin_src);
    FILE *f = fopen(it->xclbin_src, "w");
    if (!f) return -1;
    fprintf(f, "COLI-SYNTH-XCLBIN 1\nkernel %s\nm %lld\nk %lld\nn %lld\n", a->kernel, (long long)a->bucket,
            (long long)a->k, (long long)a->n);
    if (fclose(f)) return -1;
    const uint32_t words[5] = {0x53495843u, 1, (uint32_t)a->bucket, (uint32_t)a->k, (uint32_t)a->n};
    f = fopen(it->instr_src, "wb");
    if (!f) return -1;
    size_t w = fwrite(words, sizeof words, 1, f);
    return fclose(f) == 0 && w == 1 ? 0 : -1;
}

/* Every distinct (op, K, N, weight type) of the model's experts, two buckets each. */
static int s_synth_items(const char *model, pack_item *items, int cap, int *n) {
    gguf_file *g = NULL;
    if (gguf_open(model, &g) != 0) {
        fprintf(stderr, "xdna_pack: %s: cannot open as GGUF\n", model);
        return -1;
    }
    *n = 0;
    expert_weights w;
    for (int l = 0; expert_weights_from_gguf(g, l, 0, &w) == 0; l++) {
        const coli_dtype types[3] = {w.gate_type, w.up_type, w.down_type};
        for (int op = 0; op < XDNA_N_OPS; op++)
            for (int b = 0; b < 2; b++) {
                xdna_artifact a = {.op = (xdna_op)op,
                                   .bucket = b ? 256 : 64,
                                   .wtype = (int32_t)types[op],
                                   .k = op == XDNA_OP_DOWN ? w.n_ff : w.n_embd,
                                   .n = op == XDNA_OP_DOWN ? w.n_embd : w.n_ff};
                snprintf(a.kernel, sizeof a.kernel, "MLIR_AIE");
                int dup = 0;
                for (int i = 0; i < *n; i++)
                    dup |= items[i].a.op == a.op && items[i].a.bucket == a.bucket && items[i].a.k == a.k &&
                           items[i].a.n == a.n && items[i].a.wtype == a.wtype;
                if (dup) continue;
                if (*n == cap) break;
                items[(*n)++].a = a;
            }
    }
    gguf_close(&g);
    if (*n == 0) fprintf(stderr, "xdna_pack: %s: no MoE experts found\n", model);
    return *n ? 0 : -1;
}

int main(int argc, char **argv) {
    const int synth = argc >= 2 && !strcmp(argv[1], "--synth");
    if ((synth && argc != 4) || (!synth && argc < 3)) {
        fprintf(stderr, "usage: xdna_pack OUT_DIR op=..,bucket=..,k=..,n=..,wtype=..,kernel=..,xclbin=PATH,"
                        "instr=PATH ...\n       xdna_pack --synth MODEL.gguf OUT_DIR\n");
        return 2;
    }
    const char *dir = synth ? argv[3] : argv[1];
    static pack_item items[XDNA_MAX_ARTIFACTS];
    int n = 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "xdna_pack: mkdir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    if (synth) {
        if (s_synth_items(argv[2], items, XDNA_MAX_ARTIFACTS, &n)) return 1;
        for (int i = 0; i < n; i++)
            if (s_write_synth(dir, &items[i])) {
                fprintf(stderr, "xdna_pack: cannot write synthetic artifacts into %s\n", dir);
                return 1;
            }
    } else {
        for (int i = 2; i < argc; i++, n++)
            if (n == XDNA_MAX_ARTIFACTS || s_parse_spec(argv[i], &items[n])) return 1;
    }
    for (int i = 0; i < n; i++)
        if (s_add_files(dir, &items[i])) return 1;
    if (s_write_registry(dir, items, n)) return 1;
    static xdna_package check;
    char why[640];
    if (xdna_package_load(dir, &check, why, sizeof why) != XDNA_OK) {
        fprintf(stderr, "xdna_pack: the package fails its own gate: %s\n", why);
        return 1;
    }
    printf("xdna_pack: %s: %d artifacts, registry written and verified\n", dir, n);
    return 0;
}
