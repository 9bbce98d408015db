import { describe, expect, it } from 'vitest';
import { describeElapsed, describeLeft, msLeft, withReport } from './progress';

describe('prefill progress', () => {
  it('estimates the time left from the rate between reports', () => {
    let p = withReport(undefined, 512, 5120, 1000);
    expect(msLeft(p, 1000)).toBeNull(); // one report says no rate
    p = withReport(p, 1024, 5120, 2000); // 512 tokens a second
    expect(p.firstDone).toBe(512);
    expect(msLeft(p, 2000)).toBe(8000);
    expect(msLeft(p, 5000)).toBe(5000); // the time since the last report counts
    expect(msLeft(p, 20_000)).toBe(0);
  });

  it('starts again for a new prefill', () => {
    const p = withReport(withReport(undefined, 512, 2048, 0), 1024, 2048, 500);
    expect(withReport(p, 512, 4096, 900)).toEqual({ done: 512, total: 4096, at: 900, firstDone: 512, firstAt: 900 });
    expect(withReport(p, 0, 2048, 900).firstAt).toBe(900);
  });

  it('says the time in words', () => {
    expect(describeLeft(null)).toBe('estimating the time left');
    expect(describeLeft(800)).toBe('almost done');
    expect(describeLeft(7_400)).toBe('about 7 s left');
    expect(describeLeft(42_000)).toBe('about 40 s left');
    expect(describeLeft(200_000)).toBe('about 3 min left');
    expect(describeElapsed(9_999)).toBe('9 s');
    expect(describeElapsed(125_000)).toBe('2 min 05 s');
  });
});

describe('the reducer and prefill progress', () => {
  it('records reports while waiting, takes the answer out of the queue, and forgets them at the first token', async () => {
    const { chatReducer, initialChatState } = await import('./conversations');
    const user = { id: 'u', role: 'user' as const, content: 'long', createdAt: 0 };
    const assistant = { id: 'a', role: 'assistant' as const, content: '', createdAt: 0, status: 'waiting' as const };
    const ref = { conversationId: 'c', messageId: 'a' };
    let state = chatReducer({ ...initialChatState, loaded: true }, { type: 'send', conversationId: 'c', user, assistant, now: 0 });
    state = chatReducer(state, { type: 'answer/queued', ...ref, position: 1 });
    state = chatReducer(state, { type: 'answer/progress', ...ref, done: 512, total: 2048, at: 100 });
    state = chatReducer(state, { type: 'answer/progress', ...ref, done: 1024, total: 2048, at: 600 });
    const waiting = state.conversations.c?.messages[1];
    expect(waiting?.queuePosition).toBeUndefined();
    expect(waiting?.prefill).toEqual({ done: 1024, total: 2048, at: 600, firstDone: 512, firstAt: 100 });
    state = chatReducer(state, { type: 'answer/append', ...ref, text: 'Hi', at: 900 });
    expect(state.conversations.c?.messages[1]?.prefill).toBeUndefined();
    expect(state.conversations.c?.messages[1]?.status).toBe('streaming');
  });
});
