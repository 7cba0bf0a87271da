/*
 * tokenizer_regex.c - the regular expressions of the BPE pre-tokenizers,
 * matched as llama.cpp matches the ones it has no hand-written splitter for
 * (unicode_regex_split: std::regex, ECMAScript grammar, leftmost match,
 * alternatives in order, greedy quantifiers, by backtracking).
 *
 * What the text looks like to the regex follows llama.cpp too:
 *  - a regex that names a Unicode category (\p{L}, \p{N}, \p{P}, \p{M},
 *    \p{S}) is matched against the "collapsed" text: ASCII code points stay,
 *    other white space becomes U+000B, any other code point becomes one
 *    marker per category (0xD1 N, 0xD2 L, 0xD3 P, 0xD4 M, 0xD5 S, 0xD0 the
 *    rest), and \p{X} means its marker plus the ASCII characters llama.cpp
 *    lists for X (\p{S} there is $+<=>^`|~: '~' joined it in llama.cpp
 *    de3ff815, the reference of issues 23-25). Such a regex must be
 *    ASCII (llama.cpp refuses the mix).
 *  - any other regex sees the code points themselves, except that non-ASCII
 *    white space becomes U+000B (std::wregex's \s knows only ASCII).
 * \s is [\t\n\v\f\r ] on that text in both cases.
 *
 * The subset: literals, escapes (\r \n \t \f \v \xHH \uHHHH, \s \S \d \D
 * \w \W, \p{..}, escaped punctuation), classes [...] with ranges and
 * negation, (...) (?:...) (?=...) (?!...), '|', '$' (end of the piece), and
 * the greedy quantifiers ? * + {n} {n,} {n,m} on a single character; a
 * group takes '?' only. Anything else is refused when the regex is compiled.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tokenizer/tokenizer_impl.h"
#include "core/tokenizer/unicode.h"

#define RE_FAIL SIZE_MAX
#define RE_INF UINT32_MAX
#define RE_MAX_ALTS 64 /* alternatives of one group */
#define VT 0x0Bu       /* what non-ASCII white space becomes */

typedef struct re_range {
    uint32_t lo, hi;
} re_range;

typedef struct re_class {
    uint32_t first, n; /* ranges[first .. first + n) */
    int negate;
} re_class;

typedef enum re_kind {
    RE_ATOM,      /* one character of a class, repeated min..max times */
    RE_GROUP,     /* alternatives, min 0 or 1 times, max 1 */
    RE_AHEAD,     /* (?=...) */
    RE_NOT_AHEAD, /* (?!...) */
    RE_END,       /* $ */
} re_kind;

typedef struct re_node {
    re_kind kind;
    uint32_t min, max;
    int32_t next;        /* the node that follows, -1 at the end of a sequence */
    uint32_t cls;        /* RE_ATOM */
    uint32_t alt, n_alt; /* groups: alts[alt .. alt + n_alt) are the first nodes */
} re_node;

struct tok_regex {
    int collapsed; /* a \p{..} was used: match the collapsed text */
    int non_ascii; /* the pattern has a non-ASCII code point */
    re_node *nodes;
    re_class *classes;
    re_range *ranges;
    int32_t *alts; /* first node of each alternative, -1 for an empty one */
    size_t n_nodes, n_classes, n_ranges, n_alts;
    size_t cap_nodes, cap_classes, cap_ranges, cap_alts;
    uint32_t root; /* a RE_GROUP holding the top-level alternatives */
};

// ---------------------------------------------------------------------------
// building

typedef struct re_parser {
    tok_regex *re;
    const uint32_t *p; /* the pattern's code points */
    size_t n, i;
    const char *src; /* for messages */
} re_parser;

static int s_error(const re_parser *ps, const char *what) {
    return coli_fail(COLI_EINVAL, "pre-tokenizer regex '%.80s': %s at character %zu", ps->src, what, ps->i);
}

/* Room for need elements in *arr (see tok_grow); *arr stays valid on failure. */
static int s_reserve(void *arr, size_t *cap, size_t need, size_t elem, const char *what) {
    void *grown = tok_grow(*(void **)arr, cap, need, elem, 16, what);
    if (!grown) return COLI_ENOMEM;
    *(void **)arr = grown;
    return 0;
}

static int s_add_range(re_parser *ps, uint32_t lo, uint32_t hi) {
    tok_regex *re = ps->re;
    if (s_reserve(&re->ranges, &re->cap_ranges, re->n_ranges + 1, sizeof(*re->ranges), "regex ranges") < 0)
        return COLI_ENOMEM;
    re->ranges[re->n_ranges++] = (re_range){lo, hi};
    re->classes[re->n_classes - 1].n++;
    return 0;
}

/* Start a class; its ranges are added next. Returns its index or < 0. */
static int64_t s_new_class(re_parser *ps, int negate) {
    tok_regex *re = ps->re;
    if (s_reserve(&re->classes, &re->cap_classes, re->n_classes + 1, sizeof(*re->classes), "regex classes") < 0)
        return COLI_ENOMEM;
    re->classes[re->n_classes] = (re_class){(uint32_t)re->n_ranges, 0, negate};
    return (int64_t)re->n_classes++;
}

static int64_t s_new_node(re_parser *ps, re_kind kind) {
    tok_regex *re = ps->re;
    if (s_reserve(&re->nodes, &re->cap_nodes, re->n_nodes + 1, sizeof(*re->nodes), "regex nodes") < 0)
        return COLI_ENOMEM;
    re->nodes[re->n_nodes] = (re_node){.kind = kind, .min = 1, .max = 1, .next = -1};
    return (int64_t)re->n_nodes++;
}

/* \p{X} in the collapsed text: the category's marker and llama.cpp's ASCII members of X. */
static int s_add_category(re_parser *ps, char cat) {
    static const struct {
        char cat;
        uint32_t marker;
        const char *ascii;
    } k_cat[] = {
        {'N', 0xD1, "09"}, {'L', 0xD2, "AZaz"},           {'P', 0xD3, "!#%*,/:;?@[]__{{}}"},
        {'M', 0xD4, ""},   {'S', 0xD5, "$$++<>^^``||~~"},
    };
    for (size_t k = 0; k < sizeof(k_cat) / sizeof(k_cat[0]); k++) {
        if (k_cat[k].cat != cat) continue;
        int rc = s_add_range(ps, k_cat[k].marker, k_cat[k].marker);
        for (const char *r = k_cat[k].ascii; rc == 0 && *r; r += 2)
            rc = s_add_range(ps, (unsigned char)r[0], (unsigned char)r[1]);
        ps->re->collapsed = 1;
        return rc;
    }
    return s_error(ps, "unsupported Unicode category");
}

static int s_hex_digits(re_parser *ps, int count, uint32_t *out) {
    *out = 0;
    for (int k = 0; k < count; k++, ps->i++) {
        uint32_t c = ps->i < ps->n ? ps->p[ps->i] : 0;
        int v = c >= '0' && c <= '9'   ? (int)(c - '0')
                : c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10)
                : c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10)
                                       : -1;
        if (v < 0) return s_error(ps, "bad hexadecimal escape");
        *out = *out * 16 + (uint32_t)v;
    }
    return 0;
}

/* An escape after '\' (ps->i at the letter). A class escape (\s \d \w \p{X},
 * and \S \D \W when negated_ok) adds its ranges to the current class and sets
 * *is_class; a character escape sets *cpt. */
static int s_escape(re_parser *ps, int negated_ok, int *is_class, int *negated, uint32_t *cpt) {
    if (ps->i >= ps->n) return s_error(ps, "'\\' at the end");
    uint32_t c = ps->p[ps->i++];
    *is_class = 0;
    *negated = c == 'S' || c == 'D' || c == 'W';
    switch (c) {
    case 'r': *cpt = '\r'; return 0;
    case 'n': *cpt = '\n'; return 0;
    case 't': *cpt = '\t'; return 0;
    case 'f': *cpt = '\f'; return 0;
    case 'v': *cpt = '\v'; return 0;
    case 'x': return s_hex_digits(ps, 2, cpt);
    case 'u': return s_hex_digits(ps, 4, cpt);
    case 's':
    case 'S':
    case 'd':
    case 'D':
    case 'w':
    case 'W':
        if (*negated && !negated_ok) return s_error(ps, "negated class escape inside [...]");
        *is_class = 1;
        if (c == 's' || c == 'S') return s_add_range(ps, '\t', '\r') < 0 ? COLI_ENOMEM : s_add_range(ps, ' ', ' ');
        if (c == 'd' || c == 'D') return s_add_range(ps, '0', '9');
        if (s_add_range(ps, '0', '9') < 0 || s_add_range(ps, 'A', 'Z') < 0 || s_add_range(ps, '_', '_') < 0)
            return COLI_ENOMEM;
        return s_add_range(ps, 'a', 'z');
    case 'p':
        if (ps->i + 2 >= ps->n || ps->p[ps->i] != '{' || ps->p[ps->i + 2] != '}')
            return s_error(ps, "unsupported \\p form (one-letter categories only)");
        *is_class = 1;
        ps->i += 3;
        return s_add_category(ps, (char)ps->p[ps->i - 2]);
    default:
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return s_error(ps, "unsupported escape");
        *cpt = c; // an escaped punctuation character stands for itself
        return 0;
    }
}

/* One member of a bracket class: a character (*cpt) or a class escape. */
static int s_class_member(re_parser *ps, int *is_class, uint32_t *cpt) {
    int negated;
    *is_class = 0;
    if (ps->p[ps->i] != '\\') {
        *cpt = ps->p[ps->i++];
        return 0;
    }
    ps->i++;
    return s_escape(ps, 0, is_class, &negated, cpt);
}

/* [...] with ps->i just past '['; returns the class index or < 0. */
static int64_t s_bracket(re_parser *ps) {
    int negate = ps->i < ps->n && ps->p[ps->i] == '^';
    ps->i += (size_t)negate;
    int64_t cls = s_new_class(ps, negate);
    if (cls < 0) return cls;
    while (ps->i < ps->n && ps->p[ps->i] != ']') {
        int is_class, rc;
        uint32_t lo, hi;
        if ((rc = s_class_member(ps, &is_class, &lo)) < 0) return rc;
        if (is_class) continue;
        hi = lo;
        if (ps->i + 1 < ps->n && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']') {
            ps->i++;
            if ((rc = s_class_member(ps, &is_class, &hi)) < 0) return rc;
            if (is_class || hi < lo) return s_error(ps, "bad range in [...]");
        }
        if (s_add_range(ps, lo, hi) < 0) return COLI_ENOMEM;
    }
    if (ps->i >= ps->n) return s_error(ps, "'[' without ']'");
    ps->i++;
    return cls;
}

static int s_parse_alternatives(re_parser *ps, int64_t group);

/* (...) (?:...) (?=...) (?!...) with ps->i just past '('; returns the node. */
static int64_t s_group(re_parser *ps) {
    re_kind kind = RE_GROUP;
    if (ps->i + 1 < ps->n && ps->p[ps->i] == '?') {
        uint32_t c = ps->p[ps->i + 1];
        if (c != ':' && c != '=' && c != '!') return s_error(ps, "unsupported group");
        kind = c == '=' ? RE_AHEAD : c == '!' ? RE_NOT_AHEAD : RE_GROUP;
        ps->i += 2;
    }
    int64_t node = s_new_node(ps, kind);
    int rc = node < 0 ? (int)node : s_parse_alternatives(ps, node);
    if (rc < 0) return rc;
    if (ps->i >= ps->n || ps->p[ps->i] != ')') return s_error(ps, "'(' without ')'");
    ps->i++;
    return node;
}

/* One atom (a character, a class, a group, '$'); returns its node. */
static int64_t s_atom(re_parser *ps) {
    uint32_t c = ps->p[ps->i++];
    if (c == '(') return s_group(ps);
    if (c == '$') return s_new_node(ps, RE_END);
    if (c == '^' || c == '.' || c == '*' || c == '+' || c == '?' || c == '{' || c == ')')
        return s_error(ps, "unsupported or misplaced operator");
    int64_t node = s_new_node(ps, RE_ATOM), cls;
    if (node < 0) return node;
    if (c == '[') {
        cls = s_bracket(ps);
    } else if ((cls = s_new_class(ps, 0)) >= 0) {
        int is_class = 0, negated = 0, rc = 0;
        if (c == '\\') rc = s_escape(ps, 1, &is_class, &negated, &c);
        if (rc == 0 && !is_class) rc = s_add_range(ps, c, c);
        ps->re->classes[cls].negate = negated;
        cls = rc < 0 ? rc : cls;
    }
    if (cls < 0) return cls;
    ps->re->nodes[node].cls = (uint32_t)cls;
    return node;
}

static int s_number(re_parser *ps, uint32_t *out) {
    size_t start = ps->i;
    *out = 0;
    while (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9' && *out < 100000)
        *out = *out * 10 + (ps->p[ps->i++] - '0');
    return ps->i > start ? 0 : s_error(ps, "bad {n,m} quantifier");
}

/* A quantifier after node, if one follows. */
static int s_quantifier(re_parser *ps, int64_t node) {
    uint32_t min = 1, max = 1, c = ps->i < ps->n ? ps->p[ps->i] : 0;
    int rc = 0;
    if (c == '?' || c == '*' || c == '+') {
        min = c == '+';
        max = c == '?' ? 1 : RE_INF;
        ps->i++;
    } else if (c == '{') {
        ps->i++;
        if ((rc = s_number(ps, &min)) < 0) return rc;
        max = min;
        if (ps->i < ps->n && ps->p[ps->i] == ',') {
            ps->i++;
            max = RE_INF;
            if (ps->i < ps->n && ps->p[ps->i] != '}' && (rc = s_number(ps, &max)) < 0) return rc;
        }
        if (ps->i >= ps->n || ps->p[ps->i] != '}' || max < min) return s_error(ps, "bad {n,m} quantifier");
        ps->i++;
    } else {
        return 0;
    }
    re_node *nd = &ps->re->nodes[node];
    if (ps->i < ps->n && ps->p[ps->i] == '?') return s_error(ps, "lazy quantifiers are not supported");
    if (nd->kind != RE_ATOM && !(nd->kind == RE_GROUP && max == 1)) return s_error(ps, "only '?' may follow a group");
    nd->min = min;
    nd->max = max;
    return 0;
}

/* A sequence of quantified atoms up to '|', ')' or the end; *first is its
 * first node (-1 when empty). */
static int s_sequence(re_parser *ps, int32_t *first) {
    int64_t last = -1;
    *first = -1;
    while (ps->i < ps->n && ps->p[ps->i] != '|' && ps->p[ps->i] != ')') {
        int64_t node = s_atom(ps);
        int rc = node < 0 ? (int)node : s_quantifier(ps, node);
        if (rc < 0) return rc;
        if (last >= 0)
            ps->re->nodes[last].next = (int32_t)node;
        else
            *first = (int32_t)node;
        last = node;
    }
    return 0;
}

/* a|b|... up to ')' or the end, as the alternatives of group. */
static int s_parse_alternatives(re_parser *ps, int64_t group) {
    int32_t firsts[RE_MAX_ALTS];
    uint32_t n = 0;
    for (;;) {
        if (n == RE_MAX_ALTS) return s_error(ps, "too many alternatives");
        int rc = s_sequence(ps, &firsts[n++]);
        if (rc < 0) return rc;
        if (ps->i >= ps->n || ps->p[ps->i] != '|') break;
        ps->i++;
    }
    tok_regex *re = ps->re;
    if (s_reserve(&re->alts, &re->cap_alts, re->n_alts + n, sizeof(int32_t), "regex alternatives") < 0)
        return COLI_ENOMEM;
    memcpy(re->alts + re->n_alts, firsts, n * sizeof(int32_t));
    re->nodes[group].alt = (uint32_t)re->n_alts;
    re->nodes[group].n_alt = n;
    re->n_alts += n;
    return 0;
}

int tok_regex_compile(const char *pattern, tok_regex **out) {
    *out = NULL;
    size_t len = strlen(pattern), n = 0;
    uint32_t *cpts = malloc((len ? len : 1) * sizeof(uint32_t));
    tok_regex *re = calloc(1, sizeof(*re));
    if (!cpts || !re) {
        free(cpts);
        free(re);
        return coli_fail(COLI_ENOMEM, "tokenizer: out of memory compiling a regex");
    }
    for (size_t off = 0; off < len;) {
        cpts[n] = coli_utf8_decode(pattern, len, &off);
        re->non_ascii |= cpts[n++] >= 128;
    }
    re_parser ps = {re, cpts, n, 0, pattern};
    int64_t root = s_new_node(&ps, RE_GROUP);
    int rc = root < 0 ? (int)root : s_parse_alternatives(&ps, root);
    if (rc == 0 && ps.i < n) rc = s_error(&ps, "unbalanced ')'");
    if (rc == 0 && re->collapsed && re->non_ascii)
        rc = s_error(&ps, "a Unicode category and non-ASCII characters together");
    free(cpts);
    if (rc < 0) {
        tok_regex_free(&re);
        return rc;
    }
    re->root = (uint32_t)root;
    *out = re;
    return 0;
}

void tok_regex_free(tok_regex **re_p) {
    if (!re_p || !*re_p) return;
    tok_regex *re = *re_p;
    free(re->nodes);
    free(re->classes);
    free(re->ranges);
    free(re->alts);
    free(re);
    *re_p = NULL;
}

// ---------------------------------------------------------------------------
// matching

typedef struct re_match {
    const tok_regex *re;
    const uint32_t *text; /* transformed code points */
    size_t end;           /* end of the piece being split */
} re_match;

/* What follows when a sequence ends: the node after the enclosing group. */
typedef struct re_cont {
    int32_t node;
    const struct re_cont *up;
} re_cont;

static int s_class_has(const tok_regex *re, const re_class *cls, uint32_t c) {
    int in = 0;
    for (uint32_t k = 0; k < cls->n && !in; k++)
        in = c >= re->ranges[cls->first + k].lo && c <= re->ranges[cls->first + k].hi;
    return in != cls->negate;
}

static size_t s_match(const re_match *m, int32_t node, size_t pos, const re_cont *k);

/* Try the alternatives of a group in order; each continues with k. */
static size_t s_match_alts(const re_match *m, const re_node *g, size_t pos, const re_cont *k) {
    for (uint32_t a = 0; a < g->n_alt; a++) {
        size_t end = s_match(m, m->re->alts[g->alt + a], pos, k);
        if (end != RE_FAIL) return end;
    }
    return RE_FAIL;
}

/* Match from node at pos, then k; returns the end of the whole match or
 * RE_FAIL. A repeated atom takes as many characters as it can, then gives
 * them back one by one (greedy backtracking). */
static size_t s_match(const re_match *m, int32_t node, size_t pos, const re_cont *k) {
    if (node < 0) return k ? s_match(m, k->node, pos, k->up) : pos;
    const re_node *nd = &m->re->nodes[node];
    switch (nd->kind) {
    case RE_ATOM: {
        const re_class *cls = &m->re->classes[nd->cls];
        size_t n = 0;
        while (n < nd->max && pos + n < m->end && s_class_has(m->re, cls, m->text[pos + n])) n++;
        for (; n + 1 > nd->min; n--) {
            size_t end = s_match(m, nd->next, pos + n, k);
            if (end != RE_FAIL || n == 0) return end;
        }
        return RE_FAIL;
    }
    case RE_GROUP: {
        re_cont after = {nd->next, k};
        size_t end = s_match_alts(m, nd, pos, &after);
        return end != RE_FAIL || nd->min > 0 ? end : s_match(m, nd->next, pos, k);
    }
    case RE_AHEAD:
    case RE_NOT_AHEAD: {
        int found = s_match_alts(m, nd, pos, NULL) != RE_FAIL;
        return found == (nd->kind == RE_AHEAD) ? s_match(m, nd->next, pos, k) : RE_FAIL;
    }
    case RE_END: return pos == m->end ? s_match(m, nd->next, pos, k) : RE_FAIL;
    }
    return RE_FAIL;
}

/* The text as the regex sees it (see the top of the file). */
static uint32_t s_unit(const tok_regex *re, uint32_t cpt) {
    if (cpt < 128) return cpt;
    unsigned f = coli_cpt_flags(cpt);
    if (f & COLI_CPT_SPACE) return VT;
    if (!re->collapsed) return cpt;
    return f & COLI_CPT_NUMBER   ? 0xD1
           : f & COLI_CPT_LETTER ? 0xD2
           : f & COLI_CPT_PUNCT  ? 0xD3
           : f & COLI_CPT_MARK   ? 0xD4
           : f & COLI_CPT_SYMBOL ? 0xD5
                                 : 0xD0;
}

/* Split [start, end): the matches and the stretches between them become pieces. */
static int s_split_piece(const re_match *m, size_t start, tok_pieces *out) {
    const re_node *root = &m->re->nodes[m->re->root];
    size_t from = start;
    for (size_t pos = start; pos < m->end;) {
        size_t end = s_match_alts(m, root, pos, NULL);
        if (end == RE_FAIL || end == pos) { // no (or an empty) match here: look further
            pos++;
            continue;
        }
        int rc = tok_pieces_push(out, pos - from);
        if (rc < 0 || (rc = tok_pieces_push(out, end - pos)) < 0) return rc;
        from = pos = end;
    }
    return tok_pieces_push(out, m->end - from);
}

int tok_regex_split(const tok_regex *re, const uint32_t *cpts, size_t n, const tok_pieces *in, tok_pieces *out) {
    uint32_t *units = malloc((n ? n : 1) * sizeof(uint32_t));
    if (!units) return coli_fail(COLI_ENOMEM, "tokenizer: out of memory for %zu code points", n);
    for (size_t i = 0; i < n; i++) units[i] = s_unit(re, cpts[i]);
    re_match m = {re, units, 0};
    int rc = 0;
    size_t start = 0;
    for (size_t k = 0; k < in->n && rc == 0; k++) {
        m.end = start + in->len[k];
        rc = s_split_piece(&m, start, out);
        start = m.end;
    }
    free(units);
    return rc;
}
