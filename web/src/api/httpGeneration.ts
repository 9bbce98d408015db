/**
 * What the page's HTTP transports (OpenAI's Chat Completions, the Responses API) share: a
 * generation is one request (a POST, or the GET that resumes it), its outcome is reported
 * once, and cancelling it aborts the request (and stops the generation on the server, where
 * a resumable one would outlive its request).
 */
import { authHeaders } from './auth';
import { describeError, errorFromResponse } from './errors';
import type { GenerationHandle, GenerationHandlers } from './types';

/** Reports a generation's outcome: the first report wins (a cancel can race the stream's end). */
export type Settle = (report: () => void) => void;

/** The request of one generation: a POST with a JSON body, or (no body) the GET that resumes one. */
export interface GenerationPost {
  url: string;
  body?: unknown; // sent as JSON
  accept: string;
  headers?: Record<string, string>;
  apiKey?: string | undefined;
  fetch?: typeof fetch | undefined;
  /** Stops the generation on the server, where closing the request does not (a resumable one). */
  stopOnServer?: () => void;
}

/** Reads an ok response to its outcome. */
export type ReadAnswer = (response: Response, settle: Settle) => Promise<void>;

export const UNRESUMABLE =
  'The server no longer has this answer (it restarted, or the page was away longer than it keeps answers), so it cannot go on from where it stopped.';

/** Sends the request and reads its answer; cancel reports `cancelled` and aborts the request. */
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
      if (!settled) post.stopOnServer?.();
      // HTTP has no cancel frame: closing the request is how the server learns to stop.
      settle(() => handlers.onEnd({ finishReason: 'cancelled' }));
      controller.abort();
    },
  };
}

async function run(post: GenerationPost, signal: AbortSignal, handlers: GenerationHandlers, settle: Settle, read: ReadAnswer): Promise<void> {
  const resuming = post.body === undefined;
  let response: Response;
  try {
    response = await (post.fetch ?? fetch)(post.url, {
      method: resuming ? 'GET' : 'POST',
      headers: { ...(resuming ? {} : { 'Content-Type': 'application/json' }), Accept: post.accept, ...post.headers, ...authHeaders(post.apiKey) },
      ...(resuming ? {} : { body: JSON.stringify(post.body) }),
      signal,
    });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    settle(() => (resuming ? handlers.onInterrupted(`The answer could not be resumed: ${message}.`) : handlers.onError({ code: 'network', message })));
    return;
  }
  if (!response.ok) {
    const error = await errorFromResponse(response);
    if (!resuming) settle(() => handlers.onError(error));
    else if (response.status === 404) settle(() => handlers.onInterrupted(UNRESUMABLE, { unresumable: true }));
    else settle(() => handlers.onInterrupted(`The answer could not be resumed: ${describeError(error)}`));
    return;
  }
  await read(response, settle);
}
