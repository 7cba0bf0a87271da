/*
 * test_xdna_package.c - the NPU lane's provisioning gate without processes:
 * registry parsing, SHA-256 (libsodium, checked against the FIPS 180-2
 * vector), every package diagnostic on a real directory, the gates, the
 * opt-in parsing and the reason names the coordinator counts.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/settings.h"
#include "plugins/xdna/xdna_package.h"
#include "proto/wire.h"
#include "core/tensor.h"
#include "tests/xdna_test_util.h"

#define MODEL "tiny-llama-moe-f32.gguf"

static xdna_package s_pkg;

static const char *s_model(void) {
    static char path[1100];
    snprintf(path, sizeof path, "%.1000s/fixtures/%s", xdna_abs_build(), MODEL);
    if (access(path, R_OK) != 0) cr_skip_test("fixture %s missing (make fixtures)", path);
    return path;
}

//  A fresh synthetic package for the fixture in dir (64 bytes); returns dir/xdna-package in pkg.
static void s_package(char *dir, char *pkg, size_t n) {
    xdna_env_defaults();
    xdna_lane_dir(dir, XDNA_NO_HELPER, 1, s_model());
    snprintf(pkg, n, "%s/xdna-package", dir);
}

static xdna_diag s_load(const char *pkg, char *why, size_t n) { return xdna_package_load(pkg, &s_pkg, why, n); }

Test(xdna_package, sha256_matches_the_fips_vector) {
    char path[] = "/tmp/coli-xdna-sha-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "abc", 3), 3);
    close(fd);
    unsigned char h[32];
    char hex[65], why[256];
    cr_assert_eq(xdna_sha256_file(path, h, why, sizeof why), 0, "%s", why);
    xdna_sha256_hex(h, hex);
    cr_expect_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    unlink(path);
}

Test(xdna_package, valid_package_loads) {
    char dir[64], pkg[128], why[640] = "";
    s_package(dir, pkg, sizeof pkg);
    cr_assert_eq(s_load(pkg, why, sizeof why), XDNA_OK, "%s", why);
    cr_expect_eq(s_pkg.n, 6, "gate/up/down x buckets 64, 256");
    xdna_rm_dir(dir);
}

Test(xdna_package, missing_and_empty_directory_are_package_missing) {
    char why[640];
    cr_expect_eq(s_load("/nonexistent/xdna-package", why, sizeof why), XDNA_PACKAGE_MISSING);
    cr_expect(strstr(why, "PACKAGE_MISSING: "), "%s", why);
    char dir[] = "/tmp/coli-xdna-empty-XXXXXX";
    cr_assert(mkdtemp(dir));
    cr_expect_eq(s_load(dir, why, sizeof why), XDNA_PACKAGE_MISSING, "%s", why);
    cr_expect(strstr(why, "registry.txt"), "%s", why);
    rmdir(dir);
}

Test(xdna_package, deleted_artifact_is_incomplete_and_named) {
    char dir[64], pkg[128], why[640];
    s_package(dir, pkg, sizeof pkg);
    xdna_sh("rm '%s/ffn_up_m256_k64_n128_F32.insts'", pkg);
    cr_expect_eq(s_load(pkg, why, sizeof why), XDNA_PACKAGE_INCOMPLETE, "%s", why);
    cr_expect(strstr(why, "ffn_up_m256_k64_n128_F32.insts is missing"), "%s", why);
    xdna_rm_dir(dir);
}

Test(xdna_package, one_tampered_byte_fails_integrity_and_restoring_restores) {
    char dir[64], pkg[128], why[640];
    s_package(dir, pkg, sizeof pkg);
    char file[256];
    snprintf(file, sizeof file, "%s/ffn_down_m64_k128_n64_F32.xclbin", pkg);
    FILE *f = fopen(file, "r+b");
    cr_assert(f);
    int c = fgetc(f);
    fseek(f, 0, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
    cr_expect_eq(s_load(pkg, why, sizeof why), XDNA_INTEGRITY_FAILED, "%s", why);
    cr_expect(strstr(why, "ffn_down_m64_k128_n64_F32.xclbin"), "names the file: %s", why);
    f = fopen(file, "r+b");
    fputc(c, f);
    fclose(f);
    cr_expect_eq(s_load(pkg, why, sizeof why), XDNA_OK, "restored bytes, restored package: %s", why);
    xdna_rm_dir(dir);
}

Test(xdna_package, names_that_escape_are_refused) {
    char dir[64], pkg[128], why[640];
    s_package(dir, pkg, sizeof pkg);
    /* .. and absolute names in the registry text */
    xdna_sh("sed -i '0,/xclbin=ffn_gate_m64/s//xclbin=..\\/ffn_gate_m64/' '%s/registry.txt'", pkg);
    cr_expect_eq(s_load(pkg, why, sizeof why), XDNA_REGISTRY_INVALID, "%s", why);
    xdna_sh("sed -i 's/xclbin=..\\/ffn_gate_m64/xclbin=\\/tmp\\/ffn_gate_m64/' '%s/registry.txt'", pkg);
    cr_expect_eq(s_load(pkg, why, sizeof why), XDNA_REGISTRY_INVALID, "%s", why);
    /* a symbolic link inside the package that resolves outside it */
    xdna_sh("sed -i 's/xclbin=\\/tmp\\/ffn_gate_m64/xclbin=ffn_gate_m64/' '%s/registry.txt'", pkg);
    cr_assert_eq(s_load(pkg, why, sizeof why), XDNA_OK, "%s", why);
    xdna_sh("cd '%s' && mv ffn_up_m64_k64_n128_F32.insts ../outside.insts && "
            "ln -s ../outside.insts ffn_up_m64_k64_n128_F32.insts",
            pkg);
    cr_expect_eq(s_load(pkg, why, sizeof why), XDNA_REGISTRY_INVALID, "%s", why);
    cr_expect(strstr(why, "outside the package"), "%s", why);
    xdna_rm_dir(dir);
}

static const char *s_line =
    "artifact op=ffn_gate bucket=64 k=64 n=128 wtype=F32 a=BF16 b=BF16 c=F32 kernel=K xclbin=g.xclbin "
    "xclbin_sha256=%s instr=g.insts instr_sha256=%s\n";
#define HASH "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

static xdna_diag s_parse(const char *text) {
    char why[640];
    memset(&s_pkg, 0, sizeof s_pkg);
    return xdna_registry_parse(text, &s_pkg, why, sizeof why);
}

Test(xdna_package, registry_rules) {
    char text[4096], line[1024];
    snprintf(line, sizeof line, s_line, HASH, HASH);
    snprintf(text, sizeof text, "coli-xdna-registry 1\n# c\n\n%s", line);
    cr_expect_eq(s_parse(text), XDNA_OK);
    snprintf(text, sizeof text, "coli-xdna-registry 1\n%s%s", line, line);
    cr_expect_eq(s_parse(text), XDNA_REGISTRY_INVALID, "duplicate rows");
    snprintf(line, sizeof line, s_line, "ba7816bf", HASH);
    snprintf(text, sizeof text, "coli-xdna-registry 1\n%s", line);
    cr_expect_eq(s_parse(text), XDNA_REGISTRY_INVALID, "short hash text");
    snprintf(line, sizeof line, s_line, "zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", HASH);
    snprintf(text, sizeof text, "coli-xdna-registry 1\n%s", line);
    cr_expect_eq(s_parse(text), XDNA_REGISTRY_INVALID, "non-hex hash text");
    cr_expect_eq(s_parse("coli-xdna-registry 2\n"), XDNA_REGISTRY_INVALID, "other version");
    cr_expect_eq(s_parse("coli-xdna-registry 1\n"), XDNA_REGISTRY_INVALID, "no artifact");
    cr_expect_eq(s_parse("coli-xdna-registry 1\nartifact op=ffn_gate bucket=64\n"), XDNA_REGISTRY_INVALID);
    snprintf(line, sizeof line, s_line, HASH, HASH);
    char *bucket = strstr(line, "bucket=64");
    memcpy(bucket, "bucket=65", 9);
    snprintf(text, sizeof text, "coli-xdna-registry 1\n%s", line);
    cr_expect_eq(s_parse(text), XDNA_REGISTRY_INVALID, "bucket 65");
}

Test(xdna_package, gates_in_order) {
    char text[4096], line[1024], why[256];
    snprintf(line, sizeof line, s_line, HASH, HASH);
    snprintf(text, sizeof text, "coli-xdna-registry 1\n%s", line);
    cr_assert_eq(s_parse(text), XDNA_OK);
    xdna_expert_shape e = {64, 128, {COLI_F32, COLI_F32, COLI_F32}};
    cr_expect_eq(xdna_gate_op(&s_pkg, &e, XDNA_OP_GATE, why, sizeof why), XDNA_OK);
    cr_expect_eq(xdna_gate_op(&s_pkg, &e, XDNA_OP_UP, why, sizeof why), XDNA_DECLINED_OP);
    xdna_expert_shape wide = {64, 256, {COLI_F32, COLI_F32, COLI_F32}};
    cr_expect_eq(xdna_gate_op(&s_pkg, &wide, XDNA_OP_GATE, why, sizeof why), XDNA_DECLINED_SHAPE);
    xdna_expert_shape q8 = {64, 128, {COLI_Q8_0, COLI_F32, COLI_F32}};
    cr_expect_eq(xdna_gate_op(&s_pkg, &q8, XDNA_OP_GATE, why, sizeof why), XDNA_DECLINED_DTYPE);
    cr_expect_eq(xdna_find_artifact(&s_pkg, &e, XDNA_OP_GATE, 64), 0);
    cr_expect_eq(xdna_find_artifact(&s_pkg, &e, XDNA_OP_GATE, 256), -1);
    cr_expect_eq(xdna_bucket_of(1), 64);
    cr_expect_eq(xdna_bucket_of(64), 64);
    cr_expect_eq(xdna_bucket_of(65), 256);
    cr_expect_eq(xdna_bucket_of(256), 256);
    cr_expect_eq(xdna_bucket_of(257), 0);
    cr_expect_eq(xdna_bucket_of(0), 0);
}

static int s_requested(void) {
    static coli_settings set; /* PATH_MAX strings: not on the stack */
    coli_settings_from_env(&set);
    return set.xdna;
}

Test(xdna_package, opt_in_is_a_non_zero_integer_exactly) {
    const char *on[] = {"1", "2", "-1", "007"}, *off[] = {"", "0", "00", "yes", "1x", " 1", "true"};
    for (size_t i = 0; i < sizeof on / sizeof *on; i++) {
        setenv("COLI_XDNA", on[i], 1);
        cr_expect(s_requested(), "COLI_XDNA='%s' is on", on[i]);
    }
    for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
        setenv("COLI_XDNA", off[i], 1);
        cr_expect(!s_requested(), "COLI_XDNA='%s' is off", off[i]);
    }
    unsetenv("COLI_XDNA");
    cr_expect(!s_requested());
}

Test(xdna_package, reason_names_the_coordinator_counts) {
    char buf[24];
    const char *r = wire_reason_code("plugin 'xdna': open device 0: PACKAGE_MISSING: no package", buf, sizeof buf);
    cr_expect(r && !strcmp(r, "PACKAGE_MISSING"), "%s", r ? r : "(null)");
    r = wire_reason_code("DECLINED_ROWS: xdna: 300 rows", buf, sizeof buf);
    cr_expect(r && !strcmp(r, "DECLINED_ROWS"));
    cr_expect_null(wire_reason_code("cuda: no device: CUDA driver missing", buf, sizeof buf));
    cr_expect_null(wire_reason_code("NOUNDERSCORE: x", buf, sizeof buf));
    cr_expect_null(wire_reason_code("lower_case: x", buf, sizeof buf));
    cr_expect_null(wire_reason_code("A_NAME_FAR_TOO_LONG_FOR_A_REASON: x", buf, sizeof buf));
    cr_expect_null(wire_reason_code(NULL, buf, sizeof buf));
}
