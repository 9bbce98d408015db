/**
 * Client of the tokenpipe.v1 WebSocket protocol: many generations multiplexed on one
 * socket by id, deltas delivered in seq order, reconnect with exponential backoff, and
 * resumable answers re-attached after a reconnect.
 */
import { wsProtocols, WS_PROTOCOL } from './auth';
import { backoffDelay, DEFAULT_BACKOFF, type BackoffOptions } from './backoff';
import type { GenerationHandle, GenerationHandlers, GenerationRequest, ResumePoint, Transport } from './types';
import { tokenpipeMessages } from './wire';
import { describeClose, NOT_CONNECTED, UNRESUMABLE } from './wsWords';
import { parseServerFrame, type ClientFrame, type DeltaFrame, type ErrorFrame, type HelloFrame, type ServerFrame } from './wsFrames';

/** The part of the browser's WebSocket this client uses, so tests can pass a fake. */
export interface WebSocketLike {
  readonly protocol: string;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

export type WebSocketFactory = (url: string, protocols: string[]) => WebSocketLike;

export type ConnectionState =
  | { status: 'idle' }
  | { status: 'connecting'; attempt: number }
  | { status: 'open'; hello: HelloFrame | null }
  | { status: 'reconnecting'; attempt: number; retryAt: number; reason: string }
  | { status: 'closed' };

export interface TokenpipeSocketOptions {
  url: string;
  apiKey?: string;
  createSocket?: WebSocketFactory;
  backoff?: BackoffOptions;
  random?: () => number;
  now?: () => number;
  /** How long to wait for the server to answer a cancel or a resume before deciding locally. */
  answerTimeoutMs?: number;
}

type Phase =
  | 'pending' // not yet sent: waiting for the socket to open
  | 'sent' // generate sent, no start yet
  | 'started'
  | 'resuming'; // lost its connection; a resume goes (or went) out on the next one

interface ActiveGeneration {
  id: string;
  request: GenerationRequest;
  handlers: GenerationHandlers;
  phase: Phase;
  resumeSent: boolean;
  stream?: string;
  lastSeq: number;
  held: Map<number, DeltaFrame>;
  cancelRequested: boolean;
  timer?: ReturnType<typeof setTimeout>;
}

const FRAME_ONLY_ERRORS = new Set(['duplicate_id', 'unknown_id']);
let idCounter = 0;

function newGenerationId(): string {
  idCounter += 1;
  return `g${Date.now().toString(36)}-${idCounter}`;
}

export class TokenpipeSocket implements Transport {
  readonly kind = 'ws' as const;
  private socket: WebSocketLike | null = null;
  private state: ConnectionState = { status: 'idle' };
  private readonly listeners = new Set<(state: ConnectionState) => void>();
  private readonly active = new Map<string, ActiveGeneration>();
  private attempt = 0;
  private reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly options: Required<Omit<TokenpipeSocketOptions, 'apiKey'>> & { apiKey?: string };

  constructor(options: TokenpipeSocketOptions) {
    this.options = {
      createSocket: (url, protocols) => new WebSocket(url, protocols) as unknown as WebSocketLike,
      backoff: DEFAULT_BACKOFF,
      random: Math.random,
      now: Date.now,
      answerTimeoutMs: 5000,
      ...options,
    };
  }

  get connectionState(): ConnectionState {
    return this.state;
  }

  subscribe(listener: (state: ConnectionState) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Open the connection if it is not open or opening already. */
  connect(): void {
    if (this.state.status === 'connecting' || this.state.status === 'open') return;
    clearTimeout(this.reconnectTimer);
    this.setState({ status: 'connecting', attempt: this.attempt });
    let socket: WebSocketLike;
    try {
      socket = this.options.createSocket(this.options.url, wsProtocols(this.options.apiKey));
    } catch (error) {
      this.scheduleReconnect(error instanceof Error ? error.message : 'could not open the connection');
      return;
    }
    this.socket = socket;
    let opened = false;
    socket.onopen = () => {
      opened = true;
      this.handleOpen(socket);
    };
    socket.onmessage = (event) => {
      if (this.socket === socket && typeof event.data === 'string') this.handleFrame(event.data);
    };
    // Browsers hide why a handshake failed (a refused key looks like a network error).
    socket.onclose = (event) => this.handleClose(socket, opened ? describeClose(event.code, event.reason) : NOT_CONNECTED);
    socket.onerror = () => undefined; // a close event always follows and carries what we need
  }

  /** Skip the rest of the backoff wait. */
  retryNow(): void {
    if (this.state.status === 'reconnecting' || this.state.status === 'idle') {
      this.attempt = 0;
      this.connect();
    }
  }

  /** Close for good: running answers are interrupted, nothing reconnects. */
  close(): void {
    clearTimeout(this.reconnectTimer);
    const socket = this.socket;
    this.socket = null;
    socket?.close(1000, 'client closed');
    for (const generation of [...this.active.values()]) {
      this.finish(generation);
      generation.handlers.onInterrupted('The connection was closed.');
    }
    this.setState({ status: 'closed' });
  }

  /** The page is going away: answers not started yet (no token to resume) are cancelled; the reloaded page asks again. */
  abandonUnstarted(): void {
    for (const generation of this.active.values()) {
      if (generation.phase === 'sent' && this.state.status === 'open') this.send({ type: 'cancel', id: generation.id });
    }
  }

  generate(request: GenerationRequest, handlers: GenerationHandlers): GenerationHandle {
    const generation: ActiveGeneration = {
      id: newGenerationId(),
      request,
      handlers,
      phase: 'pending',
      resumeSent: false,
      lastSeq: -1,
      held: new Map(),
      cancelRequested: false,
    };
    this.active.set(generation.id, generation);
    if (this.state.status === 'open') this.sendGenerate(generation);
    else this.connect();
    return { cancel: () => this.cancel(generation.id) };
  }

  /**
   * Attach to a resumable answer started earlier (by a page since reloaded): every delta
   * after `afterSeq` comes again, then it goes on live. `request` is what a retry would send.
   */
  resume(point: ResumePoint, handlers: GenerationHandlers): GenerationHandle {
    const { stream, seq: afterSeq } = point;
    const generation: ActiveGeneration = {
      id: newGenerationId(),
      request: { messages: [], params: {} },
      handlers,
      phase: 'resuming',
      resumeSent: false,
      stream,
      lastSeq: afterSeq,
      held: new Map(),
      cancelRequested: false,
    };
    this.active.set(generation.id, generation);
    if (this.state.status === 'open') this.sendResume(generation);
    else this.connect();
    return { cancel: () => this.cancel(generation.id) };
  }

  private cancel(id: string): void {
    const generation = this.active.get(id);
    if (!generation || generation.cancelRequested) return;
    generation.cancelRequested = true;
    const connected = this.state.status === 'open';
    if (!connected || generation.phase === 'pending' || (generation.phase === 'resuming' && !generation.resumeSent)) {
      // Nothing on the server listens for this answer right now: stop it here.
      this.finish(generation);
      generation.handlers.onEnd({ finishReason: 'cancelled' });
      return;
    }
    this.send({ type: 'cancel', id });
    // The server answers a cancel with `end`; if it never does, do not leave the answer hanging.
    this.armTimer(generation, () => {
      this.finish(generation);
      generation.handlers.onEnd({ finishReason: 'cancelled' });
    });
  }

  private handleOpen(socket: WebSocketLike): void {
    if (this.socket !== socket) return;
    if (socket.protocol !== WS_PROTOCOL) {
      // Without the subprotocol the server speaks the plain-text protocol of docs/protocol.md §2.
      this.socket = null;
      socket.close(1000, 'tokenpipe.v1 required');
      this.scheduleReconnect('the server did not accept the tokenpipe.v1 subprotocol');
      return;
    }
    this.setState({ status: 'open', hello: null });
    for (const generation of this.active.values()) {
      if (generation.phase === 'pending') this.sendGenerate(generation);
      else if (generation.phase === 'resuming') this.sendResume(generation);
    }
  }

  private handleClose(socket: WebSocketLike, reason: string): void {
    if (this.socket !== socket) return;
    this.socket = null;
    for (const generation of [...this.active.values()]) {
      if (generation.cancelRequested) {
        this.finish(generation);
        generation.handlers.onEnd({ finishReason: 'cancelled' });
      } else if (generation.phase === 'pending') {
        continue; // goes out once a connection is back
      } else if (generation.stream !== undefined) {
        clearTimeout(generation.timer);
        generation.phase = 'resuming';
        generation.resumeSent = false;
      } else {
        this.finish(generation);
        generation.handlers.onInterrupted(`The answer was cut off: ${reason}.`);
      }
    }
    this.scheduleReconnect(reason);
  }

  private scheduleReconnect(reason: string): void {
    const delay = backoffDelay(this.attempt, this.options.backoff, this.options.random);
    this.attempt += 1;
    this.setState({ status: 'reconnecting', attempt: this.attempt, retryAt: this.options.now() + delay, reason });
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => this.connect(), delay);
  }

  private handleFrame(data: string): void {
    const frame = parseServerFrame(data);
    if (!frame) return;
    if (frame.type === 'hello') {
      this.attempt = 0;
      this.setState({ status: 'open', hello: frame });
      return;
    }
    if (frame.type === 'pong') return;
    if (frame.type === 'error' && frame.id === null) {
      this.handleConnectionError(frame);
      return;
    }
    const generation = frame.id === null ? undefined : this.active.get(frame.id);
    if (!generation) return;
    this.handleGenerationFrame(generation, frame);
  }

  private handleGenerationFrame(generation: ActiveGeneration, frame: Exclude<ServerFrame, HelloFrame | { type: 'pong' }>): void {
    const { handlers } = generation;
    switch (frame.type) {
      case 'queued':
        handlers.onQueued?.(frame.position);
        return;
      case 'progress':
        handlers.onProgress?.(frame.prompt_tokens_done, frame.prompt_tokens);
        return;
      case 'start':
        if (generation.phase === 'resuming') clearTimeout(generation.timer);
        generation.phase = 'started';
        if (frame.stream) generation.stream = frame.stream;
        handlers.onStart?.({ model: frame.model, promptTokens: frame.prompt_tokens, ...(frame.stream ? { stream: frame.stream } : {}) });
        return;
      case 'delta':
        this.acceptDelta(generation, frame);
        return;
      case 'end':
        this.finish(generation);
        handlers.onEnd({ finishReason: frame.finish_reason, usage: frame.usage, timing: frame.timing });
        return;
      case 'error':
        this.handleGenerationError(generation, frame);
        return;
    }
  }

  private acceptDelta(generation: ActiveGeneration, frame: DeltaFrame): void {
    if (generation.phase === 'resuming') {
      clearTimeout(generation.timer); // the resume worked
      generation.phase = 'started';
    }
    const seq = frame.seq;
    if (seq <= generation.lastSeq || generation.held.has(seq)) return; // a replay we already have
    generation.held.set(seq, frame);
    let next = generation.held.get(generation.lastSeq + 1);
    while (next !== undefined) {
      generation.held.delete(generation.lastSeq + 1);
      generation.lastSeq += 1;
      generation.handlers.onDelta(next.text, {
        seq: next.seq,
        ...(next.channel !== undefined ? { channel: next.channel } : {}),
        ...(next.index !== undefined ? { index: next.index } : {}),
        ...(next.call_id !== undefined ? { callId: next.call_id } : {}),
        ...(next.name !== undefined ? { name: next.name } : {}),
      });
      next = generation.held.get(generation.lastSeq + 1);
    }
  }

  private handleGenerationError(generation: ActiveGeneration, frame: ErrorFrame): void {
    const error = { code: frame.code, message: frame.message, retryAfterMs: frame.retry_after_ms };
    if (generation.phase === 'resuming') {
      this.finish(generation);
      if (frame.code === 'unknown_id') generation.handlers.onInterrupted(UNRESUMABLE, { unresumable: true });
      else generation.handlers.onInterrupted(`The answer could not be resumed (${frame.code}${frame.message ? `: ${frame.message}` : ''}).`);
      return;
    }
    if (frame.code === 'unknown_id' && generation.cancelRequested) {
      this.finish(generation); // it had already ended on the server
      generation.handlers.onEnd({ finishReason: 'cancelled' });
      return;
    }
    // duplicate_id / unknown_id only reject one frame; for a generate not yet started, that frame was ours.
    if (FRAME_ONLY_ERRORS.has(frame.code) && generation.phase !== 'sent') return;
    this.finish(generation);
    generation.handlers.onError(error);
  }

  /** An error with `id: null` is about a frame; a resume the server does not understand lands here. */
  private handleConnectionError(frame: ErrorFrame): void {
    for (const generation of [...this.active.values()]) {
      if (generation.phase === 'resuming' && generation.resumeSent) {
        this.finish(generation);
        generation.handlers.onInterrupted(`The answer could not be resumed (${frame.code}${frame.message ? `: ${frame.message}` : ''}).`);
      }
    }
  }

  private sendGenerate(generation: ActiveGeneration): void {
    const { request } = generation;
    generation.phase = 'sent';
    this.send({
      type: 'generate',
      id: generation.id,
      messages: tokenpipeMessages(request.messages),
      ...(request.model ? { model: request.model } : {}),
      params: request.params,
      resumable: true,
    });
  }

  private sendResume(generation: ActiveGeneration): void {
    if (generation.stream === undefined) return;
    generation.resumeSent = true;
    this.send({ type: 'resume', stream: generation.stream, after_seq: generation.lastSeq, id: generation.id });
    this.armTimer(generation, () => {
      this.finish(generation);
      generation.handlers.onInterrupted('The answer could not be resumed: the server did not answer.');
    });
  }

  private armTimer(generation: ActiveGeneration, onTimeout: () => void): void {
    clearTimeout(generation.timer);
    generation.timer = setTimeout(() => {
      if (this.active.get(generation.id) === generation) onTimeout();
    }, this.options.answerTimeoutMs);
  }

  private finish(generation: ActiveGeneration): void {
    clearTimeout(generation.timer);
    this.active.delete(generation.id);
  }

  private send(frame: ClientFrame): void {
    this.socket?.send(JSON.stringify(frame));
  }
  private setState(state: ConnectionState): void {
    this.state = state;
    for (const listener of this.listeners) listener(state);
  }
}
