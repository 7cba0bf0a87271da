/* progress.c - see progress.h. */
#include "tools/coli/progress.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
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

/* "47 s left", "3 min 5 s left", or "" before anything is measurable. */
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
    if (total <= 0) {
        fprintf(stderr, "\r%s: %s, %.0f s\033[K", p->cmd, p->unit, elapsed);
        fflush(stderr);
        p->drawn = 1;
        return;
    }
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

struct cli_waiting {
    cli_progress bar;
    double after_s;
    int done;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    pthread_t thread;
};

/* Wait on w->cv until done or seconds pass; 1 when done. */
static int s_wait(cli_waiting *w, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)(seconds * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&w->mu);
    while (!w->done && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0) {}
    int done = w->done;
    pthread_mutex_unlock(&w->mu);
    return done;
}

static void *s_waiting_thread(void *arg) {
    cli_waiting *w = arg;
    if (s_wait(w, w->after_s)) return NULL; /* quick: never shown */
    do cli_progress_show(&w->bar, 0, 0, 0, 0, NULL);
    while (!s_wait(w, 0.5));
    cli_progress_end(&w->bar);
    return NULL;
}

cli_waiting *cli_waiting_start(const char *cmd, const char *what, double after_s, int quiet) {
    cli_waiting *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    cli_progress_start(&w->bar, cmd, what, quiet);
    w->after_s = after_s;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!w->bar.on || pthread_create(&w->thread, NULL, s_waiting_thread, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    return w;
}

void cli_waiting_end(cli_waiting *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
