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

vim.api.nvim_create_user_command('CopilotdReindex', function()
  local started, err = require('copilotd').reindex()
  if started then
    vim.notify('copilotd: re-indexing the workspace', vim.log.levels.INFO)
  else
    vim.notify('copilotd: ' .. err, vim.log.levels.WARN)
  end
end, { desc = 'Rebuild the copilotd workspace index' })

vim.api.nvim_create_user_command('CopilotdRequest', function()
  require('copilotd').request()
end, { desc = 'Ask copilotd for a suggestion at the cursor' })

vim.api.nvim_create_user_command('CopilotdDismiss', function()
  require('copilotd').dismiss()
end, { desc = 'Hide the copilotd suggestion' })
