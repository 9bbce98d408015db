import type { TransportKind } from '../api/types';
import { TRANSPORT_NAMES } from './format';

const KINDS: TransportKind[] = ['ws', 'sse', 'responses', 'rest'];
const DESCRIPTIONS: Record<TransportKind, string> = {
  ws: 'WebSocket, tokenpipe.v1: streamed, queue position, resumable',
  sse: 'Server-sent events: OpenAI chat completions, streamed',
  rest: 'REST: OpenAI chat completions, the whole answer at once',
  responses: 'Responses: OpenAI Responses API, streamed events (temperature, top p, max tokens and seed only)',
};

/** `className`: where it shows (the header on wide screens, Settings on phones); `name`: its radio group. */
export function TransportSwitch({ value, onChange, className = 'segmented', name = 'transport' }: { value: TransportKind; onChange(kind: TransportKind): void; className?: string; name?: string }) {
  return (
    <fieldset className={className}>
      <legend className="visually-hidden">Transport</legend>
      {KINDS.map((kind) => (
        <label key={kind} title={DESCRIPTIONS[kind]}>
          <input type="radio" name={name} value={kind} checked={value === kind} onChange={() => onChange(kind)} />
          <span>{TRANSPORT_NAMES[kind]}</span>
        </label>
      ))}
    </fieldset>
  );
}
