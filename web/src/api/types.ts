/** Shapes shared by every transport; the wire names follow docs/protocol.md in the repository. */

export type Role = 'system' | 'user' | 'assistant';

export interface WireMessage {
  role: Role;
  content: string;
}

/** Sampling parameters; an absent field means "the server's default". */
export interface SamplingParams {
  temperature?: number;
  top_p?: number;
  max_tokens?: number;
  seed?: number;
}

export interface GenerationRequest {
  messages: WireMessage[];
  params: SamplingParams;
  model?: string;
}

export type FinishReason = 'stop' | 'length' | 'cancelled';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
}

/** Server-side timing of one generation (tokenpipe.v1 `end.timing`). */
export interface ServerTiming {
  queue_ms: number;
  ttft_ms: number;
  total_ms: number;
  tokens_per_s: number;
}

/** An error in words, whatever transport it came from. */
export interface ApiError {
  code: string;
  message: string;
  retryAfterMs?: number;
  httpStatus?: number;
}

export interface EndInfo {
  finishReason: FinishReason;
  usage?: Usage;
  timing?: ServerTiming;
}

/**
 * What a transport reports about one generation, in order:
 * (queued*) start? delta* then exactly one of end / error / interrupted.
 */
export interface GenerationHandlers {
  onQueued?(position: number): void;
  onStart?(info: { model?: string; promptTokens?: number | null }): void;
  onDelta(text: string): void;
  onEnd(info: EndInfo): void;
  onError(error: ApiError): void;
  /** The connection was lost and the answer cannot continue (or resume failed). */
  onInterrupted(reason: string): void;
}

export interface GenerationHandle {
  /** Ask the server to stop; the handlers still get the final end (or error). */
  cancel(): void;
}

export type TransportKind = 'ws' | 'sse' | 'rest';

export interface Transport {
  readonly kind: TransportKind;
  generate(request: GenerationRequest, handlers: GenerationHandlers): GenerationHandle;
}
