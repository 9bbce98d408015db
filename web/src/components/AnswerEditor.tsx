/** An answer rewritten by hand: saved as a new version of the turn, and Continue can go on from it. */
import { useLayoutEffect, useRef, useState, type KeyboardEvent } from 'react';
import { autosize } from './Composer';

interface AnswerEditorProps {
  initial: string;
  onSave(content: string, andContinue: boolean): void;
  onCancel(): void;
}

export function AnswerEditor({ initial, onSave, onCancel }: AnswerEditorProps) {
  const [draft, setDraft] = useState(initial);
  const area = useRef<HTMLTextAreaElement>(null);
  useLayoutEffect(() => autosize(area.current), [draft]);
  const save = (andContinue: boolean) => {
    if (draft.trim()) onSave(draft, andContinue);
  };
  const onKeyDown = (event: KeyboardEvent<HTMLTextAreaElement>) => {
    if (event.key === 'Escape') onCancel();
    // Enter is a new line in an answer; Ctrl+Enter (⌘+Enter) saves and lets the model go on.
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      save(true);
    }
  };
  return (
    <article className="message assistant editing" aria-label="Editing the answer">
      <label htmlFor="answer-editor" className="visually-hidden">
        Edit the answer
      </label>
      <textarea id="answer-editor" ref={area} value={draft} onChange={(e) => setDraft(e.target.value)} onKeyDown={onKeyDown} autoFocus />
      <div className="edit-actions">
        <button type="button" className="button-ghost" onClick={onCancel}>
          Cancel
        </button>
        <button type="button" className="button-ghost" onClick={() => save(false)} disabled={!draft.trim()}>
          Save
        </button>
        <button type="button" className="button-primary" onClick={() => save(true)} disabled={!draft.trim()} title="Ctrl+Enter">
          Save and continue
        </button>
      </div>
    </article>
  );
}
