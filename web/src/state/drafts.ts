/** What is typed in the composer, kept per conversation as it is typed (localStorage: written at once, read before the first paint). */
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
