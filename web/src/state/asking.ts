/** The actions that ask for an answer, and what the overflow offer needs to know of them. */
import type { WireMessage } from '../api/types';
import type { Attachment } from './attachments';
import { historyBefore, type ChatAction, type ChatState, type Conversation } from './conversations';
import { outgoing } from './outgoing';

export type AskAction = Extract<ChatAction, { type: 'send' | 'edit' | 'regenerate' | 'toolResults' }>;

/** The prompt if `draft` were sent now in `conversation` (or in a new one). */
export function promptWithDraft(conversation: Conversation | undefined, systemPrompt: string, draft: string, attachments?: Attachment[]): WireMessage[] {
  const history = conversation ? historyBefore(conversation, '', systemPrompt) : systemPrompt.trim() ? [{ role: 'system' as const, content: systemPrompt }] : [];
  return [...history, ...outgoing({ id: '', role: 'user', content: draft, createdAt: 0, ...(attachments?.length ? { attachments } : {}) })];
}

/** The question an answer-creating action asks, to carry into a new conversation. */
export function questionOf(action: AskAction, state: ChatState): string {
  if (action.type === 'send' || action.type === 'edit') return action.user.content;
  const path = state.conversations[action.conversationId]?.messages ?? [];
  const index = action.messageId ? path.findIndex((m) => m.id === action.messageId) : path.length;
  return path.slice(0, index).reverse().find((m) => m.role === 'user')?.content ?? '';
}

/** The same action, created at `now`. */
export function restamped(action: AskAction, now: number): AskAction {
  const assistant = { ...action.assistant, createdAt: now };
  if (action.type === 'regenerate' || action.type === 'toolResults') return { ...action, assistant, now };
  return { ...action, user: { ...action.user, createdAt: now }, assistant, now };
}
