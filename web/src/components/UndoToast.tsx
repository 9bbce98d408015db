import { Undo2 } from 'lucide-react';
import { useEffect } from 'react';

/** How long a deletion can be taken back. */
export const UNDO_MS = 6000;

/** "Deleted …  Undo": the toast after a deletion; it goes by itself after UNDO_MS. */
export function UndoToast({ label, onUndo, onTimeout }: { label: string; onUndo(): void; onTimeout(): void }) {
  useEffect(() => {
    const timer = setTimeout(onTimeout, UNDO_MS);
    return () => clearTimeout(timer);
    // eslint-disable-next-line react-hooks/exhaustive-deps -- one timer per toast (keyed by its entry)
  }, []);
  return (
    <div className="toast" role="status">
      <span className="toast-label">{label}</span>
      <button type="button" className="button-ghost small" onClick={onUndo}>
        <Undo2 aria-hidden="true" size={16} /> Undo
      </button>
    </div>
  );
}
