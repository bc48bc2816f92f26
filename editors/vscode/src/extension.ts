/** Entry points VS Code calls. */
import * as vscode from 'vscode';
import { Controller } from './controller';

let controller: Controller | undefined;

/**
 * Starts the extension; the returned object is the extension's API (used by the tests). VS Code calls
 * `deactivate` on shutdown, which stops the daemon.
 */
export async function activate(context: vscode.ExtensionContext): Promise<{ controller: Controller }> {
  const version = (context.extension?.packageJSON as { version?: string } | undefined)?.version ?? '0';
  controller = new Controller(version);
  await controller.start();
  return { controller };
}

export async function deactivate(): Promise<void> {
  const current = controller;
  controller = undefined;
  await current?.dispose();
}
