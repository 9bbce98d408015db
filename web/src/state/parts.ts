/**
 * The parts of an answer besides its text: the model's thinking (the `reasoning` channel)
 * and its tool calls (the `tool_call` channel), as they stream and as they are kept.
 */

/** One tool call of an answer: `arguments` is JSON text, complete once the answer ends. */
export interface ToolCall {
  index: number;
  id?: string;
  name?: string;
  arguments: string;
}

/** A fragment of a call as it arrives: its first fragment names the call. */
export interface ToolCallPiece {
  index: number;
  callId?: string;
  name?: string;
  text: string;
}

/** Where a delta goes: tokenpipe.v1's `channel` (absent: the content). */
export type Channel = 'content' | 'reasoning' | 'tool_call';

export function channelOf(channel: string | undefined): Channel | null {
  if (channel === undefined || channel === 'content') return 'content';
  if (channel === 'reasoning' || channel === 'tool_call') return channel;
  return null; // a channel this page does not know: not text of the answer
}

/** Fragments appended to the calls they belong to, by index, first fragment first. */
export function mergeCalls(calls: readonly ToolCall[] | undefined, pieces: readonly ToolCallPiece[]): ToolCall[] {
  const merged = calls ? calls.map((call) => ({ ...call })) : [];
  for (const piece of pieces) {
    let call = merged.find((c) => c.index === piece.index);
    if (!call) {
      call = { index: piece.index, arguments: '' };
      merged.push(call);
    }
    if (piece.callId !== undefined) call.id ??= piece.callId;
    if (piece.name !== undefined) call.name ??= piece.name;
    call.arguments += piece.text;
  }
  return merged.sort((a, b) => a.index - b.index);
}

/** Pieces of one batch, consecutive fragments of a call joined (fewer objects to merge). */
export function addPiece(pieces: ToolCallPiece[], piece: ToolCallPiece): void {
  const last = pieces[pieces.length - 1];
  if (last && last.index === piece.index && piece.callId === undefined && piece.name === undefined) last.text += piece.text;
  else pieces.push({ ...piece });
}

/**
 * JSON text, whole or cut anywhere, indented as `JSON.stringify(value, null, 2)` writes
 * it (numbers and strings as the model wrote them): arguments read as they stream, and
 * each longer prefix only adds to the output.
 */
export function prettyJsonPrefix(text: string): string {
  let out = '';
  let depth = 0;
  let inString = false;
  let escaped = false;
  let opened = false; // a bracket just opened: empty ones stay `{}` / `[]`
  const newline = () => `\n${'  '.repeat(depth)}`;
  for (const ch of text) {
    if (inString) {
      out += ch;
      if (escaped) escaped = false;
      else if (ch === '\\') escaped = true;
      else if (ch === '"') inString = false;
      continue;
    }
    if (ch === ' ' || ch === '\n' || ch === '\r' || ch === '\t') continue;
    const closing = ch === '}' || ch === ']';
    if (opened) {
      opened = false;
      if (closing) {
        depth -= 1;
        out += ch;
        continue;
      }
      out += newline();
    }
    if (ch === '{' || ch === '[') {
      out += ch;
      depth += 1;
      opened = true;
    } else if (closing) {
      depth = Math.max(0, depth - 1);
      out += newline() + ch;
    } else if (ch === ',') out += `,${newline()}`;
    else if (ch === ':') out += ': ';
    else {
      if (ch === '"') inString = true;
      out += ch;
    }
  }
  return out;
}

/** "Thought for 3.2 s": how long the thinking took, as this page saw it arrive. */
export function thoughtFor(ms: number): string {
  if (ms < 1000) return 'Thought for less than a second';
  const seconds = ms / 1000;
  return `Thought for ${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)} s`;
}
