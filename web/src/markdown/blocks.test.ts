import { describe, expect, it } from 'vitest';
import { splitBlocks } from './blocks';

describe('splitBlocks', () => {
  it('splits paragraphs at blank lines', () => {
    expect(splitBlocks('one\ntwo\n\nthree')).toEqual(['one\ntwo', 'three']);
  });

  it('keeps a fenced code block whole, blank lines included, even unterminated', () => {
    const text = 'Intro:\n```python\ndef f():\n\n    return 1\n```\n\nAfter';
    expect(splitBlocks(text)).toEqual(['Intro:', '```python\ndef f():\n\n    return 1\n```', 'After']);
    expect(splitBlocks('```js\nlet a\n\nlet b')).toEqual(['```js\nlet a\n\nlet b']);
  });

  it('does not close a fence on a shorter or different fence', () => {
    expect(splitBlocks('````\n```\n\nstill code\n````\n\nout')).toEqual(['````\n```\n\nstill code\n````', 'out']);
    expect(splitBlocks('~~~\n```\n\nin\n~~~')).toEqual(['~~~\n```\n\nin\n~~~']);
  });

  it('keeps a loose list and indented continuations together', () => {
    expect(splitBlocks('- a\n\n- b\n\n  more of b\n\nafter')).toEqual(['- a\n\n- b\n\n  more of b', 'after']);
    expect(splitBlocks('1. a\n\n2. b')).toEqual(['1. a\n\n2. b']);
  });

  it('joins back to the same Markdown, so nothing is lost', () => {
    const text = '# Title\n\nPara with `code`.\n\n```\nx\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n> quote';
    expect(splitBlocks(text).join('\n\n')).toBe(text);
  });

  it('gives earlier blocks unchanged while the text grows', () => {
    const full = 'First paragraph.\n\n```py\nprint(1)\n```\n\nLast words here.';
    let previous: string[] = [];
    for (let end = 1; end <= full.length; end++) {
      const blocks = splitBlocks(full.slice(0, end));
      // Every finished block of the previous prefix is still there, unchanged.
      expect(blocks.slice(0, Math.max(0, previous.length - 1))).toEqual(previous.slice(0, -1));
      previous = blocks;
    }
    expect(previous).toHaveLength(3);
  });
});
