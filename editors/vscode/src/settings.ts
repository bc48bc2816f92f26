/** Reads the `copilotd.*` settings and turns them into what the daemon and the extension need. */
import * as vscode from 'vscode';
import { DaemonSettings } from './protocol';

/** Everything the extension reads from the `copilotd` configuration section. */
export interface ExtensionSettings {
  enable: boolean;
  /** Command or path of the daemon binary. */
  path: string;
  /** Settings forwarded to the daemon (only the ones the user set). */
  daemon: DaemonSettings;
  /** Language ids the completion provider is registered for; empty means every file. */
  languages: string[];
  /** Seconds between `copilotd/status` polls for the status bar; 0 turns polling off. */
  statusInterval: number;
}

/** Settings whose change needs a new daemon process, not just a configuration notification. */
export const RESTART_SETTINGS = ['copilotd.path', 'copilotd.threads'];

/** The largest `promptLatencyMs` the daemon takes (its range is 0..=60000 ms). */
const PROMPT_LATENCY_MS_MAX = 60_000;

export function readSettings(config: vscode.WorkspaceConfiguration): ExtensionSettings {
  const languages = stringList(config.get<unknown>('languages'));
  return {
    enable: config.get<boolean>('enable', true),
    path: config.get<string>('path', '').trim() || 'copilotd',
    daemon: daemonSettings(config),
    languages,
    statusInterval: Math.max(0, config.get<number>('statusInterval', 5)),
  };
}

/**
 * The daemon's settings (its names in camelCase). Empty strings, zero numbers and empty lists mean
 * "use the daemon's default" and are left out, so a daemon-side config.toml still applies; so are
 * unset (null) settings where 0 means something, such as `promptLatencyMs` (0: never cut the prompt).
 */
export function daemonSettings(config: vscode.WorkspaceConfiguration): DaemonSettings {
  const settings: DaemonSettings = {};
  const model = config.get<string>('model', '').trim();
  if (model) {
    settings.model = model;
  }
  const strategy = config.get<string>('strategy', '').trim();
  if (strategy) {
    settings.strategy = strategy;
  }
  const maxTokens = config.get<number>('maxTokens', 0);
  if (Number.isInteger(maxTokens) && maxTokens > 0) {
    settings.maxTokens = maxTokens;
  }
  // 0 is a value of its own here (never cut the prompt), so only unset (null) is left to the daemon.
  const promptLatencyMs = config.get<unknown>('promptLatencyMs');
  if (
    typeof promptLatencyMs === 'number' &&
    Number.isInteger(promptLatencyMs) &&
    promptLatencyMs >= 0 &&
    promptLatencyMs <= PROMPT_LATENCY_MS_MAX
  ) {
    settings.promptLatencyMs = promptLatencyMs;
  }
  const threads = config.get<number>('threads', 0);
  if (Number.isInteger(threads) && threads > 0) {
    settings.threads = threads;
  }
  const languages = stringList(config.get<unknown>('languages'));
  if (languages.length > 0) {
    settings.languages = languages;
  }
  const ignore = stringList(config.get<unknown>('ignore'));
  if (ignore.length > 0) {
    settings.ignore = ignore;
  }
  // Sampling settings are sent as set, even out of range: the daemon checks them, warns, and
  // keeps the previous value, as for its other settings.
  for (const name of ['temperature', 'topP', 'seed'] as const) {
    const value = config.get<unknown>(name);
    if (typeof value === 'number') {
      settings[name] = value;
    }
  }
  // Switches are sent only where the person set them: unset leaves the daemon's own config.
  for (const name of ['fim', 'repoContext', 'earlyLines', 'warm'] as const) {
    const value = config.get<unknown>(name);
    if (typeof value === 'boolean') {
      settings[name] = value;
    }
  }
  return settings;
}

function stringList(value: unknown): string[] {
  if (!Array.isArray(value)) {
    return [];
  }
  return value.filter((v): v is string => typeof v === 'string' && v.trim() !== '').map((v) => v.trim());
}
