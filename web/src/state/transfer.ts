/**
 * Conversations out of this browser and back: JSON with every version of every message and
 * the conversation's own settings (one or all), Markdown of the branch in view (one). An
 * import is checked field by field; what it cannot read is refused in words, never half-taken.
 */
import { allMessages } from './branches';
import { conversationSettingsFrom } from './conversationSettings';
import { isRunning, type Conversation, type Message } from './conversations';
import { attachmentPart } from './attachments';
import { callId } from './outgoing';

export const EXPORT_FORMAT = 'tokenpipe.conversations';
export const EXPORT_VERSION = 1;

export function exportJson(conversations: Conversation[], now: number): string {
  return JSON.stringify({ format: EXPORT_FORMAT, version: EXPORT_VERSION, exportedAt: new Date(now).toISOString(), conversations }, null, 2);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const ROLES = new Set(['user', 'assistant']);

/** One message as stored, or why not. */
function messageFrom(value: unknown, where: string): Message | string {
  if (!isRecord(value)) return `${where} is not an object`;
  if (typeof value.id !== 'string' || !value.id) return `${where} has no id`;
  if (typeof value.role !== 'string' || !ROLES.has(value.role)) return `${where} has no role user or assistant`;
  if (typeof value.content !== 'string') return `${where} has no text (content)`;
  const message = { ...value, createdAt: typeof value.createdAt === 'number' ? value.createdAt : 0 } as unknown as Message;
  // An answer that was arriving when it was exported cannot be resumed in another browser.
  return isRunning(message) ? { ...message, status: 'interrupted', note: 'It was still arriving when the conversation was exported.', unresumable: true } : message;
}

function conversationFrom(value: unknown, where: string): Conversation | string {
  if (!isRecord(value)) return `${where} is not an object`;
  if (typeof value.id !== 'string' || !value.id) return `${where} has no id`;
  if (!Array.isArray(value.messages)) return `${where} has no messages`;
  const messages: Message[] = [];
  for (const [i, raw] of value.messages.entries()) {
    const message = messageFrom(raw, `${where}, message ${i + 1}`);
    if (typeof message === 'string') return message;
    messages.push(message);
  }
  const offPath: Record<string, Message> = {};
  for (const [id, raw] of Object.entries(isRecord(value.offPath) ? value.offPath : {})) {
    const message = messageFrom(raw, `${where}, version ${id}`);
    if (typeof message === 'string') return message;
    offPath[id] = message;
  }
  const settings = conversationSettingsFrom(value.settings);
  const now = typeof value.updatedAt === 'number' ? value.updatedAt : 0;
  const { settings: _raw, ...rest } = value;
  return {
    ...(rest as unknown as Conversation),
    title: typeof value.title === 'string' && value.title ? value.title : 'Imported conversation',
    createdAt: typeof value.createdAt === 'number' ? value.createdAt : now,
    updatedAt: now,
    messages,
    ...(Object.keys(offPath).length ? { offPath } : {}),
    ...(settings ? { settings } : {}),
  };
}

/** The conversations of an exported file, or why it cannot be read. */
export function parseExport(text: string): { conversations: Conversation[] } | { error: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { error: 'the file is not JSON' };
  }
  if (!isRecord(value) || value.format !== EXPORT_FORMAT) return { error: `the file is not an export of this page (no "format": "${EXPORT_FORMAT}")` };
  if (typeof value.version !== 'number' || value.version > EXPORT_VERSION) return { error: `the file is of version ${String(value.version)}; this page reads version ${EXPORT_VERSION}` };
  if (!Array.isArray(value.conversations)) return { error: 'the file holds no conversations' };
  const conversations: Conversation[] = [];
  for (const [i, raw] of value.conversations.entries()) {
    const conversation = conversationFrom(raw, `conversation ${i + 1}`);
    if (typeof conversation === 'string') return { error: conversation };
    conversations.push(conversation);
  }
  return { conversations };
}

/**
 * Imported conversations made to sit beside those here: one whose id is taken gets a new id
 * (both are kept), so an import never overwrites.
 */
export function besideExisting(imported: Conversation[], existing: ReadonlySet<string>, newId: () => string): Conversation[] {
  const taken = new Set(existing);
  return imported.map((conversation) => {
    const id = taken.has(conversation.id) ? newId() : conversation.id;
    taken.add(id);
    return id === conversation.id ? conversation : { ...conversation, id };
  });
}

/** The branch in view as Markdown: the system prompt, then each turn with its files and tool calls. */
export function exportMarkdown(conversation: Conversation): string {
  const out = [`# ${conversation.title}`, ''];
  if (conversation.systemPrompt?.trim()) out.push('**System prompt**', '', quote(conversation.systemPrompt), '');
  for (const message of conversation.messages) {
    out.push(message.role === 'user' ? '## You' : `## Assistant${message.model ? ` (${message.model})` : ''}`, '');
    if (message.content) out.push(message.content, '');
    for (const file of message.attachments ?? []) out.push(`Attached \`${file.name}\`:`, '', fence(attachmentPart(file)), '');
    for (const call of message.toolCalls ?? []) {
      out.push(`Tool call \`${call.name ?? 'a function'}\`:`, '', fence(call.arguments, 'json'), '');
      const result = message.toolResults?.[callId(call)];
      if (result !== undefined) out.push('Result:', '', fence(result), '');
    }
  }
  const versions = allMessages(conversation).length - conversation.messages.length;
  if (versions > 0) out.push(`_${versions} other version${versions === 1 ? ' is' : 's are'} in the JSON export only._`, '');
  return out.join('\n');
}

function quote(text: string): string {
  return text
    .split('\n')
    .map((line) => `> ${line}`)
    .join('\n');
}

function fence(text: string, language = ''): string {
  const ticks = '`'.repeat(Math.max(3, ...[...text.matchAll(/`+/g)].map((m) => m[0].length + 1)));
  return `${ticks}${language}\n${text}\n${ticks}`;
}

/** A file name from a title: letters, digits and dashes. */
export function fileNameOf(title: string, extension: string): string {
  const base = title.toLocaleLowerCase().replace(/[^\p{L}\p{N}]+/gu, '-').replace(/^-|-$/g, '').slice(0, 60);
  return `${base || 'conversation'}.${extension}`;
}
