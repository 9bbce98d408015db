export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  factor: number;
  /** 0..1: the share of each delay that is randomised, so reconnecting tabs do not stampede. */
  jitter: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 500, maxMs: 15_000, factor: 2, jitter: 0.2 };

/** Delay before reconnect attempt number `attempt` (0 = the first retry). */
export function backoffDelay(attempt: number, options: BackoffOptions, random: () => number = Math.random): number {
  const base = Math.min(options.maxMs, options.initialMs * options.factor ** attempt);
  return Math.round(base * (1 - options.jitter * random()));
}
