/**
 * Conversations as pure data and one reducer over them: sending, editing, regenerating,
 * and the life of each answer (waiting → streaming → done / stopped / error / interrupted).
 */
import type { ApiError, FinishReason, TransportKind, WireMessage } from '../api/types';

export type AnswerStatus = 'waiting' | 'streaming' | 'done' | 'stopped' | 'error' | 'interrupted';

export interface AnswerStats {
  transport: TransportKind;
  ttftMs?: number;
  totalMs?: number;
  tokensPerS?: number;
  promptTokens?: number;
  completionTokens?: number;
  queueMs?: number;
  /** Whether the times were measured by the server (tokenpipe.v1 `timing`) or by this page. */
  measuredBy: 'server' | 'browser';
}

export interface Message {
  id: string;
  role: 'user' | 'assistant';
  content: string;
  createdAt: number;
  status?: AnswerStatus;
  queuePosition?: number;
  finishReason?: FinishReason;
  error?: ApiError;
  /** Why an answer was interrupted, in words. */
  note?: string;
  model?: string;
  stats?: AnswerStats;
}

export interface Conversation {
  id: string;
  title: string;
  createdAt: number;
  updatedAt: number;
  messages: Message[];
}

export interface ChatState {
  conversations: Record<string, Conversation>;
  /** Ids, most recently updated first. */
  order: string[];
  /** null: a new conversation that exists once its first message is sent. */
  activeId: string | null;
  loaded: boolean;
}

export const initialChatState: ChatState = { conversations: {}, order: [], activeId: null, loaded: false };

interface AnswerRef {
  conversationId: string;
  messageId: string;
}

export type ChatAction =
  | { type: 'hydrate'; conversations: Conversation[]; activeId?: string | null }
  | { type: 'new' }
  | { type: 'select'; id: string }
  | { type: 'delete'; id: string }
  | { type: 'send'; conversationId: string; user: Message; assistant: Message; now: number }
  | { type: 'edit'; conversationId: string; messageId: string; content: string; assistant: Message; now: number }
  | { type: 'regenerate'; conversationId: string; assistant: Message; now: number }
  | ({ type: 'answer/queued'; position: number } & AnswerRef)
  | ({ type: 'answer/started'; model?: string } & AnswerRef)
  | ({ type: 'answer/append'; text: string } & AnswerRef)
  | ({ type: 'answer/finished'; finishReason: FinishReason; stats?: AnswerStats } & AnswerRef)
  | ({ type: 'answer/failed'; error: ApiError; stats?: AnswerStats } & AnswerRef)
  | ({ type: 'answer/interrupted'; reason: string; stats?: AnswerStats } & AnswerRef);

const RUNNING: ReadonlySet<AnswerStatus | undefined> = new Set<AnswerStatus | undefined>(['waiting', 'streaming']);

export function isRunning(message: Message): boolean {
  return message.role === 'assistant' && RUNNING.has(message.status);
}

export function titleFrom(text: string): string {
  const line = text.trim().split('\n')[0]?.trim() ?? '';
  if (!line) return 'New conversation';
  return line.length > 60 ? `${line.slice(0, 57)}…` : line;
}

/** The messages the model sees for the answer `beforeId`: everything before it, minus failed answers. */
export function historyBefore(conversation: Conversation, beforeId: string, systemPrompt: string): WireMessage[] {
  const history: WireMessage[] = [];
  if (systemPrompt.trim()) history.push({ role: 'system', content: systemPrompt });
  for (const message of conversation.messages) {
    if (message.id === beforeId) break;
    if (message.role === 'assistant' && !message.content) continue;
    history.push({ role: message.role, content: message.content });
  }
  return history;
}

function touch(state: ChatState, conversation: Conversation): ChatState {
  return {
    ...state,
    conversations: { ...state.conversations, [conversation.id]: conversation },
    order: [conversation.id, ...state.order.filter((id) => id !== conversation.id)],
  };
}

function updateAnswer(state: ChatState, ref: AnswerRef, update: (message: Message) => Message): ChatState {
  const conversation = state.conversations[ref.conversationId];
  if (!conversation) return state;
  const index = conversation.messages.findIndex((message) => message.id === ref.messageId);
  const message = conversation.messages[index];
  if (!message) return state;
  const updated = update(message);
  if (updated === message) return state;
  const messages = conversation.messages.slice();
  messages[index] = updated;
  // Only the changed message gets a new identity, so memoised siblings do not re-render.
  return { ...state, conversations: { ...state.conversations, [conversation.id]: { ...conversation, messages } } };
}

/** Events that arrive after an answer settled (a late delta after Stop) change nothing. */
function whileRunning(update: (message: Message) => Message): (message: Message) => Message {
  return (message) => (isRunning(message) ? update(message) : message);
}

function settle(message: Message, fields: Partial<Message>): Message {
  const { queuePosition: _dropped, ...rest } = message;
  return { ...rest, ...fields };
}

function hydrated(conversation: Conversation): Conversation {
  // An answer that was running when the page went away cannot continue.
  if (!conversation.messages.some(isRunning)) return conversation;
  return {
    ...conversation,
    messages: conversation.messages.map((message) =>
      isRunning(message) ? settle(message, { status: 'interrupted', note: 'The page was closed while this answer was arriving.' }) : message,
    ),
  };
}

export function chatReducer(state: ChatState, action: ChatAction): ChatState {
  switch (action.type) {
    case 'hydrate': {
      // A message sent before the stored ones finished loading is kept, and stays in view.
      const conversations = { ...Object.fromEntries(action.conversations.map((c) => [c.id, hydrated(c)])), ...state.conversations };
      const order = Object.values(conversations)
        .sort((a, b) => b.updatedAt - a.updatedAt)
        .map((c) => c.id);
      const wanted = state.activeId ?? action.activeId;
      const activeId = wanted && conversations[wanted] ? wanted : null;
      return { conversations, order, activeId, loaded: true };
    }
    case 'new':
      return { ...state, activeId: null };
    case 'select':
      return state.conversations[action.id] ? { ...state, activeId: action.id } : state;
    case 'delete': {
      if (!state.conversations[action.id]) return state;
      const { [action.id]: _removed, ...conversations } = state.conversations;
      return {
        ...state,
        conversations,
        order: state.order.filter((id) => id !== action.id),
        activeId: state.activeId === action.id ? null : state.activeId,
      };
    }
    case 'send': {
      const existing = state.conversations[action.conversationId];
      const conversation: Conversation = existing
        ? { ...existing, updatedAt: action.now, messages: [...existing.messages, action.user, action.assistant] }
        : {
            id: action.conversationId,
            title: titleFrom(action.user.content),
            createdAt: action.now,
            updatedAt: action.now,
            messages: [action.user, action.assistant],
          };
      return { ...touch(state, conversation), activeId: conversation.id };
    }
    case 'edit': {
      const conversation = state.conversations[action.conversationId];
      const index = conversation?.messages.findIndex((m) => m.id === action.messageId && m.role === 'user') ?? -1;
      const original = conversation?.messages[index];
      if (!conversation || !original) return state;
      const messages = [...conversation.messages.slice(0, index), { ...original, content: action.content }, action.assistant];
      const title = index === 0 ? titleFrom(action.content) : conversation.title;
      return touch(state, { ...conversation, title, updatedAt: action.now, messages });
    }
    case 'regenerate': {
      const conversation = state.conversations[action.conversationId];
      if (!conversation) return state;
      let end = conversation.messages.length;
      while (end > 0 && conversation.messages[end - 1]?.role === 'assistant') end -= 1;
      if (end === 0) return state; // nothing was asked
      const messages = [...conversation.messages.slice(0, end), action.assistant];
      return touch(state, { ...conversation, updatedAt: action.now, messages });
    }
    case 'answer/queued':
      return updateAnswer(state, action, whileRunning((m) => ({ ...m, status: 'waiting', queuePosition: action.position })));
    case 'answer/started':
      return updateAnswer(
        state,
        action,
        whileRunning((m) => settle(m, action.model ? { model: action.model } : {})),
      );
    case 'answer/append':
      return updateAnswer(state, action, whileRunning((m) => ({ ...settle(m, {}), status: 'streaming', content: m.content + action.text })));
    case 'answer/finished':
      return updateAnswer(
        state,
        action,
        whileRunning((m) => settle(m, { status: action.finishReason === 'cancelled' ? 'stopped' : 'done', finishReason: action.finishReason, stats: action.stats })),
      );
    case 'answer/failed':
      return updateAnswer(state, action, whileRunning((m) => settle(m, { status: 'error', error: action.error, stats: action.stats })));
    case 'answer/interrupted':
      return updateAnswer(state, action, whileRunning((m) => settle(m, { status: 'interrupted', note: action.reason, stats: action.stats })));
  }
}
