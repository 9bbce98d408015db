/** The context a conversation may use, what it holds now, and exact counts of prompts to come. */
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { contextTokensOf, countTokens } from '../api/tokens';
import type { ToolSpec, TransportKind, WireMessage } from '../api/types';
import { usedByConversation } from '../state/context';
import type { Conversation } from '../state/conversations';
import { useDebounced } from './useDebounced';
import { serverBaseUrl } from './useTransport';

/** The draft (already reported after a pause in typing) is counted once it has settled this long. */
const COUNT_DEBOUNCE_MS = 100;

export interface ContextBudget {
  /** Tokens one conversation may use (`/v1/models` `max_model_len`, else hello's `limits.context_tokens`); null while unknown. */
  limit: number | null;
  /** Tokens the conversation holds: with the draft when it is counted, else after its last answer. */
  used: number | null;
  withDraft: boolean;
  /** The exact tokens of a prompt; null where the server cannot count it. */
  count(messages: WireMessage[]): Promise<number | null>;
}

interface Options {
  kind: TransportKind;
  helloLimit: number | undefined;
  apiKey: string;
  model: string | undefined;
  tools: ToolSpec[];
  conversation: Conversation | undefined;
  /** The prompt with the message being typed, or null when nothing is typed. */
  draftPrompt: WireMessage[] | null;
}

export function useContextBudget({ kind, helloLimit, apiKey, model, tools, conversation, draftPrompt }: Options): ContextBudget {
  const [fetchedLimit, setFetchedLimit] = useState<number | null>(null);
  useEffect(() => {
    // /v1/models says it per model (hello's limits are the default model's); hello is the fallback.
    let cancelled = false;
    void contextTokensOf(serverBaseUrl(), apiKey, model).then((tokens) => {
      if (!cancelled) setFetchedLimit(tokens);
    });
    return () => {
      cancelled = true;
    };
  }, [kind, apiKey, model]);
  // While the socket reconnects there is no hello: the last one still holds.
  const lastHello = useRef<number | undefined>(undefined);
  if (helloLimit !== undefined) lastHello.current = helloLimit;
  const limit = fetchedLimit ?? (kind === 'ws' ? (lastHello.current ?? null) : null);

  const count = useCallback(
    (messages: WireMessage[]) => countTokens(messages, { baseUrl: serverBaseUrl(), apiKey, ...(model ? { model } : {}), tools }),
    [apiKey, model, tools],
  );

  const key = draftPrompt ? JSON.stringify(draftPrompt) : null;
  const settledKey = useDebounced(key, COUNT_DEBOUNCE_MS);
  const [counted, setCounted] = useState<{ key: string; tokens: number } | null>(null);
  useEffect(() => {
    if (settledKey === null) return;
    const controller = new AbortController();
    const messages = JSON.parse(settledKey) as WireMessage[];
    void countTokens(messages, { baseUrl: serverBaseUrl(), apiKey, ...(model ? { model } : {}), tools, signal: controller.signal }).then((tokens) => {
      if (!controller.signal.aborted && tokens !== null) setCounted({ key: settledKey, tokens });
    });
    return () => controller.abort();
  }, [settledKey, apiKey, model, tools]);

  const afterAnswers = useMemo(() => usedByConversation(conversation), [conversation]);
  const draftCounted = key !== null && counted?.key === key;
  const used = draftCounted ? counted.tokens : conversation ? afterAnswers : 0;
  return { limit, used, withDraft: draftCounted, count };
}
