import { describe, expect, it } from 'vitest';
import { statsFrom } from './useGeneration';

describe('statsFrom', () => {
  it('prefers the server timing where the transport gives one', () => {
    const stats = statsFrom('ws', { startedAt: 0, firstTokenAt: 50 }, 1000, {
      finishReason: 'stop',
      usage: { prompt_tokens: 10, completion_tokens: 20 },
      timing: { queue_ms: 3, ttft_ms: 40, total_ms: 900, tokens_per_s: 22.5 },
    });
    expect(stats).toEqual({ transport: 'ws', measuredBy: 'server', ttftMs: 40, totalMs: 900, tokensPerS: 22.5, queueMs: 3, promptTokens: 10, completionTokens: 20 });
  });

  it('measures in the browser otherwise: decode rate after the first token', () => {
    const stats = statsFrom('sse', { startedAt: 100, firstTokenAt: 300 }, 1300, { finishReason: 'stop', usage: { prompt_tokens: 5, completion_tokens: 11 } });
    expect(stats).toEqual({ transport: 'sse', measuredBy: 'browser', ttftMs: 200, totalMs: 1200, tokensPerS: 10, promptTokens: 5, completionTokens: 11 });
  });

  it('gives REST no first-token time: the whole answer comes at once', () => {
    const stats = statsFrom('rest', { startedAt: 0, firstTokenAt: 700 }, 700, { finishReason: 'stop', usage: { prompt_tokens: 5, completion_tokens: 30 } });
    expect(stats.ttftMs).toBeUndefined();
    expect(stats.tokensPerS).toBeUndefined();
    expect(stats.totalMs).toBe(700);
  });

  it('leaves out what it cannot know', () => {
    const stats = statsFrom('rest', { startedAt: 0 }, 500);
    expect(stats).toEqual({ transport: 'rest', measuredBy: 'browser', ttftMs: undefined, totalMs: 500, tokensPerS: undefined });
  });
});
