/** The page's keyboard shortcuts (state/shortcuts.ts), on the window. */
import { useEffect, useRef } from 'react';
import { shortcutOf, type ShortcutAction } from '../state/shortcuts';

/** Each returns false where it had nothing to do (Esc with no answer running): the key then goes on. */
export type ShortcutHandlers = Record<ShortcutAction, () => boolean | void>;

function inTextField(target: EventTarget | null): boolean {
  return target instanceof HTMLElement && (target.isContentEditable || target.matches('textarea, input:not([type=checkbox]):not([type=radio]), select'));
}

/** A dialog is open, or a message is being edited: Esc belongs to it. */
function modal(target: EventTarget | null): boolean {
  return document.querySelector('dialog[open]') !== null || (target instanceof HTMLElement && target.closest('.editing') !== null);
}

export function useShortcuts(handlers: ShortcutHandlers): void {
  const latest = useRef(handlers);
  latest.current = handlers;
  useEffect(() => {
    const onKey = (event: KeyboardEvent) => {
      if (event.defaultPrevented || event.isComposing) return;
      const action = shortcutOf({ key: event.key, ctrlKey: event.ctrlKey, metaKey: event.metaKey, shiftKey: event.shiftKey, altKey: event.altKey, inTextField: inTextField(event.target), modal: modal(event.target) });
      if (action && latest.current[action]() !== false) event.preventDefault();
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, []);
}
