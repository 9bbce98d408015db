import { describe, expect, it } from 'vitest';
import { fileKind, keepEnds, looksBinary, messageParts, partsText, pasteName, refusal } from './attachments';
import { chatReducer, historyBefore, initialChatState, type Message } from './conversations';

describe('attachments', () => {
  it('takes text files by type or name, and refuses images and binaries with a reason', () => {
    expect(fileKind('main.py', '')).toBe('text');
    expect(fileKind('data.csv', 'text/csv')).toBe('text');
    expect(fileKind('server.log', '')).toBe('text');
    expect(fileKind('Dockerfile', '')).toBe('text');
    expect(fileKind('cat.png', 'image/png')).toBe('image');
    expect(fileKind('a.zip', 'application/zip')).toBe('other');
    expect(refusal('notes.md', 'text/markdown', 100, false)).toBeNull();
    expect(refusal('cat.png', 'image/png', 100, false)).toContain('cannot see images');
    expect(refusal('a.zip', 'application/zip', 100, false)).toContain('not a text file');
    expect(refusal('big.log', '', 3 * 1024 * 1024, false)).toContain('3.0 MB');
    expect(looksBinary('abc\u0000def')).toBe(true);
    expect(pasteName([{ name: 'pasted.txt', text: '' }])).toBe('pasted-2.txt');
  });

  it('sends each file as a text part that names it, after the typed text', () => {
    const files = [{ name: 'a.csv', text: 'x,y' }];
    expect(messageParts('Sum it', files)).toEqual(['Sum it', '<file name="a.csv">\nx,y\n</file>']);
    expect(messageParts('', files)).toEqual(['<file name="a.csv">\nx,y\n</file>']);
    expect(partsText(['a', 'b'])).toBe('a\nb'); // as the doors join text parts
    expect(keepEnds('abcdefghij', 2)).toBe('ab\n\n[… 6 characters cut here to fit the context …]\n\nij');
    expect(keepEnds('abc', 2)).toBe('abc');
  });

  it('puts the parts in the history, and a tool loop as calls and results', () => {
    let state = chatReducer(initialChatState, { type: 'hydrate', conversations: [] });
    const question: Message = { id: 'u1', role: 'user', content: 'Weather?', createdAt: 1, attachments: [{ name: 'city.txt', text: 'Paris' }] };
    const asked: Message = { id: 'a1', role: 'assistant', content: '', createdAt: 1, status: 'waiting' };
    state = chatReducer(state, { type: 'send', conversationId: 'c', user: question, assistant: asked, now: 1 });
    state = chatReducer(state, { type: 'answer/append', conversationId: 'c', messageId: 'a1', text: '', calls: [{ index: 0, callId: 'call_1', name: 'get_weather', text: '{"city":"Paris"}' }] });
    state = chatReducer(state, { type: 'answer/finished', conversationId: 'c', messageId: 'a1', finishReason: 'tool_calls' });
    const c = state.conversations.c!;
    const filesOnly = chatReducer(state, { type: 'send', conversationId: 'f', user: { ...question, id: 'u9', content: '' }, assistant: { ...asked, id: 'a9' }, now: 1 });
    expect(filesOnly.conversations.f?.title).toBe('city.txt'); // a message of files alone is named after the first
    // a call nobody answered is not sent back
    expect(historyBefore(c, '')).toEqual([{ role: 'user', content: 'Weather?\n<file name="city.txt">\nParis\n</file>', parts: ['Weather?', '<file name="city.txt">\nParis\n</file>'] }]);
    const next: Message = { id: 'a2', role: 'assistant', content: '', createdAt: 2, status: 'waiting' };
    state = chatReducer(state, { type: 'toolResults', conversationId: 'c', messageId: 'a1', results: { call_1: '18 °C' }, assistant: next, now: 2 });
    const after = state.conversations.c!;
    expect(after.messages.map((m) => m.id)).toEqual(['u1', 'a1', 'a2']);
    expect(historyBefore(after, 'a2').slice(1)).toEqual([
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '18 °C' },
    ]);
    // the answer that read the results can be regenerated (it follows the results, not a question)
    const again = chatReducer(chatReducer(state, { type: 'answer/finished', conversationId: 'c', messageId: 'a2', finishReason: 'stop' }), {
      type: 'regenerate',
      conversationId: 'c',
      assistant: { id: 'a3', role: 'assistant', content: '', createdAt: 3, status: 'waiting' },
      now: 3,
    });
    expect(again.conversations.c!.messages.map((m) => m.id)).toEqual(['u1', 'a1', 'a3']);
    // results only for the last answer, once
    expect(chatReducer(again, { type: 'toolResults', conversationId: 'c', messageId: 'a1', results: {}, assistant: next, now: 4 })).toBe(again);
  });
});
