/*
 * cmd_keygen.c - `coli keygen DIR [--role coordinator|worker|both]`: CURVE
 * key pairs for remote workers, as Z85 text files (proto/curve_keys.h):
 * coordinator.key + coordinator.pub, worker.key + worker.pub. A .key file
 * holds a secret key and is written with mode 0600. Nothing is ever
 * overwritten: if any file of the pairs exists, nothing is written.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "tools/coli/args.h"
#include "tools/coli/commands.h"
#include "proto/curve_keys.h"
#include "core/error.h"

/* Write one key pair NAME.key / NAME.pub into dir. */
static int s_write_pair(const char *dir, const char *name) {
    curve_key pub, sec;
    if (zmq_curve_keypair(pub, sec) != 0) return coli_fail(COLI_EIO, "zmq_curve_keypair: %s", zmq_strerror(errno));
    char kname[64], pname[64];
    snprintf(kname, sizeof kname, "%s.key", name);
    snprintf(pname, sizeof pname, "%s.pub", name);
    int rc = curve_key_write(dir, kname, sec, 1);
    if (rc == 0) rc = curve_key_write(dir, pname, pub, 0);
    memset(sec, 0, sizeof sec);
    return rc;
}

/* 0 when none of the files the roles would write exists yet. */
static int s_none_exist(const char *dir, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.%s", dir, names[i], k ? "pub" : "key");
            if (access(path, F_OK) == 0)
                return coli_fail(COLI_EINVAL,
                                 "keygen: %s exists already; not overwriting any key "
                                 "(move it away or choose another directory)",
                                 path);
        }
    return 0;
}

int cmd_keygen(int argc, char **argv) {
    const char *role = "both";
    const char *pos[1];
    int n_pos = 0;
    arg_spec specs[] = {
        {"--role", NULL, ARG_STR, &role, 0, 0, 0, "WHO", "coordinator, worker or both (default both)"},
    };
    int rc = args_parse("keygen", argc, argv, specs, 1, pos, 1, &n_pos);
    if (rc == ARGS_HELP) {
        args_usage(stdout, "keygen", "DIR [--role coordinator|worker|both]",
                   "Make CURVE key pairs for remote workers (docs/scheduler.md, \"Remote workers\"):\n"
                   "DIR/coordinator.key + .pub and DIR/worker.key + .pub (.key = secret, mode 0600).\n"
                   "DIR is made (mode 0700) if missing; existing key files are never overwritten.",
                   specs, 1);
        return 0;
    }
    if (rc) return rc;
    if (n_pos != 1) return args_error("keygen", "DIR", "required (the directory for the key files)");
    const char *names[2];
    int n = 0;
    if (!strcmp(role, "coordinator") || !strcmp(role, "both")) names[n++] = "coordinator";
    if (!strcmp(role, "worker") || !strcmp(role, "both")) names[n++] = "worker";
    if (!n) return args_error("keygen", "--role", "'%s': want coordinator, worker or both", role);
    if (!curve_available()) {
        coli_fail(COLI_EUNSUPPORTED, "keygen: this libzmq has no CURVE support (zmq_has(\"curve\") is 0)");
        return cli_fail();
    }
    if (mkdir(pos[0], 0700) != 0 && errno != EEXIST) {
        coli_fail(COLI_EIO, "keygen: directory %s: %s", pos[0], strerror(errno));
        return cli_fail();
    }
    if (s_none_exist(pos[0], names, n) != 0) return cli_fail();
    for (int i = 0; i < n; i++)
        if (s_write_pair(pos[0], names[i]) != 0) return cli_fail();
    for (int i = 0; i < n; i++) printf("%s/%s.key (secret, 0600) and %s/%s.pub\n", pos[0], names[i], pos[0], names[i]);
    return 0;
}
