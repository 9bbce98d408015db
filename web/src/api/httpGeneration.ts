/**
 * What the page's HTTP transports (OpenAI's Chat Completions, the Responses API) share: a
 * generation is one POST, its outcome is reported once, and cancelling it aborts the request.
 */
import { authHeaders } from './auth';
import { errorFromResponse } from './errors';
import type { GenerationHandle, GenerationHandlers } from './types';

/** Reports a generation's outcome: the first report wins (a cancel can race the stream's end). */
export type Settle = (report: () => void) => void;

/** The POST of one generation. */
export interface GenerationPost {
  url: string;
  body: unknown; // sent as JSON
  accept: string;
  apiKey?: string | undefined;
  fetch?: typeof fetch | undefined;
}

/** Reads an ok response to its outcome. */
export type ReadAnswer = (response: Response, settle: Settle) => Promise<void>;

/** Sends the POST and reads its answer; cancel reports `cancelled` and aborts the request. */
export function startGeneration(post: GenerationPost, handlers: GenerationHandlers, read: ReadAnswer): GenerationHandle {
  const controller = new AbortController();
  let settled = false;
  const settle: Settle = (report) => {
    if (settled) return;
    settled = true;
    report();
  };
  void run(post, controller.signal, handlers, settle, read);
  return {
    cancel: () => {
      // HTTP has no cancel frame: closing the request is how the server learns to stop.
      settle(() => handlers.onEnd({ finishReason: 'cancelled' }));
      controller.abort();
    },
  };
}

async function run(post: GenerationPost, signal: AbortSignal, handlers: GenerationHandlers, settle: Settle, read: ReadAnswer): Promise<void> {
  let response: Response;
  try {
    response = await (post.fetch ?? fetch)(post.url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: post.accept, ...authHeaders(post.apiKey) },
      body: JSON.stringify(post.body),
      signal,
    });
  } catch (error) {
    settle(() => handlers.onError({ code: 'network', message: error instanceof Error ? error.message : String(error) }));
    return;
  }
  if (!response.ok) {
    const error = await errorFromResponse(response);
    settle(() => handlers.onError(error));
    return;
  }
  await read(response, settle);
}
