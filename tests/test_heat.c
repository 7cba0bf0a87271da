/*
 * test_heat.c - routing traces, heat files and placement from heat:
 *  - the heat file round-trips; every truncation, every single-bit flip,
 *    a hostile header and counts larger than their rows are refused with
 *    one line naming the file;
 *  - placement_plan_heat puts the globally hottest experts on the fastest
 *    worker up to its budget (checked against a sort done here), pins win;
 *  - the route callback sees the same experts and weights in-process and on
 *    CPU workers, the devices that computed them, one event per (token,
 *    layer); the heat file written at free holds exactly the callback's
 *    counts and adds up across runs; coli_dump_routing writes one JSON line
 *    per event;
 *  - with heat placement and pins on budgeted CPU workers, tokens and logits
 *    are the bytes of --inproc; a damaged heat file at load is ignored with
 *    one line and left as it was.
 * Uses the bundled trained model (models/, always in the repository).
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/cli_run.h"
#include "coordinator/heat.h"
#include "coordinator/sched/sched_internal.h"
#include "core/kernels/expert_ffn.h"
#include "plugins/plugin_abi.h"
#include "tests/sched_util.h"

#define BUNDLED "models/tiny-moe-4e2r-f16.gguf"

TestSuite(heat_file);
TestSuite(heat_place);
TestSuite(heat_route, .init = sched_env_defaults, .timeout = 120);
TestSuite(heat_cli, .init = sched_env_defaults, .timeout = 120);

static void s_tmp(char *out, size_t n, const char *tag) {
    snprintf(out, n, "/tmp/coli-heat-%s-%ld.heat", tag, (long)getpid());
    unlink(out);
}

static void s_fill(heat_table *h, unsigned seed) {
    int32_t sel[2];
    for (int l = 0; l < h->n_layer; l++)
        for (int t = 0; t < 50 + l; t++) {
            seed = seed * 1103515245u + 12345u;
            sel[0] = (int32_t)((seed >> 16) % (unsigned)h->n_expert);
            sel[1] = (sel[0] + 1 + (int32_t)((seed >> 8) % (unsigned)(h->n_expert - 1))) % h->n_expert;
            heat_add(h, l, 1, 2, sel);
        }
}

static size_t s_read_all(const char *path, unsigned char **buf) {
    FILE *fp = fopen(path, "rb");
    cr_assert(fp, "%s", path);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    rewind(fp);
    *buf = malloc((size_t)n);
    cr_assert_eq(fread(*buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    return (size_t)n;
}

static void s_write_all(const char *path, const unsigned char *buf, size_t n) {
    FILE *fp = fopen(path, "wb");
    cr_assert(fp);
    cr_assert_eq(fwrite(buf, 1, n, fp), n);
    fclose(fp);
}

static uint64_t s_fnv(const unsigned char *p, size_t n) {
    uint64_t x = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) x = (x ^ p[i]) * 1099511628211ULL;
    return x;
}

Test(heat_file, pair_index_is_a_bijection) {
    for (int X = 2; X <= 20; X++) {
        char *seen = calloc(heat_n_pairs(X), 1);
        for (int a = 0; a < X; a++)
            for (int b = a + 1; b < X; b++) {
                size_t k = heat_pair_index(X, a, b);
                cr_assert_lt(k, heat_n_pairs(X));
                cr_assert_eq(k, heat_pair_index(X, b, a));
                cr_assert_not(seen[k], "X %d pair %d+%d collides", X, a, b);
                seen[k] = 1;
            }
        free(seen);
    }
}

Test(heat_file, round_trip) {
    heat_table h, r;
    char path[256];
    s_tmp(path, sizeof path, "rt");
    cr_assert_eq(heat_init(&h, 3, 6), 0);
    s_fill(&h, 7);
    cr_assert_eq(heat_write(&h, path), 0, "%s", coli_last_error());
    cr_assert_eq(heat_read(path, &r), 0, "%s", coli_last_error());
    cr_assert_eq(r.n_layer, 3);
    cr_assert_eq(r.n_expert, 6);
    cr_assert_eq(memcmp(r.rows, h.rows, 3 * 8), 0);
    cr_assert_eq(memcmp(r.count, h.count, 18 * 8), 0);
    cr_assert_eq(memcmp(r.pair, h.pair, 3 * heat_n_pairs(6) * 8), 0);
    heat_free(&h);
    heat_free(&r);
    unlink(path);
}

Test(heat_file, truncation_and_bit_flips_are_refused) {
    heat_table h, r;
    char path[256], bad[256];
    s_tmp(path, sizeof path, "src");
    s_tmp(bad, sizeof bad, "bad");
    cr_assert_eq(heat_init(&h, 2, 4), 0);
    s_fill(&h, 3);
    cr_assert_eq(heat_write(&h, path), 0);
    unsigned char *buf;
    size_t n = s_read_all(path, &buf);
    for (size_t len = 0; len < n; len++) {
        s_write_all(bad, buf, len);
        int rc = heat_read(bad, &r);
        cr_assert_eq(rc, COLI_EFORMAT, "truncated to %zu bytes: rc %d", len, rc);
        cr_assert(strstr(coli_last_error(), bad), "the message names the file: %s", coli_last_error());
        cr_assert_null(strchr(coli_last_error(), '\n'));
    }
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (unsigned char)(1u << bit);
            s_write_all(bad, buf, n);
            cr_assert_eq(heat_read(bad, &r), COLI_EFORMAT, "bit %d of byte %zu flipped: accepted", bit, i);
            buf[i] ^= (unsigned char)(1u << bit);
        }
    unsigned char *pad = malloc(n + 1);
    memcpy(pad, buf, n);
    pad[n] = 0;
    s_write_all(bad, pad, n + 1);
    cr_assert_eq(heat_read(bad, &r), COLI_EFORMAT);
    free(pad);
    free(buf);
    heat_free(&h);
    unlink(path);
    unlink(bad);
}

Test(heat_file, hostile_header_and_impossible_counts) {
    heat_table r;
    char bad[256];
    s_tmp(bad, sizeof bad, "hostile");
    /* a header claiming 4096 x 4096 with nothing behind it: refused before any allocation */
    unsigned char hdr[40] = "COLIHEAT";
    hdr[8] = 1;
    hdr[13] = 0x10; /* n_layer 4096 */
    hdr[17] = 0x10; /* n_expert 4096 */
    s_write_all(bad, hdr, sizeof hdr);
    cr_assert_eq(heat_read(bad, &r), COLI_EFORMAT);
    hdr[15] = 0x80; /* n_layer beyond the limit */
    s_write_all(bad, hdr, sizeof hdr);
    cr_assert_eq(heat_read(bad, &r), COLI_EFORMAT);
    /* 1 layer x 2 experts: rows 1, count {5, 0}, pair {0}, valid checksum */
    unsigned char f[24 + 8 * 5] = "COLIHEAT";
    memset(f + 8, 0, sizeof f - 8);
    f[8] = 1, f[12] = 1, f[16] = 2, f[20] = 1;
    f[24] = 1; /* rows */
    f[32] = 5; /* count[0] > rows */
    uint64_t c = s_fnv(f, sizeof f - 8);
    for (int i = 0; i < 8; i++) f[sizeof f - 8 + (size_t)i] = (unsigned char)(c >> (8 * i));
    s_write_all(bad, f, sizeof f);
    cr_assert_eq(heat_read(bad, &r), COLI_EFORMAT);
    cr_assert(strstr(coli_last_error(), "chosen 5 times in 1 rows"), "%s", coli_last_error());
    cr_assert_eq(heat_read("/nonexistent/dir/x.heat", &r), COLI_EIO);
    unlink(bad);
}

// ---------------------------------------------------------------------------

Test(heat_place, hottest_onto_the_fast_worker_within_budget) {
    enum {
        L = 3,
        X = 8
    };
    uint64_t eb[L] = {100, 100, 100}, budget[2] = {700, 0}, heat[L * X];
    int usable[2] = {1, 1};
    long speed[2] = {sched_device_speed(&(device_spec){.plugin = "cuda"}, 1),
                     sched_device_speed(&(device_spec){.plugin = "cpu"}, 8)};
    cr_assert_gt(speed[0], speed[1]);
    unsigned seed = 11;
    for (int i = 0; i < L * X; i++) {
        seed = seed * 1664525u + 1013904223u;
        heat[i] = (seed >> 8) % 1000;
    }
    int32_t owner[L * X];
    placement_in in = {L, X, eb, 2, budget, usable, NULL};
    cr_assert_eq(placement_plan_heat(&in, heat, speed, NULL, owner), 0);
    /* the 7 hottest (heat values here are distinct with this seed) on worker 0 */
    uint64_t sorted[L * X];
    memcpy(sorted, heat, sizeof sorted);
    for (int i = 0; i < L * X; i++)
        for (int j = i + 1; j < L * X; j++)
            if (sorted[j] > sorted[i]) {
                uint64_t t = sorted[i];
                sorted[i] = sorted[j];
                sorted[j] = t;
            }
    cr_assert_neq(sorted[6], sorted[7], "seed gives a tie at the budget edge");
    for (int i = 0; i < L * X; i++)
        cr_assert_eq(owner[i], heat[i] >= sorted[6] ? 0 : 1, "slot %d heat %llu", i, (unsigned long long)heat[i]);
    double share[3];
    placement_row_share(&in, heat, owner, share);
    uint64_t top = 0, all = 0;
    for (int i = 0; i < L * X; i++) {
        all += heat[i];
        top += i < 7 ? sorted[i] : 0;
    }
    cr_assert_float_eq(share[0], (double)top / (double)all, 1e-12);
    /* pins win: all of layer 2 on the slow worker, the coldest expert on the fast one */
    int32_t pin[L * X];
    device_spec d[2] = {{.plugin = "cuda", .index = 0}, {.plugin = "cpu", .index = 0}};
    int coldest = 0;
    for (int i = 0; i < L * X; i++)
        if (heat[i] < heat[coldest]) coldest = i;
    char pins[64];
    snprintf(pins, sizeof pins, "2:*=cpu:0,%d:%d=cuda:0", coldest / X, coldest % X);
    cr_assert_eq(sched_parse_pins(pins, d, 2, L, X, pin), 0, "%s", coli_last_error());
    cr_assert_eq(placement_plan_heat(&in, heat, speed, pin, owner), 0);
    int on_fast = 0;
    for (int e = 0; e < X; e++) cr_assert_eq(owner[2 * X + e], coldest / X == 2 && e == coldest % X ? 0 : 1);
    for (int i = 0; i < L * X; i++) on_fast += owner[i] == 0;
    cr_assert_eq(owner[coldest], 0);
    cr_assert_eq(on_fast, 7, "the budget still holds 7");
}

Test(heat_place, pins_are_checked) {
    device_spec d[2] = {{.plugin = "cpu", .index = 0}, {.plugin = "cpu", .index = 1}};
    int32_t pin[8];
    cr_assert_eq(sched_parse_pins("1:3=cpu:1", d, 2, 2, 4, pin), 0);
    cr_assert_eq(pin[7], 1);
    const char *bad[] = {"2:0=cpu:0", "0:4=cpu:0", "0:1=cpu:2", "0:1", "x:1=cpu:0", "0:-1=cpu:0", "0:1=", ":1=cpu:0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(sched_parse_pins(bad[i], d, 2, 2, 4, pin), COLI_EINVAL, "'%s' accepted", bad[i]);
        cr_assert(strstr(coli_last_error(), "pin"), "%s", coli_last_error());
    }
    /* a pin beyond its worker's budget */
    uint64_t eb[2] = {100, 100}, budget[2] = {100, 0}, heat[8] = {0};
    int usable[2] = {1, 1};
    long speed[2] = {2, 1};
    int32_t owner[8];
    placement_in in = {2, 4, eb, 2, budget, usable, NULL};
    cr_assert_eq(sched_parse_pins("0:0=cpu:0,1:1=cpu:0", d, 2, 2, 4, pin), 0);
    cr_assert_eq(placement_plan_heat(&in, heat, speed, pin, owner), COLI_EINVAL);
}

//  Placement by capability: layer 1's experts need what worker 0 (the
//  fastest) lacks (able 0): by heat and by bytes they all go to worker 1,
//  a pin of one onto worker 0 is dropped, layer 0 is shared as before; with
//  no able worker they stay in-process (-1).
Test(heat_place, experts_go_only_to_workers_able_to_compute_them) {
    uint64_t eb[2] = {100, 100}, budget[2] = {0, 0}, heat[8] = {9, 8, 7, 6, 5, 4, 3, 2};
    int usable[2] = {1, 1};
    long speed[2] = {2, 1};
    uint8_t able[4] = {1, 0, 1, 1}; /* (worker, layer): worker 0 cannot take layer 1 */
    int32_t owner[8], pin[8];
    for (int i = 0; i < 8; i++) pin[i] = -1;
    pin[5] = 0;
    placement_in in = {2, 4, eb, 2, budget, usable, able};
    cr_assert_eq(placement_plan_heat(&in, heat, speed, pin, owner), 0, "%s", coli_last_error());
    for (int e = 0; e < 4; e++) cr_expect_eq(owner[4 + e], 1, "layer 1 expert %d on worker %d", e, owner[4 + e]);
    cr_expect_eq(owner[0], 0, "layer 0 goes to the fastest worker as before");
    cr_assert_eq(placement_plan(&in, owner), 0);
    for (int e = 0; e < 4; e++) cr_expect_eq(owner[4 + e], 1, "by bytes: layer 1 expert %d on %d", e, owner[4 + e]);
    cr_expect(owner[0] == 0 || owner[1] == 0, "layer 0 shared by bytes");
    able[3] = 0;
    cr_assert_eq(placement_plan(&in, owner), 0);
    for (int e = 0; e < 4; e++) cr_expect_eq(owner[4 + e], -1, "nobody able: in-process, got %d", owner[4 + e]);
}

//  The masks: weight types and act bits, each must be covered.
Test(heat_place, caps_fit_needs_every_type_and_activation) {
    place_need n = {.types = 1ULL << 39 | 1ULL << 0, .acts = 1u << 1 | 1u << 31};
    cr_expect(placement_fits(&n, ~0ULL, 1u << 1 | 1u << 31));
    cr_expect(!placement_fits(&n, ~0ULL, 1u << 1), "biases missing");
    cr_expect(!placement_fits(&n, ~0ULL, 0), "an older worker (no act_mask)");
    cr_expect(!placement_fits(&n, 1ULL << 0, ~0u), "MXFP4 (39) missing");
    place_need silu = {.types = 1, .acts = 0};
    cr_expect(placement_fits(&silu, 1, 0), "plain SwiGLU F32 needs no act bit");
}

//  kimi-k3's situ experts need their own act bit: a worker that computes
//  gpt-oss's SWIGLU_OAI (a GPU plugin without situ) is not given them.
Test(heat_place, situ_experts_need_the_situ_bit) {
    expert_weights ew = {.n_embd = 64, .n_ff = 64};
    expert_weights_set_act(&ew, EXPERT_ACT_SITU);
    place_need n;
    placement_need_of(&ew, &n);
    cr_expect_eq(n.acts, 1u << MOE_ACT_SITU);
    cr_expect(!placement_fits(&n, ~0ULL, 1u << MOE_ACT_SWIGLU_OAI | MOE_ACT_BIASES), "no situ bit");
    cr_expect(placement_fits(&n, ~0ULL, MOE_ACT_KNOWN), "the cpu plugin's mask");
}

//  One naming: a pin takes the workers' names as `coli plan` shows them (and
//  the same without the colon); a wrong one lists the workers that exist; a
//  live expert cache is no home for a pin.
Test(heat_place, pins_name_the_workers_that_exist) {
    device_spec d[3] = {{.plugin = "cpu", .index = 0}, {.plugin = "cpu", .index = 1}, {.plugin = "cuda", .index = 0}};
    int32_t pin[8];
    cr_assert_eq(sched_parse_pins("0:1=cuda0,1:*=cpu1", d, 3, 2, 4, pin), 0, "%s", coli_last_error());
    cr_assert_eq(pin[1], 2);
    cr_assert_eq(pin[4], 1);
    cr_assert_eq(sched_parse_pins("0:1=cuda:1", d, 3, 2, 4, pin), COLI_EINVAL);
    cr_assert(strstr(coli_last_error(), "(the workers: cpu:0, cpu:1, cuda:0)"), "%s", coli_last_error());
    d[0].cache = 1;
    cr_assert_eq(sched_parse_pins("0:1=cpu:0", d, 3, 2, 4, pin), COLI_EINVAL);
    cr_assert(strstr(coli_last_error(), "live expert cache"), "%s", coli_last_error());
}

// ---------------------------------------------------------------------------
// through the API, on the bundled model

typedef struct route_log {
    int n;
    int32_t experts[4096][2];
    float weights[4096][2];
    int layer[4096], pos[4096];
    char dev[4096][2][16];
} route_log;

static void s_on_route(void *user, const coli_route_event *ev) {
    route_log *r = user;
    cr_assert_eq(ev->k, 2);
    cr_assert_lt(r->n, 4096);
    for (int j = 0; j < 2; j++) {
        r->experts[r->n][j] = ev->experts[j];
        r->weights[r->n][j] = ev->weights[j];
        snprintf(r->dev[r->n][j], 16, "%s", ev->devices[j]);
    }
    r->layer[r->n] = ev->layer;
    r->pos[r->n++] = ev->pos;
}

static coli_model *s_load(const char *devices, const char *heat, const char *pins) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    mp.n_threads = 1;
    mp.heat_path = heat;
    mp.pins = pins;
    coli_model *m = NULL;
    cr_assert_eq(coli_model_load(BUNDLED, &mp, &m), 0, "load %s: %s", devices, coli_last_error());
    return m;
}

static void s_generate(coli_model *m, route_log *log, gen_result *r) {
    memset(r, 0, sizeof *r);
    coli_model_info info;
    coli_model_get_info(m, &info);
    r->n_vocab = info.n_vocab;
    r->logits = calloc((size_t)(GEN_STEPS + 1) * (size_t)info.n_vocab, sizeof(float));
    coli_context *c = NULL;
    cr_assert_eq(coli_context_new(m, NULL, &c), 0);
    if (log) cr_assert_eq(coli_set_route_callback(c, s_on_route, log), 0);
    int32_t prompt[PROMPT_LEN] = {1, 17, 42, 99, 7};
    for (int step = 0; step <= GEN_STEPS; step++) {
        float *lg = r->logits + (size_t)step * (size_t)info.n_vocab;
        int rc = step == 0 ? coli_eval(c, prompt, PROMPT_LEN, lg, 0) : coli_eval(c, &r->ids[step - 1], 1, lg, 0);
        cr_assert_eq(rc, 0, "%s", coli_last_error());
        if (step < GEN_STEPS) r->ids[step] = sched_argmax(lg, info.n_vocab);
    }
    cr_assert_eq(coli_model_stats_json(m, &r->stats), 0);
    coli_context_free(&c);
}

Test(heat_route, callback_same_choice_everywhere_and_heat_adds_up) {
    static route_log a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    gen_result ra, rb;
    char heat[256];
    s_tmp(heat, sizeof heat, "route");
    coli_model *m = s_load("inproc", NULL, NULL);
    coli_model_info info;
    coli_model_get_info(m, &info);
    s_generate(m, &a, &ra);
    coli_model_free(&m);
    m = s_load("cpu:2", heat, NULL);
    s_generate(m, &b, &rb);
    coli_model_free(&m); /* writes the heat file */
    sched_assert_same(&ra, &rb, "cpu:2");
    const int tokens = PROMPT_LEN + GEN_STEPS;
    cr_assert_eq(a.n, tokens * info.n_layer, "one event per (token, layer): %d", a.n);
    cr_assert_eq(b.n, a.n);
    uint64_t count[64][16] = {{0}};
    for (int i = 0; i < a.n; i++) {
        cr_assert_eq(a.layer[i], b.layer[i]);
        cr_assert_eq(a.pos[i], b.pos[i]);
        for (int j = 0; j < 2; j++) {
            cr_assert_eq(a.experts[i][j], b.experts[i][j]);
            cr_assert_eq(memcmp(&a.weights[i][j], &b.weights[i][j], sizeof(float)), 0);
            cr_assert_str_eq(a.dev[i][j], "inproc");
            cr_assert(!strcmp(b.dev[i][j], "cpu:0") || !strcmp(b.dev[i][j], "cpu:1"), "%s", b.dev[i][j]);
            count[a.layer[i]][a.experts[i][j]]++;
        }
    }
    heat_table h;
    cr_assert_eq(heat_read(heat, &h), 0, "%s", coli_last_error());
    cr_assert_eq(h.n_layer, info.n_layer);
    for (int l = 0; l < info.n_layer; l++) {
        cr_assert_eq(h.rows[l], (uint64_t)tokens);
        for (int e = 0; e < info.n_expert; e++)
            cr_assert_eq(h.count[(size_t)l * (size_t)info.n_expert + (size_t)e], count[l][e]);
    }
    heat_free(&h);
    /* a second run adds its counts (and places from the first's) */
    m = s_load("cpu:2", heat, NULL);
    s_generate(m, NULL, &rb);
    coli_model_free(&m);
    cr_assert_eq(heat_read(heat, &h), 0);
    for (int e = 0; e < info.n_expert; e++) cr_assert_eq(h.count[e], 2 * count[0][e]);
    heat_free(&h);
    gen_free(&ra);
    gen_free(&rb);
    unlink(heat);
}

Test(heat_route, dump_routing_writes_a_json_line_per_event) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/coli-trace-%ld.jsonl", (long)getpid());
    coli_model *m = s_load("cpu:1", NULL, NULL);
    coli_model_info info;
    coli_model_get_info(m, &info);
    cr_assert_eq(coli_dump_routing(m, path), 0, "%s", coli_last_error());
    static route_log log;
    memset(&log, 0, sizeof log);
    gen_result r;
    s_generate(m, &log, &r);
    cr_assert_eq(coli_dump_routing(m, NULL), 0);
    coli_model_free(&m);
    FILE *fp = fopen(path, "r");
    cr_assert(fp);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, fp)) {
        cJSON *j = cJSON_Parse(line);
        cr_assert(j, "line %d is not JSON: %s", n, line);
        cr_assert_lt(n, log.n);
        cr_assert_eq(cJSON_GetObjectItem(j, "layer")->valueint, log.layer[n]);
        cr_assert_eq(cJSON_GetObjectItem(j, "pos")->valueint, log.pos[n]);
        cJSON *ex = cJSON_GetObjectItem(j, "experts"), *w = cJSON_GetObjectItem(j, "weights"),
              *d = cJSON_GetObjectItem(j, "devices");
        for (int s = 0; s < 2; s++) {
            cr_assert_eq(cJSON_GetArrayItem(ex, s)->valueint, log.experts[n][s]);
            cr_assert_eq((float)cJSON_GetArrayItem(w, s)->valuedouble, log.weights[n][s]);
            cr_assert_str_eq(cJSON_GetArrayItem(d, s)->valuestring, "cpu:0");
        }
        cJSON_Delete(j);
        n++;
    }
    fclose(fp);
    cr_assert_eq(n, log.n);
    cr_assert_eq(n, (PROMPT_LEN + GEN_STEPS) * info.n_layer);
    gen_free(&r);
    unlink(path);
}

Test(heat_route, heat_placement_is_byte_identical_to_inproc) {
    char heat[256];
    s_tmp(heat, sizeof heat, "ident");
    gen_result ref, r;
    coli_model *m = s_load("inproc", heat, NULL);
    s_generate(m, NULL, &ref);
    coli_model_free(&m); /* heat now exists */
    /* experts are 576 KiB: the fast worker holds 3 of 16, pins move layer 0 to the slow one */
    const char *cases[][2] = {
        {"cpu:1@1=1800K,cpu:1@1", NULL}, {"cpu:1@1=1800K,cpu:1@1", "0:*=cpu:1,3:0=cpu:0"}, {"cpu:2", "1:*=cpu:0"}};
    for (size_t i = 0; i < 3; i++) {
        m = s_load(cases[i][0], heat, cases[i][1]);
        s_generate(m, NULL, &r);
        coli_model_free(&m);
        sched_assert_same(&ref, &r, cases[i][0]);
        if (i < 2) {
            char owned[32];
            sched_worker_field(r.stats, 0, "owned_experts", owned, sizeof owned);
            cr_assert_str_eq(owned, "3", "the fast worker fills its budget (%s)", cases[i][0]);
        }
        gen_free(&r);
    }
    gen_free(&ref);
    unlink(heat);
}

Test(heat_route, damaged_heat_file_is_ignored_and_kept) {
    char heat[256];
    s_tmp(heat, sizeof heat, "damaged");
    unsigned char junk[100];
    for (int i = 0; i < 100; i++) junk[i] = (unsigned char)(i * 37);
    s_write_all(heat, junk, sizeof junk);
    gen_result ref, r;
    coli_model *m = s_load("inproc", NULL, NULL);
    s_generate(m, NULL, &ref);
    coli_model_free(&m);
    m = s_load("cpu:2", heat, NULL); /* one line on stderr, and it runs */
    s_generate(m, NULL, &r);
    coli_model_free(&m);
    char *err = stderr_captured();
    cr_expect(strstr(err, heat) && strstr(err, "not a heat file"), "the line naming the file: %s", err);
    free(err);
    sched_assert_same(&ref, &r, "damaged heat file");
    unsigned char *back;
    size_t n = s_read_all(heat, &back);
    cr_assert_eq(n, sizeof junk);
    cr_assert_eq(memcmp(back, junk, n), 0, "the damaged file was overwritten");
    free(back);
    gen_free(&ref);
    gen_free(&r);
    unlink(heat);
}

// ---------------------------------------------------------------------------
// the commands: coli run --heat / --route-trace, coli heat, coli plan --heat

//  --devices and --pin that contradict each other (or a list that names a
//  device twice) are usage errors: exit 2, one line naming the flag, before
//  any worker starts; a good pin by either spelling passes.
Test(heat_cli, devices_and_pins_that_contradict_are_usage_errors) {
    char coli[1024];
    cli_build_path(coli, sizeof coli, "bin/coli");
    struct {
        const char *cmd, *devices, *pins, *flag, *why;
    } bad[] = {
        {"plan", "auto,auto", NULL, "--devices", "'auto' named twice"},
        {"run", "auto,auto", NULL, "--devices", "'auto' named twice"},
        {"plan", "cuda:0,cuda:0", NULL, "--devices", "cuda:0 named twice"},
        {"plan", "cpu:2", "0:0=cuda:0", "--pin", "(the workers: cpu:0, cpu:1)"},
        {"run", "cpu:2", "0:0=cpu:2", "--pin", "(the workers: cpu:0, cpu:1)"},
        {"run", "cpu:1@cache=50%,cpu:1", "0:0=cpu:0", "--pin", "live expert cache"},
        {"run", "inproc", "0:0=cpu:0", "--pin", "no worker to pin to"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[16] = {coli, (char *)bad[i].cmd, "-m", BUNDLED, "--devices", (char *)bad[i].devices};
        int n = 6;
        if (!strcmp(bad[i].cmd, "run")) argv[n++] = "-p", argv[n++] = "hi", argv[n++] = "-n", argv[n++] = "1";
        if (bad[i].pins) argv[n++] = "--pin", argv[n++] = (char *)bad[i].pins;
        argv[n] = NULL;
        cli_result r = cli_run(argv);
        cr_expect_eq(r.status, 2, "%s --devices %s --pin %s: status %d: %s", bad[i].cmd, bad[i].devices,
                     bad[i].pins ? bad[i].pins : "-", r.status, r.err);
        char want[64];
        snprintf(want, sizeof want, "coli %s: %s: ", bad[i].cmd, bad[i].flag);
        cr_expect(!strncmp(r.err, want, strlen(want)) && strstr(r.err, bad[i].why), "want '%s...%s', got: %s", want,
                  bad[i].why, r.err);
        cr_expect(strchr(r.err, '\n') == r.err + r.err_len - 1, "one line: %s", r.err);
        cli_result_free(&r);
    }
    char *ok[] = {coli, "plan", "-m", BUNDLED, "--devices", "cpu:2", "--pin", "0:0=cpu1,1:1=cpu:0", NULL};
    cli_result r = cli_run(ok);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "workers (--pin L:E=NAME takes these names): cpu:0, cpu:1\n"), "%s", r.out);
    cr_expect(strstr(r.out, "layer   0: 1"), "pinned 0:0 on cpu:1: %s", r.out);
    cli_result_free(&r);
}

Test(heat_cli, run_heat_then_report_plot_and_plan) {
    char coli[1024], heat[256], svg[256], trace[256];
    cli_build_path(coli, sizeof coli, "bin/coli");
    s_tmp(heat, sizeof heat, "cli");
    snprintf(svg, sizeof svg, "/tmp/coli-heat-%ld.svg", (long)getpid());
    snprintf(trace, sizeof trace, "/tmp/coli-heat-trace-%ld.jsonl", (long)getpid());
    char *run[] = {coli, "run",       "-m",    BUNDLED,  "-p", "And God said",  "-n",  "4", "--temp", "0", "-t",
                   "1",  "--devices", "cpu:2", "--heat", heat, "--route-trace", trace, NULL};
    cli_result r = cli_run(run);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cli_result_free(&r);
    char *rep[] = {coli, "heat", heat, "--plot", svg, NULL};
    r = cli_run(rep);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "layer 3:"), "%s", r.out);
    cr_assert(strstr(r.out, "top 1 experts take"), "%s", r.out);
    cr_assert(strstr(r.out, "chosen together most often"), "%s", r.out);
    cli_result_free(&r);
    size_t n = 0;
    char *text = cli_slurp(svg, &n);
    cr_assert(text && strstr(text, "<svg") && strstr(text, "</svg>"), "svg");
    int cells = 0;
    for (char *p = text; (p = strstr(p, "<rect x=")); p++) cells++;
    cr_assert_eq(cells, 16, "4 layers x 4 experts");
    free(text);
    text = cli_slurp(trace, &n);
    cr_assert(text);
    cr_assert_eq(cli_count_lines(text) % 4, 0, "whole tokens of 4 layers");
    free(text);
    char *plan[] = {coli, "plan", "-m", BUNDLED, "--devices", "cpu:1@2=1200K,cpu:1@1", "--heat", heat, NULL};
    r = cli_run(plan);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "experts 2") && strstr(r.out, "expected rows"), "%s", r.out);
    cli_result_free(&r);
    /* a damaged file: one line naming it, exit 1, from both commands */
    FILE *fp = fopen(heat, "r+b");
    fseek(fp, 30, SEEK_SET);
    fputc('x', fp);
    fclose(fp);
    char *bad_plan[] = {coli, "plan", "-m", BUNDLED, "--devices", "cpu:2", "--heat", heat, NULL};
    char **cmds[] = {rep, bad_plan};
    for (int i = 0; i < 2; i++) {
        r = cli_run(cmds[i]);
        cr_assert_eq(r.status, 1, "%s: status %d", cmds[i][1], r.status);
        cr_assert_eq(cli_count_lines(r.err), 1, "%s", r.err);
        cr_assert(strstr(r.err, heat) && strstr(r.err, "checksum"), "%s", r.err);
        cli_result_free(&r);
    }
    unlink(heat);
    unlink(svg);
    unlink(trace);
}

//  A worker killed mid-run: the callback names the device that really computed
//  each pair (the survivor takes the dead worker's rows), the heat counts
//  every token once, and the bytes stay those of the run without a fault
//  (itself the bytes of --inproc: heat_placement_is_byte_identical_to_inproc).
Test(heat_route, trace_follows_a_crash_fallback) {
    char heat[256];
    s_tmp(heat, sizeof heat, "crash");
    static route_log ref_log, log;
    memset(&ref_log, 0, sizeof ref_log);
    memset(&log, 0, sizeof log);
    gen_result ref, r;
    coli_model *m = s_load("cpu:2", NULL, NULL); /* no fault: who owns what */
    s_generate(m, &ref_log, &ref);
    coli_model_free(&m);
    setenv("COLI_FAULT", "crash@layer=2@worker=0:after=1", 1); /* the 2nd batch of layer 2 on worker 0 */
    m = s_load("cpu:2", heat, NULL);
    unsetenv("COLI_FAULT");
    s_generate(m, &log, &r);
    cr_assert_geq(sched_fallbacks(r.stats, "cpu:0", "crash"), 1, "%s", r.stats);
    coli_model_free(&m);
    sched_assert_same(&ref, &r, "crash");
    cr_assert_eq(log.n, ref_log.n);
    int moved = 0, on_0 = 0;
    for (int i = 0; i < log.n; i++)
        for (int j = 0; j < 2; j++) {
            cr_assert_eq(log.experts[i][j], ref_log.experts[i][j]);
            on_0 += !strcmp(log.dev[i][j], "cpu:0");
            if (strcmp(log.dev[i][j], ref_log.dev[i][j]) != 0) {
                cr_assert_str_eq(ref_log.dev[i][j], "cpu:0", "only the dead worker's pairs move");
                cr_assert_str_eq(log.dev[i][j], "cpu:1", "they go to the survivor");
                moved++;
            }
        }
    cr_assert_gt(on_0, 0, "worker 0 computed pairs before it died (and after its restart)");
    cr_assert_gt(moved, 0, "the crashed batch's pairs are shown on the survivor");
    heat_table h;
    cr_assert_eq(heat_read(heat, &h), 0, "%s", coli_last_error());
    for (int l = 0; l < h.n_layer; l++) cr_assert_eq(h.rows[l], (uint64_t)(PROMPT_LEN + GEN_STEPS));
    heat_free(&h);
    gen_free(&ref);
    gen_free(&r);
    unlink(heat);
}

/* Hosts as the memory tier: each remote host gets experts up to its budget
 * (576 KiB each here: 5 fit in 3 MiB), the coordinator keeps the rest, and
 * the plan shows per host its address, experts, bytes and expected rows. */
Test(heat, plan_over_hosts_shows_each_hosts_share) {
    char *plan = NULL;
    cr_assert_eq(coli_plan_text(BUNDLED, "remote:tcp://10.0.0.1:7601=3M,remote:tcp://10.0.0.2:7601=3M", &plan), 0, "%s",
                 coli_last_error());
    cr_expect(strstr(plan, "worker 0  remote:0 (tcp://10.0.0.1:7601)  budget 3.0 MiB  experts 5  2.8 MiB  expected "
                           "rows 31.2%"),
              "%s", plan);
    cr_expect(strstr(plan, "worker 1  remote:1 (tcp://10.0.0.2:7601)  budget 3.0 MiB  experts 5  2.8 MiB"), "%s", plan);
    cr_expect(strstr(plan, "in-process: 6 experts, 3.4 MiB (no room on any worker)  expected rows 37.5%"), "%s", plan);
    free(plan);
}
