/**
 * An answer rendered as Markdown, block by block: finished blocks are memoised, so while
 * tokens arrive only the growing last block is parsed and rendered again.
 */
import type { Element, ElementContent } from 'hast';
import { memo, useMemo, type ComponentPropsWithoutRef } from 'react';
import ReactMarkdown, { type Components } from 'react-markdown';
import remend from 'remend';
import remarkGfm from 'remark-gfm';
import { splitBlocks } from '../markdown/blocks';
import { CodeBlock } from './CodeBlock';

function textOf(node: ElementContent): string {
  if (node.type === 'text') return node.value;
  if (node.type === 'element') return node.children.map(textOf).join('');
  return '';
}

function languageOf(code: Element): string | undefined {
  const classes = code.properties.className;
  const list = Array.isArray(classes) ? classes : [];
  const found = list.find((c): c is string => typeof c === 'string' && c.startsWith('language-'));
  return found?.slice('language-'.length);
}

const components: Components = {
  pre({ node }) {
    const code = node?.children.find((child): child is Element => child.type === 'element' && child.tagName === 'code');
    if (!code) return null;
    return <CodeBlock code={textOf(code).replace(/\n$/, '')} language={languageOf(code)} />;
  },
  a({ node: _node, ...props }: ComponentPropsWithoutRef<'a'> & { node?: Element }) {
    return <a {...props} target="_blank" rel="noopener noreferrer" />;
  },
  table({ node: _node, ...props }: ComponentPropsWithoutRef<'table'> & { node?: Element }) {
    return (
      <div className="table-scroll" tabIndex={0}>
        <table {...props} />
      </div>
    );
  },
};

const remarkPlugins = [remarkGfm];

const Block = memo(function Block({ text }: { text: string }) {
  return (
    <ReactMarkdown remarkPlugins={remarkPlugins} components={components}>
      {text}
    </ReactMarkdown>
  );
});

export function Markdown({ text, streaming }: { text: string; streaming: boolean }) {
  const blocks = useMemo(() => splitBlocks(text), [text]);
  return (
    <div className="markdown">
      {blocks.map((block, index) => (
        // Blocks only grow at the end, so the index is a stable identity.
        <Block key={index} text={streaming && index === blocks.length - 1 ? remend(block) : block} />
      ))}
    </div>
  );
}
