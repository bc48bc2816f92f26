/**
 * Keeps the daemon's view of open documents equal to VS Code's: didOpen/didChange/didClose for the documents the
 * extension serves. Notifications go out synchronously from VS Code's events, so a change always reaches the
 * daemon before any completion request that follows it (JSON-RPC messages keep their order). When an editor of
 * such a document gets the focus, the daemon hears where its cursor is (`copilotd/warm`), so it can prefill that
 * place's prompt before the person types.
 */
import * as vscode from 'vscode';
import { DaemonClient, SyncKind } from './daemon';
import {
  DidChangeNotification,
  DidCloseNotification,
  DidOpenNotification,
  TextDocumentContentChange,
  WarmNotification,
} from './protocol';

/**
 * Which documents the extension serves: files on disk (not untitled documents or notebook cells, which the daemon
 * could not place in a workspace), optionally only some languages, named in any case as the daemon takes them.
 */
export function documentFilter(languages: string[]): (document: vscode.TextDocument) => boolean {
  const wanted = new Set(languages.map((language) => language.toLowerCase()));
  return (document) =>
    document.uri.scheme === 'file' && (wanted.size === 0 || wanted.has(document.languageId.toLowerCase()));
}

/** The selector the completion provider is registered for: the files the daemon knows ({@link documentFilter}). */
export const DOCUMENT_SELECTOR: vscode.DocumentFilter[] = [{ scheme: 'file' }];

export class DocumentSync implements vscode.Disposable {
  private readonly open = new Set<string>();
  private readonly subscriptions: vscode.Disposable[];

  constructor(
    private readonly client: DaemonClient,
    private readonly accepts: (document: vscode.TextDocument) => boolean,
  ) {
    this.subscriptions = [
      vscode.workspace.onDidOpenTextDocument((d) => this.didOpen(d)),
      vscode.workspace.onDidChangeTextDocument((e) => this.didChange(e)),
      vscode.workspace.onDidCloseTextDocument((d) => this.didClose(d)),
      vscode.window.onDidChangeActiveTextEditor((e) => this.entered(e)),
    ];
    for (const document of vscode.workspace.textDocuments) {
      this.didOpen(document);
    }
    this.entered(vscode.window.activeTextEditor);
  }

  /** True when the daemon knows this document (so completions for it make sense). */
  has(document: vscode.TextDocument): boolean {
    return this.open.has(document.uri.toString());
  }

  dispose(): void {
    for (const s of this.subscriptions) {
      s.dispose();
    }
    this.open.clear();
  }

  private didOpen(document: vscode.TextDocument): void {
    const uri = document.uri.toString();
    if (!this.accepts(document) || this.open.has(uri)) {
      return;
    }
    this.open.add(uri);
    this.client.notify(DidOpenNotification, {
      textDocument: { uri, languageId: document.languageId, version: document.version, text: document.getText() },
    });
  }

  private entered(editor: Pick<vscode.TextEditor, 'document' | 'selection'> | undefined): void {
    if (!editor || !this.has(editor.document)) {
      return;
    }
    const { line, character } = editor.selection.active;
    this.client.notify(WarmNotification, {
      textDocument: { uri: editor.document.uri.toString() },
      position: { line, character },
    });
  }

  private didChange(event: vscode.TextDocumentChangeEvent): void {
    const uri = event.document.uri.toString();
    if (!this.open.has(uri) || event.contentChanges.length === 0) {
      return;
    }
    const contentChanges =
      this.client.syncKind === SyncKind.Full
        ? [{ text: event.document.getText() } as TextDocumentContentChange]
        : event.contentChanges.map(toWireChange);
    this.client.notify(DidChangeNotification, {
      textDocument: { uri, version: event.document.version },
      contentChanges,
    });
  }

  private didClose(document: vscode.TextDocument): void {
    const uri = document.uri.toString();
    if (this.open.delete(uri)) {
      this.client.notify(DidCloseNotification, { textDocument: { uri } });
    }
  }
}

/** VS Code change events already use UTF-16 positions, like LSP; they map field by field. */
export function toWireChange(change: vscode.TextDocumentContentChangeEvent): TextDocumentContentChange {
  return {
    range: {
      start: { line: change.range.start.line, character: change.range.start.character },
      end: { line: change.range.end.line, character: change.range.end.character },
    },
    rangeLength: change.rangeLength,
    text: change.text,
  };
}
