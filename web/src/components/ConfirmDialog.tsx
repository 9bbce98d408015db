import { useEffect, useRef } from 'react';

/** A modal yes/no question (the browser's <dialog>: focus trap and Esc for free). */
export function ConfirmDialog(props: { open: boolean; title: string; body: string; confirmLabel: string; onConfirm(): void; onCancel(): void }) {
  const dialog = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const el = dialog.current;
    if (!el) return;
    if (props.open && !el.open) el.showModal();
    if (!props.open && el.open) el.close();
  }, [props.open]);
  return (
    <dialog ref={dialog} className="confirm" aria-labelledby="confirm-title" onClose={props.onCancel}>
      <h2 id="confirm-title">{props.title}</h2>
      <p>{props.body}</p>
      <div className="edit-actions">
        <button type="button" className="button-ghost" onClick={props.onCancel} autoFocus>
          Cancel
        </button>
        <button type="button" className="button-danger" onClick={props.onConfirm}>
          {props.confirmLabel}
        </button>
      </div>
    </dialog>
  );
}
