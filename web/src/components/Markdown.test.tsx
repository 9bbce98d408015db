import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';
import { Markdown } from './Markdown';

const render = (text: string, streaming = false) => renderToStaticMarkup(<Markdown text={text} streaming={streaming} />);

describe('Markdown', () => {
  it('renders a fenced code block highlighted, with its language and a copy button', () => {
    const html = render('Look:\n\n```python\ndef f():\n    return 1\n```');
    expect(html).toContain('<span class="code-language">python</span>');
    expect(html).toContain('<span class="hljs-keyword">def</span>');
    expect(html).toContain('aria-label="Copy python code"');
  });

  it('shows code in a language it does not know as plain text', () => {
    const html = render('```brainfuck\n+[<>]\n```');
    expect(html).toContain('+[&lt;&gt;]');
    expect(html).not.toContain('hljs-');
  });

  it('never renders HTML from the model as HTML', () => {
    const html = render('Hi <img src=x onerror=alert(1)> <script>alert(2)</script> [x](javascript:alert(3))');
    expect(html).not.toMatch(/<img|<script|href="javascript/i);
  });

  it('closes half-written emphasis while streaming, and only then', () => {
    expect(render('This is **bo', true)).toContain('<strong>bo</strong>');
    expect(render('This is **bo', false)).not.toContain('<strong>');
  });

  it('renders GFM tables inside a scrolling wrapper, and links to a new tab', () => {
    const html = render('| a | b |\n|---|---|\n| 1 | 2 |\n\nsee [docs](https://example.com)');
    expect(html).toMatch(/<div class="table-scroll" tabindex="0"><table>/);
    expect(html).toContain('<a href="https://example.com" target="_blank" rel="noopener noreferrer">docs</a>');
  });
});
