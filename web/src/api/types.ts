/** Shapes shared by every transport; the wire names follow docs/protocol.md in the repository. */

export type Role = 'system' | 'user' | 'assistant' | 'tool';

/** A call an earlier answer made, sent back with it (OpenAI's shape). */
export interface WireToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface WireMessage {
  role: Role;
  /** The text; for a message with `parts`, the parts joined with newlines (as the doors join them). */
  content: string;
  /** A user message's text parts: what was typed, then one per attached file (state/attachments.ts). */
  parts?: string[];
  /** On an assistant turn that made calls. */
  tool_calls?: WireToolCall[];
  /** On a `tool` turn: the call it answers. */
  tool_call_id?: string;
}

/** Sampling parameters; an absent field means "the server's default". */
export interface SamplingParams {
  temperature?: number;
  top_p?: number;
  max_tokens?: number;
  seed?: number;
  top_k?: number;
  min_p?: number;
  repetition_penalty?: number;
  stop?: string[];
  /** `auto`: the model's thinking comes apart from the answer (the reasoning channel). */
  reasoning_format?: 'auto' | 'none';
  /** Functions the model may call, in OpenAI's shape; this page runs none of them. */
  tools?: ToolSpec[];
  tool_choice?: ToolChoice;
  parallel_tool_calls?: boolean;
  /** An answer in JSON: any object, or one a schema allows (the server enforces it token by token). */
  response_format?: ResponseFormat;
  /** Ask the model to think first (a model whose chat template has no thinking section refuses it). */
  think?: boolean;
}

export type ResponseFormat = { type: 'json_object' } | { type: 'json_schema'; json_schema: { name: string; schema: Record<string, unknown> } };

export interface ToolSpec {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

export type ToolChoice = 'auto' | 'none' | 'required';

export interface GenerationRequest {
  messages: WireMessage[];
  params: SamplingParams;
  model?: string;
}

export type FinishReason = 'stop' | 'length' | 'cancelled' | 'tool_calls';

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
  /** A long prompt's prefill so far: `done` of its `total` prompt tokens read (before the first delta). */
  onProgress?(done: number, total: number): void;
  /**
   * `stream`: what a reloaded page resumes this answer with: a stream token (tokenpipe.v1 and
   * resumable SSE share one store), or with `resumeKind: 'response'` a background response's id.
   */
  onStart?(info: { model?: string; promptTokens?: number | null; stream?: string; resumeKind?: 'response' }): void;
  onDelta(text: string, meta?: DeltaMeta): void;
  onEnd(info: EndInfo): void;
  onError(error: ApiError): void;
  /** The connection was lost and the answer cannot continue (or resume failed). */
  onInterrupted(reason: string, info?: { unresumable?: boolean }): void;
}

/** Where a delta sits in its stream (tokenpipe.v1 seq, SSE id − 1, Responses sequence number): its seq, and a tool call's channel fields. */
export interface DeltaMeta {
  seq?: number;
  channel?: string;
  index?: number;
  callId?: string;
  name?: string;
}

/**
 * Where a reloaded page picks an answer up: a stream token and the last tokenpipe.v1 seq it
 * has (SSE event id − 1), or (`kind: 'response'`) a background response's id and the last
 * event sequence number it has.
 */
export interface ResumePoint {
  stream: string;
  seq: number;
  kind?: 'response';
}

export interface GenerationHandle {
  /** Ask the server to stop; the handlers still get the final end (or error). */
  cancel(): void;
}

export type TransportKind = 'ws' | 'sse' | 'rest' | 'responses';

export interface Transport {
  readonly kind: TransportKind;
  generate(request: GenerationRequest, handlers: GenerationHandlers): GenerationHandle;
  /** Attach to a resumable answer: what comes after `point.seq` comes again, then it goes on live. */
  resume?(point: ResumePoint, handlers: GenerationHandlers): GenerationHandle;
}
