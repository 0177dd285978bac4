// ESLint's flat config (ES module: .mjs, whatever package.json sits beside it) for the console's
// and the Mini App's JavaScript (scripts/lint-js.sh, `make lint-js`).
//
// Each page's code is classic scripts run by the browser (no modules, no build step), so it is
// linted as such, against the browser's globals: the console's plus uPlot's, which its
// index.html loads first; the Mini App's alone (it reaches Telegram's script through
// `window.Telegram`, which may be missing outside Telegram).
// ESLint's recommended set is on; the rules named below are repeated so that a change to that
// set cannot quietly drop them (two functions of one name in a scope, a name never declared,
// a name never used).
import js from '@eslint/js';
import globals from 'globals';

const PAGES = ['src/api/console/assets/*.js', 'src/api/app_page/*.js'];

export default [
  {
    files: PAGES,
    ...js.configs.recommended,
  },
  {
    files: PAGES,
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: 'script',
      globals: globals.browser,
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
  {
    files: ['src/api/console/assets/*.js'],
    languageOptions: {
      globals: {
        ...globals.browser,
        uPlot: 'readonly',
      },
    },
  },
];
