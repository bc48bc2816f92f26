--- :checkhealth copilotd
local M = {}

local health = vim.health

local function check_neovim()
  if vim.fn.has('nvim-0.10') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim 0.10 or newer is needed (inline virtual text)')
  end
end

local function check_binary(config)
  if type(config.cmd) ~= 'table' then
    health.info('`cmd` is a function (an in-process server)')
    return
  end
  local bin = config.cmd[1]
  if vim.fn.executable(bin) == 0 then
    health.error(('`%s` is not executable'):format(bin), {
      'Build and install copilotd: `cargo install --path .` in its repository',
      'or set `cmd = { "/path/to/copilotd", "--stdio" }` in require("copilotd").setup()',
    })
    return
  end
  local ok, result = pcall(vim.fn.system, { bin, '--version' })
  local version = ok and vim.v.shell_error == 0 and vim.trim(result) or 'version unknown'
  health.ok(('`%s` found: %s (%s)'):format(bin, vim.fn.exepath(bin), version))
end

local function check_model(config)
  local model = config.model or vim.env.COPILOTD_MODEL
  if not model then
    health.info('model: the daemon default (fetch it with `copilotd model fetch`)')
  elseif model:find('[/\\]') and not require('copilotd.compat').uv.fs_stat(model) then
    -- A GGUF file or a safetensors directory.
    health.error('model not found: ' .. model)
  else
    health.ok('model: ' .. model)
  end
end

local function check_clients()
  local clients = vim.lsp.get_clients({ name = 'copilotd' })
  if #clients == 0 then
    health.info('no copilotd client is running (open a file of a configured filetype)')
    return
  end
  for _, client in ipairs(clients) do
    local buffers = vim.tbl_keys(client.attached_buffers or {})
    local folders = vim.tbl_map(function(folder)
      return folder.name
    end, client.workspace_folders or {})
    health.ok(('client %d: workspace folders %s, attached to %d buffer(s)'):format(
      client.id,
      #folders > 0 and table.concat(folders, ', ') or 'none',
      #buffers
    ))
    if not (client.server_capabilities or {}).inlineCompletionProvider then
      health.warn('the server does not announce inlineCompletionProvider')
    end
    local bufnr = buffers[1]
    if bufnr then
      local response = require('copilotd.compat').call(client, 'request_sync', 'copilotd/status', nil, 2000, bufnr)
      local status = response and response.result
      if type(status) == 'table' then
        health.ok(
          ('daemon: model %s, device %s, strategy %s, index %s'):format(
            tostring(status.model),
            tostring(status.device),
            tostring(status.strategy),
            tostring(status.indexState)
          )
        )
        if status.modelState == 'failed' then
          health.error('model: ' .. tostring(status.modelError or 'failed to load'), {
            'Set `model` in require("copilotd").setup() to a GGUF file or a safetensors directory',
            'or leave it unset for the default model (`copilotd model fetch`)',
          })
        end
        local kernel = tostring(status.device or ''):match('([%w%-_]+) kernel')
        if kernel then
          health.ok('kernel: ' .. kernel)
        else
          health.info('kernel: unknown until the model is loaded (device ' .. tostring(status.device) .. ')')
        end
        local calibration = status.calibration
        if calibration == 'done' then
          health.ok('cost calibration: done')
        elseif calibration == 'confirming' then
          health.ok('cost calibration: in use; measured again later to confirm it')
        elseif calibration == 'disturbed' then
          health.warn('cost calibration: disturbed by other work on the machine; measured again later')
        elseif calibration == nil then
          health.info('cost calibration: not reported by this daemon')
        else
          health.info(('cost calibration: %s (completions use a small draft tree until it is done)'):format(calibration))
        end
      else
        health.warn('copilotd/status did not answer')
      end
    end
  end
  local last_error = require('copilotd.suggestion').last_error
  if last_error then
    health.warn('last completion error: ' .. last_error)
  end
end

function M.check()
  health.start('copilotd')
  check_neovim()
  local config = require('copilotd').config
  if not config then
    health.warn('setup() was not called', 'Add require("copilotd").setup({}) to your config')
    return
  end
  health.ok('setup() called; filetypes: ' .. table.concat(config.filetypes, ', '))
  check_binary(config)
  check_model(config)
  check_clients()
end

return M
