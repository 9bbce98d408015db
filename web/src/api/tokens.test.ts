import { describe, expect, it } from 'vitest';
import { contextTokensOf, countTokens, countTokensBody } from './tokens';

describe('count_tokens', () => {
  it('sends the prompt in Anthropic\'s shape: the system prompt apart, tools with input_schema', () => {
    const body = countTokensBody(
      [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'hello' },
        { role: 'user', content: 'more' },
      ],
      'm',
      [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }],
    );
    expect(body).toEqual({
      model: 'm',
      system: 'Be brief.',
      messages: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'hello' },
        { role: 'user', content: 'more' },
      ],
      tools: [{ name: 'f', input_schema: { type: 'object', properties: {} } }],
    });
  });

  it('reads input_tokens, says null when the server cannot count, and asks nothing for a prompt that ends with an answer', async () => {
    const calls: [string, RequestInit | undefined][] = [];
    const ok = (async (url: string, init?: RequestInit) => {
      calls.push([url, init]);
      return new Response(JSON.stringify({ input_tokens: 42 }), { status: 200 });
    }) as unknown as typeof fetch;
    expect(await countTokens([{ role: 'user', content: 'hi' }], { baseUrl: 'http://x', apiKey: ' k ', fetch: ok })).toBe(42);
    expect(calls[0]?.[0]).toBe('http://x/v1/messages/count_tokens');
    expect((calls[0]?.[1]?.headers as Record<string, string>)['x-api-key']).toBe('k');
    expect(await countTokens([{ role: 'assistant', content: 'a' }], { baseUrl: 'http://x', fetch: ok })).toBeNull();
    expect(calls).toHaveLength(1);
    const refused = (async () => new Response('{}', { status: 500 })) as unknown as typeof fetch;
    expect(await countTokens([{ role: 'user', content: 'hi' }], { baseUrl: 'http://x', fetch: refused })).toBeNull();
    const down = (async () => {
      throw new TypeError('network');
    }) as unknown as typeof fetch;
    expect(await countTokens([{ role: 'user', content: 'hi' }], { baseUrl: 'http://x', fetch: down })).toBeNull();
  });

  it('gives up a count the server never answers (null), and stops with the caller\'s signal', async () => {
    const hanging = ((_url: string, init?: RequestInit) =>
      new Promise<Response>((_resolve, reject) => {
        init?.signal?.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError')));
      })) as unknown as typeof fetch;
    const question = [{ role: 'user' as const, content: 'hi' }];
    expect(await countTokens(question, { baseUrl: 'http://x', fetch: hanging, timeoutMs: 20 })).toBeNull();
    const caller = new AbortController();
    const pending = countTokens(question, { baseUrl: 'http://x', fetch: hanging, signal: caller.signal, timeoutMs: 60_000 });
    caller.abort();
    expect(await pending).toBeNull();
  });

  it('takes the context of the model from /v1/models', async () => {
    const models = (async () =>
      new Response(JSON.stringify({ data: [{ id: 'a', max_model_len: 1024 }, { id: 'b', max_model_len: 4096 }] }), { status: 200 })) as unknown as typeof fetch;
    expect(await contextTokensOf('http://x', undefined, 'b', models)).toBe(4096);
    expect(await contextTokensOf('http://x', undefined, undefined, models)).toBe(1024);
  });
});
