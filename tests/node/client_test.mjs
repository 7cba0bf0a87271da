// client_test.mjs BASE_URL API_KEY - drive `coli serve` with the official openai
// npm client, unchanged: completions and chat, plain and streamed, usage,
// seeds, and the client's own error type for a bad request. Exit 0 when every
// check passes; each failure prints one line naming the check.
import OpenAI from 'openai';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: apiKey || 'unused', maxRetries: 0, timeout: 60000 });
let failures = 0;

function check(cond, what, detail) {
  if (!cond) {
    failures++;
    console.log(`FAIL ${what}${detail === undefined ? '' : ': ' + JSON.stringify(detail)}`);
  } else {
    console.log(`ok   ${what}`);
  }
}

const models = await client.models.list();
const modelId = models.data[0]?.id;
check(typeof modelId === 'string' && modelId.length > 0, 'models.list gives the model', models.data);

// completions, plain
const c = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 10, seed: 42, temperature: 0.9 });
check(c.object === 'text_completion', 'completion object', c.object);
check(typeof c.choices[0].text === 'string', 'completion text', c.choices[0]);
check(c.usage.completion_tokens === 10 && c.usage.total_tokens === c.usage.prompt_tokens + 10, 'completion usage', c.usage);
check(c.choices[0].finish_reason === 'length', 'completion finish_reason', c.choices[0].finish_reason);

// completions, streamed: same seed, same text
const cs = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 10, seed: 42, temperature: 0.9, stream: true, stream_options: { include_usage: true } });
let streamed = '', usage = null, finish = null;
for await (const chunk of cs) {
  if (chunk.choices.length) {
    streamed += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  if (chunk.usage) usage = chunk.usage;
}
check(streamed === c.choices[0].text, 'streamed completion equals the plain one', { streamed, plain: c.choices[0].text });
check(usage && usage.completion_tokens === 10, 'streamed usage chunk', usage);
check(finish === 'length', 'streamed finish_reason', finish);

// chat, plain
const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }];
const ch = await client.chat.completions.create({ model: modelId, messages, max_tokens: 8, seed: 9 });
check(ch.object === 'chat.completion', 'chat object', ch.object);
check(ch.choices[0].message.role === 'assistant' && typeof ch.choices[0].message.content === 'string', 'chat message', ch.choices[0].message);
check(['stop', 'length'].includes(ch.choices[0].finish_reason), 'chat finish_reason', ch.choices[0].finish_reason);
check(ch.usage.completion_tokens >= 1 && ch.usage.completion_tokens <= 8, 'chat usage', ch.usage);

// chat, streamed
const chs = await client.chat.completions.create({ model: modelId, messages, max_tokens: 8, seed: 9, stream: true });
let chatStreamed = '', role = null;
for await (const chunk of chs) {
  const d = chunk.choices[0]?.delta;
  if (d?.role) role = d.role;
  if (d?.content) chatStreamed += d.content;
}
check(role === 'assistant', 'streamed chat role', role);
check(chatStreamed === ch.choices[0].message.content, 'streamed chat equals the plain one', { chatStreamed, plain: ch.choices[0].message.content });

// the streaming helper of the client (chat.completions.stream) works too
const runner = client.chat.completions.stream({ model: modelId, messages, max_tokens: 8, seed: 9 });
const final = await runner.finalChatCompletion();
check(final.choices[0].message.content === ch.choices[0].message.content, 'chat.completions.stream helper', final.choices[0].message);

// a bad request surfaces as the client's BadRequestError with the param
try {
  await client.completions.create({ model: modelId, prompt: 'x', max_tokens: 10, temperature: 7 });
  check(false, 'bad temperature is refused');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400, 'bad temperature gives BadRequestError', { status: e.status, name: e.constructor.name });
  check(e.param === 'temperature' || e.error?.param === 'temperature', 'error names the param', e.error);
}

console.log(failures ? `${failures} checks failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
