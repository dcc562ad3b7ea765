-- wrk script: a key flood, every request with a client key never sent
-- before (`x-client: <prefix><thread>-<counter>`).
--
--   wrk -s benches/http/flood.lua URL -- [PREFIX] [DELAY_MS]
--
-- PREFIX defaults to "f". DELAY_MS (default 0) makes each connection wait
-- that long before each request, to cap the flood's rate below what the
-- server can answer.

local prefix = "f"
local delay_ms = 0
local count = 0
local threads = 0

function setup(thread)
    thread:set("id", threads)
    threads = threads + 1
end

function init(args)
    prefix = (args[1] or "f") .. (tonumber(id) or 0) .. "-"
    delay_ms = tonumber(args[2]) or 0
end

function request()
    count = count + 1
    return wrk.format(nil, nil, { ["x-client"] = prefix .. count })
end

function delay()
    return delay_ms
end
