--- Plugin tests against the in-process fake server (test/fake_server.lua): request timing and cancellation,
--- rendering, partial accepts, clearing rules, keymaps, error paths, health.
--- Run: nvim --headless -u NONE -l editors/nvim/test/unit.lua
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'harness.lua'))

-- Pure helpers, run here in the driver.
package.path = H.plugin_dir .. '/lua/?.lua;' .. H.plugin_dir .. '/lua/?/init.lua;' .. package.path
local text = require('copilotd.text')

H.case('text splitting', function()
  H.eq('word: identifier', text.next_word('return a'), 'return')
  H.eq('word: leading space and newline', text.next_word('\n    x = 1'), '\n    x')
  H.eq('word: punctuation run', text.next_word('"""Doc."""'), '"""')
  H.eq('word: multibyte kept whole', text.next_word('éé x'), 'éé')
  H.eq('word: only space', text.next_word('  '), '  ')
  H.eq('line: through newline', text.next_line('a + b\nc'), 'a + b\n')
  H.eq('line: skips a blank first line', text.next_line('\n\n    x\ny'), '\n\n    x\n')
  H.eq('line: single line', text.next_line('x)'), 'x)')
  H.eq('end position, one line', { text.end_position(2, 4, 'ab') }, { 2, 6 })
  H.eq('end position, lines', { text.end_position(2, 4, 'ab\ncde') }, { 3, 3 })
  H.eq('UTF-16 length', text.utf16_len('aé😀'), 4)
end)

H.case('statusline text', function()
  local statusline = require('copilotd.statusline')
  H.eq('speed and acceptance', statusline.format({ modelState = 'ready', tokensPerSecond = 41.24, acceptanceLength = 2.1 }),
    'copilotd 41.2 tok/s ×2.10')
  H.eq('no figures yet', statusline.format({ modelState = 'ready', tokensPerSecond = vim.NIL }), 'copilotd')
  H.eq('model not ready', statusline.format({ modelState = 'loading' }), 'copilotd: model loading')
  H.eq('indexing shown', statusline.format({ modelState = 'ready', indexState = 'indexing' }), 'copilotd indexing')
  H.eq('no status', statusline.format(nil), '')
end)

H.case('config validation', function()
  local config = require('copilotd.config')
  H.check('bad type is an error', not pcall(config.resolve, { debounce_ms = 'x' }))
  H.check('empty cmd is an error', not pcall(config.resolve, { cmd = {} }))
  local resolved = config.resolve({ max_tokens = 12, keymaps = false })
  H.eq('keymaps can be turned off', resolved.keymaps, false)
  H.eq('daemon settings are camelCase', config.daemon_settings(resolved).maxTokens, 12)
  local function latency(opts)
    return config.daemon_settings(config.resolve(opts)).promptLatencyMs
  end
  H.eq('prompt latency is camelCase', latency({ prompt_latency_ms = 800 }), 800)
  H.eq('a prompt latency of 0 (never cut) is sent', latency({ prompt_latency_ms = 0 }), 0)
  H.eq('an unset prompt latency is left to the daemon', latency({}), nil)
  for _, bad in ipairs({ -1, 1.5, 'fast', math.huge, 0 / 0 }) do
    local ok, err = pcall(config.resolve, { prompt_latency_ms = bad })
    H.check(('prompt latency %s is an error'):format(vim.inspect(bad)),
      not ok and err:find('`prompt_latency_ms` must be an integer >= 0 or nil', 1, true), err)
  end
  H.check('a string temperature is an error', not pcall(config.resolve, { temperature = 'hot' }))
  local sampling = config.daemon_settings(config.resolve({ temperature = 0.8, top_p = 0.95, seed = 7 }))
  H.eq('sampling settings', { sampling.temperature, sampling.topP, sampling.seed }, { 0.8, 0.95, 7 })
  local switches = config.daemon_settings(config.resolve({ fim = false, repo_context = true, early_lines = false }))
  H.eq('switches', { switches.fim, switches.repoContext, switches.earlyLines, switches.warm }, { false, true, false, nil })
  H.check('a string switch is an error', not pcall(config.resolve, { warm = 'no' }))
  local ok, err = pcall(config.resolve, { acept = true })
  H.check('an unknown option is an error', not ok and err:find('unknown option `acept`', 1, true), err)
  ok, err = pcall(config.resolve, { keymaps = { accept = 5 } })
  H.check('a key that is not a string is an error', not ok and err:find('keymaps.accept', 1, true), err)
  ok, err = pcall(config.resolve, { keymaps = { acept = '<C-l>' } })
  H.check('an unknown key is an error', not ok and err:find('keymaps.acept', 1, true), err)
  H.eq('a key set to false is fine', config.resolve({ keymaps = { request = false } }).keymaps.request, false)
end)

H.case('a wrong option is reported where setup() is called', function()
  local setup = require('copilotd').setup
  for _, opts in ipairs({ { acept = true }, { debounce_ms = 'x' }, { keymaps = { accept = 5 } } }) do
    -- The line that calls setup(), not a line of the plugin.
    local line
    local ok, err = pcall(function()
      line = debug.getinfo(1, 'l').currentline; setup(opts)
    end)
    H.check('error at the caller: ' .. vim.inspect(opts), not ok and err:find(':' .. line .. ': copilotd:', 1, true), err)
  end
end)

H.case('help file', function()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, 'p')
  vim.fn.writefile(vim.fn.readfile(H.plugin_dir .. '/doc/copilotd.txt'), dir .. '/copilotd.txt')
  H.check('helptags accepts doc/copilotd.txt', pcall(vim.cmd.helptags, dir))
  local tags = table.concat(vim.fn.readfile(dir .. '/tags'), '\n')
  local documented = { 'setup', 'request', 'get_suggestion', 'accept', 'accept_word', 'accept_line', 'dismiss' }
  vim.list_extend(documented, { 'statusline', 'reindex', 'restart' })
  for _, fn in ipairs(documented) do
    H.check('documents copilotd.' .. fn .. '()', tags:find('copilotd.' .. fn .. '()', 1, true))
  end
end)

H.start()
local dir = vim.fn.tempname()
vim.fn.mkdir(dir .. '/.git', 'p')
local file = dir .. '/calc.py'
vim.fn.writefile({ 'def add(a, b):', '' }, file)

H.lua(
  [[
    local fake_path, file = ...
    require('copilotd').setup({
      cmd = dofile(fake_path),
      max_tokens = 24,
      strategy = 'pld',
      debounce_ms = 30,
    })
    -- Completes the word "ret" and says where it was asked: enough to tell requests apart.
    _G.fake.reply = function(params, lines)
      local line = lines[params.position.line + 1] or ''
      local before = line:sub(1, vim.str_byteindex(line, 'utf-16', params.position.character, false))
      if before:match('ret$') then
        local accepted = { title = 'accepted', command = 'copilotd.suggestionAccepted', arguments = { { id = 7 } } }
        return { items = { { insertText = 'urn a + b\n\nprint(add(1, 2))', range = { start = params.position, ['end'] = params.position }, command = accepted } } }
      elseif before:match('FAIL$') then
        return nil, { code = -32603, message = 'boom' }
      elseif before:match('NULL$') then
        return vim.NIL
      elseif before:match('"') then
        -- an item whose range starts at the line start: its text repeats what is typed
        return { items = { { insertText = line .. 'X"', range = { start = { line = params.position.line, character = 0 }, ['end'] = params.position } } } }
      end
      return { items = { { insertText = '#' .. #_G.fake.log, range = { start = params.position, ['end'] = params.position } } } }
    end
    vim.cmd.edit(file)
    vim.bo.autoindent = false
  ]],
  H.test_dir .. '/fake_server.lua',
  file
)

local function requests()
  return H.lua([[
    local out = {}
    for _, m in ipairs(_G.fake.log) do
      if m.method == 'textDocument/inlineCompletion' then out[#out + 1] = m.params end
    end
    return out
  ]])
end

local function logged(method)
  return H.lua(
    [[
      local method, out = ..., {}
      for _, m in ipairs(_G.fake.log) do
        if m.method == method then out[#out + 1] = m.params end
      end
      return out
    ]],
    method
  )
end

H.case('attach', function()
  H.check(
    'client attaches to the python buffer',
    H.wait(3000, function()
      return H.lua("local c = vim.lsp.get_clients({ name = 'copilotd', bufnr = 0 })[1] return c ~= nil and c.initialized")
    end)
  )
  local init = logged('initialize')[1]
  H.eq('initializationOptions', {
    init.initializationOptions.maxTokens,
    init.initializationOptions.strategy,
    init.initializationOptions.languages,
  }, { 24, 'pld', { 'python' } })
  H.eq('workspace folder is the git root', init.workspaceFolders[1].name, dir)
  H.check('client announces inline completion', init.capabilities.textDocument.inlineCompletion ~= nil)
end)

H.case('warm', function()
  H.check(
    'entering the buffer tells the daemon where the cursor is',
    H.wait(3000, function()
      return #logged('copilotd/warm') > 0
    end)
  )
  local uri = logged('textDocument/didOpen')[1].textDocument.uri
  local warm = logged('copilotd/warm')
  H.eq('warm: the document and the cursor', { warm[#warm].textDocument.uri, warm[#warm].position },
    { uri, { line = 0, character = 0 } })
  local before = #warm
  H.lua([[
    vim.cmd.enew()
    vim.cmd.buffer('#')
    vim.api.nvim_win_set_cursor(0, { 1, 4 })
    vim.cmd.enew()
    vim.cmd.buffer('#')
  ]])
  H.check(
    'warm: sent again on coming back',
    H.wait(3000, function()
      return #logged('copilotd/warm') > before
    end)
  )
  warm = logged('copilotd/warm')
  H.eq('warm: at the cursor where the buffer was left', warm[#warm].position, { line = 0, character = 4 })
end)

H.case('typing requests after the debounce and shows ghost text', function()
  H.input('Go    ret')
  H.check(
    'suggestion appears',
    H.wait(3000, function()
      return H.suggestion() ~= nil
    end)
  )
  H.eq('suggestion text', H.suggestion(), 'urn a + b\n\nprint(add(1, 2))')
  H.eq('ghost text drawn', H.ghost(), { row = 2, col = 7, pos = 'inline', inline = 'urn a + b', lines = { '', 'print(add(1, 2))' } })
  local sent = requests()
  local last = sent[#sent]
  H.eq('request position and trigger', { last.position, last.context.triggerKind }, { { line = 2, character = 7 }, 2 })
  H.check('debounced: fewer requests than keys typed', #sent < 7, #sent .. ' requests')
end)

H.case('typing what the suggestion predicts keeps the rest', function()
  local before = #requests()
  H.input('u')
  H.settle()
  H.eq('suggestion shortened', H.suggestion(), 'rn a + b\n\nprint(add(1, 2))')
  vim.wait(150)
  H.eq('no new request', #requests(), before)
  H.eq('ghost follows the cursor', H.ghost().col, 8)
end)

H.case('partial accepts', function()
  H.lua("require('copilotd').accept_word()")
  H.settle()
  H.eq('accept_word inserts the word', H.lines()[3], '    return')
  H.eq('rest still shown', H.suggestion(), ' a + b\n\nprint(add(1, 2))')
  H.eq('cursor after the word', { H.cursor() }, { 2, 10 })
  H.lua("require('copilotd').accept_line()")
  H.settle()
  H.eq('accept_line inserts the line', H.lines(), { 'def add(a, b):', '', '    return a + b', '' })
  H.eq('cursor on the next line', { H.cursor() }, { 3, 0 })
  H.eq('rest still shown after accept_line', H.suggestion(), '\nprint(add(1, 2))')
  H.eq('ghost for the rest', H.ghost(), { row = 3, col = 0, pos = 'inline', inline = '', lines = { 'print(add(1, 2))' } })
  H.eq('still insert mode', H.mode(), 'i')
  H.eq('nothing left after accept', H.lua("require('copilotd').accept() return require('copilotd').get_suggestion()"), nil)
  H.settle()
  H.eq('accept inserts the rest', H.lines(), { 'def add(a, b):', '', '    return a + b', '', 'print(add(1, 2))' })
  -- 'u' was typed through; each accept says how much of the item's text is in the buffer then.
  H.eq('each accept tells the daemon', logged('copilotd/suggestionFeedback'), {
    { id = 7, kind = 'acceptedWord', length = 3 },
    { id = 7, kind = 'acceptedLine', length = 10 },
    { id = 7, kind = 'accepted', length = 27 },
  })
end)

H.case('dismissing tells the daemon', function()
  H.input('<Esc>o    ret')
  H.check('suggestion appears', H.wait(3000, function()
    return H.suggestion() ~= nil
  end))
  H.lua("require('copilotd').dismiss()")
  local sent = logged('copilotd/suggestionFeedback')
  H.eq('dismissal sent', sent[#sent], { id = 7, kind = 'dismissed', length = 0 })
  H.eq('dismiss clears', H.suggestion(), nil)
  H.input('<Esc>')
end)

H.case('moving the cursor and leaving insert mode clear the ghost text', function()
  H.input('<Esc>Go    ret')
  H.wait(3000, function()
    return H.suggestion() ~= nil
  end)
  H.input('<Left>')
  H.check('cursor moved', H.wait(2000, function()
    return select(2, H.cursor()) == 6
  end))
  H.eq('cleared on cursor move', H.suggestion(), nil)
  H.eq('no ghost drawn', H.ghost(), nil)
  H.input('<Right>')
  H.wait(3000, function()
    return H.suggestion() ~= nil
  end)
  H.input('<Esc>')
  H.check('normal mode', H.wait(2000, function()
    return H.mode() == 'n'
  end))
  H.eq('cleared on InsertLeave', H.suggestion(), nil)
  H.eq('no ghost after InsertLeave', H.ghost(), nil)
end)

H.case('stale requests are cancelled and never shown', function()
  H.lua('_G.fake.delay = 400')
  H.input('A')
  H.check('first request in flight', H.wait(2000, function()
    return H.lua("return require('copilotd.suggestion').busy()")
  end))
  local first = #H.lua('return _G.fake.log')
  H.input('x')
  H.check('superseding request sent', H.wait(2000, function()
    return #logged('$/cancelRequest') > 0
  end))
  H.check('a suggestion arrives', H.wait(3000, function()
    return H.suggestion() ~= nil
  end))
  local shown = H.suggestion()
  H.check('the suggestion is from the newest request', tonumber(shown:match('#(%d+)')) > first, shown)
  H.lua('_G.fake.delay = 0')
  H.input('<Esc>')
end)

H.case('UTF-16 positions and ranges that start before the cursor', function()
  H.input('o s = "😀')
  H.check('suggestion appears', H.wait(3000, function()
    return H.suggestion() ~= nil
  end))
  local sent = requests()
  H.eq('character counts UTF-16 units', sent[#sent].position.character, 8)
  H.eq('typed part of the item is not shown again', H.suggestion(), 'X"')
  H.input('<Tab>')
  H.settle()
  H.eq('Tab accepts', H.lua('return vim.api.nvim_get_current_line()'), ' s = "😀X"')
  -- Without automatic requests, so that no suggestion can arrive before the key.
  H.lua("vim.bo.expandtab = false require('copilotd').config.auto_trigger = false")
  H.input('<Esc>o<Tab>')
  H.settle()
  H.eq('Tab without suggestion inserts a tab', H.lua('return vim.api.nvim_get_current_line()'), '\t')
  H.input('<Esc>')
  H.lua("require('copilotd').config.auto_trigger = true")
end)

H.case('errors and empty answers show nothing', function()
  H.input('oFAIL')
  H.check('error recorded', H.wait(3000, function()
    return H.lua("return require('copilotd.suggestion').last_error") == 'boom'
  end))
  H.eq('no suggestion on error', H.suggestion(), nil)
  H.input('<Esc>oNULL')
  vim.wait(300)
  H.settle()
  H.eq('no suggestion for null', H.suggestion(), nil)
  H.input('<Esc>')
  H.settle()
  H.eq('no request in normal mode', H.lua("return require('copilotd').request()"), false)
  H.eq('nothing shown in normal mode', { H.suggestion(), H.ghost() }, {})
  H.lua("require('copilotd').config.auto_trigger = false")
  H.input('A!')
  H.check('request() works again', H.lua("return require('copilotd').request()"))
  H.check('suggestion after request()', H.wait(2000, function()
    return H.suggestion() ~= nil
  end))
  H.lua("require('copilotd').dismiss()")
  H.eq('dismiss clears', { H.suggestion(), H.ghost() }, {})
  H.lua("require('copilotd').config.auto_trigger = true")
  H.input('<Esc>')
end)

H.case('a suggestion with more lines to come is asked for again where it was', function()
  H.lua([[
    local reply = _G.fake.reply
    _G.fake.more_asked = 0
    _G.fake.reply = function(params, lines)
      local line = lines[params.position.line + 1] or ''
      if not line:match('MORE$') then
        return reply(params, lines)
      end
      _G.fake.more_asked = _G.fake.more_asked + 1
      local more = _G.fake.more_asked == 1
      local command = { title = 'accepted', command = 'copilotd.suggestionAccepted', arguments = { { id = 9, more = more } } }
      local text = more and ' = 1' or ' = 1\nmore = 2'
      return { items = { { insertText = text, range = { start = params.position, ['end'] = params.position }, command = command } } }
    end
  ]])
  H.input('oMORE')
  H.check('the rest arrives without a keystroke', H.wait(3000, function()
    return H.suggestion() == ' = 1\nmore = 2'
  end), H.suggestion())
  vim.wait(300)
  H.eq('asked twice at the same place, then no more', H.lua('return _G.fake.more_asked'), 2)
  H.input('<Esc>')
end)

H.case('typing through a suggestion whose rest is still coming brings the rest', function()
  H.lua([[
    local reply = _G.fake.reply
    _G.fake.reply = function(params, lines)
      local line = lines[params.position.line + 1] or ''
      local typed = line:match('GROW(.*)$')
      if not typed then
        return reply(params, lines)
      end
      -- The first answer is the first line, with more to come; every later one the whole rest.
      local whole = ' = 1\ngrow = 2'
      local more = not _G.fake.grown
      _G.fake.grown = true
      local command = { title = 'accepted', command = 'copilotd.suggestionAccepted', arguments = { { id = 11, more = more } } }
      local text = more and ' = 1' or whole:sub(#typed + 1)
      return { items = { { insertText = text, range = { start = params.position, ['end'] = params.position }, command = command } } }
    end
  ]])
  H.input('oGROW')
  H.check('the first line appears', H.wait(3000, function()
    return H.suggestion() == ' = 1'
  end), H.suggestion())
  H.lua('_G.fake.delay = 300')
  H.check('asked again for the rest', H.wait(2000, function()
    return H.lua("return require('copilotd.suggestion').busy()")
  end))
  H.input(' ')
  H.check('the rest arrives after typing through', H.wait(3000, function()
    return H.suggestion() == '= 1\ngrow = 2'
  end), H.suggestion())
  H.lua('_G.fake.delay = 0')
  H.input('<Esc>')
end)

H.case('keys typed ahead of the accept key count', function()
  H.input('<Esc>Go    ret')
  H.check('suggestion appears', H.wait(3000, function()
    return H.suggestion() ~= nil
  end))
  -- One batch of keys: Tab runs before the autocommands of the key typed before it.
  H.input('X<Tab>')
  H.settle()
  H.eq('a suggestion typed away is not inserted', H.lua('return vim.api.nvim_get_current_line()'), '    retX\t')
  H.input('<Esc>Go    ret')
  H.check('suggestion appears again', H.wait(3000, function()
    return H.suggestion() ~= nil
  end))
  H.input('u<Tab>')
  H.settle()
  H.eq('a suggestion typed through is accepted after what was typed', H.lines()[#H.lines()], 'print(add(1, 2))')
  H.eq('its line', H.lines()[#H.lines() - 2], '    return a + b')
  local sent = logged('copilotd/suggestionFeedback')
  H.eq('accepted once, the typed part counted', sent[#sent], { id = 7, kind = 'accepted', length = 27 })
  H.input('<Esc>')
end)

H.case('a suggestion with CRLF line breaks is shown and inserted as lines', function()
  H.lua([[
    local reply = _G.fake.reply
    _G.fake.reply = function(params, lines)
      local line = lines[params.position.line + 1] or ''
      if not line:match('CRLF\r?$') then
        return reply(params, lines)
      end
      local command = { title = 'accepted', command = 'copilotd.suggestionAccepted', arguments = { { id = 12 } } }
      return { items = { { insertText = ' = 1\r\nnext = 2', range = { start = params.position, ['end'] = params.position }, command = command } } }
    end
    vim.bo.fileformat = 'dos'
  ]])
  H.input('GoCRLF')
  H.check('suggestion appears', H.wait(3000, function()
    return H.suggestion() ~= nil
  end))
  H.eq('shown without carriage returns', { H.ghost().inline, H.ghost().lines }, { ' = 1', { 'next = 2' } })
  H.lua("require('copilotd').accept_line()")
  H.lua("require('copilotd').accept()")
  H.settle()
  H.eq('inserted as lines', vim.list_slice(H.lines(), #H.lines() - 1), { 'CRLF = 1', 'next = 2' })
  -- Lengths count the item's text as the daemon sent it, carriage returns included.
  local sent = logged('copilotd/suggestionFeedback')
  H.eq('feedback lengths', vim.list_slice(sent, #sent - 1), {
    { id = 12, kind = 'acceptedLine', length = 6 },
    { id = 12, kind = 'accepted', length = 14 },
  })
  H.lua("vim.bo.fileformat = 'unix'")
  H.input('<Esc>')
end)

H.case('tabs in ghost text take the width they will have in the buffer', function()
  H.lua([[
    local reply = _G.fake.reply
    _G.fake.reply = function(params, lines)
      local line = lines[params.position.line + 1] or ''
      if not line:match('TAB$') then
        return reply(params, lines)
      end
      return { items = { { insertText = '\tx\n\ty', range = { start = params.position, ['end'] = params.position } } } }
    end
    vim.bo.expandtab, vim.bo.tabstop = false, 8
    vim.api.nvim_buf_set_lines(0, -1, -1, false, { 'a\tTAB' })
    vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(0), 0 })
  ]])
  H.input('A')
  H.settle()
  H.check('request() in insert mode', H.lua("return require('copilotd').request()"))
  H.check('suggestion appears', H.wait(3000, function()
    return H.suggestion() ~= nil
  end))
  -- The cursor is at display column 11: the tab reaches the stop at 16.
  H.eq('the first line from the cursor, the others from the margin', { H.ghost().inline, H.ghost().lines },
    { string.rep(' ', 5) .. 'x', { string.rep(' ', 8) .. 'y' } })
  H.input('<Esc>')
end)

H.case('reloading the buffer keeps it hooked up', function()
  H.input('<Esc>')
  H.lua('vim.cmd.write() vim.cmd.edit({ bang = true })')
  H.input('Go    ret')
  H.check('suggestion appears after :edit!', H.wait(3000, function()
    return H.suggestion() ~= nil
  end))
  H.input('<Tab>')
  H.settle()
  H.eq('Tab accepts after :edit!', H.lines()[#H.lines() - 2], '    return a + b')
  H.input('<Esc>')
end)

H.case('setup() again reaches the running daemon and the attached buffers', function()
  local options = "{ cmd = require('copilotd').config.cmd, max_tokens = %d, strategy = 'pld', debounce_ms = 30%s }"
  H.lua('require("copilotd").setup(' .. options:format(5, ", keymaps = { accept = '<C-l>' }") .. ')')
  local sent = logged('workspace/didChangeConfiguration')
  H.eq('the new daemon options are sent', sent[#sent] and sent[#sent].settings.copilotd.maxTokens, 5)
  H.eq('options left out are sent as null', sent[#sent].settings.copilotd.temperature, vim.NIL)
  local function action(lhs)
    return H.lua("return vim.fn.maparg(..., 'i', false, true).desc", lhs)
  end
  H.eq('the old accept key is unmapped', action('<Tab>') == 'copilotd: accept suggestion', false)
  H.eq('the new accept key is mapped', action('<C-l>'), 'copilotd: accept suggestion')
  H.lua('require("copilotd").setup(' .. options:format(24, '') .. ')')
  H.eq('the first key is back', action('<Tab>'), 'copilotd: accept suggestion')
  H.eq('the other key is gone', action('<C-l>') == 'copilotd: accept suggestion', false)
end)

--- Opens `path` in the child and waits until the daemon serves it; returns the id of the client attached.
local function open_served(path)
  H.lua('local b = vim.fn.bufnr(...) if b > 0 then vim.cmd.buffer(b) else vim.cmd.edit(...) end', path)
  H.wait(3000, function()
    return H.lua("local c = vim.lsp.get_clients({ name = 'copilotd', bufnr = 0 })[1] return c ~= nil and c.initialized")
  end)
  return H.lua("local c = require('copilotd.suggestion').client(0) return c and c.id")
end

local other_root = vim.fn.tempname()
vim.fn.mkdir(other_root .. '/.git', 'p')

H.case('a buffer of another root is served by the same daemon, its root a workspace folder once', function()
  H.lua('vim.o.hidden = true')
  local first = open_served(file)
  local starts = #logged('initialize')
  H.eq('the second root reuses the daemon', open_served(other_root .. '/a.py'), first)
  H.eq('a third file there too', open_served(other_root .. '/b.py'), first)
  H.eq('no daemon started', #logged('initialize'), starts)
  H.eq('the root is added once', logged('workspace/didChangeWorkspaceFolders'), {
    { event = { added = { { uri = vim.uri_from_fname(other_root), name = other_root } }, removed = {} } },
  })
  H.eq('the client knows both folders', H.lua(
    "return vim.tbl_map(function(f) return f.name end, require('copilotd.suggestion').client(0).workspace_folders)"
  ), { dir, other_root })
  open_served(file)
end)

H.case('the daemon exiting unexpectedly is told once; :CopilotdRestart starts it again for every buffer', function()
  H.lua([[
    _G.notified = {}
    vim.notify = function(msg) table.insert(_G.notified, msg) end
  ]])
  local function ours()
    return vim.tbl_filter(function(msg)
      return msg:find('^copilotd') ~= nil
    end, H.lua('return _G.notified'))
  end
  local function statusline()
    return H.lua("return require('copilotd').statusline()")
  end
  local starts = #logged('initialize')
  -- Work the daemon began and never ended: not shown once another daemon runs.
  H.lua("_G.fake.notify('$/progress', { token = 'index', value = { kind = 'begin', title = 'indexing /w' } })")
  H.lua('_G.fake.crash(137, 9)')
  H.check('told', H.wait(3000, function()
    return #ours() > 0
  end))
  H.eq('once, naming the command', ours(), { 'copilotd stopped unexpectedly (signal 9): no completions until :CopilotdRestart' })
  H.eq('the statusline says so', statusline(), 'copilotd: stopped')
  H.eq('no client for the buffer', H.lua("return require('copilotd.suggestion').client(0) == nil"), true)
  H.lua('vim.cmd.edit({ bang = true })')
  H.eq('reloading the buffer starts no daemon', #logged('initialize'), starts)

  H.lua('_G.notified = {} vim.cmd.CopilotdRestart()')
  H.eq('the command says it restarts', ours(), { 'copilotd: restarting the daemon' })
  H.check('a client again', H.wait(3000, function()
    return H.lua("local c = require('copilotd.suggestion').client(0) return c ~= nil and c.initialized")
  end))
  local init = logged('initialize')
  H.eq('one daemon started', #init, starts + 1)
  H.eq('with the same settings', init[#init].initializationOptions.maxTokens, 24)
  H.eq('with the same workspace folders', vim.tbl_map(function(f)
    return f.name
  end, init[#init].workspaceFolders), { dir, other_root })
  H.eq('attached to every buffer it served', H.lua([[
    local id = require('copilotd.suggestion').client(0).id
    local served = 0
    for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
      served = served + (vim.lsp.buf_is_attached(bufnr, id) and 1 or 0)
    end
    return served
  ]]), 3)
  H.check('the statusline shows it running, not the work of the daemon that died', H.wait(3000, function()
    return statusline() == 'copilotd'
  end), statusline())
  H.input('Go    ret')
  H.check('suggestions again', H.wait(3000, function()
    return H.suggestion() ~= nil
  end))
  H.input('<Esc>')
end)

H.case(':CopilotdRestart replaces a running daemon; a daemon stopped on purpose is not an error', function()
  local function statusline()
    return H.lua("return require('copilotd').statusline()")
  end
  H.lua('_G.notified = {}')
  local before = H.lua("return require('copilotd.suggestion').client(0).id")
  H.lua('vim.cmd.CopilotdRestart()')
  H.check('a new client', H.wait(3000, function()
    return H.lua("local c = require('copilotd.suggestion').client(0) return c and c.initialized and c.id") ~= before
  end))
  H.check('the old one is shut down', H.wait(3000, function()
    return H.lua('return vim.lsp.get_client_by_id(...) == nil', before)
  end))
  H.lua("require('copilotd.suggestion').client(0):stop()")
  H.check('stopped on purpose: the statusline says so', H.wait(3000, function()
    return statusline() == 'copilotd: stopped'
  end), statusline())
  H.eq('only the restart was told', H.lua('return _G.notified'), { 'copilotd: restarting the daemon' })
  H.lua('vim.cmd.CopilotdRestart()')
  H.check('running again', H.wait(3000, function()
    return H.lua("local c = require('copilotd.suggestion').client(0) return c ~= nil and c.initialized")
  end))
end)

H.case('a root opened while the daemon starts reaches it once it answered initialize', function()
  local third_root = vim.fn.tempname()
  vim.fn.mkdir(third_root .. '/.git', 'p')
  H.lua('_G.fake.delays.initialize = 300')
  local starts = #logged('initialize')
  -- A new daemon: the running one stopped, then setup() again; its answer to initialize comes after the edit.
  H.lua([[
    require('copilotd.suggestion').client(0):stop()
    local setup = require('copilotd').setup
    setup({ cmd = require('copilotd').config.cmd, max_tokens = 24, strategy = 'pld', debounce_ms = 30 })
    vim.cmd.edit(...)
  ]], third_root .. '/c.py')
  H.check('initialized', H.wait(3000, function()
    return H.lua("local c = require('copilotd.suggestion').client(0) return c ~= nil and c.initialized")
  end))
  H.lua('_G.fake.delays.initialize = nil')
  local order = H.lua([[
    local out = {}
    for _, m in ipairs(_G.fake.log) do
      if m.method == 'initialize' or m.method == 'initialized' or m.method == 'workspace/didChangeWorkspaceFolders' then
        out[#out + 1] = m.method
      end
    end
    return out
  ]])
  H.eq('after initialized, as a new folder', vim.list_slice(order, #order - 2),
    { 'initialize', 'initialized', 'workspace/didChangeWorkspaceFolders' })
  local added = logged('workspace/didChangeWorkspaceFolders')
  H.eq('the new root', added[#added].event.added, { { uri = vim.uri_from_fname(third_root), name = third_root } })
  H.eq('one daemon', #logged('initialize'), starts + 1)
  open_served(file)
end)

H.case('a daemon that exits after a newer one started is not taken for stopped', function()
  H.lua('_G.fake.delays.shutdown = 300')
  local before = H.lua("return require('copilotd.suggestion').client(0).id")
  H.lua([[
    require('copilotd.suggestion').client(0):stop()
    require('copilotd').setup({ cmd = require('copilotd').config.cmd, max_tokens = 24, strategy = 'pld', debounce_ms = 30 })
  ]])
  H.check('the new one runs', H.wait(3000, function()
    local id = H.lua("local c = require('copilotd.suggestion').client(0) return c and c.initialized and c.id")
    return id and id ~= before
  end))
  H.check('then the old one exits', H.wait(3000, function()
    return H.lua('return vim.lsp.get_client_by_id(...) == nil', before)
  end))
  H.lua('_G.fake.delays.shutdown = nil')
  H.eq('the statusline does not say stopped', H.lua("return require('copilotd').statusline()") ~= 'copilotd: stopped', true)
  H.eq('a new buffer is served', open_served(dir .. '/new.py') ~= nil, true)
  open_served(file)
end)

H.case('the statusline shows the work the daemon reports', function()
  local function statusline()
    return H.lua("return require('copilotd').statusline()")
  end
  local before = statusline()
  H.lua([[
    _G.fake.notify('$/progress', { token = 'download', value = { kind = 'begin', title = 'copilotd: downloading the default model' } })
    _G.fake.notify('$/progress', { token = 'download', value = { kind = 'report', message = 'starting' } })
  ]])
  H.check('while it runs', H.wait(2000, function()
    return statusline() == 'copilotd: downloading the default model'
  end), statusline())
  H.lua("_G.fake.notify('$/progress', { token = 'download', value = { kind = 'end' } })")
  H.check('not once it ended', H.wait(2000, function()
    return statusline() == before
  end), statusline())
end)

H.case('health and status', function()
  H.eq('status through copilotd/status', H.lua("return require('copilotd').status().model"), 'fake')
  H.lua('vim.cmd.checkhealth("copilotd")')
  local report = table.concat(H.lines(), '\n')
  H.check('checkhealth reports the client', report:find('copilotd') and report:find('attached'), report)
  H.check('checkhealth lists its workspace folders', report:find(dir .. ', ' .. other_root, 1, true), report)
  H.check('checkhealth has no errors', not report:find('ERROR'), report)
  H.lua([[_G.fake.status = { model = '/nope.gguf', modelState = 'failed', modelError = 'no such file: /nope.gguf',
    device = 'cpu', indexState = 'ready' }]])
  H.lua('vim.cmd.checkhealth("copilotd")')
  report = table.concat(H.lines(), '\n')
  H.check('checkhealth reports a model that failed', report:find('ERROR') and report:find('no such file: /nope.gguf', 1, true), report)
  H.lua('_G.fake.status = nil')
  -- A safetensors model is a directory.
  H.lua("require('copilotd').config.model = vim.fn.tempname() vim.fn.mkdir(require('copilotd').config.model)")
  H.lua('vim.cmd.checkhealth("copilotd")')
  report = table.concat(H.lines(), '\n')
  H.check('checkhealth takes a model directory', report:find('OK model: ', 1, true) and not report:find('ERROR'), report)
  H.lua("require('copilotd').config.model = nil")
end)

H.finish()
