/**
 * Preloaded with `node --require`: makes `require('vscode')` load the stand-in, since the real module only
 * exists inside VS Code.
 */
import Module from 'module';
import * as path from 'path';

const stub = path.join(__dirname, 'vscode-stub.js');
const internal = Module as unknown as {
  _resolveFilename: (request: string, ...rest: unknown[]) => string;
};
const resolve = internal._resolveFilename;
internal._resolveFilename = function (request: string, ...rest: unknown[]): string {
  return request === 'vscode' ? stub : resolve.call(this, request, ...rest);
};
