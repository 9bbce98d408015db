import type { TransportKind } from '../api/types';
import type { AnswerStats } from '../state/conversations';

export const TRANSPORT_NAMES: Record<TransportKind, string> = { ws: 'WebSocket', sse: 'SSE', rest: 'REST' };

export function formatMs(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

/** The parts of the stats line under an answer, in reading order. */
export function statsParts(stats: AnswerStats): string[] {
  const parts: string[] = [];
  if (stats.ttftMs !== undefined) parts.push(`first token ${formatMs(stats.ttftMs)}`);
  if (stats.totalMs !== undefined) parts.push(`total ${formatMs(stats.totalMs)}`);
  if (stats.tokensPerS !== undefined) parts.push(`${stats.tokensPerS.toFixed(1)} tokens/s`);
  if (stats.promptTokens !== undefined && stats.completionTokens !== undefined) {
    parts.push(`${stats.promptTokens} prompt + ${stats.completionTokens} answer tokens`);
  }
  if (stats.queueMs) parts.push(`queued ${formatMs(stats.queueMs)}`);
  parts.push(TRANSPORT_NAMES[stats.transport]);
  return parts;
}
