/*
 * server_grammar.h - the insides of server_grammar.c's automaton (its
 * limits, schema nodes, frames and state), for the code that walks it: the
 * grammar itself, tests/test_json_grammar.c and tools/fuzz/fuzz_grammar.c.
 * The server uses only the json_grammar_* calls of server.h.
 */
#ifndef COLI_CLI_SERVER_GRAMMAR_H
#define COLI_CLI_SERVER_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "tools/coli/server/server.h"

#define MAX_DEPTH 32        /* automaton frames; a schema nests at most MAX_DEPTH - 2 levels */
#define MAX_LIT 120         /* bytes of one enum literal or quoted key */
#define MAX_NODES 1024      /* schema nodes: each property, items, enum and type counts one */
#define MAX_ENUM 1024       /* values of one enum */
#define MAX_LITS 4096       /* enum values and property names in all */
#define MAX_LIT_BYTES 65536 /* their bytes in all */
#define WS_RUN 8

enum {
    N_ANY,
    N_OBJECT,
    N_ARRAY,
    N_STRING,
    N_NUMBER,
    N_INTEGER,
    N_LITERALS
};

typedef struct gnode {
    int type;
    int items;          /* array: node of the items, -1 = any */
    int prop0, n_props; /* object with properties: props[prop0 ..]; n_props 0 = any keys */
    int lit0, n_lit;    /* N_LITERALS: lits[lit0 ..] (JSON texts); object: the quoted keys */
} gnode;

typedef struct gprop {
    int node, required;
} gprop;

/* The frames of the automaton (fixed size: the filter copies the state per token). */
enum {
    F_VALUE,
    F_OBJ,
    F_ARR,
    F_STR,
    F_NUM,
    F_LIT
};
/* F_OBJ sub-states */
enum {
    O_KEY_OR_END,
    O_KEY,
    O_COLON,
    O_VALUE,
    O_COMMA_OR_END
};
/* F_ARR sub-states */
enum {
    A_VALUE_OR_END,
    A_VALUE,
    A_COMMA_OR_END
};

/* int32_t: every index below MAX_LITS / MAX_NODES fits without a cast that could wrap
 * (an int16_t here once turned literal 32,770 negative and read out of bounds). */
typedef struct gframe {
    uint8_t kind, sub;
    int32_t node; /* schema node (-1: any) */
    int32_t next; /* F_OBJ: next property index; F_LIT: first candidate */
    int32_t n;    /* F_LIT: candidates; F_STR: 1 = a free key (then ':') */
} gframe;
_Static_assert(MAX_LITS <= INT32_MAX && MAX_NODES <= INT32_MAX, "gframe indices are int32_t");

typedef struct gstate {
    int depth, root_done, ws_run;
    int u8_need, hex_left, escape; /* inside a string */
    int lit_len;
    char lit[MAX_LIT];
    gframe f[MAX_DEPTH]; /* last: s_state_copy copies the frames in use only */
} gstate;

struct json_grammar {
    gnode nodes[MAX_NODES];
    int n_nodes, root;
    gprop *props;
    int n_props_total;
    char **lits;
    int n_lits;
    size_t lit_bytes; /* of the schema's literals (MAX_LIT_BYTES) */
    int n_vocab;
    const char **piece; /* per token: its bytes */
    uint32_t *piece_len;
    uint8_t *eog;
    gstate st;
    gstate *after; /* the filter's: the state after each first byte (256), this step */
};

/* Advance st over byte b (0..255; -1: the end of the output): 1 if the grammar
 * allows it (st moved on), 0 if not (st is then undefined). */
int json_grammar_feed(const json_grammar *g, gstate *st, int b);

#endif
