/*
 * fuzz_openai.c - libFuzzer target for the OpenAI request parser
 * (tools/coli/server/server_openai.c, openai_parse): the bytes a client
 * sends as the body of /v1/completions or /v1/chat/completions. The first
 * byte picks the endpoint and the chat template family; the rest is the
 * body. An accepted request is freed again (LeakSanitizer sees any leak);
 * a refused one must name what is wrong (a non-empty message).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static server s;
    s.model_id = "fuzz";
    s.info.n_vocab = 1000;
    s.info.chat_template = data[0] & 0x80 ? "{% for m in messages %}<|im_start|>..." : NULL;
    s.family = (chat_family)((data[0] >> 1) % (CHAT_LLAMA3 + 1));
    s.bos_text = "<s>";
    s.eos_text = "</s>";
    int chat = data[0] & 1;
    gen_request r;
    char err[512] = "";
    const char *param = NULL;
    int rc = openai_parse(&s, (const char *)data + 1, size - 1, chat, &r, err, sizeof err, &param);
    if (rc == 0) {
        if (chat && !r.prompt) __builtin_trap(); /* a chat request renders to a prompt */
        gen_request_free(&r);
    } else if (!err[0]) {
        __builtin_trap(); /* every refusal says why */
    }
    return 0;
}
