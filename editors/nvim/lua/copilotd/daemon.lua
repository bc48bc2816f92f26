--- The copilotd daemon of all buffers: one client (one process, one model in memory) whose workspace folders are the
--- roots of the buffers it serves, as VS Code has one daemon for the folders of a window.
local compat = require('copilotd.compat')
local config_mod = require('copilotd.config')

local M = {}

M.NAME = 'copilotd'

--- The workspace roots of the buffers served, in the order they came: the daemon's workspace folders.
--- @type string[]
M.roots = {}

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
  for _, root in ipairs(waiting[client.id] or {}) do
    if not has_folder(client, root) then
      send_folder(client, root)
    end
  end
  waiting[client.id] = nil
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
  }
end

--- Attaches the daemon to a buffer of workspace `root`: the running one, which gets `root` as a workspace folder if it
--- is new, or a new one. Returns the client id, or nil.
--- @param bufnr integer
--- @param root string
--- @param config copilotd.Config
--- @return integer? client_id
function M.attach(bufnr, root, config)
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
    add_folder(client, root)
  end
  return client_id
end

return M
