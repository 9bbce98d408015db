import { useEffect, useRef } from 'react';
import type { DropPlan } from '../state/context';

interface OverflowOfferProps {
  /** What was held back: a message (send, edit) or a new answer (regenerate). */
  what: 'message' | 'answer';
  promptTokens: number;
  limit: number;
  room: number;
  /** null: even without every earlier turn it does not fit. */
  plan: DropPlan | null;
  systemPromptKept: boolean;
  onNewConversation(): void;
  onDrop(): void;
  onDismiss(): void;
}

const format = (n: number) => n.toLocaleString('en-US');

function excerpt(text: string): string {
  const line = text.trim().split('\n')[0]?.trim() ?? '';
  return line.length > 48 ? `${line.slice(0, 45)}…` : line || '(empty)';
}

/** Shown instead of sending a message that would overflow the context: the ways on, explicit. */
export function OverflowOffer({ what, promptTokens, limit, room, plan, systemPromptKept, onNewConversation, onDrop, onDismiss }: OverflowOfferProps) {
  const first = useRef<HTMLButtonElement>(null);
  useEffect(() => first.current?.focus(), []);
  const turns = plan?.count ?? 0;
  return (
    <section className="overflow-offer" role="alertdialog" aria-labelledby="overflow-title" aria-describedby="overflow-why">
      <h2 id="overflow-title">{what === 'message' ? 'This message would not fit' : 'A new answer would not fit'}</h2>
      <p id="overflow-why">
        The conversation {what === 'message' ? 'with it' : 'before the answer'} is {format(promptTokens)} tokens; the model's context holds {format(limit)}, and the
        answer needs at least {format(room)}. {what === 'message' ? 'It was not sent.' : 'Nothing was asked.'}
      </p>
      {plan ? (
        <div className="overflow-drop">
          <p>
            Dropping the oldest {turns === 1 ? 'turn' : `${turns} turns`} brings it to {format(plan.promptTokens)} tokens
            {systemPromptKept ? '; the system prompt is kept' : ''}. They stay in view, folded, but the model no longer sees them:
          </p>
          <ol className="overflow-turns">
            {plan.turns.map((turn) => (
              <li key={turn.ids[0]}>
                Turn {turn.number}: “{excerpt(turn.question)}”{turn.ids.length > 1 ? ' and its answer' : ''}
              </li>
            ))}
          </ol>
        </div>
      ) : (
        <p>Even without any earlier turn it does not fit: shorten the message.</p>
      )}
      <div className="overflow-actions">
        <button ref={first} type="button" className="button-primary" onClick={onNewConversation}>
          Start a new conversation
        </button>
        {plan ? (
          <button type="button" className="button-secondary" onClick={onDrop}>
            Drop the oldest {turns === 1 ? 'turn' : `${turns} turns`}
          </button>
        ) : null}
        <button type="button" className="button-ghost" onClick={onDismiss}>
          Keep editing
        </button>
      </div>
    </section>
  );
}
