// client_test.mjs BASE_URL API_KEY - drive `coli serve` with the official openai
// npm client, unchanged: completions and chat, plain and streamed, usage,
// seeds, logprobs, penalties, json_schema, and the client's own error type
// for a bad request and for a field the server does not honour. Exit 0 when every
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

// logprobs, as the client types them
const lp = await client.chat.completions.create({ model: modelId, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 });
const content = lp.choices[0].logprobs?.content ?? [];
check(content.length === lp.usage.completion_tokens, 'chat logprobs: one entry per token', lp.choices[0].logprobs);
check(content.every(e => e.logprob <= 0 && e.top_logprobs.length === 2 && Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-6),
      'chat logprobs: greedy picks the top entry', content);
check(Buffer.from(content.flatMap(e => e.bytes)).toString('utf8') === lp.choices[0].message.content, 'chat logprobs: bytes make the answer', content);
const clp = await client.completions.create({ model: modelId, prompt: 'Once upon a time', max_tokens: 5, seed: 1, logprobs: 3 });
check(clp.choices[0].logprobs?.tokens?.length === 5 && clp.choices[0].logprobs.top_logprobs.length === 5, 'completion logprobs shape', clp.choices[0].logprobs);

// penalties and min_p: same seed, same settings, same text
const pen = { model: modelId, prompt: 'Once upon a time', max_tokens: 12, seed: 5, temperature: 0.9, presence_penalty: 0.6, frequency_penalty: 0.4, min_p: 0.05 };
const p1 = await client.completions.create(pen), p2 = await client.completions.create(pen);
check(p1.choices[0].text === p2.choices[0].text, 'penalties: same seed, same text', [p1.choices[0].text, p2.choices[0].text]);

// json_schema: what the model says parses and fits
const schema = { type: 'object', properties: { color: { enum: ['red', 'blue'] }, ok: { type: 'boolean' } }, required: ['color', 'ok'], additionalProperties: false };
let parsed = 0;
for (let seed = 1; seed <= 3; seed++) {
  const js = await client.chat.completions.create({ model: modelId, messages, max_tokens: 100, seed,
    response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } } });
  if (js.choices[0].finish_reason !== 'stop') continue;
  const v = JSON.parse(js.choices[0].message.content);
  check(['red', 'blue'].includes(v.color) && typeof v.ok === 'boolean', 'json_schema answer fits', v);
  parsed++;
}
check(parsed >= 1, 'json_schema answers finish', parsed);

// logit_bias: +100 makes a token the only greedy choice; a bias out of range is refused, naming it
{
  const forced = await client.completions.create({ model: modelId, prompt: 'x', max_tokens: 2, temperature: 0, logit_bias: { '50': 100 } });
  const root = baseURL.replace(/\/v1\/?$/, '');
  const detok = await fetch(`${root}/detokenize`, { method: 'POST', headers: { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ tokens: [50] }) });
  const { content: piece } = await detok.json();
  check(forced.choices[0].text === piece + piece, 'logit_bias +100 forces the token', { text: forced.choices[0].text, piece });
}
try {
  await client.completions.create({ model: modelId, prompt: 'x', max_tokens: 2, logit_bias: { '50': 500 } });
  check(false, 'logit_bias 500 is refused');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && (e.param === 'logit_bias' || e.error?.param === 'logit_bias'), 'logit_bias out of range refused with its name', e.error);
}
// a field the server does not honour is refused, naming it
try {
  await client.completions.create({ model: modelId, prompt: 'x', max_tokens: 2, suffix: 'tail' });
  check(false, 'suffix is refused');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && (e.param === 'suffix' || e.error?.param === 'suffix'), 'suffix refused with its name', e.error);
}

console.log(failures ? `${failures} checks failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
