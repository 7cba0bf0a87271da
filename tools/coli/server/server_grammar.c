/*
 * server_grammar.c - response_format json_object / json_schema: constrained
 * decoding by a byte-level JSON pushdown automaton over the tokenizer's
 * pieces. Before each step the filter runs every vocabulary token's bytes
 * through a copy of the automaton and masks (-INFINITY) those it rejects;
 * end-of-generation tokens pass only once the value is complete, and then
 * nothing else does. So whatever is sampled, the answer parses.
 *
 * The schema subset: "type" object (properties, required; keys come in the
 * order "properties" lists them, optional ones may be skipped, no others),
 * array (items), string, number, integer, boolean, null; "enum" / "const"
 * of JSON literals; "description", "title", "$schema", "default" and
 * "additionalProperties": false are accepted as no-ops. Any other keyword
 * is refused with a 400 naming it. json_object: any JSON object.
 * Whitespace between tokens: at most WS_RUN bytes in a row, so a model
 * cannot stall in it; none before the value or after it.
 *
 * Limits (docs/api.md), each checked while compiling, before anything is
 * sized from it, so no count can wrap: MAX_NODES schema nodes, nesting
 * MAX_DEPTH - 2 levels, MAX_ENUM values per enum, MAX_LITS literals (enum
 * values and property names) in all, MAX_LIT_BYTES bytes of them, MAX_LIT
 * bytes each. A schema over one is refused with a 400 naming it. They also
 * bound what the filter does per step (it scans the candidate literals).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"
#include "tools/coli/server/server_grammar.h"

// ---------------------------------------------------------------------------
// the automaton

static int s_push(gstate *st, int kind, int sub, int node) {
    if (st->depth >= MAX_DEPTH) return 0;
    st->f[st->depth++] = (gframe){(uint8_t)kind, (uint8_t)sub, node, 0, 0};
    return 1;
}

/* The top frame's value is complete: pop it and tell the parent. */
static void s_value_done(gstate *st) {
    st->depth--;
    if (st->depth == 0) {
        st->root_done = 1;
        return;
    }
    gframe *p = &st->f[st->depth - 1];
    if (p->kind == F_OBJ)
        p->sub = p->sub == O_KEY ? O_COLON : O_COMMA_OR_END;
    else if (p->kind == F_ARR)
        p->sub = A_COMMA_OR_END;
}

static int s_is_ws(int b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }

/* Whitespace where the grammar allows it (bounded runs). */
static int s_ws(gstate *st) {
    if (st->ws_run >= WS_RUN) return 0;
    st->ws_run++;
    return 1;
}

static void s_lit_start(gstate *st, int first, int n) {
    s_push(st, F_LIT, 0, -1);
    st->f[st->depth - 1].next = first;
    st->f[st->depth - 1].n = n;
    st->lit_len = 0;
}

/* A value of node starts with byte b (the F_VALUE frame on top is replaced). */
static int s_value_start(const json_grammar *g, gstate *st, int node, int b) {
    const gnode *n = node >= 0 ? &g->nodes[node] : NULL;
    int type = n ? n->type : N_ANY;
    st->depth--; /* the F_VALUE placeholder */
    if (type == N_LITERALS) {
        s_lit_start(st, n->lit0, n->n_lit);
        return json_grammar_feed(g, st, b);
    }
    if (b == '{' && (type == N_ANY || type == N_OBJECT)) return s_push(st, F_OBJ, O_KEY_OR_END, node);
    if (b == '[' && (type == N_ANY || type == N_ARRAY)) return s_push(st, F_ARR, A_VALUE_OR_END, node);
    if (b == '"' && (type == N_ANY || type == N_STRING)) return s_push(st, F_STR, 0, node);
    if ((b == '-' || (b >= '0' && b <= '9')) && (type == N_ANY || type == N_NUMBER || type == N_INTEGER)) {
        s_push(st, F_NUM, 0, node);
        return json_grammar_feed(g, st, b);
    }
    if (type == N_ANY && (b == 't' || b == 'f' || b == 'n')) {
        s_lit_start(st, 0, 3);
        return json_grammar_feed(g, st, b);
    }
    return 0;
}

/* JSON numbers: - ? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?; integers stop before '.'/'e'. */
static int s_num(const json_grammar *g, gstate *st, gframe *f, int b) {
    int digit = b >= '0' && b <= '9', integer = f->node >= 0 && g->nodes[f->node].type == N_INTEGER;
    int frac_ok = !integer;
    switch (f->sub) {
    case 0:
        if (b == '-') {
            f->sub = 1;
            return 1;
        } /* fall through */
    case 1:
        if (b == '0') {
            f->sub = 2;
            return 1;
        }
        if (digit) {
            f->sub = 3;
            return 1;
        }
        return 0;
    case 2:
    case 3:
        if (f->sub == 3 && digit) return 1;
        if (b == '.' && frac_ok) {
            f->sub = 4;
            return 1;
        }
        if ((b == 'e' || b == 'E') && frac_ok) {
            f->sub = 6;
            return 1;
        }
        break;
    case 4:
        if (digit) {
            f->sub = 5;
            return 1;
        }
        return 0;
    case 5:
        if (digit) return 1;
        if (b == 'e' || b == 'E') {
            f->sub = 6;
            return 1;
        }
        break;
    case 6:
        if (b == '+' || b == '-') {
            f->sub = 7;
            return 1;
        } /* fall through */
    case 7:
        if (digit) {
            f->sub = 8;
            return 1;
        }
        return 0;
    case 8:
        if (digit) return 1;
        break;
    }
    if (f->sub == 0 || f->sub == 1 || f->sub == 4 || f->sub == 6 || f->sub == 7) return 0;
    s_value_done(st); /* the number ended before b */
    return json_grammar_feed(g, st, b);
}

static int s_str(gstate *st, int b) {
    if (b < 0) return 0;
    if (st->hex_left) {
        if (!((b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'))) return 0;
        st->hex_left--;
        return 1;
    }
    if (st->escape) {
        st->escape = 0;
        if (b == 'u') {
            st->hex_left = 4;
            return 1;
        }
        return strchr("\"\\/bfnrt", b) != NULL && b != 0;
    }
    if (st->u8_need) {
        if ((b & 0xC0) != 0x80) return 0;
        st->u8_need--;
        return 1;
    }
    if (b == '"') {
        s_value_done(st);
        return 1;
    }
    if (b == '\\') {
        st->escape = 1;
        return 1;
    }
    if (b < 0x20) return 0;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF)
        st->u8_need = 1;
    else if (b >= 0xE0 && b <= 0xEF)
        st->u8_need = 2;
    else if (b >= 0xF0 && b <= 0xF4)
        st->u8_need = 3;
    else
        return 0;
    return 1;
}

/* Matching one of the literals lits[next .. next + n). */
static int s_lit(const json_grammar *g, gstate *st, gframe *f, int b) {
    int exact = -1;
    for (int i = f->next; i < f->next + f->n; i++) {
        const char *l = g->lits[i];
        if (strncmp(l, st->lit, (size_t)st->lit_len) != 0) continue;
        if (b > 0 && l[st->lit_len] == (char)b) { /* never the NUL after a literal */
            st->lit[st->lit_len++] = (char)b;
            return 1;
        }
        if (l[st->lit_len] == '\0') exact = i;
    }
    if (exact < 0) return 0;
    st->depth--;
    gframe *p = st->depth > 0 ? &st->f[st->depth - 1] : NULL;
    if (p && p->kind == F_OBJ && p->sub == O_KEY) { /* a schema key: its value's node comes next */
        const gnode *on = &g->nodes[p->node];
        p->next = exact - on->lit0 + 1;
        p->sub = O_COLON;
    } else {
        st->depth++;
        s_value_done(st);
    }
    return json_grammar_feed(g, st, b);
}

/* Keys an object of node may take next: lits[*first .. *first + return). */
static int s_key_range(const json_grammar *g, const gframe *f, int *first) {
    const gnode *n = &g->nodes[f->node];
    *first = n->lit0 + f->next;
    int k = f->next;
    while (k < n->n_props && !g->props[n->prop0 + k].required) k++;
    return (k < n->n_props ? k + 1 : n->n_props) - f->next;
}

/* Required keys remain, so '}' must wait. */
static int s_required_left(const json_grammar *g, const gframe *f) {
    if (f->node < 0 || g->nodes[f->node].n_props == 0) return 0;
    const gnode *n = &g->nodes[f->node];
    for (int k = f->next; k < n->n_props; k++)
        if (g->props[n->prop0 + k].required) return 1;
    return 0;
}

static int s_obj(const json_grammar *g, gstate *st, gframe *f, int b) {
    int schema_keys = f->node >= 0 && g->nodes[f->node].n_props > 0;
    if (b >= 0 && s_is_ws(b)) return s_ws(st);
    switch (f->sub) {
    case O_KEY_OR_END:
    case O_KEY:
        if (b == '}' && f->sub == O_KEY_OR_END && !s_required_left(g, f)) {
            s_value_done(st);
            return 1;
        }
        if (b != '"') return 0;
        f->sub = O_KEY;
        if (schema_keys) {
            int first, n = s_key_range(g, f, &first);
            if (n <= 0) return 0;
            s_lit_start(st, first, n);
            return json_grammar_feed(g, st, b);
        }
        return s_push(st, F_STR, 0, -1);
    case O_COLON: {
        if (b != ':') return 0;
        f->sub = O_VALUE;
        int child = schema_keys ? g->props[g->nodes[f->node].prop0 + f->next - 1].node : -1;
        return s_push(st, F_VALUE, 0, child);
    }
    case O_COMMA_OR_END:
        if (b == ',') {
            if (schema_keys) {
                int first;
                if (s_key_range(g, f, &first) <= 0) return 0;
            }
            f->sub = O_KEY;
            return 1;
        }
        if (b == '}' && !s_required_left(g, f)) {
            s_value_done(st);
            return 1;
        }
        return 0;
    }
    return 0;
}

static int s_arr(const json_grammar *g, gstate *st, gframe *f, int b) {
    if (b >= 0 && s_is_ws(b)) return s_ws(st);
    int items = f->node >= 0 ? g->nodes[f->node].items : -1;
    if (f->sub == A_COMMA_OR_END || f->sub == A_VALUE_OR_END) {
        if (b == ']') {
            s_value_done(st);
            return 1;
        }
        if (f->sub == A_COMMA_OR_END) {
            if (b != ',') return 0;
            f->sub = A_VALUE;
            return 1;
        }
    }
    if (b < 0) return 0;
    f->sub = A_VALUE;
    return s_push(st, F_VALUE, 0, items) && json_grammar_feed(g, st, b);
}

/* One byte (b = -1: the end of the output). 1 if the grammar allows it. */
int json_grammar_feed(const json_grammar *g, gstate *st, int b) {
    if (st->depth == 0) return b < 0 && st->root_done;
    gframe *f = &st->f[st->depth - 1];
    if (!(b >= 0 && s_is_ws(b))) st->ws_run = 0;
    switch (f->kind) {
    case F_VALUE:
        if (b < 0) return 0;
        if (s_is_ws(b)) return st->depth > 1 && s_ws(st);
        return s_value_start(g, st, f->node, b);
    case F_OBJ: return s_obj(g, st, f, b);
    case F_ARR: return s_arr(g, st, f, b);
    case F_STR: return s_str(st, b);
    case F_NUM: return s_num(g, st, f, b);
    case F_LIT: return s_lit(g, st, f, b);
    }
    return 0;
}

// ---------------------------------------------------------------------------
// the filter

/* A copy of the state for one trial: the frames above depth are dead, and
 * the filter makes one copy per vocabulary token per step. */
static void s_state_copy(gstate *dst, const gstate *src) {
    memcpy(dst, src, offsetof(gstate, f) + (size_t)src->depth * sizeof src->f[0]);
}

/* Which first bytes the current state takes (ok[b]) and the state after each
 * (g->after[b]): computed once per step, not once per token. Most tokens fail
 * on their first byte, and inside a long enum each byte scans every candidate. */
static void s_first_bytes(json_grammar *g, uint8_t ok[256]) {
    for (int b = 0; b < 256; b++) {
        s_state_copy(&g->after[b], &g->st);
        ok[b] = (uint8_t)json_grammar_feed(g, &g->after[b], b);
    }
}

void json_grammar_filter(void *user, float *logits, int n_vocab) {
    json_grammar *g = user;
    gstate end;
    s_state_copy(&end, &g->st);
    int can_end = json_grammar_feed(g, &end, -1);
    uint8_t ok[256];
    if (!can_end) s_first_bytes(g, ok);
    for (int id = 0; id < n_vocab && id < g->n_vocab; id++) {
        const unsigned char *p = (const unsigned char *)g->piece[id];
        if (g->eog[id]) {
            if (!can_end) logits[id] = -INFINITY;
            continue;
        }
        if (can_end || g->piece_len[id] == 0 || !ok[p[0]]) {
            logits[id] = -INFINITY;
            continue;
        }
        gstate st;
        s_state_copy(&st, &g->after[p[0]]);
        for (uint32_t i = 1; i < g->piece_len[id]; i++)
            if (!json_grammar_feed(g, &st, p[i])) {
                logits[id] = -INFINITY;
                break;
            }
    }
}

int json_grammar_accept(json_grammar *g, int32_t id) {
    if (id < 0 || id >= g->n_vocab) return -1;
    const unsigned char *p = (const unsigned char *)g->piece[id];
    for (uint32_t i = 0; i < g->piece_len[id]; i++)
        if (!json_grammar_feed(g, &g->st, p[i])) return -1;
    return 0;
}

// ---------------------------------------------------------------------------
// compiling the schema

typedef struct compile_ctx {
    json_grammar *g;
    char *err;
    size_t cap;
} compile_ctx;

static int s_fail(compile_ctx *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int s_fail(compile_ctx *c, const char *path, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->cap, "response_format: %s (at %s)", msg, path);
    return -400;
}

/* Room for n (checked: 0 < n <= MAX_ENUM or a property count) more
 * literals; their first index, -400 over MAX_LITS, or -500. */
static int s_more_lits(compile_ctx *c, const char *path, int n) {
    json_grammar *g = c->g;
    if (n < 0 || (size_t)g->n_lits + (size_t)n > MAX_LITS + 3) /* + true, false, null */
        return s_fail(c, path, "the schema has more than %d enum values and property names in all (the limit)",
                      MAX_LITS);
    char **t = realloc(g->lits, ((size_t)g->n_lits + (size_t)n) * sizeof *t);
    if (!t) return -500;
    g->lits = t;
    for (int i = 0; i < n; i++) t[g->n_lits + i] = NULL;
    g->n_lits += n;
    return g->n_lits - n;
}

static int s_add_lit(compile_ctx *c, const char *path, int at, const char *text, size_t len) {
    json_grammar *g = c->g;
    if (len > MAX_LIT_BYTES - g->lit_bytes)
        return s_fail(c, path, "the schema's enum values and property names exceed %d bytes in all (the limit)",
                      MAX_LIT_BYTES);
    if (!(g->lits[at] = strndup(text, len))) return -500;
    g->lit_bytes += len;
    return 0;
}

static int s_new_node(compile_ctx *c, const char *path, int type) {
    json_grammar *g = c->g;
    if (g->n_nodes >= MAX_NODES)
        return s_fail(c, path, "the schema has more than %d nodes (properties, items, enums; the limit)", MAX_NODES);
    g->nodes[g->n_nodes] = (gnode){.type = type, .items = -1};
    return g->n_nodes++;
}

static int s_compile(compile_ctx *c, const cJSON *sc, const char *path, int depth);

/* One enum / const value as the JSON text the model must write, into lits[at]. */
static int s_literal(compile_ctx *c, const char *kw, const cJSON *v, int i, int at, const char *path) {
    if (cJSON_IsObject(v) || cJSON_IsArray(v))
        return s_fail(c, path, "%s[%d]: only strings, numbers, booleans and null", kw, i);
    if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) /* 1e400: cJSON would print it as null */
        return s_fail(c, path, "%s[%d]: a number out of range (beyond a double; JSON has no infinity)", kw, i);
    char *text = cJSON_PrintUnformatted(v);
    if (!text) return -500;
    size_t len = strlen(text);
    int rc = len + 1 > MAX_LIT ? s_fail(c, path, "%s[%d]: a value longer than %d bytes", kw, i, MAX_LIT - 1)
                               : s_add_lit(c, path, at, text, len);
    free(text);
    return rc;
}

/* enum / const (kw, for messages): the literals' JSON texts. */
static int s_literals(compile_ctx *c, const char *kw, const cJSON *values, const char *path) {
    int node = s_new_node(c, path, N_LITERALS);
    if (node < 0) return node;
    int n = cJSON_GetArraySize(values);
    if (n < 1) return s_fail(c, path, "%s", "enum: must hold at least one value");
    if (n > MAX_ENUM) return s_fail(c, path, "enum: %d values, at most %d (the limit)", n, MAX_ENUM);
    int at = s_more_lits(c, path, n);
    if (at < 0) return at;
    c->g->nodes[node].lit0 = at;
    c->g->nodes[node].n_lit = n;
    const cJSON *v;
    int i = 0;
    cJSON_ArrayForEach(v, values) {
        int rc = s_literal(c, kw, v, i, at + i, path);
        if (rc) return rc;
        i++;
    }
    return node;
}

static int s_required(compile_ctx *c, const cJSON *req, const cJSON *props, int prop0, const char *path) {
    const cJSON *r;
    if (!req) return 0;
    if (!cJSON_IsArray(req)) return s_fail(c, path, "%s", "required: must be an array of property names");
    if (cJSON_GetArraySize(req) > cJSON_GetArraySize(props)) /* each name is looked up among them */
        return s_fail(c, path, "%s", "required: more names than properties");
    cJSON_ArrayForEach(r, req) {
        int k = 0, found = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, props) {
            if (cJSON_IsString(r) && !strcmp(p->string, r->valuestring)) {
                c->g->props[prop0 + k].required = 1;
                found = 1;
            }
            k++;
        }
        if (!found)
            return s_fail(c, path, "required: '%s' is not in properties", cJSON_IsString(r) ? r->valuestring : "?");
    }
    return 0;
}

static int s_object(compile_ctx *c, const cJSON *sc, const char *path, int depth) {
    int node = s_new_node(c, path, N_OBJECT);
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(sc, "properties"), *p;
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(sc, "required");
    if (node < 0 || !props)
        return req && cJSON_GetArraySize(req) ? s_fail(c, path, "%s", "required: without properties") : node;
    if (!cJSON_IsObject(props)) return s_fail(c, path, "%s", "properties: must be an object");
    int n = cJSON_GetArraySize(props);
    if (n == 0) return node;
    json_grammar *g = c->g;
    int lit0 = s_more_lits(c, path, n); /* bounds n and so n_props_total (<= MAX_LITS) */
    if (lit0 < 0) return lit0;
    gprop *t = realloc(g->props, ((size_t)g->n_props_total + (size_t)n) * sizeof *t);
    if (!t) return -500;
    g->props = t;
    int prop0 = g->n_props_total;
    g->n_props_total += n;
    g->nodes[node].prop0 = prop0;
    g->nodes[node].n_props = n;
    g->nodes[node].lit0 = lit0;
    int k = 0;
    cJSON_ArrayForEach(p, props) {
        char quoted[MAX_LIT + 8], sub[512];
        size_t len = strlen(p->string);
        if (len + 3 > MAX_LIT || strpbrk(p->string, "\"\\") || memchr(p->string, 0, len))
            return s_fail(c, path, "property name '%.60s': too long or needs escaping", p->string);
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)p->string[i] < 0x20)
                return s_fail(c, path, "property name '%.60s': needs escaping", p->string);
        snprintf(quoted, sizeof quoted, "\"%s\"", p->string);
        int rc = s_add_lit(c, path, lit0 + k, quoted, len + 2);
        if (rc) return rc;
        snprintf(sub, sizeof sub, "%s.properties.%s", path, p->string);
        g->props[prop0 + k] = (gprop){-1, 0};
        int child = s_compile(c, p, sub, depth + 1);
        if (child < 0) return child;
        g->props[prop0 + k++].node = child;
    }
    int rc = s_required(c, req, props, prop0, path);
    return rc ? rc : node;
}

/* Keywords that change nothing here, and those that this subset knows. */
static int s_keywords(compile_ctx *c, const cJSON *sc, const char *path) {
    static const char *const ok[] = {
        "type",    "properties",           "required", "items", "enum", "const", "description", "title", "$schema",
        "default", "additionalProperties", NULL};
    const cJSON *k;
    cJSON_ArrayForEach(k, sc) {
        const char *const *o = ok;
        while (*o && strcmp(*o, k->string)) o++;
        if (!*o) return s_fail(c, path, "JSON schema keyword '%s' is not supported", k->string);
    }
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(sc, "additionalProperties");
    if (ap && !cJSON_IsFalse(ap))
        return s_fail(c, path, "%s", "additionalProperties: only false is supported (keys are those of properties)");
    return 0;
}

static int s_compile(compile_ctx *c, const cJSON *sc, const char *path, int depth) {
    if (!cJSON_IsObject(sc)) return s_fail(c, path, "%s", "a schema must be an object");
    if (depth >= MAX_DEPTH - 2)
        return s_fail(c, path, "the schema nests deeper than %d levels (the limit)", MAX_DEPTH - 2);
    int rc = s_keywords(c, sc, path);
    if (rc) return rc;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(sc, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(sc, "const");
    if (en)
        return cJSON_IsArray(en) ? s_literals(c, "enum", en, path) : s_fail(c, path, "%s", "enum: must be an array");
    if (cn) {
        cJSON *one = cJSON_CreateArray();
        if (!one) return -500;
        cJSON_AddItemReferenceToArray(one, (cJSON *)cn);
        rc = s_literals(c, "const", one, path);
        cJSON_Delete(one);
        return rc;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(sc, "type");
    if (!type) return s_new_node(c, path, N_ANY);
    if (!cJSON_IsString(type)) return s_fail(c, path, "%s", "type: only a single type name is supported");
    const char *t = type->valuestring;
    if (!strcmp(t, "object")) return s_object(c, sc, path, depth);
    if (!strcmp(t, "string")) return s_new_node(c, path, N_STRING);
    if (!strcmp(t, "number")) return s_new_node(c, path, N_NUMBER);
    if (!strcmp(t, "integer")) return s_new_node(c, path, N_INTEGER);
    if (!strcmp(t, "boolean") || !strcmp(t, "null")) {
        cJSON *vals = !strcmp(t, "null") ? cJSON_CreateArray() : cJSON_CreateArray();
        if (!vals) return -500;
        if (!strcmp(t, "null"))
            cJSON_AddItemToArray(vals, cJSON_CreateNull());
        else {
            cJSON_AddItemToArray(vals, cJSON_CreateTrue());
            cJSON_AddItemToArray(vals, cJSON_CreateFalse());
        }
        rc = s_literals(c, "enum", vals, path);
        cJSON_Delete(vals);
        return rc;
    }
    if (!strcmp(t, "array")) {
        int node = s_new_node(c, path, N_ARRAY);
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(sc, "items");
        if (node < 0 || !items) return node;
        char sub[512];
        snprintf(sub, sizeof sub, "%s.items", path);
        int child = s_compile(c, items, sub, depth + 1);
        if (child < 0) return child;
        c->g->nodes[node].items = child;
        return node;
    }
    return s_fail(c, path, "type '%s' is not supported", t);
}

// ---------------------------------------------------------------------------
// setup

void json_grammar_free(json_grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_lits; i++) free(g->lits[i]);
    free(g->lits);
    free(g->props);
    free(g->piece);
    free(g->piece_len);
    free(g->eog);
    free(g->after);
    free(g);
}

/* The vocabulary's bytes and end-of-generation flags. */
static int s_vocab(server *s, json_grammar *g) {
    int n = s->info.n_vocab;
    g->n_vocab = n;
    g->piece = calloc((size_t)n, sizeof *g->piece);
    g->piece_len = calloc((size_t)n, sizeof *g->piece_len);
    g->eog = calloc((size_t)n, 1);
    g->after = malloc(256 * sizeof *g->after);
    if (!g->piece || !g->piece_len || !g->eog || !g->after) return -500;
    for (int id = 0; id < n; id++) {
        size_t len = 0;
        if (coli_token_to_bytes(s->model, id, &g->piece[id], &len) != 0) len = 0;
        g->piece_len[id] = (uint32_t)len;
        g->eog[id] = (uint8_t)coli_token_is_eog(s->model, id);
    }
    return 0;
}

/* The schema inside rf, NULL for any object; *bad set when rf is malformed. */
static const cJSON *s_schema_of(const cJSON *rf, const char **bad) {
    const char *type = cJSON_GetObjectItemCaseSensitive(rf, "type")->valuestring;
    *bad = NULL;
    if (!strcmp(type, "json_object")) return cJSON_GetObjectItemCaseSensitive(rf, "schema"); /* llama.cpp's extension */
    if (strcmp(type, "json_schema") != 0) {
        *bad = "type: must be \"text\", \"json_object\" or \"json_schema\"";
        return NULL;
    }
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    const cJSON *schema = cJSON_IsObject(js) ? cJSON_GetObjectItemCaseSensitive(js, "schema") : NULL;
    if (!cJSON_IsObject(schema)) *bad = "json_schema.schema: required (an object)";
    return schema;
}

int json_grammar_new(server *s, const cJSON *rf, json_grammar **out, char *err, size_t err_cap) {
    *out = NULL;
    const char *bad = NULL;
    const cJSON *schema = s_schema_of(rf, &bad);
    if (bad) {
        snprintf(err, err_cap, "response_format.%s", bad);
        return 400;
    }
    json_grammar *g = calloc(1, sizeof *g);
    if (!g) return 500;
    compile_ctx c = {g, err, err_cap};
    int rc = s_more_lits(&c, "$", 3); /* lits[0..3): json_object's true, false, null */
    if (rc >= 0)
        rc = s_add_lit(&c, "$", 0, "true", 4) || s_add_lit(&c, "$", 1, "false", 5) || s_add_lit(&c, "$", 2, "null", 4)
                 ? -500
                 : 0;
    if (rc >= 0) rc = schema ? s_compile(&c, schema, "$", 0) : s_new_node(&c, "$", N_OBJECT);
    if (rc >= 0) {
        g->root = rc;
        rc = s_vocab(s, g);
    }
    if (rc < 0) {
        json_grammar_free(g);
        if (rc == -500) snprintf(err, err_cap, "out of memory for the response_format grammar");
        return -rc;
    }
    g->st.depth = 1;
    g->st.f[0] = (gframe){F_VALUE, 0, g->root, 0, 0};
    *out = g;
    return 0;
}
