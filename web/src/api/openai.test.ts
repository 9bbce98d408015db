import { describe, expect, it } from 'vitest';
import { listModels, OpenAiClient } from './openai';
import type { ApiError, EndInfo, GenerationHandlers, GenerationRequest } from './types';

const REQUEST: GenerationRequest = { messages: [{ role: 'user', content: 'hi' }], params: { max_tokens: 20, seed: 1 }, model: 'm' };

interface Call {
  url: string;
  init: RequestInit;
}

/** A fetch that answers from a script and records what it was asked. */
function fakeFetch(respond: (call: Call) => Response | Promise<Response>): { fetch: typeof fetch; calls: Call[] } {
  const calls: Call[] = [];
  const impl = async (input: RequestInfo | URL, init?: RequestInit) => {
    const call = { url: String(input), init: init ?? {} };
    calls.push(call);
    const signal = init?.signal;
    if (signal?.aborted) throw new DOMException('aborted', 'AbortError');
    return respond(call);
  };
  return { fetch: impl as typeof fetch, calls };
}

function streamOf(chunks: string[], { close = true } = {}): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      if (close) controller.close();
    },
  });
}

function sse(objects: unknown[], done = true): string[] {
  return [...objects.map((o) => `data: ${JSON.stringify(o)}\n\n`), ...(done ? ['data: [DONE]\n\n'] : [])];
}

function run(client: OpenAiClient, request = REQUEST) {
  let text = '';
  let handle: ReturnType<OpenAiClient['generate']> | undefined;
  const result = new Promise<{ kind: string; end?: EndInfo; error?: ApiError; reason?: string; text: string }>((resolve) => {
    const handlers: GenerationHandlers = {
      onDelta: (delta) => {
        text += delta;
      },
      onEnd: (end) => resolve({ kind: 'end', end, text }),
      onError: (error) => resolve({ kind: 'error', error, text }),
      onInterrupted: (reason) => resolve({ kind: 'interrupted', reason, text }),
    };
    handle = client.generate(request, handlers);
  });
  return { result, cancel: () => handle?.cancel() };
}

const chunk = (content: string, finish: string | null = null) => ({ object: 'chat.completion.chunk', model: 'm', choices: [{ index: 0, delta: { content }, finish_reason: finish }] });

describe('OpenAiClient, streamed (SSE)', () => {
  it('posts a streamed chat completion with usage and the bearer key', async () => {
    const { fetch, calls } = fakeFetch(() => new Response(streamOf(sse([chunk('Hel'), chunk('lo'), chunk('', 'stop'), { choices: [], usage: { prompt_tokens: 4, completion_tokens: 2 } }]))));
    const client = new OpenAiClient({ baseUrl: 'http://h', apiKey: 'k1', stream: true, fetch });
    const outcome = await run(client).result;
    expect(outcome).toEqual({ kind: 'end', end: { finishReason: 'stop', usage: { prompt_tokens: 4, completion_tokens: 2 } }, text: 'Hello' });
    expect(calls[0]?.url).toBe('http://h/v1/chat/completions');
    expect(calls[0]?.init.method).toBe('POST');
    expect(new Headers(calls[0]?.init.headers).get('authorization')).toBe('Bearer k1');
    expect(JSON.parse(String(calls[0]?.init.body))).toEqual({
      model: 'm',
      messages: REQUEST.messages,
      max_tokens: 20,
      seed: 1,
      stream: true,
      stream_options: { include_usage: true },
      resumable: true,
    });
  });

  it('takes the stream token of a resumable stream and numbers its deltas by event id', async () => {
    const body = ': prefill 512/900\n\nid: 0\ndata: {"choices":[{"delta":{"role":"assistant"}}]}\n\nid: 1\ndata: {"choices":[{"delta":{"content":"A"}}]}\n\nid: 3\ndata: {"choices":[{"delta":{"content":"BC"}}]}\n\nid: 4\ndata: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n';
    const { fetch } = fakeFetch(() => new Response(streamOf([body]), { headers: { 'X-Stream-Token': 'tok-1' } }));
    const seen: string[] = [];
    const ended = new Promise<void>((resolve) => {
      new OpenAiClient({ baseUrl: 'http://h', stream: true, fetch }).generate(REQUEST, {
        onStart: (info) => seen.push(`start:${info.stream ?? '-'}`),
        onProgress: (done, total) => seen.push(`prefill:${done}/${total}`),
        onDelta: (text, meta) => seen.push(`${text}@${meta?.seq ?? '-'}`),
        onEnd: () => resolve(),
        onError: () => resolve(),
        onInterrupted: () => resolve(),
      });
    });
    await ended;
    expect(seen).toEqual(['start:tok-1', 'prefill:512/900', 'start:-', 'A@0', 'BC@2']);
  });

  it('resumes with GET /v1/streams/TOKEN after the last event it has, and says when the server forgot it', async () => {
    const { fetch, calls } = fakeFetch((call) =>
      call.url.endsWith('/gone') ? new Response('{"error":{"code":"stream_not_found","message":"no"}}', { status: 404 }) : new Response(streamOf(['id: 6\ndata: {"choices":[{"delta":{"content":"!"}}]}\n\ndata: [DONE]\n\n'])),
    );
    const client = new OpenAiClient({ baseUrl: 'http://h', apiKey: 'k', stream: true, fetch });
    const outcome = (stream: string) =>
      new Promise<string>((resolve) => {
        let text = '';
        client.resume({ stream, seq: 4 }, {
          onDelta: (t, meta) => (text += `${t}@${meta?.seq ?? '-'}`),
          onEnd: () => resolve(`end ${text}`),
          onError: (e) => resolve(`error ${e.code}`),
          onInterrupted: (reason, info) => resolve(`interrupted ${info?.unresumable === true} ${reason.slice(0, 40)}`),
        });
      });
    expect(await outcome('tok-2')).toBe('end !@5');
    expect(calls[0]?.url).toBe('http://h/v1/streams/tok-2');
    expect(calls[0]?.init.method).toBe('GET');
    const headers = new Headers(calls[0]?.init.headers);
    expect(headers.get('last-event-id')).toBe('5');
    expect(headers.get('authorization')).toBe('Bearer k');
    expect(await outcome('gone')).toBe('interrupted true The server no longer has this answer (it');
  });

  it('sends no Authorization header without a key', async () => {
    const { fetch, calls } = fakeFetch(() => new Response(streamOf(sse([chunk('x')]))));
    await run(new OpenAiClient({ baseUrl: '', stream: true, fetch })).result;
    expect(new Headers(calls[0]?.init.headers).has('authorization')).toBe(false);
  });

  it('reports the finish reason length', async () => {
    const { fetch } = fakeFetch(() => new Response(streamOf(sse([chunk('a'), chunk('', 'length')]))));
    const outcome = await run(new OpenAiClient({ baseUrl: '', stream: true, fetch })).result;
    expect(outcome.end?.finishReason).toBe('length');
  });

  it('shows an HTTP error body in OpenAI shape as words', async () => {
    const body = { error: { message: 'prompt plus max_tokens do not fit', type: 'invalid_request_error', param: 'messages', code: 'context_overflow' } };
    const { fetch } = fakeFetch(() => new Response(JSON.stringify(body), { status: 400, headers: { 'content-type': 'application/json' } }));
    const outcome = await run(new OpenAiClient({ baseUrl: '', stream: true, fetch })).result;
    expect(outcome.error).toEqual({ code: 'context_overflow', message: 'prompt plus max_tokens do not fit', httpStatus: 400 });
  });

  it('takes Retry-After into the error', async () => {
    const { fetch } = fakeFetch(() => new Response('{"error":{"message":"busy","code":"overloaded"}}', { status: 503, headers: { 'retry-after': '3' } }));
    const outcome = await run(new OpenAiClient({ baseUrl: '', stream: true, fetch })).result;
    expect(outcome.error).toMatchObject({ code: 'overloaded', retryAfterMs: 3000 });
  });

  it('reports an in-band error event after the stream started', async () => {
    const { fetch } = fakeFetch(() => new Response(streamOf(sse([chunk('par'), { error: { message: 'engine died', code: 'engine_error' } }]))));
    const outcome = await run(new OpenAiClient({ baseUrl: '', stream: true, fetch })).result;
    expect(outcome).toMatchObject({ kind: 'error', text: 'par', error: { code: 'engine_error', message: 'engine died' } });
  });

  it('calls a stream that ends without [DONE] interrupted', async () => {
    const { fetch } = fakeFetch(() => new Response(streamOf(sse([chunk('half')], false))));
    const outcome = await run(new OpenAiClient({ baseUrl: '', stream: true, fetch })).result;
    expect(outcome).toMatchObject({ kind: 'interrupted', text: 'half' });
  });

  it('cancel aborts the request and ends the answer as cancelled, keeping its text', async () => {
    let signal: AbortSignal | undefined;
    const { fetch } = fakeFetch((call) => {
      signal = call.init.signal ?? undefined;
      return new Response(streamOf(sse([chunk('kept')], false), { close: false }));
    });
    const { result, cancel } = run(new OpenAiClient({ baseUrl: '', stream: true, fetch }));
    await new Promise((resolve) => setTimeout(resolve, 10));
    cancel();
    const outcome = await result;
    expect(outcome).toEqual({ kind: 'end', end: { finishReason: 'cancelled' }, text: 'kept' });
    expect(signal?.aborted).toBe(true);
  });

  it('reports a server it cannot reach', async () => {
    const { fetch } = fakeFetch(() => Promise.reject(new TypeError('Failed to fetch')));
    const outcome = await run(new OpenAiClient({ baseUrl: '', stream: true, fetch })).result;
    expect(outcome.error).toEqual({ code: 'network', message: 'Failed to fetch' });
  });
});

describe('OpenAiClient, not streamed (REST)', () => {
  it('posts stream: false and delivers the whole answer', async () => {
    const body = { object: 'chat.completion', model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'All at once.' }, finish_reason: 'stop' }], usage: { prompt_tokens: 5, completion_tokens: 4 } };
    const { fetch, calls } = fakeFetch(() => new Response(JSON.stringify(body)));
    const outcome = await run(new OpenAiClient({ baseUrl: '', stream: false, fetch })).result;
    expect(outcome).toEqual({ kind: 'end', end: { finishReason: 'stop', usage: { prompt_tokens: 5, completion_tokens: 4 } }, text: 'All at once.' });
    const sent = JSON.parse(String(calls[0]?.init.body));
    expect(sent.stream).toBe(false);
    expect(sent).not.toHaveProperty('stream_options');
  });

  it('shows a non-JSON error body by its status', async () => {
    const { fetch } = fakeFetch(() => new Response('Not Found', { status: 404 }));
    const outcome = await run(new OpenAiClient({ baseUrl: '', stream: false, fetch })).result;
    expect(outcome.error).toMatchObject({ code: 'http_error', httpStatus: 404 });
  });
});

describe('listModels', () => {
  it('lists model ids, or null where the route is missing', async () => {
    const ok = fakeFetch(() => new Response(JSON.stringify({ object: 'list', data: [{ id: 'a' }, { id: 'b' }] })));
    expect(await listModels('', undefined, ok.fetch)).toEqual(['a', 'b']);
    const missing = fakeFetch(() => new Response('{"detail":"Not Found"}', { status: 404 }));
    expect(await listModels('', undefined, missing.fetch)).toBeNull();
  });
});

describe('OpenAiClient: thinking and tool calls', () => {
  function record(client: OpenAiClient) {
    const deltas: [string, string | undefined, number | undefined, string | undefined, string | undefined][] = [];
    const ended = new Promise<EndInfo>((resolve, reject) => {
      client.generate(REQUEST, {
        onDelta: (text, meta) => deltas.push([text, meta?.channel, meta?.index, meta?.callId, meta?.name]),
        onEnd: resolve,
        onError: (error) => reject(new Error(error.message)),
        onInterrupted: (reason) => reject(new Error(reason)),
      });
    });
    return { deltas, ended };
  }

  it('streams reasoning_content (or reasoning) and tool-call fragments on their channels', async () => {
    const choice = (delta: unknown, finish: string | null = null) => ({ choices: [{ index: 0, delta, finish_reason: finish }] });
    const { fetch } = fakeFetch(() =>
      new Response(
        streamOf(
          sse([
            choice({ role: 'assistant', reasoning_content: 'Hmm', reasoning: 'Hmm' }),
            choice({ reasoning: ' ok' }),
            choice({ content: 'Calling.' }),
            choice({ tool_calls: [{ index: 0, id: 'call_x', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
            choice({ tool_calls: [{ index: 0, function: { arguments: '{"city":"Oslo"}' } }] }),
            choice({}, 'tool_calls'),
          ]),
        ),
      ),
    );
    const { deltas, ended } = record(new OpenAiClient({ baseUrl: '', stream: true, fetch }));
    expect((await ended).finishReason).toBe('tool_calls');
    expect(deltas).toEqual([
      ['Hmm', 'reasoning', undefined, undefined, undefined],
      [' ok', 'reasoning', undefined, undefined, undefined],
      ['Calling.', undefined, undefined, undefined, undefined],
      ['', 'tool_call', 0, 'call_x', 'get_weather'],
      ['{"city":"Oslo"}', 'tool_call', 0, undefined, undefined],
    ]);
  });

  it('reads them from a whole answer (REST) too', async () => {
    const body = {
      model: 'm',
      choices: [{ index: 0, finish_reason: 'tool_calls', message: { role: 'assistant', content: null, reasoning_content: 'Plan', tool_calls: [{ id: 'call_y', type: 'function', function: { name: 'f', arguments: '{}' } }] } }],
      usage: { prompt_tokens: 3, completion_tokens: 9 },
    };
    const { fetch } = fakeFetch(() => Response.json(body));
    const { deltas, ended } = record(new OpenAiClient({ baseUrl: '', stream: false, fetch }));
    expect((await ended).finishReason).toBe('tool_calls');
    expect(deltas).toEqual([
      ['Plan', 'reasoning', undefined, undefined, undefined],
      ['{}', 'tool_call', 0, 'call_y', 'f'],
    ]);
  });
});
