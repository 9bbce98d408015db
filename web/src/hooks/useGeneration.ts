/** Runs answers on a transport and feeds their events to the conversation reducer. */
import { useCallback, useEffect, useMemo, useRef, type Dispatch } from 'react';
import type { EndInfo, GenerationHandle, GenerationRequest, Transport } from '../api/types';
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

export interface Generation {
  start(conversationId: string, messageId: string, request: GenerationRequest): void;
  stop(messageId: string): void;
  stopConversation(conversationId: string): void;
}

export function statsFrom(transport: Transport['kind'], clock: Clock, now: number, end?: EndInfo): AnswerStats {
  const usage = end?.usage;
  const counts = usage ? { promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens } : {};
  if (end?.timing) {
    const t = end.timing;
    return { transport, measuredBy: 'server', ttftMs: t.ttft_ms, totalMs: t.total_ms, tokensPerS: t.tokens_per_s, queueMs: t.queue_ms, ...counts };
  }
  const ttftMs = clock.firstTokenAt !== undefined ? clock.firstTokenAt - clock.startedAt : undefined;
  const decodeMs = clock.firstTokenAt !== undefined ? now - clock.firstTokenAt : 0;
  // Tokens after the first, over the time they took: the decode rate, not diluted by the prompt.
  const tokensPerS = usage && usage.completion_tokens > 1 && decodeMs > 0 ? ((usage.completion_tokens - 1) * 1000) / decodeMs : undefined;
  return { transport, measuredBy: 'browser', ttftMs, totalMs: now - clock.startedAt, tokensPerS, ...counts };
}

export function useGeneration(dispatch: Dispatch<ChatAction>, transport: Transport): Generation {
  const running = useRef(new Map<string, Running>());
  const batcher = useMemo(
    () => new DeltaBatcher((conversationId, messageId, text) => dispatch({ type: 'answer/append', conversationId, messageId, text })),
    [dispatch],
  );
  useEffect(() => () => batcher.dispose(), [batcher]);

  const start = useCallback(
    (conversationId: string, messageId: string, request: GenerationRequest) => {
      const ref = { conversationId, messageId };
      const clock: Clock = { startedAt: performance.now() };
      const kind = transport.kind;
      const settle = (action: ChatAction) => {
        running.current.delete(messageId);
        batcher.flush(); // the text that arrived before the end goes in before the end
        dispatch(action);
      };
      const handle = transport.generate(request, {
        onQueued: (position) => dispatch({ type: 'answer/queued', ...ref, position }),
        onStart: (info) => dispatch({ type: 'answer/started', ...ref, model: info.model }),
        onDelta: (text) => {
          clock.firstTokenAt ??= performance.now();
          batcher.add(conversationId, messageId, text);
        },
        onEnd: (end) =>
          settle({ type: 'answer/finished', ...ref, finishReason: end.finishReason, stats: statsFrom(kind, clock, performance.now(), end) }),
        onError: (error) => settle({ type: 'answer/failed', ...ref, error, stats: statsFrom(kind, clock, performance.now()) }),
        onInterrupted: (reason) => settle({ type: 'answer/interrupted', ...ref, reason, stats: statsFrom(kind, clock, performance.now()) }),
      });
      running.current.set(messageId, { conversationId, handle });
    },
    [batcher, dispatch, transport],
  );

  const stop = useCallback((messageId: string) => running.current.get(messageId)?.handle.cancel(), []);

  const stopConversation = useCallback((conversationId: string) => {
    for (const entry of [...running.current.values()]) {
      if (entry.conversationId === conversationId) entry.handle.cancel();
    }
  }, []);

  return { start, stop, stopConversation };
}
