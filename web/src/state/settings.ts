/** User settings, kept in localStorage (the API key too: it never leaves this browser but for the server). */
import type { SamplingParams, ToolChoice, ToolSpec, TransportKind } from '../api/types';

export interface Settings {
  transport: TransportKind;
  systemPrompt: string;
  /** null: the server's default. */
  temperature: number | null;
  topP: number | null;
  /** null: "fit", no max_tokens sent (the server's default, or what still fits); a number only when the user sets one. */
  maxTokens: number | null;
  seed: number | null;
  topK: number | null;
  minP: number | null;
  repetitionPenalty: number | null;
  /** Empty: none. */
  stop: string[];
  apiKey: string;
  /** '' : the server's default model. */
  model: string;
  /** Functions offered to the model with each message (validated by parseTools); empty: none. */
  tools: ToolSpec[];
  toolChoice: ToolChoice;
  /** false: at most one call per answer. */
  parallelToolCalls: boolean;
  /** The answer's shape: free text, any JSON object, or JSON that `jsonSchema` allows. */
  answerFormat: AnswerFormat;
  /** The schema for answerFormat 'schema' (a JSON Schema object); null: none set. */
  jsonSchema: Record<string, unknown> | null;
  /** Ask the model to think before it answers. */
  think: boolean;
}

export type AnswerFormat = 'text' | 'json' | 'schema';
export const ANSWER_FORMATS: readonly AnswerFormat[] = ['text', 'json', 'schema'];

export const DEFAULT_SETTINGS: Settings = {
  transport: 'ws',
  systemPrompt: '',
  temperature: null,
  topP: null,
  maxTokens: null,
  seed: null,
  topK: null,
  minP: null,
  repetitionPenalty: null,
  stop: [],
  apiKey: '',
  model: '',
  tools: [],
  toolChoice: 'auto',
  parallelToolCalls: true,
  answerFormat: 'text',
  jsonSchema: null,
  think: false,
};

const KEY = 'tokenpipe.settings';
/** 2: max tokens is "fit" unless set (records before it had no version). */
export const SETTINGS_VERSION = 2;
const TRANSPORTS: readonly TransportKind[] = ['ws', 'sse', 'rest', 'responses'];
export const TOOL_CHOICES: readonly ToolChoice[] = ['auto', 'required', 'none'];
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const MAX_TOOLS = 128;

function numberOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/**
 * A stored max tokens: a whole number of at least 1 the user set, else "fit" (null). Records
 * of every earlier version stored the old default, "server default", as null (or nothing):
 * they read as "fit"; whatever is not a valid count reads so too.
 */
export function maxTokensFrom(value: unknown): number | null {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 ? value : null;
}

export function parseSettings(raw: string | null): Settings {
  if (!raw) return DEFAULT_SETTINGS;
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return DEFAULT_SETTINGS;
  }
  if (typeof value !== 'object' || value === null) return DEFAULT_SETTINGS;
  const v = value as Record<string, unknown>;
  return {
    transport: TRANSPORTS.find((t) => t === v.transport) ?? DEFAULT_SETTINGS.transport,
    systemPrompt: typeof v.systemPrompt === 'string' ? v.systemPrompt : '',
    temperature: numberOrNull(v.temperature),
    topP: numberOrNull(v.topP),
    maxTokens: maxTokensFrom(v.maxTokens),
    seed: numberOrNull(v.seed),
    topK: numberOrNull(v.topK),
    minP: numberOrNull(v.minP),
    repetitionPenalty: numberOrNull(v.repetitionPenalty),
    stop: Array.isArray(v.stop) ? parseStopStrings(v.stop.filter((x): x is string => typeof x === 'string').join('\n')) : [],
    apiKey: typeof v.apiKey === 'string' ? v.apiKey : '',
    model: typeof v.model === 'string' ? v.model : '',
    tools: toolsFrom(v.tools),
    toolChoice: TOOL_CHOICES.find((c) => c === v.toolChoice) ?? 'auto',
    parallelToolCalls: v.parallelToolCalls !== false,
    answerFormat: ANSWER_FORMATS.find((f) => f === v.answerFormat) ?? 'text',
    jsonSchema: isRecord(v.jsonSchema) ? v.jsonSchema : null,
    think: v.think === true,
  };
}

export function loadSettings(): Settings {
  try {
    return parseSettings(localStorage.getItem(KEY));
  } catch {
    return DEFAULT_SETTINGS;
  }
}

export function saveSettings(settings: Settings): void {
  try {
    localStorage.setItem(KEY, JSON.stringify({ ...settings, version: SETTINGS_VERSION }));
  } catch {
    // storage unavailable: settings last for this page only
  }
}

export function samplingParams(settings: Settings): SamplingParams {
  const params: SamplingParams = {};
  if (settings.temperature !== null) params.temperature = settings.temperature;
  if (settings.topP !== null) params.top_p = settings.topP;
  if (settings.maxTokens !== null) params.max_tokens = settings.maxTokens;
  if (settings.seed !== null) params.seed = settings.seed;
  if (settings.topK !== null) params.top_k = settings.topK;
  if (settings.minP !== null) params.min_p = settings.minP;
  if (settings.repetitionPenalty !== null) params.repetition_penalty = settings.repetitionPenalty;
  if (settings.stop.length) params.stop = settings.stop;
  // The page shows the thinking folded above the answer, so it asks for it apart.
  params.reasoning_format = 'auto';
  if (settings.tools.length) {
    params.tools = settings.tools;
    params.tool_choice = settings.toolChoice;
    if (!settings.parallelToolCalls) params.parallel_tool_calls = false;
  }
  if (settings.answerFormat === 'json') params.response_format = { type: 'json_object' };
  if (settings.answerFormat === 'schema' && settings.jsonSchema) params.response_format = { type: 'json_schema', json_schema: { name: 'answer', schema: settings.jsonSchema } };
  if (settings.think) params.think = true;
  return params;
}

/** One stop string a line, as the protocol takes them: 1 to 256 characters, at most 16. */
export function parseStopStrings(text: string): string[] {
  return text
    .split('\n')
    .filter((line) => line.length > 0 && line.length <= 256)
    .slice(0, 16);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Stored tools read back: the valid list, else none. */
function toolsFrom(value: unknown): ToolSpec[] {
  const parsed = Array.isArray(value) ? checkTools(value) : null;
  return parsed && 'tools' in parsed ? parsed.tools : [];
}

function checkTools(value: unknown): { tools: ToolSpec[] } | { error: string } {
  if (!Array.isArray(value)) return { error: 'a JSON array of tools is needed: [{"type": "function", "function": {...}}]' };
  if (value.length > MAX_TOOLS) return { error: `at most ${MAX_TOOLS} tools` };
  const tools: ToolSpec[] = [];
  const names = new Set<string>();
  for (const [i, item] of value.entries()) {
    const where = `tool ${i + 1}`;
    if (!isRecord(item) || item.type !== 'function' || !isRecord(item.function)) return { error: `${where}: {"type": "function", "function": {"name", "parameters"}} is needed` };
    const fn = item.function;
    if (typeof fn.name !== 'string' || !TOOL_NAME.test(fn.name)) return { error: `${where}: a name of 1 to 64 letters, digits, _ or - is needed` };
    if (names.has(fn.name)) return { error: `${where}: the name ${fn.name} is offered twice` };
    names.add(fn.name);
    if (fn.description !== undefined && typeof fn.description !== 'string') return { error: `${where}: the description must be a string` };
    if (fn.parameters !== undefined && !isRecord(fn.parameters)) return { error: `${where}: the parameters must be a JSON Schema object` };
    tools.push({
      type: 'function',
      function: {
        name: fn.name,
        ...(typeof fn.description === 'string' ? { description: fn.description } : {}),
        ...(isRecord(fn.parameters) ? { parameters: fn.parameters } : {}),
      },
    });
  }
  return { tools };
}

/** The Tools field of Settings: empty is none; anything else must be OpenAI's tool list. */
export function parseTools(text: string): { tools: ToolSpec[] } | { error: string } {
  if (!text.trim()) return { tools: [] };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return { error: `not JSON: ${error instanceof Error ? error.message : String(error)}` };
  }
  return checkTools(value);
}

/** The JSON schema field: empty is none; anything else must be a JSON object (a JSON Schema). */
export function parseSchema(text: string): { schema: Record<string, unknown> | null } | { error: string } {
  if (!text.trim()) return { schema: null };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return { error: `not JSON: ${error instanceof Error ? error.message : String(error)}` };
  }
  return isRecord(value) ? { schema: value } : { error: 'a JSON Schema is a JSON object: {"type": "object", "properties": {...}}' };
}
