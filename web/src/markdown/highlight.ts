/** Syntax highlighting with a small, explicit set of languages, to keep the bundle lean. */
import type { Root } from 'hast';
import { createLowlight } from 'lowlight';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import diff from 'highlight.js/lib/languages/diff';
import go from 'highlight.js/lib/languages/go';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import markdown from 'highlight.js/lib/languages/markdown';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import shell from 'highlight.js/lib/languages/shell';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

const lowlight = createLowlight({ bash, c, cpp, css, diff, go, java, javascript, json, markdown, python, rust, shell, sql, typescript, xml, yaml });
lowlight.registerAlias({ bash: ['sh', 'zsh', 'console'], javascript: ['js', 'jsx', 'mjs'], typescript: ['ts', 'tsx'], python: ['py'], xml: ['html', 'svg'], yaml: ['yml'], rust: ['rs'], cpp: ['c++', 'hpp', 'cc'] });

/** The highlighted tree, or null for a language we do not know (shown as plain text). */
export function highlight(code: string, language: string | undefined): Root | null {
  if (!language || !lowlight.registered(language)) return null;
  try {
    return lowlight.highlight(language, code);
  } catch {
    return null;
  }
}
