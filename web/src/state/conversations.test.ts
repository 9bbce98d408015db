import { describe, expect, it } from 'vitest';
import { chatReducer, historyBefore, initialChatState, isRunning, titleFrom, type ChatAction, type ChatState, type Message } from './conversations';

const user = (id: string, content: string): Message => ({ id, role: 'user', content, createdAt: 0 });
const answer = (id: string): Message => ({ id, role: 'assistant', content: '', createdAt: 0, status: 'waiting' });

function apply(state: ChatState, ...actions: ChatAction[]): ChatState {
  return actions.reduce(chatReducer, state);
}

const loaded = chatReducer(initialChatState, { type: 'hydrate', conversations: [] });
const ref = (messageId: string) => ({ conversationId: 'c1', messageId });

/** c1: "Hi" -> "Hello there" (done), "More?" -> a2 (streaming "Partial"). */
function twoTurns(): ChatState {
  return apply(
    loaded,
    { type: 'send', conversationId: 'c1', user: user('u1', 'Hi'), assistant: answer('a1'), now: 1 },
    { type: 'answer/append', ...ref('a1'), text: 'Hello ' },
    { type: 'answer/append', ...ref('a1'), text: 'there' },
    { type: 'answer/finished', ...ref('a1'), finishReason: 'stop' },
    { type: 'send', conversationId: 'c1', user: user('u2', 'More?'), assistant: answer('a2'), now: 2 },
    { type: 'answer/append', ...ref('a2'), text: 'Partial' },
  );
}

const messagesOf = (state: ChatState) => state.conversations.c1?.messages ?? [];

describe('chatReducer: sending and streaming', () => {
  it('creates the conversation on the first send, titled by the message', () => {
    const state = chatReducer(loaded, { type: 'send', conversationId: 'c1', user: user('u1', 'What is a token?\nmore'), assistant: answer('a1'), now: 5 });
    expect(state.activeId).toBe('c1');
    expect(state.order).toEqual(['c1']);
    expect(state.conversations.c1?.title).toBe('What is a token?');
    expect(messagesOf(state).map((m) => m.id)).toEqual(['u1', 'a1']);
  });

  it('appends streamed text and settles the answer with its stats', () => {
    const state = apply(twoTurns(), {
      type: 'answer/finished',
      ...ref('a2'),
      finishReason: 'stop',
      stats: { transport: 'ws', measuredBy: 'server', ttftMs: 5 },
    });
    const a2 = messagesOf(state)[3];
    expect(a2).toMatchObject({ content: 'Partial', status: 'done', finishReason: 'stop', stats: { ttftMs: 5 } });
    expect(isRunning(a2 as Message)).toBe(false);
  });

  it('changes only the identity of the message that changed', () => {
    const before = twoTurns();
    const after = chatReducer(before, { type: 'answer/append', ...ref('a2'), text: '!' });
    expect(messagesOf(after)[0]).toBe(messagesOf(before)[0]);
    expect(messagesOf(after)[1]).toBe(messagesOf(before)[1]);
    expect(messagesOf(after)[3]).not.toBe(messagesOf(before)[3]);
  });

  it('shows the queue position while waiting and drops it once text arrives', () => {
    let state = apply(loaded, { type: 'send', conversationId: 'c1', user: user('u1', 'Hi'), assistant: answer('a1'), now: 1 }, { type: 'answer/queued', ...ref('a1'), position: 2 });
    expect(messagesOf(state)[1]).toMatchObject({ status: 'waiting', queuePosition: 2 });
    state = chatReducer(state, { type: 'answer/append', ...ref('a1'), text: 'x' });
    expect(messagesOf(state)[1]?.queuePosition).toBeUndefined();
    expect(messagesOf(state)[1]?.status).toBe('streaming');
  });
});

describe('chatReducer: stop, errors, interruptions', () => {
  it('stop keeps the text that arrived and marks the answer stopped', () => {
    const state = apply(twoTurns(), { type: 'answer/finished', ...ref('a2'), finishReason: 'cancelled' });
    expect(messagesOf(state)[3]).toMatchObject({ content: 'Partial', status: 'stopped' });
  });

  it('ignores text that arrives after the answer settled', () => {
    const stopped = apply(twoTurns(), { type: 'answer/finished', ...ref('a2'), finishReason: 'cancelled' });
    const late = chatReducer(stopped, { type: 'answer/append', ...ref('a2'), text: ' late' });
    expect(late).toBe(stopped);
  });

  it('keeps errors and interruptions with their words', () => {
    const failed = apply(twoTurns(), { type: 'answer/failed', ...ref('a2'), error: { code: 'overloaded', message: 'busy' } });
    expect(messagesOf(failed)[3]).toMatchObject({ status: 'error', error: { code: 'overloaded' }, content: 'Partial' });
    const cut = apply(twoTurns(), { type: 'answer/interrupted', ...ref('a2'), reason: 'lost' });
    expect(messagesOf(cut)[3]).toMatchObject({ status: 'interrupted', note: 'lost' });
  });

  it('marks answers that were running when the page closed as interrupted on load', () => {
    const running = twoTurns().conversations.c1;
    if (!running) throw new Error('setup');
    const state = chatReducer(initialChatState, { type: 'hydrate', conversations: [running], activeId: 'c1' });
    expect(messagesOf(state)[3]?.status).toBe('interrupted');
    expect(messagesOf(state)[1]?.status).toBe('done');
    expect(state.activeId).toBe('c1');
  });
});

describe('chatReducer: loading', () => {
  it('keeps a conversation started before the stored ones finished loading', () => {
    const stored = twoTurns().conversations.c1;
    if (!stored) throw new Error('setup');
    const early = chatReducer(initialChatState, { type: 'send', conversationId: 'c2', user: user('u9', 'quick'), assistant: answer('a9'), now: 99 });
    const state = chatReducer(early, { type: 'hydrate', conversations: [stored], activeId: 'c1' });
    expect(state.order).toEqual(['c2', 'c1']);
    expect(state.activeId).toBe('c2');
    expect(state.loaded).toBe(true);
  });
});

describe('chatReducer: regenerate and edit', () => {
  it('regenerate replaces the last answer with a new one', () => {
    const stopped = apply(twoTurns(), { type: 'answer/finished', ...ref('a2'), finishReason: 'cancelled' });
    const state = chatReducer(stopped, { type: 'regenerate', conversationId: 'c1', assistant: answer('a3'), now: 3 });
    expect(messagesOf(state).map((m) => m.id)).toEqual(['u1', 'a1', 'u2', 'a3']);
    expect(messagesOf(state)[3]).toMatchObject({ content: '', status: 'waiting' });
  });

  it('regenerate does nothing in a conversation without a question', () => {
    expect(chatReducer(loaded, { type: 'regenerate', conversationId: 'c1', assistant: answer('a9'), now: 3 })).toBe(loaded);
  });

  it('edit replaces the message, drops everything after it, and asks again', () => {
    const state = chatReducer(twoTurns(), { type: 'edit', conversationId: 'c1', messageId: 'u1', content: 'Hey', assistant: answer('a9'), now: 9 });
    expect(messagesOf(state).map((m) => [m.id, m.content])).toEqual([
      ['u1', 'Hey'],
      ['a9', ''],
    ]);
    expect(state.conversations.c1?.title).toBe('Hey');
  });

  it('edit of a later message keeps the turns before it and the title', () => {
    const state = chatReducer(twoTurns(), { type: 'edit', conversationId: 'c1', messageId: 'u2', content: 'Less?', assistant: answer('a9'), now: 9 });
    expect(messagesOf(state).map((m) => m.id)).toEqual(['u1', 'a1', 'u2', 'a9']);
    expect(messagesOf(state)[2]?.content).toBe('Less?');
    expect(state.conversations.c1?.title).toBe('Hi');
  });

  it('edit cannot target an answer', () => {
    const before = twoTurns();
    expect(chatReducer(before, { type: 'edit', conversationId: 'c1', messageId: 'a1', content: 'x', assistant: answer('a9'), now: 9 })).toBe(before);
  });
});

describe('chatReducer: conversations', () => {
  it('new, select and delete', () => {
    let state = apply(
      loaded,
      { type: 'send', conversationId: 'c1', user: user('u1', 'one'), assistant: answer('a1'), now: 1 },
      { type: 'new' },
      { type: 'send', conversationId: 'c2', user: user('u2', 'two'), assistant: answer('a2'), now: 2 },
    );
    expect(state.order).toEqual(['c2', 'c1']);
    state = chatReducer(state, { type: 'select', id: 'c1' });
    expect(state.activeId).toBe('c1');
    state = chatReducer(state, { type: 'delete', id: 'c1' });
    expect(state.activeId).toBeNull();
    expect(state.order).toEqual(['c2']);
    expect(state.conversations.c1).toBeUndefined();
    expect(chatReducer(state, { type: 'select', id: 'nope' })).toBe(state);
  });
});

describe('historyBefore', () => {
  it('is the system prompt plus the turns before the answer, without failed empty answers', () => {
    const state = apply(
      twoTurns(),
      { type: 'answer/finished', ...ref('a2'), finishReason: 'cancelled' },
      { type: 'send', conversationId: 'c1', user: user('u3', 'Again'), assistant: answer('a3'), now: 3 },
      { type: 'answer/failed', ...ref('a3'), error: { code: 'overloaded', message: '' } },
      { type: 'send', conversationId: 'c1', user: user('u4', 'Last'), assistant: answer('a4'), now: 4 },
    );
    const conversation = state.conversations.c1;
    if (!conversation) throw new Error('setup');
    expect(historyBefore(conversation, 'a4', 'Be brief.')).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello there' },
      { role: 'user', content: 'More?' },
      { role: 'assistant', content: 'Partial' },
      { role: 'user', content: 'Again' },
      { role: 'user', content: 'Last' },
    ]);
    expect(historyBefore(conversation, 'a1', '  ')).toEqual([{ role: 'user', content: 'Hi' }]);
  });
});

describe('titleFrom', () => {
  it('uses the first line, shortened', () => {
    expect(titleFrom('  \n')).toBe('New conversation');
    expect(titleFrom('x'.repeat(80))).toHaveLength(58);
  });
});
