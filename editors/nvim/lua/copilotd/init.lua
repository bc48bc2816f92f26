--- copilotd for Neovim: inline completions from the local copilotd daemon, shown as ghost text.
---
--- `require('copilotd').setup(opts)` starts the daemon (`vim.lsp.start`) for buffers of the configured filetypes.
--- See `:help copilotd`.
local config_mod = require('copilotd.config')
local daemon = require('copilotd.daemon')
local suggestion = require('copilotd.suggestion')

local M = {}

--- The resolved configuration after `setup()`, or nil.
--- @type copilotd.Config?
M.config = nil

--- The workspace root of a buffer: the nearest directory with a root marker, else the file's directory.
local function root_dir(bufnr, markers)
  local name = vim.api.nvim_buf_get_name(bufnr)
  return vim.fs.root(bufnr, markers) or vim.fs.dirname(name)
end

--- Whether the configured command can be run; warns once with advice if not.
local warned_missing = false
local function command_available(cmd)
  if type(cmd) ~= 'table' or vim.fn.executable(cmd[1]) == 1 then
    return true
  end
  if not warned_missing then
    warned_missing = true
    vim.notify(
      ('copilotd: `%s` is not executable. Install copilotd (`cargo install --path .` in its repository) or set '
        .. '`cmd` in require("copilotd").setup(); see :checkhealth copilotd'):format(cmd[1]),
      vim.log.levels.WARN
    )
  end
  return false
end

--- The keys `map_keys` mapped in each buffer, so that a new configuration can take them back.
--- @type table<integer, string[]>
local mapped_keys = {}

--- Maps the configured insert-mode keys in a buffer, first removing the ones an earlier configuration mapped there.
local function map_keys(bufnr, keymaps)
  for _, lhs in ipairs(mapped_keys[bufnr] or {}) do
    pcall(vim.keymap.del, 'i', lhs, { buffer = bufnr })
  end
  mapped_keys[bufnr] = {}
  if not keymaps then
    return
  end
  local function map(lhs, rhs, opts)
    vim.keymap.set('i', lhs, rhs, vim.tbl_extend('force', { buffer = bufnr, silent = true }, opts))
    table.insert(mapped_keys[bufnr], lhs)
  end
  -- The action when a suggestion is shown, else the key as if it were not mapped. Decided when the key runs, after
  -- the keys typed before it (an expression mapping is evaluated while they may still wait to be inserted).
  local function action_or_key(lhs, action, desc)
    local key = vim.api.nvim_replace_termcodes(lhs, true, false, true)
    map(lhs, function()
      if not action() then
        vim.api.nvim_feedkeys(key, 'ni', false)
      end
    end, { desc = desc })
  end
  local function plain(lhs, fn, desc)
    map(lhs, fn, { desc = desc })
  end
  if keymaps.accept then
    action_or_key(keymaps.accept, M.accept, 'copilotd: accept suggestion')
  end
  if keymaps.dismiss then
    action_or_key(keymaps.dismiss, M.dismiss, 'copilotd: dismiss suggestion')
  end
  if keymaps.accept_word then
    plain(keymaps.accept_word, M.accept_word, 'copilotd: accept next word')
  end
  if keymaps.accept_line then
    plain(keymaps.accept_line, M.accept_line, 'copilotd: accept line')
  end
  if keymaps.request then
    plain(keymaps.request, M.request, 'copilotd: request suggestion')
  end
end

--- Hooks a buffer up: its autocommands (which read the current configuration) and its keys. A buffer that is
--- unloaded (`:bdelete`, or `:edit` reloading it) loses its hooks and is hooked up again when it is attached anew.
local function watch_buffer(bufnr)
  local group = vim.api.nvim_create_augroup('copilotd_buffer_' .. bufnr, { clear = true })
  local function on(events, fn)
    vim.api.nvim_create_autocmd(events, { group = group, buffer = bufnr, callback = fn })
  end
  on({ 'TextChangedI', 'CursorMovedI', 'CursorMoved' }, function()
    suggestion.on_change()
  end)
  on('InsertEnter', function()
    if M.config.auto_trigger then
      suggestion.schedule()
    end
  end)
  on({ 'InsertLeave', 'BufLeave' }, function()
    suggestion.clear()
  end)
  -- Entering the buffer (or the daemon attaching to it) tells the daemon where the cursor is, once it has settled
  -- (entering a buffer restores its cursor after BufEnter).
  on({ 'BufEnter', 'LspAttach' }, function(event)
    local id = event.data and event.data.client_id
    local client = id and vim.lsp.get_client_by_id(id)
    if id and not (client and client.name == 'copilotd') then
      return
    end
    vim.schedule(function()
      if vim.api.nvim_get_current_buf() == bufnr then
        suggestion.warm()
      end
    end)
  end)
  on('BufUnload', function()
    suggestion.clear()
    pcall(vim.api.nvim_del_augroup_by_id, group)
    vim.b[bufnr].copilotd_attached = nil
    mapped_keys[bufnr] = nil
  end)
  map_keys(bufnr, M.config.keymaps)
end

--- Attaches the daemon to a buffer (starting it, or adding the buffer's root to its workspace folders) and hooks the
--- buffer up.
--- @param bufnr integer
--- @return integer? client_id
function M.attach(bufnr)
  local config = M.config
  if not config or vim.bo[bufnr].buftype ~= '' or vim.api.nvim_buf_get_name(bufnr) == '' then
    return nil
  end
  if not command_available(config.cmd) then
    return nil
  end
  local client_id = daemon.attach(bufnr, root_dir(bufnr, config.root_markers), config)
  if client_id and not vim.b[bufnr].copilotd_attached then
    vim.b[bufnr].copilotd_attached = true
    watch_buffer(bufnr)
    require('copilotd.statusline').start()
  end
  return client_id
end

--- Attaches the daemon to every loaded buffer of the configured filetypes. Returns how many it attached to.
--- @return integer
local function attach_all()
  local attached = 0
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.tbl_contains(M.config.filetypes, vim.bo[bufnr].filetype) then
      attached = attached + (M.attach(bufnr) and 1 or 0)
    end
  end
  return attached
end

--- Configures the plugin and attaches to open and future buffers of `filetypes` (after the daemon stopped, too).
--- Called again, it also gives attached buffers the new keys and the running daemon the new daemon options.
--- @param opts table? see `:help copilotd-config`
function M.setup(opts)
  local config = config_mod.resolve(opts)
  local reconfigured = M.config ~= nil
  M.config = config
  suggestion.config = config
  vim.api.nvim_set_hl(0, 'CopilotdSuggestion', { link = 'Comment', default = true })
  local group = vim.api.nvim_create_augroup('copilotd', { clear = true })
  vim.api.nvim_create_autocmd('FileType', {
    group = group,
    pattern = config.filetypes,
    callback = function(event)
      M.attach(event.buf)
    end,
  })
  if reconfigured then
    for bufnr in pairs(mapped_keys) do
      if vim.api.nvim_buf_is_valid(bufnr) then
        map_keys(bufnr, config.keymaps)
      end
    end
    -- Options left out go back to the daemon's config.toml (`null`), as if this were the first setup().
    local settings = vim.empty_dict()
    for _, daemon_name in pairs(config_mod.daemon_options) do
      settings[daemon_name] = vim.NIL
    end
    settings = { copilotd = vim.tbl_extend('force', settings, config_mod.daemon_settings(config)) }
    local client = daemon.client()
    if client then
      require('copilotd.compat').call(client, 'notify', 'workspace/didChangeConfiguration', { settings = settings })
    end
  end
  daemon.stopped = false
  attach_all()
end

--- Stops the daemon and starts a new one, with the same settings and workspace folders, attached to every buffer of
--- the configured filetypes. Returns whether it started, or false and why not.
--- @return boolean started, string? error
function M.restart()
  if not M.config then
    return false, 'setup() was not called'
  end
  daemon.stop_all()
  if attach_all() == 0 then
    return false, 'no buffer of the filetypes ' .. table.concat(M.config.filetypes, ', ') .. ' is open'
  end
  return true, nil
end

--- Asks for a suggestion at the cursor now. Returns whether a request was sent.
function M.request()
  return suggestion.request(1)
end

--- The suggestion shown in the current buffer (the text `accept()` would insert), or nil.
--- @return string?
function M.get_suggestion()
  return suggestion.get()
end

--- Inserts the whole suggestion. Returns whether there was one.
function M.accept()
  return suggestion.accept()
end

--- Inserts the next word of the suggestion; the rest stays shown.
function M.accept_word()
  return suggestion.accept_word()
end

--- Inserts the rest of the suggestion's current line (with its line break); the rest stays shown.
function M.accept_line()
  return suggestion.accept_line()
end

--- Hides the suggestion and cancels pending requests; the daemon is told the suggestion was dismissed. Returns
--- whether a suggestion was shown.
function M.dismiss()
  return suggestion.dismiss()
end

--- The daemon's `copilotd/status` for the current buffer (synchronous, up to `timeout_ms`).
--- @param timeout_ms integer?
--- @return table? status, string? error
function M.status(timeout_ms)
  local bufnr = vim.api.nvim_get_current_buf()
  local client = suggestion.client(bufnr)
  if not client then
    return nil, 'copilotd is not attached to this buffer'
  end
  local response, err = require('copilotd.compat').call(client, 'request_sync', 'copilotd/status', nil, timeout_ms or 2000, bufnr)
  if not response then
    return nil, err or 'no answer'
  end
  if response.err then
    return nil, response.err.message
  end
  return response.result, nil
end

--- Statusline text: decode speed and acceptance length over recent completions (`copilotd 41.2 tok/s ×2.10`),
--- the model's state while it is not ready, '' without a daemon. Cheap: the status is fetched in the background.
--- @return string
function M.statusline()
  return require('copilotd.statusline').text()
end

--- Asks the daemon to rebuild its workspace index (`copilotd/reindex`).
--- @return boolean started, string? error
function M.reindex()
  local bufnr = vim.api.nvim_get_current_buf()
  local client = suggestion.client(bufnr)
  if not client then
    return false, 'copilotd is not attached to this buffer'
  end
  local response, err = require('copilotd.compat').call(client, 'request_sync', 'copilotd/reindex', nil, 5000, bufnr)
  if not response then
    return false, err or 'no answer'
  end
  if response.err then
    return false, response.err.message
  end
  return true, nil
end

return M
