import { Paperclip, SendHorizontal, Square } from 'lucide-react';
import { useDebounced } from '../hooks/useDebounced';
import { useEffect, useLayoutEffect, useRef, useState, type DragEvent, type KeyboardEvent } from 'react';
import { loadDraft, saveDraft, saveDraftFiles } from '../state/drafts';
import { PASTE_AS_FILE_CHARS, type Attachment } from '../state/attachments';
import { useAttachments } from '../hooks/useAttachments';
import { AttachmentChips } from './AttachmentChips';

/** True while an input method (Japanese, Chinese, …) is composing: Enter then picks a candidate. */
export function isImeComposing(event: KeyboardEvent<HTMLTextAreaElement>): boolean {
  return event.nativeEvent.isComposing || event.keyCode === 229;
}

const MAX_HEIGHT_PX = 220;
/** The draft goes to the context meter this long after the last key. */
const DRAFT_REPORT_MS = 200;

/** A touch screen without a mouse: phones and tablets. */
export function coarsePointer(): boolean {
  return typeof window.matchMedia === 'function' && window.matchMedia('(pointer: coarse)').matches && !window.matchMedia('(any-pointer: fine)').matches;
}

export function autosize(area: HTMLTextAreaElement | null): void {
  if (!area) return;
  area.style.height = 'auto';
  area.style.height = `${Math.min(area.scrollHeight, MAX_HEIGHT_PX)}px`;
}

interface ComposerProps {
  running: boolean;
  /** Resolves false when the message was not sent (it would overflow): the text and files stay. */
  onSend(text: string, files: Attachment[]): boolean | Promise<boolean>;
  onStop(): void;
  /** The text and files as they are typed and added (the context meter counts them). */
  onDraftChange?(text: string, files: Attachment[]): void;
  /** Text and files to put in the composer (a draft carried to a new conversation); a new `token` puts them again. */
  carry?: { text: string; attachments?: Attachment[]; token: number };
  /** A file's size in tokens, from the server. */
  countFile(file: Attachment): Promise<number | null>;
  /** Whose draft the box holds (the conversation's id): kept as it is typed, back after a reload. */
  draftKey: string;
}

export function Composer({ running, onSend, onStop, onDraftChange, carry, draftKey, countFile }: ComposerProps) {
  const [text, setText] = useState(() => loadDraft(draftKey));
  const key = useRef(draftKey);
  const put = (value: string) => {
    setText(value);
    saveDraft(key.current, value);
  };
  useEffect(() => {
    if (key.current === draftKey) return;
    key.current = draftKey;
    setText(loadDraft(draftKey));
  }, [draftKey]);
  const [checking, setChecking] = useState(false);
  const [touch] = useState(coarsePointer);
  const area = useRef<HTMLTextAreaElement>(null);
  useLayoutEffect(() => autosize(area.current), [text]);
  // Reported once typing pauses (the page does not re-render per key); an emptied box at once.
  const settled = useDebounced(text, DRAFT_REPORT_MS);
  const reported = text.trim() === '' ? '' : settled;
  const attached = useAttachments(countFile, draftKey);
  const { files } = attached;
  useEffect(() => onDraftChange?.(reported, files), [reported, files, onDraftChange]);
  useEffect(() => {
    if (!carry) return;
    put(carry.text);
    if (carry.attachments) attached.set(carry.attachments);
    area.current?.focus();
  }, [carry]);
  const [dragging, setDragging] = useState(false);
  const onDrop = (event: DragEvent) => {
    event.preventDefault();
    setDragging(false);
    if (event.dataTransfer.files.length) void attached.addFiles(event.dataTransfer.files);
  };
  const picker = useRef<HTMLInputElement>(null);
  const empty = !text.trim() && files.length === 0;

  const send = () => {
    if (running || checking || empty) return;
    const sent = text;
    const sentFiles = files;
    const sentFrom = key.current;
    setChecking(true);
    // The prompt is counted first: a message that would overflow is not sent, and stays here.
    void Promise.resolve(onSend(sent, sentFiles)).then((ok) => {
      setChecking(false);
      if (ok) {
        saveDraft(sentFrom, '');
        saveDraftFiles(sentFrom, []);
        setText((current) => (current === sent ? '' : current));
        attached.set([]);
      }
      if (ok) area.current?.focus();
    });
  };

  const onKeyDown = (event: KeyboardEvent<HTMLTextAreaElement>) => {
    // On a touch keyboard Enter is the only way to a new line: there the button sends.
    if (event.key !== 'Enter' || event.shiftKey || isImeComposing(event) || coarsePointer()) return;
    event.preventDefault();
    send();
  };

  return (
    <form
      className={`composer${dragging ? ' dragging' : ''}`}
      aria-label="Message"
      onSubmit={(event) => {
        event.preventDefault();
        send();
      }}
      onDragOver={(event) => {
        event.preventDefault();
        setDragging(true);
      }}
      onDragLeave={() => setDragging(false)}
      onDrop={onDrop}
    >
      <AttachmentChips files={files} onRemove={attached.remove} />
      {attached.refused.length ? (
        <p className="attachment-refused" role="alert">
          {attached.refused.join(' ')}
        </p>
      ) : null}
      <input
        ref={picker}
        type="file"
        multiple
        hidden
        aria-label="Files to attach"
        onChange={(event) => {
          if (event.target.files) void attached.addFiles(event.target.files);
          event.target.value = '';
        }}
      />
      <button type="button" className="button-ghost icon attach-button" aria-label="Attach text files" onClick={() => picker.current?.click()}>
        <Paperclip aria-hidden="true" size={18} />
      </button>
      <label htmlFor="composer-input" className="visually-hidden">
        Your message
      </label>
      <textarea
        id="composer-input"
        ref={area}
        rows={1}
        value={text}
        placeholder={touch ? 'Ask anything…' : 'Ask anything…  (Enter to send, Shift+Enter for a new line)'}
        enterKeyHint={touch ? 'enter' : 'send'}
        aria-describedby="composer-hint"
        onChange={(event) => put(event.target.value)}
        onKeyDown={onKeyDown}
        onPaste={(event) => {
          // A long paste becomes a file of its own, not a wall of text in the box.
          const pasted = event.clipboardData.getData('text/plain');
          if (pasted.length < PASTE_AS_FILE_CHARS) return;
          event.preventDefault();
          attached.addPaste(pasted);
        }}
        // On touch screens focusing on load would pop up the keyboard over the page.
        autoFocus={typeof window.matchMedia === 'function' && window.matchMedia('(pointer: fine)').matches}
      />
      <span id="composer-hint" className="visually-hidden">
        {touch ? 'Enter starts a new line; the Send button sends.' : 'Enter sends the message, Shift+Enter starts a new line.'}
      </span>
      {running ? (
        <button type="button" className="button-stop" onClick={onStop} aria-label="Stop the answer">
          <Square aria-hidden="true" size={16} fill="currentColor" /> Stop
        </button>
      ) : (
        <button type="submit" className="button-primary" disabled={empty || checking} aria-label="Send message">
          <SendHorizontal aria-hidden="true" size={18} />
          <span className="label">Send</span>
        </button>
      )}
    </form>
  );
}
