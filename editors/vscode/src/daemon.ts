/**
 * One `copilotd --stdio` process and the JSON-RPC connection to it: spawning (with a helpful error when the
 * binary is missing), the LSP initialize handshake, the server-to-client requests an LSP client must answer,
 * and an orderly shutdown. Knows nothing of VS Code, so the tests can drive it directly.
 */
import { ChildProcess, ChildProcessWithoutNullStreams, spawn } from 'child_process';
import {
  CancellationToken,
  MessageConnection,
  NotificationType,
  RequestType,
  RequestType0,
  StreamMessageReader,
  StreamMessageWriter,
  createMessageConnection,
} from 'vscode-jsonrpc/node';
import {
  DaemonSettings,
  DidChangeConfigurationNotification,
  DidChangeWorkspaceFoldersNotification,
  settingsChange,
} from './protocol';

/** How the daemon wants document changes: LSP `TextDocumentSyncKind`. */
export const enum SyncKind {
  None = 0,
  Full = 1,
  Incremental = 2,
}

export interface WorkspaceFolder {
  uri: string;
  name: string;
}

/** An action of a `window/showMessageRequest`. */
export interface MessageAction {
  title: string;
}

export interface DaemonOptions {
  /** Binary (a path or a command found on PATH). */
  command: string;
  /** Arguments; `['--stdio']` for the real daemon. */
  args?: string[];
  settings: DaemonSettings;
  workspaceFolders: WorkspaceFolder[];
  /** Receives one line of log text at a time (the daemon's stderr included). */
  log: (line: string) => void;
  /** `window/showMessage` from the daemon: 1 error, 2 warning, 3 info, 4 log. */
  onShowMessage?: (type: number, message: string) => void;
  /**
   * `window/showMessageRequest` from the daemon (e.g. whether to download the default model): resolves to the
   * action chosen, or null. Without it the question is shown as a message and answered with null.
   */
  onShowMessageRequest?: (type: number, message: string, actions: MessageAction[]) => Promise<MessageAction | null>;
  /** `$/progress` values (work-done progress of indexing). */
  onProgress?: (token: string | number, value: ProgressValue) => void;
  /** Called once when the process ends, whether asked to or not. */
  onExit?: (code: number | null, signal: NodeJS.Signals | null) => void;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  clientVersion?: string;
}

export interface ProgressValue {
  kind: 'begin' | 'report' | 'end';
  title?: string;
  message?: string;
  percentage?: number;
}

/** The daemon could not be started; `message` says what the user can do about it. */
export class DaemonStartError extends Error {}

export class DaemonClient {
  private exited = false;
  private readonly exitPromise: Promise<void>;
  syncKind: SyncKind = SyncKind.Incremental;
  /** `capabilities` from the initialize result. */
  capabilities: Record<string, unknown> = {};
  /** The settings and folders as the daemon last heard them (what it is answered when it asks). */
  private settings: DaemonSettings;
  private workspaceFolders: WorkspaceFolder[];

  private constructor(
    private readonly process: ChildProcess,
    private readonly connection: MessageConnection,
    private readonly options: DaemonOptions,
  ) {
    this.settings = options.settings;
    this.workspaceFolders = options.workspaceFolders;
    this.exitPromise = new Promise((resolve) => {
      process.once('exit', (code, signal) => {
        this.exited = true;
        connection.dispose();
        options.log(`copilotd exited (${signal ? `signal ${signal}` : `code ${code}`})`);
        options.onExit?.(code, signal);
        resolve();
      });
    });
  }

  /** Spawns the daemon and completes the initialize handshake. */
  static async start(options: DaemonOptions): Promise<DaemonClient> {
    const child = await spawnChecked(options);
    const connection = createMessageConnection(
      new StreamMessageReader(child.stdout),
      new StreamMessageWriter(child.stdin),
    );
    const client = new DaemonClient(child, connection, options);
    forwardLines(child.stderr, options.log);
    client.registerServerHandlers();
    connection.listen();
    try {
      await client.initialize();
    } catch (err) {
      await client.stop();
      throw new DaemonStartError(`copilotd did not initialize: ${errorMessage(err)}`);
    }
    return client;
  }

  get running(): boolean {
    return !this.exited;
  }

  /** Sends a request; `token` cancellation is forwarded as `$/cancelRequest`. */
  request<P, R>(type: RequestType<P, R, void>, params: P, token?: CancellationToken): Promise<R>;
  request<R>(type: RequestType0<R, void>, token?: CancellationToken): Promise<R>;
  request(type: RequestType<unknown, unknown, void> | RequestType0<unknown, void>, ...args: unknown[]): Promise<unknown> {
    if (this.exited) {
      return Promise.reject(new Error('copilotd is not running'));
    }
    return Promise.race([
      (this.connection.sendRequest as (...a: unknown[]) => Promise<unknown>)(type, ...args),
      this.exitPromise.then(() => {
        throw new Error('copilotd exited before answering');
      }),
    ]);
  }

  /**
   * Gives the daemon new settings (`workspace/didChangeConfiguration`); the ones not set go as `null`, so that the
   * daemon goes back to its config.toml's value.
   */
  changeSettings(settings: DaemonSettings): void {
    this.settings = settings;
    this.notify(DidChangeConfigurationNotification, { settings: { copilotd: settingsChange(settings) } });
  }

  /** Tells the daemon of workspace folders added and removed (`workspace/didChangeWorkspaceFolders`). */
  changeWorkspaceFolders(added: WorkspaceFolder[], removed: WorkspaceFolder[]): void {
    const gone = new Set(removed.map((folder) => folder.uri));
    this.workspaceFolders = [...this.workspaceFolders.filter((folder) => !gone.has(folder.uri)), ...added];
    this.notify(DidChangeWorkspaceFoldersNotification, { event: { added, removed } });
  }

  notify<P>(type: NotificationType<P>, params: P): void {
    if (!this.exited) {
      void this.connection.sendNotification(type, params).catch((err) => {
        this.options.log(`cannot send ${type.method}: ${errorMessage(err)}`);
      });
    }
  }

  /** LSP shutdown + exit; kills the process if it does not go within `graceMs`. */
  async stop(graceMs = 3000): Promise<void> {
    if (this.exited) {
      return;
    }
    const timeout = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());
    try {
      await Promise.race([this.connection.sendRequest('shutdown'), timeout(graceMs)]);
      await this.connection.sendNotification('exit');
    } catch {
      // The connection may already be gone; killing below covers it.
    }
    await Promise.race([this.exitPromise, timeout(graceMs)]);
    if (!this.exited) {
      this.process.kill('SIGKILL');
      await this.exitPromise;
    }
  }

  private async initialize(): Promise<void> {
    const { settings, workspaceFolders } = this.options;
    const result = (await this.request(new RequestType<unknown, { capabilities?: Record<string, unknown> }, void>('initialize'), {
      processId: process.pid,
      clientInfo: { name: 'copilotd-vscode', version: this.options.clientVersion ?? '0' },
      rootUri: workspaceFolders[0]?.uri ?? null,
      workspaceFolders: workspaceFolders.length > 0 ? workspaceFolders : null,
      initializationOptions: settings,
      capabilities: {
        textDocument: {
          synchronization: { dynamicRegistration: false, didSave: false, willSave: false },
          inlineCompletion: { dynamicRegistration: false },
        },
        workspace: { workspaceFolders: true, configuration: true },
        window: { workDoneProgress: true, showMessage: {} },
        general: { positionEncodings: ['utf-16'] },
      },
    })) ?? {};
    this.capabilities = result.capabilities ?? {};
    this.syncKind = parseSyncKind(this.capabilities.textDocumentSync);
    if (!this.capabilities.inlineCompletionProvider) {
      this.options.log('warning: the daemon does not announce inlineCompletionProvider');
    }
    await this.connection.sendNotification('initialized', {});
  }

  /** Requests and notifications the server may send to an LSP client. */
  private registerServerHandlers(): void {
    const { connection, options } = this;
    connection.onRequest('window/workDoneProgress/create', () => null);
    connection.onRequest('client/registerCapability', () => null);
    connection.onRequest('client/unregisterCapability', () => null);
    connection.onRequest('workspace/workspaceFolders', () => this.workspaceFolders);
    connection.onRequest('workspace/configuration', (params: { items?: { section?: string }[] }) =>
      (params.items ?? []).map((item) =>
        item.section === 'copilotd' || item.section === undefined ? this.settings : null,
      ),
    );
    connection.onRequest(
      'window/showMessageRequest',
      async (params: { type: number; message: string; actions?: MessageAction[] | null }) => {
        if (options.onShowMessageRequest) {
          return options.onShowMessageRequest(params.type, params.message, params.actions ?? []);
        }
        options.onShowMessage?.(params.type, params.message);
        return null;
      },
    );
    connection.onNotification('window/showMessage', (params: { type: number; message: string }) => {
      options.log(`[message] ${params.message}`);
      options.onShowMessage?.(params.type, params.message);
    });
    connection.onNotification('window/logMessage', (params: { message: string }) => options.log(params.message));
    connection.onNotification('$/progress', (params: { token: string | number; value: ProgressValue }) =>
      options.onProgress?.(params.token, params.value),
    );
    connection.onNotification('telemetry/event', () => undefined);
    connection.onError(([err]) => options.log(`connection error: ${errorMessage(err)}`));
  }
}

/** Spawns the binary and waits until it really started, turning spawn failures into advice. */
function spawnChecked(options: DaemonOptions): Promise<ChildProcessWithoutNullStreams> {
  const args = options.args ?? ['--stdio'];
  options.log(`starting ${options.command} ${args.join(' ')}`);
  return new Promise((resolve, reject) => {
    const child = spawn(options.command, args, {
      env: options.env ?? process.env,
      cwd: options.cwd,
    });
    child.once('spawn', () => resolve(child));
    child.once('error', (err: NodeJS.ErrnoException) => reject(new DaemonStartError(spawnAdvice(options.command, err))));
  });
}

/** A message that tells the user how to fix a failed spawn. */
export function spawnAdvice(command: string, err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'ENOENT':
      return (
        `The copilotd binary "${command}" was not found. Install it (cargo install --path . in the copilotd ` +
        'repository puts it on your PATH) or set "copilotd.path" to the full path of the binary.'
      );
    case 'EACCES':
      return `"${command}" is not executable. Check "copilotd.path" and the file's permissions.`;
    default:
      return `Cannot start copilotd ("${command}"): ${err.message}`;
  }
}

function parseSyncKind(value: unknown): SyncKind {
  if (typeof value === 'number') {
    return value as SyncKind;
  }
  if (value && typeof value === 'object' && typeof (value as { change?: unknown }).change === 'number') {
    return (value as { change: number }).change as SyncKind;
  }
  return SyncKind.None;
}

function forwardLines(stream: NodeJS.ReadableStream, log: (line: string) => void): void {
  let pending = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    pending += chunk;
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      log(line.replace(/\r$/, ''));
    }
  });
  stream.on('end', () => {
    if (pending) {
      log(pending);
    }
  });
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
