/** User settings, kept in localStorage (the API key too: it never leaves this browser but for the server). */
import type { SamplingParams, TransportKind } from '../api/types';

export interface Settings {
  transport: TransportKind;
  systemPrompt: string;
  /** null: the server's default. */
  temperature: number | null;
  topP: number | null;
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
}

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
};

const KEY = 'tokenpipe.settings';
const TRANSPORTS: readonly TransportKind[] = ['ws', 'sse', 'rest'];

function numberOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
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
    maxTokens: numberOrNull(v.maxTokens),
    seed: numberOrNull(v.seed),
    topK: numberOrNull(v.topK),
    minP: numberOrNull(v.minP),
    repetitionPenalty: numberOrNull(v.repetitionPenalty),
    stop: Array.isArray(v.stop) ? parseStopStrings(v.stop.filter((x): x is string => typeof x === 'string').join('\n')) : [],
    apiKey: typeof v.apiKey === 'string' ? v.apiKey : '',
    model: typeof v.model === 'string' ? v.model : '',
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
    localStorage.setItem(KEY, JSON.stringify(settings));
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
  return params;
}

/** One stop string a line, as the protocol takes them: 1 to 256 characters, at most 16. */
export function parseStopStrings(text: string): string[] {
  return text
    .split('\n')
    .filter((line) => line.length > 0 && line.length <= 256)
    .slice(0, 16);
}
