/** What the WebSocket client says in words: a close code, a refused handshake, a resume the server cannot serve. */
/** Browsers hide why a handshake failed: a refused key looks like a network error. */
export const NOT_CONNECTED = 'could not connect: the server is down, or it refused this page or its API key';
export const UNRESUMABLE =
  'The server no longer has this answer (it restarted, or the connection was away longer than it keeps answers), so it cannot go on from where it stopped.';

/** A close event in words. */
export function describeClose(code: number, reason: string): string {
  const words: Record<number, string> = {
    1000: 'the server closed the connection',
    1001: 'the server is going away',
    1006: 'the connection was lost',
    1008: 'the server refused the connection (policy)',
    1009: 'a message was too big for the server',
    1011: 'the server hit an internal error',
    1012: 'the server is restarting',
    1013: 'the server is busy, try again later',
  };
  const text = words[code] ?? `the connection closed (code ${code})`;
  return reason ? `${text}: ${reason}` : text;
}
