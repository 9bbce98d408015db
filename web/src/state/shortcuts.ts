/** The page's keyboard shortcuts: which key does what (pure, so the list under `?` and the handler agree). */

export type ShortcutAction = 'help' | 'stop' | 'newChat' | 'focusComposer' | 'copyLast' | 'regenerate';

export interface Shortcut {
  action: ShortcutAction;
  /** As the list shows it. */
  keys: string;
  what: string;
}

export const SHORTCUTS: Shortcut[] = [
  { action: 'newChat', keys: 'Ctrl+Shift+O', what: 'New conversation' },
  { action: 'stop', keys: 'Esc', what: 'Stop the answer' },
  { action: 'focusComposer', keys: '/', what: 'Type a message' },
  { action: 'copyLast', keys: 'Ctrl+Shift+C', what: 'Copy the last answer' },
  { action: 'regenerate', keys: 'Ctrl+Shift+E', what: 'Regenerate the last answer' },
  { action: 'help', keys: '?', what: 'These shortcuts' },
];

export interface KeyPress {
  key: string;
  ctrlKey: boolean;
  metaKey: boolean;
  shiftKey: boolean;
  altKey: boolean;
  /** The key went to a text field (a plain `?` or `/` is then text). */
  inTextField: boolean;
  /** A dialog is open, or a message is being edited: Esc is theirs. */
  modal: boolean;
}

/** What a key press asks for, or null; Ctrl and ⌘ count alike. */
export function shortcutOf(press: KeyPress): ShortcutAction | null {
  const command = press.ctrlKey || press.metaKey;
  if (press.altKey) return null;
  if (command && press.shiftKey) {
    const key = press.key.toLowerCase();
    if (key === 'o') return 'newChat';
    if (key === 'c') return 'copyLast';
    if (key === 'e') return 'regenerate';
    return null;
  }
  if (command) return null;
  if (press.key === 'Escape' && !press.modal) return 'stop';
  if (press.inTextField || press.modal) return null;
  if (press.key === '?') return 'help';
  if (press.key === '/') return 'focusComposer';
  return null;
}
