/*
 * test_server_utf8.c - the server's UTF-8 repair (tools/coli/server/server_utf8.c):
 * utf8_lossy (logprobs' token text, /tokenize pieces) and utf8_sanitize (answer
 * text, with an incomplete tail held for the next token). The expected bytes
 * are Python 3's bytes.decode("utf-8", "replace"), which substitutes maximal
 * subparts as Unicode 3.9 describes; NUL -> U+FFFD is the server's own rule.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"

typedef struct lossy_case {
    const char *in, *want;
    size_t n;
} lossy_case;

#define FFFD "\xEF\xBF\xBD"

Test(server_utf8, lossy_matches_pythons_replace_decoder) {
    static const lossy_case cases[] = {
        {"ab\xE2\x82\xAC", "ab\xE2\x82\xAC", 5},
        {"\xE2\x82", FFFD, 2},                        /* incomplete tail: one subpart */
        {"\xC0\xAF", FFFD FFFD, 2},                   /* overlong lead */
        {"\xED\xA0\x80", FFFD FFFD FFFD, 3},          /* surrogate */
        {"\xF0\x9F\x98x", FFFD "x", 4},               /* cut 4-byte sequence */
        {"\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD, 4}, /* above U+10FFFF */
        {"\xFF\xE2\x82\xACz", FFFD "\xE2\x82\xACz", 5},
        {"a\0b", "a" FFFD "b", 3}, /* NUL: the server's rule */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = utf8_lossy(cases[i].in, cases[i].n);
        cr_assert_not_null(got);
        cr_expect_str_eq(got, cases[i].want, "case %zu", i);
        free(got);
    }
}

Test(server_utf8, sanitize_holds_an_incomplete_tail) {
    char out[64];
    size_t hold = 9;
    size_t n = utf8_sanitize("ab\xF0\x9F", 4, out, &hold);
    cr_expect_eq(n, 2);
    cr_expect_eq(hold, 2, "the two bytes of a 4-byte character wait for the next token");
    cr_expect(memcmp(out, "ab", 2) == 0);
    n = utf8_sanitize("\xF0\x9F\x98\x80!", 5, out, &hold);
    cr_expect_eq(n, 5);
    cr_expect_eq(hold, 0);
    cr_expect(memcmp(out, "\xF0\x9F\x98\x80!", 5) == 0);
}
