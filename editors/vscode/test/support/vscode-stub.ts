/**
 * A stand-in for the `vscode` module with the API surface the extension uses, plus a `harness` the tests use to
 * act as the editor: open and edit documents, change settings, read the status bar and shown messages.
 */
import { pathToFileURL, fileURLToPath } from 'url';

export class Disposable {
  constructor(private readonly onDispose: () => void) {}
  dispose(): void {
    this.onDispose();
  }
}

type Listener<T> = (value: T) => unknown;

export class EventEmitter<T> {
  private listeners = new Set<Listener<T>>();
  readonly event = (listener: Listener<T>): Disposable => {
    this.listeners.add(listener);
    return new Disposable(() => this.listeners.delete(listener));
  };
  fire(value: T): void {
    for (const listener of [...this.listeners]) {
      listener(value);
    }
  }
  get size(): number {
    return this.listeners.size;
  }
  dispose(): void {
    this.listeners.clear();
  }
}

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
  isEqual(other: Position): boolean {
    return this.line === other.line && this.character === other.character;
  }
}

export class Range {
  readonly start: Position;
  readonly end: Position;
  constructor(a: Position | number, b: Position | number, c?: number, d?: number) {
    if (typeof a === 'number' && typeof b === 'number') {
      this.start = new Position(a, b);
      this.end = new Position(c ?? a, d ?? b);
    } else {
      this.start = a as Position;
      this.end = b as Position;
    }
  }
}

export class SnippetString {
  constructor(readonly value: string) {}
}

export class InlineCompletionItem {
  filterText?: string;
  command?: { title: string; command: string; arguments?: unknown[] };
  constructor(
    readonly insertText: string | SnippetString,
    readonly range?: Range,
  ) {}
}

export class InlineCompletionList {
  constructor(readonly items: InlineCompletionItem[]) {}
}

export enum InlineCompletionTriggerKind {
  Invoke = 0,
  Automatic = 1,
}

export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}

export enum ConfigurationTarget {
  Global = 1,
  Workspace = 2,
  WorkspaceFolder = 3,
}

export class CancellationTokenSource {
  private readonly emitter = new EventEmitter<void>();
  readonly token = {
    isCancellationRequested: false,
    onCancellationRequested: this.emitter.event,
  };
  cancel(): void {
    if (!this.token.isCancellationRequested) {
      this.token.isCancellationRequested = true;
      this.emitter.fire();
    }
  }
  dispose(): void {
    this.emitter.dispose();
  }
}

export class Uri {
  private constructor(
    readonly scheme: string,
    readonly fsPath: string,
    private readonly text: string,
  ) {}
  static file(path: string): Uri {
    return new Uri('file', path, pathToFileURL(path).href);
  }
  static parse(text: string): Uri {
    const scheme = text.slice(0, text.indexOf(':'));
    return new Uri(scheme, scheme === 'file' ? fileURLToPath(text) : '', text);
  }
  toString(): string {
    return this.text;
  }
}

/** A text document whose edits fire `onDidChangeTextDocument` the way VS Code does. */
export class TextDocument {
  version = 1;
  constructor(
    readonly uri: Uri,
    readonly languageId: string,
    private text: string,
  ) {}
  getText(): string {
    return this.text;
  }
  /** Offset (UTF-16 code units, like VS Code) of a position. */
  offsetAt(position: Position): number {
    const lines = this.text.split('\n');
    let offset = 0;
    for (let i = 0; i < position.line; i++) {
      offset += lines[i].length + 1;
    }
    return offset + position.character;
  }
  positionAt(offset: number): Position {
    const before = this.text.slice(0, offset).split('\n');
    return new Position(before.length - 1, before[before.length - 1].length);
  }
  /** Replaces `range` with `text` and tells the listeners. */
  edit(range: Range, text: string): void {
    const start = this.offsetAt(range.start);
    const end = this.offsetAt(range.end);
    this.text = this.text.slice(0, start) + text + this.text.slice(end);
    this.version += 1;
    harness.changed.fire({
      document: this,
      reason: undefined,
      contentChanges: [{ range, rangeOffset: start, rangeLength: end - start, text }],
    });
  }
}

class StatusBarItem {
  text = '';
  tooltip: string | undefined;
  command: string | undefined;
  name: string | undefined;
  visible = false;
  show(): void {
    this.visible = true;
  }
  hide(): void {
    this.visible = false;
  }
  dispose(): void {
    this.visible = false;
  }
}

class OutputChannel {
  readonly lines: string[] = [];
  constructor(readonly name: string) {}
  appendLine(line: string): void {
    this.lines.push(line);
  }
  append(text: string): void {
    this.lines.push(text);
  }
  show(): void {
    harness.outputShown = true;
  }
  dispose(): void {}
}

type ProviderLike = {
  provideInlineCompletionItems: (
    document: TextDocument,
    position: Position,
    context: { triggerKind: InlineCompletionTriggerKind; selectedCompletionInfo: undefined },
    token: CancellationTokenSource['token'],
  ) => Promise<InlineCompletionList | undefined>;
};

interface WorkspaceFolderLike {
  uri: Uri;
  name: string;
  index: number;
}

/** The editor side of the stand-in, for tests. */
export const harness = {
  config: new Map<string, unknown>(),
  /** Settings set in the workspace's settings rather than the user's. */
  workspaceKeys: new Set<string>(),
  /** Every `update` of a setting, with the settings file it went to. */
  updates: [] as { key: string; target: ConfigurationTarget | undefined }[],
  documents: [] as TextDocument[],
  folders: [] as WorkspaceFolderLike[],
  opened: new EventEmitter<TextDocument>(),
  changed: new EventEmitter<{ document: TextDocument; contentChanges: unknown[]; reason: undefined }>(),
  closed: new EventEmitter<TextDocument>(),
  configChanged: new EventEmitter<{ affectsConfiguration: (section: string) => boolean }>(),
  foldersChanged: new EventEmitter<{ added: WorkspaceFolderLike[]; removed: WorkspaceFolderLike[] }>(),
  activeEditorChanged: new EventEmitter<{ document: TextDocument; selection: { active: Position } } | undefined>(),
  providers: [] as { selector: unknown; provider: ProviderLike }[],
  commands: new Map<string, (...args: unknown[]) => unknown>(),
  messages: [] as { level: 'error' | 'warning' | 'info'; text: string; items: string[] }[],
  /** The button the person clicks on the next message that has buttons. */
  answer: undefined as string | undefined,
  statusItems: [] as StatusBarItem[],
  outputs: [] as OutputChannel[],
  outputShown: false,
  /** The editor with the focus: where the last completion was asked for. */
  activeEditor: undefined as { document: TextDocument; selection: { active: Position } } | undefined,
  /** The last answer of the provider that was not cancelled nor outdated, with the request it answered. */
  shown: undefined as
    | {
        document: TextDocument;
        position: Position;
        version: number;
        triggerKind: InlineCompletionTriggerKind;
        list?: InlineCompletionList;
      }
    | undefined,

  /** Resets all state between tests. */
  reset(): void {
    this.config.clear();
    this.workspaceKeys.clear();
    this.updates = [];
    this.documents = [];
    this.folders = [];
    this.providers = [];
    this.commands.clear();
    this.messages = [];
    this.answer = undefined;
    this.statusItems = [];
    this.outputs = [];
    this.outputShown = false;
    this.activeEditor = undefined;
    this.shown = undefined;
    const events = [this.opened, this.changed, this.closed, this.configChanged, this.foldersChanged];
    for (const e of [...events, this.activeEditorChanged]) {
      e.dispose();
    }
  },
  open(path: string, languageId: string, text: string): TextDocument {
    const document = new TextDocument(Uri.file(path), languageId, text);
    this.documents.push(document);
    this.opened.fire(document);
    return document;
  },
  /** Gives `document` the focus with the cursor at `position`, as switching to its editor does. */
  focus(document: TextDocument, position: Position): void {
    this.activeEditor = { document, selection: { active: position } };
    this.activeEditorChanged.fire(this.activeEditor);
  },
  close(document: TextDocument): void {
    this.documents = this.documents.filter((d) => d !== document);
    this.closed.fire(document);
  },
  /** Adds the folders at `added` paths and removes those at `removed`, as a multi-root window does. */
  changeFolders(added: string[], removed: string[]): void {
    const gone = this.folders.filter((folder) => removed.includes(folder.uri.fsPath));
    const fresh = added.map((path, i) => ({ uri: Uri.file(path), name: path.split('/').pop() ?? path, index: i }));
    this.folders = [...this.folders.filter((folder) => !gone.includes(folder)), ...fresh];
    this.foldersChanged.fire({ added: fresh, removed: gone });
  },
  /** Sets `copilotd.<key>` settings and fires the change event. */
  configure(values: Record<string, unknown>): void {
    for (const [key, value] of Object.entries(values)) {
      this.config.set(key, value);
    }
    const keys = Object.keys(values).map((k) => `copilotd.${k}`);
    this.configChanged.fire({
      affectsConfiguration: (section: string) => keys.some((k) => k === section || k.startsWith(`${section}.`)),
    });
  },
  /** Calls the registered inline-completion provider like VS Code does; its answer is `shown` unless outdated. */
  async complete(
    document: TextDocument,
    position: Position,
    token = new CancellationTokenSource().token,
    triggerKind = InlineCompletionTriggerKind.Automatic,
  ): Promise<InlineCompletionList | undefined> {
    const provider = this.providers[this.providers.length - 1];
    if (!provider) {
      throw new Error('no inline completion provider registered');
    }
    this.activeEditor = { document, selection: { active: position } };
    const version = document.version;
    const list = await provider.provider.provideInlineCompletionItems(
      document,
      position,
      { triggerKind, selectedCompletionInfo: undefined },
      token,
    );
    if (!token.isCancellationRequested && document.version === version) {
      this.shown = { document, position, version, triggerKind, list };
    }
    return list;
  },
  /**
   * `editor.action.inlineSuggest.trigger` as VS Code 1.85 runs it: an explicit request at the cursor, skipped when
   * the answer shown came from a request that satisfies it (same place and document version, and itself explicit).
   */
  async triggerExplicitly(): Promise<void> {
    const editor = this.activeEditor;
    if (!editor) {
      return;
    }
    const { document, selection } = editor;
    const shown = this.shown;
    const satisfied =
      shown?.document === document &&
      shown.version === document.version &&
      shown.position.isEqual(selection.active) &&
      shown.triggerKind === InlineCompletionTriggerKind.Invoke;
    if (!satisfied) {
      await this.complete(document, selection.active, undefined, InlineCompletionTriggerKind.Invoke);
    }
  },
  log(): string {
    return this.outputs.map((o) => o.lines.join('\n')).join('\n');
  },
};

export const workspace = {
  get textDocuments(): TextDocument[] {
    return harness.documents;
  },
  get workspaceFolders() {
    return harness.folders.length > 0 ? harness.folders : undefined;
  },
  onDidOpenTextDocument: (l: Listener<TextDocument>) => harness.opened.event(l),
  onDidChangeTextDocument: (l: Listener<unknown>) => harness.changed.event(l),
  onDidCloseTextDocument: (l: Listener<TextDocument>) => harness.closed.event(l),
  onDidChangeConfiguration: (l: Listener<unknown>) => harness.configChanged.event(l),
  onDidChangeWorkspaceFolders: (l: Listener<unknown>) => harness.foldersChanged.event(l),
  getConfiguration(section: string) {
    return {
      get<T>(key: string, defaultValue?: T): T | undefined {
        const full = `${section}.${key}`.replace(/^copilotd\./, '');
        return harness.config.has(full) ? (harness.config.get(full) as T) : defaultValue;
      },
      /** The value as the person set it: in the workspace's settings for the keys of `harness.workspaceKeys`. */
      inspect<T>(key: string): { globalValue?: T; workspaceValue?: T } {
        const value = harness.config.get(key) as T | undefined;
        return harness.workspaceKeys.has(key) ? { workspaceValue: value } : { globalValue: value };
      },
      async update(key: string, value: unknown, target?: ConfigurationTarget): Promise<void> {
        harness.updates.push({ key, target });
        harness.configure({ [key]: value });
      },
    };
  },
};

function message(level: 'error' | 'warning' | 'info') {
  return (text: string, ...items: string[]): Promise<string | undefined> => {
    harness.messages.push({ level, text, items });
    return Promise.resolve(items.length > 0 ? harness.answer : undefined);
  };
}

export const window = {
  createOutputChannel(name: string): OutputChannel {
    const channel = new OutputChannel(name);
    harness.outputs.push(channel);
    return channel;
  },
  createStatusBarItem(): StatusBarItem {
    const item = new StatusBarItem();
    harness.statusItems.push(item);
    return item;
  },
  get activeTextEditor() {
    return harness.activeEditor;
  },
  onDidChangeActiveTextEditor: (l: Listener<unknown>) => harness.activeEditorChanged.event(l),
  showErrorMessage: message('error'),
  showWarningMessage: message('warning'),
  showInformationMessage: message('info'),
};

export const commands = {
  registerCommand(name: string, callback: (...args: unknown[]) => unknown): Disposable {
    harness.commands.set(name, callback);
    return new Disposable(() => harness.commands.delete(name));
  },
  async executeCommand(name: string, ...args: unknown[]): Promise<unknown> {
    return harness.commands.get(name)?.(...args);
  },
};

export const languages = {
  registerInlineCompletionItemProvider(selector: unknown, provider: ProviderLike): Disposable {
    const entry = { selector, provider };
    harness.providers.push(entry);
    return new Disposable(() => {
      harness.providers = harness.providers.filter((p) => p !== entry);
    });
  },
};
