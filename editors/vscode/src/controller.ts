/**
 * Owns the extension's moving parts and their life cycle: the daemon process, document sync, the completion
 * provider registration, the status bar and its polling, and reactions to settings changes.
 */
import * as vscode from 'vscode';
import { DaemonClient, DaemonStartError, MessageAction, ProgressValue, WorkspaceFolder, errorMessage } from './daemon';
import { DOCUMENT_SELECTOR, DocumentSync, documentFilter } from './documents';
import { ACCEPTED_COMMAND } from './mapping';
import {
  ErrorCodes,
  ReindexRequest,
  StatusRequest,
  SuggestionFeedback,
  SuggestionFeedbackNotification,
} from './protocol';
import { InlineProvider, Session } from './provider';
import { ExtensionSettings, RESTART_SETTINGS, readSettings } from './settings';
import { StatusBar } from './status';

export const COMMANDS = {
  enable: 'copilotd.enable',
  disable: 'copilotd.disable',
  showLog: 'copilotd.showLog',
  reindex: 'copilotd.reindex',
  restart: 'copilotd.restart',
  /** Bound to Escape while an inline suggestion is shown: tells the daemon, then hides it. */
  dismissSuggestion: 'copilotd.dismissSuggestion',
} as const;

/** Minimum time between two status refreshes triggered by completions. */
const STATUS_THROTTLE_MS = 1000;

export class Controller implements vscode.Disposable {
  readonly output: vscode.OutputChannel;
  readonly statusBar: StatusBar;
  private settings: ExtensionSettings;
  private session: (Session & { sync: DocumentSync }) | undefined;
  private starting: Promise<void> | undefined;
  private providerRegistration: vscode.Disposable | undefined;
  private provider: InlineProvider | undefined;
  private poller: NodeJS.Timeout | undefined;
  private lastStatusRefresh = 0;
  /** The title of each piece of background work the daemon reports, by its progress token. */
  private readonly work = new Map<string | number, string>();
  private stopping = false;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly version: string) {
    this.output = vscode.window.createOutputChannel('copilotd');
    this.statusBar = new StatusBar(COMMANDS.showLog);
    this.settings = readSettings(vscode.workspace.getConfiguration('copilotd'));
    this.disposables.push(
      this.output,
      this.statusBar,
      vscode.commands.registerCommand(COMMANDS.enable, () => this.setEnabled(true)),
      vscode.commands.registerCommand(COMMANDS.disable, () => this.setEnabled(false)),
      vscode.commands.registerCommand(COMMANDS.showLog, () => this.output.show(true)),
      vscode.commands.registerCommand(COMMANDS.reindex, () => this.reindex()),
      vscode.commands.registerCommand(COMMANDS.restart, () => this.restart()),
      vscode.commands.registerCommand(ACCEPTED_COMMAND, (id: unknown) => this.accepted(id)),
      vscode.commands.registerCommand(COMMANDS.dismissSuggestion, () => this.dismissSuggestion()),
      vscode.workspace.onDidChangeConfiguration((e) => this.onConfigurationChanged(e)),
      vscode.workspace.onDidChangeWorkspaceFolders((e) =>
        this.session?.client.changeWorkspaceFolders(e.added.map(wireFolder), e.removed.map(wireFolder)),
      ),
    );
    this.registerProvider();
  }

  /** The running daemon, if any (tests use it too). */
  get client(): DaemonClient | undefined {
    return this.session?.client;
  }

  log(line: string): void {
    this.output.appendLine(line);
  }

  /** Starts the daemon if enabled; resolves when it is running or failed (failures are shown, not thrown). */
  start(): Promise<void> {
    if (!this.settings.enable) {
      this.statusBar.show({ kind: 'disabled' });
      return Promise.resolve();
    }
    if (this.session) {
      return Promise.resolve();
    }
    this.starting ??= this.launch().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  async stop(): Promise<void> {
    await this.starting;
    const session = this.session;
    this.session = undefined;
    this.work.clear();
    this.stopPolling();
    if (session) {
      this.stopping = true;
      session.sync.dispose();
      await session.client.stop();
      this.stopping = false;
    }
    this.statusBar.show(this.settings.enable ? { kind: 'error', message: 'copilotd is stopped' } : { kind: 'disabled' });
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  /** Asks the daemon for its status and shows it; returns what it got. */
  async refreshStatus(): Promise<void> {
    const client = this.session?.client;
    if (!client) {
      return;
    }
    this.lastStatusRefresh = Date.now();
    try {
      const status = await client.request(StatusRequest);
      if (this.session?.client === client && this.statusBar.state.kind !== 'working') {
        this.statusBar.show({ kind: 'running', status: status ?? {} });
      }
    } catch (err) {
      this.log(`copilotd/status failed: ${errorMessage(err)}`);
    }
  }

  async dispose(): Promise<void> {
    await this.stop();
    this.providerRegistration?.dispose();
    for (const d of this.disposables) {
      d.dispose();
    }
  }

  private async launch(): Promise<void> {
    this.statusBar.show({ kind: 'starting' });
    const settings = this.settings;
    const folders = (vscode.workspace.workspaceFolders ?? []).map(wireFolder);
    let client: DaemonClient;
    try {
      client = await DaemonClient.start({
        command: settings.path,
        settings: settings.daemon,
        workspaceFolders: folders,
        cwd: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath,
        clientVersion: this.version,
        log: (line) => this.log(line),
        onShowMessage: (type, message) => this.showDaemonMessage(type, message),
        onShowMessageRequest: (type, message, actions) => this.askForDaemon(type, message, actions),
        onProgress: (token, value) => this.onProgress(token, value),
        onExit: (code, signal) => this.onExit(client, code, signal),
      });
    } catch (err) {
      const message = err instanceof DaemonStartError ? err.message : `Cannot start copilotd: ${errorMessage(err)}`;
      this.log(message);
      this.statusBar.show({ kind: 'error', message });
      void this.offerLog(message);
      return;
    }
    const sync = new DocumentSync(client, documentFilter(settings.languages));
    this.session = { client, sync, knows: (d) => sync.has(d) };
    // Settings and folders changed while the daemon started were not sent: they are now.
    if (JSON.stringify(this.settings.daemon) !== JSON.stringify(settings.daemon)) {
      client.changeSettings(this.settings.daemon);
    }
    const { added, removed } = foldersChangedSince(folders);
    if (added.length > 0 || removed.length > 0) {
      client.changeWorkspaceFolders(added, removed);
    }
    this.statusBar.show({ kind: 'running', status: {} });
    this.startPolling();
    await this.refreshStatus();
  }

  private registerProvider(): void {
    const provider = new InlineProvider(
      () => this.session,
      (line) => this.log(line),
      () => {
        if (Date.now() - this.lastStatusRefresh > STATUS_THROTTLE_MS) {
          void this.refreshStatus();
        }
      },
    );
    this.provider = provider;
    this.providerRegistration = vscode.languages.registerInlineCompletionItemProvider(
      DOCUMENT_SELECTOR,
      provider,
    );
  }

  /** Tells the daemon what the person did with a suggestion (`copilotd/suggestionFeedback`). */
  private sendFeedback(feedback: SuggestionFeedback): void {
    const client = this.session?.client;
    if (client?.running) {
      client.notify(SuggestionFeedbackNotification, feedback);
    }
  }

  /** An item was accepted whole (VS Code ran its command). */
  private accepted(id: unknown): void {
    if (typeof id !== 'number') {
      return;
    }
    if (this.provider?.lastSuggestion === id) {
      this.provider.lastSuggestion = undefined;
    }
    this.sendFeedback({ id, kind: 'accepted' });
  }

  /** Escape on a shown suggestion: the daemon hears it was dismissed, then VS Code hides it as usual. */
  private async dismissSuggestion(): Promise<void> {
    this.provider?.stopAskingAgain();
    const id = this.provider?.lastSuggestion;
    if (id !== undefined && this.provider) {
      this.provider.lastSuggestion = undefined;
      this.sendFeedback({ id, kind: 'dismissed' });
    }
    await vscode.commands.executeCommand('editor.action.inlineSuggest.hide');
  }

  private async onConfigurationChanged(event: vscode.ConfigurationChangeEvent): Promise<void> {
    if (!event.affectsConfiguration('copilotd')) {
      return;
    }
    const before = this.settings;
    this.settings = readSettings(vscode.workspace.getConfiguration('copilotd'));
    if (!this.settings.enable) {
      await this.stop();
      return;
    }
    const languagesChanged = before.languages.join('\n') !== this.settings.languages.join('\n');
    if (!before.enable || languagesChanged || RESTART_SETTINGS.some((s) => event.affectsConfiguration(s))) {
      await this.restart();
      return;
    }
    if (before.statusInterval !== this.settings.statusInterval) {
      this.stopPolling();
      this.startPolling();
    }
    this.session?.client.changeSettings(this.settings.daemon);
  }

  /** Sets `copilotd.enable` where it takes effect: in the workspace (folder) settings if they set it, else the user's. */
  private async setEnabled(enable: boolean): Promise<void> {
    const config = vscode.workspace.getConfiguration('copilotd');
    const set = config.inspect<boolean>('enable');
    const target =
      set?.workspaceFolderValue !== undefined
        ? vscode.ConfigurationTarget.WorkspaceFolder
        : set?.workspaceValue !== undefined
          ? vscode.ConfigurationTarget.Workspace
          : vscode.ConfigurationTarget.Global;
    await config.update('enable', enable, target);
  }

  /** Sends the custom `copilotd/reindex` request. */
  private async reindex(): Promise<void> {
    const client = this.session?.client;
    if (!client) {
      void vscode.window.showWarningMessage('copilotd is not running.');
      return;
    }
    try {
      await client.request(ReindexRequest);
      void vscode.window.showInformationMessage('copilotd: re-indexing the workspace.');
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      const message =
        code === ErrorCodes.MethodNotFound
          ? 'This copilotd version cannot re-index on request; run "copilotd index" in the workspace instead.'
          : `copilotd: re-indexing failed: ${errorMessage(err)}`;
      this.log(message);
      void vscode.window.showErrorMessage(message);
    }
  }

  /** Shows the daemon's background work in the status bar (the latest reported), until all of it has ended. */
  private onProgress(token: string | number, value: ProgressValue): void {
    if (value.kind === 'begin') {
      this.work.set(token, value.title ?? 'working');
    } else if (value.kind === 'end') {
      this.work.delete(token);
      if (this.work.size === 0) {
        this.statusBar.show({ kind: 'running', status: {} });
        void this.refreshStatus();
      }
      return;
    }
    const percentage = typeof value.percentage === 'number' ? ` ${Math.round(value.percentage)}%` : '';
    const title = this.work.get(token) ?? 'working';
    this.statusBar.show({ kind: 'working', title, message: `${value.message ?? ''}${percentage}`.trim() });
  }

  private onExit(client: DaemonClient, code: number | null, signal: NodeJS.Signals | null): void {
    if (!this.session || this.session.client !== client) {
      return;
    }
    this.session.sync.dispose();
    this.session = undefined;
    this.work.clear();
    this.stopPolling();
    if (this.stopping) {
      return;
    }
    const message = `copilotd stopped unexpectedly (${signal ? `signal ${signal}` : `exit code ${code}`}).`;
    this.statusBar.show({ kind: 'error', message });
    void vscode.window.showErrorMessage(message, 'Restart', 'Show Log').then((choice) => {
      if (choice === 'Restart') {
        void this.restart();
      } else if (choice === 'Show Log') {
        this.output.show(true);
      }
    });
  }

  private showDaemonMessage(type: number, message: string): void {
    const text = named(message);
    if (type === 1) {
      void vscode.window.showErrorMessage(text);
    } else if (type === 2) {
      void vscode.window.showWarningMessage(text);
    } else if (type === 3) {
      void vscode.window.showInformationMessage(text);
    }
  }

  /** A question of the daemon (e.g. whether to download the default model), its actions as buttons. */
  private async askForDaemon(type: number, message: string, actions: MessageAction[]): Promise<MessageAction | null> {
    const text = named(message);
    const titles = actions.map((action) => action.title);
    const show =
      type === 1
        ? vscode.window.showErrorMessage
        : type === 2
          ? vscode.window.showWarningMessage
          : vscode.window.showInformationMessage;
    const choice = await show(text, ...titles);
    return actions.find((action) => action.title === choice) ?? null;
  }

  private async offerLog(message: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(message, 'Open Settings', 'Show Log');
    if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'copilotd.path');
    } else if (choice === 'Show Log') {
      this.output.show(true);
    }
  }

  private startPolling(): void {
    if (this.settings.statusInterval > 0 && !this.poller) {
      this.poller = setInterval(() => void this.refreshStatus(), this.settings.statusInterval * 1000);
      this.poller.unref();
    }
  }

  private stopPolling(): void {
    if (this.poller) {
      clearInterval(this.poller);
      this.poller = undefined;
    }
  }
}

/** A workspace folder as the daemon takes it. */
function wireFolder(folder: vscode.WorkspaceFolder): WorkspaceFolder {
  return { uri: folder.uri.toString(), name: folder.name };
}

/** The window's folders added and removed since it had `before`. */
function foldersChangedSince(before: WorkspaceFolder[]): { added: WorkspaceFolder[]; removed: WorkspaceFolder[] } {
  const now = (vscode.workspace.workspaceFolders ?? []).map(wireFolder);
  const uris = (folders: WorkspaceFolder[]) => new Set(folders.map((folder) => folder.uri));
  const [was, is] = [uris(before), uris(now)];
  return { added: now.filter((folder) => !was.has(folder.uri)), removed: before.filter((folder) => !is.has(folder.uri)) };
}

/** A daemon message as shown: beginning with "copilotd", which the daemon's own messages mostly do already. */
export function named(message: string): string {
  return message.startsWith('copilotd') ? message : `copilotd: ${message}`;
}
