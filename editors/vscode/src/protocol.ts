/**
 * The parts of the LSP wire format that the extension speaks with `copilotd --stdio`.
 *
 * Plain data types and request/notification descriptors only: nothing here imports `vscode`,
 * so the mapping code and the tests can share them.
 */
import { NotificationType, RequestType, RequestType0 } from 'vscode-jsonrpc/node';

/** A position in a document: zero-based line and UTF-16 code-unit offset, as LSP defines it. */
export interface WirePosition {
  line: number;
  character: number;
}

export interface WireRange {
  start: WirePosition;
  end: WirePosition;
}

/** LSP 3.18 `InlineCompletionTriggerKind`. */
export const enum WireTriggerKind {
  Invoked = 1,
  Automatic = 2,
}

export interface InlineCompletionParams {
  textDocument: { uri: string };
  position: WirePosition;
  context: { triggerKind: WireTriggerKind };
}

/** LSP `StringValue`: a snippet in `value`. */
export interface WireStringValue {
  kind: 'snippet';
  value: string;
}

/** LSP `Command`: copilotd's items carry `{ id }` as the one argument, to echo back with feedback. */
export interface WireCommand {
  title: string;
  command: string;
  arguments?: unknown[];
}

export interface WireInlineCompletionItem {
  insertText: string | WireStringValue;
  filterText?: string;
  range?: WireRange;
  command?: WireCommand;
}

/**
 * `copilotd/suggestionFeedback`: what the person did with the suggestion whose item carried `id`. `length`: UTF-16
 * code units of the item's text in the document now (needed for partial acceptances).
 */
export interface SuggestionFeedback {
  id: number;
  kind: 'accepted' | 'acceptedWord' | 'acceptedLine' | 'dismissed';
  length?: number;
}

/** The server may answer with a list, a bare array of items, or null. */
export type InlineCompletionResult =
  | { items: WireInlineCompletionItem[] }
  | WireInlineCompletionItem[]
  | null;

/** Answer of the custom `copilotd/status` request. Every field may be missing on older daemons. */
export interface DaemonStatus {
  model?: string;
  device?: string;
  strategy?: string;
  indexState?: string;
  indexedFiles?: number;
  tokensPerSecond?: number | null;
  acceptanceLength?: number | null;
  completions?: number;
  /** "idle", "loading", "ready" or "error". */
  modelState?: string;
  modelError?: string | null;
}

/** Daemon settings as sent in `initializationOptions` (the ones the person set). */
export interface DaemonSettings {
  model?: string;
  strategy?: string;
  maxTokens?: number;
  /** Most milliseconds of prefill before the prompt is cut to a shorter window; 0: never cut. */
  promptLatencyMs?: number;
  threads?: number;
  languages?: string[];
  ignore?: string[];
  temperature?: number;
  topP?: number;
  seed?: number;
  fim?: boolean;
  repoContext?: boolean;
  earlyLines?: boolean;
  warm?: boolean;
}

export interface TextDocumentItem {
  uri: string;
  languageId: string;
  version: number;
  text: string;
}

export interface TextDocumentContentChange {
  range: WireRange;
  rangeLength?: number;
  text: string;
}

export const InlineCompletionRequest = new RequestType<InlineCompletionParams, InlineCompletionResult, void>(
  'textDocument/inlineCompletion',
);
export const StatusRequest = new RequestType0<DaemonStatus, void>('copilotd/status');
/** Custom request: rebuild the repository datastore of the workspace. */
export const ReindexRequest = new RequestType0<unknown, void>('copilotd/reindex');

export const SuggestionFeedbackNotification = new NotificationType<SuggestionFeedback>('copilotd/suggestionFeedback');
/** `copilotd/warm`: the person is at this place; the daemon may prefill its prompt while the model idles. */
export const WarmNotification = new NotificationType<{ textDocument: { uri: string }; position: WirePosition }>(
  'copilotd/warm',
);

export const DidOpenNotification = new NotificationType<{ textDocument: TextDocumentItem }>('textDocument/didOpen');
export const DidChangeNotification = new NotificationType<{
  textDocument: { uri: string; version: number };
  contentChanges: TextDocumentContentChange[];
}>('textDocument/didChange');
export const DidCloseNotification = new NotificationType<{ textDocument: { uri: string } }>('textDocument/didClose');
/** Every daemon setting, by its name on the wire. */
export const DAEMON_SETTING_NAMES = [
  'model',
  'strategy',
  'maxTokens',
  'promptLatencyMs',
  'threads',
  'languages',
  'ignore',
  'temperature',
  'topP',
  'seed',
  'fim',
  'repoContext',
  'earlyLines',
  'warm',
] as const satisfies readonly (keyof DaemonSettings)[];

/** Every daemon setting, `null` where the person set none: the daemon goes back to its config.toml's value. */
export type DaemonSettingsChange = { [K in keyof DaemonSettings]-?: DaemonSettings[K] | null };

/** `settings` with every daemon setting the person did not set as `null`. */
export function settingsChange(settings: DaemonSettings): DaemonSettingsChange {
  return Object.fromEntries(DAEMON_SETTING_NAMES.map((name) => [name, settings[name] ?? null])) as DaemonSettingsChange;
}

export const DidChangeConfigurationNotification = new NotificationType<{ settings: { copilotd: DaemonSettingsChange } }>(
  'workspace/didChangeConfiguration',
);
export const DidChangeWorkspaceFoldersNotification = new NotificationType<{
  event: { added: { uri: string; name: string }[]; removed: { uri: string; name: string }[] };
}>('workspace/didChangeWorkspaceFolders');

/** JSON-RPC / LSP error codes the extension treats specially. */
export const ErrorCodes = {
  MethodNotFound: -32601,
  RequestCancelled: -32800,
  ServerCancelled: -32802,
  ContentModified: -32801,
} as const;

/** Items of any accepted result shape, never null. */
export function resultItems(result: InlineCompletionResult | undefined): WireInlineCompletionItem[] {
  if (!result) {
    return [];
  }
  return Array.isArray(result) ? result : (result.items ?? []);
}

/** What the daemon puts in an item's command: `arguments: [{ id, more }]`. */
function itemArgument(item: WireInlineCompletionItem): { id?: unknown; more?: unknown } | undefined {
  return item.command?.arguments?.[0] as { id?: unknown; more?: unknown } | undefined;
}

/** The id the daemon put in an item's command, if any. */
export function suggestionId(item: WireInlineCompletionItem): number | undefined {
  const id = itemArgument(item)?.id;
  return typeof id === 'number' ? id : undefined;
}

/**
 * Whether the daemon answered with a suggestion's first lines while it generates the rest
 * (`more: true` in the item's command argument): asked again at the same place, it answers
 * with more of it.
 */
export function moreLinesFollow(item: WireInlineCompletionItem | undefined): boolean {
  return item !== undefined && itemArgument(item)?.more === true;
}
