import { describe, expect, it } from 'vitest';
import { conversationSettingsFrom, effectiveSettings, ownFields, withOwn } from './conversationSettings';
import { DEFAULT_SETTINGS, samplingParams } from './settings';

describe("a conversation's own settings", () => {
  const global = { ...DEFAULT_SETTINGS, temperature: 0.7, maxTokens: 200, systemPrompt: 'Hi' };

  it('override the global ones field by field; the rest stay the defaults', () => {
    const own = withOwn(undefined, { temperature: 0, answerFormat: 'schema', jsonSchema: { type: 'object' }, think: true, transport: 'sse', apiKey: 'k' });
    expect(own).toEqual({ temperature: 0, answerFormat: 'schema', jsonSchema: { type: 'object' }, think: true }); // transport and key stay global
    const s = effectiveSettings(global, own);
    expect(s).toMatchObject({ temperature: 0, maxTokens: 200, systemPrompt: 'Hi', think: true });
    expect(samplingParams(s)).toMatchObject({ temperature: 0, max_tokens: 200, think: true, response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: { type: 'object' } } } });
    expect(samplingParams({ ...s, answerFormat: 'json' }).response_format).toEqual({ type: 'json_object' });
    expect(samplingParams(global)).not.toHaveProperty('response_format');
    expect(ownFields(global, { ...own, maxTokens: 200 })).toEqual(['temperature', 'answerFormat', 'jsonSchema', 'think']);
    expect(effectiveSettings(global, undefined)).toBe(global);
  });

  it('read back checked, unknown or invalid fields dropped or reset', () => {
    expect(conversationSettingsFrom({ maxTokens: 0, toolChoice: 'required', apiKey: 'x' })).toEqual({ maxTokens: null, toolChoice: 'required' });
    expect(conversationSettingsFrom('no')).toBeUndefined();
    expect(conversationSettingsFrom({})).toBeUndefined();
  });
});
