/*
 * test_serve_node.c - the official `openai` npm client against `coli serve`
 * on loopback (tests/node/client_test.mjs: completions and chat, plain and
 * streamed, usage, errors). The package is installed into tests/node/ from
 * its package-lock.json on first use; the test is skipped only when npm
 * itself is missing.
 */
#include "tests/serve_util.h"

static int s_have(const char *prog) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

/* npm ci into tests/node unless the package is there; serialised by a lock file. */
static void s_install_client(void) {
    if (cli_file_exists("tests/node/node_modules/openai/package.json")) return;
    char out[16384];
    const char *cmd = "cd tests/node && flock .install.lock npm ci --no-audit --no-fund 2>&1";
    int rc = cli_shell(cmd, out, sizeof out);
    cr_assert(rc == 0 && cli_file_exists("tests/node/node_modules/openai/package.json"),
              "npm ci in tests/node failed (rc %d): %s", rc, out);
}

Test(serve_node, openai_npm_client, .timeout = 300) {
    if (!s_have("npm")) cr_skip_test("npm not found: the openai npm client test needs Node and npm");
    cr_assert(s_have("node"), "npm is here but node is not");
    s_install_client();
    char model[4096];
    const char *extra[] = {"--api-key", "test-key", NULL};
    serve_proc p = su_start(su_model(model, sizeof model), extra);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "node tests/node/client_test.mjs http://127.0.0.1:%d/v1 test-key 2>&1", p.port);
    char out[32768];
    int rc = cli_shell(cmd, out, sizeof out);
    cr_expect_eq(rc, 0, "the openai client checks failed:\n%s", out);
    cr_expect(strstr(out, "all checks passed") != NULL, "%s", out);
    cr_expect_eq(su_stop(&p), 0);
}
