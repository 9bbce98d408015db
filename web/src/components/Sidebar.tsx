import type { Conversation } from '../state/conversations';

interface SidebarProps {
  conversations: Conversation[];
  activeId: string | null;
  open: boolean;
  onNew(): void;
  onSelect(id: string): void;
  onDelete(id: string): void;
  onClose(): void;
}

export function Sidebar({ conversations, activeId, open, onNew, onSelect, onDelete, onClose }: SidebarProps) {
  return (
    <>
      <div className={`sidebar-backdrop${open ? ' open' : ''}`} onClick={onClose} aria-hidden="true" />
      <nav id="sidebar" className={`sidebar${open ? ' open' : ''}`} aria-label="Conversations">
        <div className="sidebar-top">
          <span className="brand" aria-hidden="true">
            tokenpipe
          </span>
          <button type="button" className="button-primary new-chat" onClick={onNew}>
            + New conversation
          </button>
        </div>
        {conversations.length === 0 ? (
          <p className="sidebar-empty">No conversations yet.</p>
        ) : (
          <ul className="conversation-list">
            {conversations.map((conversation) => (
              <li key={conversation.id} className={conversation.id === activeId ? 'active' : undefined}>
                <button
                  type="button"
                  className="conversation-select"
                  aria-current={conversation.id === activeId ? 'page' : undefined}
                  onClick={() => onSelect(conversation.id)}
                >
                  {conversation.title}
                </button>
                <button type="button" className="conversation-delete" aria-label={`Delete conversation “${conversation.title}”`} onClick={() => onDelete(conversation.id)}>
                  <span aria-hidden="true">×</span>
                </button>
              </li>
            ))}
          </ul>
        )}
      </nav>
    </>
  );
}
