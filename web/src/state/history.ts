/** What the model is sent for an answer: the history before it, and Continue's prefill; a conversation's title. */
import type { WireMessage } from '../api/types';
import { canContinue } from './answers';
import type { Conversation } from './conversations';
import { outgoing } from './outgoing';

/** The messages for Continue: the history before the answer, then the partial answer as the last, assistant, turn. */
export function continuationOf(conversation: Conversation, messageId: string, fallbackSystemPrompt = ''): WireMessage[] | null {
  const message = conversation.messages.find((m) => m.id === messageId);
  if (!message || !canContinue(message)) return null;
  return [...historyBefore(conversation, messageId, fallbackSystemPrompt), { role: 'assistant', content: message.content }];
}

export function titleFrom(text: string): string {
  const line = text.trim().split('\n')[0]?.trim() ?? '';
  if (!line) return 'New conversation';
  return line.length > 60 ? `${line.slice(0, 57)}…` : line;
}

/**
 * The messages the model sees for the answer `beforeId`: the conversation's system prompt
 * (else `fallbackSystemPrompt`), then the branch in view before it, minus failed answers
 * and the turns dropped from the context (and those in `skip`).
 */
export function historyBefore(conversation: Conversation, beforeId: string, fallbackSystemPrompt = '', skip?: ReadonlySet<string>): WireMessage[] {
  const history: WireMessage[] = [];
  const systemPrompt = conversation.systemPrompt ?? fallbackSystemPrompt;
  if (systemPrompt.trim()) history.push({ role: 'system', content: systemPrompt });
  const dropped = new Set([...(conversation.dropped ?? []), ...(skip ?? [])]);
  for (const message of conversation.messages) {
    if (message.id === beforeId) break;
    if (dropped.has(message.id)) continue; // dropped from the context: shown, not sent
    history.push(...outgoing(message));
  }
  return history;
}
