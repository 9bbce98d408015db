import { describe, expect, it } from 'vitest';
import { SseDecoder, type SseEvent } from './sse';

/** A small seeded generator, so a failure can be replayed. */
function rng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

function cutAtRandom(bytes: Uint8Array, random: () => number): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  let start = 0;
  while (start < bytes.length) {
    const size = 1 + Math.floor(random() * 7);
    chunks.push(bytes.slice(start, start + size));
    start += size;
  }
  return chunks;
}

function decodeAll(chunks: Uint8Array[]): SseEvent[] {
  const decoder = new SseDecoder();
  return [...chunks.flatMap((chunk) => decoder.feed(chunk)), ...decoder.end()];
}

const TEXTS = ['Hello', ' 日本語', ' も大丈夫', ' 🎉🚀👩‍💻', '\n```py\nprint(1)\n```', ' é'];
const STREAM =
  ': keep-alive comment\n\n' +
  TEXTS.map((text) => `data: ${JSON.stringify({ choices: [{ delta: { content: text } }] })}\r\n\r\n`).join('') +
  'event: custom\nid: 7\ndata: line one\ndata: line two\n\n' +
  'data: [DONE]\n\n';

describe('SseDecoder', () => {
  it('decodes a whole stream fed at once', () => {
    const events = decodeAll([new TextEncoder().encode(STREAM)]);
    expect(events).toHaveLength(TEXTS.length + 2);
    expect(events.slice(0, TEXTS.length).map((e) => JSON.parse(e.data).choices[0].delta.content)).toEqual(TEXTS);
    expect(events[TEXTS.length]).toEqual({ event: 'custom', id: '7', data: 'line one\nline two' });
    expect(events.at(-1)?.data).toBe('[DONE]');
  });

  it('gives the same events for chunks cut anywhere, inside UTF-8 characters and CRLFs too', () => {
    const bytes = new TextEncoder().encode(STREAM);
    const expected = decodeAll([bytes]);
    for (let seed = 1; seed <= 200; seed++) {
      expect(decodeAll(cutAtRandom(bytes, rng(seed)))).toEqual(expected);
    }
  });

  it('decodes byte by byte', () => {
    const bytes = new TextEncoder().encode(STREAM);
    const chunks = Array.from(bytes, (byte) => Uint8Array.of(byte));
    expect(decodeAll(chunks)).toEqual(decodeAll([bytes]));
  });

  it('accepts CR, LF and CRLF line ends, a BOM, and fields without a space', () => {
    const decoder = new SseDecoder();
    const events = decoder.feed(new TextEncoder().encode('\uFEFFdata:a\rdata:b\r\n\rdata: c\n\n'));
    expect(events.map((e) => e.data)).toEqual(['a\nb', 'c']);
    // A CRLF is one line end, also when the chunk boundary falls between CR and LF.
    const split = new SseDecoder();
    expect([...split.feed('data: a\r'), ...split.feed('\ndata: b\r\n\r\n')].map((e) => e.data)).toEqual(['a\nb']);
  });

  it('drops an event that the stream ends before its blank line', () => {
    const decoder = new SseDecoder();
    expect(decoder.feed('data: complete\n\ndata: incomplete')).toHaveLength(1);
    expect(decoder.end()).toEqual([]);
  });

  it('ignores comments, unknown fields and blank events', () => {
    const decoder = new SseDecoder();
    expect(decoder.feed(':hi\nfoo: bar\n\nevent: x\n\nretry: 3000\ndata: y\n\n')).toEqual([{ event: 'message', data: 'y', retry: 3000 }]);
  });
});
