/** Conversions between VS Code's inline-completion types and the LSP wire format. */
import * as vscode from 'vscode';
import {
  InlineCompletionParams,
  InlineCompletionResult,
  WirePosition,
  WireRange,
  WireTriggerKind,
  resultItems,
  suggestionId,
} from './protocol';

/** The extension's own command that an item runs when VS Code accepts it whole (its argument: the item's id). */
export const ACCEPTED_COMMAND = 'copilotd.suggestionAccepted';

export function toWirePosition(position: vscode.Position): WirePosition {
  return { line: position.line, character: position.character };
}

export function fromWireRange(range: WireRange): vscode.Range {
  return new vscode.Range(range.start.line, range.start.character, range.end.line, range.end.character);
}

/** VS Code counts trigger kinds from 0 (Invoke, Automatic); LSP from 1 (Invoked, Automatic). */
export function toWireTriggerKind(kind: vscode.InlineCompletionTriggerKind): WireTriggerKind {
  return kind === vscode.InlineCompletionTriggerKind.Invoke ? WireTriggerKind.Invoked : WireTriggerKind.Automatic;
}

export function toInlineCompletionParams(
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
): InlineCompletionParams {
  return {
    textDocument: { uri: document.uri.toString() },
    position: toWirePosition(position),
    context: { triggerKind: toWireTriggerKind(context.triggerKind) },
  };
}

/**
 * VS Code items for a daemon answer. Items without text are dropped; an item without a range is inserted at the
 * cursor (an empty range there), because VS Code would otherwise replace the word around the cursor. An item with
 * a daemon id runs {@link ACCEPTED_COMMAND} with it when accepted.
 */
export function toInlineCompletionItems(
  result: InlineCompletionResult | undefined,
  position: vscode.Position,
): vscode.InlineCompletionItem[] {
  const items: vscode.InlineCompletionItem[] = [];
  for (const item of resultItems(result)) {
    const text =
      typeof item.insertText === 'string'
        ? item.insertText
        : item.insertText?.kind === 'snippet'
          ? new vscode.SnippetString(item.insertText.value)
          : undefined;
    if (text === undefined || (typeof text === 'string' ? text : text.value) === '') {
      continue;
    }
    const range = item.range ? fromWireRange(item.range) : new vscode.Range(position, position);
    const completion = new vscode.InlineCompletionItem(text, range);
    if (item.filterText !== undefined) {
      completion.filterText = item.filterText;
    }
    const id = suggestionId(item);
    if (id !== undefined) {
      completion.command = { title: 'copilotd: suggestion accepted', command: ACCEPTED_COMMAND, arguments: [id] };
    }
    items.push(completion);
  }
  return items;
}
