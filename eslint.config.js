// Lint config: typescript-eslint's recommended type-aware rules plus the module boundary rule.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const crossImport = (others, message = 'control-plane and edge-node never import each other; share through proto/.') => ({
  'no-restricted-imports': ['error', {
    patterns: [{ group: others.flatMap((other) => [`**/${other}/**`, `${other}/**`]), message }],
  }],
});

// What the console's browser modules may use without importing (no npm 'globals' dependency for a short list).
const BROWSER_GLOBALS = [
  'window', 'document', 'location', 'history', 'navigator', 'console', 'fetch', 'Headers', 'Request', 'Response',
  'URL', 'URLSearchParams', 'Blob', 'File', 'FileReader', 'FormData', 'AbortController', 'AbortSignal',
  'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'requestAnimationFrame', 'cancelAnimationFrame', 'queueMicrotask',
  'Node', 'Element', 'HTMLElement', 'HTMLInputElement', 'HTMLSelectElement', 'HTMLTextAreaElement', 'HTMLButtonElement',
  'HTMLFormElement', 'HTMLAnchorElement', 'DocumentFragment', 'Event', 'CustomEvent', 'KeyboardEvent', 'MouseEvent',
  'Intl', 'TextEncoder', 'TextDecoder', 'crypto', 'structuredClone', 'alert', 'confirm', 'getComputedStyle',
];

export default tseslint.config(
  // JavaScript is ignored except the console's browser modules, which have no TypeScript twin.
  { ignores: ['node_modules/**', 'dist/**', 'proto/gen/**', '.zenova/**', '.tap/**', 'coverage/**', '**/*.js', '!control-plane/src/console/ui/**/*.js', '**/*.cjs', '**/*.mjs'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true, allowBoolean: true }],
      'no-console': 'off',
    },
  },
  { files: ['control-plane/**/*.ts'], rules: crossImport(['edge-node']) },
  // The console's browser modules (plain ES modules served as they are): no type information, the
  // browser's globals, and nothing of Node's.
  {
    files: ['control-plane/src/console/ui/**/*.js'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      ...tseslint.configs.disableTypeChecked.languageOptions,
      sourceType: 'module',
      globals: Object.fromEntries(BROWSER_GLOBALS.map((name) => [name, 'readonly'])),
    },
    rules: {
      ...tseslint.configs.disableTypeChecked.rules,
      'no-restricted-globals': ['error', 'process', 'require', 'Buffer', '__dirname', 'global'],
    },
  },
  // The node never depends on the host CLI that installs it.
  { files: ['edge-node/**/*.ts'], rules: crossImport(['control-plane', 'installer'], 'edge-node imports neither control-plane nor installer; share through proto/.') },
  // The host CLI runs on node hosts: it may use the node's code, never the control plane's (it talks to it over HTTPS).
  { files: ['installer/**/*.ts'], rules: crossImport(['control-plane'], 'installer never imports control-plane; it talks to the control plane over its HTTPS API.') },
  {
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
      // tap queues top-level t.test() itself; awaiting it is optional.
      '@typescript-eslint/no-floating-promises': ['error', {
        allowForKnownSafeCalls: [{ from: 'package', name: ['test', 'skip', 'todo', 'only'], package: '@tapjs/test' }],
        allowForKnownSafePromises: [{ from: 'package', name: 'PromiseWithSubtest', package: '@tapjs/core' }],
      }],
    },
  },
);
