/*
 * progress.h - one progress line for the steps a user waits on (quantize,
 * perplexity, a slow model load): on a terminal only (stderr a tty), redrawn
 * in place with \r at most ten times a second:
 *
 *   coli quantize: tensor 12/291, 1.20/13.50 GiB, 250.3 MiB/s, 47 s left
 *
 * Off a terminal it prints nothing (logs get the command's own lines), and
 * -q turns it off everywhere. cli_progress_end clears the line so the next
 * output starts on a clean one.
 */
#ifndef COLI_CLI_PROGRESS_H
#define COLI_CLI_PROGRESS_H

#include <stdint.h>

typedef struct cli_progress {
    const char *cmd;  /* "coli quantize" */
    const char *unit; /* "tensor", "window" */
    int on;           /* stderr is a terminal and not -q */
    int drawn;        /* a line is on the screen */
    double t0, last;  /* start, last redraw (coli_now_s) */
} cli_progress;

/* Start timing; the line shows only if stderr is a terminal and !quiet. */
void cli_progress_start(cli_progress *p, const char *cmd, const char *unit, int quiet);

/* done of total units, bytes_done of bytes_total (0: no byte counts; the
 * rate and time left then come from the units); extra: more text for the
 * line ("perplexity 12.31") or NULL. Redraws at most every 0.1 s, and always
 * when done == total. total 0: no count, the line is "CMD: UNIT, N s". */
void cli_progress_show(cli_progress *p, int64_t done, int64_t total, uint64_t bytes_done, uint64_t bytes_total,
                       const char *extra);

/* Clear the line (if one was drawn). Returns the seconds since start. */
double cli_progress_end(cli_progress *p);

/* A step with no count to show (a model load, mostly waiting on a cold
 * disk): if it is still running after after_s seconds and stderr is a
 * terminal (and !quiet), a thread redraws "CMD: WHAT, 12 s" twice a second
 * until cli_waiting_end, which clears the line. NULL (nothing to end) when
 * it would never show. */
typedef struct cli_waiting cli_waiting;
cli_waiting *cli_waiting_start(const char *cmd, const char *what, double after_s, int quiet);
void cli_waiting_end(cli_waiting *w);

/* "1.20 GiB", "512.0 KiB", "77 B": n bytes for people, into buf. */
const char *cli_bytes(char *buf, int cap, uint64_t n);

#endif
