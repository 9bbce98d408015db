/** The transport the settings ask for, and the state of its connection. */
import { useCallback, useEffect, useMemo, useState, useSyncExternalStore } from 'react';
import { listModels, OpenAiClient } from '../api/openai';
import { ResponsesClient } from '../api/responses';
import type { Transport, TransportKind } from '../api/types';
import { useDebounced } from './useDebounced';
import type { Resumers } from './useGeneration';
import { TokenpipeSocket, type ConnectionState } from '../api/wsClient';

export function serverBaseUrl(): string {
  return window.location.origin;
}

function websocketUrl(): string {
  const url = new URL('ws', window.location.href.replace(/[^/]*$/, ''));
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  return url.href;
}

const IDLE: ConnectionState = { status: 'idle' };
const noSubscription = () => () => undefined;

export interface TransportInfo {
  transport: Transport;
  connection: ConnectionState;
  socket: TokenpipeSocket | null;
  /** Ids from `GET /v1/models`; null while unknown or where the route is missing. */
  httpModels: string[] | null;
  /** Who resumes an answer a reloaded page knew, whatever the transport now. */
  resumers: Resumers;
}

export function useTransport(kind: TransportKind, typedApiKey: string): TransportInfo {
  // A new key means a new connection: wait until the user has finished typing it.
  const apiKey = useDebounced(typedApiKey, 400);
  const socket = useMemo(() => (kind === 'ws' ? new TokenpipeSocket({ url: websocketUrl(), apiKey }) : null), [kind, apiKey]);
  const http = useMemo(
    () =>
      kind === 'ws'
        ? null
        : kind === 'responses'
          ? new ResponsesClient({ baseUrl: serverBaseUrl(), apiKey })
          : new OpenAiClient({ baseUrl: serverBaseUrl(), apiKey, stream: kind === 'sse' }),
    [kind, apiKey],
  );
  const [httpModels, setHttpModels] = useState<string[] | null>(null);
  const resumers = useMemo(
    () => ({ stream: new OpenAiClient({ baseUrl: serverBaseUrl(), apiKey, stream: true }), response: new ResponsesClient({ baseUrl: serverBaseUrl(), apiKey }) }),
    [apiKey],
  );

  useEffect(() => {
    if (!socket) return;
    socket.connect();
    // Coming back online is a better moment to retry than whatever the backoff says.
    const online = () => socket.retryNow();
    const leaving = () => socket.abandonUnstarted();
    window.addEventListener('online', online);
    window.addEventListener('pagehide', leaving);
    return () => {
      window.removeEventListener('online', online);
      window.removeEventListener('pagehide', leaving);
      socket.close();
    };
  }, [socket]);

  useEffect(() => {
    if (!http) return;
    let cancelled = false;
    void listModels(serverBaseUrl(), apiKey).then((models) => {
      if (!cancelled) setHttpModels(models);
    });
    return () => {
      cancelled = true;
    };
  }, [http, apiKey]);

  const subscribe = useCallback((listener: () => void) => (socket ? socket.subscribe(listener) : noSubscription()), [socket]);
  const connection = useSyncExternalStore(subscribe, () => socket?.connectionState ?? IDLE);
  return { transport: (socket ?? http) as Transport, connection, socket, httpModels, resumers };
}
