/**
 * Split Markdown into top-level blocks so that, while an answer streams, the finished
 * blocks keep their rendered output and only the last (growing) one is parsed again.
 */
const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;
const LIST_ITEM = /^ {0,3}(?:[-*+]|\d{1,9}[.)])\s/;

export function splitBlocks(text: string): string[] {
  const lines = text.split('\n');
  const blocks: string[] = [];
  let current: string[] = [];
  let fence: { char: string; length: number } | null = null;
  let sawBlank = false;

  const flush = () => {
    if (current.length) blocks.push(current.join('\n'));
    current = [];
  };

  for (const line of lines) {
    if (fence) {
      current.push(line);
      const match = FENCE.exec(line);
      if (match?.[1] && match[1][0] === fence.char && match[1].length >= fence.length && !match[2]?.trim()) fence = null;
      continue;
    }
    if (line.trim() === '') {
      sawBlank = true;
      current.push(line);
      continue;
    }
    // A new block starts after a blank line, unless the line continues the one before
    // (indented content, or the next item of the same list).
    const continues = /^\s/.test(line) || (LIST_ITEM.test(line) && LIST_ITEM.test(current.find((l) => l.trim()) ?? ''));
    if (sawBlank && !continues) {
      while (current.length && current[current.length - 1]?.trim() === '') current.pop();
      flush();
    }
    sawBlank = false;
    const open = FENCE.exec(line);
    if (open?.[1] && !(open[1][0] === '`' && open[2]?.includes('`'))) {
      if (current.some((l) => l.trim()) && !LIST_ITEM.test(current[0] ?? '')) flush();
      fence = { char: open[1][0] ?? '`', length: open[1].length };
    }
    current.push(line);
  }
  flush();
  return blocks;
}
