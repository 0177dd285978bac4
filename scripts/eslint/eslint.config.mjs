// ESLint's flat config (ES module: .mjs, whatever package.json sits beside it) for the console's JavaScript (scripts/lint-js.sh, `make lint-js`).
//
// The console is one classic script run by the browser (no modules, no build step), so it is
// linted as such, against the browser's globals plus uPlot's, which index.html loads first.
// ESLint's recommended set is on; the rules named below are repeated so that a change to that
// set cannot quietly drop them (two functions of one name in a scope, a name never declared,
// a name never used).
import js from '@eslint/js';
import globals from 'globals';

export default [
  {
    files: ['src/api/console/assets/*.js'],
    ...js.configs.recommended,
  },
  {
    files: ['src/api/console/assets/*.js'],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: 'script',
      globals: {
        ...globals.browser,
        uPlot: 'readonly',
      },
    },
    linterOptions: {
      reportUnusedDisableDirectives: 'error',
    },
    rules: {
      'no-redeclare': 'error',
      'no-undef': 'error',
      'no-unused-vars': ['error', { args: 'after-used', caughtErrors: 'all' }],
      'no-shadow': 'error',
      'no-implicit-globals': 'error',
      eqeqeq: ['error', 'always'],
      strict: ['error', 'global'],
    },
  },
];
