// Lint config: typescript-eslint's recommended type-aware rules plus the module boundary rule.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const crossImport = (other) => ({
  'no-restricted-imports': ['error', {
    patterns: [{ group: [`**/${other}/**`, `${other}/**`], message: `control-plane and edge-node never import each other; share through proto/.` }],
  }],
});

export default tseslint.config(
  { ignores: ['node_modules/**', 'dist/**', 'proto/gen/**', '.zenova/**', '.tap/**', 'coverage/**', '**/*.js', '**/*.cjs', '**/*.mjs'] },
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
  { files: ['control-plane/**/*.ts'], rules: crossImport('edge-node') },
  { files: ['edge-node/**/*.ts'], rules: crossImport('control-plane') },
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
