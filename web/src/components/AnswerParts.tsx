/** The thinking folded above an answer, and the answer's tool calls as cards. */
import { memo, useId, useState } from 'react';
import { callId } from '../state/outgoing';
import { Brain, ChevronDown, ChevronRight, Wrench } from 'lucide-react';
import type { Message } from '../state/conversations';
import { prettyJsonPrefix, thoughtFor, type ToolCall } from '../state/parts';
import { useFrameClock } from './useFrameClock';

/**
 * "Thinking…" while the thinking streams (open, so it can be read as it comes), then
 * "Thought for N s", folded once the answer starts; a click opens or folds it for good.
 */
export const ReasoningView = memo(function ReasoningView({ message }: { message: Message }) {
  const [chosen, setChosen] = useState<boolean | null>(null);
  const id = useId();
  const running = message.status === 'streaming' || message.status === 'waiting';
  const thinking = running && message.reasoningEndedAt === undefined;
  const now = useFrameClock(thinking);
  const open = chosen ?? thinking;
  const start = message.reasoningStartedAt;
  const end = message.reasoningEndedAt ?? (thinking ? now : undefined);
  const label = thinking ? 'Thinking…' : start !== undefined && end !== undefined ? thoughtFor(Math.max(0, end - start)) : 'Thought';
  const Chevron = open ? ChevronDown : ChevronRight;
  return (
    <div className="reasoning" data-open={open}>
      <button type="button" className="reasoning-toggle" aria-expanded={open} aria-controls={id} onClick={() => setChosen(!open)}>
        <Brain aria-hidden="true" size={16} />
        <span className="reasoning-label">{label}</span>
        <Chevron aria-hidden="true" size={16} />
      </button>
      {open ? (
        <div id={id} className="reasoning-text" role="region" aria-label="The model's thinking">
          {message.reasoning}
        </div>
      ) : null}
    </div>
  );
});

function ToolCallCard({ call, running, result, form }: { call: ToolCall; running: boolean; result?: string | undefined; form?: { value: string; onChange(value: string): void } | undefined }) {
  const name = call.name ?? 'a function';
  const id = useId();
  return (
    <section className="tool-call" aria-label={`Tool call ${name}`} data-index={call.index}>
      <header>
        <Wrench aria-hidden="true" size={16} />
        <code className="tool-call-name">{name}</code>
        {call.id ? <span className="tool-call-id">{call.id}</span> : null}
      </header>
      <pre className="tool-call-arguments" aria-busy={running}>
        <code>{prettyJsonPrefix(call.arguments)}</code>
      </pre>
      {result !== undefined ? (
        <div className="tool-call-result">
          <span className="tool-call-result-label">Result</span>
          <pre>{result}</pre>
        </div>
      ) : form ? (
        <div className="tool-call-result field">
          <label htmlFor={id}>Result of {name}</label>
          <textarea id={id} rows={2} className="code-input" spellCheck={false} value={form.value} placeholder='What the tool returned, e.g. {"temperature": 18}' onChange={(event) => form.onChange(event.target.value)} />
        </div>
      ) : null}
    </section>
  );
}

/** The answer's calls as cards; `onResults`: the calls can be answered by hand (the last answer, ended), one result a card. */
export function ToolCallCards({ message, onResults }: { message: Message; onResults?: ((results: Record<string, string>) => void) | undefined }) {
  const calls = message.toolCalls ?? [];
  const [typed, setTyped] = useState<Record<string, string>>({});
  if (calls.length === 0) return null;
  const running = message.status === 'streaming' || message.status === 'waiting';
  const answered = message.toolResults;
  const ready = calls.every((call) => (typed[callId(call)] ?? '').trim() !== '');
  return (
    <div className="tool-calls">
      {calls.map((call) => (
        <ToolCallCard
          key={call.index}
          call={call}
          running={running}
          result={answered?.[callId(call)]}
          form={!answered && onResults ? { value: typed[callId(call)] ?? '', onChange: (value) => setTyped((t) => ({ ...t, [callId(call)]: value })) } : undefined}
        />
      ))}
      {!answered && onResults ? (
        <button type="button" className="button-primary small send-results" disabled={!ready} onClick={() => onResults(Object.fromEntries(calls.map((call) => [callId(call), typed[callId(call)] ?? ''])))}>
          {calls.length === 1 ? 'Send the result' : 'Send the results'}
        </button>
      ) : null}
    </div>
  );
}
