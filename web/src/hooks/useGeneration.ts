/** Runs answers on a transport and feeds their events to the conversation reducer. */
import { useCallback, useEffect, useMemo, useRef, type Dispatch } from 'react';
import type { EndInfo, GenerationHandle, GenerationHandlers, GenerationRequest, ResumePoint, Transport } from '../api/types';
import type { AnswerStats, ChatAction } from '../state/conversations';
import { DeltaBatcher } from './deltaBatcher';

interface Running {
  conversationId: string;
  handle: GenerationHandle;
}

interface Clock {
  startedAt: number;
  firstTokenAt?: number;
}

/**
 * Renders of a streaming answer at most this often (20 a second still reads as fluid): a
 * model at 40-60 tokens/s would otherwise get about one render per token, on the same cores.
 */
const RENDER_INTERVAL_MS = 50;

export interface Generation {
  start(conversationId: string, messageId: string, request: GenerationRequest): void;
  /** Go on with an answer a reloaded page knew by its stream token or response id. */
  resume(conversationId: string, messageId: string, point: ResumePoint): void;
  stop(messageId: string): void;
  stopConversation(conversationId: string): void;
  isRunning(messageId: string): boolean;
}

export function statsFrom(transport: Transport['kind'], clock: Clock, now: number, end?: EndInfo): AnswerStats {
  const usage = end?.usage;
  const counts = usage ? { promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens } : {};
  if (end?.timing) {
    const t = end.timing;
    return { transport, measuredBy: 'server', ttftMs: t.ttft_ms, totalMs: t.total_ms, tokensPerS: t.tokens_per_s, queueMs: t.queue_ms, ...counts };
  }
  // REST gets the whole answer at once: its "first token" would only be its total.
  const ttftMs = clock.firstTokenAt !== undefined && transport !== 'rest' ? clock.firstTokenAt - clock.startedAt : undefined;
  const decodeMs = clock.firstTokenAt !== undefined ? now - clock.firstTokenAt : 0;
  // Tokens after the first, over the time they took: the decode rate, not diluted by the prompt.
  const tokensPerS = usage && usage.completion_tokens > 1 && decodeMs > 0 ? ((usage.completion_tokens - 1) * 1000) / decodeMs : undefined;
  return { transport, measuredBy: 'browser', ttftMs, totalMs: now - clock.startedAt, tokensPerS, ...counts };
}

/** Who resumes an answer whatever the transport now: stream tokens (SSE), background responses. */
export interface Resumers {
  stream: Transport;
  response: Transport;
}

export function useGeneration(dispatch: Dispatch<ChatAction>, transport: Transport, resumers: Resumers): Generation {
  const running = useRef(new Map<string, Running>());
  const batcher = useMemo(
    () =>
      new DeltaBatcher((conversationId, messageId, text, seq, deltas, extras) =>
        dispatch({
          type: 'answer/append',
          conversationId,
          messageId,
          text,
          deltas,
          at: Date.now(),
          ...(seq !== undefined ? { seq } : {}),
          ...(extras?.reasoning ? { reasoning: extras.reasoning } : {}),
          ...(extras?.calls.length ? { calls: extras.calls } : {}),
        }),
        undefined,
        RENDER_INTERVAL_MS,
      ),
    [dispatch],
  );
  useEffect(() => () => batcher.dispose(), [batcher]);

  const handlersFor = useCallback(
    (conversationId: string, messageId: string): GenerationHandlers => {
      const ref = { conversationId, messageId };
      const clock: Clock = { startedAt: performance.now() };
      const kind = transport.kind;
      const settle = (action: ChatAction) => {
        running.current.delete(messageId);
        batcher.flush(); // the text that arrived before the end goes in before the end
        dispatch(action);
      };
      return {
        onQueued: (position) => dispatch({ type: 'answer/queued', ...ref, position }),
        onProgress: (done, total) => dispatch({ type: 'answer/progress', ...ref, done, total, at: Date.now() }),
        onStart: (info) =>
          dispatch({ type: 'answer/started', ...ref, model: info.model, ...(info.stream ? { stream: info.stream } : {}), ...(info.resumeKind ? { resumeKind: info.resumeKind } : {}) }),
        onDelta: (text, meta) => {
          clock.firstTokenAt ??= performance.now();
          // Thinking and call fragments go to their own parts; every delta's seq counts for a resume.
          batcher.add(conversationId, messageId, text, meta?.seq, meta);
        },
        onEnd: (end) =>
          settle({ type: 'answer/finished', ...ref, finishReason: end.finishReason, stats: statsFrom(kind, clock, performance.now(), end), at: Date.now() }),
        onError: (error) => settle({ type: 'answer/failed', ...ref, error, stats: statsFrom(kind, clock, performance.now()), at: Date.now() }),
        onInterrupted: (reason, info) =>
          settle({
            type: 'answer/interrupted',
            ...ref,
            reason,
            ...(info?.unresumable ? { unresumable: true } : {}),
            stats: statsFrom(kind, clock, performance.now()),
            at: Date.now(),
          }),
      };
    },
    [batcher, dispatch, transport],
  );

  const start = useCallback(
    (conversationId: string, messageId: string, request: GenerationRequest) => {
      const handle = transport.generate(request, handlersFor(conversationId, messageId));
      running.current.set(messageId, { conversationId, handle });
    },
    [handlersFor, transport],
  );

  const resume = useCallback(
    (conversationId: string, messageId: string, point: ResumePoint) => {
      if (running.current.has(messageId)) return;
      // A stream token resumes over the WebSocket or SSE alike (one store); a response id over Responses.
      const via = point.kind === 'response' ? resumers.response : transport.kind === 'ws' ? transport : resumers.stream;
      const handle = (via.resume as NonNullable<Transport['resume']>).call(via, point, handlersFor(conversationId, messageId));
      running.current.set(messageId, { conversationId, handle });
    },
    [handlersFor, transport, resumers],
  );

  const isRunningNow = useCallback((messageId: string) => running.current.has(messageId), []);
  const stop = useCallback((messageId: string) => running.current.get(messageId)?.handle.cancel(), []);

  const stopConversation = useCallback((conversationId: string) => {
    for (const entry of [...running.current.values()]) {
      if (entry.conversationId === conversationId) entry.handle.cancel();
    }
  }, []);

  return useMemo(() => ({ start, resume, stop, stopConversation, isRunning: isRunningNow }), [start, resume, stop, stopConversation, isRunningNow]);
}
