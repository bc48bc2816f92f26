--- Differences between Neovim 0.10, 0.11 and 0.12 that the plugin must bridge, in one place.
local M = {}

M.has_0_11 = vim.fn.has('nvim-0.11') == 1

M.uv = vim.uv or vim.loop

--- Calls a method of an LSP client: `client:m(...)` on 0.11+, `client.m(...)` on 0.10.
--- @param client vim.lsp.Client
--- @param method string
function M.call(client, method, ...)
  if M.has_0_11 then
    return client[method](client, ...)
  end
  return client[method](...)
end

--- Byte index in `line` of the LSP `character` offset in `encoding` ('utf-8', 'utf-16' or 'utf-32'), clamped to the
--- line so that positions past the end (or inside a surrogate pair) never raise.
--- @param line string
--- @param character integer
--- @param encoding string
--- @return integer
function M.byte_index(line, character, encoding)
  if encoding == 'utf-8' then
    return math.min(character, #line)
  end
  local ok, index
  if M.has_0_11 then
    ok, index = pcall(vim.str_byteindex, line, encoding, character, false)
  else
    ok, index = pcall(vim.str_byteindex, line, character, encoding == 'utf-16')
  end
  if not ok or type(index) ~= 'number' then
    return #line
  end
  return math.min(index, #line)
end

--- Position params for the cursor of the current window, in the client's position encoding.
--- @param client vim.lsp.Client
function M.position_params(client)
  return vim.lsp.util.make_position_params(0, client.offset_encoding or 'utf-16')
end

return M
