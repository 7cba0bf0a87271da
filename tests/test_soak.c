/*
 * test_soak.c - a 15-second run of the soak (tools/soak/soak.py, `make soak`
 * runs it for SOAK_MINUTES): coli serve on the bundled model with two local
 * CPU workers, four clients (completion, chat, plain and streamed) whose
 * every reply must be the bytes of a `coli serve --inproc` reference, while
 * workers are SIGKILLed and SIGSTOPped every 1-3 s. Passes when the script
 * says so (exit 0: no differing output, no unexplained failure, the server
 * alive) and its JSON shows the chaos really happened. About 25 s on a busy
 * 2-core machine. Skips without /usr/bin/python3 or the bundled model.
 */
#include <cjson/cJSON.h>
#include <glob.h>

#include "tests/cli_run.h"
#include "tests/sched_util.h"

static double s_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

Test(soak, short_run_with_worker_kills_keeps_every_reply, .timeout = 240) {
    if (access("/usr/bin/python3", X_OK) != 0) cr_skip_test("/usr/bin/python3 is missing (the soak is Python)");
    char script[1200], coli[1200], models[1200], json[128];
    snprintf(script, sizeof script, "%s/../tools/soak/soak.py", sched_build_dir());
    snprintf(coli, sizeof coli, "%s/bin/coli", sched_build_dir());
    snprintf(models, sizeof models, "%s/../models/*.gguf", sched_build_dir());
    glob_t g;
    if (access(script, R_OK) != 0 || glob(models, 0, NULL, &g) != 0)
        cr_skip_test("%s or the bundled model (%s) not found", script, models);
    globfree(&g);
    snprintf(json, sizeof json, "/tmp/coli-soak-%d.json", (int)getpid());
    char *argv[] = {"/usr/bin/python3", script, "--coli", coli, "--minutes", "0.25",
                    "--chaos-every",    "3",    "--json", json, NULL};
    cli_result r = cli_run(argv);
    char *text = cli_slurp(json, NULL);
    unlink(json);
    cr_assert_eq(r.status, 0, "soak failed:\n%s\n%s", r.out, r.err);
    cli_result_free(&r);
    cJSON *js = text ? cJSON_Parse(text) : NULL;
    free(text);
    cr_assert(js, "the soak wrote no JSON report");
    const cJSON *chaos = cJSON_GetObjectItemCaseSensitive(js, "chaos");
    cr_expect_gt(s_num(chaos, "kill") + s_num(chaos, "stop"), 0, "no worker was killed or stopped");
    cr_expect_gt(s_num(js, "requests_total"), 0);
    cr_expect_eq(s_num(js, "differing_outputs"), 0);
    cJSON_Delete(js);
}
