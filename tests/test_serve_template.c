/*
 * test_serve_template.c - chat templates of coli serve / coli chat
 * (tools/coli/server/server_template.c, compiled in here): family detection from
 * tokenizer.chat_template and the architecture, the exact text each family
 * renders, and the errors for conversations a template cannot express.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tools/coli/server/server_template.c"

/* Fragments of the reference Jinja templates, as found in GGUF files. */
static const char *k_mixtral_tmpl =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}";
static const char *k_qwen_tmpl =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a "
    "helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
static const char *k_olmo_tmpl =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '\\n' }}{% endif %}{% endfor %}";

Test(serve_template, family_from_template_then_architecture) {
    const char *src;
    cr_expect_eq(chat_family_detect(k_mixtral_tmpl, "qwen2moe", &src), CHAT_MISTRAL);
    cr_expect_str_eq(src, "tokenizer.chat_template");
    cr_expect_eq(chat_family_detect(k_qwen_tmpl, "llama", &src), CHAT_CHATML);
    cr_expect_eq(chat_family_detect(k_olmo_tmpl, "llama", &src), CHAT_OLMO);
    cr_expect_eq(chat_family_detect("{{ messages | tojson }}", "llama", &src), CHAT_UNKNOWN, "a template present but unknown stays unknown");
    cr_expect_str_eq(src, "tokenizer.chat_template");
    cr_expect_eq(chat_family_detect(NULL, "llama", &src), CHAT_MISTRAL);
    cr_expect_str_eq(src, "architecture");
    cr_expect_eq(chat_family_detect("", "olmoe", &src), CHAT_OLMO);
    cr_expect_eq(chat_family_detect(NULL, "qwen2moe", &src), CHAT_CHATML);
    cr_expect_eq(chat_family_detect(NULL, "gpt2", &src), CHAT_UNKNOWN);
    cr_expect_str_eq(src, "none");
    cr_expect_eq(chat_family_detect(NULL, NULL, NULL), CHAT_UNKNOWN);
    cr_expect_str_eq(chat_template_default_system(k_qwen_tmpl), "You are a helpful assistant.");
    cr_expect_null(chat_template_default_system(k_mixtral_tmpl));
    cr_expect_null(chat_template_default_system(NULL));
}

static char *s_render(chat_family f, const chat_message *m, int n, const char *default_system) {
    char *out = NULL, err[256] = "";
    int rc = chat_render(f, m, n, "<s>", "</s>", default_system, &out, err, sizeof err);
    cr_assert_eq(rc, 0, "render failed: %s", err);
    return out;
}

Test(serve_template, mistral_layout) {
    const chat_message m[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye?"}};
    char *out = s_render(CHAT_MISTRAL, m, 4, NULL);
    cr_expect_str_eq(out, "<s>[INST] Be brief.\n\nHi [/INST]Hello</s>[INST] Bye? [/INST]");
    free(out);
    out = s_render(CHAT_MISTRAL, m + 1, 1, NULL);
    cr_expect_str_eq(out, "<s>[INST] Hi [/INST]");
    free(out);
    /* a final assistant message is a prefix the model continues: no EOS after it */
    out = s_render(CHAT_MISTRAL, m + 1, 2, NULL);
    cr_expect_str_eq(out, "<s>[INST] Hi [/INST]Hello");
    free(out);
}

Test(serve_template, chatml_layout) {
    const chat_message m[] = {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "More"}};
    char *out = s_render(CHAT_CHATML, m, 3, NULL);
    cr_expect_str_eq(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
                          "<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    out = s_render(CHAT_CHATML, m, 1, "You are a helpful assistant.");
    cr_expect_str_eq(out, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                          "<|im_start|>assistant\n");
    free(out);
    const chat_message dev[] = {{"developer", "Rules"}, {"user", "Hi"}};
    out = s_render(CHAT_CHATML, dev, 2, "You are a helpful assistant.");
    cr_expect_str_eq(out, "<|im_start|>system\nRules<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
                     "a developer message is the system message, and replaces the default");
    free(out);
}

Test(serve_template, olmo_layout) {
    const chat_message m[] = {{"system", "S"}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "More"}};
    char *out = s_render(CHAT_OLMO, m, 4, NULL);
    cr_expect_str_eq(out, "<s><|system|>\nS\n<|user|>\nHi\n<|assistant|>\nHello</s>\n<|user|>\nMore\n<|assistant|>\n");
    free(out);
}

Test(serve_template, conversations_a_template_cannot_express) {
    char *out = NULL, err[256];
    const chat_message bad_role[] = {{"tool", "x"}};
    cr_expect_eq(chat_render(CHAT_CHATML, bad_role, 1, "", "", NULL, &out, err, sizeof err), -1);
    cr_expect(strstr(err, "messages[0].role: 'tool'") != NULL, "%s", err);
    const chat_message twice[] = {{"user", "a"}, {"user", "b"}};
    cr_expect_eq(chat_render(CHAT_MISTRAL, twice, 2, "<s>", "</s>", NULL, &out, err, sizeof err), -1);
    cr_expect(strstr(err, "messages[1]") && strstr(err, "alternating"), "%s", err);
    const chat_message late_system[] = {{"user", "a"}, {"system", "b"}};
    cr_expect_eq(chat_render(CHAT_MISTRAL, late_system, 2, "<s>", "</s>", NULL, &out, err, sizeof err), -1);
    cr_expect(strstr(err, "messages[1]: a system message must come first") != NULL, "%s", err);
    const chat_message only_system[] = {{"system", "a"}};
    cr_expect_eq(chat_render(CHAT_MISTRAL, only_system, 1, "<s>", "</s>", NULL, &out, err, sizeof err), -1);
    cr_expect(strstr(err, "no user message") != NULL, "%s", err);
    const chat_message ok[] = {{"user", "a"}};
    cr_expect_eq(chat_render(CHAT_UNKNOWN, ok, 1, "", "", NULL, &out, err, sizeof err), -1);
    cr_expect(strstr(err, "not one colibri knows") != NULL, "%s", err);
    cr_expect_eq(chat_render(CHAT_OLMO, ok, 0, "", "", NULL, &out, err, sizeof err), -1);
    cr_expect(strstr(err, "empty") != NULL, "%s", err);
    const chat_message null_content[] = {{"user", NULL}};
    cr_expect_eq(chat_render(CHAT_OLMO, null_content, 1, "", "", NULL, &out, err, sizeof err), -1);
    cr_expect_null(out);
}
