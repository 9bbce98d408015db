/**
 * What tokenpipe's HTTP doors say aside, in SSE comment lines (docs/protocol.md §3):
 * `: queued position=N` while a request waits for a place, `: prefill N/M` while a long
 * prompt is read. Other servers send none, and other comments (`: ping`) mean nothing here.
 */
import type { GenerationHandlers } from './types';

export type Aside = { kind: 'queued'; position: number } | { kind: 'prefill'; done: number; total: number };

export function parseAside(comment: string): Aside | null {
  const queued = /^queued position=(\d+)\b/.exec(comment);
  if (queued) return { kind: 'queued', position: Number(queued[1]) };
  const prefill = /^prefill (\d+)\/(\d+)$/.exec(comment.trim());
  if (prefill) {
    const done = Number(prefill[1]);
    const total = Number(prefill[2]);
    return total > 0 && done <= total ? { kind: 'prefill', done, total } : null;
  }
  return null;
}

/** Tells `handlers` of the queue place or prefill progress a comment says. */
export function tellAside(comment: string, handlers: GenerationHandlers): void {
  const aside = parseAside(comment);
  if (aside?.kind === 'queued') handlers.onQueued?.(aside.position);
  else if (aside?.kind === 'prefill') handlers.onProgress?.(aside.done, aside.total);
}
