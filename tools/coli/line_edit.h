/*
 * line_edit.h - reading `coli chat`'s input lines: on a terminal through
 * libedit (Debian's libedit-dev: emacs-style editing, arrow-key history of
 * this session), otherwise plain getline (pipes, tests).
 */
#ifndef COLI_CLI_LINE_EDIT_H
#define COLI_CLI_LINE_EDIT_H

typedef struct line_reader line_reader;

/* A reader of stdin; tty: 1 for libedit with the prompt "> ". NULL when out of memory. */
line_reader *line_reader_new(int tty);
void line_reader_free(line_reader *r);

/* The next line without its newline in *out (owned by r, valid until the next call).
 * Returns 1, 0 at end of input (Ctrl-D), or -1 when a signal (Ctrl-C) interrupted the read. */
int line_reader_read(line_reader *r, const char **out);

#endif
