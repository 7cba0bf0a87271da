/* line_edit.c - libedit on a terminal, getline otherwise; see line_edit.h. */
#include "tools/coli/line_edit.h"

#include <errno.h>
#include <histedit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

struct line_reader {
    EditLine *el; /* NULL: not a terminal, getline */
    History *hist;
    char *line; /* the returned line (a copy: libedit's buffer changes on the next call) */
    size_t cap;
};

static char *s_prompt(EditLine *el) {
    (void)el;
    return "> ";
}

line_reader *line_reader_new(int tty) {
    line_reader *r = calloc(1, sizeof *r);
    if (!r || !tty) return r;
    r->el = el_init("coli", stdin, stdout, stderr);
    r->hist = history_init();
    if (!r->el || !r->hist) { /* no editing, but still a reader */
        if (r->el) el_end(r->el);
        if (r->hist) history_end(r->hist);
        r->el = NULL;
        r->hist = NULL;
        return r;
    }
    HistEvent ev;
    history(r->hist, &ev, H_SETSIZE, 1000);
    history(r->hist, &ev, H_SETUNIQUE, 1);
    el_set(r->el, EL_EDITOR, "emacs");
    el_set(r->el, EL_PROMPT, s_prompt);
    el_set(r->el, EL_HIST, history, r->hist);
    el_source(r->el, NULL); /* the user's ~/.editrc, as every libedit program */
    return r;
}

void line_reader_free(line_reader *r) {
    if (!r) return;
    if (r->el) el_end(r->el);
    if (r->hist) history_end(r->hist);
    free(r->line);
    free(r);
}

/* Keep a copy of n bytes of text without the trailing newline. */
static int s_keep(line_reader *r, const char *text, size_t n) {
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r')) n--;
    if (n + 1 > r->cap) {
        char *t = realloc(r->line, n + 1);
        if (!t) return 0;
        r->line = t;
        r->cap = n + 1;
    }
    memcpy(r->line, text, n);
    r->line[n] = '\0';
    return 1;
}

int line_reader_read(line_reader *r, const char **out) {
    errno = 0;
    if (!r->el) {
        ssize_t n = getline(&r->line, &r->cap, stdin);
        if (n < 0) return errno == EINTR ? (clearerr(stdin), -1) : 0;
        if (!s_keep(r, r->line, (size_t)n)) return 0;
        *out = r->line;
        return 1;
    }
    int count = 0;
    const char *text = el_gets(r->el, &count);
    if (!text || count < 0) return errno == EINTR || count < 0 ? -1 : 0;
    if (!s_keep(r, text, (size_t)count)) return 0;
    if (r->line[0]) {
        HistEvent ev;
        history(r->hist, &ev, H_ENTER, r->line);
    }
    *out = r->line;
    return 1;
}
