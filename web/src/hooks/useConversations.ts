/** The conversation state, loaded from and saved to IndexedDB. */
import { useEffect, useReducer, useRef, type Dispatch } from 'react';
import { chatReducer, initialChatState, isRunning, type ChatAction, type ChatState, type Conversation } from '../state/conversations';
import { deleteConversation, loadActiveId, loadConversations, saveActiveId, saveConversation } from '../state/storage';

/** While an answer streams, its conversation is written at most this often. */
const STREAMING_SAVE_INTERVAL_MS = 1000;

export function useConversations(): [ChatState, Dispatch<ChatAction>] {
  const [state, dispatch] = useReducer(chatReducer, initialChatState);
  const saved = useRef<Record<string, Conversation>>({});
  const timers = useRef<Map<string, ReturnType<typeof setTimeout>>>(new Map());
  const latest = useRef(state);
  latest.current = state;

  useEffect(() => {
    let cancelled = false;
    loadConversations()
      .catch(() => [] as Conversation[])
      .then((conversations) => {
        if (cancelled) return;
        saved.current = Object.fromEntries(conversations.map((c) => [c.id, c]));
        dispatch({ type: 'hydrate', conversations, activeId: loadActiveId() });
      });
    return () => {
      cancelled = true;
    };
  }, []);

  useEffect(() => {
    if (!state.loaded) return;
    const pending = timers.current;
    const write = (id: string) => {
      pending.delete(id);
      const conversation = latest.current.conversations[id];
      if (!conversation || saved.current[id] === conversation) return;
      saved.current[id] = conversation;
      void saveConversation(conversation).catch(() => undefined);
    };
    for (const [id, conversation] of Object.entries(state.conversations)) {
      if (saved.current[id] === conversation) continue;
      if (!conversation.messages.some(isRunning)) {
        clearTimeout(pending.get(id));
        write(id);
      } else if (!pending.has(id)) {
        pending.set(id, setTimeout(() => write(id), STREAMING_SAVE_INTERVAL_MS));
      }
    }
    for (const id of Object.keys(saved.current)) {
      if (state.conversations[id]) continue;
      clearTimeout(pending.get(id));
      pending.delete(id);
      delete saved.current[id];
      void deleteConversation(id).catch(() => undefined);
    }
    saveActiveId(state.activeId);
  });
  return [state, dispatch];
}
