/** Conversations live in IndexedDB (one record each), so they survive a reload. */
import { createStore, del, set, values, type UseStore } from 'idb-keyval';
import type { Conversation } from './conversations';

let store: UseStore | null = null;
function conversationStore(): UseStore {
  store ??= createStore('tokenpipe', 'conversations');
  return store;
}

export async function loadConversations(): Promise<Conversation[]> {
  return values<Conversation>(conversationStore());
}

export async function saveConversation(conversation: Conversation): Promise<void> {
  await set(conversation.id, conversation, conversationStore());
}

export async function deleteConversation(id: string): Promise<void> {
  await del(id, conversationStore());
}

const ACTIVE_KEY = 'tokenpipe.activeConversation';

export function loadActiveId(): string | null {
  try {
    return localStorage.getItem(ACTIVE_KEY);
  } catch {
    return null;
  }
}

export function saveActiveId(id: string | null): void {
  try {
    if (id) localStorage.setItem(ACTIVE_KEY, id);
    else localStorage.removeItem(ACTIVE_KEY);
  } catch {
    // private mode or storage full: the conversation itself is still saved
  }
}
