/**
 * Stops a resumable SSE generation. Closing its request does not (it waits for a resume),
 * and `/v1/streams/TOKEN` has no cancel route, but the token is tokenpipe.v1's too: a
 * WebSocket `resume` takes the stream over and a `cancel` then stops it (docs/protocol.md §3).
 */
import { wsProtocols } from './auth';

/** How long the connection waits for the server to confirm before it gives up. */
const STOP_TIMEOUT_MS = 5000;

export function websocketUrlOf(baseUrl: string): string {
  return `${baseUrl.replace(/^http/, 'ws').replace(/\/$/, '')}/ws`;
}

export function stopStream(baseUrl: string, apiKey: string | undefined, stream: string, afterSeq: number): void {
  let socket: WebSocket;
  try {
    socket = new WebSocket(websocketUrlOf(baseUrl), wsProtocols(apiKey));
  } catch {
    return; // the grace period ends it on the server
  }
  const timer = setTimeout(() => socket.close(), STOP_TIMEOUT_MS);
  const id = 'stop';
  socket.onopen = () => {
    socket.send(JSON.stringify({ type: 'resume', stream, after_seq: afterSeq, id }));
    socket.send(JSON.stringify({ type: 'cancel', id }));
  };
  socket.onmessage = (event) => {
    const frame: unknown = typeof event.data === 'string' ? JSON.parse(event.data) : null;
    const type = typeof frame === 'object' && frame !== null ? (frame as { type?: unknown }).type : undefined;
    if (type === 'end' || type === 'error') {
      clearTimeout(timer);
      socket.close(1000, 'stopped');
    }
  };
  socket.onclose = () => clearTimeout(timer);
}
