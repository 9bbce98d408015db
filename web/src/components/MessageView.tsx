import { memo, useLayoutEffect, useRef, useState, type KeyboardEvent } from 'react';
import { describeError } from '../api/errors';
import type { Message } from '../state/conversations';
import { autosize, isImeComposing } from './Composer';
import { CopyButton } from './CopyButton';
import { statsParts } from './format';
import { Markdown } from './Markdown';

export interface MessageActions {
  onEdit(messageId: string, content: string): void;
  onRegenerate(): void;
  onStop(messageId: string): void;
}

interface MessageViewProps {
  message: Message;
  /** The last answer of the conversation: the only one that can be regenerated. */
  isLast: boolean;
  /** False while another answer in this conversation is running. */
  canChange: boolean;
  /** This answer is running but its connection is down. */
  offline: boolean;
  actions: MessageActions;
}

function UserMessage({ message, canChange, actions }: Omit<MessageViewProps, 'isLast' | 'offline'>) {
  const [draft, setDraft] = useState<string | null>(null);
  const area = useRef<HTMLTextAreaElement>(null);
  useLayoutEffect(() => autosize(area.current), [draft]);

  const submit = () => {
    if (draft === null || !draft.trim()) return;
    actions.onEdit(message.id, draft);
    setDraft(null);
  };
  const onKeyDown = (event: KeyboardEvent<HTMLTextAreaElement>) => {
    if (event.key === 'Escape') setDraft(null);
    if (event.key === 'Enter' && !event.shiftKey && !isImeComposing(event)) {
      event.preventDefault();
      submit();
    }
  };

  if (draft !== null) {
    return (
      <article className="message user editing" aria-label="Editing your message">
        <label htmlFor={`edit-${message.id}`} className="visually-hidden">
          Edit your message
        </label>
        <textarea id={`edit-${message.id}`} ref={area} value={draft} onChange={(e) => setDraft(e.target.value)} onKeyDown={onKeyDown} autoFocus />
        <div className="edit-actions">
          <button type="button" className="button-ghost" onClick={() => setDraft(null)}>
            Cancel
          </button>
          <button type="button" className="button-primary" onClick={submit} disabled={!draft.trim()}>
            Save and send
          </button>
        </div>
      </article>
    );
  }
  return (
    <article className="message user" aria-label="You">
      <div className="bubble">{message.content}</div>
      <div className="message-actions">
        <CopyButton text={message.content} label="Copy your message" />
        <button type="button" className="button-ghost small" onClick={() => setDraft(message.content)} disabled={!canChange} aria-label="Edit and resend this message">
          Edit
        </button>
      </div>
    </article>
  );
}

function AnswerStatus({ message }: { message: Message }) {
  switch (message.status) {
    case 'waiting':
      return (
        <p className="answer-status" role="status">
          <span className="typing" aria-hidden="true">
            <i />
            <i />
            <i />
          </span>
          {message.queuePosition !== undefined ? `In the queue: position ${message.queuePosition}` : 'Waiting for the model…'}
        </p>
      );
    case 'stopped':
      return <p className="badge badge-stopped">Stopped</p>;
    case 'interrupted':
      return (
        <p className="badge badge-interrupted" role="status">
          Interrupted{message.note ? `: ${message.note}` : ''}
        </p>
      );
    case 'error':
      return message.error ? (
        <p className="answer-error" role="alert">
          {describeError(message.error)}
        </p>
      ) : null;
    case 'done':
      return message.finishReason === 'length' ? <p className="badge badge-stopped">Cut at the max tokens limit</p> : null;
    default:
      return null;
  }
}

function AssistantMessage({ message, isLast, canChange, offline, actions }: MessageViewProps) {
  const streaming = message.status === 'streaming' || message.status === 'waiting';
  return (
    <article className="message assistant" aria-label="Answer" aria-busy={streaming} data-status={message.status}>
      {message.content ? <Markdown text={message.content} streaming={streaming} /> : null}
      <AnswerStatus message={message} />
      <div className="message-footer">
        {streaming ? (
          <>
            <span className={`streaming-dot${offline ? ' offline' : ''}`} aria-hidden="true" />
            {offline ? <span className="resume-note">Connection lost: the answer resumes when it is back</span> : null}
            <button type="button" className="button-ghost small" onClick={() => actions.onStop(message.id)}>
              Stop
            </button>
          </>
        ) : (
          <>
            {message.content ? <CopyButton text={message.content} label="Copy the answer" /> : null}
            {isLast ? (
              <button type="button" className="button-ghost small" onClick={actions.onRegenerate} disabled={!canChange} aria-label="Regenerate the answer">
                Regenerate
              </button>
            ) : null}
            {message.stats ? (
              <span className="stats" title={`measured by the ${message.stats.measuredBy}`}>
                {[...(message.model ? [message.model] : []), ...statsParts(message.stats)].join(' · ')}
              </span>
            ) : null}
          </>
        )}
      </div>
    </article>
  );
}

/** Memoised: while one answer streams, the other messages do not render again. */
export const MessageView = memo(function MessageView(props: MessageViewProps) {
  return props.message.role === 'user' ? <UserMessage {...props} /> : <AssistantMessage {...props} />;
});
