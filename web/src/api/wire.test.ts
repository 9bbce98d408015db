import { describe, expect, it } from 'vitest';
import type { WireMessage } from './types';
import { anthropicMessages, chatMessages, responsesInput, tokenpipeMessages } from './wire';

const messages: WireMessage[] = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Q\n<file name="a.txt">\nx\n</file>', parts: ['Q', '<file name="a.txt">\nx\n</file>'] },
  { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] },
  { role: 'tool', tool_call_id: 'c1', content: 'one' },
];

describe('messages in each door’s shape', () => {
  it('tokenpipe.v1: text content, calls and results as they are', () => {
    expect(tokenpipeMessages(messages)[1]).toEqual({ role: 'user', content: 'Q\n<file name="a.txt">\nx\n</file>' });
    expect(tokenpipeMessages(messages)[3]).toEqual(messages[3]);
  });

  it('Chat Completions: text parts', () => {
    expect(chatMessages(messages)[1]).toEqual({ role: 'user', content: [{ type: 'text', text: 'Q' }, { type: 'text', text: '<file name="a.txt">\nx\n</file>' }] });
    expect(chatMessages(messages)[2]).toEqual(messages[2]);
  });

  it('Responses: input_text parts, function_call and function_call_output items', () => {
    const input = responsesInput(messages);
    expect(input[1]).toEqual({ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Q' }, { type: 'input_text', text: '<file name="a.txt">\nx\n</file>' }] });
    expect(input.slice(2)).toEqual([
      { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"a":1}' },
      { type: 'function_call_output', call_id: 'c1', output: 'one' },
    ]);
  });

  it("Anthropic's count_tokens: tool_use and tool_result blocks, the system apart", () => {
    expect(anthropicMessages(messages)).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Q' }, { type: 'text', text: '<file name="a.txt">\nx\n</file>' }] },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'c1', name: 'f', input: { a: 1 } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'c1', content: 'one' }] },
    ]);
  });
});
