-- wrk script: spreads the requests over a fixed set of client keys, the
-- header `x-client: <prefix><k>` for k in 0 .. N-1 (the bench server keys by
-- it with BENCH_KEY=header).
--
--   wrk -s benches/http/keys.lua URL -- N [PREFIX]
--
-- N defaults to 10000 and PREFIX to "c". The requests are formatted once in
-- init(), so that wrk spends no more per request than without a script.
-- Every connection of a thread takes the next key in turn, and each wrk
-- thread starts at its own offset.

local requests = {}
local n = 0
local i = 0
local threads = 0

function setup(thread)
    thread:set("id", threads)
    threads = threads + 1
end

function init(args)
    n = tonumber(args[1]) or 10000
    local prefix = args[2] or "c"
    for k = 0, n - 1 do
        requests[k + 1] = wrk.format(nil, nil, { ["x-client"] = prefix .. k })
    end
    i = ((tonumber(id) or 0) * 7919) % n
end

function request()
    i = i % n + 1
    return requests[i]
end
