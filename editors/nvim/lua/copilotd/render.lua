--- Draws a suggestion as ghost text with one extmark: the first line as inline virtual text at the cursor, the
--- other lines as virtual lines below it.
local M = {}

M.ns = vim.api.nvim_create_namespace('copilotd')

--- Tabs would show as "^I" in virtual text; show them as the spaces the buffer would: up to the next tab stop,
--- counted from `start`, the display column where the text begins.
local function expand_tabs(line, bufnr, start)
  if not line:find('\t', 1, true) then
    return line
  end
  local tabstop = vim.bo[bufnr].tabstop
  local out, column = {}, start
  for piece, tab in line:gmatch('([^\t]*)(\t?)') do
    out[#out + 1] = piece
    column = column + vim.fn.strdisplaywidth(piece)
    if tab ~= '' then
      local width = tabstop - column % tabstop
      out[#out + 1] = string.rep(' ', width)
      column = column + width
    end
  end
  return table.concat(out)
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
  local before = vim.api.nvim_buf_get_text(bufnr, row, 0, row, col, {})[1]
  local opts = {
    virt_text = { { expand_tabs(lines[1], bufnr, vim.fn.strdisplaywidth(before)), hl_group } },
    virt_text_pos = 'inline',
    hl_mode = 'combine',
  }
  if #lines > 1 then
    opts.virt_lines = {}
    for i = 2, #lines do
      opts.virt_lines[#opts.virt_lines + 1] = { { expand_tabs(lines[i], bufnr, 0), hl_group } }
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
