#!/usr/bin/env bash
# A Redis Sentinel failover from the limiter's side: the time from the
# primary's SIGKILL to the first exact decision on the promoted replica,
# for every one of four exact-mode instances, next to the time the
# sentinels took to switch (down-after-milliseconds stated in the output).
# Real processes: a primary, a replica and three sentinels per round,
# started by the test support. See
# crates/throttle-fleet-redis/examples/sentinel_failover.rs.
#
#   benches/sentinel-failover/run.sh                      # 10 rounds
#   ROUNDS=20 DOWN_AFTER_MS=1000 benches/sentinel-failover/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo run -q --release --example sentinel_failover -p throttle-fleet-redis
