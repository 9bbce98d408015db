import { describe, expect, it } from 'vitest';
import { canContinue, chatReducer, continuationOf, editedAnswer, initialChatState, type ChatAction, type ChatState, type Message } from './conversations';

const loaded = chatReducer(initialChatState, { type: 'hydrate', conversations: [] });
const ref = { conversationId: 'c1', messageId: 'a1' };
const user: Message = { id: 'u1', role: 'user', content: 'Hi', createdAt: 0 };
const waiting: Message = { id: 'a1', role: 'assistant', content: '', createdAt: 0, status: 'waiting' };
const apply = (...actions: ChatAction[]): ChatState =>
  actions.reduce(chatReducer, chatReducer(loaded, { type: 'send', conversationId: 'c1', user, assistant: waiting, now: 1 }));
const last = (state: ChatState) => state.conversations.c1?.messages.at(-1) as Message;
const text = { type: 'answer/append', ...ref, text: 'Once upon', at: 5 } as const;

describe('Continue is offered on every answer that ended short', () => {
  it('cut at the token limit, stopped, interrupted or failed: yes; ended by the model: no', () => {
    expect(canContinue(last(apply(text, { type: 'answer/finished', ...ref, finishReason: 'length' })))).toBe(true);
    expect(canContinue(last(apply(text, { type: 'answer/finished', ...ref, finishReason: 'cancelled' })))).toBe(true);
    expect(canContinue(last(apply(text, { type: 'answer/interrupted', ...ref, reason: 'lost' })))).toBe(true);
    expect(canContinue(last(apply(text, { type: 'answer/failed', ...ref, error: { code: 'engine_error', message: '' } })))).toBe(true);
    expect(canContinue(last(apply(text, { type: 'answer/finished', ...ref, finishReason: 'stop' })))).toBe(false);
    expect(canContinue(last(apply(text, { type: 'answer/finished', ...ref, finishReason: 'tool_calls' })))).toBe(false);
    expect(canContinue(last(apply({ type: 'answer/finished', ...ref, finishReason: 'length' })))).toBe(false); // no text
    expect(canContinue(last(apply(text)))).toBe(false); // still running
  });

  it('a stopped answer goes on from its text, timed from the Continue', () => {
    const stopped = apply(text, { type: 'answer/finished', ...ref, finishReason: 'cancelled' });
    const state = chatReducer(stopped, { type: 'answer/continue', ...ref, at: 99 });
    expect(last(state)).toMatchObject({ status: 'waiting', content: 'Once upon', requestedAt: 99 });
    expect(last(state).finishReason).toBeUndefined();
  });
});

describe('an answer edited by hand', () => {
  const done = apply(text, { type: 'answer/finished', ...ref, finishReason: 'stop' });
  const edit = (state: ChatState, content: string): ChatState =>
    chatReducer(state, { type: 'editAnswer', ...ref, answer: editedAnswer(last(state), content, 'a2', 10), now: 10 });

  it('is a new version of the turn, the model answer kept a step away', () => {
    const state = edit(done, 'Once upon a time, in Lyon,');
    const conversation = state.conversations.c1;
    expect(conversation?.messages.map((m) => m.id)).toEqual(['u1', 'a2']);
    expect(conversation?.children?.u1).toEqual(['a1', 'a2']);
    expect(conversation?.offPath?.a1?.content).toBe('Once upon');
    expect(last(state)).toMatchObject({ content: 'Once upon a time, in Lyon,', edited: true, status: 'done' });
  });

  it('can be continued, and the model goes on from the edit', () => {
    const state = edit(done, 'Once upon a time, in Lyon,');
    expect(canContinue(last(state))).toBe(true);
    const conversation = state.conversations.c1;
    expect(conversation && continuationOf(conversation, 'a2')).toEqual([
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Once upon a time, in Lyon,' },
    ]);
    const ref2 = { conversationId: 'c1', messageId: 'a2' };
    const after = [
      { type: 'answer/continue', ...ref2, at: 11 } as const,
      { type: 'answer/append', ...ref2, text: ' a cat lived.', at: 12 } as const,
      { type: 'answer/finished', ...ref2, finishReason: 'stop', at: 13 } as const,
    ].reduce<ChatState>(chatReducer, state);
    expect(last(after)).toMatchObject({ content: 'Once upon a time, in Lyon, a cat lived.', status: 'done' });
    expect(last(after).edited).toBeUndefined(); // the model's again: ended by it, nothing to continue
    expect(canContinue(last(after))).toBe(false);
  });

  it('is refused while an answer runs, and for a message that is not an answer', () => {
    const running = apply(text);
    expect(edit(running, 'x')).toBe(running);
    const onUser = chatReducer(done, { type: 'editAnswer', conversationId: 'c1', messageId: 'u1', answer: editedAnswer(last(done), 'x', 'a3', 1), now: 1 });
    expect(onUser).toBe(done);
  });
});
