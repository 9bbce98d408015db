/** tokenpipe.v1 frames (docs/protocol.md §1) and a guard that turns untrusted JSON into them. */
import type { FinishReason, SamplingParams, ServerTiming, Usage, WireMessage } from './types';

export interface HelloFrame {
  type: 'hello';
  protocol?: string;
  server?: unknown;
  models?: string[];
  limits?: {
    max_message_bytes?: number;
    max_streams_per_connection?: number;
    context_tokens?: number;
    max_tokens?: number;
    default_max_tokens?: number;
  };
}
export interface QueuedFrame { type: 'queued'; id: string; position: number }
export interface StartFrame { type: 'start'; id: string; model?: string; prompt_tokens?: number | null; stream?: string }
export interface ProgressFrame { type: 'progress'; id: string; prompt_tokens_done: number; prompt_tokens: number }
export interface DeltaFrame {
  type: 'delta';
  id: string;
  seq: number;
  text: string;
  channel?: string;
  index?: number;
  call_id?: string;
  name?: string;
}
export interface EndFrame {
  type: 'end';
  id: string;
  finish_reason: FinishReason;
  usage?: Usage;
  timing?: ServerTiming;
}
export interface ErrorFrame {
  type: 'error';
  id: string | null;
  code: string;
  message: string;
  retry_after_ms?: number;
}
export interface PongFrame { type: 'pong'; data?: unknown }

export type ServerFrame = HelloFrame | QueuedFrame | StartFrame | ProgressFrame | DeltaFrame | EndFrame | ErrorFrame | PongFrame;

export interface GenerateFrame {
  type: 'generate';
  id: string;
  messages: WireMessage[];
  model?: string;
  params?: SamplingParams;
  resumable?: boolean;
}
export interface CancelFrame { type: 'cancel'; id: string }
export interface ResumeFrame { type: 'resume'; stream: string; after_seq: number; id: string }
export type ClientFrame = GenerateFrame | CancelFrame | ResumeFrame;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Parse one text frame; `null` for anything that is not a frame this client understands. */
export function parseServerFrame(data: string): ServerFrame | null {
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch {
    return null;
  }
  if (!isObject(value) || typeof value.type !== 'string') return null;
  const id = value.id;
  switch (value.type) {
    case 'hello':
    case 'pong':
      return value as unknown as ServerFrame;
    case 'queued':
      return typeof id === 'string' && typeof value.position === 'number' ? (value as unknown as QueuedFrame) : null;
    case 'start':
      return typeof id === 'string' ? (value as unknown as StartFrame) : null;
    case 'progress':
      return typeof id === 'string' && typeof value.prompt_tokens_done === 'number' && typeof value.prompt_tokens === 'number'
        ? (value as unknown as ProgressFrame)
        : null;
    case 'delta':
      return typeof id === 'string' && typeof value.seq === 'number' && typeof value.text === 'string'
        ? (value as unknown as DeltaFrame)
        : null;
    case 'end':
      return typeof id === 'string' && typeof value.finish_reason === 'string' ? (value as unknown as EndFrame) : null;
    case 'error':
      return (typeof id === 'string' || id === null || id === undefined) && typeof value.code === 'string'
        ? ({ ...value, id: id ?? null, message: typeof value.message === 'string' ? value.message : '' } as unknown as ErrorFrame)
        : null;
    default:
      return null;
  }
}
