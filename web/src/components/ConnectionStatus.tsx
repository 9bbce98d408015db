import { useEffect, useRef, useState } from 'react';
import type { TransportKind } from '../api/types';
import type { ConnectionState } from '../api/wsClient';

function useNow(active: boolean): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    if (!active) return;
    const timer = setInterval(() => setNow(Date.now()), 500);
    return () => clearInterval(timer);
  }, [active]);
  return now;
}

/** A dot and a word in the header: is the WebSocket up? */
export function ConnectionStatus({ kind, connection }: { kind: TransportKind; connection: ConnectionState }) {
  if (kind !== 'ws') return <span className="connection http">HTTP</span>;
  const label =
    connection.status === 'open' ? 'Connected' : connection.status === 'reconnecting' ? 'Offline' : connection.status === 'closed' ? 'Closed' : 'Connecting…';
  return (
    <span className={`connection ${connection.status}`} data-status={connection.status}>
      <span className="dot" aria-hidden="true" />
      {label}
    </span>
  );
}

/** The banner shown while the WebSocket is down, with the backoff countdown. It stays up
 * through each reconnect attempt, so its button is not pulled away under the pointer. */
export function ConnectionBanner({ connection, onRetry }: { connection: ConnectionState; onRetry(): void }) {
  const reconnecting = connection.status === 'reconnecting';
  const reason = useRef('');
  if (reconnecting) reason.current = connection.reason;
  if (connection.status === 'open' && connection.hello !== null) reason.current = '';
  // An attempt under way (socket opening, or open but no hello yet) is still "lost".
  const retrying =
    reason.current !== '' &&
    ((connection.status === 'connecting' && connection.attempt > 0) || (connection.status === 'open' && connection.hello === null));
  const now = useNow(reconnecting);
  if (!reconnecting && !retrying) return null;
  const seconds = reconnecting ? Math.max(0, Math.ceil((connection.retryAt - now) / 1000)) : 0;
  return (
    <div className="connection-banner" role="status">
      <span>
        Connection lost: {reason.current}. {seconds > 0 ? `Reconnecting in ${seconds} s…` : 'Reconnecting…'}
      </span>
      <button type="button" className="button-ghost small" onClick={onRetry}>
        Retry now
      </button>
    </div>
  );
}
