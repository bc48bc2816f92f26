/** The inline-completion provider: one `textDocument/inlineCompletion` request per VS Code request. */
import * as vscode from 'vscode';
import { DaemonClient, errorMessage } from './daemon';
import { toInlineCompletionItems, toInlineCompletionParams } from './mapping';
import { ErrorCodes, InlineCompletionRequest, resultItems, suggestionId } from './protocol';

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

  constructor(
    private readonly session: () => Session | undefined,
    private readonly log: (line: string) => void,
    private readonly onAnswered: () => void = () => undefined,
  ) {}

  /**
   * Returns the daemon's items, or `undefined` when there is nothing to show. Cancellation by VS Code is
   * forwarded (`$/cancelRequest`) and answered at once without waiting for the daemon; errors are logged, never
   * thrown at VS Code, which would only log them less visibly.
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
    let cancelled: vscode.Disposable | undefined;
    const whenCancelled = new Promise<undefined>((resolve) => {
      cancelled = token.onCancellationRequested(() => resolve(undefined));
    });
    try {
      const result = await Promise.race([session.client.request(InlineCompletionRequest, params, token), whenCancelled]);
      if (token.isCancellationRequested || result === undefined) {
        return undefined;
      }
      this.onAnswered();
      const [first] = resultItems(result);
      this.lastSuggestion = first ? suggestionId(first) : undefined;
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
}

/** The daemon dropped a stale request: not an error worth a log line. */
export function isCancellation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === ErrorCodes.RequestCancelled || code === ErrorCodes.ServerCancelled || code === ErrorCodes.ContentModified;
}
