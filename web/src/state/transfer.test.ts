import { describe, expect, it } from 'vitest';
import { chatReducer, initialChatState, type Conversation, type Message } from './conversations';
import { besideExisting, exportJson, exportMarkdown, fileNameOf, parseExport } from './transfer';

const user = (id: string, content: string): Message => ({ id, role: 'user', content, createdAt: 1 });
const answer = (id: string, content: string, extra: Partial<Message> = {}): Message => ({ id, role: 'assistant', content, createdAt: 2, status: 'done', ...extra });

function sample(): Conversation {
  let state = chatReducer(initialChatState, { type: 'hydrate', conversations: [] });
  state = chatReducer(state, { type: 'send', conversationId: 'c1', user: { ...user('u1', 'Sum this'), attachments: [{ name: 'data.csv', text: 'a,b\n1,2', tokens: 9 }] }, assistant: answer('a1', 'First'), now: 1, systemPrompt: 'Be brief.' });
  state = chatReducer(state, { type: 'regenerate', conversationId: 'c1', assistant: answer('a2', 'Second ``` fence'), now: 2 });
  state = chatReducer(state, { type: 'conversationSettings', conversationId: 'c1', settings: { temperature: 0.2, think: true } });
  return state.conversations.c1!;
}

describe('export and import', () => {
  it('round-trips every version, the files and the settings through JSON', () => {
    const conversation = sample();
    const parsed = parseExport(exportJson([conversation], 5));
    expect(parsed).toEqual({ conversations: [conversation] });
  });

  it('refuses what it cannot read, in words, and takes nothing of it', () => {
    expect(parseExport('nope')).toEqual({ error: 'the file is not JSON' });
    expect(parseExport('{"conversations": []}')).toMatchObject({ error: expect.stringContaining('not an export of this page') });
    expect(parseExport('{"format": "tokenpipe.conversations", "version": 9, "conversations": []}')).toMatchObject({ error: expect.stringContaining('version 9') });
    const bad = { format: 'tokenpipe.conversations', version: 1, conversations: [{ id: 'x', messages: [{ id: 'm', role: 'robot', content: '' }] }] };
    expect(parseExport(JSON.stringify(bad))).toEqual({ error: 'conversation 1, message 1 has no role user or assistant' });
  });

  it('settles an answer that was arriving, drops unknown settings, and never overwrites', () => {
    const running = { format: 'tokenpipe.conversations', version: 1, conversations: [{ id: 'c1', title: 'T', messages: [user('u', 'q'), answer('a', 'part', { status: 'streaming', resume: { stream: 's', seq: 3 } })], settings: { temperature: 'hot', topP: 0.5, apiKey: 'k' } }] };
    const parsed = parseExport(JSON.stringify(running));
    if (!('conversations' in parsed)) throw new Error(parsed.error);
    const [c] = parsed.conversations;
    expect(c?.messages[1]).toMatchObject({ status: 'interrupted', unresumable: true });
    expect(c?.settings).toEqual({ temperature: null, topP: 0.5 });
    const placed = besideExisting(parsed.conversations, new Set(['c1']), () => 'c9');
    expect(placed.map((p) => p.id)).toEqual(['c9']);
  });

  it('writes the branch in view as Markdown with its files, and names the file from the title', () => {
    const markdown = exportMarkdown(sample());
    expect(markdown).toContain('# Sum this');
    expect(markdown).toContain('> Be brief.');
    expect(markdown).toContain('<file name="data.csv">\na,b\n1,2\n</file>');
    expect(markdown).toContain('## Assistant\n\nSecond ``` fence');
    expect(markdown).not.toContain('First'); // the branch in view only: the other version is in the JSON
    expect(markdown).toContain('1 other version is in the JSON export only.');
    expect(fileNameOf('Sum this: data.csv!', 'md')).toBe('sum-this-data-csv.md');
  });
});
