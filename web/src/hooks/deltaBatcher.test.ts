import { describe, expect, it } from 'vitest';
import { DeltaBatcher, type FrameScheduler } from './deltaBatcher';

/** Frames that run only when the test says so. */
function manualFrames(): FrameScheduler & { run(): void; waiting(): number } {
  let next = 1;
  const callbacks = new Map<number, () => void>();
  return {
    request(callback) {
      callbacks.set(next, callback);
      return next++;
    },
    cancel(handle) {
      callbacks.delete(handle);
    },
    run() {
      const due = [...callbacks.values()];
      callbacks.clear();
      for (const callback of due) callback();
    },
    waiting: () => callbacks.size,
  };
}

describe('DeltaBatcher', () => {
  it('delivers all deltas of a frame as one update per answer, in order', () => {
    const frames = manualFrames();
    const delivered: string[] = [];
    const batcher = new DeltaBatcher((c, m, text) => delivered.push(`${c}/${m}:${text}`), frames);
    for (const piece of ['Hel', 'lo', ' wor', 'ld']) batcher.add('c1', 'a1', piece);
    batcher.add('c2', 'a2', 'other');
    expect(delivered).toEqual([]);
    expect(frames.waiting()).toBe(1);
    frames.run();
    expect(delivered).toEqual(['c1/a1:Hello world', 'c2/a2:other']);
    frames.run();
    expect(delivered).toHaveLength(2);
  });

  it('carries the last seq of the text it gathered', () => {
    const frames = manualFrames();
    const delivered: [string, number | undefined][] = [];
    const batcher = new DeltaBatcher((_c, _m, text, seq) => delivered.push([text, seq]), frames);
    batcher.add('c', 'a', 'x', 3);
    batcher.add('c', 'a', 'y', 4);
    batcher.add('c', 'b', 'z');
    frames.run();
    expect(delivered).toEqual([
      ['xy', 4],
      ['z', undefined],
    ]);
  });

  it('skips frames that come sooner than the minimum spacing after the last render', () => {
    const frames = manualFrames();
    let clock = 0;
    const timed = { ...frames, now: () => clock };
    const delivered: string[] = [];
    const batcher = new DeltaBatcher((_c, _m, text) => delivered.push(text), timed, 50);
    batcher.add('c', 'a', 'one');
    frames.run(); // the first render goes at once
    batcher.add('c', 'a', 'two');
    clock = 16;
    frames.run();
    clock = 33;
    batcher.add('c', 'a', 'three');
    frames.run();
    expect(delivered).toEqual(['one']);
    expect(frames.waiting()).toBe(1); // still waiting, not dropped
    clock = 50;
    frames.run();
    expect(delivered).toEqual(['one', 'twothree']);
  });

  it('asks for the next frame only when new text comes', () => {
    const frames = manualFrames();
    const delivered: string[] = [];
    const batcher = new DeltaBatcher((_c, _m, text) => delivered.push(text), frames);
    batcher.add('c', 'a', 'x');
    frames.run();
    expect(frames.waiting()).toBe(0);
    batcher.add('c', 'a', 'y');
    expect(frames.waiting()).toBe(1);
    frames.run();
    expect(delivered).toEqual(['x', 'y']);
  });

  it('flushes at once when asked, and the pending frame then has nothing to do', () => {
    const frames = manualFrames();
    const delivered: string[] = [];
    const batcher = new DeltaBatcher((_c, _m, text) => delivered.push(text), frames);
    batcher.add('c', 'a', 'last words');
    batcher.flush();
    expect(delivered).toEqual(['last words']);
    expect(frames.waiting()).toBe(0);
  });

  it('drops what is pending when disposed', () => {
    const frames = manualFrames();
    const delivered: string[] = [];
    const batcher = new DeltaBatcher((_c, _m, text) => delivered.push(text), frames);
    batcher.add('c', 'a', 'never');
    batcher.dispose();
    frames.run();
    expect(delivered).toEqual([]);
  });
  it('keeps thinking and tool-call fragments apart from the text, their seq counted alike', () => {
    const frames = manualFrames();
    const delivered: unknown[] = [];
    const batcher = new DeltaBatcher((_c, _m, text, seq, deltas, extras) => delivered.push({ text, seq, deltas, extras }), frames);
    batcher.add('c', 'a', 'Think', 0, { channel: 'reasoning' });
    batcher.add('c', 'a', 'ing', 1, { channel: 'reasoning' });
    batcher.add('c', 'a', 'Sure.', 2);
    batcher.add('c', 'a', '', 3, { channel: 'tool_call', index: 0, callId: 'call_1', name: 'f' });
    batcher.add('c', 'a', '{"a":', 4, { channel: 'tool_call', index: 0 });
    batcher.add('c', 'a', '1}', 5, { channel: 'tool_call', index: 0 });
    batcher.add('c', 'a', 'x', 6, { channel: 'something-new' });
    frames.run();
    expect(delivered).toEqual([
      { text: 'Sure.', seq: 6, deltas: 7, extras: { reasoning: 'Thinking', calls: [{ index: 0, callId: 'call_1', name: 'f', text: '{"a":1}' }] } },
    ]);
  });
});
