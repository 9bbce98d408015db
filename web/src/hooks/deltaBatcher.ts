/**
 * Gathers streamed text per answer and hands it over once per animation frame: a fast
 * model sends hundreds of deltas a second, and a render for each would burn the CPU the
 * model needs (PERFORMANCE.md, "The browser counts too").
 */
export type Deliver = (conversationId: string, messageId: string, text: string) => void;

export interface FrameScheduler {
  request(callback: () => void): number;
  cancel(handle: number): void;
}

const animationFrames: FrameScheduler = {
  request: (callback) => requestAnimationFrame(callback),
  cancel: (handle) => cancelAnimationFrame(handle),
};

export class DeltaBatcher {
  private pending = new Map<string, { conversationId: string; text: string }>();
  private frame: number | null = null;

  constructor(
    private readonly deliver: Deliver,
    private readonly frames: FrameScheduler = animationFrames,
  ) {}

  add(conversationId: string, messageId: string, text: string): void {
    const entry = this.pending.get(messageId);
    if (entry) entry.text += text;
    else this.pending.set(messageId, { conversationId, text });
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
    for (const [messageId, { conversationId, text }] of batch) this.deliver(conversationId, messageId, text);
  }

  dispose(): void {
    if (this.frame !== null) this.frames.cancel(this.frame);
    this.frame = null;
    this.pending.clear();
  }
}
