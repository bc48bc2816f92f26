--- An in-process stand-in for `copilotd --stdio`, for the unit tests: `cmd = dofile('fake_server.lua')`.
---
--- Everything it receives goes to `_G.fake.log`; `_G.fake.reply(params, lines)` (set by the test) computes the
--- answer to an inline-completion request from the document's lines as the server sees them, returning
--- `result` or `nil, err`; answers are delayed by `_G.fake.delay` ms (the answers to other requests by
--- `_G.fake.delays[method]` ms). `$/cancelRequest` answers the request at
--- once with RequestCancelled. `_G.fake.status`, when set, is the answer to `copilotd/status`. Documents are synced
--- in full, which keeps the fake simple. `_G.fake.crash(code, signal)` ends the server as a crash or a kill would.
_G.fake = {
  log = {},
  delay = 0,
  delays = {},
  reply = function()
    return { items = {} }
  end,
}

return function(dispatchers)
  -- Sends a notification to the client, as the daemon does (`$/progress`, ...).
  _G.fake.notify = dispatchers.notification
  local server = {}
  local next_id = 0
  local open = {} -- request id -> function(err, result) that answers it
  local docs = {}
  local closing = false

  local function log(method, params)
    table.insert(_G.fake.log, { method = method, params = params })
  end

  local function answer(id, err, result)
    local respond = open[id]
    if respond then
      open[id] = nil
      respond(err, result)
    end
  end

  local function handle(method, params)
    if method == 'initialize' then
      return {
        capabilities = {
          textDocumentSync = { openClose = true, change = 1 },
          inlineCompletionProvider = true,
          workspace = { workspaceFolders = { supported = true } },
        },
      }
    elseif method == 'textDocument/inlineCompletion' then
      local lines = docs[params.textDocument.uri]
      if not lines then
        return nil, { code = -32602, message = 'unknown document' }
      end
      return _G.fake.reply(params, lines)
    elseif method == 'copilotd/status' then
      return _G.fake.status or { model = 'fake', device = 'cpu', indexState = 'ready', completions = 0 }
    elseif method == 'shutdown' then
      return vim.NIL
    end
    return nil, { code = -32601, message = 'method not found: ' .. method }
  end

  function server.request(method, params, callback, notify_reply_callback)
    next_id = next_id + 1
    local id = next_id
    log(method, params)
    open[id] = function(err, result)
      vim.schedule(function()
        if notify_reply_callback then
          notify_reply_callback(id)
        end
        callback(err, result)
      end)
    end
    local result, err = handle(method, params)
    local delay = method == 'textDocument/inlineCompletion' and _G.fake.delay or _G.fake.delays[method] or 0
    vim.defer_fn(function()
      answer(id, err, result)
    end, delay)
    return true, id
  end

  function server.notify(method, params)
    log(method, params)
    if method == 'textDocument/didOpen' then
      docs[params.textDocument.uri] = vim.split(params.textDocument.text, '\n', { plain = true })
    elseif method == 'textDocument/didChange' then
      local changes = params.contentChanges
      docs[params.textDocument.uri] = vim.split(changes[#changes].text, '\n', { plain = true })
    elseif method == '$/cancelRequest' then
      answer(params.id, { code = -32800, message = 'cancelled' })
    elseif method == 'exit' then
      closing = true
      vim.schedule(function()
        dispatchers.on_exit(0, 0)
      end)
    end
    return true
  end

  _G.fake.crash = function(code, signal)
    closing = true
    dispatchers.on_exit(code, signal)
  end

  function server.is_closing()
    return closing
  end

  function server.terminate()
    closing = true
  end

  return server
end
