/*
 * fuzz_template.c - libFuzzer target for the chat template renderer
 * (tools/coli/chat/chat_template.c): chat_render of a conversation the
 * input spells (role and content strings separated by NUL bytes, roles as
 * given or folded onto the known ones) in every family, and chat template
 * family detection of the input as a GGUF's tokenizer.chat_template. A
 * rendering succeeds with a string or fails with a reason. (Content is not
 * required verbatim in the output: templates trim and split it, as their
 * Jinja originals do.)
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/chat/chat_template.h"

#define MAX_MSG 16

static volatile unsigned s_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *text = malloc(size + 1); /* strings cut at NULs */
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    text[size] = 0;
    static const char *roles[] = {"system", "user", "assistant", "developer", "tool"};
    chat_message msgs[MAX_MSG];
    int n = 0;
    for (char *p = text; p < text + size - 1 && n < MAX_MSG;) {
        char *role = p;
        p += strlen(p) + 1;
        if (p >= text + size) break;
        char *content = p;
        p += strlen(p) + 1;
        msgs[n].role = data[0] & 0x80 ? role : roles[(unsigned char)role[0] % 5];
        msgs[n].content = content;
        n++;
    }
    const char *source = NULL;
    (void)chat_family_detect(text, data[0] & 0x40 ? "qwen3" : "llama", &source);
    (void)chat_template_default_system(text);
    for (int f = 0; f <= CHAT_LLAMA3; f++) {
        char *out = NULL, err[256] = "";
        int rc = chat_render(
            (chat_family)f, msgs, n,
            &(chat_options){"<s>", "</s>", data[0] & 1 ? "You are helpful." : NULL, (int)((data[0] >> 1) % 3) - 1},
            &out, err, sizeof err);
        if (rc == 0) {
            if (!out) __builtin_trap();
            s_sink += (unsigned)strlen(out);
        } else if (!err[0]) {
            __builtin_trap();
        }
        free(out);
    }
    free(text);
    return 0;
}
