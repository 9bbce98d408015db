/**
 * A conversation's own settings (model, sampling, max tokens, tools, answer format,
 * thinking): only the fields it sets, over the global settings, which stay the defaults of
 * every conversation. Its system prompt is the conversation's own (Conversation.systemPrompt).
 */
import { parseSettings, type Settings } from './settings';

/** What a conversation may set for itself; transport, API key and the new-conversation system prompt stay global. */
export const OWN_KEYS = [
  'model',
  'temperature',
  'topP',
  'maxTokens',
  'seed',
  'topK',
  'minP',
  'repetitionPenalty',
  'stop',
  'tools',
  'toolChoice',
  'parallelToolCalls',
  'answerFormat',
  'jsonSchema',
  'think',
] as const satisfies readonly (keyof Settings)[];

export type OwnKey = (typeof OWN_KEYS)[number];
export type ConversationSettings = Partial<Pick<Settings, OwnKey>>;

function isOwnKey(key: string): key is OwnKey {
  return (OWN_KEYS as readonly string[]).includes(key);
}

/** The settings that apply in a conversation: its own fields, then the global ones. */
export function effectiveSettings(global: Settings, own: ConversationSettings | undefined): Settings {
  return own ? { ...global, ...own } : global;
}

/** The conversation's settings with `patch` applied (only the fields a conversation may set). */
export function withOwn(own: ConversationSettings | undefined, patch: Partial<Settings>): ConversationSettings {
  const next: ConversationSettings = { ...own };
  for (const [key, value] of Object.entries(patch)) if (isOwnKey(key)) Object.assign(next, { [key]: value });
  return next;
}

/** Which of the conversation's fields differ from the global settings (what "own" means on screen). */
export function ownFields(global: Settings, own: ConversationSettings | undefined): OwnKey[] {
  if (!own) return [];
  return OWN_KEYS.filter((key) => key in own && JSON.stringify(own[key]) !== JSON.stringify(global[key]));
}

/** Settings read back from storage or a file: each field checked as the global ones are, unknown ones dropped. */
export function conversationSettingsFrom(value: unknown): ConversationSettings | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const checked = parseSettings(JSON.stringify(value));
  const present = OWN_KEYS.filter((key) => key in value);
  return present.length ? Object.fromEntries(present.map((key) => [key, checked[key]])) : undefined;
}
