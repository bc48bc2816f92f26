--- The copilotd daemon of all buffers: one client (one process, one model in memory) whose workspace folders are the
--- roots of the buffers it serves, as VS Code has one daemon for the folders of a window. Also its exit: a crash or a
--- kill is told once, and the daemon stays stopped until `restart()`.
local compat = require('copilotd.compat')
local config_mod = require('copilotd.config')

local M = {}

M.NAME = 'copilotd'

--- The workspace roots of the buffers served, in the order they came: the daemon's workspace folders, also those a
--- restarted daemon starts with.
--- @type string[]
M.roots = {}

--- Whether the daemon exited without the plugin stopping it (a crash, a kill, `:lsp stop`). New buffers then get no
--- daemon until `restart()`, as in VS Code: a daemon that crashes on start is not started again and again.
M.stopped = false

--- Ids of the clients `attach()` started or reused, until they exit (`vim.lsp.get_clients()` leaves out those
--- still initializing).
--- @type table<integer, true>
local started = {}

--- Ids of the clients `stop_all()` stopped: their exit is expected.
--- @type table<integer, true>
local retiring = {}

--- Roots added while a client initializes, by client id: a notification must wait for the `initialize` answer.
--- @type table<integer, string[]>
local waiting = {}

local function is_live(client)
  return not compat.call(client, 'is_stopped')
end

--- The live copilotd client attached to `bufnr` (any buffer when nil), or nil: a client being stopped is not live.
--- @param bufnr integer?
--- @return vim.lsp.Client?
function M.client(bufnr)
  for _, client in ipairs(vim.lsp.get_clients({ bufnr = bufnr, name = M.NAME })) do
    if is_live(client) then
      return client
    end
  end
  return nil
end

local function folder(root)
  return { uri = vim.uri_from_fname(root), name = root }
end

local function has_folder(client, root)
  for _, known in ipairs(client.workspace_folders or {}) do
    if known.name == root then
      return true
    end
  end
  return false
end

--- Tells an initialized client's daemon about a new workspace folder, and the client too (Neovim answers the
--- daemon's `workspace/workspaceFolders` from `client.workspace_folders`).
local function send_folder(client, root)
  local added = folder(root)
  compat.call(client, 'notify', 'workspace/didChangeWorkspaceFolders', { event = { added = { added }, removed = {} } })
  client.workspace_folders = client.workspace_folders or {}
  table.insert(client.workspace_folders, added)
end

--- Makes `root` one of the client's workspace folders, once; while the client initializes, once it is initialized.
local function add_folder(client, root)
  if not client.initialized then
    waiting[client.id] = waiting[client.id] or {}
    table.insert(waiting[client.id], root)
  elseif not has_folder(client, root) then
    send_folder(client, root)
  end
end

local function on_init(client)
  M.stopped = false
  for _, root in ipairs(waiting[client.id] or {}) do
    if not has_folder(client, root) then
      send_folder(client, root)
    end
  end
  waiting[client.id] = nil
end

--- How a process ended, for a person: `signal 9`, `exit code 101`.
local function exit_reason(code, signal)
  return signal ~= 0 and ('signal ' .. signal) or ('exit code ' .. code)
end

--- Whether a client `attach()` started still runs.
local function any_live()
  for id in pairs(started) do
    local client = vim.lsp.get_client_by_id(id)
    if client and is_live(client) then
      return true
    end
  end
  return false
end

--- A client exited: expected when the plugin stopped it, Neovim quits or a newer daemon runs already; otherwise the
--- daemon is stopped, and a crash or a kill (an exit code or a signal, not the clean exit after `shutdown`) is told
--- once.
local function on_exit(code, signal, id)
  vim.schedule(function()
    started[id], waiting[id] = nil, nil
    local expected = retiring[id] or vim.v.exiting ~= vim.NIL or any_live()
    retiring[id] = nil
    if expected then
      return
    end
    M.stopped = true
    pcall(vim.cmd.redrawstatus)
    if code ~= 0 or signal ~= 0 then
      vim.notify(
        ('copilotd stopped unexpectedly (%s): no completions until :CopilotdRestart'):format(exit_reason(code, signal)),
        vim.log.levels.ERROR
      )
    end
  end)
end

--- Client capabilities: Neovim's, plus inline completion (LSP 3.18), which 0.10/0.11 do not announce.
local function capabilities()
  return vim.tbl_deep_extend('force', vim.lsp.protocol.make_client_capabilities(), {
    textDocument = { inlineCompletion = { dynamicRegistration = false } },
  })
end

--- The configuration of a new client: every root served so far is a workspace folder.
--- @param config copilotd.Config
local function client_config(config)
  return {
    name = M.NAME,
    cmd = config.cmd,
    root_dir = M.roots[1],
    workspace_folders = vim.tbl_map(folder, M.roots),
    init_options = config_mod.daemon_settings(config),
    capabilities = capabilities(),
    on_init = on_init,
    on_exit = on_exit,
  }
end

--- Attaches the daemon to a buffer of workspace `root`: the running one, which gets `root` as a workspace folder if it
--- is new, or a new one. Returns the client id, or nil (also while the daemon is stopped).
--- @param bufnr integer
--- @param root string
--- @param config copilotd.Config
--- @return integer? client_id
function M.attach(bufnr, root, config)
  if M.stopped then
    return nil
  end
  if not vim.tbl_contains(M.roots, root) then
    table.insert(M.roots, root)
  end
  local client_id = vim.lsp.start(client_config(config), {
    bufnr = bufnr,
    reuse_client = function(client)
      return client.name == M.NAME and is_live(client)
    end,
  })
  local client = client_id and vim.lsp.get_client_by_id(client_id)
  if client then
    started[client.id] = true
    add_folder(client, root)
  end
  return client_id
end

--- Stops every copilotd client, as expected exits, and forgets that the daemon was stopped: the next `attach()`
--- starts a new one.
function M.stop_all()
  for id in pairs(started) do
    local client = vim.lsp.get_client_by_id(id)
    if client then
      retiring[id] = true
      compat.call(client, 'stop')
    end
  end
  M.stopped = false
end

return M
