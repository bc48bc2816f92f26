--- The ghost-text engine: asks the daemon for an inline completion at the cursor, shows it, keeps it while the
--- user types what it predicts, drops it when the cursor goes elsewhere, and inserts all or part of it on accept.
---
--- At most one suggestion is shown and at most one request is in flight, both for the current buffer; a new
--- request cancels the previous one (`$/cancelRequest`), and an answer is only shown if the buffer and the cursor
--- are still where they were when it was asked for.
local compat = require('copilotd.compat')
local daemon = require('copilotd.daemon')
local render = require('copilotd.render')
local text = require('copilotd.text')

local M = {}

--- LSP error codes that mean "this request was superseded", not a failure.
local CANCELLED = { [-32800] = true, [-32802] = true, [-32801] = true }

--- How long after an answer whose suggestion has more lines to come the daemon is asked for it again.
local MORE_LINES_DELAY_MS = 100

--- Set by `setup()`.
--- @type copilotd.Config
M.config = nil

--- Last error the daemon answered with (for :checkhealth), or nil.
--- @type string?
M.last_error = nil

--- @class copilotd.Shown
--- @field bufnr integer
--- @field row integer   0-based row of the cursor the suggestion continues from
--- @field col integer   byte column of that cursor
--- @field text string   text that accepting inserts at (row, col)
--- @field replace integer bytes after the cursor that a full accept replaces (from the item's range)
--- @field tick integer  b:changedtick when shown
--- @field id integer?    the id the daemon gave the item, echoed back with the person's verdict
--- @field full string   the item's whole text, line breaks as LF; `text` is always its end (the start is in the buffer)
--- @field sent string   the item's whole text as the daemon sent it (its line breaks may be CRLF)
--- @field more boolean  the daemon generates more of it: asked again, it answers with more

--- @type copilotd.Shown?
local shown = nil

--- @type { client: vim.lsp.Client, id: integer?, bufnr: integer }?
local pending = nil

local timer = nil

local function cursor()
  local pos = vim.api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2]
end

local function tick(bufnr)
  return vim.api.nvim_buf_get_changedtick(bufnr)
end

local function in_insert_mode()
  return vim.api.nvim_get_mode().mode:sub(1, 1) == 'i'
end

--- The live copilotd client attached to a buffer, if any.
--- @return vim.lsp.Client?
function M.client(bufnr)
  return daemon.client(bufnr)
end

--- Shows `suggestion`, the end of an item that `item` describes ({ full, sent, id, more } as in copilotd.Shown).
--- A suggestion with more to come is asked for again where it now is, after `MORE_LINES_DELAY_MS`.
local function show(bufnr, row, col, suggestion, replace, item)
  render.show(bufnr, row, col, suggestion, M.config.hl_group)
  shown = {
    bufnr = bufnr,
    row = row,
    col = col,
    text = suggestion,
    replace = replace,
    tick = tick(bufnr),
    id = item.id,
    full = item.full,
    sent = item.sent,
    more = item.more,
  }
  if item.more then
    M.schedule(MORE_LINES_DELAY_MS)
  end
end

--- Whether suggestion `s` still continues the cursor: nothing was typed and the cursor did not move since it was
--- shown.
local function is_current(s)
  local row, col = cursor()
  return row == s.row and col == s.col and tick(s.bufnr) == s.tick
end

--- The table the daemon put first in an item's command arguments, or an empty one.
local function item_argument(item)
  local command = item.command
  local argument = type(command) == 'table' and type(command.arguments) == 'table' and command.arguments[1]
  return type(argument) == 'table' and argument or {}
end

--- An item's text as the daemon sent it, or nil.
--- @param item table LSP InlineCompletionItem
--- @return string?
local function insert_text(item)
  local insert = item.insertText
  if type(insert) == 'table' then
    insert = insert.value
  end
  return type(insert) == 'string' and insert or nil
end

--- The id the daemon put in an item's command (`{ arguments = { { id = n } } }`), or nil.
--- @param item table LSP InlineCompletionItem
--- @return integer?
function M.item_id(item)
  local id = item_argument(item).id
  return type(id) == 'number' and id or nil
end

--- Whether the daemon answered with a suggestion's first lines while it generates the rest
--- (`{ arguments = { { more = true } } }`): asked again at the same place, it answers with more of it.
--- @param item table LSP InlineCompletionItem
--- @return boolean
function M.item_more(item)
  return item_argument(item).more == true
end

--- Tells the daemon what the person did with suggestion `s` (`copilotd/suggestionFeedback`): `kind` is
--- 'accepted', 'acceptedWord', 'acceptedLine' or 'dismissed'; `length` counts the UTF-16 code units of the item's
--- text now in the buffer once `taken` more bytes are inserted.
--- @param s copilotd.Shown
--- @param kind string
--- @param taken integer
local function feedback(s, kind, taken)
  local client = s.id and M.client(s.bufnr)
  if not client or compat.call(client, 'is_stopped') then
    return
  end
  local length = text.utf16_len(text.prefix_of_lf(s.sent, #s.full - #s.text + taken))
  compat.call(client, 'notify', 'copilotd/suggestionFeedback', { id = s.id, kind = kind, length = length })
end

--- Tells the daemon where the cursor of the current buffer is (`copilotd/warm`), so that it can prefill that
--- place's prompt while the person looks before typing. Returns whether it was sent.
--- @return boolean
function M.warm()
  local client = M.client(vim.api.nvim_get_current_buf())
  if not client or not client.initialized or compat.call(client, 'is_stopped') then
    return false
  end
  return compat.call(client, 'notify', 'copilotd/warm', compat.position_params(client)) ~= false
end

local function hide()
  if shown then
    render.clear(shown.bufnr)
    shown = nil
  end
end

local function stop_timer()
  if timer then
    timer:stop()
  end
end

local function cancel_pending()
  local request = pending
  pending = nil
  if request and request.id and not request.client:is_stopped() then
    compat.call(request.client, 'cancel_request', request.id)
  end
end

--- The suggestion shown in the current buffer, or nil. Keys typed ahead of the caller (a mapping) may have changed
--- the buffer or moved the cursor before their autocommands ran: the suggestion is brought up to date first.
--- @return string?
function M.get()
  local bufnr = vim.api.nvim_get_current_buf()
  if shown and shown.bufnr == bufnr and not is_current(shown) then
    M.on_change()
  end
  if shown and shown.bufnr == bufnr then
    return shown.text
  end
  return nil
end

--- Hides the suggestion and forgets any request in flight or waiting for the debounce.
function M.clear()
  stop_timer()
  cancel_pending()
  hide()
end

--- The person dismisses the suggestion: the daemon is told, then it is cleared. Returns whether one was shown.
--- @return boolean
function M.dismiss()
  local dismissed = M.get() ~= nil
  if dismissed then
    feedback(shown, 'dismissed', 0)
  end
  M.clear()
  return dismissed
end

--- What an item means at the cursor: the text to insert there (with LF line breaks) and how many bytes after the
--- cursor it replaces. The item's range may start before the cursor (then its text must begin with what is already
--- typed) and may end after it. Returns nil for items that do not fit the line.
--- @param item table LSP InlineCompletionItem
--- @param line string the cursor's line
--- @param row integer 0-based cursor row
--- @param col integer cursor byte column
--- @param encoding string the client's position encoding
--- @return string?, integer?
function M.item_text(item, line, row, col, encoding)
  local sent = insert_text(item)
  if not sent or sent == '' then
    return nil
  end
  local insert = text.lf(sent)
  local range = item.range
  if type(range) ~= 'table' then
    return insert, 0
  end
  if range.start.line ~= row or range['end'].line ~= row then
    return nil
  end
  local first = compat.byte_index(line, range.start.character, encoding)
  local last = compat.byte_index(line, range['end'].character, encoding)
  if first > col or last < col then
    return nil
  end
  local typed = line:sub(first + 1, col)
  if insert:sub(1, #typed) ~= typed or #insert == #typed then
    return nil
  end
  return insert:sub(#typed + 1), last - col
end

--- The first item of an answer that fits the line, as (text, replace, item), or nil.
local function first_fitting(result, bufnr, row, col, encoding)
  if type(result) ~= 'table' then
    return nil
  end
  local items = vim.islist(result) and result or result.items
  if type(items) ~= 'table' then
    return nil
  end
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
  for _, item in ipairs(items) do
    if type(item) == 'table' then
      local suggestion, replace = M.item_text(item, line, row, col, encoding)
      if suggestion then
        return suggestion, replace, item
      end
    end
  end
  return nil
end

--- Asks the daemon for a suggestion at the cursor (cancelling the previous request). Only in insert mode: a
--- suggestion is shown and accepted there, at the place between two characters where the next one is typed.
--- @param trigger_kind integer? 1 invoked (default), 2 automatic
--- @return boolean sent
function M.request(trigger_kind)
  stop_timer()
  cancel_pending()
  local bufnr = vim.api.nvim_get_current_buf()
  local client = M.client(bufnr)
  if not client or not in_insert_mode() then
    return false
  end
  local row, col = cursor()
  local asked_at = tick(bufnr)
  local params = compat.position_params(client)
  params.context = { triggerKind = trigger_kind or 1 }
  local request = { client = client, bufnr = bufnr }
  pending = request
  local ok, id = compat.call(client, 'request', 'textDocument/inlineCompletion', params, function(err, result)
    if pending ~= request then
      return -- superseded or cancelled
    end
    pending = nil
    if err then
      if not CANCELLED[err.code] then
        M.last_error = err.message or vim.inspect(err)
      end
      return
    end
    if vim.api.nvim_get_current_buf() ~= bufnr or tick(bufnr) ~= asked_at then
      return
    end
    local now_row, now_col = cursor()
    if now_row ~= row or now_col ~= col then
      return
    end
    local suggestion, replace, item = first_fitting(result, bufnr, row, col, client.offset_encoding or 'utf-16')
    hide()
    if suggestion then
      local sent = insert_text(item)
      local described = { id = M.item_id(item), full = text.lf(sent), sent = sent, more = M.item_more(item) }
      show(bufnr, row, col, suggestion, replace, described)
    end
  end, bufnr)
  if not ok then
    pending = nil
    return false
  end
  request.id = id
  return true
end

--- Starts (or restarts) the timer for an automatic request: after the debounce, or after `delay_ms`.
--- @param delay_ms integer?
function M.schedule(delay_ms)
  stop_timer()
  timer = timer or compat.uv.new_timer()
  local bufnr = vim.api.nvim_get_current_buf()
  timer:start(
    delay_ms or M.config.debounce_ms,
    0,
    vim.schedule_wrap(function()
      if vim.api.nvim_get_current_buf() == bufnr and in_insert_mode() then
        M.request(2)
      end
    end)
  )
end

--- After a text change or cursor move: keep the suggestion if the cursor is still at its start (our own accept),
--- shorten it if the user typed what it predicts, otherwise drop it and (in insert mode) ask again after a pause.
function M.on_change()
  local bufnr = vim.api.nvim_get_current_buf()
  if shown and shown.bufnr == bufnr then
    if is_current(shown) then
      return
    end
    local row, col = cursor()
    if row == shown.row and col > shown.col and tick(bufnr) ~= shown.tick then
      local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
      local typed = line:sub(shown.col + 1, col)
      if #typed < #shown.text and shown.text:sub(1, #typed) == typed then
        show(bufnr, row, col, shown.text:sub(#typed + 1), shown.replace, shown)
        return
      end
    end
  end
  M.clear()
  if M.config.auto_trigger and in_insert_mode() and M.client(bufnr) then
    M.schedule()
  end
end

--- Inserts `part`, a prefix of the shown suggestion, at its position; the rest stays shown. The daemon is told
--- (`kind` 'acceptedWord' or 'acceptedLine' for a part, 'accepted' once all of it is in).
--- @param part string
--- @param kind string?
--- @return boolean inserted
function M.accept_part(part, kind)
  local s = shown
  if not s or s.bufnr ~= vim.api.nvim_get_current_buf() or part == '' then
    return false
  end
  stop_timer()
  cancel_pending()
  hide()
  local whole = #part >= #s.text
  feedback(s, whole and 'accepted' or kind or 'acceptedWord', #part)
  local lines = vim.split(part, '\n', { plain = true })
  vim.api.nvim_buf_set_text(s.bufnr, s.row, s.col, s.row, s.col + (whole and s.replace or 0), lines)
  local row, col = text.end_position(s.row, s.col, part)
  vim.api.nvim_win_set_cursor(0, { row + 1, col })
  if not whole then
    show(s.bufnr, row, col, s.text:sub(#part + 1), s.replace, s)
  end
  return true
end

function M.accept()
  local s = M.get()
  return s ~= nil and M.accept_part(s, 'accepted')
end

function M.accept_word()
  local s = M.get()
  return s ~= nil and M.accept_part(text.next_word(s), 'acceptedWord')
end

function M.accept_line()
  local s = M.get()
  return s ~= nil and M.accept_part(text.next_line(s), 'acceptedLine')
end

--- Whether a request is in flight (for tests and :checkhealth).
function M.busy()
  return pending ~= nil
end

return M
