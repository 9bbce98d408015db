import { describe, expect, it } from 'vitest';
import { parseAside, tellAside } from './aside';
import { SseDecoder } from './sse';
import type { GenerationHandlers } from './types';

describe('parseAside', () => {
  it('reads queue places and prefill progress', () => {
    expect(parseAside('queued position=3')).toEqual({ kind: 'queued', position: 3 });
    expect(parseAside('prefill 512/7012')).toEqual({ kind: 'prefill', done: 512, total: 7012 });
    expect(parseAside('prefill 7012/7012')).toEqual({ kind: 'prefill', done: 7012, total: 7012 });
  });

  it('ignores pings, loading and nonsense', () => {
    for (const text of ['ping', 'loading model', 'prefill 9/8', 'prefill 1/0', 'prefill a/b', 'queued']) expect(parseAside(text)).toBeNull();
  });

  it('reaches the handlers through the SSE decoder in their place among the events, cut anywhere', () => {
    const seen: string[] = [];
    const handlers: GenerationHandlers = {
      onQueued: (p) => seen.push(`q${p}`),
      onProgress: (d, t) => seen.push(`${d}/${t}`),
      onDelta: () => undefined,
      onEnd: () => undefined,
      onError: () => undefined,
      onInterrupted: () => undefined,
    };
    const decoder = new SseDecoder(true);
    const wire = 'data: {}\n\n: queued position=2\n\n: queued position=1\n\n: prefill 512/1300\n\n: ping\n\n: prefill 1300/1300\ndata: {"a":1}\n\n';
    for (const cut of [1, wire.length]) {
      seen.length = 0;
      const chunks = cut === 1 ? [...wire] : [wire];
      for (const event of chunks.flatMap((ch) => decoder.feed(ch))) {
        if (event.comment !== undefined) tellAside(event.comment, handlers);
        else seen.push(event.data);
      }
      expect(seen).toEqual(['{}', 'q2', 'q1', '512/1300', '1300/1300', '{"a":1}']);
    }
    expect(new SseDecoder().feed(': prefill 1/2\n\ndata: x\n\n')).toEqual([{ event: 'message', data: 'x' }]);
  });
});
