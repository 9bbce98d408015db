/** Settings of the answer's shape: free text, JSON, or JSON a schema allows; and thinking first. */
import { useState } from 'react';
import { ANSWER_FORMATS, parseSchema, type AnswerFormat, type Settings } from '../state/settings';

const FORMAT_NAMES: Record<AnswerFormat, string> = { text: 'Text', json: 'JSON (any object)', schema: 'JSON that a schema allows' };

export function AnswerFields({ settings, onChange }: { settings: Settings; onChange(patch: Partial<Settings>): void }) {
  const [error, setError] = useState<string | null>(null);
  return (
    <>
      <div className="field">
        <label htmlFor="answer-format">Answer format</label>
        <select id="answer-format" value={settings.answerFormat} onChange={(event) => onChange({ answerFormat: ANSWER_FORMATS.find((f) => f === event.target.value) ?? 'text' })}>
          {ANSWER_FORMATS.map((format) => (
            <option key={format} value={format}>
              {FORMAT_NAMES[format]}
            </option>
          ))}
        </select>
        <small>JSON is enforced by the server token by token (response_format).</small>
      </div>
      {settings.answerFormat === 'schema' ? (
        <div className="field">
          <label htmlFor="json-schema">JSON schema</label>
          <textarea
            id="json-schema"
            rows={5}
            spellCheck={false}
            className="code-input"
            defaultValue={settings.jsonSchema ? JSON.stringify(settings.jsonSchema, null, 2) : ''}
            placeholder='{"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}'
            aria-describedby={`json-schema-hint${error ? ' json-schema-error' : ''}`}
            aria-invalid={error !== null}
            onChange={(event) => {
              const parsed = parseSchema(event.target.value);
              if ('error' in parsed) setError(parsed.error);
              else {
                setError(null);
                onChange({ jsonSchema: parsed.schema });
              }
            }}
          />
          <small id="json-schema-hint">Empty: the answer is free text until a schema is set.</small>
          {error ? (
            <small id="json-schema-error" className="field-error" role="alert">
              Not saved: {error}.
            </small>
          ) : null}
        </div>
      ) : null}
      <div className="field">
        <label className="checkbox">
          <input type="checkbox" checked={settings.think} onChange={(event) => onChange({ think: event.target.checked })} />
          Think before answering
        </label>
        <small>The thinking shows folded above the answer. A model without a thinking section refuses it, and says so.</small>
      </div>
    </>
  );
}
