/** What is typed in the composer and the files added to it, kept per conversation as they come (localStorage: written at once, read before the first paint). */
import type { Attachment } from './attachments';

const PREFIX = 'tokenpipe.draft.';

/** The key of the new conversation not yet sent. */
export const NEW_CONVERSATION = 'new';

export function loadDraft(conversationId: string): string {
  try {
    return localStorage.getItem(PREFIX + conversationId) ?? '';
  } catch {
    return '';
  }
}

export function saveDraft(conversationId: string, text: string): void {
  try {
    if (text.trim()) localStorage.setItem(PREFIX + conversationId, text);
    else localStorage.removeItem(PREFIX + conversationId);
  } catch {
    // private mode or storage full: the text is still in the box
  }
}

const FILES = 'tokenpipe.draftFiles.';

function isAttachment(value: unknown): value is Attachment {
  return typeof value === 'object' && value !== null && typeof (value as Attachment).name === 'string' && typeof (value as Attachment).text === 'string';
}

export function loadDraftFiles(conversationId: string): Attachment[] {
  try {
    const value: unknown = JSON.parse(localStorage.getItem(FILES + conversationId) ?? '[]');
    return Array.isArray(value) ? value.filter(isAttachment) : [];
  } catch {
    return [];
  }
}

/** The files of a draft; those the storage cannot hold (a few MB in all) last for this page only. */
export function saveDraftFiles(conversationId: string, files: Attachment[]): void {
  try {
    if (files.length) localStorage.setItem(FILES + conversationId, JSON.stringify(files));
    else localStorage.removeItem(FILES + conversationId);
  } catch {
    // storage full or unavailable: the files are still on the composer
  }
}
