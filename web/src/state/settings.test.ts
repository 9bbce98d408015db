import { describe, expect, it } from 'vitest';
import { DEFAULT_SETTINGS, parseSettings, parseTools, samplingParams } from './settings';

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
