/** Shared helpers for tests that activate the extension against a daemon (the fake one or the real one). */
import { mkdtempSync, rmSync, writeFileSync, chmodSync } from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';
import type * as vscodeTypes from 'vscode';
import { activate, deactivate } from '../../src/extension';
import { Controller } from '../../src/controller';
import { Uri, harness } from './vscode-stub';

/** A new directory under the system's temporary one, removed when the test process exits. */
export function temporaryDirectory(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** An executable that runs the fake daemon, so the extension spawns it exactly like the real binary. */
export function fakeDaemonBinary(env: Record<string, string> = {}): string {
  const dir = temporaryDirectory('copilotd-fake-');
  const bin = path.join(dir, 'copilotd');
  const exports = Object.entries(env)
    .map(([k, v]) => `export ${k}='${v}'\n`)
    .join('');
  writeFileSync(
    bin,
    `#!/bin/sh\n${exports}exec '${process.execPath}' '${path.join(__dirname, 'fake-daemon.js')}' "$@"\n`,
  );
  chmodSync(bin, 0o755);
  return bin;
}

/** Activates the extension with `settings` (keys without the `copilotd.` prefix). */
export async function activateWith(settings: Record<string, unknown>, folders: string[] = []): Promise<Controller> {
  harness.reset();
  harness.folders = folders.map((folder, index) => ({ uri: Uri.file(folder), name: path.basename(folder), index }));
  for (const [key, value] of Object.entries(settings)) {
    harness.config.set(key, value);
  }
  const api = await activate({} as vscodeTypes.ExtensionContext);
  return api.controller;
}

export async function shutdown(): Promise<void> {
  await deactivate();
}

/** Polls `check` until it returns a value other than undefined, or fails after `timeoutMs`. */
export async function eventually<T>(check: () => T | undefined | Promise<T | undefined>, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`condition not met within ${timeoutMs} ms`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export function statusText(): string {
  return harness.statusItems[harness.statusItems.length - 1]?.text ?? '';
}
