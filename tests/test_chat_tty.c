/*
 * test_chat_tty.c - `coli chat` on a real terminal (a pseudo-terminal from
 * forkpty): libedit's line editing and history (the up arrow brings back
 * the last line, Ctrl-A/Ctrl-E edit it), Ctrl-C at the prompt only reminds
 * how to leave, /stats answers, Ctrl-D quits with status 0.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/cli_run.h"

static double s_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Read from fd into buf (appending) until needle shows up after *from or 30 s pass; 1 if it did. */
static int s_expect(int fd, char *buf, size_t cap, size_t *len, size_t *from, const char *needle) {
    double until = s_now() + 30;
    for (;;) {
        char *hit = strstr(buf + *from, needle);
        if (hit) {
            *from = (size_t)(hit - buf) + strlen(needle);
            return 1;
        }
        if (s_now() > until || *len + 1 >= cap) return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) <= 0) continue;
        ssize_t n = read(fd, buf + *len, cap - 1 - *len);
        if (n <= 0) return 0;
        *len += (size_t)n;
        buf[*len] = '\0';
    }
}

static void s_type(int fd, const char *keys) {
    size_t n = strlen(keys);
    cr_assert_eq(write(fd, keys, n), (ssize_t)n);
}

Test(chat_tty, editing_history_and_ctrl_keys, .timeout = 120) {
    char coli[512], model[512];
    cli_build_path(coli, sizeof coli, "bin/coli");
    cli_build_path(model, sizeof model, "fixtures/tiny-llama-moe-f32.gguf");
    if (!cli_file_exists(coli) || !cli_file_exists(model)) cr_skip_test("coli or the fixture missing (make fixtures)");
    int fd;
    pid_t pid = forkpty(&fd, NULL, NULL, NULL);
    cr_assert_geq(pid, 0, "forkpty");
    if (pid == 0) {
        setenv("HOME", "/nonexistent", 1); /* no ~/.editrc */
        execl(coli, "coli", "chat", "-m", model, "--inproc", "-n", "3", "--temp", "0", (char *)NULL);
        _exit(127);
    }
    static char buf[1 << 16];
    size_t len = 0, at = 0;
    cr_assert(s_expect(fd, buf, sizeof buf, &len, &at, "> "), "no prompt: %s", buf);
    usleep(300000);                       /* typing before libedit has the terminal in its mode would echo it cooked */
    s_type(fd, "world\x01hello \x05!\r"); /* Ctrl-A to the start, Ctrl-E to the end */
    cr_assert(s_expect(fd, buf, sizeof buf, &len, &at, "\n> "), "no answer: %s", buf);
    usleep(300000);
    s_type(fd, "\x1b[A"); /* up: the last line again */
    cr_expect(s_expect(fd, buf, sizeof buf, &len, &at, "hello world!"), "history did not bring the line back: %s", buf);
    s_type(fd, "\x15/stats\r"); /* Ctrl-U clears it */
    cr_expect(s_expect(fd, buf, sizeof buf, &len, &at, "conversation: 2 messages"), "/stats after one edited line: %s",
              buf);
    cr_expect(s_expect(fd, buf, sizeof buf, &len, &at, "> "), "no prompt after /stats: %s", buf);
    usleep(300000);
    s_type(fd, "\x03");
    cr_expect(s_expect(fd, buf, sizeof buf, &len, &at, "(/quit or Ctrl-D leaves)"), "Ctrl-C at the prompt: %s", buf);
    /* as above: a key typed before libedit has the terminal back in its
     * mode goes through the cooked line discipline; a Ctrl-D there is an
     * EOF that a later raw read never sees (the chat then waited forever) */
    cr_expect(s_expect(fd, buf, sizeof buf, &len, &at, "> "), "no prompt after Ctrl-C: %s", buf);
    usleep(300000);
    s_type(fd, "\x04");
    int status = 0;
    double until = s_now() + 30;
    while (waitpid(pid, &status, WNOHANG) == 0 && s_now() < until) {
        char sink[256];
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0 && read(fd, sink, sizeof sink) <= 0) usleep(10000);
    }
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cr_expect(0, "Ctrl-D did not quit");
    }
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d", status);
    close(fd);
}
