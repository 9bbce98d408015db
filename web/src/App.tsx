import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { Menu, Settings as SettingsIcon } from 'lucide-react';
import { Composer } from './components/Composer';
import { ModelPicker } from './components/ModelPicker';
import { ConnectionBanner, ConnectionStatus } from './components/ConnectionStatus';
import { MessageList } from './components/MessageList';
import { SettingsDialog } from './components/SettingsDialog';
import { Sidebar } from './components/Sidebar';
import { TransportSwitch } from './components/TransportSwitch';
import { UndoToast } from './components/UndoToast';
import { ShortcutsDialog } from './components/ShortcutsDialog';
import { useShortcuts } from './hooks/useShortcuts';
import { useConversations } from './hooks/useConversations';
import { useGeneration } from './hooks/useGeneration';
import { useMessageActions, type ActionContext } from './hooks/useMessageActions';
import { useSettings } from './hooks/useSettings';
import { useTransport } from './hooks/useTransport';
import { ContextMeter } from './components/ContextMeter';
import { OverflowOffer } from './components/OverflowOffer';
import { useContextBudget } from './hooks/useContextBudget';
import { answerRoom, idsOf, overflows, planDrop, turnsBefore, type DropPlan } from './state/context';
import { promptWithDraft, questionOf, restamped, type AskAction } from './state/asking';
import { chatReducer, historyBefore, isRunning, type ChatAction, type ChatState, type Conversation, type Message } from './state/conversations';
import type { GenerationRequest } from './api/types';
import { samplingParams, type Settings } from './state/settings';
import { NEW_CONVERSATION } from './state/drafts';

function newId(prefix: string): string {
  // crypto.randomUUID needs a secure context; a LAN address over http is not one.
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
}

/** The OpenAI API wants a model; tokenpipe.v1 falls back to the server's default. */
function modelFor(settings: Settings, known: string[] | null): string | undefined {
  return settings.model && known?.includes(settings.model) ? settings.model : settings.transport === 'ws' ? undefined : known?.[0];
}

function focusComposer(): void {
  document.getElementById('composer-input')?.focus();
}

function placeholderAnswer(now: number): Message {
  return { id: newId('a'), role: 'assistant', content: '', createdAt: now, status: 'waiting' };
}

/** A message held back because it would overflow, and the ways on. */
interface Offer {
  action: AskAction;
  promptTokens: number;
  limit: number;
  room: number;
  plan: DropPlan | null;
  systemPromptKept: boolean;
}

export function App() {
  const [settings, updateSettings] = useSettings();
  const [state, dispatch, persist] = useConversations();
  const { transport, connection, socket, httpModels, resumers } = useTransport(settings.transport, settings.apiKey);
  const generation = useGeneration(dispatch, transport, resumers);
  const [settingsOpen, setSettingsOpen] = useState(false);
  const [sidebarOpen, setSidebarOpen] = useState(false);
  const [followToken, setFollowToken] = useState(0);

  // Handlers read the latest values through a ref, so their identity never changes and
  // memoised messages do not re-render because of them.
  const hello = connection.status === 'open' ? connection.hello : null;
  const models = settings.transport === 'ws' ? (hello?.models ?? null) : httpModels;
  const active = state.activeId ? state.conversations[state.activeId] : undefined;
  const runningAnswer = active?.messages.find(isRunning);

  const [offer, setOffer] = useState<Offer | null>(null);
  const [carry, setCarry] = useState<{ text: string; token: number } | undefined>(undefined);
  const [draft, setDraft] = useState('');
  const draftPrompt = useMemo(() => (draft.trim() ? promptWithDraft(active, settings.systemPrompt, draft) : null), [active, settings.systemPrompt, draft]);
  const budget = useContextBudget({
    kind: settings.transport,
    helloLimit: hello?.limits?.context_tokens,
    apiKey: settings.apiKey,
    model: modelFor(settings, models),
    tools: settings.tools,
    conversation: active,
    draftPrompt,
  });
  // An offer is about the conversation in view.
  useEffect(() => setOffer(null), [state.activeId]);

  const latest = useRef({ state, settings, generation, models, budget, offer });
  latest.current = { state, settings, generation, models, budget, offer };

  /** Ask for an answer once its conversation is written: a reload from now on finds both. */
  const launch = useCallback(
    async (conversation: Conversation, messageId: string, request: GenerationRequest) => {
      await persist(conversation);
      latest.current.generation.start(conversation.id, messageId, request);
    },
    [persist],
  );

  /**
   * Apply an action that creates an answer, then ask for that answer; true if it was asked.
   * The prompt is counted first: one that would overflow the context is not sent, the
   * overflow offer says why and how on. `base`: the state to apply it to (just after a drop).
   */
  const askNow = useCallback(
    async (action: AskAction, base?: ChatState): Promise<boolean> => {
      const { state: current, settings: s, budget: b } = latest.current;
      const start = base ?? current;
      const next = chatReducer(start, action);
      const conversation = next.conversations[action.conversationId];
      if (!conversation || next === start) return false;
      const messages = historyBefore(conversation, action.assistant.id, s.systemPrompt);
      const tokens = b.limit ? await b.count(messages) : null;
      if (b.limit && tokens !== null && overflows(tokens, b.limit, s.maxTokens)) {
        const index = conversation.messages.findIndex((m) => m.id === action.assistant.id);
        const turns = turnsBefore(conversation, Math.max(0, index - 1));
        const countWithout = async (k: number) =>
          (await b.count(historyBefore(conversation, action.assistant.id, s.systemPrompt, idsOf(turns, k)))) ?? Number.POSITIVE_INFINITY;
        const plan = turns.length ? await planDrop(turns, countWithout, b.limit, s.maxTokens) : null;
        const system = messages[0]?.role === 'system';
        setOffer({ action, promptTokens: tokens, limit: b.limit, room: answerRoom(s.maxTokens), plan, systemPromptKept: system });
        return false;
      }
      const model = modelFor(s, latest.current.models);
      dispatch(action);
      setOffer(null);
      setFollowToken((t) => t + 1);
      await launch(conversation, action.assistant.id, { messages, params: samplingParams(s), ...(model ? { model } : {}) });
      return true;
    },
    [dispatch, launch],
  );

  const asking = useRef(false);
  const ask = useCallback(
    async (action: AskAction, base?: ChatState): Promise<boolean> => {
      // One check at a time: a second click while the first prompt is counted is ignored.
      if (asking.current) return false;
      asking.current = true;
      try {
        return await askNow(action, base);
      } finally {
        asking.current = false;
      }
    },
    [askNow],
  );

  const send = useCallback(
    (text: string) => {
      const now = Date.now();
      const conversationId = latest.current.state.activeId ?? newId('c');
      const user: Message = { id: newId('u'), role: 'user', content: text, createdAt: now };
      const systemPrompt = latest.current.state.activeId ? undefined : latest.current.settings.systemPrompt;
      return ask({ type: 'send', conversationId, user, assistant: placeholderAnswer(now), now, ...(systemPrompt !== undefined ? { systemPrompt } : {}) });
    },
    [ask],
  );

  /** The overflow offer's ways on: the draft to a new conversation, or the oldest turns dropped. */
  const offerActions = useMemo(
    () => ({
      newConversation() {
        const pending = latest.current.offer;
        if (!pending) return;
        setOffer(null);
        dispatch({ type: 'new' });
        setCarry({ text: questionOf(pending.action, latest.current.state), token: Date.now() });
      },
      drop() {
        const pending = latest.current.offer;
        if (!pending?.plan) return;
        const now = Date.now();
        const drop: ChatAction = { type: 'dropTurns', conversationId: pending.action.conversationId, messageIds: pending.plan.turns.flatMap((t) => t.ids), now };
        const dropped = chatReducer(latest.current.state, drop);
        dispatch(drop);
        // The answer comes after the drop: its usage no longer counts the dropped turns.
        void ask(restamped(pending.action, now + 1), dropped).then((sent) => {
          if (sent && pending.action.type === 'send') setCarry({ text: '', token: Date.now() });
        });
      },
      dismiss() {
        setOffer(null);
        document.getElementById('composer-input')?.focus();
      },
    }),
    [ask, dispatch],
  );

  const follow = useCallback(() => setFollowToken((t) => t + 1), []);
  const actionContext = useRef<ActionContext>({ state, settings, model: modelFor(settings, models) });
  actionContext.current = { state, settings, model: modelFor(settings, models) };
  const actions = useMessageActions({ latest: actionContext, dispatch, ask, launch, newId, placeholder: placeholderAnswer, follow });

  // Answers that were running when the page was reloaded go on: resumed by their token, or
  // asked for again (from the text they had) where the server had not said one yet.
  useEffect(() => {
    if (!state.loaded) return;
    const { state: current, generation: g, settings: s, models: known } = latest.current;
    for (const conversation of Object.values(current.conversations)) {
      for (const message of conversation.messages) {
        if (!isRunning(message) || g.isRunning(message.id)) continue;
        if (message.resume) {
          g.resume(conversation.id, message.id, message.resume);
          continue;
        }
        const history = historyBefore(conversation, message.id, s.systemPrompt);
        const messages = message.content ? [...history, { role: 'assistant' as const, content: message.content }] : history;
        const model = modelFor(s, known);
        g.start(conversation.id, message.id, { messages, params: samplingParams(s), ...(model ? { model } : {}) });
      }
    }
  }, [state.loaded, generation]);

  const [shortcutsOpen, setShortcutsOpen] = useState(false);
  const stopRunning = () => {
    if (!runningAnswer) return false;
    generation.stop(runningAnswer.id);
    focusComposer(); // the Stop button goes: focus stays in the composer, not on <body>
    return true;
  };
  const lastAnswer = active?.messages.findLast((m) => m.role === 'assistant');
  useShortcuts({
    help: () => setShortcutsOpen(true),
    stop: stopRunning,
    newChat: () => {
      dispatch({ type: 'new' });
      focusComposer();
    },
    focusComposer,
    copyLast: () => [...document.querySelectorAll<HTMLButtonElement>('button[aria-label="Copy the answer"]')].pop()?.click(),
    regenerate: () => (lastAnswer && !runningAnswer ? actions.onRegenerate(lastAnswer.id) : false),
  });

  const closeSidebar = useCallback(() => setSidebarOpen(false), []);
  const menuButton = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (!sidebarOpen) return;
    // The drawer comes first in the page: move focus into it, and back to the menu after.
    document.querySelector<HTMLElement>('#sidebar .new-chat')?.focus();
    const onKey = (event: KeyboardEvent) => {
      if (event.key !== 'Escape') return;
      setSidebarOpen(false);
      menuButton.current?.focus();
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [sidebarOpen]);

  useEffect(() => {
    document.title = active ? `${active.title} · tokenpipe` : 'tokenpipe';
  }, [active?.title]);

  const conversations = useMemo(() => state.order.flatMap((id) => state.conversations[id] ?? []), [state.order, state.conversations]);

  return (
    <div className="app">
      <Sidebar
        conversations={conversations}
        activeId={state.activeId}
        open={sidebarOpen}
        onNew={() => {
          dispatch({ type: 'new' });
          closeSidebar();
          focusComposer();
        }}
        onSelect={(id) => {
          dispatch({ type: 'select', id });
          setFollowToken((t) => t + 1);
          closeSidebar();
        }}
        onDelete={(id) => {
          generation.stopConversation(id);
          dispatch({ type: 'delete', id });
          focusComposer();
        }}
        onDeleteAll={() => {
          for (const id of state.order) generation.stopConversation(id);
          dispatch({ type: 'deleteAll' });
        }}
        onClose={closeSidebar}
      />
      <main className="chat">
        <header className="chat-header">
          <button
            ref={menuButton}
            type="button"
            className="button-ghost menu-button"
            aria-label="Conversations"
            aria-controls="sidebar"
            aria-expanded={sidebarOpen}
            onClick={() => setSidebarOpen((open) => !open)}
          >
            <Menu aria-hidden="true" size={20} />
          </button>
          <h1 className="chat-title">{active?.title ?? 'New conversation'}</h1>
          {models && models.length > 1 ? <ModelPicker models={models} value={settings.model} onChange={(model) => updateSettings({ model })} /> : null}
          <TransportSwitch value={settings.transport} onChange={(kind) => updateSettings({ transport: kind })} />
          <ConnectionStatus kind={settings.transport} connection={connection} />
          <button type="button" className="button-ghost settings-button" aria-haspopup="dialog" onClick={() => setSettingsOpen(true)}>
            <SettingsIcon aria-hidden="true" size={20} />
            <span className="label">Settings</span>
          </button>
        </header>
        {active && active.messages.length > 0 ? (
          <MessageList
            conversation={active}
            onSystemPrompt={(text) => dispatch({ type: 'systemPrompt', conversationId: active.id, text })}
            actions={actions} followToken={followToken} offline={settings.transport === 'ws' && connection.status === 'reconnecting'} />
        ) : (
          <div className="empty-state">
            <h2>What shall we talk about?</h2>
            <p>
              Answers stream from the local model token by token
              {hello?.models?.[0] ? (
                <>
                  {' '}
                  (<code>{hello.models[0]}</code>)
                </>
              ) : null}
              . Switch the transport (in the header, or in Settings on a phone) to compare WebSocket, SSE, Responses and REST.
            </p>
          </div>
        )}
        <div className="composer-area">
          {state.undo ? <UndoToast key={state.undo.id} label={state.undo.label} onUndo={() => (dispatch({ type: 'undo' }), focusComposer())} onTimeout={() => state.undo && dispatch({ type: 'undo/dismiss', id: state.undo.id })} /> : null}
          {settings.transport === 'ws' ? <ConnectionBanner connection={connection} onRetry={() => socket?.retryNow()} /> : null}
          {offer ? (
            <OverflowOffer
              what={offer.action.type === 'regenerate' ? 'answer' : 'message'}
              promptTokens={offer.promptTokens}
              limit={offer.limit}
              room={offer.room}
              plan={offer.plan}
              systemPromptKept={offer.systemPromptKept}
              onNewConversation={offerActions.newConversation}
              onDrop={offerActions.drop}
              onDismiss={offerActions.dismiss}
            />
          ) : null}
          <Composer
            running={runningAnswer !== undefined}
            onSend={send}
            onStop={stopRunning}
            onDraftChange={setDraft}
            draftKey={state.activeId ?? NEW_CONVERSATION}
            {...(carry ? { carry } : {})}
          />
          <ContextMeter used={budget.used} limit={budget.limit} withDraft={budget.withDraft} room={answerRoom(settings.maxTokens)} />
        </div>
      </main>
      <ShortcutsDialog open={shortcutsOpen} onClose={() => setShortcutsOpen(false)} />
      <SettingsDialog
        open={settingsOpen}
        settings={settings}
        maxTokensLimit={hello?.limits?.max_tokens}
        defaultMaxTokens={hello?.limits?.default_max_tokens}
        models={models ?? []}
        onChange={updateSettings}
        onClose={() => setSettingsOpen(false)}
        transport={{ value: settings.transport, onChange: (kind) => updateSettings({ transport: kind }) }}
      />
    </div>
  );
}
