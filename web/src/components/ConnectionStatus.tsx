import { useEffect, useState } from 'react';
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

/** The banner shown while the WebSocket is down, with the backoff countdown. */
export function ConnectionBanner({ connection, onRetry }: { connection: ConnectionState; onRetry(): void }) {
  const reconnecting = connection.status === 'reconnecting';
  const now = useNow(reconnecting);
  if (!reconnecting) return null;
  const seconds = Math.max(0, Math.ceil((connection.retryAt - now) / 1000));
  return (
    <div className="connection-banner" role="status">
      <span>
        Connection lost: {connection.reason}. {seconds > 0 ? `Reconnecting in ${seconds} s…` : 'Reconnecting…'}
      </span>
      <button type="button" className="button-ghost small" onClick={onRetry}>
        Retry now
      </button>
    </div>
  );
}
