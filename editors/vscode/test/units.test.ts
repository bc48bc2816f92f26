/** Pure mapping, settings and status-text tests (no daemon). */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import type * as vscodeTypes from 'vscode';
import * as vscode from './support/vscode-stub';
import { ACCEPTED_COMMAND, toInlineCompletionItems, toInlineCompletionParams, toWireTriggerKind } from '../src/mapping';
import { RESTART_SETTINGS, daemonSettings, readSettings } from '../src/settings';
import { describe as describeState, shortModelName } from '../src/status';
import { spawnAdvice } from '../src/daemon';
import { isCancellation } from '../src/provider';
import { documentFilter, toWireChange } from '../src/documents';
import { settingsChange } from '../src/protocol';
import { named } from '../src/controller';

const asVs = <T>(value: unknown): T => value as T;

function config(values: Record<string, unknown>): vscodeTypes.WorkspaceConfiguration {
  return asVs({ get: (key: string, fallback?: unknown) => (key in values ? values[key] : fallback) });
}

test('request params carry the URI, the UTF-16 position and the LSP trigger kind', () => {
  const document = new vscode.TextDocument(vscode.Uri.file('/w/a b.py'), 'python', 'x = "😀"\n');
  const params = toInlineCompletionParams(
    asVs(document),
    asVs(new vscode.Position(0, 7)),
    asVs({ triggerKind: vscode.InlineCompletionTriggerKind.Invoke }),
  );
  assert.deepEqual(params, {
    textDocument: { uri: 'file:///w/a%20b.py' },
    position: { line: 0, character: 7 },
    context: { triggerKind: 1 },
  });
  assert.equal(toWireTriggerKind(asVs(vscode.InlineCompletionTriggerKind.Automatic)), 2);
});

test('items map text and range; missing range means the cursor; empty and null results give no items', () => {
  const at = new vscode.Position(3, 4);
  const [item] = toInlineCompletionItems(
    { items: [{ insertText: 'return x', range: { start: { line: 3, character: 0 }, end: { line: 3, character: 4 } } }] },
    asVs(at),
  );
  assert.equal(item.insertText, 'return x');
  assert.deepEqual(item.range, new vscode.Range(3, 0, 3, 4));

  const [bare] = toInlineCompletionItems([{ insertText: 'pass' }], asVs(at));
  assert.deepEqual(bare.range, new vscode.Range(at, at));

  const [snippet] = toInlineCompletionItems({ items: [{ insertText: { kind: 'snippet', value: 'f(${1:x})' } }] }, asVs(at));
  assert.ok(snippet.insertText instanceof vscode.SnippetString);

  const command = { title: 'accepted', command: 'copilotd.suggestionAccepted', arguments: [{ id: 9 }] };
  const [withId] = toInlineCompletionItems([{ insertText: 'pass', command }], asVs(at));
  assert.deepEqual(withId.command, { title: 'copilotd: suggestion accepted', command: ACCEPTED_COMMAND, arguments: [9] });
  assert.equal(bare.command, undefined);

  assert.deepEqual(toInlineCompletionItems({ items: [] }, asVs(at)), []);
  assert.deepEqual(toInlineCompletionItems(null, asVs(at)), []);
  assert.deepEqual(toInlineCompletionItems({ items: [{ insertText: '' }] }, asVs(at)), []);
});

test('document changes map field by field', () => {
  const change = toWireChange(asVs({ range: new vscode.Range(1, 2, 1, 5), rangeOffset: 9, rangeLength: 3, text: 'ab' }));
  assert.deepEqual(change, {
    range: { start: { line: 1, character: 2 }, end: { line: 1, character: 5 } },
    rangeLength: 3,
    text: 'ab',
  });
});

test('documents are served by scheme and language', () => {
  const py = asVs<vscodeTypes.TextDocument>(new vscode.TextDocument(vscode.Uri.file('/a.py'), 'python', ''));
  const rs = asVs<vscodeTypes.TextDocument>(new vscode.TextDocument(vscode.Uri.file('/a.rs'), 'rust', ''));
  const out = asVs<vscodeTypes.TextDocument>(new vscode.TextDocument(vscode.Uri.parse('output:x'), 'python', ''));
  assert.equal(documentFilter(['python'])(py), true);
  assert.equal(documentFilter(['python'])(rs), false);
  assert.equal(documentFilter([])(rs), true);
  assert.equal(documentFilter([])(out), false);
  assert.equal(documentFilter(['Python'])(py), true, 'language ids in any case, as the daemon takes them');
});

test('a settings change names every daemon setting, null where unset', () => {
  const change = settingsChange({ strategy: 'ar', fim: false });
  assert.equal(change.strategy, 'ar');
  assert.equal(change.fim, false);
  assert.equal(change.model, null);
  assert.equal(change.warm, null);
  assert.equal(change.promptLatencyMs, null);
  assert.equal(Object.keys(change).length, 14);
});

test("daemon messages are shown under copilotd's name once", () => {
  assert.equal(named('copilotd: no model'), 'copilotd: no model');
  assert.equal(named('no model'), 'copilotd: no model');
});

test('daemon settings use the daemon names in camelCase and leave defaults to the daemon', () => {
  assert.deepEqual(daemonSettings(config({})), {});
  assert.deepEqual(
    daemonSettings(
      config({ model: ' /m.gguf ', strategy: 'pld', maxTokens: 32, threads: 2, languages: ['python', 3, ''], ignore: ['*.log'] }),
    ),
    { model: '/m.gguf', strategy: 'pld', maxTokens: 32, threads: 2, languages: ['python'], ignore: ['*.log'] },
  );
  assert.deepEqual(daemonSettings(config({ maxTokens: 0, threads: 1.5, strategy: '' })), {});
  const settings = readSettings(config({ path: '  ' }));
  assert.equal(settings.path, 'copilotd');
  assert.equal(settings.enable, true);
});

test('the prompt latency goes to the daemon when set, 0 (never cut) included', () => {
  assert.deepEqual(daemonSettings(config({ promptLatencyMs: 800 })), { promptLatencyMs: 800 });
  assert.deepEqual(daemonSettings(config({ promptLatencyMs: 60000 })), { promptLatencyMs: 60000 });
  // 0 is not "the daemon's default" here: it means never cut the prompt.
  assert.deepEqual(daemonSettings(config({ promptLatencyMs: 0 })), { promptLatencyMs: 0 });
  // Unset leaves the daemon's own value (config.toml, else 2000 ms).
  assert.deepEqual(daemonSettings(config({})), {});
  assert.deepEqual(daemonSettings(config({ promptLatencyMs: null })), {});
  // Out of range or not a whole number of milliseconds: left out too.
  for (const promptLatencyMs of [-1, 60001, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '800']) {
    assert.deepEqual(daemonSettings(config({ promptLatencyMs })), {}, String(promptLatencyMs));
  }
  // A change is sent with workspace/didChangeConfiguration: the daemon applies it at once.
  assert.ok(!RESTART_SETTINGS.includes('copilotd.promptLatencyMs'));
});

test('sampling settings go to the daemon as set, so that the daemon checks them', () => {
  assert.deepEqual(daemonSettings(config({ temperature: 0.8, topP: 0.95, seed: 7 })), {
    temperature: 0.8,
    topP: 0.95,
    seed: 7,
  });
  // Greedy is a value of its own (it overrides a daemon-side temperature); unset is left out.
  assert.deepEqual(daemonSettings(config({ temperature: 0, topP: null, seed: null })), { temperature: 0 });
  // Out of range: sent all the same, for the daemon's warning (it keeps the previous value).
  assert.deepEqual(daemonSettings(config({ temperature: -1, topP: 2, seed: 1.5 })), {
    temperature: -1,
    topP: 2,
    seed: 1.5,
  });
});

test('switches go to the daemon where set, and are left to it where unset', () => {
  assert.deepEqual(daemonSettings(config({ fim: false, repoContext: true, earlyLines: false, warm: false })), {
    fim: false,
    repoContext: true,
    earlyLines: false,
    warm: false,
  });
  assert.deepEqual(daemonSettings(config({ fim: null, earlyLines: 'no' })), {});
});

test('background work shows what it is: indexing a folder, downloading the model', () => {
  const indexing = describeState({ kind: 'working', title: 'copilotd: indexing w', message: '3/4 files 75%' });
  assert.equal(indexing.text, '$(sync~spin) copilotd: indexing w: 3/4 files 75%');
  const download = describeState({ kind: 'working', title: 'copilotd: downloading the default model', message: 'starting 0%' });
  assert.equal(download.tooltip, 'copilotd is downloading the default model: starting 0%');
});

test('status text shows model, speed and acceptance length; tooltip has the rest', () => {
  const { text, tooltip } = describeState({
    kind: 'running',
    status: {
      model: '/c/SmolLM2-135M-Instruct.Q4_1.gguf',
      device: 'cpu',
      strategy: 'fastcoder',
      indexState: 'ready',
      indexedFiles: 12,
      tokensPerSecond: 41.26,
      acceptanceLength: 2.5,
      completions: 7,
    },
  });
  assert.equal(text, '$(sparkle) SmolLM2-135M-Instruct · 41.3 tok/s · ×2.50');
  assert.match(tooltip, /device: cpu/);
  assert.match(tooltip, /index: ready \(12 files\)/);
  assert.match(tooltip, /completions: 7/);
  assert.equal(describeState({ kind: 'running', status: { tokensPerSecond: null } }).text, '$(sparkle) copilotd');
  assert.equal(shortModelName('qwen2.5-coder-0.5b-q8_0.gguf'), 'qwen2.5-coder-0.5b-q8_0');
  assert.equal(describeState({ kind: 'running', status: { modelState: 'loading' } }).text, '$(loading~spin) copilotd: loading model');
  assert.match(describeState({ kind: 'running', status: { modelState: 'error', modelError: 'no file' } }).tooltip, /no file/);
});

test('spawn failures become advice and cancellations are recognised', () => {
  const enoent = Object.assign(new Error('spawn x ENOENT'), { code: 'ENOENT' });
  assert.match(spawnAdvice('copilotd', enoent), /copilotd\.path/);
  const eacces = Object.assign(new Error('spawn x EACCES'), { code: 'EACCES' });
  assert.match(spawnAdvice('/x', eacces), /not executable/);
  assert.equal(isCancellation({ code: -32800 }), true);
  assert.equal(isCancellation({ code: -32603 }), false);
  assert.equal(isCancellation(null), false);
});
