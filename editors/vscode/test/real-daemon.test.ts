/**
 * The extension against the real `copilotd --stdio` and model: a Python file from fixtures/ with a function body
 * cut out; the provider's item at the start of the body must equal `copilotd complete --json` there. Also
 * cancellation and error answers from the real daemon.
 *
 * Env: COPILOTD_BIN (the binary; without it the test is skipped, or fails under CI), COPILOTD_MODEL (optional GGUF).
 */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { execFile } from 'child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'fs';
import * as path from 'path';
import { promisify } from 'util';
import { CancellationTokenSource, InlineCompletionItem, Position, Range, harness } from './support/vscode-stub';
import { activateWith, eventually, shutdown, statusText, temporaryDirectory } from './support/session';
import { InlineCompletionRequest, StatusRequest } from '../src/protocol';

const bin = process.env.COPILOTD_BIN;
const model = process.env.COPILOTD_MODEL;
const MAX_TOKENS = 32;
/** A debug build on a busy 2-core machine needs tens of seconds for a cold prompt. */
const SLOW_MS = 300_000;

/** The fixture with the body of `merge` cut out, leaving an indented empty line; returns the body's 0-based row. */
function workspaceWithCutBody(): { dir: string; file: string; text: string; row: number } {
  const fixture = path.join(__dirname, '..', '..', '..', '..', 'fixtures', 'editors', 'inventory.py');
  const lines = readFileSync(fixture, 'utf8').split('\n');
  const row = lines.indexOf('    """A new warehouse holding the stock of both."""') + 1;
  assert.ok(row > 0, 'fixture changed: docstring of merge() not found');
  const text = [...lines.slice(0, row), '    '].join('\n') + '\n';
  const dir = temporaryDirectory('copilotd-vscode-');
  mkdirSync(path.join(dir, '.git'));
  const file = path.join(dir, 'inventory.py');
  writeFileSync(file, text);
  return { dir, file, text, row };
}

async function cliCompletion(dir: string, row: number, column: number): Promise<string> {
  const args = ['complete', '--workspace', dir, '--file', 'inventory.py', '--line', `${row + 1}`, '--column', `${column + 1}`];
  args.push('--max-tokens', `${MAX_TOKENS}`, '--json', ...(model ? ['--model', model] : []));
  const { stdout } = await promisify(execFile)(bin!, args, { timeout: SLOW_MS, maxBuffer: 1 << 24 });
  const last = stdout.trim().split('\n').pop()!;
  return (JSON.parse(last) as { text: string }).text;
}

const skip = !bin && !process.env.CI ? 'set COPILOTD_BIN (and optionally COPILOTD_MODEL) to run against the real daemon' : false;

test('the extension against the real daemon', { skip, timeout: 4 * SLOW_MS }, async (t) => {
  assert.ok(bin, 'COPILOTD_BIN must name the copilotd binary (required under CI)');
  const ws = workspaceWithCutBody();
  const expected = await cliCompletion(ws.dir, ws.row, 4);
  t.diagnostic(`copilotd complete: ${JSON.stringify(expected)}`);
  assert.notEqual(expected, '', 'the daemon should complete the body');

  const controller = await activateWith(
    // promptLatencyMs 0: the whole prompt, as `copilotd complete` reads it (a slow machine would cut it).
    { path: bin, model: model ?? '', maxTokens: MAX_TOKENS, promptLatencyMs: 0, statusInterval: 0, languages: ['python'] },
    [ws.dir],
  );
  t.after(shutdown);
  const client = controller.client;
  assert.ok(client?.running, `daemon did not start: ${harness.log()}`);
  assert.ok(client.capabilities.inlineCompletionProvider, 'inlineCompletionProvider announced');

  await t.test('status reaches the status bar once the model is loaded and the workspace indexed', async () => {
    const status = await eventually(async () => {
      const s = await client.request(StatusRequest);
      return s.modelState === undefined || s.modelState === 'ready' ? s : undefined;
    }, SLOW_MS);
    assert.equal(typeof status.model, 'string');
    // While the workspace is indexed its progress holds the status bar, and indexing may end
    // after the model is ready.
    const text = await eventually(async () => {
      await controller.refreshStatus();
      return statusText().startsWith('$(sync~spin)') ? undefined : statusText();
    }, SLOW_MS);
    assert.match(text, /^\$\(sparkle\) /);
  });

  const document = harness.open(ws.file, 'python', ws.text);
  const cursor = new Position(ws.row, 4);

  /**
   * The item at `at` once it is the whole suggestion: the daemon may answer with its first lines first, each a
   * beginning of the whole, and answers with more of it when asked again (as the provider has VS Code do).
   */
  async function wholeItem(at: Position): Promise<InlineCompletionItem> {
    return eventually(async () => {
      const list = await harness.complete(document, at);
      assert.equal(list?.items.length, 1, harness.log());
      const text = list.items[0].insertText as string;
      assert.ok(expected.startsWith(text), `${JSON.stringify(text)} begins the whole suggestion`);
      return text === expected ? list.items[0] : undefined;
    }, SLOW_MS);
  }

  await t.test('the provider item equals copilotd complete at the body', async () => {
    const item = await wholeItem(cursor);
    assert.equal(item?.insertText, expected);
    assert.deepEqual(item?.range, new Range(cursor, cursor));
  });

  await t.test('a cancelled request returns at once and the daemon goes on serving', async () => {
    document.edit(new Range(ws.row, 4, ws.row, 4), 'merged = ');
    const source = new CancellationTokenSource();
    const pending = harness.complete(document, new Position(ws.row, 13), source.token);
    // Cancelled on the next turn: the daemon's first lines can come within milliseconds of a cached prompt.
    await new Promise((resolve) => setTimeout(resolve, 0));
    const started = Date.now();
    source.cancel();
    assert.equal(await pending, undefined);
    assert.ok(Date.now() - started < 500, 'the provider waited after cancellation');
    assert.doesNotMatch(harness.log(), /inline completion .* failed/);

    document.edit(new Range(ws.row, 4, ws.row, 13), '');
    const item = await wholeItem(cursor);
    assert.equal(item?.insertText, expected, 'same completion after a cancelled one and two edits');
  });

  await t.test('bad requests get errors, not a dead daemon', async () => {
    await assert.rejects(
      client.request(InlineCompletionRequest, {
        textDocument: { uri: 'file:///nonexistent/never-opened.py' },
        position: { line: 0, character: 0 },
        context: { triggerKind: 1 },
      }),
      (err: { code?: number }) => typeof err.code === 'number',
    );
    const far = await client
      .request(InlineCompletionRequest, {
        textDocument: { uri: document.uri.toString() },
        position: { line: 10_000, character: 3 },
        context: { triggerKind: 1 },
      })
      .then(
        (result) => ({ result }),
        (err: { code?: number }) => ({ code: err.code }),
      );
    assert.ok(far, 'a position past the end is answered');
    assert.ok(client.running);
    assert.equal(typeof (await client.request(StatusRequest)).completions, 'number');
  });

  await shutdown();
  assert.equal(client.running, false, 'deactivate stops the daemon');
});
