/**
 * Exact token counts from the server: `POST /v1/messages/count_tokens` (Anthropic's route;
 * the prompt counted as a generation renders it, with the engine's chat template and
 * tokenizer) and the context a model has (`GET /v1/models`, `max_model_len`).
 */
import type { ToolSpec, WireMessage } from './types';
import { anthropicMessages } from './wire';

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The key travels as Anthropic's header here: the route takes `x-api-key` (or a bearer). */
function headers(apiKey: string | undefined): Record<string, string> {
  const key = apiKey?.trim();
  return { 'Content-Type': 'application/json', ...(key ? { 'x-api-key': key } : {}) };
}

/** The page's prompt in Anthropic's shape: the system prompt apart, tools with input_schema. */
export function countTokensBody(messages: WireMessage[], model?: string, tools: ToolSpec[] = []): Record<string, unknown> {
  const system = messages.filter((m) => m.role === 'system').map((m) => m.content).join('\n');
  return {
    ...(model ? { model } : {}),
    ...(system ? { system } : {}),
    messages: anthropicMessages(messages),
    ...(tools.length
      ? {
          tools: tools.map((t) => ({
            name: t.function.name,
            ...(t.function.description ? { description: t.function.description } : {}),
            input_schema: t.function.parameters ?? { type: 'object' },
          })),
        }
      : {}),
  };
}

/**
 * A count not answered by then is given up (null): the page holds a send, edit or
 * regenerate while its prompt is counted, and a server that never answers must not hold
 * it, and every later one, for good.
 */
export const COUNT_TIMEOUT_MS = 20_000;

export interface CountOptions {
  baseUrl: string;
  apiKey?: string;
  model?: string;
  tools?: ToolSpec[];
  signal?: AbortSignal;
  fetch?: typeof fetch;
  timeoutMs?: number;
}

/** The prompt's tokens; null where the server cannot count (no route, no tokenizer, refused). */
export async function countTokens(messages: WireMessage[], options: CountOptions): Promise<number | null> {
  // Anthropic's route takes a conversation that ends with a question (or a tool's result).
  const last = messages[messages.length - 1]?.role;
  if (last !== 'user' && last !== 'tool') return null;
  const fetchImpl = options.fetch ?? fetch;
  // The caller's signal (a newer draft) or the timeout, whichever comes first.
  const controller = new AbortController();
  const abort = () => controller.abort();
  const timer = setTimeout(abort, options.timeoutMs ?? COUNT_TIMEOUT_MS);
  options.signal?.addEventListener('abort', abort);
  if (options.signal?.aborted) abort();
  try {
    const response = await fetchImpl(`${options.baseUrl}/v1/messages/count_tokens`, {
      method: 'POST',
      headers: headers(options.apiKey),
      body: JSON.stringify(countTokensBody(messages, options.model, options.tools)),
      signal: controller.signal,
    });
    if (!response.ok) return null;
    const body: unknown = await response.json();
    return isRecord(body) && typeof body.input_tokens === 'number' ? body.input_tokens : null;
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', abort);
  }
}

/** The context one conversation of `model` (else the first model) may use, from `/v1/models`. */
export async function contextTokensOf(baseUrl: string, apiKey?: string, model?: string, fetchImpl: typeof fetch = fetch): Promise<number | null> {
  try {
    const key = apiKey?.trim();
    const response = await fetchImpl(`${baseUrl}/v1/models`, { headers: key ? { Authorization: `Bearer ${key}` } : {} });
    if (!response.ok) return null;
    const body: unknown = await response.json();
    if (!isRecord(body) || !Array.isArray(body.data)) return null;
    const cards = body.data.filter(isRecord);
    const card = cards.find((c) => c.id === model) ?? cards[0];
    return card && typeof card.max_model_len === 'number' ? card.max_model_len : null;
  } catch {
    return null;
  }
}
