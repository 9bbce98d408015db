import { describe, expect, it } from 'vitest';
import { promptWithDraft, questionOf, restamped, type AskAction } from './asking';
import { initialChatState, type ChatState, type Conversation, type Message } from './conversations';

const m = (id: string, role: Message['role'], content: string): Message => ({ id, role, content, createdAt: 1 });
const conversation: Conversation = {
  id: 'c',
  title: 't',
  createdAt: 1,
  updatedAt: 1,
  systemPrompt: 'Be brief.',
  messages: [m('u1', 'user', 'first'), m('a1', 'assistant', 'one'), m('u2', 'user', 'second'), m('a2', 'assistant', 'two')],
  dropped: ['u1', 'a1'],
};
const state: ChatState = { ...initialChatState, conversations: { c: conversation }, order: ['c'], activeId: 'c', loaded: true };

describe('what an overflow offer carries', () => {
  it('counts the draft after the kept history, with the conversation\'s system prompt, or the default in a new one', () => {
    expect(promptWithDraft(conversation, 'ignored', 'next')).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'second' },
      { role: 'assistant', content: 'two' },
      { role: 'user', content: 'next' },
    ]);
    expect(promptWithDraft(undefined, 'Default.', 'hi')).toEqual([{ role: 'system', content: 'Default.' }, { role: 'user', content: 'hi' }]);
    expect(promptWithDraft(undefined, ' ', 'hi')).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it('carries the question: the message sent or edited, or the one a regenerated answer answered', () => {
    const assistant = m('a3', 'assistant', '');
    expect(questionOf({ type: 'send', conversationId: 'c', user: m('u3', 'user', 'new'), assistant, now: 2 }, state)).toBe('new');
    expect(questionOf({ type: 'regenerate', conversationId: 'c', messageId: 'a2', assistant, now: 2 }, state)).toBe('second');
    expect(questionOf({ type: 'regenerate', conversationId: 'c', assistant, now: 2 }, state)).toBe('second');
  });

  it('restamps an action asked again after a drop', () => {
    const action: AskAction = { type: 'send', conversationId: 'c', user: m('u3', 'user', 'new'), assistant: m('a3', 'assistant', ''), now: 2 };
    const again = restamped(action, 9);
    expect(again).toMatchObject({ now: 9, user: { id: 'u3', createdAt: 9 }, assistant: { id: 'a3', createdAt: 9 } });
  });
});
