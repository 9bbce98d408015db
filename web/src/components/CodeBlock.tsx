import { toJsxRuntime } from 'hast-util-to-jsx-runtime';
import { memo, useMemo } from 'react';
import { Fragment, jsx, jsxs } from 'react/jsx-runtime';
import { highlight } from '../markdown/highlight';
import { CopyButton } from './CopyButton';

export const CodeBlock = memo(function CodeBlock({ code, language }: { code: string; language?: string }) {
  const highlighted = useMemo(() => {
    const tree = highlight(code, language);
    return tree ? toJsxRuntime(tree, { Fragment, jsx, jsxs }) : code;
  }, [code, language]);
  return (
    <div className="code-block">
      <div className="code-header">
        <span className="code-language">{language ?? 'text'}</span>
        <CopyButton text={code} label={`Copy ${language ?? ''} code`.replace('  ', ' ')} className="button-ghost small code-copy" />
      </div>
      <pre tabIndex={0} aria-label={`${language ?? 'Code'} block`}>
        <code className={language ? `hljs language-${language}` : 'hljs'}>{highlighted}</code>
      </pre>
    </div>
  );
});
