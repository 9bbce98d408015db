/** The thinking folded above an answer, and the answer's tool calls as cards. */
import { memo, useId, useState } from 'react';
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

function ToolCallCard({ call, running }: { call: ToolCall; running: boolean }) {
  const name = call.name ?? 'a function';
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
    </section>
  );
}

export function ToolCallCards({ message }: { message: Message }) {
  const calls = message.toolCalls ?? [];
  if (calls.length === 0) return null;
  const running = message.status === 'streaming' || message.status === 'waiting';
  return (
    <div className="tool-calls">
      {calls.map((call) => (
        <ToolCallCard key={call.index} call={call} running={running} />
      ))}
    </div>
  );
}
