import { X } from 'lucide-react';
import { useEffect, useRef, useState, type ReactNode } from 'react';
import { parseStopStrings, parseTools, TOOL_CHOICES } from '../state/settings';
import type { Settings } from '../state/settings';
import type { TransportKind } from '../api/types';
import { TransportSwitch } from './TransportSwitch';
import { AnswerFields } from './AnswerFields';
import type { ConversationSettings } from '../state/conversationSettings';

/** The conversation in view: its settings (its own over the global ones) and what can be done with them. */
export interface ConversationScope {
  title: string;
  /** In force in it: its own fields, then the global ones; its own system prompt. */
  settings: Settings;
  own: ConversationSettings | undefined;
  onChange(patch: Partial<Settings>): void;
  onReset(): void;
  onExport(format: 'json' | 'md'): void;
}

interface SettingsDialogProps {
  open: boolean;
  settings: Settings;
  /** `limits.max_tokens` and `limits.default_max_tokens` from the server's hello, where known. */
  maxTokensLimit?: number;
  defaultMaxTokens?: number;
  /** The models the server offers. */
  models: string[];
  onChange(patch: Partial<Settings>): void;
  onClose(): void;
  /** The transport switch, shown here on phones (the header has it on wider screens). */
  transport?: { value: TransportKind; onChange(kind: TransportKind): void };
  /** The conversation in view, if any: Settings opens on its own settings. */
  conversation: ConversationScope | null;
}

type NumberKey = 'temperature' | 'topP' | 'maxTokens' | 'seed' | 'topK' | 'minP' | 'repetitionPenalty';

function NumberField(props: {
  id: string;
  label: string;
  hint: string;
  value: number | null;
  min?: number;
  max?: number;
  step: number;
  integer?: boolean;
  placeholder?: string;
  /** What an empty field means, in words. */
  unsetLabel?: string;
  onChange(value: number | null): void;
}) {
  // Keep the raw text so "0." can be typed; the parsed number is what is stored.
  const [text, setText] = useState(props.value === null ? '' : String(props.value));
  const [invalid, setInvalid] = useState(false);
  const range =
    props.min !== undefined && props.max !== undefined ? `from ${props.min} to ${props.max}` : props.min !== undefined ? `at least ${props.min}` : 'a number';
  return (
    <div className="field">
      <label htmlFor={props.id}>{props.label}</label>
      <input
        id={props.id}
        type="number"
        inputMode={props.integer ? 'numeric' : 'decimal'}
        min={props.min}
        max={props.max}
        step={props.step}
        value={text}
        placeholder={props.placeholder ?? 'server default'}
        aria-describedby={`${props.id}-hint${invalid ? ` ${props.id}-error` : ''}`}
        aria-invalid={invalid}
        onChange={(event) => {
          const raw = event.target.value;
          setText(raw);
          if (raw.trim() === '') {
            setInvalid(false);
            props.onChange(null);
            return;
          }
          const value = Number(raw);
          const ok =
            Number.isFinite(value) &&
            (!props.integer || Number.isInteger(value)) &&
            (props.min === undefined || value >= props.min) &&
            (props.max === undefined || value <= props.max);
          setInvalid(!ok);
          if (ok) props.onChange(value);
        }}
      />
      <small id={`${props.id}-hint`}>{props.hint}</small>
      {invalid ? (
        <small id={`${props.id}-error`} className="field-error" role="alert">
          Not saved: {props.integer ? 'a whole number ' : ''}
          {range} is needed; the {props.value === null ? (props.unsetLabel ?? 'server default') : `saved value ${props.value}`} still applies.
        </small>
      ) : null}
    </div>
  );
}

/** The tools as JSON text: saved only when it is a valid OpenAI tool list. */
function ToolsField({ settings, onChange }: Pick<SettingsDialogProps, 'settings' | 'onChange'>) {
  const [error, setError] = useState<string | null>(null);
  const initial = settings.tools.length ? JSON.stringify(settings.tools, null, 2) : '';
  return (
    <>
      <div className="field">
        <label htmlFor="tools">Tools (JSON, OpenAI shape)</label>
        <textarea
          id="tools"
          rows={5}
          spellCheck={false}
          className="code-input"
          defaultValue={initial}
          placeholder='[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]'
          aria-describedby={`tools-hint${error ? ' tools-error' : ''}`}
          aria-invalid={error !== null}
          onChange={(event) => {
            const parsed = parseTools(event.target.value);
            if ('error' in parsed) setError(parsed.error);
            else {
              setError(null);
              onChange({ tools: parsed.tools });
            }
          }}
        />
        <small id="tools-hint">Offered to the model with each message; its calls show as cards. This page runs no tool. Empty: none.</small>
        {error ? (
          <small id="tools-error" className="field-error" role="alert">
            Not saved: {error}; the {settings.tools.length ? `saved list of ${settings.tools.length}` : 'empty list'} still applies.
          </small>
        ) : null}
      </div>
      <div className="field">
        <label htmlFor="tool-choice">Tool choice</label>
        <select id="tool-choice" value={settings.toolChoice} onChange={(event) => onChange({ toolChoice: TOOL_CHOICES.find((c) => c === event.target.value) ?? 'auto' })}>
          {TOOL_CHOICES.map((choice) => (
            <option key={choice} value={choice}>
              {choice}
            </option>
          ))}
        </select>
        <small>auto: the model chooses; required: at least one call; none: text only.</small>
      </div>
      <div className="field">
        <label className="checkbox">
          <input type="checkbox" checked={settings.parallelToolCalls} onChange={(event) => onChange({ parallelToolCalls: event.target.checked })} />
          Several calls in one answer
        </label>
        <small>Off: at most one call per answer.</small>
      </div>
    </>
  );
}

function Section({ title, children }: { title: string; children: ReactNode }) {
  return (
    <fieldset className="settings-section">
      <legend>{title}</legend>
      {children}
    </fieldset>
  );
}

export function SettingsDialog(props: SettingsDialogProps) {
  const { open, maxTokensLimit, defaultMaxTokens, models, onClose, transport, conversation } = props;
  const dialog = useRef<HTMLDialogElement>(null);
  const [showKey, setShowKey] = useState(false);
  const [scope, setScope] = useState<'conversation' | 'defaults'>('conversation');
  // The fields keep what is typed: after "Use the defaults again" they start anew.
  const [resets, setResets] = useState(0);

  useEffect(() => {
    const el = dialog.current;
    if (!el) return;
    if (open && !el.open) el.showModal();
    if (!open && el.open) el.close();
    if (open) setScope('conversation'); // opens on the conversation in view, where there is one
  }, [open]);
  const own = conversation && scope === 'conversation' ? conversation : null;
  const settings = own ? own.settings : props.settings;
  const onChange = own ? own.onChange : props.onChange;

  const number = (key: NumberKey) => (value: number | null) => onChange({ [key]: value });

  return (
    <dialog ref={dialog} className="settings" aria-labelledby="settings-title" onClose={onClose}>
      <form method="dialog" className="settings-form">
        <header>
          <h2 id="settings-title">Settings</h2>
          <button type="submit" className="button-ghost" aria-label="Close settings">
            <X aria-hidden="true" size={20} />
          </button>
        </header>
        {open ? (
          <>
            {transport ? (
              <div className="phone-only settings-transport">
                <p aria-hidden="true">Transport</p>
                <TransportSwitch value={transport.value} onChange={transport.onChange} className="segmented in-settings" name="transport-settings" />
              </div>
            ) : null}
            {conversation ? (
              <div className="settings-scope">
                <div role="tablist" aria-label="Which settings">
                  <button type="button" role="tab" id="scope-conversation" aria-selected={scope === 'conversation'} aria-controls="settings-fields" onClick={() => setScope('conversation')}>
                    This conversation
                  </button>
                  <button type="button" role="tab" id="scope-defaults" aria-selected={scope === 'defaults'} aria-controls="settings-fields" onClick={() => setScope('defaults')}>
                    Defaults
                  </button>
                </div>
                {own ? (
                  <p className="settings-scope-note">
                    For “{own.title}” only{own.own && Object.keys(own.own).length ? '' : ': it follows the defaults until something here is changed'}.{' '}
                    {own.own && Object.keys(own.own).length ? (
                      <button
                        type="button"
                        className="button-ghost small"
                        onClick={() => {
                          own.onReset();
                          setResets((n) => n + 1);
                        }}
                      >
                        Use the defaults again
                      </button>
                    ) : null}
                  </p>
                ) : (
                  <p className="settings-scope-note">For every conversation that does not set its own.</p>
                )}
              </div>
            ) : null}
            <div id="settings-fields" key={`${own ? 'conversation' : 'defaults'}-${resets}`} role={conversation ? 'tabpanel' : undefined} aria-labelledby={conversation ? (own ? 'scope-conversation' : 'scope-defaults') : undefined}>
            <Section title="Conversation">
              {models.length > 0 ? (
                <div className="field">
                  <label htmlFor="model">Model</label>
                  <select id="model" value={models.includes(settings.model) ? settings.model : ''} onChange={(event) => onChange({ model: event.target.value })}>
                    <option value="">Server default</option>
                    {models.map((model) => (
                      <option key={model} value={model}>
                        {model}
                      </option>
                    ))}
                  </select>
                </div>
              ) : null}
              <div className="field">
                <label htmlFor="system-prompt">{own ? 'System prompt of this conversation' : 'System prompt for new conversations'}</label>
                <textarea
                  id="system-prompt"
                  rows={3}
                  value={settings.systemPrompt}
                  placeholder="You are a helpful assistant."
                  onChange={(event) => onChange({ systemPrompt: event.target.value })}
                />
                <small>{own ? 'Shown at its top and editable there too.' : 'Each new conversation starts with it, shown at its top and editable there; leave empty for none.'}</small>
              </div>
            </Section>
            <Section title="Sampling">
              <div className="field-grid">
                <NumberField id="temperature" label="Temperature" hint="0 to 2; 0 is greedy" value={settings.temperature} min={0} max={2} step={0.05} onChange={number('temperature')} />
                <NumberField id="top-p" label="Top p" hint="0 to 1" value={settings.topP} min={0} max={1} step={0.05} onChange={number('topP')} />
                <NumberField
                  id="max-tokens"
                  label="Max tokens"
                  hint={`empty: fit (the server's default${defaultMaxTokens ? ` of ${defaultMaxTokens}` : ''}, or what still fits); else 1 to ${maxTokensLimit ?? '…'}, and it must fit whole`}
                  value={settings.maxTokens}
                  min={1}
                  max={maxTokensLimit}
                  step={1}
                  integer
                  placeholder="fit"
                  unsetLabel="fit"
                  onChange={number('maxTokens')}
                />
                <NumberField id="seed" label="Seed" hint="same seed, same answer" value={settings.seed} min={0} step={1} integer onChange={number('seed')} />
                <NumberField id="top-k" label="Top k" hint="0 is off" value={settings.topK} min={0} max={1000} step={1} integer onChange={number('topK')} />
                <NumberField id="min-p" label="Min p" hint="0 to 1; 0 is off" value={settings.minP} min={0} max={1} step={0.01} onChange={number('minP')} />
                <NumberField
                  id="repetition-penalty"
                  label="Repetition penalty"
                  hint="above 0 to 2; 1 is off"
                  value={settings.repetitionPenalty}
                  min={0.01}
                  max={2}
                  step={0.05}
                  onChange={number('repetitionPenalty')}
                />
              </div>
              <div className="field">
                <label htmlFor="stop-strings">Stop strings</label>
                <textarea
                  id="stop-strings"
                  rows={2}
                  defaultValue={settings.stop.join('\n')}
                  placeholder="one per line"
                  onChange={(event) => onChange({ stop: parseStopStrings(event.target.value) })}
                />
                <small>One per line, up to 16: the answer ends before the first one generated.</small>
              </div>
            </Section>
            <Section title="Tools">
              <ToolsField settings={settings} onChange={onChange} />
            </Section>
            <Section title="Answer">
              <AnswerFields settings={settings} onChange={onChange} />
            </Section>
            {own ? (
              <Section title="Export">
                <div className="inline">
                  <button type="button" className="button-secondary small" onClick={() => own.onExport('json')}>
                    JSON (every version, settings)
                  </button>
                  <button type="button" className="button-secondary small" onClick={() => own.onExport('md')}>
                    Markdown
                  </button>
                </div>
              </Section>
            ) : null}
            </div>
            <Section title="Server (every conversation)">
              <div className="field">
                <label htmlFor="api-key">API key</label>
                <div className="inline">
                  <input
                    id="api-key"
                    type={showKey ? 'text' : 'password'}
                    autoComplete="off"
                    spellCheck={false}
                    value={props.settings.apiKey}
                    placeholder="none"
                    onChange={(event) => props.onChange({ apiKey: event.target.value })}
                  />
                  <button type="button" className="button-ghost small" aria-pressed={showKey} onClick={() => setShowKey((v) => !v)}>
                    {showKey ? 'Hide' : 'Show'}
                  </button>
                </div>
                <small>Only where the server asks for one. Kept in this browser's local storage.</small>
              </div>
            </Section>
          </>
        ) : null}
      </form>
    </dialog>
  );
}
