import { describe, expect, it } from 'vitest';
import { describeError, errorFromOpenAiBody } from './errors';

describe('describeError', () => {
  it('explains protocol codes in words, with the retry time and the server message', () => {
    expect(describeError({ code: 'overloaded', message: 'queue full', retryAfterMs: 1500 })).toBe('The server is busy right now. Try again in 2 s. (queue full)');
    expect(describeError({ code: 'context_overflow', message: '' })).toMatch(/too long for the model/);
  });

  it('still says something for a code it does not know', () => {
    expect(describeError({ code: 'weird', message: 'details' })).toBe('Something went wrong. (details)');
  });
});

describe('errorFromOpenAiBody', () => {
  it('reads FastAPI detail bodies too', () => {
    expect(errorFromOpenAiBody({ detail: 'Not Found' }, 404)).toEqual({ code: 'http_error', message: 'Not Found', httpStatus: 404 });
  });

  it('maps status codes where the body names no code', () => {
    expect(errorFromOpenAiBody({ error: { message: 'bad key', type: 'invalid_request_error' } }, 401)).toEqual({ code: 'unauthorized', message: 'bad key', httpStatus: 401 });
  });
});
