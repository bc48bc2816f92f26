-- User commands of copilotd. Nothing starts until require('copilotd').setup() is called.
if vim.g.loaded_copilotd then
  return
end
vim.g.loaded_copilotd = true

vim.api.nvim_create_user_command('CopilotdStatus', function()
  local status, err = require('copilotd').status()
  if not status then
    vim.notify('copilotd: ' .. err, vim.log.levels.WARN)
    return
  end
  vim.notify('copilotd: ' .. vim.inspect(status), vim.log.levels.INFO)
end, { desc = 'Show the copilotd daemon status' })

--- Runs the plugin's function `action`, and says `started` when it started, else why it did not.
local function start(action, started)
  local ok, err = require('copilotd')[action]()
  if ok then
    vim.notify('copilotd: ' .. started, vim.log.levels.INFO)
  else
    vim.notify('copilotd: ' .. err, vim.log.levels.WARN)
  end
end

vim.api.nvim_create_user_command('CopilotdReindex', function()
  start('reindex', 're-indexing the workspace')
end, { desc = 'Rebuild the copilotd workspace index' })

vim.api.nvim_create_user_command('CopilotdRequest', function()
  if vim.api.nvim_get_mode().mode:sub(1, 1) ~= 'i' then
    vim.notify('copilotd: suggestions are asked for in insert mode (map `<Cmd>CopilotdRequest<CR>` there)', vim.log.levels.WARN)
  elseif not require('copilotd').request() then
    vim.notify('copilotd: not attached to this buffer', vim.log.levels.WARN)
  end
end, { desc = 'Ask copilotd for a suggestion at the cursor' })

vim.api.nvim_create_user_command('CopilotdDismiss', function()
  require('copilotd').dismiss()
end, { desc = 'Hide the copilotd suggestion' })

vim.api.nvim_create_user_command('CopilotdRestart', function()
  start('restart', 'restarting the daemon')
end, { desc = 'Stop the copilotd daemon and start a new one for the open buffers' })
