/*
 * fuzz_grammar.c - libFuzzer target for the response_format grammar compiler
 * and automaton (tools/coli/server/server_grammar.c, its insides by server_grammar.h). A
 * few input bytes expand into a large schema, so the fuzzer reaches the
 * sizes of issue 28 (an enum of 32,767 values before another property):
 *   byte 0      shape: bit 0 every property required, bits 1-2 the kind of
 *               the first property's values (strings, numbers, mixed, one
 *               out of range), bits 3-7 the kind of the others
 *   bytes 1-2   values of the first property's enum: 0..65535 when byte 4's
 *               bit 7 is set, else byte 1 alone (small schemas run faster)
 *   byte 3      properties: x 16 (0..4080) when byte 4's bit 6 is set, else 0..15
 *   byte 4      nesting depth in bits 0-5 (0..63), the two switches above
 *   the rest    a count and that many bytes fed to the automaton, then a
 *               synthetic vocabulary of 64 pieces (1..4 bytes each, token 0
 *               ends generation) and the logits of a greedy walk over it.
 * Checks beyond the sanitizers: a schema is compiled or refused with a
 * reason; compiled, the last value of the first and of the last property's
 * enum is accepted in its place (the indices the int16 lost); the logit filter and the accept step
 * agree on every token a greedy walk picks; refusals leave nothing behind.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server_grammar.h"

#define N_PIECES 64

typedef struct fuzz_in {
    const uint8_t *p;
    size_t n;
} fuzz_in;

static unsigned s_byte(fuzz_in *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

/* Value i of an enum of the given kind (0 strings, 1 numbers, 2 mixed, 3 one out of range). */
static cJSON *s_value(int kind, int i, int n) {
    char v[32];
    if (kind == 3 && i == n - 1) return cJSON_CreateNumber(HUGE_VAL); /* 1e400 as cJSON reads it: refused */
    if (kind == 1 || (kind == 2 && i % 3 == 1)) return cJSON_CreateNumber(i * 0.5 - 7);
    if (kind == 2 && i % 3 == 2) return i % 2 ? cJSON_CreateNull() : cJSON_CreateBool(i % 4 == 0);
    snprintf(v, sizeof v, "v%d", i);
    return cJSON_CreateString(v);
}

/* A property's schema of kind k (the enum of n values for kind < 4). */
static cJSON *s_prop(int k, int n, int value_kind) {
    cJSON *p = cJSON_CreateObject();
    static const char *types[] = {"string", "integer", "number", "boolean", "null", "object"};
    if (k < 4) {
        cJSON *e = cJSON_AddArrayToObject(p, "enum");
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(e, s_value(value_kind, i, n));
    } else if (k < 10) {
        cJSON_AddStringToObject(p, "type", types[k - 4]);
    } else {
        cJSON_AddStringToObject(p, "type", "array");
        cJSON_AddItemToObject(p, "items", s_prop(k % 10, 3, value_kind));
    }
    return p;
}

/* The response_format the shape bytes describe. */
static cJSON *s_schema(fuzz_in *in, int *n_enum, int *all_required) {
    unsigned shape = s_byte(in), hi = s_byte(in), lo = s_byte(in), np = s_byte(in), sizes = s_byte(in);
    *n_enum = (int)(sizes & 0x80 ? hi << 8 | lo : hi);
    int n_props = (int)(sizes & 0x40 ? np * 16 : np % 16), depth = (int)(sizes % 64);
    *all_required = shape & 1;
    cJSON *rf = cJSON_CreateObject();
    cJSON_AddStringToObject(rf, "type", "json_schema");
    cJSON *sc = cJSON_AddObjectToObject(cJSON_AddObjectToObject(rf, "json_schema"), "schema");
    for (int d = 0; d < depth; d++) {
        cJSON_AddStringToObject(sc, "type", "object");
        cJSON *req = cJSON_AddArrayToObject(sc, "required");
        cJSON_AddItemToArray(req, cJSON_CreateString("in"));
        sc = cJSON_AddObjectToObject(cJSON_AddObjectToObject(sc, "properties"), "in");
    }
    cJSON_AddStringToObject(sc, "type", "object");
    cJSON *props = cJSON_AddObjectToObject(sc, "properties");
    cJSON *req = *all_required ? cJSON_AddArrayToObject(sc, "required") : NULL;
    for (int k = 0; k < (n_props ? n_props : 1); k++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", k);
        cJSON_AddItemToObject(props, name,
                              k == 0 ? s_prop(0, *n_enum ? *n_enum : 1, (int)(shape >> 1) & 3)
                                     : s_prop((int)(shape >> 3) % 12, 2 + k % 5, (int)(shape >> 1) & 3));
        if (req) cJSON_AddItemToArray(req, cJSON_CreateString(name));
    }
    return rf;
}

/* "{"pK":LAST}" (inside the nesting) with LAST the last value of property k's enum
 * must pass where the other properties are optional: past an int16, the literal
 * indices of the property after a 32,767-value enum had read out of bounds. */
static void s_check_last_value(const json_grammar *g, int depth, int k) {
    const gnode *top = &g->nodes[g->root];
    for (int d = 0; d < depth; d++) top = &g->nodes[g->props[top->prop0].node];
    const gnode *e = &g->nodes[g->props[top->prop0 + k].node];
    if (e->type != N_LITERALS) return;
    for (int i = 0; i < top->n_props; i++)
        if (i != k && g->props[top->prop0 + i].required) return;
    char key[24];
    snprintf(key, sizeof key, "{\"p%d\":", k);
    gstate st = g->st;
    const char *parts[] = {key, g->lits[e->lit0 + e->n_lit - 1], "}"};
    for (int d = 0; d < depth; d++)
        for (const char *c = "{\"in\":"; *c; c++)
            if (!json_grammar_feed(g, &st, (unsigned char)*c)) __builtin_trap();
    for (int i = 0; i < 3; i++)
        for (const char *c = parts[i]; *c; c++)
            if (!json_grammar_feed(g, &st, (unsigned char)*c)) __builtin_trap();
    for (int d = 0; d < depth; d++)
        if (!json_grammar_feed(g, &st, '}')) __builtin_trap();
    if (!json_grammar_feed(g, &st, -1)) __builtin_trap();
}

/* A vocabulary of N_PIECES pieces cut from the input (token 0 ends generation), then a
 * greedy walk: the filter's best allowed token must pass json_grammar_accept. */
static void s_walk(json_grammar *g, fuzz_in *in) {
    static char bytes[N_PIECES * 4];
    static const char *piece[N_PIECES];
    static uint32_t len[N_PIECES];
    static uint8_t eog[N_PIECES];
    for (int i = 0; i < N_PIECES; i++) {
        len[i] = i ? 1 + s_byte(in) % 4 : 0;
        for (uint32_t b = 0; b < len[i]; b++) bytes[i * 4 + b] = (char)s_byte(in);
        piece[i] = bytes + i * 4;
        eog[i] = i == 0;
    }
    free(g->piece);
    free(g->piece_len);
    free(g->eog);
    g->piece = malloc(sizeof piece);
    g->piece_len = malloc(sizeof len);
    g->eog = malloc(sizeof eog);
    if (!g->piece || !g->piece_len || !g->eog) return;
    memcpy(g->piece, piece, sizeof piece);
    memcpy(g->piece_len, len, sizeof len);
    memcpy(g->eog, eog, sizeof eog);
    g->n_vocab = N_PIECES;
    float logits[N_PIECES];
    for (int step = 0; step < 64; step++) {
        for (int i = 0; i < N_PIECES; i++) logits[i] = (float)((s_byte(in) * 31u + (unsigned)i * 7u) % 97u);
        json_grammar_filter(g, logits, N_PIECES);
        int best = -1;
        for (int i = 0; i < N_PIECES; i++)
            if (isfinite(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
        if (best <= 0) return; /* nothing allowed (a dead end of this vocabulary) or the end */
        if (json_grammar_accept(g, best) != 0) __builtin_trap(); /* the filter allowed it */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    static server s;
    s.info.n_vocab = 1;
    int n_enum = 0, all_required = 0, depth = size > 4 ? data[4] % 64 : 0;
    cJSON *rf = s_schema(&in, &n_enum, &all_required);
    json_grammar *g = NULL;
    char err[512] = "";
    int rc = rf ? json_grammar_new(&s, rf, &g, err, sizeof err) : 500;
    cJSON_Delete(rf);
    if (rc) {
        if (g || (rc == 400 && !strstr(err, "response_format"))) __builtin_trap(); /* refusals say why */
        return 0;
    }
    const gnode *top = &g->nodes[g->root];
    for (int d = 0; d < depth; d++) top = &g->nodes[g->props[top->prop0].node];
    s_check_last_value(g, depth, 0);
    s_check_last_value(g, depth, top->n_props - 1);
    gstate st = g->st;
    for (unsigned n_raw = s_byte(&in); n_raw && in.n; n_raw--) /* raw bytes through the automaton */
        if (!json_grammar_feed(g, &st, (int)s_byte(&in))) break;
    s_walk(g, &in);
    json_grammar_free(g);
    return 0;
}
