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
import { answerRoom } from './state/context';
import { promptWithDraft, type AskAction } from './state/asking';
import { chatReducer, historyBefore, isRunning, type ChatState, type Conversation, type Message } from './state/conversations';
import type { GenerationRequest } from './api/types';
import { samplingParams, type Settings } from './state/settings';
import { NEW_CONVERSATION } from './state/drafts';
import { attachmentPart, type Attachment } from './state/attachments';
import { effectiveSettings, withOwn } from './state/conversationSettings';
import { useOverflow, type OverflowContext } from './hooks/useOverflow';
import { useTransfer } from './hooks/useTransfer';

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
  // The settings in force here: the conversation's own, then the global ones.
  const current = useMemo(() => effectiveSettings(settings, active?.settings), [settings, active?.settings]);

  const [carry, setCarry] = useState<{ text: string; attachments?: Attachment[]; token: number } | undefined>(undefined);
  const [draft, setDraft] = useState<{ text: string; files: Attachment[] }>({ text: '', files: [] });
  const onDraftChange = useCallback((text: string, files: Attachment[]) => setDraft({ text, files }), []);
  const draftPrompt = useMemo(
    () => (draft.text.trim() || draft.files.length ? promptWithDraft(active, current.systemPrompt, draft.text, draft.files) : null),
    [active, current.systemPrompt, draft],
  );
  const budget = useContextBudget({
    kind: settings.transport,
    helloLimit: hello?.limits?.context_tokens,
    apiKey: settings.apiKey,
    model: modelFor(current, models),
    tools: current.tools,
    conversation: active,
    draftPrompt,
  });
  const countFile = useCallback(
    async (file: Attachment) => {
      const [alone, none] = await Promise.all([budget.count([{ role: 'user', content: attachmentPart(file) }]), budget.count([{ role: 'user', content: '' }])]);
      return alone === null || none === null ? null : Math.max(0, alone - none);
    },
    [budget.count],
  );

  const latest = useRef({ state, settings, generation, models, budget });
  latest.current = { state, settings, generation, models, budget };
  const settingsOf = useCallback((conversation: Conversation | undefined) => effectiveSettings(latest.current.settings, conversation?.settings), []);
  const overflowContext = useRef<OverflowContext>({ state, settingsFor: () => settings, limit: null, count: budget.count });
  overflowContext.current = { state, settingsFor: (id) => settingsOf(state.conversations[id]), limit: budget.limit, count: budget.count };
  const askRef = useRef<(action: AskAction, base?: ChatState) => Promise<boolean>>(async () => false);
  const carryInto = useCallback((text: string, attachments: Attachment[]) => setCarry({ text, attachments, token: Date.now() }), []);
  const overflow = useOverflow({ latest: overflowContext, dispatch, ask: askRef, carry: carryInto });
  const { setOffer } = overflow;
  // An offer is about the conversation in view.
  useEffect(() => setOffer(null), [state.activeId, setOffer]);

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
      const start = base ?? latest.current.state;
      const next = chatReducer(start, action);
      const conversation = next.conversations[action.conversationId];
      if (!conversation || next === start) return false;
      const s = settingsOf(conversation);
      const messages = historyBefore(conversation, action.assistant.id, s.systemPrompt);
      if (await overflow.check(action, conversation, messages, s)) return false;
      const model = modelFor(s, latest.current.models);
      dispatch(action);
      setOffer(null);
      setFollowToken((t) => t + 1);
      await launch(conversation, action.assistant.id, { messages, params: samplingParams(s), ...(model ? { model } : {}) });
      return true;
    },
    [dispatch, launch, settingsOf, overflow.check, setOffer],
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
  askRef.current = ask;

  const send = useCallback(
    (text: string, files: Attachment[]) => {
      const now = Date.now();
      const conversationId = latest.current.state.activeId ?? newId('c');
      const user: Message = { id: newId('u'), role: 'user', content: text, createdAt: now, ...(files.length ? { attachments: files } : {}) };
      const systemPrompt = latest.current.state.activeId ? undefined : latest.current.settings.systemPrompt;
      return ask({ type: 'send', conversationId, user, assistant: placeholderAnswer(now), now, ...(systemPrompt !== undefined ? { systemPrompt } : {}) });
    },
    [ask],
  );

  const follow = useCallback(() => setFollowToken((t) => t + 1), []);
  const transfer = useTransfer({ state, dispatch, newId });
  const actionContext = useRef<ActionContext>({ state, settings: current, model: modelFor(current, models) });
  actionContext.current = { state, settings: current, model: modelFor(current, models) };
  const actions = useMessageActions({ latest: actionContext, dispatch, ask, launch, newId, placeholder: placeholderAnswer, follow });

  // Answers that were running when the page was reloaded go on: resumed by their token, or
  // asked for again (from the text they had) where the server had not said one yet.
  useEffect(() => {
    if (!state.loaded) return;
    const { state: now, generation: g, models: known } = latest.current;
    for (const conversation of Object.values(now.conversations)) {
      const s = settingsOf(conversation);
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
        transfer={transfer}
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
          {overflow.offer ? (
            <OverflowOffer
              key={overflow.offer.action.assistant.id}
              offer={overflow.offer}
              onToggle={overflow.actions.toggle}
              onDrop={overflow.actions.drop}
              onCut={overflow.actions.cut}
              onAttach={overflow.actions.attach}
              onNewConversation={overflow.actions.newConversation}
              onDismiss={overflow.actions.dismiss}
            />
          ) : null}
          <Composer
            running={runningAnswer !== undefined}
            onSend={send}
            onStop={stopRunning}
            onDraftChange={onDraftChange}
            draftKey={state.activeId ?? NEW_CONVERSATION}
            countFile={countFile}
            {...(carry ? { carry } : {})}
          />
          <ContextMeter used={budget.used} limit={budget.limit} withDraft={budget.withDraft} room={answerRoom(current.maxTokens)} />
        </div>
      </main>
      <ShortcutsDialog open={shortcutsOpen} onClose={() => setShortcutsOpen(false)} />
      <SettingsDialog
        open={settingsOpen}
        settings={settings}
        conversation={
          active
            ? {
                title: active.title,
                settings: { ...current, systemPrompt: active.systemPrompt ?? '' },
                own: active.settings,
                onChange: (patch) =>
                  patch.systemPrompt !== undefined
                    ? dispatch({ type: 'systemPrompt', conversationId: active.id, text: patch.systemPrompt })
                    : dispatch({ type: 'conversationSettings', conversationId: active.id, settings: withOwn(active.settings, patch) }),
                onReset: () => dispatch({ type: 'conversationSettings', conversationId: active.id, settings: null }),
                onExport: (format) => transfer.exportOne(active, format),
              }
            : null
        }
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
