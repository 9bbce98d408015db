import { describe, expect, it } from 'vitest';
import { versionsAt } from './branches';
import { chatReducer, historyBefore, initialChatState, isRunning, titleFrom, type ChatAction, type ChatState, type Conversation, type Message } from './conversations';

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

  it('keeps answers that were running when the page closed running on load: the page resumes or asks again', () => {
    const running = twoTurns().conversations.c1;
    if (!running) throw new Error('setup');
    const state = chatReducer(initialChatState, { type: 'hydrate', conversations: [running], activeId: 'c1' });
    expect(messagesOf(state)[3]?.status).toBe('streaming');
    expect(messagesOf(state)[1]?.status).toBe('done');
    expect(state.activeId).toBe('c1');
  });
});

describe('chatReducer: resumable answers', () => {
  const resumable = () =>
    apply(
      loaded,
      { type: 'send', conversationId: 'c1', user: user('u1', 'Hi'), assistant: answer('a1'), now: 1 },
      { type: 'answer/started', ...ref('a1'), stream: 'tok' },
      { type: 'answer/append', ...ref('a1'), text: 'Hel', seq: 0 },
      { type: 'answer/append', ...ref('a1'), text: 'lo', seq: 2 },
    );

  it('keeps the stream token with the seq of the last text it holds', () => {
    expect(messagesOf(resumable())[1]).toMatchObject({ content: 'Hello', resume: { stream: 'tok', seq: 2 } });
    // a start sent again on resume keeps the seq
    const again = chatReducer(resumable(), { type: 'answer/started', ...ref('a1'), stream: 'tok' });
    expect(messagesOf(again)[1]?.resume).toEqual({ stream: 'tok', seq: 2 });
  });

  it('a running answer stays running through a reload; one off the branch in view is interrupted', () => {
    const stored = resumable().conversations.c1 as Conversation;
    const offPath = { ...stored, id: 'c2', messages: stored.messages.slice(0, 1), offPath: { a1: stored.messages[1] as Message } };
    const state = chatReducer(initialChatState, { type: 'hydrate', conversations: [stored, offPath] });
    expect(state.conversations.c1?.messages[1]).toMatchObject({ status: 'streaming', resume: { seq: 2 } });
    expect(state.conversations.c2?.offPath?.a1?.status).toBe('interrupted');
  });

  it('keeps the kind of a background response with its id', () => {
    const state = chatReducer(resumable(), { type: 'answer/started', ...ref('a1'), stream: 'resp_1', resumeKind: 'response' });
    expect(messagesOf(state)[1]?.resume).toEqual({ stream: 'resp_1', seq: 2, kind: 'response' });
  });

  it('a settled answer drops its token; one that cannot be resumed says so', () => {
    expect(messagesOf(chatReducer(resumable(), { type: 'answer/finished', ...ref('a1'), finishReason: 'stop' }))[1]?.resume).toBeUndefined();
    const lost = chatReducer(resumable(), { type: 'answer/interrupted', ...ref('a1'), reason: 'gone', unresumable: true });
    expect(messagesOf(lost)[1]).toMatchObject({ status: 'interrupted', unresumable: true, content: 'Hello' });
    expect(messagesOf(lost)[1]?.resume).toBeUndefined();
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

const ids = (state: ChatState) => messagesOf(state).map((m) => m.id);
const versions = (state: ChatState, index: number) => {
  const c = state.conversations.c1;
  if (!c) throw new Error('no c1');
  const v = versionsAt(c, index);
  return `${v.index + 1}/${v.count}`;
};
const settled = () => apply(twoTurns(), { type: 'answer/finished', ...ref('a2'), finishReason: 'stop' });

describe('chatReducer: regenerate and edit keep the earlier versions', () => {
  it('regenerate adds a version of the last answer; the earlier one is a step away', () => {
    const state = chatReducer(settled(), { type: 'regenerate', conversationId: 'c1', assistant: answer('a3'), now: 3 });
    expect(ids(state)).toEqual(['u1', 'a1', 'u2', 'a3']);
    expect(messagesOf(state)[3]).toMatchObject({ content: '', status: 'waiting' });
    expect(versions(state, 3)).toBe('2/2');
    const done = chatReducer(state, { type: 'answer/finished', ...ref('a3'), finishReason: 'stop' });
    const back = chatReducer(done, { type: 'version', conversationId: 'c1', messageId: 'a3', step: -1 });
    expect(ids(back)).toEqual(['u1', 'a1', 'u2', 'a2']);
    expect(messagesOf(back)[3]?.content).toBe('Partial');
    expect(versions(back, 3)).toBe('1/2');
    expect(chatReducer(back, { type: 'version', conversationId: 'c1', messageId: 'a2', step: -1 })).toBe(back);
  });

  it('regenerate of an earlier answer keeps the later turns on the old branch', () => {
    const state = apply(
      settled(),
      { type: 'regenerate', conversationId: 'c1', messageId: 'a1', assistant: answer('a9'), now: 9 },
      { type: 'answer/append', ...ref('a9'), text: 'Other' },
      { type: 'answer/finished', ...ref('a9'), finishReason: 'stop' },
    );
    expect(ids(state)).toEqual(['u1', 'a9']);
    const back = chatReducer(state, { type: 'version', conversationId: 'c1', messageId: 'a9', step: -1 });
    expect(ids(back)).toEqual(['u1', 'a1', 'u2', 'a2']);
  });

  it('regenerate does nothing in a conversation without a question', () => {
    expect(chatReducer(loaded, { type: 'regenerate', conversationId: 'c1', assistant: answer('a9'), now: 3 })).toBe(loaded);
  });

  it('edit adds a version of the message with a new answer; the old turns stay a step away', () => {
    const state = chatReducer(settled(), { type: 'edit', conversationId: 'c1', messageId: 'u1', user: user('u9', 'Hey'), assistant: answer('a9'), now: 9 });
    expect(messagesOf(state).map((m) => [m.id, m.content])).toEqual([
      ['u9', 'Hey'],
      ['a9', ''],
    ]);
    expect(state.conversations.c1?.title).toBe('Hey');
    expect(versions(state, 0)).toBe('2/2');
    const done = chatReducer(state, { type: 'answer/finished', ...ref('a9'), finishReason: 'stop' });
    const back = chatReducer(done, { type: 'version', conversationId: 'c1', messageId: 'u9', step: -1 });
    expect(ids(back)).toEqual(['u1', 'a1', 'u2', 'a2']);
    expect(back.conversations.c1?.title).toBe('Hi');
    const again = chatReducer(back, { type: 'version', conversationId: 'c1', messageId: 'u1', step: 1 });
    expect(ids(again)).toEqual(['u9', 'a9']);
  });

  it('a branch comes back as it was last shown, versions below it included', () => {
    let state = apply(
      settled(),
      { type: 'regenerate', conversationId: 'c1', assistant: answer('a3'), now: 3 },
      { type: 'answer/finished', ...ref('a3'), finishReason: 'stop' },
      { type: 'version', conversationId: 'c1', messageId: 'a3', step: -1 }, // a2 shown again
      { type: 'edit', conversationId: 'c1', messageId: 'u1', user: user('u9', 'Hey'), assistant: answer('a9'), now: 9 },
      { type: 'answer/finished', ...ref('a9'), finishReason: 'stop' },
    );
    state = chatReducer(state, { type: 'version', conversationId: 'c1', messageId: 'u9', step: -1 });
    expect(ids(state)).toEqual(['u1', 'a1', 'u2', 'a2']);
    expect(versions(state, 3)).toBe('1/2');
  });

  it('edit of a later message keeps the turns before it and the title', () => {
    const state = chatReducer(settled(), { type: 'edit', conversationId: 'c1', messageId: 'u2', user: user('u9', 'Less?'), assistant: answer('a9'), now: 9 });
    expect(ids(state)).toEqual(['u1', 'a1', 'u9', 'a9']);
    expect(messagesOf(state)[2]?.content).toBe('Less?');
    expect(state.conversations.c1?.title).toBe('Hi');
    expect(versions(state, 2)).toBe('2/2');
    expect(versions(state, 0)).toBe('1/1');
  });

  it('edit cannot target an answer, and versions cannot change while an answer runs', () => {
    const before = settled();
    expect(chatReducer(before, { type: 'edit', conversationId: 'c1', messageId: 'a1', user: user('u9', 'x'), assistant: answer('a9'), now: 9 })).toBe(before);
    const running = chatReducer(before, { type: 'regenerate', conversationId: 'c1', assistant: answer('a3'), now: 3 });
    expect(chatReducer(running, { type: 'version', conversationId: 'c1', messageId: 'a3', step: -1 })).toBe(running);
  });

  it('a stored conversation without branches reads as one line', () => {
    const stored: Conversation = { id: 'c1', title: 'Hi', createdAt: 0, updatedAt: 0, messages: [user('u1', 'Hi'), { ...answer('a1'), status: 'done' }] };
    let state = chatReducer(initialChatState, { type: 'hydrate', conversations: [stored] });
    state = chatReducer(state, { type: 'regenerate', conversationId: 'c1', assistant: answer('a2'), now: 1 });
    expect(ids(state)).toEqual(['u1', 'a2']);
    expect(versions(state, 1)).toBe('2/2');
  });
});

describe('chatReducer: deleting, with Undo', () => {
  it('a conversation comes back with Undo, where it was', () => {
    let state = apply(
      settled(),
      { type: 'new' },
      { type: 'send', conversationId: 'c2', user: user('u7', 'two'), assistant: answer('a7'), now: 7 },
      { type: 'select', id: 'c1' },
    );
    const before = state.conversations.c1;
    state = chatReducer(state, { type: 'delete', id: 'c1' });
    expect(state.conversations.c1).toBeUndefined();
    expect(state.undo?.label).toBe('Deleted “Hi”');
    state = chatReducer(state, { type: 'undo' });
    expect(state.conversations.c1).toBe(before);
    expect(state.activeId).toBe('c1');
    expect(state.order).toEqual(['c2', 'c1']);
    expect(state.undo).toBeNull();
  });

  it('an answer running when its conversation was deleted comes back stopped', () => {
    let state = chatReducer(twoTurns(), { type: 'delete', id: 'c1' });
    state = chatReducer(state, { type: 'undo' });
    expect(messagesOf(state)[3]).toMatchObject({ status: 'stopped', content: 'Partial' });
  });

  it('delete all, then undo brings every conversation back', () => {
    let state = apply(settled(), { type: 'new' }, { type: 'send', conversationId: 'c2', user: user('u7', 'two'), assistant: answer('a7'), now: 7 });
    state = chatReducer(state, { type: 'deleteAll' });
    expect(state.order).toEqual([]);
    expect(state.undo?.label).toBe('Deleted 2 conversations');
    state = chatReducer(state, { type: 'undo' });
    expect(state.order).toEqual(['c2', 'c1']);
  });

  it('the toast timing out dismisses only its own entry', () => {
    const state = chatReducer(settled(), { type: 'delete', id: 'c1' });
    const id = state.undo?.id ?? -1;
    expect(chatReducer(state, { type: 'undo/dismiss', id: id + 1 })).toBe(state);
    expect(chatReducer(state, { type: 'undo/dismiss', id }).undo).toBeNull();
  });

  it('a single message goes, and what followed it moves up; Undo puts it back', () => {
    const before = settled();
    const state = chatReducer(before, { type: 'deleteMessage', conversationId: 'c1', messageId: 'a1' });
    expect(ids(state)).toEqual(['u1', 'u2', 'a2']);
    expect(state.undo?.label).toBe('Deleted the answer');
    expect(chatReducer(state, { type: 'undo' }).conversations.c1).toBe(before.conversations.c1);
  });

  it('deleting one of several versions goes with its replies and shows a neighbour', () => {
    const state = apply(
      settled(),
      { type: 'edit', conversationId: 'c1', messageId: 'u1', user: user('u9', 'Hey'), assistant: answer('a9'), now: 9 },
      { type: 'answer/finished', ...ref('a9'), finishReason: 'stop' },
      { type: 'deleteMessage', conversationId: 'c1', messageId: 'u9' },
    );
    expect(ids(state)).toEqual(['u1', 'a1', 'u2', 'a2']);
    expect(versions(state, 0)).toBe('1/1');
    expect(state.conversations.c1?.offPath?.a9).toBeUndefined();
  });

  it('nothing is deleted from a conversation while its answer runs', () => {
    const running = twoTurns();
    expect(chatReducer(running, { type: 'deleteMessage', conversationId: 'c1', messageId: 'u1' })).toBe(running);
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

  it('keeps its own system prompt, which goes first in the history', () => {
    let state = chatReducer(loaded, { type: 'send', conversationId: 'c1', user: user('u1', 'Hi'), assistant: answer('a1'), now: 1, systemPrompt: 'Be brief.' });
    const c = () => state.conversations.c1 as Conversation;
    expect(historyBefore(c(), 'a1', 'global')[0]).toEqual({ role: 'system', content: 'Be brief.' });
    state = chatReducer(state, { type: 'systemPrompt', conversationId: 'c1', text: 'Be long.' });
    expect(historyBefore(c(), 'a1')[0]).toEqual({ role: 'system', content: 'Be long.' });
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
