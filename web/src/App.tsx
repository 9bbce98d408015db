import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { Menu, Settings as SettingsIcon } from 'lucide-react';
import { Composer } from './components/Composer';
import { ModelPicker } from './components/ModelPicker';
import { ConnectionBanner, ConnectionStatus } from './components/ConnectionStatus';
import { MessageList } from './components/MessageList';
import type { MessageActions } from './components/MessageView';
import { SettingsDialog } from './components/SettingsDialog';
import { Sidebar } from './components/Sidebar';
import { TransportSwitch } from './components/TransportSwitch';
import { UndoToast } from './components/UndoToast';
import { useConversations } from './hooks/useConversations';
import { useGeneration } from './hooks/useGeneration';
import { useSettings } from './hooks/useSettings';
import { useTransport } from './hooks/useTransport';
import { chatReducer, continuationOf, historyBefore, isRunning, type ChatAction, type Message } from './state/conversations';
import { samplingParams, type Settings } from './state/settings';

function newId(prefix: string): string {
  // crypto.randomUUID needs a secure context; a LAN address over http is not one.
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
}

/** The OpenAI API wants a model; tokenpipe.v1 falls back to the server's default. */
function modelFor(settings: Settings, known: string[] | null): string | undefined {
  return settings.model && known?.includes(settings.model) ? settings.model : settings.transport === 'ws' ? undefined : known?.[0];
}

function placeholderAnswer(now: number): Message {
  return { id: newId('a'), role: 'assistant', content: '', createdAt: now, status: 'waiting' };
}

export function App() {
  const [settings, updateSettings] = useSettings();
  const [state, dispatch] = useConversations();
  const { transport, connection, socket, httpModels } = useTransport(settings.transport, settings.apiKey);
  const generation = useGeneration(dispatch, transport);
  const [settingsOpen, setSettingsOpen] = useState(false);
  const [sidebarOpen, setSidebarOpen] = useState(false);
  const [followToken, setFollowToken] = useState(0);

  // Handlers read the latest values through a ref, so their identity never changes and
  // memoised messages do not re-render because of them.
  const hello = connection.status === 'open' ? connection.hello : null;
  const models = settings.transport === 'ws' ? (hello?.models ?? null) : httpModels;
  const latest = useRef({ state, settings, generation, models });
  latest.current = { state, settings, generation, models };

  const active = state.activeId ? state.conversations[state.activeId] : undefined;
  const runningAnswer = active?.messages.find(isRunning);

  /** Apply an action that creates an answer, then ask for that answer. */
  const ask = useCallback(
    (action: Extract<ChatAction, { type: 'send' | 'edit' | 'regenerate' }>) => {
      const { state: current, settings: s, generation: g, models: known } = latest.current;
      const next = chatReducer(current, action);
      const conversation = next.conversations[action.conversationId];
      if (!conversation || next === current) return;
      dispatch(action);
      setFollowToken((t) => t + 1);
      const messages = historyBefore(conversation, action.assistant.id, s.systemPrompt);
      const model = modelFor(s, known);
      g.start(conversation.id, action.assistant.id, { messages, params: samplingParams(s), ...(model ? { model } : {}) });
    },
    [dispatch],
  );

  const send = useCallback(
    (text: string) => {
      const now = Date.now();
      const conversationId = latest.current.state.activeId ?? newId('c');
      const user: Message = { id: newId('u'), role: 'user', content: text, createdAt: now };
      const systemPrompt = latest.current.state.activeId ? undefined : latest.current.settings.systemPrompt;
      ask({ type: 'send', conversationId, user, assistant: placeholderAnswer(now), now, ...(systemPrompt !== undefined ? { systemPrompt } : {}) });
    },
    [ask],
  );

  const actions: MessageActions = useMemo(
    () => ({
      onEdit(messageId, content) {
        const id = latest.current.state.activeId;
        if (!id) return;
        const now = Date.now();
        const user: Message = { id: newId('u'), role: 'user', content, createdAt: now };
        ask({ type: 'edit', conversationId: id, messageId, user, assistant: placeholderAnswer(now), now });
      },
      onRegenerate(messageId) {
        const id = latest.current.state.activeId;
        if (!id) return;
        const now = Date.now();
        ask({ type: 'regenerate', conversationId: id, messageId, assistant: placeholderAnswer(now), now });
      },
      onVersion(messageId, step) {
        const id = latest.current.state.activeId;
        if (id) dispatch({ type: 'version', conversationId: id, messageId, step });
      },
      onDelete(messageId) {
        const id = latest.current.state.activeId;
        if (id) dispatch({ type: 'deleteMessage', conversationId: id, messageId });
      },
      onContinue(messageId) {
        const { state: current, settings: s, generation: g, models: known } = latest.current;
        const conversation = current.activeId ? current.conversations[current.activeId] : undefined;
        const messages = conversation && continuationOf(conversation, messageId, s.systemPrompt);
        if (!conversation || !messages) return;
        const action = { type: 'answer/continue', conversationId: conversation.id, messageId } as const;
        if (chatReducer(current, action) === current) return;
        dispatch(action);
        setFollowToken((t) => t + 1);
        const model = modelFor(s, known);
        // The partial answer is the last, assistant, message: the server continues that turn (assistant prefill).
        g.start(conversation.id, messageId, { messages, params: samplingParams(s), ...(model ? { model } : {}) });
      },
    }),
    [ask, dispatch],
  );

  // Answers that were running when the page was reloaded: go on with those the server can
  // resume, and say so for the others (settled once: the reducer ignores a settled answer).
  useEffect(() => {
    if (!state.loaded) return;
    const { state: current, generation: g } = latest.current;
    for (const conversation of Object.values(current.conversations)) {
      for (const message of conversation.messages) {
        if (!isRunning(message) || g.isRunning(message.id)) continue;
        const ref = { conversationId: conversation.id, messageId: message.id };
        if (message.resume && g.resume(conversation.id, message.id, message.resume.stream, message.resume.seq)) continue;
        dispatch({
          type: 'answer/interrupted',
          ...ref,
          reason: message.resume ? 'It can be resumed over the WebSocket transport only.' : 'The page was closed while this answer was arriving.',
        });
      }
    }
  }, [state.loaded, generation, dispatch]);

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
          document.getElementById('composer-input')?.focus();
        }}
        onSelect={(id) => {
          dispatch({ type: 'select', id });
          setFollowToken((t) => t + 1);
          closeSidebar();
        }}
        onDelete={(id) => {
          generation.stopConversation(id);
          dispatch({ type: 'delete', id });
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
              . Switch the transport above to compare WebSocket, SSE, Responses and REST.
            </p>
          </div>
        )}
        <div className="composer-area">
          {state.undo ? <UndoToast key={state.undo.id} label={state.undo.label} onUndo={() => dispatch({ type: 'undo' })} onTimeout={() => state.undo && dispatch({ type: 'undo/dismiss', id: state.undo.id })} /> : null}
          {settings.transport === 'ws' ? <ConnectionBanner connection={connection} onRetry={() => socket?.retryNow()} /> : null}
          <Composer running={runningAnswer !== undefined} onSend={send} onStop={() => runningAnswer && generation.stop(runningAnswer.id)} />
        </div>
      </main>
      <SettingsDialog
        open={settingsOpen}
        settings={settings}
        maxTokensLimit={hello?.limits?.max_tokens}
        defaultMaxTokens={hello?.limits?.default_max_tokens}
        models={models ?? []}
        onChange={updateSettings}
        onClose={() => setSettingsOpen(false)}
      />
    </div>
  );
}
