/**
 * Conversations as pure data and one reducer over them: sending, editing, regenerating,
 * and the life of each answer (waiting → streaming → done / stopped / error / interrupted).
 */
import type { ApiError, FinishReason, ResumePoint, TransportKind } from '../api/types';
import { addVersion, allMessages, removeMessage, stepVersion, switchVersion } from './branches';
import { withDropped } from './context';
import { appended, canContinue, ended, isRunning, progressed, settle, whileRunning } from './answers';
import type { ToolCall, ToolCallPiece } from './parts';
import type { PrefillProgress } from './progress';
import type { Attachment } from './attachments';
import type { ConversationSettings } from './conversationSettings';
import { allAnswered } from './outgoing';
import { titleFrom } from './history';

export { canContinue, editedAnswer, isRunning } from './answers';
export { continuationOf, historyBefore, titleFrom } from './history';

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
  /** A long prompt's prefill while the answer waits for its first token. */
  prefill?: PrefillProgress;
  /** When this answer was last asked for (Date.now; a Continue asks again): the wait is timed from it. */
  requestedAt?: number;
  finishReason?: FinishReason;
  error?: ApiError;
  /** Why an answer was interrupted, in words. */
  note?: string;
  model?: string;
  stats?: AnswerStats;
  /** A resumable answer's stream token (or background response id) and the seq of the last delta in `content`. */
  resume?: ResumePoint;
  /** Deltas received so far and when the first came (Date.now), for the live figures. */
  streamedTokens?: number;
  firstTokenAt?: number;
  /** Why this answer cannot be resumed: offer to retry from here. */
  unresumable?: boolean;
  /** The model's thinking before the answer (the reasoning channel), and when it came (Date.now). */
  reasoning?: string;
  reasoningStartedAt?: number;
  /** When the thinking ended: the first text or call after it, or the end of the answer. */
  reasoningEndedAt?: number;
  /** The user rewrote this answer: Continue goes on from their text. */
  edited?: boolean;
  /** The calls the model made; this page runs none of them, the user may type their results. */
  toolCalls?: ToolCall[];
  /** The results the user typed, by call id (state/outgoing.ts callId). */
  toolResults?: Record<string, string>;
  /** A question's files and long pastes, sent as text parts with their names. */
  attachments?: Attachment[];
}

export interface Conversation {
  id: string;
  title: string;
  createdAt: number;
  updatedAt: number;
  /** The branch in view, first to last. */
  messages: Message[];
  /** The messages of the other branches, by id (state/branches.ts). */
  offPath?: Record<string, Message>;
  /** The replies to each message ('' for the first turn), oldest first: versions of a turn. */
  children?: Record<string, string[]>;
  /** The reply each message showed last. */
  chosen?: Record<string, string>;
  /** This conversation's own system prompt, shown at its top. */
  systemPrompt?: string;
  /** Messages dropped from the model's context (the oldest turns): shown folded, never sent. */
  dropped?: string[];
  /** When turns were last dropped (Date.now): answers before it counted them in their usage. */
  droppedAt?: number;
  /** Settings of this conversation alone; the global ones fill the rest. */
  settings?: ConversationSettings;
}

/** What the Undo toast can bring back: the conversations as they were before. */
export interface UndoEntry {
  id: number;
  label: string;
  conversations: Conversation[];
  activeId: string | null;
}

export interface ChatState {
  conversations: Record<string, Conversation>;
  /** Ids, most recently updated first. */
  order: string[];
  /** null: a new conversation that exists once its first message is sent. */
  activeId: string | null;
  loaded: boolean;
  undo: UndoEntry | null;
}

export const initialChatState: ChatState = { conversations: {}, order: [], activeId: null, loaded: false, undo: null };

interface AnswerRef {
  conversationId: string;
  messageId: string;
}

export type ChatAction =
  | { type: 'hydrate'; conversations: Conversation[]; activeId?: string | null }
  | { type: 'new' }
  | { type: 'select'; id: string }
  | { type: 'delete'; id: string }
  | { type: 'deleteAll' }
  | { type: 'deleteMessage'; conversationId: string; messageId: string }
  | { type: 'undo' }
  | { type: 'undo/dismiss'; id: number }
  | { type: 'version'; conversationId: string; messageId: string; step: -1 | 1 }
  | { type: 'systemPrompt'; conversationId: string; text: string }
  /** This conversation's own settings (null: back to the global ones). */
  | { type: 'conversationSettings'; conversationId: string; settings: ConversationSettings | null }
  /** The results typed for every call of the answer `messageId`, and the answer that reads them. */
  | { type: 'toolResults'; conversationId: string; messageId: string; results: Record<string, string>; assistant: Message; now: number }
  /** Take these messages (the oldest turns) out of the context; they stay in view, folded. */
  | { type: 'dropTurns'; conversationId: string; messageIds: string[]; now: number }
  | { type: 'send'; conversationId: string; user: Message; assistant: Message; now: number; systemPrompt?: string }
  /** `user` is the new version of the message `messageId`. */
  | { type: 'edit'; conversationId: string; messageId: string; user: Message; assistant: Message; now: number }
  /** A new version of the answer `messageId` (default: the last one). */
  | { type: 'regenerate'; conversationId: string; messageId?: string; assistant: Message; now: number }
  /** Go on with a partial answer that cannot be resumed: it is sent back as the start of the turn. */
  | ({ type: 'answer/continue'; at?: number } & AnswerRef)
  /** A new version of the answer `messageId` with the user's text (`answer` from editedAnswer). */
  | { type: 'editAnswer'; conversationId: string; messageId: string; answer: Message; now: number }
  | ({ type: 'answer/queued'; position: number } & AnswerRef)
  | ({ type: 'answer/progress'; done: number; total: number; at: number } & AnswerRef)
  | ({ type: 'answer/started'; model?: string; stream?: string; resumeKind?: 'response' } & AnswerRef)
  | ({ type: 'answer/append'; text: string; seq?: number; deltas?: number; at?: number; reasoning?: string; calls?: ToolCallPiece[] } & AnswerRef)
  | ({ type: 'answer/finished'; finishReason: FinishReason; stats?: AnswerStats; at?: number } & AnswerRef)
  | ({ type: 'answer/failed'; error: ApiError; stats?: AnswerStats; at?: number } & AnswerRef)
  | ({ type: 'answer/interrupted'; reason: string; unresumable?: boolean; stats?: AnswerStats; at?: number } & AnswerRef);

function touch(state: ChatState, conversation: Conversation): ChatState {
  return {
    ...state,
    conversations: { ...state.conversations, [conversation.id]: conversation },
    order: [conversation.id, ...state.order.filter((id) => id !== conversation.id)],
    // The conversation moved on: bringing its old copy back would lose that.
    undo: state.undo?.conversations.some((c) => c.id === conversation.id) ? null : state.undo,
  };
}

function replace(state: ChatState, conversation: Conversation): ChatState {
  return { ...state, conversations: { ...state.conversations, [conversation.id]: conversation } };
}

function updateAnswer(state: ChatState, ref: AnswerRef, update: (message: Message) => Message): ChatState {
  const conversation = state.conversations[ref.conversationId];
  if (!conversation) return state;
  const index = conversation.messages.findIndex((message) => message.id === ref.messageId);
  const message = index >= 0 ? conversation.messages[index] : conversation.offPath?.[ref.messageId];
  if (!message) return state;
  const updated = update(message);
  if (updated === message) return state;
  if (index < 0) return replace(state, { ...conversation, offPath: { ...conversation.offPath, [message.id]: updated } });
  const messages = conversation.messages.slice();
  messages[index] = updated;
  // Only the changed message gets a new identity, so memoised siblings do not re-render.
  return replace(state, { ...conversation, messages });
}

/** Running answers of a conversation settled with `fields`; those `keep` accepts stay. */
function settleRunning(conversation: Conversation, fields: Partial<Message>, keep: (m: Message) => boolean = () => false): Conversation {
  if (!allMessages(conversation).some((m) => isRunning(m) && !keep(m))) return conversation;
  const fix = (m: Message) => (isRunning(m) && !keep(m) ? settle(m, fields) : m);
  const offPath = conversation.offPath ? Object.fromEntries(Object.entries(conversation.offPath).map(([id, m]) => [id, fix(m)])) : undefined;
  return { ...conversation, messages: conversation.messages.map(fix), ...(offPath ? { offPath } : {}) };
}

/**
 * An answer that was running when the page went away goes on (the page resumes it, or asks
 * again where it had no token yet); one off the branch in view is settled as interrupted.
 */
function hydrated(conversation: Conversation): Conversation {
  return settleRunning(conversation, { status: 'interrupted', note: 'The page was closed while this answer was arriving.' }, (m) => conversation.messages.includes(m));
}

function withUndo(state: ChatState, label: string, conversations: Conversation[]): UndoEntry {
  return { id: (state.undo?.id ?? 0) + 1, label, conversations, activeId: state.activeId };
}

function editOrRegenerate(state: ChatState, action: Extract<ChatAction, { type: 'edit' | 'regenerate' }>): ChatState {
  const conversation = state.conversations[action.conversationId];
  if (!conversation) return state;
  const path = conversation.messages;
  if (action.type === 'edit') {
    const index = path.findIndex((m) => m.id === action.messageId && m.role === 'user');
    if (index < 0) return state;
    const next = addVersion(conversation, index, action.user, [action.assistant]);
    const title = index === 0 ? titleFrom(action.user.content) : conversation.title;
    return touch(state, { ...next, title, updatedAt: action.now });
  }
  let index = action.messageId ? path.findIndex((m) => m.id === action.messageId && m.role === 'assistant') : path.length - 1;
  if (index < 0) return state;
  if (path[index]?.role !== 'assistant') index += 1; // the last turn was a question: answer it
  const before = path[index - 1];
  if (!before || (before.role !== 'user' && !allAnswered(before))) return state; // nothing was asked
  return touch(state, { ...addVersion(conversation, index, action.assistant), updatedAt: action.now });
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
      return { ...state, conversations, order, activeId, loaded: true };
    }
    case 'new':
      return { ...state, activeId: null };
    case 'select':
      return state.conversations[action.id] ? { ...state, activeId: action.id } : state;
    case 'delete': {
      const gone = state.conversations[action.id];
      if (!gone) return state;
      const { [action.id]: _removed, ...conversations } = state.conversations;
      return {
        ...state,
        conversations,
        order: state.order.filter((id) => id !== action.id),
        activeId: state.activeId === action.id ? null : state.activeId,
        undo: withUndo(state, `Deleted “${gone.title}”`, [gone]),
      };
    }
    case 'deleteAll': {
      const all = state.order.flatMap((id) => state.conversations[id] ?? []);
      if (all.length === 0) return state;
      return { ...state, conversations: {}, order: [], activeId: null, undo: withUndo(state, `Deleted ${all.length} conversations`, all) };
    }
    case 'deleteMessage': {
      const conversation = state.conversations[action.conversationId];
      const index = conversation?.messages.findIndex((m) => m.id === action.messageId) ?? -1;
      if (!conversation || index < 0 || conversation.messages.some(isRunning)) return state;
      const label = conversation.messages[index]?.role === 'user' ? 'Deleted your message' : 'Deleted the answer';
      return { ...replace(state, removeMessage(conversation, index)), undo: withUndo(state, label, [conversation]) };
    }
    case 'undo': {
      const entry = state.undo;
      if (!entry) return state;
      // An answer that was running when its conversation went was stopped then.
      const back = entry.conversations.map((c) => settleRunning(c, { status: 'stopped' }));
      const conversations = { ...state.conversations, ...Object.fromEntries(back.map((c) => [c.id, c])) };
      const order = Object.values(conversations)
        .sort((a, b) => b.updatedAt - a.updatedAt)
        .map((c) => c.id);
      const activeId = entry.activeId && conversations[entry.activeId] ? entry.activeId : state.activeId;
      return { ...state, conversations, order, activeId, undo: null };
    }
    case 'undo/dismiss':
      return state.undo?.id === action.id ? { ...state, undo: null } : state;
    case 'version': {
      const conversation = state.conversations[action.conversationId];
      const index = conversation?.messages.findIndex((m) => m.id === action.messageId) ?? -1;
      const target = conversation && index >= 0 ? stepVersion(conversation, index, action.step) : undefined;
      if (!conversation || target === undefined || conversation.messages.some(isRunning)) return state;
      const next = switchVersion(conversation, index, target);
      const title = index === 0 && next.messages[0] ? titleFrom(next.messages[0].content) : next.title;
      return replace(state, { ...next, title });
    }
    case 'dropTurns': {
      const conversation = state.conversations[action.conversationId];
      const next = conversation && !conversation.messages.some(isRunning) ? withDropped(conversation, action.messageIds, action.now) : conversation;
      return next && next !== conversation ? replace(state, next) : state;
    }
    case 'systemPrompt': {
      const conversation = state.conversations[action.conversationId];
      return conversation ? replace(state, { ...conversation, systemPrompt: action.text }) : state;
    }
    case 'conversationSettings': {
      const conversation = state.conversations[action.conversationId];
      if (!conversation) return state;
      const { settings: _old, ...rest } = conversation;
      return replace(state, action.settings ? { ...rest, settings: action.settings } : rest);
    }
    case 'toolResults': {
      const conversation = state.conversations[action.conversationId];
      const index = conversation?.messages.findIndex((m) => m.id === action.messageId) ?? -1;
      const answered = conversation?.messages[index];
      if (!conversation || !answered?.toolCalls?.length || index !== conversation.messages.length - 1 || conversation.messages.some(isRunning)) return state;
      const messages = conversation.messages.slice();
      messages[index] = { ...answered, toolResults: action.results };
      return touch(state, { ...addVersion({ ...conversation, messages }, index + 1, action.assistant), updatedAt: action.now });
    }
    case 'send': {
      const existing = state.conversations[action.conversationId];
      const base: Conversation = existing ?? {
        id: action.conversationId,
        title: titleFrom(action.user.content || (action.user.attachments?.[0]?.name ?? '')),
        createdAt: action.now,
        updatedAt: action.now,
        messages: [],
        ...(action.systemPrompt?.trim() ? { systemPrompt: action.systemPrompt } : {}),
      };
      const conversation = addVersion(base, base.messages.length, action.user, [action.assistant]);
      return { ...touch(state, { ...conversation, updatedAt: action.now }), activeId: conversation.id };
    }
    case 'edit':
    case 'regenerate':
      return editOrRegenerate(state, action);
    case 'editAnswer': {
      const conversation = state.conversations[action.conversationId];
      const index = conversation?.messages.findIndex((m) => m.id === action.messageId && m.role === 'assistant') ?? -1;
      if (!conversation || index < 0 || conversation.messages.some(isRunning)) return state;
      return touch(state, { ...addVersion(conversation, index, action.answer), updatedAt: action.now });
    }
    case 'answer/continue': {
      const conversation = state.conversations[action.conversationId];
      if (!conversation || conversation.messages.some(isRunning)) return state;
      return updateAnswer(state, action, (m) => {
        if (!canContinue(m)) return m;
        const { note: _n, unresumable: _u, error: _e, stats: _s, streamedTokens: _t, firstTokenAt: _f, finishReason: _r, edited: _d, ...rest } = m;
        return { ...rest, status: 'waiting', ...(action.at !== undefined ? { requestedAt: action.at } : {}) };
      });
    }
    case 'answer/queued':
      return updateAnswer(state, action, whileRunning((m) => ({ ...m, status: 'waiting', queuePosition: action.position })));
    case 'answer/progress':
      return updateAnswer(
        state,
        action,
        whileRunning((m) => progressed(m, action.done, action.total, action.at)),
      );
    case 'answer/started':
      return updateAnswer(
        state,
        action,
        whileRunning((m) =>
          settle(m, {
            ...(action.model ? { model: action.model } : {}),
            ...(action.stream ? { resume: { stream: action.stream, seq: m.resume?.seq ?? -1, ...(action.resumeKind ? { kind: action.resumeKind } : {}) } } : {}),
          }),
        ),
      );
    case 'answer/append':
      return updateAnswer(state, action, whileRunning((m) => appended(m, action)));
    case 'answer/finished':
      return updateAnswer(
        state,
        action,
        whileRunning((m) =>
          ended(settle(m, { status: action.finishReason === 'cancelled' ? 'stopped' : 'done', finishReason: action.finishReason, stats: action.stats }), action.at),
        ),
      );
    case 'answer/failed':
      return updateAnswer(state, action, whileRunning((m) => ended(settle(m, { status: 'error', error: action.error, stats: action.stats }), action.at)));
    case 'answer/interrupted':
      return updateAnswer(
        state,
        action,
        whileRunning((m) =>
          ended(settle(m, { status: 'interrupted', note: action.reason, stats: action.stats, ...(action.unresumable ? { unresumable: true } : {}) }), action.at),
        ),
      );
  }
}

