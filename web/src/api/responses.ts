/**
 * Client of OpenAI's Responses API, `POST /v1/responses` streamed (`stream: true`) in the
 * background (`background: true`, which needs `store: true`): the answer runs on if the page
 * goes, and `GET /v1/responses/{id}?stream=true&starting_after=N` picks it up after a
 * reload. The page keeps its own history, so a finished response is deleted from the server.
 */
import { authHeaders } from './auth';
import { type Settle, startGeneration } from './httpGeneration';
import { tellAside } from './aside';
import { SseDecoder } from './sse';
import type { ApiError, EndInfo, FinishReason, GenerationHandle, GenerationHandlers, GenerationRequest, ResumePoint, Transport, Usage } from './types';
import { responsesInput } from './wire';

export interface ResponsesClientOptions {
  baseUrl: string;
  apiKey?: string;
  fetch?: typeof fetch;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The request body: what the Responses API takes of the page's settings (it has no top_k, min_p, penalty or stop). */
export function responsesBody(request: GenerationRequest): Record<string, unknown> {
  const p = request.params;
  return {
    ...(request.model ? { model: request.model } : {}),
    input: responsesInput(request.messages),
    stream: true,
    background: true,
    store: true,
    ...(p.max_tokens !== undefined ? { max_output_tokens: p.max_tokens } : {}),
    ...(p.temperature !== undefined ? { temperature: p.temperature } : {}),
    ...(p.top_p !== undefined ? { top_p: p.top_p } : {}),
    ...(p.seed !== undefined ? { seed: p.seed } : {}),
    ...(p.response_format ? { text: { format: p.response_format.type === 'json_schema' ? { type: 'json_schema', ...p.response_format.json_schema } : p.response_format } } : {}),
    ...(p.think ? { reasoning: { effort: 'medium' } } : {}),
    ...(p.tools?.length
      ? {
          // Responses' function tools are flat: {type, name, description, parameters}.
          tools: p.tools.map((t) => ({ type: 'function', ...t.function })),
          ...(p.tool_choice ? { tool_choice: p.tool_choice } : {}),
          ...(p.parallel_tool_calls !== undefined ? { parallel_tool_calls: p.parallel_tool_calls } : {}),
        }
      : {}),
  };
}

function usageOf(response: unknown): Usage | undefined {
  const usage = isRecord(response) ? response.usage : undefined;
  if (!isRecord(usage) || typeof usage.input_tokens !== 'number' || typeof usage.output_tokens !== 'number') return undefined;
  return { prompt_tokens: usage.input_tokens, completion_tokens: usage.output_tokens };
}

const ERROR_CODES: Record<string, string> = { rate_limit_exceeded: 'rate_limited', server_error: 'engine_error' };

function failure(value: unknown): ApiError {
  const inner = isRecord(value) ? value : {};
  const code = typeof inner.code === 'string' ? (ERROR_CODES[inner.code] ?? inner.code) : 'http_error';
  return { code, message: typeof inner.message === 'string' ? inner.message : '' };
}

export type ReaderOutcome = { kind: 'end'; end: EndInfo } | { kind: 'error'; error: ApiError };

/**
 * The events of one streamed response, one parsed `data` object at a time (sans-IO):
 * text, thinking and function-call arguments become the page's deltas; the terminal
 * event (completed, incomplete, failed, or `error`) becomes the outcome.
 */
export class ResponsesEventReader {
  private readonly calls = new Map<string, number>();
  private started = false;

  constructor(private readonly handlers: GenerationHandlers) {}

  /** The background response's id, once `response.created` said it. */
  id: string | undefined;

  handle(event: Record<string, unknown>): ReaderOutcome | null {
    const h = this.handlers;
    const response = isRecord(event.response) ? event.response : undefined;
    if (!this.started && (event.type === 'response.created' || event.type === 'response.in_progress')) {
      this.started = true;
      const id = typeof response?.id === 'string' && response.background === true ? response.id : undefined;
      this.id = id;
      h.onStart?.({ model: typeof response?.model === 'string' ? response.model : undefined, ...(id ? { stream: id, resumeKind: 'response' as const } : {}) });
    }
    const delta = typeof event.delta === 'string' ? event.delta : '';
    // Each event's place: a reloaded page asks for the events after the last it has.
    const seq = typeof event.sequence_number === 'number' ? { seq: event.sequence_number } : {};
    switch (event.type) {
      case 'response.output_text.delta':
        if (delta) h.onDelta(delta, seq);
        return null;
      case 'response.reasoning_text.delta':
      case 'response.reasoning_summary_text.delta':
        if (delta) h.onDelta(delta, { channel: 'reasoning', ...seq });
        return null;
      case 'response.output_item.added': {
        const item = isRecord(event.item) ? event.item : undefined;
        if (item?.type !== 'function_call' || typeof item.id !== 'string') return null;
        const index = this.calls.size;
        this.calls.set(item.id, index);
        h.onDelta(typeof item.arguments === 'string' ? item.arguments : '', {
          channel: 'tool_call',
          index,
          ...seq,
          ...(typeof item.call_id === 'string' ? { callId: item.call_id } : {}),
          ...(typeof item.name === 'string' ? { name: item.name } : {}),
        });
        return null;
      }
      case 'response.function_call_arguments.delta': {
        const index = typeof event.item_id === 'string' ? this.calls.get(event.item_id) : undefined;
        if (index !== undefined && delta) h.onDelta(delta, { channel: 'tool_call', index, ...seq });
        return null;
      }
      case 'response.completed':
        return { kind: 'end', end: { finishReason: this.calls.size ? 'tool_calls' : 'stop', usage: usageOf(response) } };
      case 'response.incomplete': {
        const details = isRecord(response?.incomplete_details) ? response.incomplete_details : {};
        const reason: FinishReason = response?.status === 'cancelled' ? 'cancelled' : details.reason === 'max_output_tokens' ? 'length' : 'stop';
        return { kind: 'end', end: { finishReason: reason, usage: usageOf(response) } };
      }
      case 'error':
        return { kind: 'error', error: failure(event) };
      case 'response.failed':
        return { kind: 'error', error: failure(response?.error) };
      default:
        return null;
    }
  }
}

export class ResponsesClient implements Transport {
  readonly kind = 'responses' as const;

  constructor(private readonly options: ResponsesClientOptions) {}

  generate(request: GenerationRequest, handlers: GenerationHandlers): GenerationHandle {
    const { baseUrl, apiKey, fetch } = this.options;
    const at: { id?: string } = {};
    const post = { url: `${baseUrl}/v1/responses`, body: responsesBody(request), accept: 'text/event-stream', apiKey, fetch, stopOnServer: () => this.cancelOnServer(at.id) };
    return startGeneration(post, handlers, (response, settle) => this.read(response, handlers, settle, at));
  }

  /** The events after `point.seq` of the background response `point.stream`. */
  resume(point: ResumePoint, handlers: GenerationHandlers): GenerationHandle {
    const { baseUrl, apiKey, fetch } = this.options;
    const at = { id: point.stream };
    const id = encodeURIComponent(point.stream);
    const get = { url: `${baseUrl}/v1/responses/${id}?stream=true&starting_after=${point.seq}`, accept: 'text/event-stream', apiKey, fetch, stopOnServer: () => this.cancelOnServer(at.id) };
    return startGeneration(get, handlers, (response, settle) => this.read(response, handlers, settle, at));
  }

  /** A background response runs on without its request: Stop deletes it, which cancels it. */
  private cancelOnServer(id: string | undefined): void {
    if (id) void this.call('DELETE', encodeURIComponent(id));
  }

  private call(method: 'DELETE', path: string): Promise<unknown> {
    const { baseUrl, apiKey, fetch: fetchImpl } = this.options;
    return (fetchImpl ?? fetch)(`${baseUrl}/v1/responses/${path}`, { method, headers: authHeaders(apiKey) }).catch(() => undefined);
  }

  private async read(response: Response, handlers: GenerationHandlers, settle: Settle, at: { id?: string }): Promise<void> {
    const reader = response.body?.getReader();
    if (!reader) {
      settle(() => handlers.onInterrupted('The server sent no stream.'));
      return;
    }
    const events = new ResponsesEventReader(handlers);
    const decoder = new SseDecoder(true);
    let outcome: ReaderOutcome | null = null;
    try {
      while (!outcome) {
        const { value, done } = await reader.read();
        for (const event of done ? decoder.end() : decoder.feed(value)) {
          if (event.comment !== undefined) {
            if (!outcome) tellAside(event.comment, handlers);
            continue;
          }
          let data: unknown;
          try {
            data = JSON.parse(event.data);
          } catch {
            continue;
          }
          if (isRecord(data) && !outcome) {
            outcome = events.handle(data.type === undefined ? { ...data, type: event.event } : data);
            at.id ??= events.id;
          }
        }
        if (done) break;
      }
    } catch (error) {
      settle(() => handlers.onInterrupted(`The answer was cut off: ${error instanceof Error ? error.message : String(error)}.`));
      return;
    }
    const result = outcome;
    if (!result) settle(() => handlers.onInterrupted('The stream ended before the answer was complete.'));
    else if (result.kind === 'end') settle(() => handlers.onEnd(result.end));
    else settle(() => handlers.onError(result.error));
    void reader.cancel().catch(() => undefined);
    // Ended and read: the page has it, the server's copy would only fill its store.
    if (result && at.id) void this.call('DELETE', encodeURIComponent(at.id));
  }
}
