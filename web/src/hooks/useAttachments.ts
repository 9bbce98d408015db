/**
 * The files of the message being written: read from a pick, a drop or a long paste, refused
 * in words where they are not text (or are images a model cannot see), counted in tokens by
 * the server once taken, and kept with the conversation's draft (`draftKey`) through a reload.
 */
import { useCallback, useEffect, useRef, useState } from 'react';
import { looksBinary, pasteName, refusal, type Attachment } from '../state/attachments';
import { loadDraftFiles, saveDraftFiles } from '../state/drafts';

/** tokenpipe's doors take text parts only: no model it serves can see an image. */
export const MODELS_CAN_SEE = false;

export interface Attachments {
  files: Attachment[];
  /** Why the last files offered were not taken, one line each. */
  refused: string[];
  addFiles(files: FileList | File[]): Promise<void>;
  addPaste(text: string): void;
  remove(name: string): void;
  /** Replace them all (a sent message's files go; carried ones come). */
  set(files: Attachment[]): void;
}

export function useAttachments(countFile: (file: Attachment) => Promise<number | null>, draftKey: string): Attachments {
  const [files, setFiles] = useState<Attachment[]>(() => loadDraftFiles(draftKey));
  const [refused, setRefused] = useState<string[]>([]);
  const key = useRef(draftKey);
  useEffect(() => {
    if (key.current === draftKey) return;
    key.current = draftKey;
    setRefused([]);
    setFiles(loadDraftFiles(draftKey));
  }, [draftKey]);
  useEffect(() => saveDraftFiles(key.current, files), [files]);
  const count = useRef(countFile);
  count.current = countFile;

  // Each file is counted once, as it comes: the chip shows its size in tokens.
  const asked = useRef(new WeakSet<Attachment>());
  useEffect(() => {
    for (const file of files) {
      if (file.tokens !== undefined || asked.current.has(file)) continue;
      asked.current.add(file);
      void count.current(file).then((tokens) => {
        if (tokens !== null) setFiles((all) => all.map((f) => (f === file ? { ...f, tokens } : f)));
      });
    }
  }, [files]);

  const addFiles = useCallback(async (list: FileList | File[]) => {
    const taken: Attachment[] = [];
    const why: string[] = [];
    for (const file of [...list]) {
      const reason = refusal(file.name, file.type, file.size, MODELS_CAN_SEE);
      if (reason) {
        why.push(reason);
        continue;
      }
      const text = await file.text();
      if (looksBinary(text)) why.push(`${file.name}: it holds binary data, not text.`);
      else taken.push({ name: file.name, text });
    }
    setRefused(why);
    if (taken.length) setFiles((all) => [...all.filter((f) => !taken.some((t) => t.name === f.name)), ...taken]);
  }, []);

  const addPaste = useCallback((text: string) => {
    setRefused([]);
    setFiles((all) => [...all, { name: pasteName(all), text, pasted: true }]);
  }, []);

  const remove = useCallback((name: string) => setFiles((all) => all.filter((f) => f.name !== name)), []);
  const set = useCallback((next: Attachment[]) => {
    setRefused([]);
    setFiles(next);
  }, []);
  return { files, refused, addFiles, addPaste, remove, set };
}
