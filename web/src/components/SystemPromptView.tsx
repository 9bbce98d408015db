import { Pencil } from 'lucide-react';
import { useRef, useState } from 'react';

/** This conversation's system prompt, at its top: what the model was told before the first turn. */
export function SystemPromptView({ text, canChange, onChange }: { text: string; canChange: boolean; onChange(text: string): void }) {
  const [draft, setDraft] = useState<string | null>(null);
  const editButton = useRef<HTMLButtonElement>(null);
  const close = () => {
    setDraft(null);
    requestAnimationFrame(() => editButton.current?.focus());
  };
  if (draft !== null) {
    return (
      <section className="system-prompt editing" aria-label="System prompt of this conversation">
        <label htmlFor="conversation-system-prompt" className="system-label">
          System prompt
        </label>
        <textarea id="conversation-system-prompt" value={draft} rows={3} autoFocus onChange={(e) => setDraft(e.target.value)} onKeyDown={(e) => e.key === 'Escape' && close()} />
        <div className="edit-actions">
          <button type="button" className="button-ghost" onClick={close}>
            Cancel
          </button>
          <button
            type="button"
            className="button-primary"
            onClick={() => {
              onChange(draft);
              close();
            }}
          >
            Save
          </button>
        </div>
      </section>
    );
  }
  return (
    <section className="system-prompt" aria-label="System prompt of this conversation">
      <span className="system-label">System</span>
      <p className="system-text">{text}</p>
      <button ref={editButton} type="button" className="button-ghost icon" aria-label="Edit the system prompt" disabled={!canChange} onClick={() => setDraft(text)}>
        <Pencil aria-hidden="true" size={16} />
      </button>
    </section>
  );
}
