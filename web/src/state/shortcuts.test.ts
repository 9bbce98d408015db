import { describe, expect, it } from 'vitest';
import { shortcutOf, SHORTCUTS, type KeyPress } from './shortcuts';

const press = (key: string, extra: Partial<KeyPress> = {}): KeyPress => ({ key, ctrlKey: false, metaKey: false, shiftKey: false, altKey: false, inTextField: false, modal: false, ...extra });

describe('shortcutOf', () => {
  it('reads the shortcuts, Ctrl and ⌘ alike', () => {
    expect(shortcutOf(press('O', { ctrlKey: true, shiftKey: true }))).toBe('newChat');
    expect(shortcutOf(press('o', { metaKey: true, shiftKey: true }))).toBe('newChat');
    expect(shortcutOf(press('C', { ctrlKey: true, shiftKey: true, inTextField: true }))).toBe('copyLast');
    expect(shortcutOf(press('E', { ctrlKey: true, shiftKey: true }))).toBe('regenerate');
    expect(shortcutOf(press('?', { shiftKey: true }))).toBe('help');
    expect(shortcutOf(press('/'))).toBe('focusComposer');
  });

  it('Esc stops an answer, from the composer too, but not out of a dialog or an edit', () => {
    expect(shortcutOf(press('Escape'))).toBe('stop');
    expect(shortcutOf(press('Escape', { inTextField: true }))).toBe('stop');
    expect(shortcutOf(press('Escape', { modal: true }))).toBeNull();
  });

  it('leaves text alone: ? and / typed in a field, plain letters, Ctrl+C', () => {
    expect(shortcutOf(press('?', { inTextField: true, shiftKey: true }))).toBeNull();
    expect(shortcutOf(press('/', { inTextField: true }))).toBeNull();
    expect(shortcutOf(press('o'))).toBeNull();
    expect(shortcutOf(press('c', { ctrlKey: true }))).toBeNull();
    expect(shortcutOf(press('O', { ctrlKey: true, shiftKey: true, altKey: true }))).toBeNull();
  });

  it('lists every action once', () => {
    expect(new Set(SHORTCUTS.map((s) => s.action)).size).toBe(SHORTCUTS.length);
  });
});
