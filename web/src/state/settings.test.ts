import { describe, expect, it } from 'vitest';
import { DEFAULT_SETTINGS, loadSettings, parseSettings, parseTools, samplingParams, saveSettings, SETTINGS_VERSION } from './settings';

const WEATHER = { type: 'function', function: { name: 'get_weather', description: 'The weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } };

describe('parseTools', () => {
  it('takes OpenAI tool lists, and empty text as none', () => {
    expect(parseTools('')).toEqual({ tools: [] });
    expect(parseTools(JSON.stringify([WEATHER]))).toEqual({ tools: [WEATHER] });
  });

  it('says what is wrong with anything else', () => {
    const errors = ['{', '{"type": "function"}', '[{"type": "function"}]', '[{"type": "function", "function": {"name": "has space"}}]',
      JSON.stringify([WEATHER, WEATHER]), '[{"type": "function", "function": {"name": "f", "parameters": [1]}}]'];
    for (const text of errors) expect(parseTools(text)).toHaveProperty('error');
    expect(parseTools(JSON.stringify([WEATHER, WEATHER]))).toEqual({ error: 'tool 2: the name get_weather is offered twice' });
  });
});

describe('settings: tools and reasoning', () => {
  it('asks for the thinking apart, and sends tools with their choice only when there are some', () => {
    expect(samplingParams(DEFAULT_SETTINGS)).toEqual({ reasoning_format: 'auto' });
    const parsed = parseTools(JSON.stringify([WEATHER]));
    const withTools = { ...DEFAULT_SETTINGS, tools: 'tools' in parsed ? parsed.tools : [], toolChoice: 'required' as const };
    expect(samplingParams(withTools)).toMatchObject({ tools: [WEATHER], tool_choice: 'required' });
    expect(samplingParams(withTools).parallel_tool_calls).toBeUndefined();
    expect(samplingParams({ ...withTools, parallelToolCalls: false }).parallel_tool_calls).toBe(false);
  });

  it('keeps valid stored tools and drops broken ones', () => {
    expect(parseSettings(JSON.stringify({ tools: [WEATHER], toolChoice: 'none' }))).toMatchObject({ tools: [WEATHER], toolChoice: 'none' });
    expect(parseSettings(JSON.stringify({ tools: [{ type: 'x' }], toolChoice: 'sometimes' }))).toMatchObject({ tools: [], toolChoice: 'auto' });
  });
});

describe('settings: max tokens "fit"', () => {
  it('defaults to fit: no max_tokens is sent', () => {
    expect(DEFAULT_SETTINGS.maxTokens).toBeNull();
    expect(samplingParams(DEFAULT_SETTINGS)).not.toHaveProperty('max_tokens');
    expect(samplingParams({ ...DEFAULT_SETTINGS, maxTokens: 300 }).max_tokens).toBe(300);
  });

  it('migrates records of before (no version, the old default null or nothing) to fit, and keeps a number the user set', () => {
    expect(parseSettings(JSON.stringify({ transport: 'sse', maxTokens: null })).maxTokens).toBeNull();
    expect(parseSettings(JSON.stringify({ transport: 'sse' })).maxTokens).toBeNull();
    for (const broken of [0, -5, 1.5, '512', true, 1e400]) expect(parseSettings(JSON.stringify({ maxTokens: broken })).maxTokens).toBeNull();
    expect(parseSettings(JSON.stringify({ maxTokens: 300 })).maxTokens).toBe(300);
    expect(parseSettings(JSON.stringify({ maxTokens: 300, version: SETTINGS_VERSION })).maxTokens).toBe(300);
  });

  it('stores the version with the settings', () => {
    const store = new Map<string, string>();
    const original = globalThis.localStorage;
    Object.defineProperty(globalThis, 'localStorage', {
      configurable: true,
      value: { getItem: (k: string) => store.get(k) ?? null, setItem: (k: string, v: string) => void store.set(k, v) },
    });
    try {
      saveSettings({ ...DEFAULT_SETTINGS, maxTokens: 42 });
      const saved = JSON.parse(store.get('tokenpipe.settings') ?? '{}') as Record<string, unknown>;
      expect(saved.version).toBe(SETTINGS_VERSION);
      expect(loadSettings().maxTokens).toBe(42);
    } finally {
      Object.defineProperty(globalThis, 'localStorage', { configurable: true, value: original });
    }
  });
});
