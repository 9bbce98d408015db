/**
 * A conversation as a tree of versions, as llama.cpp's UI keeps it: an edit or a
 * regenerate adds a sibling instead of overwriting, and `messages` is the branch in view.
 * Pure functions over the Conversation record; the reducer calls them.
 */
import type { Conversation, Message } from './conversations';

/** The parent key of the first message. */
export const ROOT = '';

export interface Versions {
  /** 0-based position of the message among its versions. */
  index: number;
  count: number;
}

/** The replies of each message; a conversation stored before branches existed is one line. */
export function childMap(conversation: Conversation): Record<string, string[]> {
  if (conversation.children) return conversation.children;
  const children: Record<string, string[]> = {};
  conversation.messages.forEach((message, index) => {
    children[parentKey(conversation.messages, index)] = [message.id];
  });
  return children;
}

export function parentKey(path: readonly Message[], index: number): string {
  return index === 0 ? ROOT : (path[index - 1]?.id ?? ROOT);
}

/** Which version of its turn the message at `index` of the path is. */
export function versionsAt(conversation: Conversation, index: number): Versions {
  const message = conversation.messages[index];
  const siblings = childMap(conversation)[parentKey(conversation.messages, index)] ?? [];
  const position = message ? siblings.indexOf(message.id) : -1;
  return position < 0 ? { index: 0, count: 1 } : { index: position, count: siblings.length };
}

function lookup(conversation: Conversation, id: string): Message | undefined {
  return conversation.offPath?.[id] ?? conversation.messages.find((m) => m.id === id);
}

/** From `id` down: at each step the reply last shown there, else the newest. */
function descend(conversation: Conversation, children: Record<string, string[]>, id: string): Message[] {
  const tail: Message[] = [];
  let current = lookup(conversation, id);
  while (current && tail.length < 10_000) {
    tail.push(current);
    const kids = children[current.id] ?? [];
    const chosen = conversation.chosen?.[current.id];
    const next = chosen && kids.includes(chosen) ? chosen : kids[kids.length - 1];
    current = next === undefined ? undefined : lookup(conversation, next);
  }
  return tail;
}

/** Show `tail` from `index` on; what was shown there before is kept off the path. */
function replaceTail(conversation: Conversation, children: Record<string, string[]>, index: number, tail: Message[]): Conversation {
  const offPath = { ...conversation.offPath };
  for (const message of conversation.messages.slice(index)) offPath[message.id] = message;
  for (const message of tail) delete offPath[message.id];
  const messages = [...conversation.messages.slice(0, index), ...tail];
  const chosen = { ...conversation.chosen };
  for (let i = Math.max(index, 0); i < messages.length; i += 1) {
    const message = messages[i];
    if (message) chosen[parentKey(messages, i)] = message.id;
  }
  return { ...conversation, messages, offPath, children, chosen };
}

/** A new version of the turn at `index` (`first`, then `rest` below it), shown at once. */
export function addVersion(conversation: Conversation, index: number, first: Message, rest: Message[] = []): Conversation {
  const children = { ...childMap(conversation) };
  const parent = parentKey(conversation.messages, index);
  children[parent] = [...(children[parent] ?? []), first.id];
  const line = [first, ...rest];
  line.forEach((message, i) => {
    const next = line[i + 1];
    children[message.id] = next ? [next.id] : [];
  });
  return replaceTail(conversation, children, index, line);
}

/** Show another version of the turn at `index`, with the replies it had. */
export function switchVersion(conversation: Conversation, index: number, siblingId: string): Conversation {
  const children = childMap(conversation);
  const siblings = children[parentKey(conversation.messages, index)] ?? [];
  if (!siblings.includes(siblingId) || conversation.messages[index]?.id === siblingId) return conversation;
  return replaceTail(conversation, children, index, descend(conversation, children, siblingId));
}

/** The sibling `step` places away from the message at `index`, if there is one. */
export function stepVersion(conversation: Conversation, index: number, step: number): string | undefined {
  const siblings = childMap(conversation)[parentKey(conversation.messages, index)] ?? [];
  const message = conversation.messages[index];
  const position = message ? siblings.indexOf(message.id) : -1;
  return position < 0 ? undefined : siblings[position + step];
}

function subtree(children: Record<string, string[]>, id: string): string[] {
  const ids = [id];
  for (let i = 0; i < ids.length; i += 1) ids.push(...(children[ids[i] ?? ''] ?? []));
  return ids;
}

/**
 * Delete the message at `index`. One of several versions goes with the replies under it
 * (they answered that version) and a neighbouring version is shown; a message without
 * other versions goes alone, and what followed it moves up into its place.
 */
export function removeMessage(conversation: Conversation, index: number): Conversation {
  const message = conversation.messages[index];
  if (!message) return conversation;
  const children = { ...childMap(conversation) };
  const parent = parentKey(conversation.messages, index);
  const siblings = children[parent] ?? [];
  const chosen = { ...conversation.chosen };
  const offPath = { ...conversation.offPath };
  if (siblings.length > 1) {
    const position = siblings.indexOf(message.id);
    const neighbour = siblings[position - 1] ?? siblings[position + 1];
    const gone = subtree(children, message.id);
    for (const id of gone) {
      delete children[id];
      delete chosen[id];
      delete offPath[id];
    }
    children[parent] = siblings.filter((id) => id !== message.id);
    const trimmed = { ...conversation, messages: conversation.messages.slice(0, index), offPath, chosen, children };
    return neighbour === undefined ? trimmed : replaceTail(trimmed, children, index, descend(trimmed, children, neighbour));
  }
  const replies = children[message.id] ?? [];
  children[parent] = replies;
  delete children[message.id];
  const shown = chosen[message.id];
  delete chosen[message.id];
  if (shown !== undefined) chosen[parent] = shown;
  else delete chosen[parent];
  const messages = [...conversation.messages.slice(0, index), ...conversation.messages.slice(index + 1)];
  return { ...conversation, messages, children, chosen, offPath };
}

/** Every message of the conversation, on the path or not. */
export function allMessages(conversation: Conversation): Message[] {
  return [...conversation.messages, ...Object.values(conversation.offPath ?? {})];
}
