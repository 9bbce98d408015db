import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FakeSocket, socketFactory } from '../test/fakeSocket';
import type { ApiError, EndInfo, GenerationHandlers, GenerationRequest } from './types';
import { TokenpipeSocket } from './wsClient';

const REQUEST: GenerationRequest = { messages: [{ role: 'user', content: 'hi' }], params: { temperature: 0 } };

/** Handlers that write down everything, in order. */
function recorder() {
  const events: string[] = [];
  let text = '';
  const ends: EndInfo[] = [];
  const errors: ApiError[] = [];
  const interruptions: string[] = [];
  const unresumable: boolean[] = [];
  const handlers: GenerationHandlers = {
    onQueued: (position) => events.push(`queued:${position}`),
    onStart: () => events.push('start'),
    onProgress: (done, total) => events.push(`progress:${done}/${total}`),
    onDelta: (delta) => {
      text += delta;
      events.push(`delta:${delta}`);
    },
    onEnd: (end) => {
      ends.push(end);
      events.push(`end:${end.finishReason}`);
    },
    onError: (error) => {
      errors.push(error);
      events.push(`error:${error.code}`);
    },
    onInterrupted: (reason, info) => {
      interruptions.push(reason);
      unresumable.push(info?.unresumable === true);
      events.push('interrupted');
    },
  };
  return { handlers, events, ends, errors, interruptions, unresumable, text: () => text };
}

function setup(apiKey?: string) {
  const factory = socketFactory();
  const client = new TokenpipeSocket({ url: 'ws://host/ws', apiKey, createSocket: factory.create, random: () => 0, answerTimeoutMs: 1000 });
  const current = (): FakeSocket => {
    const socket = factory.sockets.at(-1);
    if (!socket) throw new Error('no socket yet');
    return socket;
  };
  return { client, sockets: factory.sockets, current };
}

function openWithHello(socket: FakeSocket): void {
  socket.open();
  socket.receive({ type: 'hello', protocol: 'tokenpipe.v1', models: ['m'], limits: { max_tokens: 512 } });
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('TokenpipeSocket handshake', () => {
  it('offers only tokenpipe.v1 without an API key', () => {
    const { client, current } = setup();
    client.connect();
    expect(current().protocols).toEqual(['tokenpipe.v1']);
    expect(current().url).toBe('ws://host/ws');
  });

  it('offers the key as a base64url bearer subprotocol when one is set', () => {
    const { client, current } = setup('sk-ü/+=');
    client.connect();
    const [first, second] = current().protocols;
    expect(first).toBe('tokenpipe.v1');
    expect(second).toMatch(/^tokenpipe\.bearer\.[A-Za-z0-9_-]+$/);
    const encoded = (second ?? '').slice('tokenpipe.bearer.'.length).replace(/-/g, '+').replace(/_/g, '/');
    expect(new TextDecoder().decode(Uint8Array.from(atob(encoded.padEnd(Math.ceil(encoded.length / 4) * 4, '=')), (c) => c.charCodeAt(0)))).toBe('sk-ü/+=');
  });

  it('reports open with the hello frame', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const state = client.connectionState;
    expect(state.status).toBe('open');
    expect(state.status === 'open' && state.hello?.limits?.max_tokens).toBe(512);
  });

  it('refuses a server that did not select tokenpipe.v1', () => {
    const { client, current } = setup();
    client.connect();
    current().open('');
    expect(current().closedWith).toBe(1000);
    expect(client.connectionState.status).toBe('reconnecting');
  });
});

describe('TokenpipeSocket generations', () => {
  it('sends a resumable generate once the socket opens', () => {
    const { client, current } = setup();
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    expect(current().sent).toEqual([]);
    openWithHello(current());
    expect(current().sent).toEqual([
      { type: 'generate', id: expect.stringMatching(/^[A-Za-z0-9_.-]{1,64}$/), messages: REQUEST.messages, params: { temperature: 0 }, resumable: true },
    ]);
  });

  it('routes interleaved frames of two generations by id', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const a = recorder();
    const b = recorder();
    client.generate(REQUEST, a.handlers);
    client.generate(REQUEST, b.handlers);
    const [ga, gb] = current().sent.map((frame) => frame.id);
    expect(ga).not.toBe(gb);
    const socket = current();
    socket.receive({ type: 'queued', id: gb, position: 1 });
    socket.receive({ type: 'start', id: ga, model: 'm', prompt_tokens: 3 });
    socket.receive({ type: 'delta', id: ga, seq: 0, text: 'A0' });
    socket.receive({ type: 'start', id: gb, model: 'm', prompt_tokens: 3 });
    socket.receive({ type: 'delta', id: gb, seq: 0, text: 'B0' });
    socket.receive({ type: 'delta', id: ga, seq: 1, text: 'A1' });
    socket.receive({ type: 'end', id: ga, finish_reason: 'stop', usage: { prompt_tokens: 3, completion_tokens: 2 } });
    socket.receive({ type: 'delta', id: gb, seq: 1, text: 'B1' });
    socket.receive({ type: 'end', id: gb, finish_reason: 'length' });
    expect(a.events).toEqual(['start', 'delta:A0', 'delta:A1', 'end:stop']);
    expect(b.events).toEqual(['queued:1', 'start', 'delta:B0', 'delta:B1', 'end:length']);
    expect(a.ends[0]?.usage).toEqual({ prompt_tokens: 3, completion_tokens: 2 });
  });

  it('delivers deltas in seq order and drops repeats', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    const id = current().sent[0]?.id;
    const socket = current();
    socket.receive({ type: 'start', id });
    for (const [seq, text] of [[1, 'b'], [0, 'a'], [0, 'a'], [1, 'b'], [3, 'd'], [2, 'c'], [3, 'd'], [1, 'b'], [4, 'e']] as const) {
      socket.receive({ type: 'delta', id, seq, text });
    }
    expect(rec.text()).toBe('abcde');
  });

  it('passes queue positions through', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    const id = current().sent[0]?.id;
    current().receive({ type: 'queued', id, position: 3 });
    current().receive({ type: 'queued', id, position: 1 });
    current().receive({ type: 'start', id });
    expect(rec.events).toEqual(['queued:3', 'queued:1', 'start']);
  });

  it('passes prefill progress through, and drops frames that are not numbers', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    const id = current().sent[0]?.id;
    current().receive({ type: 'start', id });
    current().receive({ type: 'progress', id, prompt_tokens_done: 512, prompt_tokens: 1300 });
    current().receive({ type: 'progress', id, prompt_tokens_done: '1024', prompt_tokens: 1300 });
    current().receive({ type: 'progress', id, prompt_tokens_done: 1300, prompt_tokens: 1300 });
    current().receive({ type: 'delta', id, seq: 0, text: 'A' });
    expect(rec.events).toEqual(['start', 'progress:512/1300', 'progress:1300/1300', 'delta:A']);
  });

  it('cancels with a cancel frame and ends on the server end frame', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    const handle = client.generate(REQUEST, rec.handlers);
    const id = current().sent[0]?.id;
    current().receive({ type: 'start', id });
    current().receive({ type: 'delta', id, seq: 0, text: 'partial' });
    handle.cancel();
    expect(current().sent.at(-1)).toEqual({ type: 'cancel', id });
    expect(rec.ends).toEqual([]);
    current().receive({ type: 'end', id, finish_reason: 'cancelled', usage: { prompt_tokens: 1, completion_tokens: 1 } });
    expect(rec.events).toEqual(['start', 'delta:partial', 'end:cancelled']);
    vi.advanceTimersByTime(5000);
    expect(rec.ends).toHaveLength(1);
  });

  it('ends a cancelled answer locally when the server never confirms', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    const handle = client.generate(REQUEST, rec.handlers);
    current().receive({ type: 'start', id: current().sent[0]?.id });
    handle.cancel();
    vi.advanceTimersByTime(999);
    expect(rec.ends).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(rec.events).toEqual(['start', 'end:cancelled']);
  });

  it('cancels an answer not yet sent without touching the server', () => {
    const { client, current } = setup();
    const rec = recorder();
    const handle = client.generate(REQUEST, rec.handlers);
    handle.cancel();
    expect(rec.events).toEqual(['end:cancelled']);
    openWithHello(current());
    expect(current().sent).toEqual([]);
  });

  it('reports error frames in words and keeps the other generations', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const a = recorder();
    const b = recorder();
    client.generate(REQUEST, a.handlers);
    client.generate(REQUEST, b.handlers);
    const [ga, gb] = current().sent.map((frame) => frame.id);
    current().receive({ type: 'error', id: ga, code: 'overloaded', message: 'queue full', retry_after_ms: 2000 });
    current().receive({ type: 'error', id: null, code: 'bad_request', message: 'unknown type' });
    current().receive({ type: 'start', id: gb });
    current().receive({ type: 'error', id: gb, code: 'duplicate_id', message: 'only rejects a frame' });
    current().receive({ type: 'delta', id: gb, seq: 0, text: 'still here' });
    current().receive({ type: 'error', id: gb, code: 'context_overflow', message: 'too long' });
    expect(a.errors).toEqual([{ code: 'overloaded', message: 'queue full', retryAfterMs: 2000 }]);
    expect(b.events).toEqual(['start', 'delta:still here', 'error:context_overflow']);
  });

  it('treats duplicate_id on a generate not yet started as its rejection', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    current().receive({ type: 'error', id: current().sent[0]?.id, code: 'duplicate_id', message: 'in use' });
    expect(rec.events).toEqual(['error:duplicate_id']);
  });

  it('ignores frames it cannot read', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    const id = current().sent[0]?.id;
    current().onmessage?.({ data: 'not json' });
    current().onmessage?.({ data: '[1,2]' });
    current().receive({ type: 'delta', id, seq: 'x', text: 'bad' });
    current().receive({ type: 'delta', id, seq: 0, text: 'good' });
    expect(rec.text()).toBe('good');
  });
});

describe('TokenpipeSocket reconnect', () => {
  it('reconnects with exponential backoff and resets it after a hello', () => {
    const { client, sockets, current } = setup();
    client.connect();
    current().drop(1006);
    const state = client.connectionState;
    expect(state.status).toBe('reconnecting');
    expect(state.status === 'reconnecting' && state.reason).toMatch(/could not connect.*API key/);
    vi.advanceTimersByTime(499);
    expect(sockets).toHaveLength(1);
    vi.advanceTimersByTime(1);
    expect(sockets).toHaveLength(2);
    current().drop(1006);
    vi.advanceTimersByTime(999);
    expect(sockets).toHaveLength(2);
    vi.advanceTimersByTime(1);
    expect(sockets).toHaveLength(3);
    current().drop(1006);
    vi.advanceTimersByTime(2000);
    expect(sockets).toHaveLength(4);
    openWithHello(current());
    current().drop(1012);
    const after = client.connectionState;
    expect(after.status === 'reconnecting' && after.reason).toBe('the server is restarting');
    vi.advanceTimersByTime(500);
    expect(sockets).toHaveLength(5);
  });

  it('caps the backoff delay', () => {
    const { client, sockets, current } = setup();
    client.connect();
    for (let i = 0; i < 10; i++) {
      current().drop(1006);
      vi.advanceTimersByTime(15_000);
    }
    expect(sockets).toHaveLength(11);
  });

  it('retries at once when asked', () => {
    const { client, sockets, current } = setup();
    client.connect();
    current().drop(1006);
    client.retryNow();
    expect(sockets).toHaveLength(2);
  });

  it('interrupts a non-resumable answer when the connection drops', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    const id = current().sent[0]?.id;
    current().receive({ type: 'start', id });
    current().receive({ type: 'delta', id, seq: 0, text: 'half' });
    current().drop(1006);
    expect(rec.events).toEqual(['start', 'delta:half', 'interrupted']);
    expect(rec.interruptions[0]).toMatch(/lost/);
  });

  it('resumes a resumable answer after reconnecting, without repeating text', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    const id = current().sent[0]?.id;
    current().receive({ type: 'start', id, stream: 'tok-123' });
    current().receive({ type: 'delta', id, seq: 0, text: 'one ' });
    current().receive({ type: 'delta', id, seq: 1, text: 'two ' });
    current().drop(1006);
    expect(rec.events).not.toContain('interrupted');
    vi.advanceTimersByTime(500);
    openWithHello(current());
    expect(current().sent).toEqual([{ type: 'resume', stream: 'tok-123', after_seq: 1, id }]);
    current().receive({ type: 'delta', id, seq: 1, text: 'two ' });
    current().receive({ type: 'delta', id, seq: 2, text: 'three' });
    current().receive({ type: 'end', id, finish_reason: 'stop' });
    expect(rec.text()).toBe('one two three');
    expect(rec.events.at(-1)).toBe('end:stop');
  });

  it('marks the answer interrupted when the server cannot resume it', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    const id = current().sent[0]?.id;
    current().receive({ type: 'start', id, stream: 'tok' });
    current().receive({ type: 'delta', id, seq: 0, text: 'kept' });
    current().drop(1006);
    vi.advanceTimersByTime(500);
    openWithHello(current());
    current().receive({ type: 'error', id, code: 'unknown_id', message: 'no such stream' });
    expect(rec.events).toEqual(['start', 'delta:kept', 'interrupted']);
    expect(rec.interruptions[0]).toMatch(/no longer has this answer/);
    expect(rec.unresumable).toEqual([true]);
  });

  it('resumes an answer a reloaded page knew by its token and seq, on a fresh client', () => {
    const { client, current } = setup();
    const rec = recorder();
    const seqs: (number | undefined)[] = [];
    client.resume({ stream: 'tok-9', seq: 4 }, { ...rec.handlers, onDelta: (text, meta) => { seqs.push(meta?.seq); rec.handlers.onDelta(text, meta); } });
    openWithHello(current());
    const sent = current().sent[0];
    expect(sent).toMatchObject({ type: 'resume', stream: 'tok-9', after_seq: 4 });
    const id = sent?.id;
    current().receive({ type: 'delta', id, seq: 4, text: 'old' }); // a replay it already has
    current().receive({ type: 'delta', id, seq: 6, text: ' six' }); // held until 5 comes
    current().receive({ type: 'delta', id, seq: 5, text: 'five' });
    current().receive({ type: 'end', id, finish_reason: 'stop' });
    expect(rec.text()).toBe('five six');
    expect(seqs).toEqual([5, 6]);
    expect(rec.events.at(-1)).toBe('end:stop');
  });

  it('says plainly when a reloaded page resumes a token the server has forgotten', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.resume({ stream: 'gone', seq: 2 }, rec.handlers);
    const id = current().sent[0]?.id;
    current().receive({ type: 'error', id, code: 'unknown_id', message: 'no resumable generation for that stream token (expired or unknown)' });
    expect(rec.events).toEqual(['interrupted']);
    expect(rec.unresumable).toEqual([true]);
    expect(rec.interruptions[0]).not.toMatch(/unknown_id/);
  });

  it('passes tool-call channel fields with the delta', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const metas: unknown[] = [];
    const rec = recorder();
    client.generate(REQUEST, { ...rec.handlers, onDelta: (_t, meta) => metas.push(meta) });
    const id = current().sent[0]?.id;
    current().receive({ type: 'delta', id, seq: 0, text: '', channel: 'tool_call', index: 0, call_id: 'call_1', name: 'f' });
    expect(metas).toEqual([{ seq: 0, channel: 'tool_call', index: 0, callId: 'call_1', name: 'f' }]);
  });

  it('marks the answer interrupted when resume is answered with an id-less bad_request', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    const id = current().sent[0]?.id;
    current().receive({ type: 'start', id, stream: 'tok' });
    current().drop(1006);
    vi.advanceTimersByTime(500);
    openWithHello(current());
    current().receive({ type: 'error', id: null, code: 'bad_request', message: "unknown type 'resume'" });
    expect(rec.events).toEqual(['start', 'interrupted']);
  });

  it('gives up on a resume the server never answers', () => {
    const { client, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    current().receive({ type: 'start', id: current().sent[0]?.id, stream: 'tok' });
    current().drop(1006);
    vi.advanceTimersByTime(500);
    openWithHello(current());
    vi.advanceTimersByTime(1000);
    expect(rec.events).toEqual(['start', 'interrupted']);
  });

  it('sends answers asked for while offline once the connection is back', () => {
    const { client, current } = setup();
    client.connect();
    current().drop(1006);
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    vi.advanceTimersByTime(500);
    openWithHello(current());
    expect(current().sent.map((frame) => frame.type)).toEqual(['generate']);
  });

  it('close() interrupts running answers and stops reconnecting', () => {
    const { client, sockets, current } = setup();
    client.connect();
    openWithHello(current());
    const rec = recorder();
    client.generate(REQUEST, rec.handlers);
    client.close();
    expect(rec.events).toEqual(['interrupted']);
    expect(client.connectionState.status).toBe('closed');
    vi.advanceTimersByTime(60_000);
    expect(sockets).toHaveLength(1);
  });
});
