import type { TransportKind } from '../api/types';
import { TRANSPORT_NAMES } from './format';

const KINDS: TransportKind[] = ['ws', 'sse', 'responses', 'rest'];
const DESCRIPTIONS: Record<TransportKind, string> = {
  ws: 'WebSocket, tokenpipe.v1: streamed, queue position, resumable',
  sse: 'Server-sent events: OpenAI chat completions, streamed',
  rest: 'REST: OpenAI chat completions, the whole answer at once',
  responses: 'Responses: OpenAI Responses API, streamed events (temperature, top p, max tokens and seed only)',
};

export function TransportSwitch({ value, onChange }: { value: TransportKind; onChange(kind: TransportKind): void }) {
  return (
    <fieldset className="segmented">
      <legend className="visually-hidden">Transport</legend>
      {KINDS.map((kind) => (
        <label key={kind} title={DESCRIPTIONS[kind]}>
          <input type="radio" name="transport" value={kind} checked={value === kind} onChange={() => onChange(kind)} />
          <span>{TRANSPORT_NAMES[kind]}</span>
        </label>
      ))}
    </fieldset>
  );
}
