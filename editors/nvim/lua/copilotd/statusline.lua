--- The daemon's speed for a statusline, as VS Code's status bar shows it: decode speed and acceptance length over
--- recent completions, from `copilotd/status`. The status is fetched in the background (never while the statusline
--- is drawn) every `REFRESH_MS` while a copilotd client runs.
local compat = require('copilotd.compat')
local daemon = require('copilotd.daemon')

local M = {}

local REFRESH_MS = 2000

--- The latest `copilotd/status` answer, or nil.
--- @type table?
M.status = nil

local timer = nil

--- The title of each piece of background work a daemon reports (`$/progress`: downloading the model, indexing a
--- folder), by client id and progress token, while it runs. The work of a daemon that died is never shown.
--- @type table<integer, table<integer|string, string>>
M.work = {}

local function number(value)
  return type(value) == 'number' and value or nil
end

--- The statusline text for a status: `copilotd 41.2 tok/s ×2.10`, the model's state while it is not ready, or ''.
--- @param status table?
--- @return string
function M.format(status)
  if type(status) ~= 'table' then
    return ''
  end
  if status.modelState and status.modelState ~= 'ready' then
    return 'copilotd: model ' .. tostring(status.modelState)
  end
  local parts = { 'copilotd' }
  local speed, acceptance = number(status.tokensPerSecond), number(status.acceptanceLength)
  if speed then
    parts[#parts + 1] = ('%.1f tok/s'):format(speed)
  end
  if acceptance then
    parts[#parts + 1] = ('×%.2f'):format(acceptance)
  end
  if status.indexState == 'indexing' then
    parts[#parts + 1] = 'indexing'
  end
  return table.concat(parts, ' ')
end

--- Asks the daemon for its status now; the answer lands in `M.status` and redraws the statuslines.
function M.refresh()
  local client = daemon.client()
  if not client then
    M.status = nil
    return false
  end
  local bufnr = next(client.attached_buffers or {}) or vim.api.nvim_get_current_buf()
  compat.call(client, 'request', 'copilotd/status', nil, function(err, result)
    if not err and type(result) == 'table' then
      M.status = result
      pcall(vim.cmd.redrawstatus)
    end
  end, bufnr)
  return true
end

--- Keeps `M.work` up to date from an `LspProgress` event.
local function on_progress(event)
  local client = vim.lsp.get_client_by_id(event.data.client_id)
  local params = event.data.params
  if not (client and client.name == 'copilotd' and type(params.value) == 'table') then
    return
  end
  local work = M.work[client.id] or {}
  M.work[client.id] = work
  if params.value.kind == 'begin' then
    work[params.token] = params.value.title or 'working'
  elseif params.value.kind == 'end' then
    work[params.token] = nil
  end
  pcall(vim.cmd.redrawstatus)
end

--- Starts the background refresh and the watch of the daemon's work (once).
function M.start()
  if timer then
    return
  end
  timer = compat.uv.new_timer()
  timer:start(0, REFRESH_MS, vim.schedule_wrap(M.refresh))
  local group = vim.api.nvim_create_augroup('copilotd_progress', {})
  vim.api.nvim_create_autocmd('LspProgress', { group = group, callback = on_progress })
end

--- The text to show: for `statusline=%{%v:lua.require'copilotd'.statusline()%}` or a statusline plugin. While the
--- daemon reports background work, that work (`copilotd: downloading the default model`); once it exited (until a
--- restart), `copilotd: stopped`.
function M.text()
  if daemon.stopped then
    return 'copilotd: stopped'
  end
  local client = daemon.client()
  local _, title = next(client and M.work[client.id] or {})
  if title then
    return 'copilotd: ' .. title:gsub('^copilotd: ', '')
  end
  return M.format(M.status)
end

return M
