import { meterReading } from '../state/context';

interface ContextMeterProps {
  used: number | null;
  limit: number | null;
  /** `used` counts the message being typed. */
  withDraft: boolean;
  /** The room the answer needs (max tokens, or the least "fit" allows). */
  room: number;
}

const format = (n: number) => n.toLocaleString('en-US');

/** How full the conversation's context is: a thin bar and "used / limit tokens". */
export function ContextMeter({ used, limit, withDraft, room }: ContextMeterProps) {
  const reading = used !== null && limit !== null ? meterReading(used, limit, room) : null;
  if (!reading) return null;
  const what = withDraft ? 'with your message' : 'so far';
  const full = reading.level === 'full' ? '; no room left for an answer' : '';
  return (
    <div
      className="context-meter"
      data-level={reading.level}
      role="meter"
      aria-label="Context used"
      aria-valuemin={0}
      aria-valuemax={reading.limit}
      aria-valuenow={Math.min(reading.used, reading.limit)}
      aria-valuetext={`${format(reading.used)} of ${format(reading.limit)} tokens (${reading.percent}%) ${what}${full}`}
      title={`The model's context: ${format(reading.used)} of ${format(reading.limit)} tokens ${what}`}
    >
      <span className="context-bar" aria-hidden="true">
        <span className="context-fill" style={{ width: `${reading.percent}%` }} />
      </span>
      <span className="context-text" aria-hidden="true">
        {format(reading.used)} / {format(reading.limit)} tokens
      </span>
    </div>
  );
}
