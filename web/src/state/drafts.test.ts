import { beforeEach, describe, expect, it } from 'vitest';
import { loadDraft, loadDraftFiles, saveDraft, saveDraftFiles } from './drafts';

/** localStorage as a browser has it, for node. */
class MemoryStorage {
  private items = new Map<string, string>();
  getItem(key: string): string | null {
    return this.items.get(key) ?? null;
  }
  setItem(key: string, value: string): void {
    this.items.set(key, value);
  }
  removeItem(key: string): void {
    this.items.delete(key);
  }
  get size(): number {
    return this.items.size;
  }
}

describe('drafts', () => {
  let storage: MemoryStorage;
  beforeEach(() => {
    storage = new MemoryStorage();
    (globalThis as { localStorage?: unknown }).localStorage = storage;
  });

  it('keeps one draft per conversation, and forgets an emptied one', () => {
    saveDraft('c1', 'half a question');
    saveDraft('new', 'another');
    expect(loadDraft('c1')).toBe('half a question');
    expect(loadDraft('new')).toBe('another');
    saveDraft('c1', '   ');
    expect(loadDraft('c1')).toBe('');
    expect(storage.size).toBe(1);
  });

  it('keeps the files added to a draft, and forgets them once none is left', () => {
    saveDraftFiles('c1', [{ name: 'a.csv', text: 'x,y', tokens: 3 }]);
    expect(loadDraftFiles('c1')).toEqual([{ name: 'a.csv', text: 'x,y', tokens: 3 }]);
    expect(loadDraftFiles('c2')).toEqual([]);
    saveDraftFiles('c1', []);
    expect(storage.size).toBe(0);
    storage.setItem('tokenpipe.draftFiles.c3', '{broken');
    expect(loadDraftFiles('c3')).toEqual([]);
  });

  it('reads nothing where there is no storage', () => {
    (globalThis as { localStorage?: unknown }).localStorage = undefined;
    expect(loadDraft('c1')).toBe('');
    expect(() => saveDraft('c1', 'x')).not.toThrow();
  });
});
