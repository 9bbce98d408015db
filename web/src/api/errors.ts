import type { ApiError } from './types';

const EXPLANATIONS: Record<string, string> = {
  overloaded: 'The server is busy right now.',
  rate_limited: 'Too many requests for now.',
  context_overflow: 'The conversation is too long for the model: start a new one, or lower max tokens.',
  unauthorized: 'The server refused the API key: set the right one in Settings.',
  bad_request: 'The server did not accept the request.',
  unknown_model: 'The server does not know that model.',
  too_many_streams: 'Too many answers are running at once on this connection.',
  engine_error: 'The model failed while answering.',
  shutting_down: 'The server is shutting down.',
  moved: 'This answer continues in another tab or connection.',
  network: 'Could not reach the server.',
  http_error: 'The server answered with an error.',
};

/** One sentence a person can act on, followed by the server's own words where it gave some. */
export function describeError(error: ApiError): string {
  const lead = EXPLANATIONS[error.code] ?? 'Something went wrong.';
  const retry = error.retryAfterMs ? ` Try again in ${Math.max(1, Math.ceil(error.retryAfterMs / 1000))} s.` : '';
  const detail = error.message && !lead.includes(error.message) ? ` (${error.message})` : '';
  return `${lead}${retry}${detail}`;
}

const STATUS_CODES: Record<number, string> = {
  400: 'bad_request',
  401: 'unauthorized',
  403: 'unauthorized',
  404: 'http_error',
  413: 'context_overflow',
  429: 'rate_limited',
  503: 'overloaded',
};

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Turn an OpenAI-style `{"error": {...}}` value (or anything else) into an ApiError. */
export function errorFromOpenAiBody(body: unknown, httpStatus?: number): ApiError {
  const fallbackCode = (httpStatus && STATUS_CODES[httpStatus]) || 'http_error';
  const inner = isRecord(body) && isRecord(body.error) ? body.error : isRecord(body) ? body : null;
  if (!inner) {
    return { code: fallbackCode, message: httpStatus ? `HTTP ${httpStatus}` : 'unexpected response', httpStatus };
  }
  const code = typeof inner.code === 'string' ? inner.code : typeof inner.type === 'string' && inner.type in EXPLANATIONS ? inner.type : fallbackCode;
  const message = typeof inner.message === 'string' ? inner.message : typeof inner.detail === 'string' ? inner.detail : '';
  return { code, message, httpStatus };
}

export async function errorFromResponse(response: Response): Promise<ApiError> {
  const retryAfter = Number(response.headers.get('retry-after'));
  let body: unknown = null;
  try {
    const text = await response.text();
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  const error = errorFromOpenAiBody(body, response.status);
  if (Number.isFinite(retryAfter) && retryAfter > 0) error.retryAfterMs = retryAfter * 1000;
  return error;
}
