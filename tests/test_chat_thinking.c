/*
 * test_chat_thinking.c - the chat templates of the families of issues 23-25
 * (tools/coli/chat/chat_harmony.c, chat_thinking.c, from libcoli-server.a):
 * gpt-oss (harmony, reasoning_effort), GLM-4.5, Qwen3.5, GLM-4.7/GLM-5,
 * DeepSeek V3.2 and V4 (enable_thinking).
 *
 * Every expected prompt is what the family's Jinja template (llama.cpp
 * de3ff815's models/templates/openai-gpt-oss-120b.jinja, GLM-4.6.jinja,
 * Qwen3.5-4B.jinja, GLM-4.7-Flash.jinja, deepseek-ai-DeepSeek-V3.2.jinja,
 * deepseek-ai-DeepSeek-V4.jinja) renders for the same messages with
 * add_generation_prompt, run as transformers and llama.cpp run it
 * (trim_blocks, lstrip_blocks); the comments say which template lines
 * make each piece. Then the request field and flag on a real server.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "colibri.h"
#include "tests/serve_util.h"
#include "tools/coli/chat/chat_template.h"

static char *s_render(chat_family f, const chat_message *m, int n, int thinking, int effort) {
    char *out = NULL, err[256] = "";
    chat_options o = {"<s>", "</s>", NULL, thinking, effort, "2026-12-02"};
    cr_assert_eq(chat_render(f, m, n, &o, &out, err, sizeof err), 0, "%s: %s", chat_family_name(f), err);
    return out;
}

static void s_expect_error(chat_family f, const chat_message *m, int n, int thinking, int effort, const char *says) {
    char *out = NULL, err[256] = "";
    chat_options o = {"<s>", "</s>", NULL, thinking, effort, "2026-12-02"};
    cr_expect_eq(chat_render(f, m, n, &o, &out, err, sizeof err), -1, "%s rendered %s", chat_family_name(f), out);
    cr_expect_null(out);
    cr_expect(strstr(err, says) != NULL, "%s: '%s' lacks '%s'", chat_family_name(f), err, says);
}

/* Fragments of the templates as GGUF files carry them. */
static const char *k_gpt_oss =
    "{{- \"<|start|>system<|message|>\" }}{{- build_system_message() }}{{- \"<|end|>\" }}"
    "{{- \"<|start|>assistant<|channel|>final<|message|>\" + message.content + \"<|end|>\" }}";
static const char *k_glm = "[gMASK]<sop>\n{%- if tools -%}\n<|system|>\n# Tools{%- endif -%}{% for m in messages %}"
                           "{%- if m.role == 'user' -%}<|user|>\n{{ visible_text(m.content) }}{%- elif m.role == "
                           "'assistant' -%}\n<|assistant|>{%- endif -%}{%- endfor -%}";
static const char *k_qwen35 = "{{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking is defined and "
                              "enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- else "
                              "%}\n        {{- '<think>\\n' }}\n    {%- endif %}";
static const char *k_qwen3 =
    "{{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking is defined and "
    "enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}";

Test(chat_thinking, families_detected_and_named) {
    const char *src;
    cr_expect_eq(chat_family_detect(k_gpt_oss, "gpt-oss", &src), CHAT_GPT_OSS);
    cr_expect_eq(chat_family_detect(k_glm, "glm4moe", &src), CHAT_GLM45, "GLM's <|user|> is not OLMo's");
    cr_expect_eq(chat_family_detect(k_qwen35, "qwen35moe", &src), CHAT_QWEN35, "the prompt opens the thought");
    cr_expect_eq(chat_family_detect(k_qwen3, "qwen3moe", &src), CHAT_QWEN3, "Qwen3 only closes an empty one");
    static const chat_family f[] = {CHAT_GPT_OSS, CHAT_GLM45, CHAT_QWEN35};
    static const char *const names[] = {"gpt-oss", "glm4.5", "qwen3.5"};
    for (int i = 0; i < 3; i++) {
        cr_expect_str_eq(chat_family_name(f[i]), names[i]);
        cr_expect_eq(chat_family_from_name(names[i]), f[i]);
        cr_expect(strstr(CHAT_FAMILY_NAMES, names[i]) != NULL);
    }
}

// ---------------------------------------------------------------------------
// gpt-oss

/* build_system_message(): identity, cutoff, date, "Reasoning: " + effort, the channels line */
#define OSS_SYSTEM(effort)                                                                               \
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"             \
    "Knowledge cutoff: 2024-06\nCurrent date: 2026-12-02\n\nReasoning: " effort "\n\n# Valid channels: " \
    "analysis, commentary, final. Channel must be included for every message.<|end|>"

Test(chat_thinking, gpt_oss_layout) {
    const chat_message m[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "2+2?"}};
    char *out = s_render(CHAT_GPT_OSS, m, 4, CHAT_THINKING_DEFAULT, CHAT_EFFORT_DEFAULT);
    /* messages[0] is the developer message ("# Instructions\n\n" + it + "\n\n"); an earlier
     * answer is a final-channel message; add_generation_prompt: "<|start|>assistant" */
    cr_expect_str_eq(out, OSS_SYSTEM("medium") "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
                                               "<|start|>user<|message|>Hi<|end|>"
                                               "<|start|>assistant<|channel|>final<|message|>Hello<|end|>"
                                               "<|start|>user<|message|>2+2?<|end|><|start|>assistant");
    free(out);
    /* no system message, or an empty one: no developer message; a later system message is not rendered */
    const chat_message bare[] = {{"developer", ""}, {"user", "Hi"}, {"system", "late"}};
    static const char *const effort[] = {"medium", "low", "medium", "high"};
    for (int e = CHAT_EFFORT_DEFAULT; e <= CHAT_EFFORT_HIGH; e++) {
        char want[512];
        snprintf(want, sizeof want,
                 "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
                 "Knowledge cutoff: 2024-06\nCurrent date: 2026-12-02\n\nReasoning: %s\n\n# Valid channels: "
                 "analysis, commentary, final. Channel must be included for every message.<|end|>"
                 "<|start|>user<|message|>Hi<|end|><|start|>assistant",
                 effort[e]);
        out = s_render(CHAT_GPT_OSS, bare, 3, CHAT_THINKING_DEFAULT, e);
        cr_expect_str_eq(out, want, "effort %d", e);
        free(out);
        out = s_render(CHAT_GPT_OSS, bare + 1, 1, CHAT_THINKING_DEFAULT, e);
        cr_expect_str_eq(out, want, "effort %d", e);
        free(out);
    }
}

Test(chat_thinking, gpt_oss_date_and_refusals) {
    /* no date given: strftime_now("%Y-%m-%d"), the local date */
    const chat_message m[] = {{"user", "Hi"}};
    char *out = NULL, err[256] = "", today[16], want[64];
    time_t now = time(NULL);
    struct tm tm;
    strftime(today, sizeof today, "%Y-%m-%d", localtime_r(&now, &tm));
    snprintf(want, sizeof want, "Current date: %s\n", today);
    cr_assert_eq(chat_render(CHAT_GPT_OSS, m, 1, &(chat_options){"", "", NULL, CHAT_THINKING_DEFAULT, 0, NULL}, &out,
                             err, sizeof err),
                 0, "%s", err);
    cr_expect(strstr(out, want) != NULL, "%s", out);
    free(out);
    /* the template raises on channel tags in an answer's text */
    const chat_message tags[] = {{"user", "Hi"}, {"assistant", "<|channel|>final<|message|>x"}, {"user", "y"}};
    s_expect_error(CHAT_GPT_OSS, tags, 3, CHAT_THINKING_DEFAULT, 0, "messages[1].content: holds <|channel|> tags");
    /* switches each family has or refuses */
    s_expect_error(CHAT_GPT_OSS, m, 1, 0, 0, "chat_template_kwargs.enable_thinking");
    s_expect_error(CHAT_QWEN3, m, 1, CHAT_THINKING_DEFAULT, CHAT_EFFORT_HIGH, "reasoning_effort: the qwen3");
    s_expect_error(CHAT_MISTRAL, m, 1, CHAT_THINKING_DEFAULT, CHAT_EFFORT_LOW, "reasoning_effort");
    cr_expect_eq(chat_effort_parse("low"), CHAT_EFFORT_LOW);
    cr_expect_eq(chat_effort_parse("high"), CHAT_EFFORT_HIGH);
    cr_expect_eq(chat_effort_parse("none"), -1);
    cr_expect_eq(chat_effort_parse("HIGH"), -1);
    cr_expect_eq(chat_syntax_of(CHAT_GPT_OSS, &(chat_options){0}), CHAT_SYNTAX_HARMONY);
}

/* coli chat keeps a gpt-oss answer's final text for the next turn (the template refuses tags) */
Test(chat_thinking, gpt_oss_answer_kept_as_its_content) {
    char t[] = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary<|message|>Pre"
               "<|end|><|start|>assistant<|channel|>final<|message|>The answer.";
    cr_expect_eq(chat_harmony_keep_content(t, strlen(t)), strlen("PreThe answer."));
    cr_expect_str_eq(t, "PreThe answer.");
    char plain[] = "no channels";
    cr_expect_eq(chat_harmony_keep_content(plain, strlen(plain)), strlen("no channels"));
    cr_expect_str_eq(plain, "no channels");
    const chat_message m[] = {{"user", "Hi"}, {"assistant", t}, {"user", "More"}};
    char *out = s_render(CHAT_GPT_OSS, m, 3, CHAT_THINKING_DEFAULT, 0);
    cr_expect(strstr(out, "<|start|>assistant<|channel|>final<|message|>PreThe answer.<|end|>") != NULL, "%s", out);
    free(out);
}

// ---------------------------------------------------------------------------
// GLM-4.5 / 4.6

Test(chat_thinking, glm45_layout) {
    const chat_message m[] = {{"system", "S"},
                              {"user", "Hi"},
                              {"assistant", "<think>\nold thought\n</think>\n\n Hello \n"},
                              {"user", "More"}};
    /* "[gMASK]<sop>"; "<|system|>\n" + S; "<|user|>\n" + U; an answer before the last user
     * message: "<|assistant|>" + "\n<think></think>" + "\n" + content.strip(); then "<|assistant|>" */
    char *out = s_render(CHAT_GLM45, m, 4, CHAT_THINKING_DEFAULT, 0);
    cr_expect_str_eq(out, "[gMASK]<sop><|system|>\nS<|user|>\nHi<|assistant|>\n<think></think>\nHello<|user|>\nMore"
                          "<|assistant|>");
    free(out);
    out = s_render(CHAT_GLM45, m, 4, 1, 0);
    cr_expect_str_eq(out,
                     "[gMASK]<sop><|system|>\nS<|user|>\nHi<|assistant|>\n<think></think>\nHello<|user|>\nMore"
                     "<|assistant|>",
                     "enable_thinking true renders as unset");
    free(out);
    /* enable_thinking false: '/nothink' after each user text, "\n<think></think>" after the prompt */
    out = s_render(CHAT_GLM45, m, 4, 0, 0);
    cr_expect_str_eq(out, "[gMASK]<sop><|system|>\nS<|user|>\nHi/nothink<|assistant|>\n<think></think>\nHello"
                          "<|user|>\nMore/nothink<|assistant|>\n<think></think>");
    free(out);
    /* an answer after the last user message keeps its thought ("\n<think>" + R.strip() + "</think>");
     * an empty answer adds no "\n"; a user text ending in /nothink gets no second one */
    const chat_message after[] = {{"user", "Q /nothink"}, {"assistant", "<think> R1 </think>A1"}, {"assistant", "  "}};
    out = s_render(CHAT_GLM45, after, 3, 0, 0);
    cr_expect_str_eq(out, "[gMASK]<sop><|user|>\nQ /nothink<|assistant|>\n<think>R1</think>\nA1<|assistant|>\n"
                          "<think></think><|assistant|>\n<think></think>");
    free(out);
    cr_expect_eq(chat_syntax_of(CHAT_GLM45, &(chat_options){.thinking = 1}), CHAT_SYNTAX_THINK);
}

// ---------------------------------------------------------------------------
// Qwen3.5 / 3.6

Test(chat_thinking, qwen35_layout) {
    const chat_message m[] = {{"system", " Be brief. "}, {"user", " Hi "}, {"assistant", "Hello\n"}, {"user", "2+2?"}};
    /* every text |trim; an answer before the last user query: '<|im_start|>assistant\n' + content;
     * add_generation_prompt opens the thought: '<think>\n' */
    char *out = s_render(CHAT_QWEN35, m, 4, CHAT_THINKING_DEFAULT, 0);
    cr_expect_str_eq(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                          "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
                          "<|im_start|>assistant\n<think>\n");
    free(out);
    /* enable_thinking false: an empty thought closes the prompt */
    out = s_render(CHAT_QWEN35, m + 1, 1, 0, 0);
    cr_expect_str_eq(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(out);
    /* after the last query an answer keeps its thought, '<think>\n' + R|trim + '\n</think>\n\n' + content
     * (empty when it had none); before it the thought is dropped */
    const chat_message turns[] = {{"user", "Q1"},
                                  {"assistant", "<think>old</think>A1"},
                                  {"user", "Q2"},
                                  {"assistant", "<think>\n R \n</think>\n\nA2 "},
                                  {"assistant", "A3"}};
    out = s_render(CHAT_QWEN35, turns, 5, CHAT_THINKING_DEFAULT, 0);
    cr_expect_str_eq(out,
                     "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
                     "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</think>\n\nA2<|im_end|>\n"
                     "<|im_start|>assistant\n<think>\n\n</think>\n\nA3<|im_end|>\n<|im_start|>assistant\n<think>\n");
    free(out);
    /* the template raises: a system message after the first, no user query */
    const chat_message late[] = {{"user", "a"}, {"system", "b"}};
    s_expect_error(CHAT_QWEN35, late, 2, CHAT_THINKING_DEFAULT, 0, "messages[1]: a system message must come first");
    const chat_message none[] = {{"system", "a"}};
    s_expect_error(CHAT_QWEN35, none, 1, CHAT_THINKING_DEFAULT, 0, "no user message");
    /* the prompt opened the thought, unless thinking is off */
    cr_expect_eq(chat_syntax_of(CHAT_QWEN35, &(chat_options){.thinking = CHAT_THINKING_DEFAULT}),
                 CHAT_SYNTAX_THINK_OPEN);
    cr_expect_eq(chat_syntax_of(CHAT_QWEN35, &(chat_options){.thinking = 0}), CHAT_SYNTAX_THINK);
}

// ---------------------------------------------------------------------------
// GLM-4.7 / GLM-5, DeepSeek V3.2 and V4

#define BAR "\xEF\xBD\x9C"
#define DSU "<" BAR "User" BAR ">"
#define DSA "<" BAR "Assistant" BAR ">"
#define DSE "<" BAR "end\xE2\x96\x81of\xE2\x96\x81sentence" BAR ">"

Test(chat_thinking, glm47_deepseek32_deepseek4_detected) {
    const char *ds32 = "{%- set dsml_token = '" BAR "DSML" BAR "' -%}{{- '" DSU "' + (message['content'] or '') -}}"
                       "{{- '" DSA "' -}}{{- '" DSE "' -}}";
    const char *ds4 =
        "{%- if not drop_thinking is defined -%}{%- set drop_thinking = true -%}{%- endif -%}"
        "{%- set dsml_token = '" BAR "DSML" BAR "' -%}{{- '" DSU "' -}}{{- '" DSA "' -}}{{- '" DSE "' -}}";
    const char *glm47 = "[gMASK]<sop>{%- if ((clear_thinking is defined and not clear_thinking) or loop.index0 > "
                        "ns.last_user_index) and reasoning_content -%}<|user|><|assistant|>";
    cr_expect_eq(chat_family_detect(ds32, "deepseek32", NULL), CHAT_DEEPSEEK32, "not V3's");
    cr_expect_eq(chat_family_detect(ds4, "deepseek4", NULL), CHAT_DEEPSEEK4);
    cr_expect_eq(chat_family_detect(glm47, "glm-dsa", NULL), CHAT_GLM47, "not GLM-4.5's");
    cr_expect_str_eq(chat_family_name(CHAT_DEEPSEEK32), "deepseek3.2");
    cr_expect_eq(chat_family_from_name("deepseek4"), CHAT_DEEPSEEK4);
    cr_expect_eq(chat_family_from_name("glm4.7"), CHAT_GLM47);
}

Test(chat_thinking, glm47_layout) {
    const chat_message m[] = {
        {"system", "S"}, {"user", "Hi"}, {"assistant", "<think>old</think> Hello "}, {"user", "More"}};
    /* no newlines; an earlier answer: '</think>' + content.strip(); add_generation_prompt: '<think>' */
    char *out = s_render(CHAT_GLM47, m, 4, CHAT_THINKING_DEFAULT, 0);
    cr_expect_str_eq(out,
                     "[gMASK]<sop><|system|>S<|user|>Hi<|assistant|></think>Hello<|user|>More<|assistant|><think>");
    free(out);
    out = s_render(CHAT_GLM47, m, 4, 0, 0);
    cr_expect_str_eq(out,
                     "[gMASK]<sop><|system|>S<|user|>Hi<|assistant|></think>Hello<|user|>More<|assistant|></think>");
    free(out);
    /* after the last user message the thought stays: '<think>' + R.strip() + '</think>' */
    const chat_message after[] = {{"user", "Q"}, {"assistant", "<think>\n R1 \n</think>\nA1"}};
    out = s_render(CHAT_GLM47, after, 2, CHAT_THINKING_DEFAULT, 0);
    cr_expect_str_eq(out, "[gMASK]<sop><|user|>Q<|assistant|><think>R1</think>A1<|assistant|><think>");
    free(out);
    cr_expect_eq(chat_syntax_of(CHAT_GLM47, &(chat_options){.thinking = CHAT_THINKING_DEFAULT}),
                 CHAT_SYNTAX_THINK_OPEN);
    cr_expect_eq(chat_syntax_of(CHAT_GLM47, &(chat_options){.thinking = 0}), CHAT_SYNTAX_THINK);
}

Test(chat_thinking, deepseek32_layout) {
    const chat_message m[] = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "U2"}};
    /* thinking defaults to false: answers get '</think>', the prompt '<think></think>' */
    char *out = s_render(CHAT_DEEPSEEK32, m, 4, CHAT_THINKING_DEFAULT, 0);
    cr_expect_str_eq(out, "<s>S" DSU "U" DSA "</think>A" DSE DSU "U2" DSA "<think></think>");
    free(out);
    out = s_render(CHAT_DEEPSEEK32, m, 4, 1, 0);
    cr_expect_str_eq(out, "<s>S" DSU "U" DSA "</think>A" DSE DSU "U2" DSA "<think>");
    free(out);
    /* thinking: an answer after the last user text opens with '<think></think>'; an answer
     * right after another has no marker; ending with an answer: no generation prompt */
    const chat_message after[] = {{"user", "U"}, {"assistant", "A"}, {"assistant", "B"}};
    out = s_render(CHAT_DEEPSEEK32, after, 3, 1, 0);
    cr_expect_str_eq(out, "<s>" DSU "U" DSA "<think></think>A" DSE "B" DSE);
    free(out);
    cr_expect_eq(chat_syntax_of(CHAT_DEEPSEEK32, &(chat_options){.thinking = CHAT_THINKING_DEFAULT}),
                 CHAT_SYNTAX_THINK);
    cr_expect_eq(chat_syntax_of(CHAT_DEEPSEEK32, &(chat_options){.thinking = 1}), CHAT_SYNTAX_THINK_OPEN);
}

Test(chat_thinking, deepseek4_layout) {
    const chat_message m[] = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "U2"}};
    char *out = s_render(CHAT_DEEPSEEK4, m, 4, CHAT_THINKING_DEFAULT, 0);
    cr_expect_str_eq(out, "<s>S" DSU "U" DSA "</think>A" DSE DSU "U2" DSA "</think>");
    free(out);
    out = s_render(CHAT_DEEPSEEK4, m, 4, 1, 0);
    cr_expect_str_eq(out, "<s>S" DSU "U" DSA "</think>A" DSE DSU "U2" DSA "<think>");
    free(out);
    /* user texts in a row share one marker; thinking keeps a thought only after the last user text */
    const chat_message turns[] = {{"user", "a"}, {"user", "b"}, {"assistant", "B"}, {"assistant", "C"}};
    out = s_render(CHAT_DEEPSEEK4, turns, 4, 1, 0);
    cr_expect_str_eq(out, "<s>" DSU "a\n\nb" DSA "<think></think>B" DSE DSA "<think></think>C" DSE DSA "<think>");
    free(out);
    /* chat_template_kwargs {"thinking": true}: the switch these templates read first */
    cJSON *kw = cJSON_Parse("{\"thinking\":true}");
    int thinking = CHAT_THINKING_DEFAULT, effort = CHAT_EFFORT_DEFAULT;
    char err[256] = "";
    cr_expect_eq(chat_kwargs_parse(kw, &thinking, &effort, err, sizeof err), 0, "%s", err);
    cr_expect_eq(thinking, 1);
    cJSON_Delete(kw);
}

// ---------------------------------------------------------------------------
// Kimi K3

#define KO(tag) "<|open|>" tag "<|sep|>"
#define KC(tag) "<|close|>" tag "<|sep|>"
#define KEND KC("message") "<|end_of_msg|>"
/* internal_system_message('thinking-effort', ...) for the default thinking_effort, max */
#define K_EFFORT                                                                                              \
    KO("message role=\"system\" type=\"thinking-effort\"")                                                    \
    "`thinking_effort` guides on how much to think in your thinking channel (not including the response "     \
    "channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with " \
    "`thinking_effort=max`." KEND

Test(chat_thinking, kimi_k3_layout) {
    const char *tmpl = "{%- macro open_tag(tag, attrs=[]) -%}{{- '<|open|>' + tag -}}{{- '<|sep|>' -}}{%- endmacro "
                       "-%}{{- '<|close|>' + tag + '<|sep|>' -}}{{- '<|end_of_msg|>' -}}";
    cr_expect_eq(chat_family_detect(tmpl, "kimi-k3", NULL), CHAT_KIMI_K3);
    cr_expect_eq(chat_family_from_name("kimi-k3"), CHAT_KIMI_K3);
    const chat_message m[] = {{"system", "S"}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "More"}};
    /* thinking (the default): the effort note first; every answer has an (empty) think section;
     * the generation prompt opens the assistant message and its think section */
    char *out = s_render(CHAT_KIMI_K3, m, 4, CHAT_THINKING_DEFAULT, 0);
    cr_expect_str_eq(out,
                     K_EFFORT KO("message role=\"system\"") "S" KEND KO("message role=\"user\"") "Hi" KEND KO(
                         "message role=\"assistant\"") KO("think") KC("think") KO("response") "Hello" KC("response")
                         KEND KO("message role=\"user\"") "More" KEND KO("message role=\"assistant\"") KO("think"));
    free(out);
    out = s_render(CHAT_KIMI_K3, m, 4, 0, 0);
    cr_expect_str_eq(out,
                     KO("message role=\"system\"") "S" KEND KO("message role=\"user\"") "Hi" KEND KO(
                         "message role=\"assistant\"") KO("response") "Hello" KC("response")
                         KEND KO("message role=\"user\"") "More" KEND KO("message role=\"assistant\"") KO("response"));
    free(out);
    cr_expect_eq(chat_syntax_of(CHAT_KIMI_K3, &(chat_options){.thinking = CHAT_THINKING_DEFAULT}),
                 CHAT_SYNTAX_KIMI_THINK);
    cr_expect_eq(chat_syntax_of(CHAT_KIMI_K3, &(chat_options){.thinking = 0}), CHAT_SYNTAX_KIMI);
}

// ---------------------------------------------------------------------------
// on a server: reasoning_effort as a request field, in chat_template_kwargs and as a flag

/* Prompt tokens of m rendered by gpt-oss at effort e over the test model's vocabulary. */
static int s_oss_tokens(const char *model, const chat_message *m, int n, int e) {
    coli_model_params mp;
    coli_model_default_params(&mp);
    mp.vocab_only = 1;
    coli_model *v = NULL;
    cr_assert_eq(coli_model_load(model, &mp, &v), 0, "%s", coli_last_error());
    char *out = NULL, err[256] = "";
    cr_assert_eq(chat_render(CHAT_GPT_OSS, m, n, &(chat_options){"", "", NULL, CHAT_THINKING_DEFAULT, e, NULL}, &out,
                             err, sizeof err),
                 0, "%s", err);
    int32_t ids[1024];
    int n_ids = 0;
    cr_assert_eq(coli_tokenize(v, out, strlen(out), 0, 1, ids, 1024, &n_ids), 0, "%s", coli_last_error());
    free(out);
    coli_model_free(&v);
    return n_ids;
}

Test(chat_thinking, serve_takes_reasoning_effort) {
    char model[4096], want[4][64];
    su_model(model, sizeof model);
    const chat_message msgs[] = {{"user", "Hi"}};
    for (int e = CHAT_EFFORT_LOW; e <= CHAT_EFFORT_HIGH; e++)
        snprintf(want[e], sizeof want[e], "\"prompt_tokens\":%d,", s_oss_tokens(model, msgs, 1, e));
    cr_assert_str_neq(want[CHAT_EFFORT_LOW], want[CHAT_EFFORT_MEDIUM], "the efforts tokenize apart");
    const char *extra[] = {"--chat-template", "gpt-oss", "--reasoning-effort", "low", NULL};
    serve_proc p = su_start(model, extra);
    static const struct {
        const char *field;
        int effort;
    } cases[] = {{"", CHAT_EFFORT_LOW}, /* the flag */
                 {",\"reasoning_effort\":\"medium\"", CHAT_EFFORT_MEDIUM},
                 {",\"chat_template_kwargs\":{\"reasoning_effort\":\"medium\"}", CHAT_EFFORT_MEDIUM},
                 {",\"chat_template_kwargs\":{\"reasoning_effort\":\"low\"},\"reasoning_effort\":\"medium\"",
                  CHAT_EFFORT_MEDIUM}}; /* the field wins, as llama.cpp's */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":1,\"temperature\":0%s}",
                 cases[i].field);
        http_resp r = su_post(p.port, "/v1/chat/completions", body);
        cr_expect_eq(r.status, 200, "%s", r.raw);
        cr_expect(r.body && strstr(r.body, want[cases[i].effort]), "case %zu: expected %s in %s", i,
                  want[cases[i].effort], r.raw);
        su_free(&r);
    }
    http_resp r = su_post(p.port, "/v1/chat/completions",
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":1,"
                          "\"reasoning_effort\":\"extreme\"}");
    cr_expect_eq(r.status, 400, "%s", r.raw);
    cr_expect(r.body && strstr(r.body, "\"param\":\"reasoning_effort\""), "%s", r.raw);
    su_free(&r);
    r = su_get(p.port, "/props");
    cr_expect(r.body && strstr(r.body, "\"reasoning_effort\":\"low\"") && strstr(r.body, "\"gpt-oss\""), "%s", r.raw);
    su_free(&r);
    cr_expect_eq(su_stop(&p), 0);
    p = su_start(model, NULL); /* the model's own template (mistral) has no effort */
    r = su_post(
        p.port, "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":1,\"reasoning_effort\":\"low\"}");
    cr_expect_eq(r.status, 400, "%s", r.raw);
    cr_expect(r.body && strstr(r.body, "\"param\":\"reasoning_effort\"") && strstr(r.body, "no reasoning effort"), "%s",
              r.raw);
    su_free(&r);
    cr_expect_eq(su_stop(&p), 0);
    /* a bad flag value: exit 2 naming it */
    char coli[4096];
    cli_build_path(coli, sizeof coli, "bin/coli");
    char *argv[] = {coli, "serve", "-m", model, "--reasoning-effort", "max", NULL};
    cli_result c = cli_run(argv);
    cr_expect_eq(c.status, 2, "%s", c.err);
    cr_expect(strstr(c.err, "--reasoning-effort") && strstr(c.err, "low, medium, high"), "%s", c.err);
    cli_result_free(&c);
}

/* coli run --chat-template gpt-oss --reasoning-effort: the prompt rendered at that effort;
 * the flag without --chat-template, on a template without it, or with a bad level: refused */
Test(chat_thinking, run_takes_reasoning_effort) {
    char coli[4096], model[4096], want[64];
    cli_build_path(coli, sizeof coli, "bin/coli");
    su_model(model, sizeof model);
    const chat_message msg[] = {{"user", "Hello there"}};
    snprintf(want, sizeof want, "prompt %d tokens", s_oss_tokens(model, msg, 1, CHAT_EFFORT_HIGH));
    char *ok[] = {coli,   "run", "-m", model, "-p", "Hello there", "--chat-template", "gpt-oss", "--reasoning-effort",
                  "high", "-n",  "1",  NULL};
    cli_result r = cli_run(ok);
    cr_expect_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.err, want) != NULL, "expected '%s' in %s", want, r.err);
    cli_result_free(&r);
    static const struct {
        const char *tmpl, *level, *says;
    } bad[] = {{NULL, "high", "only with --chat-template"},
               {"qwen3", "high", "the qwen3 chat template has no reasoning effort"},
               {"gpt-oss", "extreme", "unknown effort 'extreme'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {coli,
                        "run",
                        "-m",
                        model,
                        "-p",
                        "x",
                        "--reasoning-effort",
                        (char *)bad[i].level,
                        "--chat-template",
                        (char *)bad[i].tmpl,
                        NULL};
        if (!bad[i].tmpl) argv[8] = NULL;
        r = cli_run(argv);
        cr_expect_neq(r.status, 0, "case %zu", i);
        cr_expect(strstr(r.err, bad[i].says) != NULL, "case %zu: %s", i, r.err);
        cli_result_free(&r);
    }
}
