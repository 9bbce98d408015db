import { Download, Plus, Search, Trash2, Upload, X } from 'lucide-react';
import { useMemo, useRef, useState } from 'react';
import type { Transfer } from '../hooks/useTransfer';
import { allMessages } from '../state/branches';
import { isRunning, type Conversation } from '../state/conversations';
import { ConfirmDialog } from './ConfirmDialog';

interface SidebarProps {
  conversations: Conversation[];
  activeId: string | null;
  open: boolean;
  onNew(): void;
  onSelect(id: string): void;
  onDelete(id: string): void;
  onDeleteAll(): void;
  onClose(): void;
  /** Export all, import a file. */
  transfer: Transfer;
}

/** Conversations whose title or any message (every branch) holds every word of `query`. */
export function searchConversations(conversations: Conversation[], query: string): Conversation[] {
  const words = query.toLocaleLowerCase().split(/\s+/).filter(Boolean);
  if (words.length === 0) return conversations;
  return conversations.filter((conversation) => {
    const haystack = [conversation.title, conversation.systemPrompt ?? '', ...allMessages(conversation).map((m) => m.content)].join('\n').toLocaleLowerCase();
    return words.every((word) => haystack.includes(word));
  });
}

export function Sidebar({ conversations, activeId, open, onNew, onSelect, onDelete, onDeleteAll, onClose, transfer }: SidebarProps) {
  const [query, setQuery] = useState('');
  const picker = useRef<HTMLInputElement>(null);
  const [confirming, setConfirming] = useState(false);
  const shown = useMemo(() => searchConversations(conversations, query), [conversations, query]);
  return (
    <>
      <div className={`sidebar-backdrop${open ? ' open' : ''}`} onClick={onClose} aria-hidden="true" />
      <nav id="sidebar" className={`sidebar${open ? ' open' : ''}`} aria-label="Conversations">
        <div className="sidebar-top">
          <span className="brand" aria-hidden="true">
            tokenpipe
          </span>
          <button type="button" className="button-primary new-chat" onClick={onNew}>
            <Plus aria-hidden="true" size={18} /> New conversation
          </button>
          {conversations.length > 0 ? (
            <div className="search">
              <Search aria-hidden="true" size={16} className="search-icon" />
              <input type="search" aria-label="Search conversations" placeholder="Search" value={query} onChange={(event) => setQuery(event.target.value)} />
              {query ? (
                <button type="button" className="button-ghost icon" aria-label="Clear the search" onClick={() => setQuery('')}>
                  <X aria-hidden="true" size={16} />
                </button>
              ) : null}
            </div>
          ) : null}
        </div>
        {conversations.length === 0 ? (
          <p className="sidebar-empty">No conversations yet.</p>
        ) : shown.length === 0 ? (
          <p className="sidebar-empty">No conversation holds “{query}”.</p>
        ) : (
          <ul className="conversation-list">
            {shown.map((conversation) => {
              const streaming = conversation.messages.some(isRunning);
              return (
                <li key={conversation.id} className={conversation.id === activeId ? 'active' : undefined}>
                  <button
                    type="button"
                    className="conversation-select"
                    aria-current={conversation.id === activeId ? 'page' : undefined}
                    onClick={() => onSelect(conversation.id)}
                  >
                    <span className="conversation-title">{conversation.title}</span>
                    {streaming ? (
                      <span className="sidebar-streaming" title="An answer is arriving">
                        <span className="streaming-dot" aria-hidden="true" />
                        <span className="visually-hidden">(answering)</span>
                      </span>
                    ) : null}
                  </button>
                  <button type="button" className="conversation-delete button-ghost icon" aria-label={`Delete conversation “${conversation.title}”`} onClick={() => onDelete(conversation.id)}>
                    <Trash2 aria-hidden="true" size={16} />
                  </button>
                </li>
              );
            })}
          </ul>
        )}
        <div className="sidebar-bottom">
          {transfer.report ? (
            <p className={transfer.report.ok ? 'import-report' : 'import-report field-error'} role={transfer.report.ok ? 'status' : 'alert'}>
              {transfer.report.text}
            </p>
          ) : null}
          <div className="sidebar-transfer">
            <input
              ref={picker}
              type="file"
              accept=".json,application/json"
              hidden
              aria-label="Conversations file to import"
              onChange={(event) => {
                const file = event.target.files?.[0];
                if (file) void transfer.importFile(file);
                event.target.value = '';
              }}
            />
            <button type="button" className="button-ghost" onClick={() => picker.current?.click()}>
              <Upload aria-hidden="true" size={16} /> Import
            </button>
            {conversations.length > 0 ? (
              <button type="button" className="button-ghost" onClick={transfer.exportAll}>
                <Download aria-hidden="true" size={16} /> Export all
              </button>
            ) : null}
          </div>
          {conversations.length > 1 ? (
            <button type="button" className="button-ghost danger" onClick={() => setConfirming(true)}>
              <Trash2 aria-hidden="true" size={16} /> Delete all conversations
            </button>
          ) : null}
        </div>
      </nav>
      <ConfirmDialog
        open={confirming}
        title="Delete all conversations?"
        body={`All ${conversations.length} conversations go, with every version of every message. You can undo it for a few seconds.`}
        confirmLabel="Delete all"
        onConfirm={() => {
          setConfirming(false);
          onDeleteAll();
        }}
        onCancel={() => setConfirming(false)}
      />
    </>
  );
}
