/*
 * args.h - the flag parser every `coli` command shares.
 *
 * A command describes its flags in a table of arg_spec; args_parse fills the
 * destinations, checks every number against its range, and on any mistake
 * prints exactly one line naming the flag and the reason:
 *
 *   coli run: --temp: '-1' must be >= 0
 *
 * Exit status 2 is reserved for such usage errors (ARGS_ERROR), 1 for
 * runtime errors (CLI_FAIL), 0 for success.
 */
#ifndef COLI_CLI_ARGS_H
#define COLI_CLI_ARGS_H

#include <stdint.h>
#include <stdio.h>

typedef enum arg_kind {
    ARG_FLAG,  /* no value; dest is int*, set to 1 */
    ARG_STR,   /* dest is const char **; "" is refused ("empty value": a name or path left out) */
    ARG_TEXT,  /* dest is const char **; "" is a value (a text to process, as `tokenize -p ""`) */
    ARG_INT,   /* dest is int *, range [min, max] */
    ARG_FLOAT, /* dest is float *, range [min, max] (min exclusive if min_open) */
    ARG_U64,   /* dest is uint64_t *, any non-negative integer */
} arg_kind;

typedef struct arg_spec {
    const char *name;  /* "--temp" */
    const char *alias; /* "-t", or NULL */
    arg_kind kind;
    void *dest;
    double min, max;  /* numeric range, inclusive */
    int min_open;     /* 1: the range excludes min, as in top-p's (0, 1] */
    const char *meta; /* value placeholder in --help, e.g. "N" */
    const char *help; /* one line */
} arg_spec;

enum {
    ARGS_OK = 0,
    ARGS_HELP = 1,
    ARGS_ERROR = 2
};

/* Runtime failure: print "coli: <coli_last_error()>" and give the exit status 1. */
#define CLI_FAIL 1

/* Parse argv[1..argc) (argv[0] is the command name). Flags take their value
 * as the next argument or after '=' ("--temp=0.5"). Arguments that are not
 * flags go to pos[] (at most max_pos, more is an error). -h/--help gives
 * ARGS_HELP. On ARGS_ERROR the one-line message is already on stderr. */
int args_parse(const char *cmd, int argc, char **argv, const arg_spec *specs, int n_specs, const char **pos,
               int max_pos, int *n_pos);

/* The command's help text: synopsis line, description, one line per flag. */
void args_usage(FILE *f, const char *cmd, const char *synopsis, const char *description, const arg_spec *specs,
                int n_specs);

/* A usage error found after parsing (missing required flag, conflicting
 * flags): prints "coli CMD: <what>: <why>" and returns ARGS_ERROR. */
int args_error(const char *cmd, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A runtime error: prints "coli: <coli_last_error()>" and returns CLI_FAIL. */
int cli_fail(void);

/* Largest file cli_read_file reads (prompts, texts, keys): 256 MiB. */
#define CLI_MAX_READ_FILE (256 << 20)

/* Read a whole regular file (at most CLI_MAX_READ_FILE bytes) into a
 * NUL-terminated malloc'd buffer. A FIFO or device is refused without
 * blocking. Returns 0, or CLI_FAIL after printing "coli: FLAG PATH: reason". */
int cli_read_file(const char *flag, const char *path, char **out, size_t *len);

/* An input that is opened later with a blocking open (a model): 0 if path is
 * a regular file or does not exist (its reader reports that); CLI_FAIL,
 * printed, for a FIFO, device, directory or socket, which would hang or
 * mislead the reader. */
int cli_check_input_file(const char *flag, const char *path);

#endif
