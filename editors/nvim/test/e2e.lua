--- End-to-end test with the real daemon and model: a Python file from fixtures/ with a function body cut out,
--- the cursor at the start of that body. The ghost text must equal `copilotd complete --json` at that position,
--- and the accept/dismiss functions must do what they say.
---
--- Run through test/run.sh, or: COPILOTD_BIN=... [COPILOTD_MODEL=...] nvim --headless -u NONE -l test/e2e.lua
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'harness.lua'))
package.path = H.plugin_dir .. '/lua/?.lua;' .. package.path

local bin = vim.env.COPILOTD_BIN
local model = vim.env.COPILOTD_MODEL
local max_tokens = tonumber(vim.env.COPILOTD_E2E_MAX_TOKENS or '32')
-- Generous: a debug build on a busy 2-core machine needs tens of seconds for a cold prompt.
local timeout_ms = tonumber(vim.env.COPILOTD_E2E_TIMEOUT_MS or '300000')
if not bin or vim.fn.executable(bin) == 0 then
  H.say('FAIL - COPILOTD_BIN must name the copilotd binary (got ' .. tostring(bin) .. ')')
  H.say('0 passed, 1 failed')
  os.exit(1)
end

-- The workspace: a copy of the fixture with the body of `merge` cut out, leaving an indented empty line.
local fixture = vim.fs.joinpath(H.plugin_dir, '..', '..', 'fixtures', 'editors', 'inventory.py')
local source = vim.fn.readfile(fixture)
local docstring = '    """A new warehouse holding the stock of both."""'
local body_row -- 1-based line of the cut body
for i, line in ipairs(source) do
  if line == docstring then
    body_row = i + 1
  end
end
assert(body_row, 'fixture changed: docstring of merge() not found')
local lines = vim.list_slice(source, 1, body_row - 1)
lines[#lines + 1] = '    '
local workspace = vim.fn.tempname()
vim.fn.mkdir(workspace .. '/.git', 'p')
local file = workspace .. '/inventory.py'
vim.fn.writefile(lines, file)
local body_col = 4 -- byte column after the indentation

--- The daemon's completion at the cursor, from the command line.
local function cli_completion()
  local cmd = {
    bin, 'complete', '--workspace', workspace, '--file', 'inventory.py',
    '--line', tostring(body_row), '--column', tostring(body_col + 1),
    '--max-tokens', tostring(max_tokens), '--json',
  }
  if model then
    vim.list_extend(cmd, { '--model', model })
  end
  local result = vim.system(cmd, { text = true }):wait(timeout_ms)
  assert(result.code == 0, 'copilotd complete failed: ' .. tostring(result.stderr))
  local out = vim.split(vim.trim(result.stdout), '\n')
  return vim.json.decode(out[#out]).text
end

local function wait_suggestion()
  return H.wait(timeout_ms, function()
    return H.suggestion() ~= nil
  end)
end

--- Waits until the suggestion shown is `whole`: the daemon may answer with its first lines first, and the
--- plugin asks again for the rest.
local function wait_whole(whole)
  return H.wait(timeout_ms, function()
    return H.suggestion() == whole
  end)
end

--- Puts the cursor at the start of the cut body in insert mode.
local function enter_body()
  H.input('<Esc>')
  H.wait(2000, function()
    return H.mode() == 'n'
  end)
  H.lua('vim.api.nvim_win_set_cursor(0, { ... })', body_row, 0)
  H.input('A')
  return H.wait(2000, function()
    return H.mode() == 'i' and select(2, H.cursor()) == body_col
  end)
end

local expected
H.case('daemon completion from the command line', function()
  local started = vim.uv.hrtime()
  expected = cli_completion()
  H.say(('# copilotd complete: %s (%.1f s)'):format(vim.inspect(expected), (vim.uv.hrtime() - started) / 1e9))
  H.check('the daemon completes the body', type(expected) == 'string' and expected ~= '', vim.inspect(expected))
end)

H.start()
H.lua(
  [[
    local bin, model, max_tokens, file = ...
    require('copilotd').setup({
      cmd = { bin, '--stdio' },
      model = model ~= '' and model or nil,
      max_tokens = max_tokens,
      -- The whole prompt, as `copilotd complete` reads it (a slow machine would cut it).
      prompt_latency_ms = 0,
      debounce_ms = 50,
    })
    vim.cmd.edit(file)
  ]],
  bin,
  model or '',
  max_tokens,
  file
)

H.case('the daemon starts and loads the model', function()
  H.check('client attached', H.wait(30000, function()
    return H.lua("local c = vim.lsp.get_clients({ name = 'copilotd', bufnr = 0 })[1] return c ~= nil and c.initialized")
  end))
  local ready = H.wait(timeout_ms, function()
    local status = H.lua("return require('copilotd').status(5000)")
    return status and (status.modelState == nil or status.modelState == 'ready')
  end)
  H.check('model ready (copilotd/status)', ready, vim.inspect(H.lua("return { require('copilotd').status(5000) }")))
end)

H.case('ghost text appears at the function body and equals the daemon completion', function()
  H.check('insert mode at the body', enter_body())
  local started = vim.uv.hrtime()
  H.check('suggestion appears while typing stops', wait_suggestion())
  H.say(('# first suggestion after %.1f s'):format((vim.uv.hrtime() - started) / 1e9))
  local first = H.suggestion()
  H.check('it begins copilotd complete', expected:sub(1, #first) == first, vim.inspect(first))
  H.check('it grows to copilotd complete', wait_whole(expected), vim.inspect(H.suggestion()))
  H.say(('# whole suggestion after %.1f s'):format((vim.uv.hrtime() - started) / 1e9))
  local parts = vim.split(expected or '', '\n', { plain = true })
  H.eq('drawn: first line inline, the rest as virtual lines', H.ghost(), {
    row = body_row - 1,
    col = body_col,
    pos = 'inline',
    inline = parts[1],
    lines = vim.list_slice(parts, 2),
  })
end)

H.case('leaving insert mode and dismiss() clear it', function()
  H.input('<Esc>')
  H.wait(2000, function()
    return H.mode() == 'n'
  end)
  H.eq('cleared on InsertLeave', { H.suggestion(), H.ghost() }, {})
  enter_body()
  H.check('same suggestion again', wait_whole(expected), vim.inspect(H.suggestion()))
  H.lua("require('copilotd').dismiss()")
  H.eq('dismiss() clears', { H.suggestion(), H.ghost() }, {})
end)

--- `buf_lines` with `str` inserted at 1-based row `row`, byte column `col`.
local function with_inserted(buf_lines, row, col, str)
  local line = buf_lines[row]
  local out = vim.list_slice(buf_lines, 1, row - 1)
  vim.list_extend(out, vim.split(line:sub(1, col) .. str .. line:sub(col + 1), '\n', { plain = true }))
  return vim.list_extend(out, vim.list_slice(buf_lines, row + 1))
end

H.case('accept_word, accept_line and accept insert what they say', function()
  local text = require('copilotd.text')
  H.check('request() sends', H.lua("return require('copilotd').request()"))
  H.check('request() shows the same suggestion', wait_whole(expected), vim.inspect(H.suggestion()))
  local word = text.next_word(expected)
  local line = text.next_line(expected:sub(#word + 1))
  local rest = expected:sub(#word + #line + 1)
  H.check('the completion has a word, a line and more', word ~= '' and line ~= '' and rest ~= '', vim.inspect(expected))
  local before = H.lines()

  H.lua("require('copilotd').accept_word()")
  H.eq('accept_word inserts the next word only', H.lines(), with_inserted(before, body_row, body_col, word))
  H.eq('the rest stays shown after accept_word', H.suggestion(), expected:sub(#word + 1))
  H.eq('cursor after the word', { H.cursor() }, { text.end_position(body_row - 1, body_col, word) })

  H.lua("require('copilotd').accept_line()")
  H.eq('accept_line inserts the line only', H.lines(), with_inserted(before, body_row, body_col, word .. line))
  H.eq('the rest stays shown after accept_line', H.suggestion(), rest)
  local row, col = text.end_position(body_row - 1, body_col, word .. line)
  local parts = vim.split(rest, '\n', { plain = true })
  H.eq('the rest is drawn at the cursor', H.ghost(), {
    row = row,
    col = col,
    pos = 'inline',
    inline = parts[1],
    lines = vim.list_slice(parts, 2),
  })
  H.settle()
  H.eq('still shown after the editor processed the edits', H.suggestion(), rest)

  H.eq('accept leaves nothing shown', H.lua("require('copilotd').accept() return require('copilotd').get_suggestion()"), nil)
  H.eq('accept inserts the whole completion', H.lines(), with_inserted(before, body_row, body_col, expected))
  H.eq('cursor at its end', { H.cursor() }, { text.end_position(body_row - 1, body_col, expected) })
end)

H.case('the statusline shows speed and acceptance', function()
  local shown = H.wait(10000, function()
    return H.lua("return require('copilotd').statusline()"):match('^copilotd [%d.]+ tok/s ×[%d.]+$') ~= nil
  end)
  H.check('statusline() has tok/s and acceptance', shown, H.lua("return require('copilotd').statusline()"))
  local status = H.lua("return require('copilotd').status(5000)")
  local expected = ('copilotd %.1f tok/s ×%.2f'):format(status.tokensPerSecond, status.acceptanceLength)
  H.wait(5000, function()
    return H.lua("return require('copilotd').statusline()") == expected
  end)
  H.eq('the figures are the daemon status', H.lua("return require('copilotd').statusline()"), expected)
end)

H.case(':CopilotdReindex rebuilds the workspace index', function()
  H.input('<Esc>')
  H.lua([[
    _G.notified = {}
    vim.notify = function(msg) table.insert(_G.notified, msg) end
  ]])
  H.lua('vim.cmd.CopilotdReindex()')
  H.eq('the command reports the re-index', H.lua('return _G.notified'), { 'copilotd: re-indexing the workspace' })
  local ready = H.wait(timeout_ms, function()
    local status = H.lua("return require('copilotd').status(5000)")
    return status and status.indexState == 'ready' and status.indexedFiles == 1
  end)
  H.check('indexed again', ready, vim.inspect(H.lua("return { require('copilotd').status(5000) }")))
end)

H.case(':checkhealth copilotd shows the binary, the kernel and the calibration', function()
  H.lua('vim.cmd.checkhealth("copilotd")')
  local report = table.concat(H.lines(), '\n')
  H.check('binary found', report:find('found: ', 1, true) and report:find(bin, 1, true), report)
  H.check('kernel shown', report:match('kernel: [%w%-_]+') ~= nil, report)
  H.check('calibration shown', report:match('cost calibration: %a+') ~= nil, report)
  H.check('no errors', not report:find('ERROR', 1, true), report)
end)

--- The copilotd processes the child Neovim runs.
local function daemons()
  return H.lua([[
    return vim.tbl_filter(function(pid)
      return (vim.api.nvim_get_proc(pid) or {}).name == 'copilotd'
    end, vim.api.nvim_get_proc_children(vim.fn.getpid()))
  ]])
end

--- Waits until the daemon's status for the current buffer satisfies `ready(status)`.
local function wait_status(ready)
  return H.wait(timeout_ms, function()
    local status = H.lua("return require('copilotd').status(5000)")
    return status and ready(status)
  end)
end

local function both_folders_indexed(status)
  return status.indexedFolders == 2 and status.indexState == 'ready'
end

local function client_id()
  return H.lua("local c = require('copilotd.suggestion').client(0) return c and c.initialized and c.id")
end

local second_workspace = vim.fn.tempname()
vim.fn.mkdir(second_workspace .. '/.git', 'p')
vim.fn.writefile({ 'def double(x):', '    return 2 * x', '' }, second_workspace .. '/tools.py')

H.case('a file of a second project root is served by the same daemon, which indexes both', function()
  H.lua('vim.o.hidden = true vim.cmd.buffer(vim.fn.bufnr(...))', file)
  local first = client_id()
  H.check('the first file is served', first ~= nil)
  H.lua('vim.cmd.edit(...)', second_workspace .. '/tools.py')
  H.check('attached', H.wait(30000, client_id))
  H.eq('the same client', client_id(), first)
  H.eq('one copilotd process', #daemons(), 1)
  H.check('both folders indexed (copilotd/status)', wait_status(both_folders_indexed),
    vim.inspect(H.lua("return { require('copilotd').status(5000) }")))
  H.lua('vim.cmd.buffer(vim.fn.bufnr(...))', file)
end)

H.case('killed, the daemon is told stopped; :CopilotdRestart brings completions back', function()
  H.lua([[
    _G.notified = {}
    vim.notify = function(msg) table.insert(_G.notified, msg) end
  ]])
  local killed = daemons()[1]
  H.lua("vim.uv.kill(..., 'sigkill')", killed)
  local function told()
    return vim.tbl_filter(function(msg)
      return msg:find(':CopilotdRestart', 1, true) ~= nil
    end, H.lua('return _G.notified'))
  end
  H.check('told', H.wait(10000, function()
    return #told() > 0
  end))
  vim.wait(500)
  H.eq('once', told(), { 'copilotd stopped unexpectedly (signal 9): no completions until :CopilotdRestart' })
  H.eq('the statusline says stopped', H.lua("return require('copilotd').statusline()"), 'copilotd: stopped')
  H.eq('no daemon runs', daemons(), {})

  H.lua('vim.cmd.CopilotdRestart()')
  H.check('a new daemon attached', H.wait(30000, client_id))
  local pids = daemons()
  H.check('one new copilotd process', #pids == 1 and pids[1] ~= killed, vim.inspect(pids))
  H.check('model ready, both folders indexed again', wait_status(function(status)
    return (status.modelState == nil or status.modelState == 'ready') and both_folders_indexed(status)
  end), vim.inspect(H.lua("return { require('copilotd').status(5000) }")))
  H.lua('vim.api.nvim_buf_set_lines(0, 0, -1, false, ...)', lines)
  H.check('insert mode at the body', enter_body())
  H.check('the same completion as before', wait_whole(expected), vim.inspect(H.suggestion()))
  H.input('<Esc>')
end)

H.finish()
