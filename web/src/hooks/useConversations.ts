/**
 * The conversation state, loaded from and saved to IndexedDB. Nothing is lost to a reload:
 * an answer is written before its request leaves (persist), again as soon as it has what a
 * reload resumes it by (its stream token), then at most once a second while it streams, and
 * everything not yet written goes when the page is hidden or left (pagehide).
 */
import { useCallback, useEffect, useReducer, useRef, type Dispatch } from 'react';
import { chatReducer, initialChatState, isRunning, type ChatAction, type ChatState, type Conversation } from '../state/conversations';
import { deleteConversation, loadActiveId, loadConversations, saveActiveId, saveConversation } from '../state/storage';

/** While an answer streams, its conversation is written at most this often. */
const STREAMING_SAVE_INTERVAL_MS = 1000;

/** The resume tokens of a conversation's running answers: a new one is written at once. */
function resumeKey(conversation: Conversation | undefined): string {
  return conversation ? conversation.messages.flatMap((m) => (isRunning(m) && m.resume ? [m.resume.stream] : [])).join(' ') : '';
}

export type Persist = (conversation: Conversation) => Promise<void>;

export function useConversations(): [ChatState, Dispatch<ChatAction>, Persist] {
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

  const write = useCallback((id: string) => {
    clearTimeout(timers.current.get(id));
    timers.current.delete(id);
    const conversation = latest.current.conversations[id];
    if (!conversation || saved.current[id] === conversation) return;
    saved.current[id] = conversation;
    void saveConversation(conversation).catch(() => undefined);
  }, []);

  useEffect(() => {
    if (!state.loaded) return;
    const pending = timers.current;
    for (const [id, conversation] of Object.entries(state.conversations)) {
      if (saved.current[id] === conversation) continue;
      const settled = !conversation.messages.some(isRunning);
      if (settled || resumeKey(conversation) !== resumeKey(saved.current[id])) write(id);
      else if (!pending.has(id)) pending.set(id, setTimeout(() => write(id), STREAMING_SAVE_INTERVAL_MS));
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

  // The tab may be gone in a moment (reload, close, a phone that freezes it): write what waits.
  useEffect(() => {
    const flush = () => {
      for (const id of [...timers.current.keys()]) write(id);
    };
    const hidden = () => {
      if (document.visibilityState === 'hidden') flush();
    };
    window.addEventListener('pagehide', flush);
    document.addEventListener('visibilitychange', hidden);
    return () => {
      window.removeEventListener('pagehide', flush);
      document.removeEventListener('visibilitychange', hidden);
    };
  }, [write]);

  /** Write a conversation now (the one an answer is about to be asked for), before anything else. */
  const persist = useCallback<Persist>(async (conversation) => {
    saved.current[conversation.id] = conversation;
    saveActiveId(conversation.id);
    await saveConversation(conversation).catch(() => undefined);
  }, []);

  return [state, dispatch, persist];
}
