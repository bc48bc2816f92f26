/** The status bar item: daemon state, model, speed and acceptance length from `copilotd/status`. */
import * as vscode from 'vscode';
import { DaemonStatus } from './protocol';

export type DisplayState =
  | { kind: 'disabled' }
  | { kind: 'starting' }
  | { kind: 'error'; message: string }
  /** Background work the daemon reports (`$/progress`): indexing a folder, downloading the model. */
  | { kind: 'working'; title: string; message: string }
  | { kind: 'running'; status: DaemonStatus };

/** Text and tooltip for a state; pure so it can be tested. */
export function describe(state: DisplayState): { text: string; tooltip: string } {
  switch (state.kind) {
    case 'disabled':
      return { text: '$(circle-slash) copilotd', tooltip: 'copilotd is disabled (command "copilotd: Enable")' };
    case 'starting':
      return { text: '$(loading~spin) copilotd', tooltip: 'copilotd is starting' };
    case 'error':
      return { text: '$(error) copilotd', tooltip: state.message };
    case 'working': {
      const title = state.title.replace(/^copilotd: /, '');
      return { text: `$(sync~spin) copilotd: ${title}: ${state.message}`, tooltip: `copilotd is ${title}: ${state.message}` };
    }
    case 'running':
      return describeStatus(state.status);
  }
}

function describeStatus(status: DaemonStatus): { text: string; tooltip: string } {
  if (status.modelError) {
    return { text: '$(error) copilotd: model', tooltip: `The model could not be loaded: ${status.modelError}` };
  }
  if (status.modelState === 'loading' || status.modelState === 'idle') {
    return { text: '$(loading~spin) copilotd: loading model', tooltip: `Loading ${status.model ?? 'the model'}` };
  }
  const parts = [shortModelName(status.model)];
  if (isNumber(status.tokensPerSecond)) {
    parts.push(`${status.tokensPerSecond.toFixed(1)} tok/s`);
  }
  if (isNumber(status.acceptanceLength)) {
    parts.push(`×${status.acceptanceLength.toFixed(2)}`);
  }
  const tooltip = [
    `model: ${status.model ?? 'unknown'}`,
    `device: ${status.device ?? 'unknown'}`,
    `strategy: ${status.strategy ?? 'unknown'}`,
    `index: ${status.indexState ?? 'unknown'}${isNumber(status.indexedFiles) ? ` (${status.indexedFiles} files)` : ''}`,
    `tokens/s: ${isNumber(status.tokensPerSecond) ? status.tokensPerSecond.toFixed(1) : 'n/a'}`,
    `acceptance length: ${isNumber(status.acceptanceLength) ? status.acceptanceLength.toFixed(2) : 'n/a'}`,
    `completions: ${status.completions ?? 0}`,
  ].join('\n');
  return { text: `$(sparkle) ${parts.join(' · ')}`, tooltip };
}

/** "SmolLM2-135M-Instruct.Q4_1.gguf" in a path becomes "SmolLM2-135M-Instruct". */
export function shortModelName(model: string | undefined): string {
  if (!model) {
    return 'copilotd';
  }
  const base = model.split(/[\\/]/).pop() ?? model;
  return base.replace(/\.gguf$/i, '').replace(/\.(Q\d\w*|F16|F32|BF16)$/i, '') || base;
}

function isNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  state: DisplayState = { kind: 'starting' };

  constructor(command: string) {
    this.item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
    this.item.command = command;
    this.item.name = 'copilotd';
    this.show(this.state);
    this.item.show();
  }

  show(state: DisplayState): void {
    this.state = state;
    const { text, tooltip } = describe(state);
    this.item.text = text;
    this.item.tooltip = tooltip;
  }

  dispose(): void {
    this.item.dispose();
  }
}
