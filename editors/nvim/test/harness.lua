--- Test driver helpers. A test runs in `nvim -l` and drives a second Neovim (`--embed --headless`) over RPC, so
--- the plugin sees real insert mode, real keys and real autocommands.
local H = { passed = 0, failed = 0 }

--- Writes a line to stdout (print() in `nvim -l` leaves the last line without its newline).
function H.say(line)
  io.stdout:write(line, '\n')
  io.stdout:flush()
end

local here = debug.getinfo(1, 'S').source:sub(2)
H.test_dir = vim.fs.dirname(vim.fn.fnamemodify(here, ':p'))
H.plugin_dir = vim.fs.dirname(H.test_dir)

--- Starts the child Neovim with the plugin on its runtimepath.
function H.start()
  local nvim = vim.env.NVIM_BIN or vim.v.progpath
  H.chan = vim.fn.jobstart({ nvim, '--embed', '--headless', '-u', 'NONE', '-i', 'NONE', '-n' }, { rpc = true })
  assert(H.chan > 0, 'cannot start ' .. nvim)
  H.lua(
    [[
      local plugin_dir = ...
      vim.opt.runtimepath:prepend(plugin_dir)
      vim.cmd('filetype on')
      vim.cmd('runtime plugin/copilotd.lua')
      vim.o.swapfile = false
    ]],
    H.plugin_dir
  )
end

function H.stop()
  if H.chan then
    pcall(vim.rpcrequest, H.chan, 'nvim_command', 'qall!')
    vim.fn.jobstop(H.chan)
    H.chan = nil
  end
end

--- Runs Lua in the child and returns its result (nil for a nil/null result, which RPC turns into vim.NIL).
function H.lua(code, ...)
  local result = vim.rpcrequest(H.chan, 'nvim_exec_lua', code, { ... })
  if result == vim.NIL then
    return nil
  end
  return result
end

--- Types keys in the child (asynchronously, like a user).
function H.input(keys)
  vim.rpcrequest(H.chan, 'nvim_input', keys)
end

--- Waits until `check()` (run here) returns true; false on timeout.
function H.wait(timeout_ms, check)
  return vim.wait(timeout_ms, function()
    local ok, value = pcall(check)
    return ok and value
  end, 20)
end

--- Waits until the child has processed all input so far.
function H.settle()
  H.wait(2000, function()
    return not H.lua('return vim.api.nvim_get_mode().blocking')
  end)
  vim.wait(30)
end

function H.suggestion()
  return H.lua("return require('copilotd').get_suggestion()")
end

function H.mode()
  return H.lua('return vim.api.nvim_get_mode().mode')
end

--- The cursor of the child: 0-based row, byte column.
function H.cursor()
  local pos = H.lua('return vim.api.nvim_win_get_cursor(0)')
  return pos[1] - 1, pos[2]
end

function H.lines()
  return H.lua('return vim.api.nvim_buf_get_lines(0, 0, -1, false)')
end

--- The ghost text as drawn: { row, col, inline = first line, lines = virtual lines } or nil when nothing is drawn.
function H.ghost()
  return H.lua([[
    local ns = vim.api.nvim_get_namespaces().copilotd
    local marks = vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })
    if #marks == 0 then return nil end
    if #marks > 1 then return { error = #marks .. ' extmarks' } end
    local row, col, d = marks[1][2], marks[1][3], marks[1][4]
    local lines = {}
    for _, chunks in ipairs(d.virt_lines or {}) do
      lines[#lines + 1] = chunks[1][1]
    end
    return { row = row, col = col, pos = d.virt_text_pos, inline = d.virt_text and d.virt_text[1][1], lines = lines }
  ]])
end

local function report(ok, name, detail)
  if ok then
    H.passed = H.passed + 1
    H.say('ok - ' .. name)
  else
    H.failed = H.failed + 1
    H.say('FAIL - ' .. name .. (detail and (': ' .. detail) or ''))
  end
  return ok
end

function H.check(name, ok, detail)
  return report(not not ok, name, detail)
end

function H.eq(name, actual, expected)
  local ok = vim.deep_equal(actual, expected)
  return report(ok, name, not ok and ('expected ' .. vim.inspect(expected) .. ', got ' .. vim.inspect(actual)) or nil)
end

--- Runs one named group of checks; an error inside counts as a failure and the run goes on.
function H.case(name, fn)
  H.say('# ' .. name)
  local ok, err = xpcall(fn, debug.traceback)
  if not ok then
    report(false, name .. ' (error)', tostring(err))
  end
end

--- Prints the closing count line and exits with the right status.
function H.finish()
  H.stop()
  H.say(('%d passed, %d failed'):format(H.passed, H.failed))
  os.exit(H.failed == 0 and H.passed > 0 and 0 or 1)
end

return H
