/* progress.c - see progress.h. */
#include "tools/coli/progress.h"

#include <stdio.h>
#include <unistd.h>

#include "core/clock.h"

void cli_progress_start(cli_progress *p, const char *cmd, const char *unit, int quiet) {
    p->cmd = cmd;
    p->unit = unit;
    p->on = !quiet && isatty(STDERR_FILENO);
    p->drawn = 0;
    p->t0 = coli_now_s();
    p->last = 0;
}

const char *cli_bytes(char *buf, int cap, uint64_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    snprintf(buf, (size_t)cap, u ? "%.2f %s" : "%.0f %s", v, units[u]);
    return buf;
}

//  "47 s left", "3 min 5 s left", or "" before anything is measurable.
static void s_left(char *buf, int cap, double elapsed, double frac) {
    buf[0] = 0;
    if (frac <= 0.0 || frac >= 1.0 || elapsed < 0.5) return;
    double left = elapsed / frac - elapsed;
    if (left >= 60.0)
        snprintf(buf, (size_t)cap, ", %d min %d s left", (int)(left / 60.0), (int)left % 60);
    else
        snprintf(buf, (size_t)cap, ", %.0f s left", left);
}

void cli_progress_show(cli_progress *p, int64_t done, int64_t total, uint64_t bytes_done, uint64_t bytes_total,
                       const char *extra) {
    if (!p->on) return;
    const double now = coli_now_s(), elapsed = now - p->t0;
    if (done < total && now - p->last < 0.1) return;
    p->last = now;
    char a[32], b[32], rate[48] = "", left[48];
    const double frac = bytes_total ? (double)bytes_done / (double)bytes_total : total ? (double)done / total : 0.0;
    if (bytes_total && elapsed > 0)
        snprintf(rate, sizeof rate, ", %s/s", cli_bytes(a, sizeof a, (uint64_t)((double)bytes_done / elapsed)));
    s_left(left, sizeof left, elapsed, frac);
    fprintf(stderr, "\r%s: %s %lld/%lld", p->cmd, p->unit, (long long)done, (long long)total);
    if (bytes_total)
        fprintf(stderr, ", %s/%s", cli_bytes(a, sizeof a, bytes_done), cli_bytes(b, sizeof b, bytes_total));
    fprintf(stderr, "%s%s%s%s\033[K", rate, left, extra ? ", " : "", extra ? extra : "");
    fflush(stderr);
    p->drawn = 1;
}

double cli_progress_end(cli_progress *p) {
    if (p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->drawn = 0;
    return coli_now_s() - p->t0;
}
