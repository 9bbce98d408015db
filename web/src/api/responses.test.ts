import { describe, expect, it } from 'vitest';
import { ResponsesClient, ResponsesEventReader, responsesBody } from './responses';
import type { ApiError, DeltaMeta, EndInfo, GenerationHandlers, GenerationRequest, ResumePoint } from './types';

const REQUEST: GenerationRequest = {
  messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }],
  params: { max_tokens: 20, temperature: 0, top_k: 40, stop: ['x'], reasoning_format: 'auto', seed: 7 },
  model: 'm',
};

/** What the server sends, as tokenpipe's door numbers it (docs/protocol.md, Responses). */
function sseEvents(objects: Record<string, unknown>[]): string {
  return objects.map((o, n) => `event: ${String(o.type)}\ndata: ${JSON.stringify({ ...o, sequence_number: n })}\n\n`).join('');
}

const final = (status: string, extra: Record<string, unknown> = {}) => ({
  id: 'resp_1', object: 'response', status, model: 'm', usage: { input_tokens: 9, output_tokens: 3, total_tokens: 12 }, ...extra,
});
const opening = [
  { type: 'response.created', response: final('in_progress', { usage: null }) },
  { type: 'response.in_progress', response: final('in_progress', { usage: null }) },
  { type: 'response.output_item.added', output_index: 0, item: { type: 'message', id: 'msg_1', content: [] } },
  { type: 'response.content_part.added', item_id: 'msg_1', output_index: 0, content_index: 0 },
];
const text = (delta: string) => ({ type: 'response.output_text.delta', item_id: 'msg_1', output_index: 0, content_index: 0, delta });

function record() {
  const seen: [string, DeltaMeta | undefined][] = [];
  const started: (string | undefined)[] = [];
  const starts: { stream: string; kind: string | undefined }[] = [];
  let outcome: { end?: EndInfo; error?: ApiError; reason?: string } | undefined;
  const handlers: GenerationHandlers = {
    onStart: (info) => {
      started.push(info.model);
      if (info.stream) starts.push({ stream: info.stream, kind: info.resumeKind });
    },
    onDelta: (t, meta) => seen.push([t, meta]),
    onEnd: (end) => (outcome = { end }),
    onError: (error) => (outcome = { error }),
    onInterrupted: (reason) => (outcome = { reason }),
  };
  return { seen, started, starts, handlers, outcome: () => outcome };
}

/** Runs the client on a stream cut into pieces of `size` bytes (inside events, inside UTF-8). */
async function stream(body: string, size = 7, resume?: ResumePoint) {
  const bytes = new TextEncoder().encode(body);
  const calls: RequestInit[] = [];
  const urls: [string, string][] = [];
  const fetchImpl = (async (url: RequestInfo | URL, init?: RequestInit) => {
    urls.push([init?.method ?? 'GET', String(url)]);
    if (init?.method === 'DELETE') return new Response('{}');
    calls.push(init ?? {});
    return new Response(
      new ReadableStream<Uint8Array>({
        start(controller) {
          for (let i = 0; i < bytes.length; i += size) controller.enqueue(bytes.slice(i, i + size));
          controller.close();
        },
      }),
      { headers: { 'content-type': 'text/event-stream' } },
    );
  }) as typeof fetch;
  const r = record();
  const done = new Promise<void>((resolve) => {
    const wrap = (fn: (...args: never[]) => void) => (...args: never[]) => {
      fn(...args);
      resolve();
    };
    const handlers = {
      ...r.handlers,
      onEnd: wrap(r.handlers.onEnd as never),
      onError: wrap(r.handlers.onError as never),
      onInterrupted: wrap(r.handlers.onInterrupted as never),
    };
    const client = new ResponsesClient({ baseUrl: 'http://x', fetch: fetchImpl });
    if (resume) client.resume(resume, handlers);
    else client.generate(REQUEST, handlers);
  });
  await done;
  return { ...r, calls, urls };
}

describe('responsesBody', () => {
  it('asks for a stream in the background (resumable after a reload), with what Responses takes of the settings', () => {
    expect(responsesBody(REQUEST)).toEqual({
      model: 'm',
      input: [
        { type: 'message', role: 'system', content: 'Be brief.' },
        { type: 'message', role: 'user', content: 'hi' },
      ],
      stream: true,
      background: true,
      store: true,
      max_output_tokens: 20,
      temperature: 0,
      seed: 7,
    });
  });

  it('sends tools in the Responses shape (flat functions)', () => {
    const body = responsesBody({ ...REQUEST, params: { tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }], tool_choice: 'required' } });
    expect(body).toMatchObject({ tools: [{ type: 'function', name: 'f', parameters: { type: 'object' } }], tool_choice: 'required' });
  });
});

describe('ResponsesClient: the event stream', () => {
  it('streams the text deltas and ends with the usage of response.completed', async () => {
    const body = sseEvents([...opening, text('Hel'), text('lo 🎉'), { type: 'response.output_text.done', text: 'Hello 🎉' }, { type: 'response.completed', response: final('completed') }]);
    const { seen, started, outcome, calls } = await stream(body);
    expect(started).toEqual(['m']);
    expect(seen.map(([t]) => t).join('')).toBe('Hello 🎉');
    expect(outcome()).toEqual({ end: { finishReason: 'stop', usage: { prompt_tokens: 9, completion_tokens: 3 } } });
    expect(JSON.parse(String(calls[0]?.body))).toMatchObject({ stream: true, background: true, store: true });
  });

  it('takes a background response id to resume by, numbers deltas by event, and deletes the response once read', async () => {
    const background = (e: Record<string, unknown>) => (e.response ? { ...e, response: { ...(e.response as object), background: true } } : e);
    const r = await stream(sseEvents([...opening.map(background), text('Hi'), { type: 'response.completed', response: final('completed') }]));
    expect(r.starts).toEqual([{ stream: 'resp_1', kind: 'response' }]);
    expect(r.seen).toEqual([['Hi', { seq: 4 }]]);
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(r.urls.at(-1)).toEqual(['DELETE', 'http://x/v1/responses/resp_1']);
  });

  it('resumes a background response after the last event it has', async () => {
    const r = await stream(sseEvents([]), 7, { stream: 'resp_9', seq: 12, kind: 'response' });
    expect(r.urls[0]).toEqual(['GET', 'http://x/v1/responses/resp_9?stream=true&starting_after=12']);
  });

  it('says length for max_output_tokens, and cancelled for a cancelled response', async () => {
    const cut = await stream(sseEvents([...opening, text('a'), { type: 'response.incomplete', response: final('incomplete', { incomplete_details: { reason: 'max_output_tokens' } }) }]));
    expect(cut.outcome()?.end?.finishReason).toBe('length');
    const cancelled = await stream(sseEvents([...opening, { type: 'response.incomplete', response: final('cancelled') }]));
    expect(cancelled.outcome()?.end?.finishReason).toBe('cancelled');
  });

  it('reports a failure mid-stream as an error in words', async () => {
    const failed = await stream(sseEvents([...opening, text('a'), { type: 'error', code: 'server_error', message: 'engine fault', param: null }, { type: 'response.failed', response: final('failed') }]));
    expect(failed.outcome()).toEqual({ error: { code: 'engine_error', message: 'engine fault' } });
  });

  it('calls a stream without its terminal event interrupted', async () => {
    const cut = await stream(sseEvents([...opening, text('a')]));
    expect(cut.outcome()?.reason).toMatch(/ended before the answer was complete/);
  });
});

describe('ResponsesEventReader: thinking and function calls', () => {
  it('puts reasoning text and call arguments on their channels', () => {
    const r = record();
    const reader = new ResponsesEventReader(r.handlers);
    const events = [
      ...opening,
      { type: 'response.reasoning_text.delta', item_id: 'rs_1', delta: 'Hmm.' },
      { type: 'response.output_item.added', output_index: 1, item: { type: 'function_call', id: 'fc_1', call_id: 'call_a', name: 'get_weather', arguments: '' } },
      { type: 'response.function_call_arguments.delta', item_id: 'fc_1', output_index: 1, delta: '{"city":' },
      { type: 'response.function_call_arguments.delta', item_id: 'fc_1', output_index: 1, delta: '"Oslo"}' },
      { type: 'response.function_call_arguments.delta', item_id: 'unknown', delta: 'ignored' },
    ];
    for (const event of events) expect(reader.handle(event)).toBeNull();
    expect(r.seen).toEqual([
      ['Hmm.', { channel: 'reasoning' }],
      ['', { channel: 'tool_call', index: 0, callId: 'call_a', name: 'get_weather' }],
      ['{"city":', { channel: 'tool_call', index: 0 }],
      ['"Oslo"}', { channel: 'tool_call', index: 0 }],
    ]);
    expect(reader.handle({ type: 'response.completed', response: final('completed') })).toMatchObject({ kind: 'end', end: { finishReason: 'tool_calls' } });
  });
});

describe('ResponsesClient: cancel', () => {
  it('ends the answer as cancelled at once and aborts the request', async () => {
    let signal: AbortSignal | undefined;
    const fetchImpl = ((_url: RequestInfo | URL, init?: RequestInit) => {
      signal = init?.signal ?? undefined;
      return new Promise<Response>(() => undefined); // the server never answers
    }) as typeof fetch;
    const r = record();
    const handle = new ResponsesClient({ baseUrl: '', fetch: fetchImpl }).generate(REQUEST, r.handlers);
    await Promise.resolve();
    handle.cancel();
    expect(r.outcome()).toEqual({ end: { finishReason: 'cancelled' } });
    expect(signal?.aborted).toBe(true);
  });
});
