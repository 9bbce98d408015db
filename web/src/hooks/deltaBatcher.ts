/**
 * Gathers streamed text per answer and hands it over once per animation frame: a fast
 * model sends hundreds of deltas a second, and a render for each would burn the CPU the
 * model needs (PERFORMANCE.md, "The browser counts too").
 */
/** `seq`: the last tokenpipe.v1 seq in `text`, where the transport numbers its deltas. */
export type Deliver = (conversationId: string, messageId: string, text: string, seq?: number, deltas?: number) => void;

export interface FrameScheduler {
  request(callback: () => void): number;
  cancel(handle: number): void;
}

const animationFrames: FrameScheduler = {
  request: (callback) => requestAnimationFrame(callback),
  cancel: (handle) => cancelAnimationFrame(handle),
};

export class DeltaBatcher {
  private pending = new Map<string, { conversationId: string; text: string; seq?: number; deltas: number }>();
  private frame: number | null = null;

  constructor(
    private readonly deliver: Deliver,
    private readonly frames: FrameScheduler = animationFrames,
  ) {}

  add(conversationId: string, messageId: string, text: string, seq?: number): void {
    const entry = this.pending.get(messageId);
    if (entry) {
      entry.text += text;
      entry.deltas += 1;
      if (seq !== undefined) entry.seq = seq;
    } else this.pending.set(messageId, { conversationId, text, deltas: 1, ...(seq !== undefined ? { seq } : {}) });
    this.frame ??= this.frames.request(() => {
      this.frame = null;
      this.flush();
    });
  }

  /** Deliver everything now: before an answer's end, so its last text comes first. */
  flush(): void {
    if (this.frame !== null) {
      this.frames.cancel(this.frame);
      this.frame = null;
    }
    const batch = this.pending;
    if (batch.size === 0) return;
    this.pending = new Map();
    for (const [messageId, { conversationId, text, seq, deltas }] of batch) this.deliver(conversationId, messageId, text, seq, deltas);
  }

  dispose(): void {
    if (this.frame !== null) this.frames.cancel(this.frame);
    this.frame = null;
    this.pending.clear();
  }
}
