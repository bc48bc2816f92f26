/**
 * The extension activated in the `vscode` stand-in against the fake daemon: start-up, document sync, the provider's
 * request/response mapping, cancellation, error paths, status bar, commands and settings changes.
 */
import { after, afterEach, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { RequestType0 } from 'vscode-jsonrpc/node';
import { CancellationTokenSource, ConfigurationTarget, Position, Range, commands, harness } from './support/vscode-stub';
import { activateWith, eventually, fakeDaemonBinary, shutdown, statusText, temporaryDirectory } from './support/session';
import { Controller } from '../src/controller';

interface Received {
  method: string;
  params: Record<string, unknown>;
}
const Received = new RequestType0<Received[], void>('fake/received');

let bin: string;
before(() => {
  bin = fakeDaemonBinary();
});
afterEach(shutdown);
after(shutdown);

async function received(controller: Controller, method: string): Promise<Received[]> {
  const all = await controller.client!.request(Received);
  return all.filter((m) => m.method === method);
}

test('starts the daemon with settings as initializationOptions and shows its status', async () => {
  harness.folders = [];
  const controller = await activateWith({ path: bin, model: '/m.gguf', strategy: 'pld', maxTokens: 24, threads: 0 });
  assert.ok(controller.client?.running);
  const [init] = await received(controller, 'initialize');
  assert.deepEqual(init.params.initializationOptions, { model: '/m.gguf', strategy: 'pld', maxTokens: 24 });
  assert.equal(statusText(), '$(sparkle) SmolLM2-135M-Instruct · 42.5 tok/s · ×2.25');
});

test('completions follow the document through edits, with UTF-16 positions', async () => {
  const controller = await activateWith({ path: bin });
  const document = harness.open('/w/emoji.py', 'python', 'a = "😀"\nprint(a)\n');
  // "😀" is two UTF-16 code units: the end of line 0 is character 7.
  let list = await harness.complete(document, new Position(0, 7));
  assert.equal(list?.items.length, 1);
  assert.equal(list?.items[0].insertText, '<0:7|a = "😀>');
  assert.deepEqual(list?.items[0].range, new Range(0, 7, 0, 7));

  document.edit(new Range(0, 5, 0, 7), '😀😀x');
  document.edit(new Range(1, 0, 1, 0), '  ');
  list = await harness.complete(document, new Position(0, 10));
  assert.equal(list?.items[0].insertText, '<0:10|a = "😀😀x>');
  list = await harness.complete(document, new Position(1, 7));
  assert.equal(list?.items[0].insertText, '<1:7|  print>');

  const changes = await received(controller, 'textDocument/didChange');
  assert.equal(changes.length, 2);
  assert.deepEqual(changes[0].params.textDocument, { uri: 'file:///w/emoji.py', version: 2 });
  const inline = await received(controller, 'textDocument/inlineCompletion');
  assert.deepEqual(inline[0].params.context, { triggerKind: 2 });
});

test('an editor of a served document getting the focus tells the daemon where its cursor is', async () => {
  const controller = await activateWith({ path: bin, languages: ['python'] });
  const served = harness.open('/w/warm.py', 'python', 'def f():\n    return 1\n');
  const other = harness.open('/w/notes.txt', 'plaintext', 'x\n');
  harness.focus(other, new Position(0, 1));
  harness.focus(served, new Position(1, 4));
  await eventually(async () => (await received(controller, 'copilotd/warm')).length > 0 || undefined);
  const warm = await received(controller, 'copilotd/warm');
  assert.deepEqual(
    warm.map((m) => m.params),
    [{ textDocument: { uri: 'file:///w/warm.py' }, position: { line: 1, character: 4 } }],
  );
});

test('accepting an item or dismissing it with Escape tells the daemon, by the id the item carries', async () => {
  const controller = await activateWith({ path: bin });
  const document = harness.open('/w/feedback.py', 'python', 'x = 1\n');
  const [item] = (await harness.complete(document, new Position(0, 5)))?.items ?? [];
  assert.equal(item?.command?.command, 'copilotd.suggestionAccepted');
  const [id] = item.command?.arguments ?? [];
  assert.equal(typeof id, 'number');
  // VS Code runs the item's command once it has inserted the item.
  await commands.executeCommand(item.command!.command, ...(item.command!.arguments ?? []));
  await eventually(async () => (await received(controller, 'copilotd/suggestionFeedback')).length === 1 || undefined);
  assert.deepEqual((await received(controller, 'copilotd/suggestionFeedback'))[0].params, { id, kind: 'accepted' });

  // Escape with the next suggestion shown: dismissed, and VS Code's own hide runs.
  let hidden = 0;
  harness.commands.set('editor.action.inlineSuggest.hide', () => (hidden += 1));
  const [next] = (await harness.complete(document, new Position(1, 0)))?.items ?? [];
  await commands.executeCommand('copilotd.dismissSuggestion');
  await eventually(async () => (await received(controller, 'copilotd/suggestionFeedback')).length === 2 || undefined);
  const dismissed = (await received(controller, 'copilotd/suggestionFeedback'))[1].params;
  assert.deepEqual(dismissed, { id: next.command?.arguments?.[0], kind: 'dismissed' });
  assert.equal(hidden, 1);
  // Nothing left to dismiss: Escape only hides.
  await commands.executeCommand('copilotd.dismissSuggestion');
  assert.equal(hidden, 2);
  assert.equal((await received(controller, 'copilotd/suggestionFeedback')).length, 2);
});

test('a suggestion with more lines to come is asked for again where it was, unless the document changed', async () => {
  await activateWith({ path: bin });
  let asked = 0;
  harness.commands.set('editor.action.inlineSuggest.trigger', () => (asked += 1));
  const document = harness.open('/w/more.py', 'python', 'MORE\nx = 1\n');
  await harness.complete(document, new Position(0, 4));
  await eventually(async () => asked === 1 || undefined);
  // A whole suggestion is not asked for again.
  await harness.complete(document, new Position(1, 5));
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(asked, 1);
  // Typed meanwhile: VS Code asks anew by itself, so the extension does not.
  await harness.complete(document, new Position(0, 4));
  document.edit(new Range(1, 0, 1, 0), 'y');
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(asked, 1);
  // Dismissed with Escape: not asked for again.
  await harness.complete(document, new Position(0, 4));
  await harness.commands.get('copilotd.dismissSuggestion')!();
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(asked, 1);
});

test('a suggestion in three answers grows to the whole, though VS Code skips re-asking over an explicit answer', async () => {
  const controller = await activateWith({ path: bin });
  // The stand-in's trigger skips the request when an explicit one answered at the same place and version, as
  // VS Code 1.85 does.
  harness.commands.set('editor.action.inlineSuggest.trigger', () => harness.triggerExplicitly());
  const document = harness.open('/w/pieces.py', 'python', 'PIECES\n');
  const first = await harness.complete(document, new Position(0, 6));
  assert.equal(first?.items[0].insertText, 'piece 1', 'the first line is shown early');
  const whole = await eventually(() => {
    const item = harness.shown?.list?.items[0];
    return item?.insertText === 'piece 1\npiece 2\npiece 3' ? item : undefined;
  }, 2000);
  assert.equal((await received(controller, 'textDocument/inlineCompletion')).length, 3);
  // Escape reports the suggestion shown last.
  await commands.executeCommand('copilotd.dismissSuggestion');
  await eventually(async () => (await received(controller, 'copilotd/suggestionFeedback')).length === 1 || undefined);
  const [dismissed] = await received(controller, 'copilotd/suggestionFeedback');
  assert.deepEqual(dismissed.params, { id: whole.command?.arguments?.[0], kind: 'dismissed' });
});

test('empty and null answers give an empty list; ranges are passed through', async () => {
  await activateWith({ path: bin });
  const document = harness.open('/w/a.py', 'python', 'EMPTY\nNULL\nx = REPLACE\n');
  assert.deepEqual((await harness.complete(document, new Position(0, 5)))?.items, []);
  assert.deepEqual((await harness.complete(document, new Position(1, 4)))?.items, []);
  const list = await harness.complete(document, new Position(2, 11));
  assert.equal(list?.items[0].insertText, 'x = REPLACE!');
  assert.deepEqual(list?.items[0].range, new Range(2, 0, 2, 11));
});

test('a cancelled request is answered at once and forwarded as $/cancelRequest', async () => {
  const controller = await activateWith({ path: bin });
  const document = harness.open('/w/slow.py', 'python', 'SLOW\n');
  const source = new CancellationTokenSource();
  const pending = harness.complete(document, new Position(0, 4), source.token);
  await eventually(async () => ((await received(controller, 'textDocument/inlineCompletion')).length ? true : undefined));
  const started = Date.now();
  source.cancel();
  assert.equal(await pending, undefined);
  assert.ok(Date.now() - started < 500, 'provider waited for the daemon after cancellation');
  // The daemon saw the cancellation (it only answers SLOW requests when cancelled).
  await eventually(async () => ((await received(controller, 'cancelled')).length === 1 ? true : undefined));
  assert.doesNotMatch(harness.log(), /failed/);

  const already = new CancellationTokenSource();
  already.cancel();
  assert.equal(await harness.complete(document, new Position(0, 4), already.token), undefined);
  assert.equal((await received(controller, 'textDocument/inlineCompletion')).length, 1);
});

test('daemon errors are logged, not thrown; unknown documents are not asked about', async () => {
  const controller = await activateWith({ path: bin, languages: ['python'] });
  const document = harness.open('/w/f.py', 'python', 'FAIL\n');
  assert.equal(await harness.complete(document, new Position(0, 4)), undefined);
  assert.match(harness.log(), /inline completion at file:\/\/\/w\/f\.py:1:5 failed: model exploded/);

  const rust = harness.open('/w/f.rs', 'rust', 'fn main() {}\n');
  assert.equal(await harness.complete(rust, new Position(0, 0)), undefined);
  assert.equal((await received(controller, 'textDocument/didOpen')).length, 1, 'the Rust file is not sent');
});

test('closing a document tells the daemon', async () => {
  const controller = await activateWith({ path: bin });
  const document = harness.open('/w/c.py', 'python', 'x\n');
  harness.close(document);
  const closed = await eventually(async () => {
    const m = await received(controller, 'textDocument/didClose');
    return m.length ? m : undefined;
  });
  assert.deepEqual(closed[0].params, { textDocument: { uri: 'file:///w/c.py' } });
  assert.equal(await harness.complete(document, new Position(0, 1)), undefined);
});

test('settings changes reach the daemon; disable and enable stop and start it', async () => {
  const controller = await activateWith({ path: bin });
  harness.configure({ strategy: 'rest', maxTokens: 16 });
  const changes = await eventually(async () => {
    const m = await received(controller, 'workspace/didChangeConfiguration');
    return m.length ? m : undefined;
  });
  const unset = {
    model: null,
    promptLatencyMs: null,
    threads: null,
    languages: null,
    ignore: null,
    temperature: null,
    topP: null,
    seed: null,
  };
  const switches = { fim: null, repoContext: null, earlyLines: null, warm: null };
  assert.deepEqual(changes[0].params, {
    settings: { copilotd: { strategy: 'rest', maxTokens: 16, ...unset, ...switches } },
  });
  // A setting cleared goes back to the daemon's own value: it is sent as null.
  harness.configure({ strategy: '' });
  const cleared = await eventually(async () => {
    const m = await received(controller, 'workspace/didChangeConfiguration');
    return m.length > 1 ? m[1] : undefined;
  });
  assert.deepEqual(cleared.params, { settings: { copilotd: { strategy: null, maxTokens: 16, ...unset, ...switches } } });

  const first = controller.client!;
  await harness.commands.get('copilotd.disable')!();
  await eventually(() => (first.running ? undefined : true));
  assert.equal(controller.client, undefined);
  assert.equal(statusText(), '$(circle-slash) copilotd');

  await harness.commands.get('copilotd.enable')!();
  await eventually(() => controller.client?.running || undefined);
  assert.notEqual(controller.client, first);
  assert.deepEqual(harness.updates.map((u) => u.target), [ConfigurationTarget.Global, ConfigurationTarget.Global]);

  // Set in the workspace's settings, where it overrides the user's: the commands change it there.
  harness.workspaceKeys.add('enable');
  await harness.commands.get('copilotd.disable')!();
  assert.equal(harness.updates[2].target, ConfigurationTarget.Workspace);
});

test('workspace folders added and removed reach the daemon', async () => {
  harness.folders = [];
  const controller = await activateWith({ path: bin });
  harness.changeFolders(['/w/one', '/w/two'], []);
  harness.changeFolders([], ['/w/one']);
  const changes = await eventually(async () => {
    const m = await received(controller, 'workspace/didChangeWorkspaceFolders');
    return m.length > 1 ? m : undefined;
  });
  const one = { uri: 'file:///w/one', name: 'one' };
  assert.deepEqual(changes[0].params, { event: { added: [one, { uri: 'file:///w/two', name: 'two' }], removed: [] } });
  assert.deepEqual(changes[1].params, { event: { added: [], removed: [one] } });
});

test('workspace folders changed while the daemon starts reach it', async () => {
  const [one, two, three] = ['one', 'two', 'three'].map((name) => temporaryDirectory(`copilotd-${name}-`));
  const activating = activateWith({ path: bin }, [one, two]);
  // The daemon is being spawned and initialized with the first two folders.
  harness.changeFolders([three], [one]);
  const controller = await activating;
  const [init] = await received(controller, 'initialize');
  const known = new Set((init.params.workspaceFolders as { uri: string }[]).map((folder) => folder.uri));
  for (const change of await received(controller, 'workspace/didChangeWorkspaceFolders')) {
    const event = change.params.event as { added: { uri: string }[]; removed: { uri: string }[] };
    event.added.forEach((folder) => known.add(folder.uri));
    event.removed.forEach((folder) => known.delete(folder.uri));
  }
  assert.deepEqual([...known].sort(), [`file://${three}`, `file://${two}`].sort());
});

test("a daemon's question shows its actions as buttons and gets the one clicked", async () => {
  const controller = await activateWith({ path: bin });
  const ask = new RequestType0<{ title: string } | null, void>('fake/askDownload');
  harness.answer = 'Download';
  assert.deepEqual(await controller.client!.request(ask), { title: 'Download' });
  const shown = harness.messages.at(-1)!;
  assert.equal(shown.level, 'warning');
  assert.match(shown.text, /not downloaded yet/);
  assert.deepEqual(shown.items, ['Download']);
  harness.answer = undefined;
  assert.equal(await controller.client!.request(ask), null, 'dismissed: no action');
});

test('re-index falls back to advice when the daemon lacks copilotd/reindex', async () => {
  await activateWith({ path: bin });
  await harness.commands.get('copilotd.reindex')!();
  assert.match(harness.messages.at(-1)!.text, /cannot re-index on request/);
});

test('a missing binary gives an error message that names the setting', async () => {
  const controller = await activateWith({ path: '/nonexistent/copilotd' });
  assert.equal(controller.client, undefined);
  const error = harness.messages.find((m) => m.level === 'error');
  assert.match(error!.text, /"\/nonexistent\/copilotd" was not found.*copilotd\.path/);
  assert.equal(statusText(), '$(error) copilotd');
});

test('a daemon that dies during initialize is reported', async () => {
  const controller = await activateWith({ path: fakeDaemonBinary({ FAKE_DAEMON_FAIL_INIT: '1' }) });
  assert.equal(controller.client, undefined);
  assert.match(harness.messages[0].text, /did not initialize/);
});

test('a crash is shown and completions stop until restart', async () => {
  const controller = await activateWith({ path: bin });
  const document = harness.open('/w/a.py', 'python', 'x\n');
  await controller.client!.request(new RequestType0<null, void>('fake/crash')).catch(() => undefined);
  await eventually(() => (controller.client === undefined ? true : undefined));
  assert.match(harness.messages.at(-1)!.text, /stopped unexpectedly \(exit code 7\)/);
  assert.equal(await harness.complete(document, new Position(0, 1)), undefined);

  await harness.commands.get('copilotd.restart')!();
  assert.ok(controller.client?.running);
  const list = await harness.complete(document, new Position(0, 1));
  assert.equal(list?.items[0].insertText, '<0:1|x>');
});
