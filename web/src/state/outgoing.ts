/**
 * What one message of the conversation sends to the model: a question with its files as
 * text parts, an answer with the tool calls it made and the results the user typed for them.
 */
import type { WireMessage } from '../api/types';
import { messageParts, partsText } from './attachments';
import type { Message } from './conversations';
import type { ToolCall } from './parts';

/** A call's id as sent back: the server's, else one made from its place (a REST answer may have none). */
export function callId(call: ToolCall): string {
  return call.id ?? `call_${call.index}`;
}

/** Every call of the answer has a result typed by the user. */
export function allAnswered(message: Message): boolean {
  const calls = message.toolCalls ?? [];
  return calls.length > 0 && calls.every((call) => message.toolResults?.[callId(call)] !== undefined);
}

/** The wire messages of one message of the path (none for an empty answer that made no answered calls). */
export function outgoing(message: Message): WireMessage[] {
  if (message.role === 'user') {
    if (!message.attachments?.length) return [{ role: 'user', content: message.content }];
    const parts = messageParts(message.content, message.attachments);
    return [{ role: 'user', content: partsText(parts), parts }];
  }
  // Calls go back only with their results: a call nobody answered is not part of the story.
  if (allAnswered(message)) {
    const calls = message.toolCalls ?? [];
    const made = calls.map((call) => ({ id: callId(call), type: 'function' as const, function: { name: call.name ?? '', arguments: call.arguments } }));
    const results = calls.map((call) => ({ role: 'tool' as const, tool_call_id: callId(call), content: message.toolResults?.[callId(call)] ?? '' }));
    return [{ role: 'assistant', content: message.content, tool_calls: made }, ...results];
  }
  return message.content ? [{ role: 'assistant', content: message.content }] : [];
}
