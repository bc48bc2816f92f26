--- Pure text helpers for partial acceptance of a suggestion.
local M = {}

--- The next word of a suggestion: leading whitespace (newlines included), then either a run of identifier
--- characters or a run of other non-space characters. Multi-byte characters are never split (their bytes are all
--- >= 0x80 and fall in the second class together).
--- @param text string
--- @return string
function M.next_word(text)
  local space = text:match('^%s*')
  local rest = text:sub(#space + 1)
  local word = rest:match('^[%w_]+') or rest:match('^[^%w_%s]+') or ''
  return space .. word
end

--- The rest of the current line of a suggestion, with its line break: the text through the first newline that
--- follows visible text. If the suggestion is a single line, all of it.
--- @param text string
--- @return string
function M.next_line(text)
  local visible = text:find('%S')
  if not visible then
    return text
  end
  local newline = text:find('\n', visible, true)
  return newline and text:sub(1, newline) or text
end

--- `s` with its CRLF line breaks as LF: a buffer holds lines, whatever its 'fileformat'.
--- @param s string
--- @return string
function M.lf(s)
  return (s:gsub('\r\n', '\n'))
end

--- The beginning of `s` that is the first `n` bytes of `M.lf(s)`.
--- @param s string
--- @param n integer
--- @return string
function M.prefix_of_lf(s, n)
  local i = 1
  for _ = 1, n do
    i = i + (s:sub(i, i + 1) == '\r\n' and 2 or 1)
  end
  return s:sub(1, i - 1)
end

--- Length of UTF-8 `s` in UTF-16 code units (LSP's default unit): two for characters beyond the BMP (4-byte
--- sequences), one for every other character.
--- @param s string
--- @return integer
function M.utf16_len(s)
  local units = 0
  for i = 1, #s do
    local byte = s:byte(i)
    if byte < 0x80 or byte >= 0xC0 then
      units = units + (byte >= 0xF0 and 2 or 1)
    end
  end
  return units
end

--- The position after inserting `inserted` at (row, col) (0-based row, byte col).
--- @return integer row, integer col
function M.end_position(row, col, inserted)
  local lines = vim.split(inserted, '\n', { plain = true })
  if #lines == 1 then
    return row, col + #inserted
  end
  return row + #lines - 1, #lines[#lines]
end

return M
