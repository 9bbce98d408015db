import { describe, expect, it } from 'vitest';
import { asideTo, parseAside } from './aside';
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

  it('reaches the handlers through the SSE decoder, cut anywhere', () => {
    const seen: string[] = [];
    const handlers: GenerationHandlers = {
      onQueued: (p) => seen.push(`q${p}`),
      onProgress: (d, t) => seen.push(`${d}/${t}`),
      onDelta: () => undefined,
      onEnd: () => undefined,
      onError: () => undefined,
      onInterrupted: () => undefined,
    };
    const decoder = new SseDecoder(asideTo(handlers));
    const wire = ': queued position=2\n\n: queued position=1\n\n: prefill 512/1300\n\n: ping\n\n: prefill 1300/1300\n\ndata: {}\n\n';
    const events = [...wire].flatMap((ch) => decoder.feed(ch));
    expect(seen).toEqual(['q2', 'q1', '512/1300', '1300/1300']);
    expect(events).toHaveLength(1);
  });
});
