import { useEffect, useRef, useState, type ReactNode } from 'react';
import type { Settings } from '../state/settings';

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
}

type NumberKey = 'temperature' | 'topP' | 'maxTokens' | 'seed';

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
  onChange(value: number | null): void;
}) {
  // Keep the raw text so "0." can be typed; the parsed number is what is stored.
  const [text, setText] = useState(props.value === null ? '' : String(props.value));
  const [invalid, setInvalid] = useState(false);
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
        aria-describedby={`${props.id}-hint`}
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
    </div>
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

export function SettingsDialog({ open, settings, maxTokensLimit, defaultMaxTokens, models, onChange, onClose }: SettingsDialogProps) {
  const dialog = useRef<HTMLDialogElement>(null);
  const [showKey, setShowKey] = useState(false);

  useEffect(() => {
    const el = dialog.current;
    if (!el) return;
    if (open && !el.open) el.showModal();
    if (!open && el.open) el.close();
  }, [open]);

  const number = (key: NumberKey) => (value: number | null) => onChange({ [key]: value });

  return (
    <dialog ref={dialog} className="settings" aria-labelledby="settings-title" onClose={onClose}>
      <form method="dialog" className="settings-form">
        <header>
          <h2 id="settings-title">Settings</h2>
          <button type="submit" className="button-ghost" aria-label="Close settings">
            ✕
          </button>
        </header>
        {open ? (
          <>
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
                <label htmlFor="system-prompt">System prompt</label>
                <textarea
                  id="system-prompt"
                  rows={3}
                  value={settings.systemPrompt}
                  placeholder="You are a helpful assistant."
                  onChange={(event) => onChange({ systemPrompt: event.target.value })}
                />
                <small>Sent first with every request; leave empty for none.</small>
              </div>
            </Section>
            <Section title="Sampling">
              <div className="field-grid">
                <NumberField id="temperature" label="Temperature" hint="0 to 2; 0 is greedy" value={settings.temperature} min={0} max={2} step={0.05} onChange={number('temperature')} />
                <NumberField id="top-p" label="Top p" hint="0 to 1" value={settings.topP} min={0} max={1} step={0.05} onChange={number('topP')} />
                <NumberField
                  id="max-tokens"
                  label="Max tokens"
                  hint={maxTokensLimit ? `1 to ${maxTokensLimit}` : 'at least 1'}
                  value={settings.maxTokens}
                  min={1}
                  max={maxTokensLimit}
                  step={1}
                  integer
                  placeholder={defaultMaxTokens ? `server default (${defaultMaxTokens})` : undefined}
                  onChange={number('maxTokens')}
                />
                <NumberField id="seed" label="Seed" hint="same seed, same answer" value={settings.seed} min={0} step={1} integer onChange={number('seed')} />
              </div>
            </Section>
            <Section title="Server">
              <div className="field">
                <label htmlFor="api-key">API key</label>
                <div className="inline">
                  <input
                    id="api-key"
                    type={showKey ? 'text' : 'password'}
                    autoComplete="off"
                    spellCheck={false}
                    value={settings.apiKey}
                    placeholder="none"
                    onChange={(event) => onChange({ apiKey: event.target.value })}
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
