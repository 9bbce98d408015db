import { useEffect, useRef } from 'react';
import { SHORTCUTS } from '../state/shortcuts';

/** The keyboard shortcuts, opened with `?` (the browser's <dialog>: focus trap and Esc for free). */
export function ShortcutsDialog({ open, onClose }: { open: boolean; onClose(): void }) {
  const dialog = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const el = dialog.current;
    if (!el) return;
    if (open && !el.open) el.showModal();
    if (!open && el.open) el.close();
  }, [open]);
  return (
    <dialog ref={dialog} className="confirm shortcuts" aria-labelledby="shortcuts-title" onClose={onClose}>
      <h2 id="shortcuts-title">Keyboard shortcuts</h2>
      <dl>
        {SHORTCUTS.map((s) => (
          <div key={s.action}>
            <dt>
              <kbd>{s.keys}</kbd>
            </dt>
            <dd>{s.what}</dd>
          </div>
        ))}
      </dl>
      <p className="hint">On a Mac, ⌘ works as Ctrl.</p>
      <div className="edit-actions">
        <button type="button" className="button-primary" onClick={onClose} autoFocus>
          Close
        </button>
      </div>
    </dialog>
  );
}
