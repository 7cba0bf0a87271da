/*
 * commands.h - the `coli` subcommands. Each takes the arguments after
 * `coli` (argv[0] is the command name) and returns the exit status:
 * 0 success, 1 runtime error (CLI_FAIL), 2 usage error (ARGS_ERROR).
 * A new command: one declaration here, one line in main.c's table.
 */
#ifndef COLI_CLI_COMMANDS_H
#define COLI_CLI_COMMANDS_H

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_imatrix(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_heat(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_xdna(int argc, char **argv);

#endif
