import { useEffect, useRef } from 'react';
import { answerRoom, overflows } from '../state/context';
import { chosenIds, roomLeft, turnKey } from '../state/overflow';
import type { Offer } from '../hooks/useOverflow';

interface OverflowOfferProps {
  offer: Offer;
  onToggle(key: string): void;
  onDrop(): void;
  onCut(): void;
  onAttach(): void;
  onNewConversation(): void;
  onDismiss(): void;
}

const format = (n: number) => n.toLocaleString('en-US');

function excerpt(text: string): string {
  const line = text.trim().split('\n')[0]?.trim() ?? '';
  return line.length > 48 ? `${line.slice(0, 45)}…` : line || '(files only)';
}

/** What a plan leaves, in words: the room for the answer and what follows. */
function leaves(promptTokens: number, limit: number): string {
  const left = roomLeft(promptTokens, limit);
  return `${format(promptTokens)} tokens, leaving ${format(left)} of ${format(limit)} for the answer and what follows`;
}

/** The turns to drop, each with its size; the largest are ticked first. */
function DropPlan({ offer, onToggle }: Pick<OverflowOfferProps, 'offer' | 'onToggle'>) {
  const { turns, chosen, planTokens, limit, maxTokens } = offer;
  const fits = planTokens !== null && !overflows(planTokens, limit, maxTokens);
  return (
    <fieldset className="overflow-drop">
      <legend>Turns to drop (the largest are ticked); they stay in view, folded, but the model no longer sees them:</legend>
      <ul className="overflow-turns">
        {turns.map((turn) => (
          <li key={turnKey(turn)}>
            <label className="checkbox">
              <input type="checkbox" checked={chosen.includes(turnKey(turn))} onChange={() => onToggle(turnKey(turn))} />
              <span>
                Turn {turn.number}: “{excerpt(turn.question)}”{turn.ids.length > 1 ? ' and its answer' : ''}
              </span>
              <span className="overflow-size">{format(turn.tokens)} tokens</span>
            </label>
          </li>
        ))}
      </ul>
      <p className="overflow-plan" role="status">
        {chosen.length === 0
          ? 'No turn ticked.'
          : planTokens === null
            ? 'Counting…'
            : fits
              ? `Without them the conversation is ${leaves(planTokens, limit)}${offer.systemPromptKept ? '; the system prompt is kept' : ''}.`
              : `Without them it is still ${format(planTokens)} tokens: tick more.`}
      </p>
    </fieldset>
  );
}

/** Shown instead of sending a message that would overflow the context: the ways on, each of which fits. */
export function OverflowOffer({ offer, onToggle, onDrop, onCut, onAttach, onNewConversation, onDismiss }: OverflowOfferProps) {
  const first = useRef<HTMLButtonElement>(null);
  useEffect(() => first.current?.focus(), []);
  const what = offer.action.type === 'send' || offer.action.type === 'edit' ? 'message' : 'answer';
  const fits = offer.planTokens !== null && !overflows(offer.planTokens, offer.limit, offer.maxTokens);
  const dropping = chosenIds(offer.turns, offer.chosen).length;
  const cut = offer.cut;
  const keptEach = cut ? Math.max(0, Math.round((cut.promptTokens - cut.markerTokens) / 2)) : 0;
  const files = offer.action.type === 'send' || offer.action.type === 'edit' ? (offer.action.user.attachments ?? []) : [];
  const part = cut && cut.part >= 0 ? `the file ${files[cut.part]?.name ?? ''}` : 'the message';
  return (
    <section className="overflow-offer" role="alertdialog" aria-labelledby="overflow-title" aria-describedby="overflow-why">
      <h2 id="overflow-title">{what === 'message' ? 'This message would not fit' : 'A new answer would not fit'}</h2>
      <p id="overflow-why">
        The conversation {what === 'message' ? 'with it' : 'before the answer'} is {format(offer.promptTokens)} tokens; the model's context holds {format(offer.limit)}, and
        the answer needs at least {format(answerRoom(offer.maxTokens))}. {what === 'message' ? 'It was not sent.' : 'Nothing was asked.'}
      </p>
      {offer.fitsAlone ? (
        <DropPlan offer={offer} onToggle={onToggle} />
      ) : cut ? (
        <p>
          It is too long by itself{cut.dropAll ? ', even without the earlier turns' : ''}: {part} can keep its
          first and last {format(keptEach)} tokens or so, with a note where the middle was cut; the conversation is then {leaves(cut.promptTokens, offer.limit)}
          {cut.dropAll ? `, and every earlier turn is dropped` : ''}.
        </p>
      ) : (
        <p>Even without any earlier turn it does not fit: shorten the question.</p>
      )}
      <div className="overflow-actions">
        {offer.fitsAlone ? (
          <>
            <button ref={first} type="button" className="button-primary" onClick={onDrop} disabled={!fits || dropping === 0}>
              Drop {offer.chosen.length === 1 ? '1 turn' : `${offer.chosen.length} turns`} and send
            </button>
            <button type="button" className="button-secondary" onClick={onNewConversation}>
              Start a new conversation
            </button>
          </>
        ) : null}
        {cut ? (
          <>
            <button ref={first} type="button" className="button-primary" onClick={onCut}>
              Keep the first and last {format(keptEach)} tokens
            </button>
            {cut.part < 0 && offer.action.type === 'send' ? (
              <button type="button" className="button-secondary" onClick={onAttach}>
                Attach as a file
              </button>
            ) : null}
          </>
        ) : null}
        <button ref={offer.fitsAlone || cut ? undefined : first} type="button" className="button-ghost" onClick={onDismiss}>
          Keep editing
        </button>
      </div>
    </section>
  );
}
