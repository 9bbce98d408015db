/** The files of a message as chips: name, size in tokens, and (in the composer) a way to remove each; a click shows the text. */
import { FileText, X } from 'lucide-react';
import type { Attachment } from '../state/attachments';
import { sizeInWords } from '../state/attachments';

function size(file: Attachment): string {
  const tokens = file.tokens === undefined ? 'counting…' : `${file.tokens.toLocaleString('en-US')} tokens`;
  return file.cutFrom ? `${tokens}, cut from ${sizeInWords(file.cutFrom)}` : tokens;
}

/** In a sent message: each chip opens to show the file's text. */
export function AttachmentList({ files }: { files: Attachment[] }) {
  return (
    <ul className="attachments sent" aria-label="Attached files">
      {files.map((file) => (
        <li key={file.name} className="attachment">
          <details>
            <summary>
              <FileText aria-hidden="true" size={14} /> <span className="attachment-name">{file.name}</span> <span className="attachment-size">{size(file)}</span>
            </summary>
            <pre className="attachment-text">{file.text}</pre>
          </details>
        </li>
      ))}
    </ul>
  );
}

/** In the composer: each chip can be removed before sending. */
export function AttachmentChips({ files, onRemove }: { files: Attachment[]; onRemove(name: string): void }) {
  if (files.length === 0) return null;
  return (
    <ul className="attachments" aria-label="Files to send">
      {files.map((file) => (
        <li key={file.name} className="attachment" title={file.pasted ? 'A long paste, sent as a file' : undefined}>
          <FileText aria-hidden="true" size={14} />
          <span className="attachment-name">{file.name}</span>
          <span className="attachment-size">{size(file)}</span>
          <button type="button" className="button-ghost icon small" aria-label={`Remove ${file.name}`} onClick={() => onRemove(file.name)}>
            <X aria-hidden="true" size={14} />
          </button>
        </li>
      ))}
    </ul>
  );
}
