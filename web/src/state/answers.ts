/** The life of one answer: running or not, what can go on, and how events change it (pure). */
import type { AnswerStatus, ChatAction, Message } from './conversations';
import { mergeCalls } from './parts';
import { withReport } from './progress';

const RUNNING: ReadonlySet<AnswerStatus | undefined> = new Set<AnswerStatus | undefined>(['waiting', 'streaming']);

export function isRunning(message: Message): boolean {
  return message.role === 'assistant' && RUNNING.has(message.status);
}

/**
 * An answer the model can go on with (assistant prefill): one that ended short (cut at the
 * token limit, stopped, interrupted, failed) or that the user edited, with some text.
 */
export function canContinue(message: Message): boolean {
  if (message.role !== 'assistant' || message.content.trim() === '') return false;
  if (message.edited) return !isRunning(message);
  return SHORT.has(message.status) || (message.status === 'done' && message.finishReason === 'length');
}

const SHORT: ReadonlySet<AnswerStatus | undefined> = new Set<AnswerStatus | undefined>(['stopped', 'interrupted', 'error']);

/** The answer `old` as the user rewrote it: a new version of that turn, which Continue goes on from. */
export function editedAnswer(old: Message, content: string, id: string, now: number): Message {
  return { id, role: 'assistant', content, createdAt: now, status: 'done', edited: true, ...(old.model ? { model: old.model } : {}) };
}

/** A prefill report: the answer is out of the queue, reading its prompt. */
export function progressed(m: Message, done: number, total: number, at: number): Message {
  const { queuePosition: _q, ...rest } = m;
  return { ...rest, status: 'waiting', prefill: withReport(m.prefill, done, total, at) };
}

/** An answer that left the queue or ended: its queue place and prefill say nothing any more. */
export function settle(message: Message, fields: Partial<Message>): Message {
  const { queuePosition: _dropped, prefill: _read, ...rest } = message;
  return { ...rest, ...fields };
}

/** Events that arrive after an answer settled (a late delta after Stop) change nothing. */
export function whileRunning(update: (message: Message) => Message): (message: Message) => Message {
  return (message) => (isRunning(message) ? update(message) : message);
}

/** One batch of deltas: text, thinking and call fragments, each where it belongs. */
export function appended(m: Message, action: Extract<ChatAction, { type: 'answer/append' }>): Message {
  const next: Message = {
    ...settle(m, {}),
    status: 'streaming',
    content: m.content + action.text,
    streamedTokens: (m.streamedTokens ?? 0) + (action.deltas ?? 1),
    ...((m.firstTokenAt ?? action.at) !== undefined ? { firstTokenAt: m.firstTokenAt ?? action.at } : {}),
    ...(m.resume && action.seq !== undefined ? { resume: { ...m.resume, seq: action.seq } } : {}),
  };
  if (action.reasoning) {
    next.reasoning = (m.reasoning ?? '') + action.reasoning;
    const startedAt = m.reasoningStartedAt ?? action.at;
    if (startedAt !== undefined) next.reasoningStartedAt = startedAt;
  }
  if (action.calls?.length) next.toolCalls = mergeCalls(m.toolCalls, action.calls);
  // The thinking is over once the answer itself (text or a call) begins.
  const answerBegan = action.text !== '' || (action.calls?.length ?? 0) > 0;
  if (answerBegan && next.reasoning && next.reasoningEndedAt === undefined && action.at !== undefined) next.reasoningEndedAt = action.at;
  return next;
}

/** A settled answer: nothing left to resume, and thinking that was still going ends here. */
export function ended(message: Message, at: number | undefined): Message {
  const done = dropResume(message);
  return done.reasoning && done.reasoningEndedAt === undefined && at !== undefined ? { ...done, reasoningEndedAt: at } : done;
}

/** A settled answer has nothing left to resume. */
function dropResume(message: Message): Message {
  const { resume: _gone, ...rest } = message;
  return rest;
}
