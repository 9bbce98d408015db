/**
 * How full a conversation's context is, whether the next prompt fits, and which oldest
 * turns to drop so that it does. Pure: the token counts come from the server
 * (count_tokens, or an answer's usage), never from a guess.
 */
import type { Conversation, Message } from './conversations';

/** With max tokens on "fit", the least an answer needs: below it a send is an overflow. */
export const MIN_ANSWER_ROOM = 64;

/** From this share of the context on, the meter warns. */
export const HIGH_FRACTION = 0.8;

export type MeterLevel = 'ok' | 'high' | 'full';

export interface MeterReading {
  used: number;
  limit: number;
  /** 0 to 1, used / limit capped. */
  fraction: number;
  percent: number;
  level: MeterLevel;
}

export function meterReading(used: number, limit: number, room = MIN_ANSWER_ROOM): MeterReading | null {
  if (!(limit > 0) || !(used >= 0)) return null;
  const fraction = Math.min(1, used / limit);
  const level: MeterLevel = used + room > limit ? 'full' : fraction >= HIGH_FRACTION ? 'high' : 'ok';
  return { used, limit, fraction, percent: Math.round(fraction * 100), level };
}

/** The room an answer needs: the user's max tokens (it must fit whole), else the minimal room of "fit". */
export function answerRoom(maxTokens: number | null): number {
  return maxTokens ?? MIN_ANSWER_ROOM;
}

/** A prompt of `promptTokens` leaves too little room for the answer. */
export function overflows(promptTokens: number, limit: number, maxTokens: number | null): boolean {
  return limit > 0 && promptTokens + answerRoom(maxTokens) > limit;
}

export function isDropped(conversation: Conversation, messageId: string): boolean {
  return conversation.dropped?.includes(messageId) ?? false;
}

/** The conversation with these path messages dropped from its context (unchanged if none is new). */
export function withDropped(conversation: Conversation, messageIds: string[], now: number): Conversation {
  const onPath = new Set(conversation.messages.map((m) => m.id));
  const fresh = messageIds.filter((id) => onPath.has(id) && !isDropped(conversation, id));
  if (fresh.length === 0) return conversation;
  return { ...conversation, dropped: [...(conversation.dropped ?? []), ...fresh], droppedAt: now };
}

/**
 * Tokens the conversation holds after its last answer: that answer's prompt plus
 * completion (usage), unless turns were dropped since (the usage counted them).
 */
export function usedByConversation(conversation: Conversation | undefined): number | null {
  if (!conversation) return null;
  for (let i = conversation.messages.length - 1; i >= 0; i -= 1) {
    const message = conversation.messages[i];
    if (!message || message.role !== 'assistant' || isDropped(conversation, message.id)) continue;
    const stats = message.stats;
    if (stats?.promptTokens === undefined || stats.completionTokens === undefined) continue;
    if (conversation.droppedAt !== undefined && message.createdAt <= conversation.droppedAt) return null;
    return stats.promptTokens + stats.completionTokens;
  }
  return null;
}

/** One turn: a question and the answers that follow it on the path. */
export interface Turn {
  ids: string[];
  /** The question, for showing which turns go. */
  question: string;
  /** 1-based position among the conversation's turns in view. */
  number: number;
}

/** The kept turns on the path before `beforeIndex` (exclusive), oldest first. */
export function turnsBefore(conversation: Conversation, beforeIndex: number): Turn[] {
  const turns: Turn[] = [];
  let number = 0;
  conversation.messages.slice(0, beforeIndex).forEach((message: Message) => {
    if (message.role === 'user') number += 1;
    if (isDropped(conversation, message.id)) return;
    const current = turns[turns.length - 1];
    if (message.role === 'user' || !current) turns.push({ ids: [message.id], question: message.role === 'user' ? message.content : '', number: Math.max(number, 1) });
    else current.ids.push(message.id);
  });
  return turns;
}

/** The ids of the `k` oldest of `turns`: what dropping them takes out of the prompt. */
export function idsOf(turns: Turn[], k: number): Set<string> {
  return new Set(turns.slice(0, k).flatMap((t) => t.ids));
}

export interface DropPlan {
  /** How many oldest turns go; 0: it fits as it is. */
  count: number;
  turns: Turn[];
  /** The prompt's tokens once they have gone. */
  promptTokens: number;
}

/**
 * The fewest oldest turns to drop so that the prompt plus the answer's room fits, found by
 * bisection over exact counts (a prompt shrinks as turns go); null when even dropping every
 * turn does not make it fit (the new message alone is too long).
 */
export async function planDrop(
  turns: Turn[],
  countWithout: (k: number) => Promise<number>,
  limit: number,
  maxTokens: number | null,
): Promise<DropPlan | null> {
  const fits = (tokens: number) => !overflows(tokens, limit, maxTokens);
  const all = await countWithout(turns.length);
  if (!fits(all)) return null;
  let low = 0; // known not to fit (the caller asks only after an overflow)
  let high = turns.length; // known to fit
  let best = all;
  while (high - low > 1) {
    const mid = Math.floor((low + high) / 2);
    const tokens = await countWithout(mid);
    if (fits(tokens)) {
      high = mid;
      best = tokens;
    } else low = mid;
  }
  return { count: high, turns: turns.slice(0, high), promptTokens: best };
}
