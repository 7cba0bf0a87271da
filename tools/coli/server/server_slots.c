#define _GNU_SOURCE /* POLLRDHUP, memmem */
/*
 * server_slots.c - the request queue, the slot threads that generate, the
 * compute baton, and the monitor thread that keeps the executor's stats
 * fresh. Why it is built this way: see server.h.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "tools/coli/server/server.h"
#include "core/clock.h"
#include "core/hash.h"

struct server_slot {
    server *srv;
    int index;
    coli_context *ctx;
    job *cur;
    int32_t *seq; /* the ids the context holds: prompt, then generated */
    int seq_len, seq_cap;
};

static void s_deadline(struct timespec *ts, int ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void s_cond_init(pthread_cond_t *cv) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

// ---------------------------------------------------------------------------
// jobs

job *job_new(int client_fd) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    s_cond_init(&j->cv);
    j->refs = 1;
    j->client_fd = client_fd;
    j->t_arrival = coli_now_s();
    j->created = (long long)time(NULL);
    static atomic_ullong counter;
    snprintf(j->id, sizeof j->id, "%llx%06llx", (unsigned long long)j->created,
             (unsigned long long)(atomic_fetch_add(&counter, 1) & 0xffffff));
    return j;
}

void job_retain(job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void job_release(job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    job_release(j->next_choice);
    gen_request_free(&j->req);
    free(j->raw);
    free(j->lp);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

void job_wake(job *j) {
    pthread_cond_broadcast(&j->cv);
    if (j->conn) http_resume(j->conn);
    j->conn = NULL;
}

void job_fail(job *j, int http_status, const char *code, const char *msg) {
    j->error_http = http_status;
    j->error_code = code;
    snprintf(j->error, sizeof j->error, "%s", msg);
    j->state = JOB_DONE;
    job_wake(j);
}

// ---------------------------------------------------------------------------
// the baton: a ticket lock, so a thread that hands it on queues behind the others

/* 1 while this thread holds the baton: the state-copy counters tell the
 * copies that hold the other slots up from those that do not. */
static _Thread_local int s_holding_baton;

void baton_acquire(server *s) {
    pthread_mutex_lock(&s->baton_mu);
    uint64_t mine = s->baton_next++;
    while (s->baton_serving != mine) pthread_cond_wait(&s->baton_cv, &s->baton_mu);
    pthread_mutex_unlock(&s->baton_mu);
    s_holding_baton = 1;
}

void baton_release(server *s) {
    s_holding_baton = 0;
    pthread_mutex_lock(&s->baton_mu);
    s->baton_serving++;
    pthread_cond_broadcast(&s->baton_cv);
    pthread_mutex_unlock(&s->baton_mu);
}

// ---------------------------------------------------------------------------
// the queue

/* With q_mu held: j at the back of the line. */
static void s_push(server *s, job *j) {
    s->queue[(s->q_head + s->q_len) % s->q_cap] = j;
    s->q_len++;
}

int server_submit(server *s, job *first) {
    int n = 0;
    for (job *j = first; j; j = j->next_choice) n++;
    pthread_mutex_lock(&s->q_mu);
    int rc = 0;
    if (atomic_load(&s->stopping))
        rc = 503;
    else if (s->q_answers + n - (s->cfg.n_slots - s->active) > s->cfg.queue_max || s->q_len >= s->q_cap)
        rc = 429; /* all of its answers fit, or none is queued */
    if (rc == 0) {
        for (job *j = first; j; j = j->next_choice) job_retain(j);
        s_push(s, first); /* its later answers follow one by one (s_take) */
        s->q_answers += n;
        pthread_cond_signal(&s->q_cv);
    }
    pthread_mutex_unlock(&s->q_mu);
    return rc;
}

void server_queue_gauges(server *s, int *waiting, int *active) {
    pthread_mutex_lock(&s->q_mu);
    *waiting = s->q_answers;
    *active = s->active;
    pthread_mutex_unlock(&s->q_mu);
}

/* The next job for a slot; NULL when the server stops. Requests take turns:
 * the line holds each request's next answer, and a request with more goes to
 * the back once one starts, so n = 16 answers cannot keep a small request waiting. */
static job *s_take(server *s) {
    pthread_mutex_lock(&s->q_mu);
    while (s->q_len == 0 && !atomic_load(&s->stopping)) pthread_cond_wait(&s->q_cv, &s->q_mu);
    job *j = NULL;
    if (s->q_len > 0) {
        j = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->q_cap;
        s->q_len--;
        s->q_answers--;
        s->active++;
        if (j->next_choice) { /* its next answer, for another free slot */
            s_push(s, j->next_choice);
            pthread_cond_signal(&s->q_cv);
        }
    }
    pthread_mutex_unlock(&s->q_mu);
    return j;
}

// ---------------------------------------------------------------------------
// generation

/* Longest suffix of text[from..len) that is a proper prefix of a stop string. */
static size_t s_stop_holdback(const job *j, size_t from) {
    size_t hold = 0;
    for (int k = 0; k < j->req.n_stop; k++) {
        size_t sl = strlen(j->req.stop[k]);
        if (sl == 0) continue;
        for (size_t h = sl - 1; h > hold; h--)
            if (h <= j->raw_len - from && memcmp(j->raw + j->raw_len - h, j->req.stop[k], h) == 0) {
                hold = h;
                break;
            }
    }
    return hold;
}

/* Room for len more bytes (and the NUL) in j->raw; 0 or -1. */
static int s_reserve(job *j, size_t len) {
    if (j->raw_len + len + 1 <= j->raw_cap) return 0;
    size_t cap = (j->raw_len + len + 1) * 2;
    char *t = realloc(j->raw, cap);
    if (!t) return -1;
    j->raw = t;
    j->raw_cap = cap;
    return 0;
}

/* Append text as valid UTF-8, after what j->utf8_hold kept from the last token. */
static int s_append_utf8(job *j, const char *text, size_t len) {
    size_t n = j->n_hold + len, hold = 0;
    char small[256], *in = n <= sizeof small ? small : malloc(n);
    if (!in || s_reserve(j, 3 * n)) {
        if (in != small) free(in);
        return -1;
    }
    memcpy(in, j->utf8_hold, j->n_hold);
    memcpy(in + j->n_hold, text, len);
    j->raw_len += utf8_sanitize(in, n, j->raw + j->raw_len, &hold);
    j->raw[j->raw_len] = '\0';
    memcpy(j->utf8_hold, in + n - hold, hold); /* hold < 4: a sequence is at most 4 bytes */
    j->n_hold = hold;
    if (in != small) free(in);
    return 0;
}

/* Append a token's text; find stop strings. 1 if a stop string ended the answer. */
static int s_append(job *j, const char *text, size_t len) {
    if (s_append_utf8(j, text, len)) return -1;
    /* the token's logprobs entry (recorded just before) covers the text it
     * completed as it went in: held bytes and U+FFFD change the length */
    if (j->req.sp.logprobs && j->n_lp > 0) j->lp[j->n_lp - 1].end = j->raw_len;
    size_t best = (size_t)-1;
    for (int k = 0; k < j->req.n_stop; k++) {
        char *hit = memmem(j->raw + j->exposed, j->raw_len - j->exposed, j->req.stop[k], strlen(j->req.stop[k]));
        if (hit && (size_t)(hit - j->raw) < best) best = (size_t)(hit - j->raw);
    }
    if (best != (size_t)-1) {
        logprobs_truncate(j, best);
        j->raw_len = j->exposed = best;
        j->raw[best] = '\0';
        return 1;
    }
    j->exposed = j->raw_len - s_stop_holdback(j, j->exposed);
    return 0;
}

static int s_on_token(void *user, int32_t id, const char *text, size_t len) {
    server_slot *slot = user;
    server *s = slot->srv;
    job *j = slot->cur;
    double now = coli_now_s();
    if (j->n_gen == 0)
        metrics_observe(&s->metrics, &s->metrics.ttft, now - j->t_arrival);
    else
        metrics_observe(&s->metrics, &s->metrics.per_token, now - j->t_last);
    if (slot->seq_len < slot->seq_cap) slot->seq[slot->seq_len++] = id;
    pthread_mutex_lock(&j->mu);
    j->t_last = now;
    j->n_gen++;
    size_t start = j->raw_len;
    int stop = j->req.sp.logprobs && logprobs_record(slot->ctx, j, start, start + len) ? -1 : 0;
    if (!stop && j->req.grammar && json_grammar_accept(j->req.grammar, id)) stop = -2;
    if (!stop) stop = s_append(j, text, len);
    if (stop == -2) {
        j->error_http = 500;
        snprintf(j->error, sizeof j->error, "generation: the JSON constraint lost track of the output");
    } else if (stop < 0) {
        j->error_http = 500;
        snprintf(j->error, sizeof j->error, "generation: out of memory for the answer text");
    } else if (stop) {
        j->finish_reason = "stop";
    }
    job_wake(j);
    pthread_mutex_unlock(&j->mu);
    if (stop) return 1;
    if (s->cfg.token_delay_ms > 0) usleep((useconds_t)s->cfg.token_delay_ms * 1000u);
    if (client_gone(j->client_fd)) atomic_store(&j->cancel, 1);
    /* past the grace period: stop; batched, the context then leaves the batch
     * after this token's step (coli_generate), never holding the others up */
    if (atomic_load(&s->abort_running)) {
        pthread_mutex_lock(&j->mu);
        j->aborted = 1;
        pthread_mutex_unlock(&j->mu);
        return 1;
    }
    return atomic_load(&j->cancel);
}

static void s_finish(server_slot *slot, job *j, int rc, const coli_gen_stats *st) {
    server *s = slot->srv;
    /* Counted before the slot is free and before the answer goes out: a
     * client that reads /metrics or /dashboard.json the moment it has its
     * answer, or the answer of the request that took this slot next (a
     * cancelled one has no answer), must see its tokens and its cancel.
     * n_gen and n_cached are this thread's own (the generating slot). */
    metrics_add_tokens(&s->metrics, st->n_prompt + j->n_cached, j->n_gen);
    if (atomic_load(&j->cancel) && !atomic_load(&s->stopping)) metrics_count_cancelled(&s->metrics);
    /* The slot is free before the answer goes out: a client that sends its
     * next request the moment it has this answer must find the slot free. */
    pthread_mutex_lock(&s->q_mu);
    s->active--;
    pthread_mutex_unlock(&s->q_mu);
    pthread_mutex_lock(&j->mu);
    if (rc != 0 && !j->error_http) {
        j->error_http = 500;
        snprintf(j->error, sizeof j->error, "generation failed: %s", coli_last_error());
    }
    if (j->aborted && !j->error_http) {
        j->error_http = 503;
        j->error_code = "shutting_down";
        snprintf(j->error, sizeof j->error,
                 "the server is shutting down: generation stopped after %d tokens, before it finished", j->n_gen);
    }
    if (!j->finish_reason) j->finish_reason = st->stopped_by_eog ? "stop" : "length";
    if (j->n_hold && s_reserve(j, 3) == 0) { /* a character that never completed */
        memcpy(j->raw + j->raw_len, "\xEF\xBF\xBD", 4);
        j->raw_len += 3;
    }
    j->n_hold = 0;
    j->exposed = j->raw_len; /* held-back text that never became a stop string is answer text */
    j->state = JOB_DONE;
    job_wake(j);
    pthread_mutex_unlock(&j->mu);
}

uint64_t server_cache_domain(const server *s, int key, const char *salt) {
    if (key < 0 && !salt) return 0;
    /* the key's number, then the salt: a salt cannot pose as another key's */
    unsigned char in[4 + SERVE_MAX_CACHE_SALT];
    size_t n = salt ? strlen(salt) : 0;
    if (n > SERVE_MAX_CACHE_SALT) n = SERVE_MAX_CACHE_SALT; /* openai_parse refuses longer ones */
    const uint32_t k = (uint32_t)(key + 1);
    memcpy(in, &k, 4);
    if (n) memcpy(in + 4, salt, n);
    uint64_t d = coli_siphash24(s->cache_key[0], s->cache_key[1], in, 4 + n);
    return d ? d : 1; /* 0 is the shared domain */
}

/* Reset the slot's context to the longest cached prefix of j's prompt
 * (nothing without a cache): the positions restored, which generation
 * then skips. A failing lookup is a miss, never a failed request. */
static int s_prefix_restore(server_slot *slot, job *j) {
    server *s = slot->srv;
    coli_context_reset(slot->ctx);
    const int n = j->req.n_ids;
    slot->seq_len = n <= slot->seq_cap ? n : 0;
    if (slot->seq_len) memcpy(slot->seq, j->req.ids, (size_t)n * sizeof(int32_t));
    if (!s->prefix || !slot->seq_len) return 0;
    coli_context_set_prefix_domain(slot->ctx, j->req.cache_domain); /* s_prefix_save stores in it too */
    int got = coli_context_restore_prefix(slot->ctx, s->prefix, j->req.ids, n);
    if (got < 0) {
        if (s->cfg.verbose) fprintf(stderr, "coli serve: prefix cache: %s\n", coli_last_error());
        coli_context_reset(slot->ctx);
        got = 0;
    }
    j->n_cached = got;
    return got;
}

/* Keep what the context holds (prompt + every token the callback saw) for
 * later requests that start the same way. */
static void s_prefix_save(server_slot *slot) {
    server *s = slot->srv;
    if (!s->prefix) return;
    int n = coli_context_pos(slot->ctx);
    if (n > slot->seq_len) n = slot->seq_len; /* the ids were not all recorded: keep the known ones */
    if (coli_context_save_prefix(slot->ctx, s->prefix, slot->seq, n) < 0 && s->cfg.verbose)
        fprintf(stderr, "coli serve: prefix cache: %s\n", coli_last_error());
}

static void s_run(server_slot *slot, job *j) {
    server *s = slot->srv;
    coli_gen_stats st;
    memset(&st, 0, sizeof st);
    metrics_observe(&s->metrics, &s->metrics.queue_wait, coli_now_s() - j->t_arrival);
    pthread_mutex_lock(&j->mu);
    j->state = JOB_RUNNING;
    pthread_mutex_unlock(&j->mu);
    int rc = 0;
    if (!atomic_load(&j->cancel) && !client_gone(j->client_fd)) {
        slot->cur = j;
        /* The prefix cache's copies touch only this slot's context (in no
         * batch step before coli_generate joins, none after it leaves) and
         * the cache (its own mutex): made without the baton, they hold no
         * other slot up. */
        const int cached = s_prefix_restore(slot, j);
        /* the batch (unbatched: the context) takes the baton for each step
         * and prompt part, and makes its state copies without it */
        rc = coli_generate(slot->ctx, j->req.ids + cached, j->req.n_ids - cached, &j->req.sp, s_on_token, slot, &st);
        if (rc == 0) s_prefix_save(slot);
        slot->cur = NULL;
    } else {
        atomic_store(&j->cancel, 1);
    }
    s_finish(slot, j, rc, &st);
}

static void *s_slot_main(void *arg) {
    server_slot *slot = arg;
    server *s = slot->srv;
    job *j;
    while ((j = s_take(s))) {
        s_run(slot, j); /* counts the slot free again (s_finish) */
        job_release(j);
    }
    return NULL;
}

// ---------------------------------------------------------------------------
// stats: the monitor refreshes on demand and every second, on a thread that
// lives as long as the server (the executor may restart workers from it)

static void s_refresh_stats(server *s) {
    char *json = NULL;
    baton_acquire(s);
    int rc = coli_model_stats_json(s->model, &json);
    baton_release(s);
    pthread_mutex_lock(&s->st_mu);
    if (rc == 0) {
        free(s->stats_json);
        s->stats_json = json;
    }
    pthread_cond_broadcast(&s->st_cv);
    pthread_mutex_unlock(&s->st_mu);
}

static void *s_monitor_main(void *arg) {
    server *s = arg;
    pthread_mutex_lock(&s->st_mu);
    while (!atomic_load(&s->stopping)) {
        uint64_t want = s->st_want;
        pthread_mutex_unlock(&s->st_mu);
        s_refresh_stats(s);
        pthread_mutex_lock(&s->st_mu);
        s->st_have = want;
        pthread_cond_broadcast(&s->st_cv);
        struct timespec until;
        s_deadline(&until, 1000);
        while (s->st_want == s->st_have && !atomic_load(&s->stopping))
            if (pthread_cond_timedwait(&s->st_cv, &s->st_mu, &until) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&s->st_mu);
    return NULL;
}

char *server_stats_fresh(server *s) {
    struct timespec until;
    s_deadline(&until, 5000);
    pthread_mutex_lock(&s->st_mu);
    uint64_t want = ++s->st_want;
    pthread_cond_broadcast(&s->st_cv);
    while (s->st_have < want && !atomic_load(&s->stopping))
        if (pthread_cond_timedwait(&s->st_cv, &s->st_mu, &until) == ETIMEDOUT) break;
    char *copy = s->stats_json ? strdup(s->stats_json) : NULL;
    pthread_mutex_unlock(&s->st_mu);
    return copy;
}

// ---------------------------------------------------------------------------
// start and stop

/* coli_context_set_state_copy_callback: count the copy by whether it holds the baton. */
static void s_on_state_copy(void *user, size_t bytes) {
    server *s = user;
    atomic_fetch_add(&s->state_copies[s_holding_baton], 1);
    atomic_fetch_add(&s->state_copy_bytes[s_holding_baton], bytes);
}

static void s_baton_lock(void *s) { baton_acquire(s); }
static void s_baton_unlock(void *s) { baton_release(s); }

static int s_alloc(server *s) {
    s->q_cap = s->cfg.queue_max + s->cfg.n_slots;
    s->queue = calloc((size_t)s->q_cap, sizeof *s->queue);
    s->slots = calloc((size_t)s->cfg.n_slots, sizeof *s->slots);
    s->slot_threads = calloc((size_t)s->cfg.n_slots, sizeof *s->slot_threads);
    if (!s->queue || !s->slots || !s->slot_threads) {
        fprintf(stderr, "coli serve: out of memory for %d slots\n", s->cfg.n_slots);
        return SERVER_FAIL;
    }
    coli_context_params cp;
    coli_context_default_params(&cp);
    cp.n_ctx = s->cfg.n_ctx;
    if (s->cfg.prefix_cache_bytes && getrandom(s->cache_key, sizeof s->cache_key, 0) != (ssize_t)sizeof s->cache_key) {
        fprintf(stderr, "coli serve: prefix cache: no random key for its domains: %s\n", strerror(errno));
        return SERVER_FAIL;
    }
    if (s->cfg.prefix_cache_bytes &&
        coli_prefix_cache_new(s->model, s->cfg.prefix_cache_bytes, s->cfg.prefix_block, &s->prefix) != 0) {
        fprintf(stderr, "coli serve: %s\n", coli_last_error());
        return SERVER_FAIL;
    }
    if (!s->cfg.no_batching && coli_batch_new(s->model, s->cfg.n_slots, s->cfg.n_ctx, s->cfg.prefill_chunk,
                                              s_baton_lock, s_baton_unlock, s, &s->batch) != 0) {
        fprintf(stderr, "coli serve: %s\n", coli_last_error());
        return SERVER_FAIL;
    }
    for (int i = 0; i < s->cfg.n_slots; i++) {
        s->slots[i] = (server_slot){.srv = s, .index = i, .seq_cap = s->cfg.n_ctx};
        if (!(s->slots[i].seq = malloc((size_t)s->cfg.n_ctx * sizeof(int32_t)))) {
            fprintf(stderr, "coli serve: out of memory for slot %d's token record\n", i);
            return SERVER_FAIL;
        }
        if (coli_context_new(s->model, &cp, &s->slots[i].ctx) != 0) {
            fprintf(stderr, "coli serve: slot %d: %s\n", i, coli_last_error());
            return SERVER_FAIL;
        }
        coli_context_set_state_copy_callback(s->slots[i].ctx, s_on_state_copy, s);
        /* unbatched, each step queues for the baton: the slots take turns one token each */
        if (!s->batch) coli_context_set_compute_lock(s->slots[i].ctx, s_baton_lock, s_baton_unlock, s);
        if (s->batch && coli_context_set_batch(s->slots[i].ctx, s->batch) != 0) {
            fprintf(stderr, "coli serve: slot %d: %s\n", i, coli_last_error());
            return SERVER_FAIL;
        }
    }
    return 0;
}

void server_sync_init(server *s) {
    pthread_mutex_init(&s->baton_mu, NULL);
    pthread_cond_init(&s->baton_cv, NULL);
    pthread_mutex_init(&s->q_mu, NULL);
    pthread_cond_init(&s->q_cv, NULL);
    pthread_mutex_init(&s->st_mu, NULL);
    s_cond_init(&s->st_cv);
}

int server_slots_start(server *s) {
    if (s_alloc(s)) return SERVER_FAIL;
    for (; s->n_started < s->cfg.n_slots; s->n_started++) {
        int e = pthread_create(&s->slot_threads[s->n_started], NULL, s_slot_main, &s->slots[s->n_started]);
        if (e) {
            fprintf(stderr, "coli serve: cannot start slot thread: %s\n", strerror(e));
            return SERVER_FAIL;
        }
    }
    s_refresh_stats(s);
    int e = pthread_create(&s->monitor, NULL, s_monitor_main, s);
    if (e) {
        fprintf(stderr, "coli serve: cannot start the monitor thread: %s\n", strerror(e));
        return SERVER_FAIL;
    }
    s->monitor_started = 1;
    return 0;
}

/* With q_mu held: answer every queued job 503 and empty the queue (a request's
 * answers after the one in line wait behind it: next_choice). */
static void s_fail_queued(server *s) {
    for (int i = 0; i < s->q_len; i++) {
        for (job *j = s->queue[(s->q_head + i) % s->q_cap], *next; j; j = next) {
            next = j->next_choice; /* j's reference to it outlives the release below */
            pthread_mutex_lock(&j->mu);
            job_fail(j, 503, "shutting_down", "the server is shutting down; this request was not started");
            pthread_mutex_unlock(&j->mu);
            job_release(j);
        }
    }
    s->q_len = 0;
    s->q_answers = 0;
}

int server_drain(server *s, double grace_s) {
    atomic_store(&s->stopping, 1);
    if (!s->queue) return 1;
    pthread_mutex_lock(&s->q_mu);
    s_fail_queued(s);
    pthread_cond_broadcast(&s->q_cv);
    pthread_mutex_unlock(&s->q_mu);
    double until = coli_now_s() + grace_s;
    int idle = 0;
    for (;;) { /* bounded by grace_s */
        int waiting, active;
        server_queue_gauges(s, &waiting, &active);
        if ((idle = active == 0) || coli_now_s() >= until) break;
        usleep(10000);
    }
    return idle;
}

void server_slots_stop(server *s) {
    atomic_store(&s->stopping, 1);
    atomic_store(&s->abort_running, 1);
    if (!s->queue) return;
    pthread_mutex_lock(&s->q_mu);
    s_fail_queued(s);
    for (int i = 0; i < s->cfg.n_slots; i++)
        if (s->slots[i].cur) atomic_store(&s->slots[i].cur->cancel, 1);
    pthread_cond_broadcast(&s->q_cv);
    pthread_mutex_unlock(&s->q_mu);
    pthread_mutex_lock(&s->st_mu);
    pthread_cond_broadcast(&s->st_cv);
    pthread_mutex_unlock(&s->st_mu);
    for (int i = 0; i < s->n_started; i++) pthread_join(s->slot_threads[i], NULL);
    if (s->monitor_started) pthread_join(s->monitor, NULL);
    s->n_started = 0;
    s->monitor_started = 0;
}

void server_slots_free(server *s) {
    if (!s->queue) return;
    for (int i = 0; i < s->cfg.n_slots; i++) {
        coli_context_free(&s->slots[i].ctx);
        free(s->slots[i].seq);
    }
    coli_prefix_cache_free(&s->prefix);
    coli_batch_free(&s->batch);
    free(s->slots);
    free(s->slot_threads);
    free(s->queue);
    free(s->stats_json);
    s->queue = NULL;
}
