import { useEffect, useLayoutEffect, useRef, useState } from 'react';
import { versionsAt } from '../state/branches';
import { isDropped } from '../state/context';
import { isRunning, type Conversation, type Message } from '../state/conversations';
import { SystemPromptView } from './SystemPromptView';
import { MessageView, type MessageActions } from './MessageView';

/** What a screen reader hears about the latest answer: its state changes, not each token. */
function announcement(message: Message): string {
  if (message.role !== 'assistant') return '';
  switch (message.status) {
    case 'waiting':
      return message.queuePosition !== undefined ? `Waiting in the queue, position ${message.queuePosition}` : 'Waiting for the answer';
    case 'streaming':
      return 'The answer is arriving';
    case 'done':
      return 'Answer complete';
    case 'stopped':
      return 'Answer stopped';
    case 'interrupted':
      return 'Answer interrupted';
    case 'error':
      return 'The answer failed';
    default:
      return '';
  }
}

/** Runs of the path: messages dropped from the context go together, folded. */
function groupDropped(conversation: Conversation): { dropped: boolean; indices: number[] }[] {
  const groups: { dropped: boolean; indices: number[] }[] = [];
  conversation.messages.forEach((message, index) => {
    const dropped = isDropped(conversation, message.id);
    const last = groups[groups.length - 1];
    if (last && last.dropped === dropped) last.indices.push(index);
    else groups.push({ dropped, indices: [index] });
  });
  return groups;
}

/** How close to the bottom (px) still counts as "following the answer". */
const FOLLOW_SLACK_PX = 48;

interface MessageListProps {
  conversation: Conversation;
  onSystemPrompt(text: string): void;
  actions: MessageActions;
  /** Changes when the user sends: scroll to the end even if they had scrolled up. */
  followToken: number;
  /** The connection is down: running answers wait to be resumed. */
  offline: boolean;
}

export function MessageList({ conversation, onSystemPrompt, actions, followToken, offline }: MessageListProps) {
  const messages = conversation.messages;
  const scroller = useRef<HTMLDivElement>(null);
  const content = useRef<HTMLDivElement>(null);
  const following = useRef(true);
  const [showJump, setShowJump] = useState(false);
  const anyRunning = messages.some(isRunning);

  const toBottom = () => {
    const el = scroller.current;
    if (el) el.scrollTop = el.scrollHeight;
  };

  useLayoutEffect(() => {
    following.current = true;
    setShowJump(false);
    toBottom();
  }, [followToken]);

  // Follow the growing answer, unless the user scrolled up to read.
  useEffect(() => {
    const el = content.current;
    if (!el) return;
    const observer = new ResizeObserver(() => {
      if (following.current) toBottom();
    });
    observer.observe(el);
    return () => observer.disconnect();
  }, []);

  const onScroll = () => {
    const el = scroller.current;
    if (!el) return;
    const atBottom = el.scrollHeight - el.scrollTop - el.clientHeight < FOLLOW_SLACK_PX;
    following.current = atBottom;
    setShowJump(!atBottom);
  };

  const lastIndex = messages.length - 1;
  const last = messages[lastIndex];
  return (
    <div className="message-scroller" ref={scroller} onScroll={onScroll}>
      <div className="message-list" ref={content} role="log" aria-label="Conversation" aria-live="off">
        {conversation.systemPrompt?.trim() ? <SystemPromptView text={conversation.systemPrompt} canChange={!anyRunning} onChange={onSystemPrompt} /> : null}
        {groupDropped(conversation).map((group) => {
          const views = group.indices.map((index) => {
            const message = messages[index] as Message;
            const versions = versionsAt(conversation, index);
            return (
              <MessageView
                key={message.id}
                message={message}
                isLast={index === lastIndex}
                canChange={!anyRunning && !group.dropped}
                offline={offline && isRunning(message)}
                version={versions.index + 1}
                versionCount={versions.count}
                actions={actions}
              />
            );
          });
          if (!group.dropped) return views;
          const turns = group.indices.filter((i) => messages[i]?.role === 'user').length;
          return (
            <details key={`dropped-${messages[group.indices[0] ?? 0]?.id ?? ''}`} className="dropped-turns">
              <summary>
                {turns === 1 ? '1 earlier turn' : `${turns} earlier turns`} dropped from the model's context
              </summary>
              {views}
            </details>
          );
        })}
      </div>
      <p className="visually-hidden" aria-live="polite">
        {last ? announcement(last) : ''}
      </p>
      {showJump ? (
        <button
          type="button"
          className="jump-to-latest"
          onClick={() => {
            following.current = true;
            setShowJump(false);
            toBottom();
          }}
        >
          ↓ Latest
        </button>
      ) : null}
    </div>
  );
}
