/**
 * The inline-completion provider: one `textDocument/inlineCompletion` request per VS Code request, repeated for an
 * explicit one until the suggestion is whole.
 */
import * as vscode from 'vscode';
import { DaemonClient, errorMessage } from './daemon';
import { toInlineCompletionItems, toInlineCompletionParams } from './mapping';
import { ErrorCodes, InlineCompletionRequest, moreLinesFollow, resultItems, suggestionId } from './protocol';

/** How long after an answer whose suggestion has more lines to come the rest is asked for. */
export const MORE_LINES_DELAY_MS = 100;

/** What the provider needs from the running daemon; `undefined` while it is stopped or starting. */
export interface Session {
  client: DaemonClient;
  /** Whether the daemon was told about this document. */
  knows(document: vscode.TextDocument): boolean;
}

export class InlineProvider implements vscode.InlineCompletionItemProvider {
  /**
   * The daemon id of the last item answered, until it is accepted: the suggestion that the person dismisses with
   * Escape. (VS Code 1.85's stable API says neither what is shown nor what is dismissed.)
   */
  lastSuggestion: number | undefined;
  /** The pending request for the rest of a suggestion, if any. */
  private askAgain: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly session: () => Session | undefined,
    private readonly log: (line: string) => void,
    private readonly onAnswered: () => void = () => undefined,
  ) {}

  /**
   * Returns the daemon's items, or `undefined` when there is nothing to show. Cancellation by VS Code is
   * forwarded (`$/cancelRequest`) and answered at once without waiting for the daemon; errors are logged, never
   * thrown at VS Code, which would only log them less visibly.
   *
   * An explicit request (the extension's own re-ask, or the person's) asks the daemon again every
   * {@link MORE_LINES_DELAY_MS} until the suggestion is whole, and only then answers: VS Code does not ask again at
   * the same place and document version while an explicit request's answer is shown, so the rest of a suggestion
   * must come in that answer.
   */
  async provideInlineCompletionItems(
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    token: vscode.CancellationToken,
  ): Promise<vscode.InlineCompletionList | undefined> {
    const session = this.session();
    if (!session || !session.client.running || !session.knows(document) || token.isCancellationRequested) {
      return undefined;
    }
    const params = toInlineCompletionParams(document, position, context);
    const explicit = context.triggerKind === vscode.InlineCompletionTriggerKind.Invoke;
    const version = document.version;
    let cancelled: vscode.Disposable | undefined;
    const whenCancelled = new Promise<undefined>((resolve) => {
      cancelled = token.onCancellationRequested(() => resolve(undefined));
    });
    const ask = () => Promise.race([session.client.request(InlineCompletionRequest, params, token), whenCancelled]);
    try {
      let result = await ask();
      while (explicit && moreLinesFollow(resultItems(result)[0])) {
        await Promise.race([new Promise((resolve) => setTimeout(resolve, MORE_LINES_DELAY_MS)), whenCancelled]);
        if (token.isCancellationRequested || !isStillAt(document, version, position)) {
          break;
        }
        result = await ask();
      }
      if (token.isCancellationRequested || result === undefined) {
        return undefined;
      }
      this.onAnswered();
      const [first] = resultItems(result);
      this.lastSuggestion = first ? suggestionId(first) : undefined;
      if (!explicit && moreLinesFollow(first)) {
        this.askAgainSoon(document, position);
      }
      return new vscode.InlineCompletionList(toInlineCompletionItems(result, position));
    } catch (err) {
      if (!isCancellation(err) && !token.isCancellationRequested) {
        this.log(`inline completion at ${params.textDocument.uri}:${position.line + 1}:${position.character + 1} failed: ${errorMessage(err)}`);
      }
      return undefined;
    } finally {
      cancelled?.dispose();
    }
  }

  /** Forgets asking again for the rest of a suggestion (the person dismissed it). */
  stopAskingAgain(): void {
    clearTimeout(this.askAgain);
    this.askAgain = undefined;
  }

  /**
   * Has VS Code ask for the inline suggestion at `position` again after {@link MORE_LINES_DELAY_MS}, for the
   * lines the daemon has generated since, unless the person typed or moved meanwhile (VS Code asks anew then).
   */
  private askAgainSoon(document: vscode.TextDocument, position: vscode.Position): void {
    const version = document.version;
    clearTimeout(this.askAgain);
    this.askAgain = setTimeout(() => {
      this.askAgain = undefined;
      if (isStillAt(document, version, position)) {
        void vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
      }
    }, MORE_LINES_DELAY_MS);
  }
}

/** Whether the cursor of the active editor is still at `position` of `document`, unedited since `version`. */
function isStillAt(document: vscode.TextDocument, version: number, position: vscode.Position): boolean {
  const editor = vscode.window.activeTextEditor;
  return editor?.document === document && document.version === version && editor.selection.active.isEqual(position);
}

/** The daemon dropped a stale request: not an error worth a log line. */
export function isCancellation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === ErrorCodes.RequestCancelled || code === ErrorCodes.ServerCancelled || code === ErrorCodes.ContentModified;
}
