/** Export (JSON, Markdown) and import of conversations, as files the browser saves and opens. */
import { useCallback, useMemo, useRef, useState, type Dispatch } from 'react';
import type { ChatAction, ChatState, Conversation } from '../state/conversations';
import { besideExisting, exportJson, exportMarkdown, fileNameOf, parseExport } from '../state/transfer';

export interface Transfer {
  exportOne(conversation: Conversation, format: 'json' | 'md'): void;
  exportAll(): void;
  importFile(file: File): Promise<void>;
  /** What the last import did, or why it did nothing. */
  report: { ok: boolean; text: string } | null;
}

function download(name: string, text: string, type: string): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = document.createElement('a');
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export function useTransfer({ state, dispatch, newId }: { state: ChatState; dispatch: Dispatch<ChatAction>; newId(prefix: string): string }): Transfer {
  const latest = useRef(state);
  latest.current = state;
  const [report, setReport] = useState<Transfer['report']>(null);

  const exportOne = useCallback((conversation: Conversation, format: 'json' | 'md') => {
    if (format === 'md') download(fileNameOf(conversation.title, 'md'), exportMarkdown(conversation), 'text/markdown');
    else download(fileNameOf(conversation.title, 'json'), exportJson([conversation], Date.now()), 'application/json');
  }, []);

  const exportAll = useCallback(() => {
    const all = latest.current.order.flatMap((id) => latest.current.conversations[id] ?? []);
    download(`tokenpipe-conversations-${new Date().toISOString().slice(0, 10)}.json`, exportJson(all, Date.now()), 'application/json');
  }, []);

  const importFile = useCallback(
    async (file: File) => {
      const parsed = parseExport(await file.text());
      if ('error' in parsed) {
        setReport({ ok: false, text: `Nothing imported from ${file.name}: ${parsed.error}.` });
        return;
      }
      const placed = besideExisting(parsed.conversations, new Set(Object.keys(latest.current.conversations)), () => newId('c'));
      // Hydrate merges them in (what is here wins, so nothing is overwritten) and sorts the list.
      dispatch({ type: 'hydrate', conversations: placed });
      const first = placed[0];
      if (first) dispatch({ type: 'select', id: first.id });
      setReport({ ok: true, text: `Imported ${placed.length === 1 ? '1 conversation' : `${placed.length} conversations`} from ${file.name}.` });
    },
    [dispatch, newId],
  );

  return useMemo(() => ({ exportOne, exportAll, importFile, report }), [exportOne, exportAll, importFile, report]);
}
