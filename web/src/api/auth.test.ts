import { describe, expect, it } from 'vitest';
import { authHeaders, base64url, wsProtocols } from './auth';

describe('auth', () => {
  it('base64url-encodes UTF-8 without padding or +/', () => {
    expect(base64url('')).toBe('');
    expect(base64url('f')).toBe('Zg');
    expect(base64url('\u00ff\u00fe?')).toBe('w7_Dvj8');
    expect(base64url('key with spaces/+')).not.toMatch(/[+/=\s]/);
  });

  it('adds the key to subprotocols and headers only when set', () => {
    expect(wsProtocols('  ')).toEqual(['tokenpipe.v1']);
    expect(wsProtocols('abc')).toEqual(['tokenpipe.v1', 'tokenpipe.bearer.YWJj']);
    expect(authHeaders('')).toEqual({});
    expect(authHeaders(' abc ')).toEqual({ Authorization: 'Bearer abc' });
  });
});
