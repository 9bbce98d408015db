/**
 * A long prompt's prefill as the page shows it: tokens read of the total, and the time
 * left at the rate seen so far (pure: the reducer records samples, the view asks).
 */

export interface PrefillProgress {
  done: number;
  total: number;
  /** When the latest report came (Date.now). */
  at: number;
  /** The first report of this prefill: the rate is measured from it. */
  firstDone: number;
  firstAt: number;
}

/** The progress after one more report (a new prefill starts again where `done` fell back). */
export function withReport(previous: PrefillProgress | undefined, done: number, total: number, at: number): PrefillProgress {
  if (!previous || previous.total !== total || done < previous.done) return { done, total, at, firstDone: done, firstAt: at };
  return { ...previous, done, at };
}

/** Milliseconds left at the rate between the first and the latest report; null until two reports say it. */
export function msLeft(progress: PrefillProgress, now: number): number | null {
  const read = progress.done - progress.firstDone;
  const took = progress.at - progress.firstAt;
  if (read <= 0 || took <= 0) return null;
  const left = ((progress.total - progress.done) * took) / read - Math.max(0, now - progress.at);
  return Math.max(0, left);
}

/** "about 40 s left", "about 3 min left"; rounded so it does not flicker at every report. */
export function describeLeft(ms: number | null): string {
  if (ms === null) return 'estimating the time left';
  const s = ms / 1000;
  if (s < 1.5) return 'almost done';
  if (s < 60) return `about ${s < 10 ? Math.round(s) : Math.round(s / 5) * 5} s left`;
  return `about ${Math.round(s / 60)} min left`;
}

/** "7 s", "2 min 05 s": how long an answer has waited. */
export function describeElapsed(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
}
