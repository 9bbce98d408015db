import type { TransportKind } from '../api/types';
import type { AnswerStats, Message } from '../state/conversations';

export const TRANSPORT_NAMES: Record<TransportKind, string> = { ws: 'WebSocket', sse: 'SSE', rest: 'REST', responses: 'Responses' };

/** Below this many tokens a rate says more about timer noise than about the model. */
export const MIN_RATE_TOKENS = 8;

export function formatMs(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

export interface Figures {
  /** One short line under the answer. */
  text: string;
  /** Everything, for the tooltip. */
  title: string;
}

/** The figures of a finished answer: what its transport measured, and nothing it did not. */
export function statsParts(stats: AnswerStats, model?: string): Figures {
  const short: string[] = model ? [model] : [];
  const long: string[] = [];
  const tokens = stats.completionTokens;
  if (tokens !== undefined) short.push(`${tokens} token${tokens === 1 ? '' : 's'}`);
  const rateOk = stats.tokensPerS != null && (tokens === undefined || tokens >= MIN_RATE_TOKENS);
  if (rateOk && stats.tokensPerS != null) short.push(`${stats.tokensPerS.toFixed(1)} tokens/s`);
  if (stats.ttftMs !== undefined) short.push(`first token ${formatMs(stats.ttftMs)}`);
  else if (stats.totalMs !== undefined) short.push(formatMs(stats.totalMs));
  short.push(TRANSPORT_NAMES[stats.transport]);
  if (stats.promptTokens !== undefined) long.push(`${stats.promptTokens} prompt tokens`);
  if (stats.totalMs !== undefined) long.push(`total ${formatMs(stats.totalMs)}`);
  if (stats.queueMs) long.push(`queued ${formatMs(stats.queueMs)}`);
  long.push(`measured by the ${stats.measuredBy}`);
  return { text: short.join(' · '), title: [...short, ...long].join(' · ') };
}

/** The figures while an answer arrives, counted by this page from its deltas. */
export function liveParts(message: Message, now: number): Figures | null {
  const tokens = message.streamedTokens ?? 0;
  if (tokens === 0 || message.firstTokenAt === undefined) return null;
  const seconds = (now - message.firstTokenAt) / 1000;
  const parts = [`${tokens} token${tokens === 1 ? '' : 's'}`];
  if (tokens >= MIN_RATE_TOKENS && seconds > 0.2) parts.push(`${((tokens - 1) / seconds).toFixed(1)} tokens/s`);
  return { text: parts.join(' · '), title: 'counted by this page as the deltas arrive' };
}
