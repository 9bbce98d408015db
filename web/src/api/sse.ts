/**
 * Sans-IO decoder for server-sent events (WHATWG HTML §9.2.6): feed it the bytes as they
 * arrive, in chunks cut anywhere (also inside a UTF-8 character or a CRLF), and it returns
 * the events completed so far.
 */
export interface SseEvent {
  event: string;
  data: string;
  /** A comment line's text after the colon, in its place among the events (only when asked for). */
  comment?: string;
  id?: string;
  retry?: number;
}

export class SseDecoder {
  /** `comments`: comment lines come out too, in order (tokenpipe says queue places and prefill progress there). */
  constructor(private readonly comments = false) {}

  private readonly decoder = new TextDecoder('utf-8');
  private line = '';
  private skipLineFeed = false;
  private started = false;
  private dataLines: string[] = [];
  private hasData = false;
  private eventType = '';
  private lastId: string | undefined;
  private retry: number | undefined;

  feed(chunk: Uint8Array | string): SseEvent[] {
    const text = typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true });
    return this.consume(text);
  }

  /** The stream ended: an event not terminated by a blank line is dropped, as the spec says. */
  end(): SseEvent[] {
    const events = this.consume(this.decoder.decode());
    this.line = '';
    this.resetEvent();
    return events;
  }

  private consume(text: string): SseEvent[] {
    const events: SseEvent[] = [];
    let start = 0;
    if (!this.started && text.length > 0) {
      this.started = true;
      if (text.charCodeAt(0) === 0xfeff) start = 1;
    }
    for (let i = start; i < text.length; i++) {
      const ch = text[i];
      if (this.skipLineFeed) {
        this.skipLineFeed = false;
        if (ch === '\n') {
          start = i + 1;
          continue;
        }
      }
      if (ch === '\n' || ch === '\r') {
        const line = this.line + text.slice(start, i);
        this.line = '';
        start = i + 1;
        this.skipLineFeed = ch === '\r';
        const event = this.processLine(line);
        if (event) events.push(event);
      }
    }
    this.line += text.slice(start);
    return events;
  }

  private processLine(line: string): SseEvent | null {
    if (line === '') return this.dispatch();
    if (line.startsWith(':')) return this.comments ? { event: '', data: '', comment: line.slice(1).trimStart() } : null;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data':
        this.dataLines.push(value);
        this.hasData = true;
        break;
      case 'event':
        this.eventType = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.lastId = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
    }
    return null;
  }

  private dispatch(): SseEvent | null {
    if (!this.hasData) {
      this.eventType = '';
      return null;
    }
    const event: SseEvent = { event: this.eventType || 'message', data: this.dataLines.join('\n') };
    if (this.lastId !== undefined) event.id = this.lastId;
    if (this.retry !== undefined) event.retry = this.retry;
    this.resetEvent();
    return event;
  }

  private resetEvent(): void {
    this.dataLines = [];
    this.hasData = false;
    this.eventType = '';
  }
}
