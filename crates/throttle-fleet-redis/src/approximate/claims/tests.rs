//! `flush.lua` against its Rust mirror on random inputs, and a fleet's
//! flushes of one key within the bound, on a real redis-server.

use std::collections::HashMap;

use redis::Script;
use throttle_fleet_test_support::RedisServer;
use throttle_fleet_test_support::Rng;

mod mirror;

use super::Reply;
use mirror::{Call, Granted, KeyArgs, Stored, grant};

/// The script.
const FLUSH: &str = include_str!("../flush.lua");

/// Uniform in `0..n`.
fn below(rng: &mut Rng, n: i64) -> i64 {
    rng.below(n as u64) as i64
}

/// Runs one flush call; returns each key's reply.
fn run(
    con: &mut redis::Connection,
    hash: &str,
    previous: &str,
    call: &Call<'_>,
    keys: &[(String, KeyArgs)],
) -> Vec<String> {
    let script = Script::new(FLUSH);
    let mut inv = script.prepare_invoke();
    inv.key(hash)
        .key(previous)
        .arg(call.instance)
        .arg(60_000)
        .arg(call.limit)
        .arg(call.weight_milli)
        .arg(call.span)
        .arg(call.fleet)
        .arg(call.credit)
        .arg(call.seq)
        .arg(call.overdraft)
        .arg(call.base);
    for (name, k) in keys {
        inv.arg(name)
            .arg(k.cum)
            .arg(k.hold)
            .arg(k.demand)
            .arg(k.known)
            .arg(k.need);
    }
    let reply: String = inv.invoke(con).expect("the script ran");
    reply.split(' ').map(str::to_owned).collect()
}

fn get(con: &mut redis::Connection, hash: &str, field: &str) -> Option<String> {
    redis::cmd("HGET").arg(hash).arg(field).query(con).unwrap()
}

#[test]
fn the_script_and_its_mirror_agree_on_random_flushes() {
    let server = RedisServer::start();
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let instances = [
        "0a1b2c3d4e5f6071",
        "1b2c3d4e5f607182",
        "2c3d4e5f60718293",
        "3d4e5f60718293a4",
        "4e5f60718293a4b5",
        "5f60718293a4b5c6",
    ];
    let names = ["k0", "k1", "k2", "k3"];
    let mut compared = 0;
    let mut stale = 0;
    for seed in 1..=20u64 {
        let mut rng = Rng::new(seed);
        let prefix = format!("s{seed}");
        let mut seqs = [0i64; 6];
        // The latest count each instance wrote per (interval, key): the
        // fleet's count every reply must show.
        let mut latest: HashMap<(i64, &str, usize), i64> = HashMap::new();
        let limit = 1 + below(&mut rng, 400);
        let spans = 1 + below(&mut rng, 12);
        for _ in 0..400 {
            let who = below(&mut rng, instances.len() as i64) as usize;
            let instance = instances[who];
            let interval = 1 + below(&mut rng, 2);
            let base = interval * spans;
            let hash = format!("{prefix}:{interval}");
            let previous = format!("{prefix}:{}", interval - 1);
            // Mostly forward, sometimes a late call with an older number.
            seqs[who] += 1;
            let seq = if below(&mut rng, 10) == 0 {
                (seqs[who] - 2).max(0)
            } else {
                seqs[who]
            };
            let call = Call {
                instance,
                limit,
                weight_milli: if below(&mut rng, 2) == 0 {
                    0
                } else {
                    below(&mut rng, 1_001)
                },
                span: base + below(&mut rng, spans),
                base,
                fleet: 1 + below(&mut rng, 8),
                credit: below(&mut rng, 6),
                seq,
                overdraft: 1 + below(&mut rng, 5),
            };
            let mut picked: Vec<&str> = names.to_vec();
            let n = 1 + below(&mut rng, names.len() as i64) as usize;
            let mut keys = Vec::new();
            for _ in 0..n {
                let name = picked.swap_remove(below(&mut rng, picked.len() as i64) as usize);
                let cum = below(&mut rng, limit + 20);
                keys.push((
                    name.to_owned(),
                    KeyArgs {
                        cum,
                        hold: cum + below(&mut rng, 10),
                        demand: below(&mut rng, 60),
                        known: below(&mut rng, limit / 2 + 1),
                        need: below(&mut rng, 8),
                    },
                ));
            }
            let expected: Vec<Granted> = keys
                .iter()
                .map(|(name, k)| {
                    let field = get(&mut con, &hash, name);
                    let mine = get(&mut con, &hash, &format!("{name}.{instance}"));
                    let before = (call.weight_milli > 0)
                        .then(|| get(&mut con, &previous, name))
                        .flatten();
                    grant(
                        &call,
                        k,
                        Stored {
                            field: field.as_deref(),
                            mine: mine.as_deref(),
                            previous: before.as_deref(),
                        },
                    )
                })
                .collect();
            let fields_before: Vec<Option<String>> = keys
                .iter()
                .map(|(name, _)| get(&mut con, &hash, name))
                .collect();
            let replies = run(&mut con, &hash, &previous, &call, &keys);
            assert_eq!(replies.len(), keys.len());
            for (((name, k), reply), expected) in keys.iter().zip(&replies).zip(&expected) {
                let name = names.iter().find(|n| *n == name).unwrap();
                if reply == "S" {
                    stale += 1;
                    continue;
                }
                latest.insert((interval, name, who), k.cum);
                let fleet: i64 = latest
                    .iter()
                    .filter(|((i, n, _), _)| *i == interval && n == name)
                    .map(|(_, c)| c)
                    .sum();
                let parsed = Reply::parse(reply).expect("a reply");
                assert_eq!(
                    parsed.spent,
                    fleet.max(k.known),
                    "seed {seed}: {instance} lost a count of {name}: {fields_before:?} {keys:?}"
                );
                let Granted::Written {
                    reply: want,
                    field,
                    mine,
                } = expected
                else {
                    panic!("seed {seed}: the mirror said stale, the script {reply}");
                };
                assert_eq!(reply, &want.to_string(), "seed {seed}: reply for {name}");
                assert_eq!(
                    get(&mut con, &hash, name).as_ref(),
                    Some(field),
                    "seed {seed}"
                );
                assert_eq!(
                    get(&mut con, &hash, &format!("{name}.{instance}")).as_ref(),
                    Some(mine),
                    "seed {seed}"
                );
                compared += 1;
            }
            for (reply, expected) in replies.iter().zip(&expected) {
                if reply == "S" {
                    assert_eq!(expected, &Granted::Stale, "seed {seed}");
                }
            }
        }
    }
    assert!(compared > 4_000, "{compared} compared");
    assert!(stale > 100, "{stale} stale");
}

/// A fleet of `size` instances serving one key through one interval: heavy
/// and light instances, each admitting only within its claim (or its
/// credit before it has one), asking for more when requests wait.
fn fleet_run(server: &RedisServer, size: usize, seed: u64) -> (i64, i64) {
    const LIMIT: i64 = 1_000;
    const SPANS: i64 = 10;
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut rng = Rng::new(seed);
    let hash = format!("up{seed}:1");
    let previous = format!("up{seed}:0");
    let overdraft = (LIMIT / (8 * SPANS)).max(1);
    struct Instance {
        id: String,
        cum: i64,
        claim: Option<i64>,
        fleet: i64,
        heard: i64,
        seq: i64,
        heavy: bool,
    }
    let mut fleet: Vec<Instance> = (0..size)
        .map(|i| Instance {
            id: format!("{:016x}", 0xabc0 + i),
            cum: 0,
            claim: None,
            fleet: 1,
            heard: 0,
            seq: 0,
            heavy: i % 2 == 0,
        })
        .collect();
    let mut last_spent = 0;
    for s in 0..=SPANS {
        let mut order: Vec<usize> = (0..fleet.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, below(&mut rng, i as i64 + 1) as usize);
        }
        for &i in &order {
            let inst = &mut fleet[i];
            // The last round only writes what was admitted.
            // The heavy clients move between instances every span.
            let heavy = inst.heavy == (s % 2 == 0);
            let demand = match (s == SPANS, heavy) {
                (true, _) => 0,
                (false, true) => 30 + below(&mut rng, 50),
                (false, false) => below(&mut rng, 10),
            };
            let credit = LIMIT / (8 * inst.fleet * SPANS);
            let room = inst.claim.unwrap_or(credit) - inst.cum;
            let admitted = demand.min(room.max(0));
            inst.cum += admitted;
            let need = (demand - admitted).min(20);
            inst.seq += 1;
            let call = Call {
                instance: &inst.id,
                limit: LIMIT,
                weight_milli: 0,
                span: SPANS + s.min(SPANS - 1),
                base: SPANS,
                fleet: inst.fleet,
                credit,
                seq: inst.seq,
                overdraft,
            };
            let key = KeyArgs {
                cum: inst.cum,
                hold: inst.cum,
                demand,
                known: inst.heard,
                need,
            };
            let replies = run(
                &mut con,
                &hash,
                &previous,
                &call,
                &[("hot".to_owned(), key)],
            );
            let reply = Reply::parse(&replies[0]).expect("a reply");
            inst.claim = Some(reply.claim);
            inst.fleet = inst.fleet.max(reply.instances);
            inst.heard = reply.spent;
            // The requests that waited get what the claim covers.
            inst.cum += need.min(reply.claim - inst.cum).max(0);
            last_spent = reply.spent;
        }
    }
    let admitted = fleet.iter().map(|i| i.cum).sum::<i64>();
    // The last round wrote every count: the last reply saw them all.
    assert_eq!(
        last_spent, admitted,
        "seed {seed}: {size} instances: counts lost"
    );
    (
        admitted,
        LIMIT + overdraft + (fleet.len() as i64 - 1) * (LIMIT / (8 * SPANS)),
    )
}

#[test]
fn a_fleet_shares_a_key_within_the_bound() {
    let server = RedisServer::start();
    for size in [8, 12] {
        for seed in 0..10 {
            let (admitted, bound) = fleet_run(&server, size, 100 * size as u64 + seed);
            assert!(
                admitted <= bound,
                "{size} instances, seed {seed}: admitted {admitted}, bound {bound}"
            );
            // Demand is over twice the limit (half the instances heavy in
            // each span): a fleet that starves itself
            // would meet the bound too.
            assert!(
                admitted >= 950,
                "{size} instances, seed {seed}: admitted only {admitted}"
            );
        }
    }
}
