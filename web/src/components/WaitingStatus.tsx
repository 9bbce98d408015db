/** What an answer that has no token yet is waiting for: its queue place, the prompt being read, and for how long. */
import type { Message } from '../state/conversations';
import { describeElapsed, describeLeft, msLeft } from '../state/progress';

export function WaitingStatus({ message, now }: { message: Message; now: number }) {
  const elapsed = describeElapsed(now - (message.requestedAt ?? message.createdAt));
  const prefill = message.prefill;
  let what: string;
  if (message.queuePosition !== undefined) what = message.queuePosition > 0 ? `In the queue: position ${message.queuePosition}` : 'The model is loading';
  else if (prefill) what = 'Reading your message';
  else what = 'Waiting for the model…';
  return (
    <div className="answer-status waiting-status" role="status">
      <p>
        <span className="typing" aria-hidden="true">
          <i />
          <i />
          <i />
        </span>
        {what}
        <span className="elapsed" title="Time since the answer was asked for">
          {elapsed}
        </span>
      </p>
      {prefill ? (
        <div className="prefill">
          <div
            className="prefill-bar"
            role="progressbar"
            aria-label="Prompt read"
            aria-valuemin={0}
            aria-valuemax={prefill.total}
            aria-valuenow={prefill.done}
            aria-valuetext={`${prefill.done} of ${prefill.total} prompt tokens read`}
          >
            <span style={{ width: `${(100 * prefill.done) / prefill.total}%` }} />
          </div>
          <span className="prefill-figures">
            {prefill.done.toLocaleString('en')} / {prefill.total.toLocaleString('en')} tokens · {prefill.done >= prefill.total ? 'first token next' : describeLeft(msLeft(prefill, now))}
          </span>
        </div>
      ) : null}
    </div>
  );
}
