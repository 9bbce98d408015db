/**
 * Gathers streamed text per answer and hands it over once per animation frame: a fast
 * model sends hundreds of deltas a second, and a render for each would burn the CPU the
 * model needs (PERFORMANCE.md, "The browser counts too").
 */
import { addPiece, channelOf, type ToolCallPiece } from '../state/parts';

/** The thinking and the tool-call fragments gathered with the text of one batch. */
export interface Extras {
  reasoning: string;
  calls: ToolCallPiece[];
}

/** Where a delta goes (tokenpipe.v1's channel fields; absent: the content). */
export interface PieceMeta {
  channel?: string;
  index?: number;
  callId?: string;
  name?: string;
}

/** `seq`: the last tokenpipe.v1 seq in `text`, where the transport numbers its deltas. */
export type Deliver = (conversationId: string, messageId: string, text: string, seq?: number, deltas?: number, extras?: Extras) => void;

interface Pending {
  conversationId: string;
  text: string;
  seq?: number;
  deltas: number;
  reasoning: string;
  calls: ToolCallPiece[];
}

export interface FrameScheduler {
  request(callback: () => void): number;
  cancel(handle: number): void;
  /** Milliseconds, for the minimum spacing of renders. */
  now?(): number;
}

const animationFrames: FrameScheduler = {
  request: (callback) => requestAnimationFrame(callback),
  cancel: (handle) => cancelAnimationFrame(handle),
  now: () => performance.now(),
};

export class DeltaBatcher {
  private pending = new Map<string, Pending>();
  private frame: number | null = null;
  private lastFlush = -Infinity;

  /** `minIntervalMs`: renders at least this far apart (a frame that comes sooner is skipped). */
  constructor(
    private readonly deliver: Deliver,
    private readonly frames: FrameScheduler = animationFrames,
    private readonly minIntervalMs = 0,
  ) {}

  private schedule(): void {
    this.frame ??= this.frames.request(() => {
      this.frame = null;
      const now = this.frames.now?.() ?? Infinity;
      if (now - this.lastFlush < this.minIntervalMs) this.schedule();
      else this.flush();
    });
  }

  add(conversationId: string, messageId: string, text: string, seq?: number, meta?: PieceMeta): void {
    let entry = this.pending.get(messageId);
    if (!entry) {
      entry = { conversationId, text: '', deltas: 0, reasoning: '', calls: [] };
      this.pending.set(messageId, entry);
    }
    entry.deltas += 1;
    if (seq !== undefined) entry.seq = seq;
    const channel = channelOf(meta?.channel);
    if (channel === 'content') entry.text += text;
    else if (channel === 'reasoning') entry.reasoning += text;
    else if (channel === 'tool_call' && meta?.index !== undefined) {
      addPiece(entry.calls, {
        index: meta.index,
        text,
        ...(meta.callId !== undefined ? { callId: meta.callId } : {}),
        ...(meta.name !== undefined ? { name: meta.name } : {}),
      });
    }
    this.schedule();
  }

  /** Deliver everything now: before an answer's end, so its last text comes first. */
  flush(): void {
    if (this.frame !== null) {
      this.frames.cancel(this.frame);
      this.frame = null;
    }
    const batch = this.pending;
    if (batch.size === 0) return;
    this.lastFlush = this.frames.now?.() ?? 0;
    this.pending = new Map();
    for (const [messageId, { conversationId, text, seq, deltas, reasoning, calls }] of batch) {
      const extras = reasoning || calls.length ? { reasoning, calls } : undefined;
      this.deliver(conversationId, messageId, text, seq, deltas, extras);
    }
  }

  dispose(): void {
    if (this.frame !== null) this.frames.cancel(this.frame);
    this.frame = null;
    this.pending.clear();
  }
}
