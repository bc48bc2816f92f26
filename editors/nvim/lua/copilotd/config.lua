--- Options of the plugin: defaults, validation, and the daemon settings derived from them.
local M = {}

--- @class copilotd.Keymaps
--- @field accept string|false      Accept the whole suggestion (falls back to the key itself when none is shown).
--- @field accept_word string|false Accept the next word.
--- @field accept_line string|false Accept the rest of the current line.
--- @field dismiss string|false     Hide the suggestion (falls back to the key itself when none is shown).
--- @field request string|false     Ask for a suggestion now.

--- @class copilotd.Config
--- @field cmd string[]|function    Command starting the daemon (a function: an in-process server, see vim.lsp.ClientConfig).
--- @field filetypes string[]       Filetypes the client attaches to.
--- @field root_markers string[]    Files or directories that mark a workspace root.
--- @field max_tokens integer?      Daemon `maxTokens` (nil: the daemon's default).
--- @field prompt_latency_ms integer? Daemon `promptLatencyMs`: most milliseconds of prefill before the prompt is cut to a
---                                 shorter window (0: never cut; nil: the daemon's default, 2000).
--- @field strategy string?         Daemon `strategy` (nil: the daemon's default).
--- @field model string?            Daemon `model` (nil: the daemon's default).
--- @field threads integer?         Daemon `threads` (nil: the daemon's default).
--- @field ignore string[]?         Daemon `ignore` patterns.
--- @field temperature number?      Daemon `temperature` (0: greedy; nil: the daemon's default, greedy).
--- @field top_p number?            Daemon `topP`, in (0, 1] (nil: the daemon's default, 1).
--- @field seed integer?            Daemon `seed` (nil: fresh randomness per request).
--- @field fim boolean?             Daemon `fim` (nil: the daemon's default, on).
--- @field repo_context boolean?    Daemon `repoContext` (nil: the daemon's default, on).
--- @field early_lines boolean?     Daemon `earlyLines` (nil: the daemon's default, on).
--- @field warm boolean?            Daemon `warm` (nil: the daemon's default, on).
--- @field debounce_ms integer      Quiet time after typing before a request is sent.
--- @field auto_trigger boolean     Request while typing (false: only on the request key or `request()`).
--- @field hl_group string          Highlight group of the ghost text.
--- @field keymaps copilotd.Keymaps|false

--- @type copilotd.Config
M.defaults = {
  cmd = { 'copilotd', '--stdio' },
  filetypes = { 'python' },
  root_markers = { '.git', 'pyproject.toml', 'setup.py', 'setup.cfg', '.hg' },
  debounce_ms = 75,
  auto_trigger = true,
  hl_group = 'CopilotdSuggestion',
  keymaps = {
    accept = '<Tab>',
    accept_word = '<M-Right>',
    accept_line = '<M-Down>',
    dismiss = '<C-]>',
    request = '<M-\\>',
  },
}

--- Merges user options over the defaults and checks their names and types.
--- @param opts table?
--- @return copilotd.Config
function M.resolve(opts)
  opts = opts or {}
  -- The error points at the caller of `setup()`, whose options are wrong: `depth` more levels up when a helper of
  -- this function calls it.
  local function fail(message, depth)
    error('copilotd: ' .. message, 4 + (depth or 0))
  end
  for name in pairs(opts) do
    if M.defaults[name] == nil and M.daemon_options[name] == nil then
      fail(('unknown option `%s` (see :help copilotd-config)'):format(tostring(name)))
    end
  end
  local config = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts)
  if opts.keymaps == false then
    config.keymaps = false
  end
  local function check(name, ok, expected)
    if not ok then
      fail(('option `%s` must be %s, got %s'):format(name, expected, vim.inspect(config[name])), 1)
    end
  end
  local function is(name, kind, optional)
    local v = config[name]
    return (optional and v == nil) or type(v) == kind
  end
  check('cmd', is('cmd', 'function') or (is('cmd', 'table') and #config.cmd > 0), 'a non-empty list or a function')
  check('filetypes', is('filetypes', 'table'), 'a list')
  check('root_markers', is('root_markers', 'table'), 'a list')
  check('max_tokens', is('max_tokens', 'number', true), 'a number or nil')
  -- 0 is a value of its own (never cut the prompt); only nil leaves it to the daemon. `% 1` also rules out inf and nan.
  check('prompt_latency_ms', config.prompt_latency_ms == nil
    or (is('prompt_latency_ms', 'number') and config.prompt_latency_ms >= 0 and config.prompt_latency_ms % 1 == 0),
    'an integer >= 0 or nil')
  check('strategy', is('strategy', 'string', true), 'a string or nil')
  check('model', is('model', 'string', true), 'a string or nil')
  check('threads', is('threads', 'number', true), 'a number or nil')
  check('ignore', is('ignore', 'table', true), 'a list or nil')
  -- Ranges are the daemon's to check: it warns and keeps the previous value.
  check('temperature', is('temperature', 'number', true), 'a number or nil')
  check('top_p', is('top_p', 'number', true), 'a number or nil')
  check('seed', is('seed', 'number', true), 'a number or nil')
  for _, switch in ipairs({ 'fim', 'repo_context', 'early_lines', 'warm' }) do
    check(switch, is(switch, 'boolean', true), 'a boolean or nil')
  end
  check('debounce_ms', is('debounce_ms', 'number') and config.debounce_ms >= 0, 'a number >= 0')
  check('auto_trigger', is('auto_trigger', 'boolean'), 'a boolean')
  check('hl_group', is('hl_group', 'string'), 'a string')
  check('keymaps', config.keymaps == false or is('keymaps', 'table'), 'a table or false')
  for key, lhs in pairs(config.keymaps or {}) do
    if M.defaults.keymaps[key] == nil then
      fail(('unknown key `keymaps.%s` (see :help copilotd-keys)'):format(tostring(key)))
    end
    if lhs ~= false and (type(lhs) ~= 'string' or lhs == '') then
      fail(('`keymaps.%s` must be a key (a string) or false, got %s'):format(key, vim.inspect(lhs)))
    end
  end
  return config
end

--- The options the daemon takes, by their names here and the daemon's (camelCase). Unset (nil, the default but for
--- `filetypes`), they are left out of what is sent, so that the daemon's config.toml still applies.
M.daemon_options = {
  model = 'model',
  strategy = 'strategy',
  max_tokens = 'maxTokens',
  prompt_latency_ms = 'promptLatencyMs',
  threads = 'threads',
  filetypes = 'languages',
  ignore = 'ignore',
  temperature = 'temperature',
  top_p = 'topP',
  seed = 'seed',
  fim = 'fim',
  repo_context = 'repoContext',
  early_lines = 'earlyLines',
  warm = 'warm',
}

--- The daemon settings, for `initializationOptions` and `workspace/didChangeConfiguration`.
--- @param config copilotd.Config
--- @return table
function M.daemon_settings(config)
  local settings = {}
  for name, daemon_name in pairs(M.daemon_options) do
    settings[daemon_name] = config[name]
  end
  return settings
end

return M
