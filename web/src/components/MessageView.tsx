import { memo, useLayoutEffect, useRef, useState, type KeyboardEvent } from 'react';
import { describeError } from '../api/errors';
import { canContinue, type Message } from '../state/conversations';
import { autosize, isImeComposing } from './Composer';
import { CopyButton } from './CopyButton';
import { liveParts, statsParts } from './format';
import { useFrameClock } from './useFrameClock';
import { ChevronLeft, ChevronRight, FastForward, Pencil, RefreshCw, RotateCcw, Trash2 } from 'lucide-react';
import { Markdown } from './Markdown';
import { ReasoningView, ToolCallCards } from './AnswerParts';
import { WaitingStatus } from './WaitingStatus';
import { AnswerEditor } from './AnswerEditor';
import { AttachmentList } from './AttachmentChips';

export interface MessageActions {
  onEdit(messageId: string, content: string): void;
  /** A new version of this answer; the current one stays a step away. */
  onRegenerate(messageId: string): void;
  onVersion(messageId: string, step: -1 | 1): void;
  onDelete(messageId: string): void;
  /** Go on with a partial answer (sent back as the start of the assistant turn). */
  onContinue(messageId: string): void;
  /** The answer rewritten by hand, kept as a new version; `andContinue`: then the model goes on from it. */
  onEditAnswer(messageId: string, content: string, andContinue: boolean): void;
  /** The results the user typed for the answer's tool calls, by call id: the model goes on from them. */
  onToolResults(messageId: string, results: Record<string, string>): void;
}

interface MessageViewProps {
  message: Message;
  /** The last answer of the conversation. */
  isLast: boolean;
  /** False while an answer in this conversation is running. */
  canChange: boolean;
  /** This answer is running but its connection is down. */
  offline: boolean;
  /** Which version of its turn this message is (1-based) and how many there are. */
  version: number;
  versionCount: number;
  actions: MessageActions;
}

/** `‹ 2/3 ›`: the versions of one turn, as llama.cpp's UI shows them. */
function VersionSwitch({ message, version, versionCount, canChange, actions }: Pick<MessageViewProps, 'message' | 'version' | 'versionCount' | 'canChange' | 'actions'>) {
  if (versionCount < 2) return null;
  const what = message.role === 'user' ? 'message' : 'answer';
  return (
    <span className="versions" role="group" aria-label={`Version ${version} of ${versionCount}`}>
      <button type="button" className="button-ghost icon" aria-label={`Previous version of this ${what}`} disabled={!canChange || version <= 1} onClick={() => actions.onVersion(message.id, -1)}>
        <ChevronLeft aria-hidden="true" size={16} />
      </button>
      <span className="version-count">
        {version}/{versionCount}
      </span>
      <button type="button" className="button-ghost icon" aria-label={`Next version of this ${what}`} disabled={!canChange || version >= versionCount} onClick={() => actions.onVersion(message.id, 1)}>
        <ChevronRight aria-hidden="true" size={16} />
      </button>
    </span>
  );
}

function DeleteButton({ message, canChange, actions }: Pick<MessageViewProps, 'message' | 'canChange' | 'actions'>) {
  return (
    <button
      type="button"
      className="button-ghost icon"
      onClick={() => actions.onDelete(message.id)}
      disabled={!canChange}
      aria-label={message.role === 'user' ? 'Delete this message' : 'Delete this answer'}
    >
      <Trash2 aria-hidden="true" size={16} />
    </button>
  );
}

function UserMessage({ message, canChange, actions, version, versionCount }: Omit<MessageViewProps, 'isLast' | 'offline'>) {
  const [draft, setDraft] = useState<string | null>(null);
  const area = useRef<HTMLTextAreaElement>(null);
  useLayoutEffect(() => autosize(area.current), [draft]);

  const editButton = useRef<HTMLButtonElement>(null);
  const cancel = () => {
    setDraft(null);
    // Focus goes back where the edit started, not to the top of the page.
    requestAnimationFrame(() => editButton.current?.focus());
  };
  const submit = () => {
    if (draft === null || !draft.trim()) return;
    actions.onEdit(message.id, draft);
    setDraft(null);
  };
  const onKeyDown = (event: KeyboardEvent<HTMLTextAreaElement>) => {
    if (event.key === 'Escape') cancel();
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
          <button type="button" className="button-ghost" onClick={cancel}>
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
      {message.content ? <div className="bubble">{message.content}</div> : null}
      {message.attachments?.length ? <AttachmentList files={message.attachments} /> : null}
      <div className="message-actions">
        <VersionSwitch message={message} version={version} versionCount={versionCount} canChange={canChange} actions={actions} />
        <CopyButton text={message.content} label="Copy your message" />
        <button ref={editButton} type="button" className="button-ghost icon" onClick={() => setDraft(message.content)} disabled={!canChange} aria-label="Edit and resend this message">
          <Pencil aria-hidden="true" size={16} />
        </button>
        <DeleteButton message={message} canChange={canChange} actions={actions} />
      </div>
    </article>
  );
}

function AnswerStatus({ message, now, answerable }: { message: Message; now: number; answerable: boolean }) {
  switch (message.status) {
    case 'waiting':
      return <WaitingStatus message={message} now={now} />;
    case 'stopped':
      return <p className="badge badge-stopped">Stopped</p>;
    case 'interrupted':
      return (
        <p className="badge badge-interrupted" role="status">
          Interrupted{message.note ? `: ${message.note}` : ''}
          {message.unresumable
            ? canContinue(message)
              ? ' Continue lets the model go on from this partial answer; Retry from here asks again, keeping this one as the previous version.'
              : ' Retry from here asks again; this partial answer stays as the previous version.'
            : ''}
        </p>
      );
    case 'error':
      return message.error ? (
        <p className="answer-error" role="alert">
          {describeError(message.error)}
        </p>
      ) : null;
    case 'done':
      if (message.edited) return <p className="badge badge-edited">Edited by you: Continue lets the model go on from here</p>;
      if (message.toolResults) return null;
      if (message.finishReason === 'tool_calls' || message.toolCalls?.length)
        return <p className="badge badge-tool-calls">{answerable ? 'The model called a tool: type what it returned, and the model goes on from it.' : 'The model called a tool; this page does not run tools.'}</p>;
      return message.finishReason === 'length' ? <p className="badge badge-stopped">Cut at the max tokens limit</p> : null;
    default:
      return null;
  }
}

function AssistantMessage({ message, isLast, canChange, offline, actions, version, versionCount }: MessageViewProps) {
  const streaming = message.status === 'streaming' || message.status === 'waiting';
  const now = useFrameClock(streaming);
  const [editing, setEditing] = useState(false);
  const editButton = useRef<HTMLButtonElement>(null);
  if (editing) {
    const close = () => {
      setEditing(false);
      requestAnimationFrame(() => editButton.current?.focus());
    };
    return (
      <AnswerEditor
        initial={message.content}
        onCancel={close}
        onSave={(content, andContinue) => {
          setEditing(false);
          actions.onEditAnswer(message.id, content, andContinue);
        }}
      />
    );
  }
  const figures = streaming ? liveParts(message, now) : message.stats ? statsParts(message.stats, message.model) : null;
  const answerable = isLast && canChange && message.status === 'done' && !message.toolResults && (message.toolCalls?.length ?? 0) > 0;
  return (
    <article className="message assistant" aria-label="Answer" aria-busy={streaming} data-status={message.status}>
      {message.reasoning ? <ReasoningView message={message} /> : null}
      {message.content ? <Markdown text={message.content} streaming={streaming} /> : null}
      <ToolCallCards message={message} onResults={answerable ? (results) => actions.onToolResults(message.id, results) : undefined} />
      <AnswerStatus message={message} now={now} answerable={answerable} />
      <div className="message-footer">
        {streaming ? (
          <>
            <span className={`streaming-dot${offline ? ' offline' : ''}`} aria-hidden="true" />
            {offline ? <span className="resume-note">Connection lost: the answer resumes when it is back</span> : null}
          </>
        ) : (
          <>
            <VersionSwitch message={message} version={version} versionCount={versionCount} canChange={canChange} actions={actions} />
            {message.content ? <CopyButton text={message.content} label="Copy the answer" /> : null}
            {canContinue(message) ? (
              <button type="button" className="button-primary small" onClick={() => actions.onContinue(message.id)} disabled={!canChange} aria-label="Continue this answer">
                <FastForward aria-hidden="true" size={16} /> Continue
              </button>
            ) : null}
            {message.unresumable ? (
              <button type="button" className={canContinue(message) ? 'button-ghost small' : 'button-primary small'} onClick={() => actions.onRegenerate(message.id)} disabled={!canChange}>
                <RotateCcw aria-hidden="true" size={16} /> Retry from here
              </button>
            ) : (
              <button type="button" className="button-ghost icon" onClick={() => actions.onRegenerate(message.id)} disabled={!canChange} aria-label="Regenerate the answer">
                <RefreshCw aria-hidden="true" size={16} />
              </button>
            )}
            <button ref={editButton} type="button" className="button-ghost icon" onClick={() => setEditing(true)} disabled={!canChange} aria-label="Edit this answer">
              <Pencil aria-hidden="true" size={16} />
            </button>
            <DeleteButton message={message} canChange={canChange} actions={actions} />
          </>
        )}
        {figures ? (
          <span className="stats" title={figures.title}>
            {figures.text}
          </span>
        ) : null}
      </div>
    </article>
  );
}

/** Memoised: while one answer streams, the other messages do not render again. */
export const MessageView = memo(function MessageView(props: MessageViewProps) {
  return props.message.role === 'user' ? <UserMessage {...props} /> : <AssistantMessage {...props} />;
});
