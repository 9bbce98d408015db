import { useLayoutEffect, useRef, useState, type KeyboardEvent } from 'react';

/** True while an input method (Japanese, Chinese, …) is composing: Enter then picks a candidate. */
export function isImeComposing(event: KeyboardEvent<HTMLTextAreaElement>): boolean {
  return event.nativeEvent.isComposing || event.keyCode === 229;
}

const MAX_HEIGHT_PX = 220;

export function autosize(area: HTMLTextAreaElement | null): void {
  if (!area) return;
  area.style.height = 'auto';
  area.style.height = `${Math.min(area.scrollHeight, MAX_HEIGHT_PX)}px`;
}

interface ComposerProps {
  running: boolean;
  onSend(text: string): void;
  onStop(): void;
}

export function Composer({ running, onSend, onStop }: ComposerProps) {
  const [text, setText] = useState('');
  const area = useRef<HTMLTextAreaElement>(null);
  useLayoutEffect(() => autosize(area.current), [text]);

  const send = () => {
    if (running || !text.trim()) return;
    onSend(text);
    setText('');
    area.current?.focus();
  };

  const onKeyDown = (event: KeyboardEvent<HTMLTextAreaElement>) => {
    if (event.key !== 'Enter' || event.shiftKey || isImeComposing(event)) return;
    event.preventDefault();
    send();
  };

  return (
    <form
      className="composer"
      aria-label="Message"
      onSubmit={(event) => {
        event.preventDefault();
        send();
      }}
    >
      <label htmlFor="composer-input" className="visually-hidden">
        Your message
      </label>
      <textarea
        id="composer-input"
        ref={area}
        rows={1}
        value={text}
        placeholder="Ask anything…  (Enter to send, Shift+Enter for a new line)"
        aria-describedby="composer-hint"
        onChange={(event) => setText(event.target.value)}
        onKeyDown={onKeyDown}
        // On touch screens focusing on load would pop up the keyboard over the page.
        autoFocus={typeof window.matchMedia === 'function' && window.matchMedia('(pointer: fine)').matches}
      />
      <span id="composer-hint" className="visually-hidden">
        Enter sends the message, Shift+Enter starts a new line.
      </span>
      {running ? (
        <button type="button" className="button-stop" onClick={onStop} aria-label="Stop the answer">
          <span aria-hidden="true" className="stop-square" /> Stop
        </button>
      ) : (
        <button type="submit" className="button-primary" disabled={!text.trim()} aria-label="Send message">
          Send
        </button>
      )}
    </form>
  );
}
