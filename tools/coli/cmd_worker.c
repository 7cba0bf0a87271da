/*
 * cmd_worker.c - `coli worker ARGS...`: run the worker process (the
 * coli-worker program next to this one) with the same arguments, e.g.
 *   coli worker --plugin cuda --device 0 --listen tcp://0.0.0.0:5555
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "commands.h"

int cmd_worker(int argc, char **argv) {
    char exe[PATH_MAX], bin[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "coli worker: cannot find this program's directory: %s\n", strerror(errno));
        return CLI_FAIL;
    }
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(bin, sizeof bin, "%.4000s/coli-worker", exe);
    argv[0] = bin;
    (void)argc;
    execv(bin, argv);
    fprintf(stderr, "coli worker: %s: %s\n", bin, strerror(errno));
    return CLI_FAIL;
}
