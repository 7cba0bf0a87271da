/*
 * test_disk_tier.c - the disk tier (--devices inproc@ram=SIZE,
 * coordinator/sched/disk_tier.c): the same bytes as the mapped in-process
 * path whatever the RAM budget, one read per expert per layer call, the
 * budget kept, its counters in the stats, and, in a memory cgroup, experts
 * that do not pile up in the page cache.
 */
#include <criterion/criterion.h>

#include "tests/cli_run.h"
#include "tests/memcg_util.h"
#include "tests/sched_util.h"

TestSuite(disk_tier, .init = sched_env_defaults);

static const char *const s_models[] = {"tiny-llama-moe-q4_0.gguf", "tiny-llama-moe-f32.gguf", "tiny-olmoe-f32.gguf",
                                       "tiny-qwen2moe-f32.gguf"};

/* Budgets: nothing stays (every expert read each time), a few experts
 * (promotions, evictions, prefetch), everything. */
static const char *const s_budgets[] = {"inproc@ram=1", "inproc@ram=40K", "inproc@ram=1G"};

/* A number field of the disk tier's stats ("disk_tier":{...}). */
static double tier_field(const char *json, const char *name) {
    const char *t = strstr(json, "\"disk_tier\":{");
    cr_assert_not_null(t, "no disk_tier in the stats: %s", json);
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *p = strstr(t, key);
    cr_assert_not_null(p, "disk_tier has no %s", name);
    return strtod(p + strlen(key), NULL);
}

/* With COLI_DISK_PREFETCH=1 the next layer's likely experts are read ahead:
 * into the cache when it admits them, else for the next call only; either
 * way the bytes are the same (answers_are_byte_identical_to_the_mapped_path
 * runs with it on and off). Off by default: no guess is read. */
Test(disk_tier, prefetch_reads_the_next_layers_experts) {
    gen_result none, room, dflt;
    sched_generate(sched_fixture("tiny-olmoe-f32.gguf"), "inproc@ram=1", NULL, NULL, &dflt);
    cr_expect_eq(tier_field(dflt.stats, "speculative_reads"), 0, "%s", dflt.stats);
    cr_expect_eq(tier_field(dflt.stats, "prefetch_issued"), 0, "%s", dflt.stats);
    gen_free(&dflt);
    setenv("COLI_DISK_PREFETCH", "1", 1);
    sched_generate(sched_fixture("tiny-olmoe-f32.gguf"), "inproc@ram=1", NULL, NULL, &none);
    sched_generate(sched_fixture("tiny-olmoe-f32.gguf"), "inproc@ram=1G", NULL, NULL, &room);
    cr_expect_gt(tier_field(none.stats, "speculative_reads"), 0, "%s", none.stats);
    cr_expect_eq(tier_field(none.stats, "prefetch_issued"), 0, "nothing fits: no prefetch is admitted");
    cr_expect_gt(tier_field(room.stats, "prefetch_issued"), 0, "%s", room.stats);
    cr_expect_gt(tier_field(room.stats, "prefetch_used"), 0, "%s", room.stats);
    gen_free(&none);
    gen_free(&room);
}

Test(disk_tier, answers_are_byte_identical_to_the_mapped_path) {
    for (size_t m = 0; m < 2 * sizeof s_models / sizeof *s_models; m++) {
        setenv("COLI_DISK_PREFETCH", m % 2 ? "1" : "0", 1); /* guesses off (the default) and on */
        const char *model = s_models[m / 2];
        gen_result mapped, disk;
        sched_generate(sched_fixture(model), "inproc", NULL, NULL, &mapped);
        cr_expect_null(strstr(mapped.stats, "disk_tier"), "the mapped path has no disk tier");
        for (size_t b = 0; b < sizeof s_budgets / sizeof *s_budgets; b++) {
            char what[128];
            snprintf(what, sizeof what, "%s on %s, COLI_DISK_PREFETCH=%d", model, s_budgets[b], (int)(m % 2));
            sched_generate(sched_fixture(model), s_budgets[b], NULL, NULL, &disk);
            sched_assert_same(&mapped, &disk, what);
            cr_expect_gt(tier_field(disk.stats, "disk_reads"), 0, "%s: nothing read from disk", what);
            cr_expect_leq(tier_field(disk.stats, "used_bytes"), tier_field(disk.stats, "budget_bytes"), "%s", what);
            gen_free(&disk);
        }
        gen_free(&mapped);
    }
}

Test(disk_tier, page_cache_reads_give_the_same_bytes) {
    const char *model = sched_fixture("tiny-llama-moe-q4_0.gguf");
    gen_result mapped, disk;
    sched_generate(model, "inproc", NULL, NULL, &mapped);
    setenv("COLI_DISK_DIRECT", "0", 1);
    sched_generate(model, "inproc@ram=20K", NULL, NULL, &disk);
    unsetenv("COLI_DISK_DIRECT");
    sched_assert_same(&mapped, &disk, "COLI_DISK_DIRECT=0");
    cr_expect_eq(tier_field(disk.stats, "direct_reads"), 0, "COLI_DISK_DIRECT=0 still read with O_DIRECT");
    cr_expect_gt(tier_field(disk.stats, "disk_reads"), 0);
    gen_free(&mapped);
    gen_free(&disk);
}

/* Experts with rows in expert_rows (one prompt: each layer called once). */
static int experts_used(const char *json, long *rows) {
    const char *p = strstr(json, "\"expert_rows\":[");
    cr_assert_not_null(p);
    p += strlen("\"expert_rows\":[");
    int used = 0;
    *rows = 0;
    for (int depth = 1; *p && depth > 0; p++) {
        if (*p == '[') depth++;
        if (*p == ']') depth--;
        if (*p >= '0' && *p <= '9') {
            char *end;
            long v = strtol(p, &end, 10);
            used += v > 0;
            *rows += v;
            p = end - 1;
        }
    }
    return used;
}

/* With no room in RAM, a prompt reads each expert it routes to once per
 * layer, however many of its rows chose that expert (no prefetch: its
 * guesses would add reads). */
Test(disk_tier, one_read_per_expert_per_layer_call) {
    setenv("COLI_DISK_PREFETCH", "0", 1);
    coli_model *m = sched_load(sched_fixture("tiny-llama-moe-q4_0.gguf"), "inproc@ram=1");
    coli_context *c = NULL;
    coli_context_params cp;
    coli_context_default_params(&cp);
    cr_assert_eq(coli_context_new(m, &cp, &c), 0, "%s", coli_last_error());
    int32_t prompt[12] = {1, 17, 42, 99, 7, 300, 5, 81, 64, 12, 900, 33};
    cr_assert_eq(coli_eval(c, prompt, 12, NULL, 0), 0, "%s", coli_last_error());
    char *json = NULL;
    cr_assert_eq(coli_model_stats_json(m, &json), 0);
    long rows = 0;
    int used = experts_used(json, &rows);
    cr_expect_eq(tier_field(json, "disk_reads"), used, "%s", json);
    cr_expect_lt(used, rows, "rows shared an expert: fewer reads than rows");
    cr_expect_eq(tier_field(json, "resident_experts"), 0);
    cr_expect_eq(tier_field(json, "speculative_reads"), 0);
    free(json);
    coli_context_free(&c);
    coli_model_free(&m);
}

/* A budget that holds every expert: each is read once, later tokens hit. */
Test(disk_tier, a_budget_that_fits_reads_each_expert_once) {
    setenv("COLI_DISK_PREFETCH", "0", 1);
    gen_result r;
    sched_generate(sched_fixture("tiny-llama-moe-q4_0.gguf"), "inproc@ram=1G", NULL, NULL, &r);
    long rows = 0;
    int used = experts_used(r.stats, &rows);
    cr_expect_eq(tier_field(r.stats, "disk_reads"), used, "%s", r.stats);
    cr_expect_eq(tier_field(r.stats, "resident_experts"), used);
    cr_expect_gt(tier_field(r.stats, "hits"), 0, "decode steps find their experts in RAM");
    cr_expect_eq(tier_field(r.stats, "evictions"), 0);
    gen_free(&r);
}

Test(disk_tier, bad_specs_are_refused_naming_them) {
    const char *flag = NULL;
    cr_expect_eq(coli_devices_check("inproc@ram=2G", NULL, &flag), 0, "%s", coli_last_error());
    cr_expect_eq(coli_devices_check("inproc@ram=lots", NULL, &flag), COLI_EINVAL);
    cr_expect_not_null(strstr(coli_last_error(), "'lots'"), "%s", coli_last_error());
    cr_expect_eq(coli_devices_check("inproc@ram=1G,cpu:1", NULL, &flag), COLI_EINVAL);
    cr_expect_not_null(strstr(coli_last_error(), "inproc"), "%s", coli_last_error());
    cr_expect_eq(coli_devices_check("inproc@ram", NULL, &flag), COLI_EINVAL);
}

/* ---- in a memory cgroup --------------------------------------------------- */

/* Run coli on devices in a fresh cgroup of limit bytes, the model's pages
 * dropped first; returns the cgroup's peak, stdout in out_path. */
static uint64_t run_confined(const char *model, const char *devices, uint64_t limit, const char *out_path,
                             const char *stats_path) {
    char coli[1100], why[256];
    snprintf(coli, sizeof coli, "%s/bin/coli", sched_build_dir());
    memcg cg;
    if (memcg_create(&cg, "coli-disk-tier", limit, why, sizeof why) != 0) cr_skip_test("%s", why);
    memcg_drop_cache(model);
    char *argv[] = {coli,
                    "run",
                    "-m",
                    (char *)model,
                    "-p",
                    "once upon a time there was a little girl named",
                    "-n",
                    "6",
                    "--temp",
                    "0",
                    "-t",
                    "1",
                    "--devices",
                    (char *)devices,
                    "--stats-json",
                    (char *)stats_path,
                    NULL};
    int status = memcg_run(&cg, argv, out_path);
    uint64_t peak = memcg_peak(&cg);
    memcg_destroy(&cg);
    cr_assert_eq(status, 0, "coli run --devices %s in a %llu-byte cgroup: status %d", devices,
                 (unsigned long long)limit, status);
    return peak;
}

/* A 100 MB model in a 160 MB cgroup that counts the page cache: the mapped
 * path's experts land in the cache (charged to the cgroup), the disk tier
 * with 4 MB of RAM reads them around it (O_DIRECT) and answers the same; in
 * a 96 MB cgroup plain `inproc` chooses the disk tier itself. */
Test(disk_tier, experts_stay_out_of_the_page_cache_in_a_memory_cgroup, .timeout = 120) {
    char dir[1100], model[1200], gen[1100], out_m[1200], out_d[1200], st_m[1200], st_d[1200];
    snprintf(dir, sizeof dir, "%s/disk-tier-XXXXXX", sched_build_dir());
    cr_assert_not_null(mkdtemp(dir));
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    snprintf(gen, sizeof gen, "%s/bin/gen_model", sched_build_dir());
    char *gargv[] = {gen,         "--arch",     "llama",   "--dim",  "256",      "--ffn", "1024",
                     "--experts", "8",          "--top-k", "4",      "--layers", "4",     "--heads",
                     "4",         "--kv-heads", "2",       "--seed", "26",       model,   NULL};
    cli_result g = cli_run(gargv);
    cr_assert_eq(g.status, 0, "gen_model: %s", g.err);
    cli_result_free(&g);
    snprintf(out_m, sizeof out_m, "%s/mapped.txt", dir);
    snprintf(out_d, sizeof out_d, "%s/disk.txt", dir);
    snprintf(st_m, sizeof st_m, "%s/mapped.json", dir);
    snprintf(st_d, sizeof st_d, "%s/disk.json", dir);
    const uint64_t limit = 160ull << 20;
    uint64_t peak_mapped = run_confined(model, "inproc", limit, out_m, st_m);
    uint64_t peak_disk = run_confined(model, "inproc@ram=4M", limit, out_d, st_d);
    size_t lm = 0, ld = 0;
    char *a = cli_slurp(out_m, &lm), *b = cli_slurp(out_d, &ld);
    cr_assert(a && b);
    cr_expect(lm == ld && memcmp(a, b, lm) == 0, "different text: mapped '%s' disk '%s'", a, b);
    char *stats = cli_slurp(st_d, &ld);
    cr_assert_not_null(stats);
    if (tier_field(stats, "direct_reads") > 0) { /* O_DIRECT served: nothing of the experts in the cache */
        cr_expect_lt(peak_disk, 64ull << 20, "disk tier peak %llu bytes", (unsigned long long)peak_disk);
        cr_expect_lt(peak_disk * 3 / 2, peak_mapped, "disk tier peak %llu, mapped %llu", (unsigned long long)peak_disk,
                     (unsigned long long)peak_mapped);
    }
    free(stats);
    /* the default: a file larger than the cgroup's room takes the disk tier by itself */
    char out_a[1200], st_a[1200];
    snprintf(out_a, sizeof out_a, "%s/auto.txt", dir);
    snprintf(st_a, sizeof st_a, "%s/auto.json", dir);
    run_confined(model, "inproc", 96ull << 20, out_a, st_a);
    stats = cli_slurp(st_a, &ld);
    cr_assert_not_null(stats);
    cr_expect_gt(tier_field(stats, "budget_bytes"), 0, "%s", stats);
    cr_expect_lt(tier_field(stats, "budget_bytes"), 96 << 20, "%s", stats);
    char *c = cli_slurp(out_a, &ld);
    cr_expect(c && lm == ld && memcmp(a, c, lm) == 0, "different text: mapped '%s' auto '%s'", a, c);
    free(c);
    free(a);
    free(b);
    free(stats);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* The end-of-run summary of `coli run` names the tier's reads and latencies
 * without -v, and `coli stats` on its stats file shows them too. */
Test(disk_tier, run_summary_and_coli_stats_show_the_counters) {
    char coli[1100], stats[] = "/tmp/coli-disk-tier-XXXXXX";
    snprintf(coli, sizeof coli, "%s/bin/coli", sched_build_dir());
    int fd = mkstemp(stats);
    cr_assert_geq(fd, 0);
    close(fd);
    char *argv[] = {coli,
                    "run",
                    "-m",
                    (char *)sched_fixture("tiny-llama-moe-q4_0.gguf"),
                    "-p",
                    "Once upon a time",
                    "-n",
                    "4",
                    "--temp",
                    "0",
                    "--devices",
                    "inproc@ram=20K",
                    "--stats-json",
                    stats,
                    NULL};
    cli_result r = cli_run(argv);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect_not_null(strstr(r.err, "disk tier: RAM"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "disk reads"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "read p50"), "%s", r.err);
    cr_expect_not_null(strstr(r.err, "waiting for reads"), "%s", r.err);
    cli_result_free(&r);
    char *sargv[] = {coli, "stats", stats, NULL};
    r = cli_run(sargv);
    cr_expect_eq(r.status, 0, "%s", r.err);
    cr_expect_not_null(strstr(r.out, "disk tier: RAM"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "disk reads"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "disk tier decode:"), "%s", r.out);
    cr_expect_not_null(strstr(r.out, "read wait"), "%s", r.out);
    cli_result_free(&r);
    unlink(stats);
}

/* ---- pins, plan, the per-phase counters ----------------------------------- */

/* The rows the stats' expert_rows give layer `layer`. */
static long layer_rows(const char *json, int layer) {
    const char *p = strstr(json, "\"expert_rows\":[");
    cr_assert_not_null(p);
    p += strlen("\"expert_rows\":[");
    for (int l = 0; l < layer; l++) p = strchr(p, ']') + 1;
    long rows = 0;
    for (p = strchr(p, '[') + 1; *p != ']'; p++)
        if (*p >= '0' && *p <= '9') {
            char *end;
            rows += strtol(p, &end, 10);
            p = end - 1;
        }
    return rows;
}

/* A number field of the disk tier's "prompt" or "decode" member. */
static double phase_field(const char *json, const char *phase, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\":{", phase);
    const char *p = strstr(json, key);
    cr_assert_not_null(p, "no %s in the stats: %s", phase, json);
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *q = strstr(p, key);
    cr_assert(q && q < strchr(p, '}'), "%s has no %s", phase, name);
    return strtod(q + strlen(key), NULL);
}

static coli_model *load_pinned(const char *devices, const char *pins) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = devices;
    mp.pins = pins;
    mp.n_threads = 1;
    coli_model *m = NULL;
    int rc = coli_model_load(sched_fixture("tiny-llama-moe-q4_0.gguf"), &mp, &m);
    return rc ? NULL : m;
}

/* Layer 0's four experts pinned in a budget that holds just them: every
 * routed pair of layer 0 is a hit from the prompt on (the live-cache policy
 * alone would miss them first, and later trade them for layer 1's), the
 * answer is the mapped path's. tiny-llama-moe-q4_0: 13.5 KiB per expert. */
Test(disk_tier, pinned_experts_stay_in_its_ram) {
    gen_result mapped, pinned;
    sched_generate(sched_fixture("tiny-llama-moe-q4_0.gguf"), "inproc", NULL, NULL, &mapped);
    coli_model *m = load_pinned("inproc@ram=54K", "0:*=ram");
    cr_assert_not_null(m, "%s", coli_last_error());
    sched_generate_on(m, "pinned", NULL, NULL, &pinned);
    coli_model_free(&m);
    sched_assert_same(&mapped, &pinned, "layer 0 pinned");
    const long rows0 = layer_rows(pinned.stats, 0);
    cr_expect_gt(rows0, 0);
    cr_expect_geq(tier_field(pinned.stats, "hits"), rows0, "%s", pinned.stats);
    cr_expect_geq(tier_field(pinned.stats, "resident_experts"), 4, "%s", pinned.stats);
    gen_free(&mapped);
    gen_free(&pinned);
}

Test(disk_tier, pins_that_do_not_fit_or_name_no_tier_are_refused) {
    cr_expect_null(load_pinned("inproc@ram=20K", "0:*=ram"));
    cr_expect_not_null(strstr(coli_last_error(), "--pin 0:1=ram"), "%s", coli_last_error());
    cr_expect_not_null(strstr(coli_last_error(), "no room"), "%s", coli_last_error());
    const char *flag = NULL;
    cr_expect_eq(coli_devices_check("inproc@ram=1G", "0:1=ram,1:*=ram", &flag), 0, "%s", coli_last_error());
    cr_expect_eq(coli_devices_check("inproc@ram=1G", "0:1=cpu:1", &flag), COLI_EINVAL);
    cr_expect_str_eq(flag, "--pin");
    cr_expect_not_null(strstr(coli_last_error(), "ram"), "%s", coli_last_error());
    cr_expect_eq(coli_devices_check("inproc", "0:1=ram", &flag), COLI_EINVAL, "plain inproc has no tier to pin to");
}

/* `coli plan` describes the tier: budget, pinned experts resident, the
 * reads a token should expect; the mapped in-process path stays as it was. */
Test(disk_tier, plan_describes_the_tier) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.devices = "inproc@ram=54K";
    mp.pins = "0:*=ram";
    char *plan = NULL;
    cr_assert_eq(coli_plan_params_text(sched_fixture("tiny-llama-moe-q4_0.gguf"), &mp, &plan), 0, "%s",
                 coli_last_error());
    cr_expect_not_null(strstr(plan, "disk tier (--devices inproc@ram=54K)"), "%s", plan);
    cr_expect_not_null(strstr(plan, "resident at start: 4 experts"), "%s", plan);
    cr_expect_not_null(strstr(plan, "4 pinned"), "%s", plan);
    /* layer 0 all in RAM, layer 1 none (the pins fill the budget): 2 of 4 experts read per token */
    cr_expect_not_null(strstr(plan, "expected reads per decoded token, the cache full: 2.0 experts"), "%s", plan);
    free(plan);
    mp.devices = "inproc";
    mp.pins = NULL;
    cr_assert_eq(coli_plan_params_text(sched_fixture("tiny-llama-moe-q4_0.gguf"), &mp, &plan), 0, "%s",
                 coli_last_error());
    cr_expect_null(strstr(plan, "disk tier"), "%s", plan);
    free(plan);
}

/* Without guesses every read is one a row took: the needed reads of the
 * prompt and the decode are all the reads, one decode call per layer and
 * token; the time split is reported. */
Test(disk_tier, needed_reads_and_the_time_split_per_phase) {
    setenv("COLI_DISK_PREFETCH", "0", 1);
    gen_result r;
    sched_generate(sched_fixture("tiny-llama-moe-q4_0.gguf"), "inproc@ram=20K", NULL, NULL, &r);
    const double needed =
        phase_field(r.stats, "prompt", "needed_reads") + phase_field(r.stats, "decode", "needed_reads");
    cr_expect_eq(needed, tier_field(r.stats, "disk_reads"), "%s", r.stats);
    cr_expect_gt(phase_field(r.stats, "decode", "needed_bytes"), 0, "%s", r.stats);
    cr_expect_eq(phase_field(r.stats, "decode", "layer_calls"), 2 * (GEN_STEPS), "%s", r.stats);
    cr_expect_gt(phase_field(r.stats, "decode", "compute_ms"), 0, "%s", r.stats);
    cr_expect_geq(phase_field(r.stats, "decode", "layer_ms"), phase_field(r.stats, "decode", "compute_ms"));
    gen_free(&r);
}
