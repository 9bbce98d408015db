import { describe, expect, it } from 'vitest';
import { answerRoom, idsOf, MIN_ANSWER_ROOM, meterReading, overflows, planDrop, turnsBefore, usedByConversation, withDropped } from './context';
import { chatReducer, historyBefore, initialChatState, type Conversation, type Message } from './conversations';

const user = (id: string, content: string, createdAt = 1): Message => ({ id, role: 'user', content, createdAt });
const answer = (id: string, content: string, promptTokens?: number, completionTokens?: number, createdAt = 1): Message => ({
  id,
  role: 'assistant',
  content,
  createdAt,
  status: 'done',
  ...(promptTokens !== undefined ? { stats: { transport: 'ws', measuredBy: 'server', promptTokens, ...(completionTokens !== undefined ? { completionTokens } : {}) } } : {}),
});

function conversation(messages: Message[], extra: Partial<Conversation> = {}): Conversation {
  return { id: 'c', title: 't', createdAt: 1, updatedAt: 1, messages, ...extra };
}

/** A stand-in for count_tokens: 10 tokens a message plus one a word (the real counts come from the server). */
const count = (messages: { content: string }[]) => messages.reduce((n, m) => n + 10 + m.content.split(/\s+/).filter(Boolean).length, 0);

describe('the meter', () => {
  it('reads used / limit, warns from 80 %, and is full once no minimal answer fits', () => {
    expect(meterReading(512, 1024)).toMatchObject({ used: 512, limit: 1024, percent: 50, level: 'ok' });
    expect(meterReading(820, 1024)).toMatchObject({ percent: 80, level: 'high' });
    expect(meterReading(1024 - MIN_ANSWER_ROOM, 1024)?.level).toBe('high');
    expect(meterReading(1024 - MIN_ANSWER_ROOM + 1, 1024)?.level).toBe('full');
    expect(meterReading(2000, 1024)).toMatchObject({ fraction: 1, percent: 100, level: 'full' });
    expect(meterReading(100, 1024, 1000)?.level).toBe('full'); // max tokens 1000 must fit whole
    expect(meterReading(10, 0)).toBeNull();
  });

  it('takes the last answer\'s usage (prompt + completion), not a dropped one\'s or a stale one', () => {
    const c = conversation([user('u1', 'hi'), answer('a1', 'hello', 30, 20), user('u2', 'more'), answer('a2', 'sure', 80, 40)]);
    expect(usedByConversation(c)).toBe(120);
    expect(usedByConversation(conversation([user('u1', 'hi'), answer('a1', '')]))).toBeNull();
    expect(usedByConversation(undefined)).toBeNull();
    // after a drop the usage counted turns that are gone: unknown until the next answer
    const dropped = withDropped(c, ['u1', 'a1'], 5);
    expect(usedByConversation(dropped)).toBeNull();
    const next = { ...dropped, messages: [...dropped.messages, user('u3', 'again', 6), answer('a3', 'ok', 70, 10, 6)] };
    expect(usedByConversation(next)).toBe(80);
  });
});

describe('overflow', () => {
  it('needs room for max tokens when set, else the minimal room of fit', () => {
    expect(answerRoom(null)).toBe(MIN_ANSWER_ROOM);
    expect(answerRoom(300)).toBe(300);
    expect(overflows(1024 - MIN_ANSWER_ROOM, 1024, null)).toBe(false);
    expect(overflows(1024 - MIN_ANSWER_ROOM + 1, 1024, null)).toBe(true);
    expect(overflows(700, 1024, 300)).toBe(false);
    expect(overflows(725, 1024, 300)).toBe(true);
  });
});

describe('which turns drop', () => {
  const path = [
    user('u1', 'one two three four five six seven eight nine ten'),
    answer('a1', 'an answer of twenty words ' + 'word '.repeat(15)),
    user('u2', 'second question'),
    answer('a2', 'second answer ' + 'word '.repeat(18)),
    user('u3', 'third question'),
    answer('a3', 'third answer'),
    user('u4', 'the new question'),
    answer('a4', ''),
  ];
  const c = conversation(path, { systemPrompt: 'Be brief.' });

  it('lists the kept turns before the question, oldest first, numbered as shown', () => {
    const turns = turnsBefore(c, 6);
    expect(turns.map((t) => t.ids)).toEqual([['u1', 'a1'], ['u2', 'a2'], ['u3', 'a3']]);
    expect(turns.map((t) => t.number)).toEqual([1, 2, 3]);
    const later = turnsBefore(withDropped(c, ['u1', 'a1'], 2), 6);
    expect(later.map((t) => t.ids)).toEqual([['u2', 'a2'], ['u3', 'a3']]);
    expect(later[0]?.number).toBe(2);
  });

  it('drops the fewest oldest turns that make it fit, and keeps the system prompt', async () => {
    const turns = turnsBefore(c, 6);
    const prompt = (k: number) => historyBefore(c, 'a4', '', idsOf(turns, k));
    const asked: number[] = [];
    const countWithout = async (k: number) => {
      asked.push(k);
      return count(prompt(k));
    };
    // 141 tokens in all; the oldest turns weigh 50, 42 and 24
    expect([0, 1, 2, 3].map((k) => count(prompt(k)))).toEqual([141, 91, 49, 25]);
    // room for the answer: 64, so a context of 160 takes one turn gone, 120 two, 100 three
    const one = await planDrop(turns, countWithout, 160, null);
    expect(one?.count).toBe(1);
    expect(one?.promptTokens).toBe(91);
    const two = await planDrop(turns, countWithout, 120, null);
    expect(two?.turns.map((t) => t.ids)).toEqual([['u1', 'a1'], ['u2', 'a2']]);
    expect((await planDrop(turns, countWithout, 100, null))?.count).toBe(3);
    // an explicit max tokens must fit whole: 300 of room needs all three gone at 330
    expect((await planDrop(turns, countWithout, 330, 300))?.count).toBe(3);
    expect(prompt(2)[0]).toEqual({ role: 'system', content: 'Be brief.' });
    expect(prompt(2).map((m) => m.content)).not.toContain('second question');
    asked.length = 0;
    await planDrop(turns, countWithout, 160, null);
    expect(asked.length).toBeLessThanOrEqual(1 + Math.ceil(Math.log2(turns.length)));
    // the new question alone does not fit: nothing to offer but a shorter message
    expect(await planDrop(turns, countWithout, 80, null)).toBeNull();
  });

  it('dropped turns stay in the conversation but leave the prompt', () => {
    let state = chatReducer(initialChatState, { type: 'hydrate', conversations: [conversation(path.slice(0, 6))] });
    state = chatReducer(state, { type: 'dropTurns', conversationId: 'c', messageIds: ['u1', 'a1', 'nope'], now: 9 });
    const kept = state.conversations.c as Conversation;
    expect(kept.messages).toHaveLength(6);
    expect(kept.dropped).toEqual(['u1', 'a1']);
    expect(kept.droppedAt).toBe(9);
    expect(historyBefore(kept, '').map((m) => m.content)).toEqual(path.slice(2, 6).map((m) => m.content));
    // dropping them again changes nothing
    expect(chatReducer(state, { type: 'dropTurns', conversationId: 'c', messageIds: ['u1'], now: 10 })).toBe(state);
  });
});
