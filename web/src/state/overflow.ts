/**
 * The ways on when a message would overflow the context, each of which fits (none loops back
 * to the same offer): drop turns the user picks (the largest first by default, each with its
 * size), or, for a message too long by itself, keep its first and last part (in the message,
 * or as an attached file). Pure: every count is the server's (count_tokens), passed in.
 */
import { keepEnds } from './attachments';
import { overflows, type Turn } from './context';

/** A turn with the tokens it adds to the prompt (the prompt's count with it minus without it). */
export interface SizedTurn extends Turn {
  tokens: number;
}

/** Each turn's size, counted one turn out at a time. */
export async function sizeTurns(turns: Turn[], promptTokens: number, countWithout: (ids: ReadonlySet<string>) => Promise<number>): Promise<SizedTurn[]> {
  const sized: SizedTurn[] = [];
  for (const turn of turns) sized.push({ ...turn, tokens: Math.max(0, promptTokens - (await countWithout(new Set(turn.ids)))) });
  return sized;
}

/** The key of a turn in a choice: its first message's id. */
export const turnKey = (turn: Turn): string => turn.ids[0] ?? '';

/**
 * The largest turns first until the prompt (as estimated from the sizes) fits; ties go
 * oldest first. Empty when nothing needs to go or even every turn is not enough.
 */
export function largestFirst(turns: SizedTurn[], promptTokens: number, limit: number, maxTokens: number | null): string[] {
  const order = turns.map((turn, i) => ({ turn, i })).sort((a, b) => b.turn.tokens - a.turn.tokens || a.i - b.i);
  const chosen: string[] = [];
  let tokens = promptTokens;
  for (const { turn } of order) {
    if (!overflows(tokens, limit, maxTokens)) break;
    chosen.push(turnKey(turn));
    tokens -= turn.tokens;
  }
  return overflows(tokens, limit, maxTokens) ? [] : chosen;
}

/** The ids of the chosen turns, in the conversation's order. */
export function chosenIds(turns: Turn[], chosen: readonly string[]): string[] {
  const keys = new Set(chosen);
  return turns.filter((turn) => keys.has(turnKey(turn))).flatMap((turn) => turn.ids);
}

/** What a plan leaves: the room for the answer and what follows, in tokens (negative: it does not fit). */
export function roomLeft(promptTokens: number, limit: number): number {
  return limit - promptTokens;
}

/** A text cut to its first and last `keep` characters so that the prompt fits. */
export interface Cut {
  keep: number;
  text: string;
  /** The prompt's tokens with the cut text. */
  promptTokens: number;
  /** The characters the text had whole. */
  from: number;
  /** The prompt's tokens with the marker alone: the ends kept are `promptTokens` minus it. */
  markerTokens: number;
}

/**
 * The longest ends of `text` (the first and last `keep` characters around a marker) with
 * which the prompt fits, by bisection over exact counts; null when even the marker alone
 * does not fit (the rest of the prompt is too long).
 */
export async function cutToFit(text: string, countWith: (text: string) => Promise<number>, limit: number, maxTokens: number | null): Promise<Cut | null> {
  const fits = (tokens: number) => !overflows(tokens, limit, maxTokens);
  const none = await countWith(keepEnds(text, 0));
  if (!fits(none)) return null;
  let low = 0; // fits
  let high = Math.ceil(text.length / 2); // whole: known not to fit (the caller asks after an overflow)
  let best = none;
  while (high - low > 1) {
    const mid = Math.floor((low + high) / 2);
    const tokens = await countWith(keepEnds(text, mid));
    if (fits(tokens)) {
      low = mid;
      best = tokens;
    } else high = mid;
  }
  return { keep: low, text: keepEnds(text, low), promptTokens: best, from: text.length, markerTokens: none };
}

/** The same cut with `tokens` fewer tokens kept (room for a question about an attached file): the ends shrink in proportion. */
export function shrinkCut(text: string, cut: Cut, tokens: number): string {
  const keptTokens = cut.promptTokens - cut.markerTokens;
  if (keptTokens <= 0) return keepEnds(text, 0);
  return keepEnds(text, Math.floor((cut.keep * Math.max(0, keptTokens - tokens)) / keptTokens));
}
