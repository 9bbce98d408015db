/** What the buttons of a message do: edit, regenerate, versions, delete, Continue, an answer edited by hand. */
import { useMemo, type Dispatch, type RefObject } from 'react';
import type { GenerationRequest } from '../api/types';
import type { MessageActions } from '../components/MessageView';
import type { AskAction } from '../state/asking';
import { chatReducer, continuationOf, editedAnswer, type ChatAction, type ChatState, type Conversation, type Message } from '../state/conversations';
import { samplingParams, type Settings } from '../state/settings';

export interface ActionContext {
  state: ChatState;
  settings: Settings;
  /** The model to ask for, as the page picks it. */
  model: string | undefined;
}

interface Options {
  latest: RefObject<ActionContext>;
  dispatch: Dispatch<ChatAction>;
  ask(action: AskAction): Promise<boolean>;
  /** Writes the conversation, then asks for the answer `messageId` of it. */
  launch(conversation: Conversation, messageId: string, request: GenerationRequest): Promise<void>;
  newId(prefix: string): string;
  placeholder(now: number): Message;
  /** The list scrolls to the newest content. */
  follow(): void;
}

export function useMessageActions({ latest, dispatch, ask, launch, newId, placeholder, follow }: Options): MessageActions {
  return useMemo(() => {
    const activeId = () => latest.current.state.activeId;
    /** Continue the answer `messageId` as it is in `current` (just after an edit: the state about to be). */
    const continueIn = (current: ChatState, messageId: string) => {
      const { settings: s, model } = latest.current;
      const conversation = current.activeId ? current.conversations[current.activeId] : undefined;
      const messages = conversation && continuationOf(conversation, messageId, s.systemPrompt);
      if (!conversation || !messages) return;
      const action = { type: 'answer/continue', conversationId: conversation.id, messageId, at: Date.now() } as const;
      const next = chatReducer(current, action);
      const continued = next.conversations[conversation.id];
      if (next === current || !continued) return;
      dispatch(action);
      follow();
      // The partial answer is the last, assistant, message: the server continues that turn (assistant prefill).
      const request: GenerationRequest = { messages, params: samplingParams(s), ...(model ? { model } : {}) };
      void launch(continued, messageId, request);
    };
    return {
      onEdit(messageId, content) {
        const id = activeId();
        if (!id) return;
        const now = Date.now();
        // The files stay with the question: an edit rewrites its text.
        const files = latest.current.state.conversations[id]?.messages.find((m) => m.id === messageId)?.attachments;
        const user: Message = { id: newId('u'), role: 'user', content, createdAt: now, ...(files?.length ? { attachments: files } : {}) };
        void ask({ type: 'edit', conversationId: id, messageId, user, assistant: placeholder(now), now });
      },
      onRegenerate(messageId) {
        const id = activeId();
        if (!id) return;
        const now = Date.now();
        void ask({ type: 'regenerate', conversationId: id, messageId, assistant: placeholder(now), now });
      },
      onVersion(messageId, step) {
        const id = activeId();
        if (id) dispatch({ type: 'version', conversationId: id, messageId, step });
      },
      onDelete(messageId) {
        const id = activeId();
        if (!id) return;
        dispatch({ type: 'deleteMessage', conversationId: id, messageId });
        // The button goes with its message: focus goes to the composer, not to <body>.
        requestAnimationFrame(() => document.getElementById('composer-input')?.focus());
      },
      onToolResults(messageId, results) {
        const id = activeId();
        if (!id) return;
        const now = Date.now();
        void ask({ type: 'toolResults', conversationId: id, messageId, results, assistant: placeholder(now), now });
      },
      onContinue(messageId) {
        continueIn(latest.current.state, messageId);
      },
      onEditAnswer(messageId, content, andContinue) {
        const current = latest.current.state;
        const old = current.activeId ? current.conversations[current.activeId]?.messages.find((m) => m.id === messageId) : undefined;
        if (!old || !current.activeId) return;
        const now = Date.now();
        const action: ChatAction = { type: 'editAnswer', conversationId: current.activeId, messageId, answer: editedAnswer(old, content, newId('a'), now), now };
        const next = chatReducer(current, action);
        if (next === current) return;
        dispatch(action);
        if (andContinue) continueIn(next, action.answer.id);
      },
    };
  }, [latest, dispatch, ask, launch, newId, placeholder, follow]);
}
