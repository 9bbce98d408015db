/**
 * The page's messages in each door's shape: attached files as text parts with their names,
 * an answer's tool calls and the results typed for them. tokenpipe.v1 takes `content` text
 * only (the parts joined with newlines, as every door joins them).
 */
import type { WireMessage } from './types';

/** tokenpipe.v1: text content; tool calls and results as they are. */
export function tokenpipeMessages(messages: readonly WireMessage[]): WireMessage[] {
  return messages.map(({ parts: _parts, ...message }) => message);
}

/** Chat Completions: a message with parts sends them as `text` content parts. */
export function chatMessages(messages: readonly WireMessage[]): Record<string, unknown>[] {
  return messages.map(({ parts, ...message }) => (parts ? { ...message, content: parts.map((text) => ({ type: 'text', text })) } : message));
}

/** Responses: input items; calls and their results are items of their own. */
export function responsesInput(messages: readonly WireMessage[]): Record<string, unknown>[] {
  return messages.flatMap((m): Record<string, unknown>[] => {
    if (m.role === 'tool') return [{ type: 'function_call_output', call_id: m.tool_call_id, output: m.content }];
    const kind = m.role === 'assistant' ? 'output_text' : 'input_text';
    const content = m.parts ? m.parts.map((text) => ({ type: kind, text })) : m.content;
    const calls = (m.tool_calls ?? []).map((c) => ({ type: 'function_call', call_id: c.id, name: c.function.name, arguments: c.function.arguments }));
    return [...(m.content || !calls.length ? [{ type: 'message', role: m.role, content }] : []), ...calls];
  });
}

function parsedInput(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return {};
  }
}

/** Anthropic's messages (count_tokens): calls are tool_use blocks, results tool_result blocks in a user turn. */
export function anthropicMessages(messages: readonly WireMessage[]): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const m of messages) {
    if (m.role === 'system') continue;
    if (m.role === 'tool') {
      const block = { type: 'tool_result', tool_use_id: m.tool_call_id, content: m.content };
      const last = out[out.length - 1];
      // The results of one answer's calls go together, in one user turn.
      if (last?.role === 'user' && Array.isArray(last.content) && last.content.every((b: { type?: string }) => b.type === 'tool_result')) last.content.push(block);
      else out.push({ role: 'user', content: [block] });
      continue;
    }
    if (m.role === 'assistant' && m.tool_calls?.length) {
      const calls = m.tool_calls.map((c) => ({ type: 'tool_use', id: c.id, name: c.function.name, input: parsedInput(c.function.arguments) }));
      out.push({ role: 'assistant', content: [...(m.content ? [{ type: 'text', text: m.content }] : []), ...calls] });
      continue;
    }
    out.push({ role: m.role, content: m.parts ? m.parts.map((text) => ({ type: 'text', text })) : m.content });
  }
  return out;
}
