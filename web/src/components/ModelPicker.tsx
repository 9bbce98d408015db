/** The model of the next answers, in the header, where the server offers several. */
export function ModelPicker({ models, value, onChange }: { models: string[]; value: string; onChange(model: string): void }) {
  return (
    <label className="model-picker">
      <span className="visually-hidden">Model</span>
      <select aria-label="Model for the next answers" value={models.includes(value) ? value : ''} onChange={(event) => onChange(event.target.value)}>
        <option value="">{models[0]} (default)</option>
        {models.map((model) => (
          <option key={model} value={model}>
            {model}
          </option>
        ))}
      </select>
    </label>
  );
}
