/**
 * Files a message carries: text files dropped or picked (code, markdown, CSV, logs) and long
 * pastes, each shown as a chip and sent as a text part of its own that names it. Pure: the
 * page reads the files and counts their tokens; this module decides what is taken and how
 * it goes on the wire.
 */

export interface Attachment {
  name: string;
  text: string;
  /** The file's tokens, counted by the server (alone in a message); absent while unknown. */
  tokens?: number;
  /** A long paste turned into a chip, not a file. */
  pasted?: boolean;
  /** Its middle was cut so the message fits the context: the characters it had whole. */
  cutFrom?: number;
}

/** A paste of this many characters or more becomes a chip (llama.cpp's page does the same). */
export const PASTE_AS_FILE_CHARS = 2500;
/** The most one file may bring: a model's whole context is far less. */
export const MAX_FILE_BYTES = 2 * 1024 * 1024;

const TEXT_TYPES = /^(text\/|application\/(json|xml|javascript|x-ndjson|x-yaml|yaml|toml|x-sh|sql|csv|ld\+json))/;
const TEXT_NAMES =
  /\.(txt|md|markdown|rst|csv|tsv|log|json|jsonl|ndjson|yaml|yml|toml|ini|cfg|conf|env|xml|html?|css|scss|js|jsx|mjs|cjs|ts|tsx|py|pyi|rb|go|rs|java|kt|kts|c|h|cc|cpp|hpp|cs|swift|m|php|pl|lua|r|jl|scala|sh|bash|zsh|fish|ps1|bat|sql|graphql|proto|tex|diff|patch|dockerfile|makefile|gitignore|vue|svelte)$/i;
const TEXT_BASENAMES = /^(dockerfile|makefile|readme|license|changelog|\.env.*|\.gitignore)$/i;

/** What a picked file is: text the page can send, an image, or something else. */
export function fileKind(name: string, type: string): 'text' | 'image' | 'other' {
  if (type.startsWith('image/') || /\.(png|jpe?g|gif|webp|bmp|svg|heic|avif|tiff?)$/i.test(name)) return 'image';
  if (TEXT_TYPES.test(type) || TEXT_NAMES.test(name) || TEXT_BASENAMES.test(name)) return 'text';
  return 'other';
}

/**
 * Why a file is refused, in words; null when it is taken. Images: only a model that can see
 * takes them (`canSee`); tokenpipe's text models cannot, and its doors take text parts only.
 */
export function refusal(name: string, type: string, size: number, canSee: boolean): string | null {
  const kind = fileKind(name, type);
  if (kind === 'image')
    return canSee ? `${name}: images are not sent by this page yet.` : `${name}: this model reads text only and cannot see images; describe the image in words, or attach a text file.`;
  if (kind === 'other') return `${name}: not a text file (code, markdown, CSV, logs, JSON…); only text can be sent to the model.`;
  if (size > MAX_FILE_BYTES) return `${name}: ${(size / 1048576).toFixed(1)} MB is more than the ${MAX_FILE_BYTES / 1048576} MB a file may have.`;
  return null;
}

/** Text with a NUL in its first 8 KB is binary whatever its name says. */
export function looksBinary(text: string): boolean {
  return text.slice(0, 8192).includes('\u0000');
}

/** The name a paste gets: pasted.txt, pasted-2.txt, … (not one already on the message). */
export function pasteName(existing: readonly Attachment[]): string {
  const names = new Set(existing.map((a) => a.name));
  for (let n = 1; ; n += 1) {
    const name = n === 1 ? 'pasted.txt' : `pasted-${n}.txt`;
    if (!names.has(name)) return name;
  }
}

/** The text part one attachment goes as: its name, then its text. */
export function attachmentPart(attachment: Attachment): string {
  return `<file name="${attachment.name.replace(/"/g, "'")}">\n${attachment.text}\n</file>`;
}

/**
 * A user message's text parts: what was typed, then one per attachment. The doors join text
 * parts with newlines, so `partsText` is what the model reads on every transport.
 */
export function messageParts(content: string, attachments: readonly Attachment[] | undefined): string[] {
  const files = (attachments ?? []).map(attachmentPart);
  return content.trim() ? [content, ...files] : files.length ? files : [content];
}

export function partsText(parts: readonly string[]): string {
  return parts.join('\n');
}

/** A marker where the middle of a text was cut. */
export function cutMarker(charsCut: number): string {
  return `\n\n[… ${charsCut.toLocaleString('en-US')} characters cut here to fit the context …]\n\n`;
}

/** The first and last `keep` characters of `text` around a marker; the text itself if it is no longer. */
export function keepEnds(text: string, keep: number): string {
  if (keep * 2 >= text.length) return text;
  const k = Math.max(0, Math.floor(keep));
  return text.slice(0, k) + cutMarker(text.length - 2 * k) + text.slice(text.length - k);
}

/** "3.2 KB", "1.1 MB": a file's size in words. */
export function sizeInWords(chars: number): string {
  if (chars < 1024) return `${chars} B`;
  if (chars < 1048576) return `${(chars / 1024).toFixed(1)} KB`;
  return `${(chars / 1048576).toFixed(1)} MB`;
}
