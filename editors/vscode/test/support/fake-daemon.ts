/**
 * A small stand-in for `copilotd --stdio` that speaks the same protocol, for tests of the extension's paths that
 * the real daemon cannot be made to take on demand (slow answers, failures, crashes).
 *
 * It keeps the documents it is sent (applying incremental changes by UTF-16 offsets) and answers an inline
 * completion by describing what it sees: `<line:character|text before the cursor>`. Words in the text before
 * the cursor select other behaviour: SLOW (answer only when cancelled, with RequestCancelled), FAIL (internal
 * error), EMPTY (no items), NULL (null result), REPLACE (an item whose range starts at the line start), MORE (an
 * item with more lines to come), PIECES (a suggestion of three lines in three answers: one line more each time it is
 * asked at the same place of the same text, as early lines do).
 */
import {
  ResponseError,
  StreamMessageReader,
  StreamMessageWriter,
  createMessageConnection,
} from 'vscode-jsonrpc/node';

interface Pos {
  line: number;
  character: number;
}

const connection = createMessageConnection(new StreamMessageReader(process.stdin), new StreamMessageWriter(process.stdout));
const documents = new Map<string, string>();
const received: { method: string; params: unknown }[] = [];
let completions = 0;
/** Answers given so far to PIECES requests, by place and text. */
const pieces = new Map<string, number>();

function offsetAt(text: string, pos: Pos): number {
  const lines = text.split('\n');
  let offset = 0;
  for (let i = 0; i < pos.line; i++) {
    offset += lines[i].length + 1;
  }
  return offset + pos.character;
}

connection.onRequest('initialize', (params: { initializationOptions?: unknown }) => {
  received.push({ method: 'initialize', params });
  if (process.env.FAKE_DAEMON_FAIL_INIT) {
    process.exit(3);
  }
  return {
    capabilities: {
      textDocumentSync: { openClose: true, change: 2 },
      inlineCompletionProvider: true,
      workspace: { workspaceFolders: { supported: true, changeNotifications: true } },
    },
    serverInfo: { name: 'fake-copilotd' },
  };
});

const recorded = ['initialized', 'workspace/didChangeConfiguration', 'workspace/didChangeWorkspaceFolders', 'textDocument/didClose'];
for (const method of recorded) {
  connection.onNotification(method, (params: unknown) => {
    received.push({ method, params });
    if (method === 'textDocument/didClose') {
      documents.delete((params as { textDocument: { uri: string } }).textDocument.uri);
    }
  });
}

connection.onNotification('textDocument/didOpen', (params: { textDocument: { uri: string; text: string } }) => {
  received.push({ method: 'textDocument/didOpen', params });
  documents.set(params.textDocument.uri, params.textDocument.text);
});

connection.onNotification(
  'textDocument/didChange',
  (params: { textDocument: { uri: string }; contentChanges: { range?: { start: Pos; end: Pos }; text: string }[] }) => {
    received.push({ method: 'textDocument/didChange', params });
    let text = documents.get(params.textDocument.uri) ?? '';
    for (const change of params.contentChanges) {
      text = change.range
        ? text.slice(0, offsetAt(text, change.range.start)) + change.text + text.slice(offsetAt(text, change.range.end))
        : change.text;
    }
    documents.set(params.textDocument.uri, text);
  },
);

connection.onRequest(
  'textDocument/inlineCompletion',
  async (params: { textDocument: { uri: string }; position: Pos; context: { triggerKind: number } }, token) => {
    received.push({ method: 'textDocument/inlineCompletion', params });
    const text = documents.get(params.textDocument.uri);
    if (text === undefined) {
      throw new ResponseError(-32602, `unknown document ${params.textDocument.uri}`);
    }
    const { line, character } = params.position;
    const before = (text.split('\n')[line] ?? '').slice(0, character);
    if (before.includes('SLOW')) {
      await new Promise<void>((resolve) => token.onCancellationRequested(() => resolve()));
      received.push({ method: 'cancelled', params });
      throw new ResponseError(-32800, 'request cancelled');
    }
    if (before.includes('FAIL')) {
      throw new ResponseError(-32603, 'model exploded');
    }
    completions += 1;
    if (before.includes('EMPTY')) {
      return { items: [] };
    }
    if (before.includes('NULL')) {
      return null;
    }
    if (before.includes('REPLACE')) {
      return { items: [{ insertText: `${before}!`, range: { start: { line, character: 0 }, end: params.position } }] };
    }
    let insertText = `<${line}:${character}|${before}>`;
    let more = before.includes('MORE');
    if (before.includes('PIECES')) {
      const key = JSON.stringify([params.textDocument.uri, params.position, text]);
      const answers = Math.min((pieces.get(key) ?? 0) + 1, 3);
      pieces.set(key, answers);
      insertText = ['piece 1', 'piece 2', 'piece 3'].slice(0, answers).join('\n');
      more = answers < 3;
    }
    // Each item carries its id as copilotd's do: the number of this completion.
    const command = { title: 'accepted', command: 'copilotd.suggestionAccepted', arguments: [{ id: completions, more }] };
    return { items: [{ insertText, range: { start: params.position, end: params.position }, command }] };
  },
);

connection.onRequest('copilotd/status', () => ({
  model: '/models/SmolLM2-135M-Instruct.Q4_1.gguf',
  device: 'cpu',
  strategy: 'auto',
  indexState: 'ready',
  indexedFiles: 3,
  tokensPerSecond: 42.5,
  acceptanceLength: 2.25,
  completions,
}));

connection.onNotification('copilotd/suggestionFeedback', (params: Record<string, unknown>) => {
  received.push({ method: 'copilotd/suggestionFeedback', params });
});

connection.onNotification('copilotd/warm', (params: Record<string, unknown>) => {
  received.push({ method: 'copilotd/warm', params });
});

/** Test hooks: the messages received so far, and a way to crash. */
connection.onRequest('fake/received', () => received);
connection.onRequest('fake/crash', () => process.exit(7));
/** Asks the editor what the daemon asks when the default model is missing; answers with the action chosen. */
connection.onRequest('fake/askDownload', () =>
  connection.sendRequest('window/showMessageRequest', {
    type: 2,
    message: 'the default model is not downloaded yet. Download it?',
    actions: [{ title: 'Download' }],
  }),
);

connection.onRequest('shutdown', () => null);
connection.onNotification('exit', () => process.exit(0));
connection.listen();
