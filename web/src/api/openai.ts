/**
 * Client of the OpenAI-compatible HTTP routes: `POST /v1/chat/completions` streamed as
 * server-sent events (the "SSE" transport) or answered in one JSON body (the "REST" one).
 */
import { authHeaders } from './auth';
import { errorFromOpenAiBody } from './errors';
import { type ReadAnswer, type Settle, startGeneration } from './httpGeneration';
import { tellAside } from './aside';
import { SseDecoder } from './sse';
import { stopStream } from './stopStream';
import type { FinishReason, GenerationHandle, GenerationHandlers, GenerationRequest, ResumePoint, SamplingParams, Transport, Usage } from './types';
import { chatMessages } from './wire';

/** How far a resumable stream got: its token (from the X-Stream-Token header) and the last delta's seq. */
interface Position {
  stream?: string;
  seq: number;
}

export interface OpenAiClientOptions {
  baseUrl: string;
  apiKey?: string;
  stream: boolean;
  fetch?: typeof fetch;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function toFinishReason(value: unknown): FinishReason {
  return value === 'length' || value === 'cancelled' || value === 'tool_calls' ? value : 'stop';
}

/** The thinking of a message or delta: servers name it `reasoning_content` or `reasoning` (both alike here). */
export function reasoningOf(part: Record<string, unknown>): string {
  const text = part.reasoning_content ?? part.reasoning;
  return typeof text === 'string' ? text : '';
}

/** OpenAI's `tool_calls` (a delta's fragments, or a whole message's calls) to the page's deltas. */
export function emitToolCalls(value: unknown, handlers: GenerationHandlers, seq?: number): void {
  if (!Array.isArray(value)) return;
  for (const [position, call] of value.entries()) {
    if (!isRecord(call)) continue;
    const fn = isRecord(call.function) ? call.function : {};
    const index = typeof call.index === 'number' ? call.index : position;
    const args = typeof fn.arguments === 'string' ? fn.arguments : '';
    handlers.onDelta(args, {
      channel: 'tool_call',
      index,
      ...(seq !== undefined ? { seq } : {}),
      ...(typeof call.id === 'string' ? { callId: call.id } : {}),
      ...(typeof fn.name === 'string' ? { name: fn.name } : {}),
    });
  }
}

function toUsage(value: unknown): Usage | undefined {
  if (!isRecord(value) || typeof value.prompt_tokens !== 'number' || typeof value.completion_tokens !== 'number') return undefined;
  return { prompt_tokens: value.prompt_tokens, completion_tokens: value.completion_tokens };
}

function firstChoice(chunk: Record<string, unknown>): Record<string, unknown> | undefined {
  const choices = chunk.choices;
  return Array.isArray(choices) && isRecord(choices[0]) ? choices[0] : undefined;
}

/** The page's params in Chat Completions' names: thinking is `reasoning_effort`. */
function paramsOf({ think, ...params }: SamplingParams): Record<string, unknown> {
  return think ? { ...params, reasoning_effort: 'medium' } : params;
}

export function chatCompletionBody(request: GenerationRequest, stream: boolean): Record<string, unknown> {
  return {
    ...(request.model ? { model: request.model } : {}),
    messages: chatMessages(request.messages),
    ...paramsOf(request.params),
    stream,
    // A streamed answer outlives its request (a reload, a drop): the page resumes it by its token.
    ...(stream ? { stream_options: { include_usage: true }, resumable: true } : {}),
  };
}

export class OpenAiClient implements Transport {
  readonly kind: 'sse' | 'rest';

  constructor(private readonly options: OpenAiClientOptions) {
    this.kind = options.stream ? 'sse' : 'rest';
  }

  generate(request: GenerationRequest, handlers: GenerationHandlers): GenerationHandle {
    const { baseUrl, stream, apiKey, fetch } = this.options;
    const accept = stream ? 'text/event-stream' : 'application/json';
    const at: Position = { seq: -1 };
    const post = { url: `${baseUrl}/v1/chat/completions`, body: chatCompletionBody(request, stream), accept, apiKey, fetch, stopOnServer: this.stopper(at) };
    const read: ReadAnswer = (response, settle) => (stream ? this.readStream(response, handlers, settle, at) : this.readBody(response, handlers, settle));
    return startGeneration(post, handlers, read);
  }

  /** `GET /v1/streams/TOKEN` from the event after `point.seq` (its id is seq + 1). */
  resume(point: ResumePoint, handlers: GenerationHandlers): GenerationHandle {
    const { baseUrl, apiKey, fetch } = this.options;
    const at: Position = { seq: point.seq, stream: point.stream };
    const get = {
      url: `${baseUrl}/v1/streams/${encodeURIComponent(point.stream)}`,
      accept: 'text/event-stream',
      headers: { 'Last-Event-ID': String(point.seq + 1) },
      apiKey,
      fetch,
      stopOnServer: this.stopper(at),
    };
    return startGeneration(get, handlers, (response, settle) => this.readStream(response, handlers, settle, at));
  }

  private stopper(at: Position): () => void {
    return () => {
      if (at.stream !== undefined) stopStream(this.options.baseUrl, this.options.apiKey, at.stream, at.seq);
    };
  }

  private async readBody(response: Response, handlers: GenerationHandlers, settle: Settle): Promise<void> {
    let body: unknown;
    try {
      body = await response.json();
    } catch (error) {
      settle(() => handlers.onInterrupted(error instanceof Error ? `The answer was cut off: ${error.message}` : 'The answer was cut off.'));
      return;
    }
    if (!isRecord(body) || isRecord(body.error)) {
      settle(() => handlers.onError(errorFromOpenAiBody(body, response.status)));
      return;
    }
    const choice = firstChoice(body);
    const message = choice && isRecord(choice.message) ? choice.message : undefined;
    const content = message && typeof message.content === 'string' ? message.content : '';
    const reasoning = message ? reasoningOf(message) : '';
    settle(() => {
      handlers.onStart?.({ model: typeof body.model === 'string' ? body.model : undefined, promptTokens: toUsage(body.usage)?.prompt_tokens });
      if (reasoning) handlers.onDelta(reasoning, { channel: 'reasoning' });
      if (content) handlers.onDelta(content);
      emitToolCalls(message?.tool_calls, handlers);
      handlers.onEnd({ finishReason: toFinishReason(choice?.finish_reason), usage: toUsage(body.usage) });
    });
  }

  private async readStream(response: Response, handlers: GenerationHandlers, settle: Settle, at: Position): Promise<void> {
    const reader = response.body?.getReader();
    if (!reader) {
      settle(() => handlers.onInterrupted('The server sent no stream.'));
      return;
    }
    const token = response.headers.get('x-stream-token');
    if (token && at.stream === undefined) {
      at.stream = token;
      handlers.onStart?.({ stream: token });
    }
    const decoder = new SseDecoder(true);
    let finishReason: FinishReason = 'stop';
    let usage: Usage | undefined;
    let started = false;
    let done = false;
    const handle = (data: string, id: string | undefined): void => {
      // A resumable stream numbers its events: the delta of seq s is event s + 1.
      const seq = id !== undefined && /^\d+$/.test(id) ? Number(id) - 1 : undefined;
      if (seq !== undefined && seq > at.seq) at.seq = seq;
      const meta = seq !== undefined && seq >= 0 ? { seq } : undefined;
      if (data === '[DONE]') {
        done = true;
        settle(() => handlers.onEnd({ finishReason, usage }));
        return;
      }
      let chunk: unknown;
      try {
        chunk = JSON.parse(data);
      } catch {
        return;
      }
      if (!isRecord(chunk)) return;
      if (isRecord(chunk.error)) {
        done = true;
        settle(() => handlers.onError(errorFromOpenAiBody(chunk)));
        return;
      }
      if (!started) {
        started = true;
        handlers.onStart?.({ model: typeof chunk.model === 'string' ? chunk.model : undefined });
      }
      usage = toUsage(chunk.usage) ?? usage;
      const choice = firstChoice(chunk);
      if (!choice) return;
      const delta = isRecord(choice.delta) ? choice.delta : undefined;
      if (delta) {
        const reasoning = reasoningOf(delta);
        if (reasoning) handlers.onDelta(reasoning, { channel: 'reasoning', ...meta });
        if (typeof delta.content === 'string' && delta.content) handlers.onDelta(delta.content, meta);
        emitToolCalls(delta.tool_calls, handlers, meta?.seq);
      }
      if (typeof choice.finish_reason === 'string') finishReason = toFinishReason(choice.finish_reason);
    };
    try {
      while (!done) {
        const { value, done: ended } = await reader.read();
        const events = ended ? decoder.end() : decoder.feed(value);
        for (const event of events) {
          if (done) break;
          if (event.comment !== undefined) tellAside(event.comment, handlers);
          else handle(event.data, event.id);
        }
        if (ended) break;
      }
      if (!done) settle(() => handlers.onInterrupted('The stream ended before the answer was complete.'));
    } catch (error) {
      settle(() => handlers.onInterrupted(`The answer was cut off: ${error instanceof Error ? error.message : String(error)}.`));
    } finally {
      if (done) void reader.cancel().catch(() => undefined);
    }
  }
}

/** `GET /v1/models`: the model ids, or null where the route is missing or failing. */
export async function listModels(baseUrl: string, apiKey?: string, fetchImpl: typeof fetch = fetch): Promise<string[] | null> {
  try {
    const response = await fetchImpl(`${baseUrl}/v1/models`, { headers: authHeaders(apiKey) });
    if (!response.ok) return null;
    const body: unknown = await response.json();
    if (!isRecord(body) || !Array.isArray(body.data)) return null;
    return body.data.flatMap((model) => (isRecord(model) && typeof model.id === 'string' ? [model.id] : []));
  } catch {
    return null;
  }
}
