--- Draws a suggestion as ghost text with one extmark: the first line as inline virtual text at the cursor, the
--- other lines as virtual lines below it.
local M = {}

M.ns = vim.api.nvim_create_namespace('copilotd')

--- Tabs would show as "^I" in virtual text; show them as the spaces the buffer would.
local function expand_tabs(line, bufnr)
  if not line:find('\t', 1, true) then
    return line
  end
  local tabstop = vim.bo[bufnr].tabstop
  return (line:gsub('\t', string.rep(' ', tabstop)))
end

--- @param bufnr integer
--- @param row integer 0-based
--- @param col integer byte column
--- @param text string
--- @param hl_group string
--- @return integer extmark id
function M.show(bufnr, row, col, text, hl_group)
  M.clear(bufnr)
  local lines = vim.split(text, '\n', { plain = true })
  local opts = {
    virt_text = { { expand_tabs(lines[1], bufnr), hl_group } },
    virt_text_pos = 'inline',
    hl_mode = 'combine',
  }
  if #lines > 1 then
    opts.virt_lines = {}
    for i = 2, #lines do
      opts.virt_lines[#opts.virt_lines + 1] = { { expand_tabs(lines[i], bufnr), hl_group } }
    end
  end
  return vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, opts)
end

function M.clear(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

return M
