/** A scripted WebSocket for tests: the test opens it, feeds it frames and drops it. */
import type { WebSocketLike } from '../api/wsClient';
import type { ClientFrame } from '../api/wsFrames';

export class FakeSocket implements WebSocketLike {
  protocol = '';
  onopen: ((event: unknown) => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code: number; reason: string }) => void) | null = null;
  onerror: ((event: unknown) => void) | null = null;
  readonly sent: ClientFrame[] = [];
  closedWith: number | null = null;

  constructor(
    readonly url: string,
    readonly protocols: string[],
  ) {}

  send(data: string): void {
    this.sent.push(JSON.parse(data) as ClientFrame);
  }

  close(code = 1000): void {
    this.closedWith = code;
  }

  open(protocol = 'tokenpipe.v1'): void {
    this.protocol = protocol;
    this.onopen?.({});
  }

  receive(frame: Record<string, unknown>): void {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }

  drop(code = 1006, reason = ''): void {
    this.onclose?.({ code, reason });
  }
}

export function socketFactory(): { sockets: FakeSocket[]; create: (url: string, protocols: string[]) => FakeSocket } {
  const sockets: FakeSocket[] = [];
  return {
    sockets,
    create: (url, protocols) => {
      const socket = new FakeSocket(url, protocols);
      sockets.push(socket);
      return socket;
    },
  };
}
