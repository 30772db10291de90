//! The deterministic simulation of replication (issue 11): three brokers running the sans-I/O
//! leader, follower and election logic of `fencelog::cluster::replication` over a simulated
//! network, an in-memory stand-in for etcd and in-memory replica logs, with producers sending
//! `acks=all` writes and faults (pauses past the lease TTL, crashes, cuts between any pair and to
//! the store). One seed fixes every decision, so a failing seed replays exactly.
//!
//! The simulation lives here, not in the library: it drives only the public API, as the broker
//! will, it needs no Cargo feature, and it adds nothing to what users of the crate compile.
//!
//! Scripted scenarios cover the places others lost data (`/work/shared/cluster.md`): KIP-101
//! double failover, a paused leader waking up with a stale follower, a follower cut off leaving
//! the ISR and coming back, the ISR shrinking to an isolated leader, etcd unreachable, a topic
//! deleted and re-created while a follower is down (`replication_sim/lineage.rs`), a follower
//! back behind its leader's log start (it starts its log over there), and
//! transactions' markers and last stable offset as read_committed readers see them across
//! leader changes (`replication_sim/transactions.rs`). Random
//! schedules cover the rest (a quarter of them delete and re-create a topic too, half of them
//! delete records up to the high watermark now and then):
//! `replication_sim_random_seeds` runs 200 seeds; `tools/replication-sim` runs many more (`FENCELOG_SIM_SEEDS`, `FENCELOG_SIM_START`) and replays one with its trace
//! (`FENCELOG_SIM_SEED`).

#[path = "replication_sim/checker.rs"]
mod checker;
#[path = "replication_sim/lineage.rs"]
mod lineage;
#[path = "replication_sim/log.rs"]
mod log;
#[path = "replication_sim/net.rs"]
mod net;
#[path = "replication_sim/offsets.rs"]
mod offsets;
#[path = "replication_sim/store.rs"]
mod store;
#[path = "replication_sim/transactions.rs"]
mod transactions;
#[path = "replication_sim/world.rs"]
mod world;

use std::collections::BTreeMap;
use std::time::Instant;

use net::{Fault, Target};
use world::{Plan, World};

/// By then the first leader has taken over (epoch 1) and followers fetch.
const STARTED_MS: u64 = 1_000;

/// Runs a plan; on failure, runs it again with the trace on and returns the report.
fn run(plan: Plan) -> Result<World, String> {
    let mut world = World::new(plan.clone());
    world.run();
    let failures = checker::check(&world);
    if failures.is_empty() {
        return Ok(world);
    }
    let mut traced = World::new(Plan {
        trace: true,
        ..plan.clone()
    });
    traced.run();
    let trace_tail: Vec<&String> = traced.trace.iter().rev().take(4_000).collect();
    let mut report = format!(
        "seed {} failed ({} failures):\n  {}\n{}\nreplay: tools/replication-sim --replay {}\n--- trace (last {} lines) ---\n",
        plan.seed,
        failures.len(),
        failures.iter().take(30).cloned().collect::<Vec<_>>().join("\n  "),
        world.log_summary(),
        plan.seed,
        trace_tail.len(),
    );
    for line in trace_tail.into_iter().rev() {
        report.push_str(line);
        report.push('\n');
    }
    Err(report)
}

fn run_or_panic(plan: Plan) -> World {
    match run(plan) {
        Ok(world) => world,
        Err(report) => panic!("{report}"),
    }
}

fn acks_between(world: &World, from_ms: u64, to_ms: u64) -> usize {
    world
        .acks_by_time
        .iter()
        .filter(|(at, _)| *at >= from_ms && *at < to_ms)
        .count()
}

/// Leader changes after the start (the first leader takes epoch 1 at start-up).
fn elections(world: &World) -> Vec<(u64, u32)> {
    world
        .store
        .changes
        .iter()
        .filter(|(at, _, old, new)| *at >= STARTED_MS && new.leader_epoch != old.leader_epoch)
        .map(|(at, _, _, new)| (*at, new.leader_epoch))
        .collect()
}

/// KIP-101 / KIP-279: a follower whose high watermark lags restarts, then the leader dies (the
/// restarted follower is first in line), then the new leader dies before
/// the old one is back: fast successive failovers with truncation by leader epoch lose nothing
/// acknowledged (the checker), and the survivor alone (ISR of one) refuses `acks=all` writes.
#[test]
fn double_failover_loses_no_acknowledged_write() {
    let script = vec![
        // The leader's answers to follower 1 are lost: its next fetch still counts (the leader
        // commits up to its log end) but it never learns that high watermark (KIP-101's set-up).
        (
            1_950,
            Fault::CutLink {
                a: Target::Leader(0),
                b: Target::Follower(0, 0),
                one_way: true,
                ms: 100,
            },
        ),
        (
            2_000,
            Fault::Crash {
                target: Target::Follower(0, 0),
            },
        ),
        (
            2_050,
            Fault::Restart {
                node: None,
                target: Target::Node(1),
            },
        ),
        (
            2_100,
            Fault::Crash {
                target: Target::Leader(0),
            },
        ),
        (
            4_500,
            Fault::Crash {
                target: Target::Leader(0),
            },
        ),
        (
            6_500,
            Fault::Restart {
                node: Some(0),
                target: Target::Node(0),
            },
        ),
        (
            8_000,
            Fault::Restart {
                node: Some(1),
                target: Target::Node(1),
            },
        ),
    ];
    let world = run_or_panic(Plan::scripted(101, script, 9_000));
    assert!(
        elections(&world).len() >= 2,
        "two failovers: {:?}",
        elections(&world)
    );
    assert!(acks_between(&world, 0, 2_000) > 0);
}

/// A leader paused past its lease TTL (SIGSTOP) while one follower is cut from the store (so it
/// keeps following the old epoch): after the failover the paused leader wakes up with stale
/// beliefs and producers still routed to it; it acknowledges nothing the new leader lacks
/// (KIP-320, Liftbridge).
#[test]
fn paused_leader_waking_up_acknowledges_nothing_stale() {
    let script = vec![
        (
            2_000,
            Fault::CutFromStore {
                target: Target::Follower(0, 1),
                ms: 7_000,
            },
        ),
        (
            2_000,
            Fault::Pause {
                target: Target::Leader(0),
                ms: 4_000,
            },
        ),
    ];
    let world = run_or_panic(Plan::scripted(320, script, 10_000));
    let elections = elections(&world);
    assert!(
        elections.iter().any(|(at, _)| *at > 2_000 && *at < 6_000),
        "a failover while the leader was paused: {elections:?}"
    );
}

/// A follower cut off from the other brokers leaves the ISR after `replica_lag_max`, writes go
/// on being acknowledged without it, and it comes back into the ISR once it has caught up.
#[test]
fn follower_cut_off_leaves_the_isr_and_comes_back() {
    let script = vec![(
        2_000,
        Fault::IsolateFromBrokers {
            target: Target::Follower(0, 1),
            ms: 5_000,
        },
    )];
    let world = run_or_panic(Plan::scripted(7, script, 9_000));
    let shrinks = world
        .store
        .changes
        .iter()
        .filter(|(at, _, old, new)| *at > 2_000 && *at < 7_000 && new.isr.len() < old.isr.len())
        .count();
    assert!(shrinks >= 1, "the ISR shrank: {:?}", world.store.changes);
    assert!(
        acks_between(&world, 4_000, 7_000) > 0,
        "writes acknowledged without the cut follower"
    );
    assert!(
        elections(&world).is_empty(),
        "no failover: {:?}",
        elections(&world)
    );
}

/// A follower crashes while the leader goes on with the other and deletes its committed records
/// (DeleteRecords up to the high watermark, again and again): back, the follower fetches below
/// the leader's log start, starts its log over there, catches up and rejoins the ISR, and
/// nothing acknowledged is lost (the checker).
#[test]
fn a_follower_back_behind_the_leader_log_start_starts_over_and_rejoins() {
    let script = vec![
        (
            2_000,
            Fault::Crash {
                target: Target::Node(2),
            },
        ),
        (
            5_000,
            Fault::Restart {
                node: None,
                target: Target::Node(2),
            },
        ),
    ];
    let world = run_or_panic(Plan {
        delete_records: true,
        ..Plan::scripted(11, script, 8_000)
    });
    for what in ["follower start-overs", "records deleted (DeleteRecords)"] {
        assert!(
            world.stats.get(what).is_some_and(|count| *count > 0),
            "`{what}` never happened: {:#?}",
            world.stats
        );
    }
    assert!(
        elections(&world).is_empty(),
        "no failover: {:?}",
        elections(&world)
    );
}

/// The Jepsen 2013 loss: the leader is cut from both followers (not from the store), the ISR
/// shrinks to the leader alone, `min_insync` refuses writes; then the isolated leader crashes
/// and no follower outside the ISR is elected (no unclean election) until it returns.
#[test]
fn isr_shrunk_to_an_isolated_leader_refuses_writes() {
    let script = vec![
        (
            2_000,
            Fault::IsolateFromBrokers {
                target: Target::Leader(0),
                ms: 6_000,
            },
        ),
        (
            5_000,
            Fault::Crash {
                target: Target::Leader(0),
            },
        ),
        (
            7_000,
            Fault::Restart {
                node: None,
                target: Target::Node(0),
            },
        ),
    ];
    let world = run_or_panic(Plan::scripted(2013, script, 9_000));
    let alone = world
        .store
        .changes
        .iter()
        .find(|(_, _, _, new)| new.isr.len() == 1)
        .map(|(at, _, _, _)| *at)
        .expect("the ISR shrank to the isolated leader");
    assert!(
        world
            .observed
            .refusals
            .get("NOT_ENOUGH_REPLICAS")
            .copied()
            .unwrap_or(0)
            > 0,
        "min_insync refused writes: {:?}",
        world.observed.refusals
    );
    assert_eq!(
        acks_between(&world, alone + 100, 7_000),
        0,
        "nothing acknowledged by an ISR of one"
    );
    assert!(
        elections(&world).iter().all(|(at, _)| *at >= 7_000),
        "no election while the only ISR member was down: {:?}",
        elections(&world)
    );
}

/// etcd unreachable: no failover and no ISR shrink while it is, even with a follower dead;
/// `acks=all` writes stall (rather than risk loss) and resume after it heals.
#[test]
fn store_unreachable_means_no_failover_and_no_shrink() {
    let script = vec![
        (2_000, Fault::StoreUnreachable { ms: 4_000 }),
        (
            2_500,
            Fault::Crash {
                target: Target::Follower(0, 1),
            },
        ),
        (
            7_000,
            Fault::Restart {
                node: Some(2),
                target: Target::Node(2),
            },
        ),
    ];
    let world = run_or_panic(Plan::scripted(3, script, 9_000));
    let during: Vec<_> = world
        .store
        .changes
        .iter()
        .filter(|(at, _, _, _)| *at >= 2_000 && *at < 6_000)
        .collect();
    assert!(
        during.is_empty(),
        "the store changed while unreachable: {during:?}"
    );
    assert_eq!(
        acks_between(&world, 2_700, 6_000),
        0,
        "writes stalled with a dead follower in the ISR"
    );
}

/// A topic deleted and re-created while a follower is down (`docs/replication.md`, "Topic delete
/// on a cluster"): the live brokers delete their copies when they see the topic gone, the new
/// topic starts above the tombstone, and the follower that returns with the old topic's files
/// deletes them by the driver's lineage rules and catches up only the new topic's data (the
/// checker: nothing of the old lineage is served, replicated or acknowledged in the new one,
/// nothing acknowledged in the new one is lost).
#[test]
fn topic_recreated_while_a_follower_is_down_catches_up_only_new_data() {
    let script = vec![
        (
            2_000,
            Fault::Crash {
                target: Target::Node(2),
            },
        ),
        (
            5_500,
            Fault::Restart {
                node: Some(2),
                target: Target::Node(2),
            },
        ),
    ];
    let mut plan = Plan::scripted(4_711, script, 9_000);
    // Partition 0 is also the offsets partition (`offsets.rs`): its loads in the new topic
    // answer only the new topic's commits.
    plan.deletes = vec![(3_000, 0, 600)];
    let world = run_or_panic(plan);
    let stat = |what: &str| world.stats.get(what).copied().unwrap_or(0);
    assert_eq!(stat("topic deletes"), 1);
    assert_eq!(stat("topic re-creations"), 1);
    assert!(
        stat("local copies of a deleted topic deleted") >= 2,
        "the live brokers saw the topic gone: {:#?}",
        world.stats
    );
    assert_eq!(
        stat("local copies of an older lineage deleted"),
        1,
        "the returning follower deleted its old copy: {:#?}",
        world.stats
    );
    assert!(
        stat("records deleted with an older lineage's copy") > 0,
        "the returning follower held the old topic's records: {:#?}",
        world.stats
    );
    let lineages: Vec<_> = world.store.topics_ever(0).collect();
    assert_eq!(lineages.len(), 2, "{lineages:#?}");
    let (old, new) = (lineages[0], lineages[1]);
    let (_, _, floor) = old.deleted.expect("the first topic was deleted");
    assert!(floor >= old.highest_epoch && floor > 0, "{old:#?}");
    assert_eq!(new.record.first_leader_epoch(), floor + 1, "{new:#?}");
    let returned = world.logs[2][0].records();
    assert!(
        !returned.is_empty()
            && returned
                .iter()
                .all(|record| record.lineage == new.id && record.epoch > floor),
        "the returning follower holds the new topic's records only"
    );
    let acked_in = |lineage: u32| {
        world
            .observed
            .values
            .values()
            .filter(|(_, _, outcome)| {
                matches!(outcome, world::Outcome::Acked { lineage: acked, .. } if *acked == lineage)
            })
            .count()
    };
    assert!(acked_in(old.id) > 0 && acked_in(new.id) > 0);
    assert!(stat("offsets partition loads") > 0);
}

/// 200 random schedules of faults, each checked; prints seeds per second.
#[test]
fn replication_sim_random_seeds() {
    let start: u64 = std::env::var("FENCELOG_SIM_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let seeds: u64 = 200;
    let stats = run_seeds(start, seeds);
    // The replica node's inputs and rules all ran: the seeds test the broker's decisions, not
    // only the engines under them.
    for what in [
        "leaders elected",
        "leaders deposed",
        "registration renewals",
        "local syncs",
        "followers stopped: leader changed",
        "followers stopped: re-read asked",
        "followers stopped: elected",
        "offsets partition loads",
        "read_committed records visible",
        "read_committed records aborted",
        "topic deletes",
        "local copies of a deleted topic deleted",
        "local copies of an older lineage deleted",
        "local copies created for a re-created topic",
        "records deleted (DeleteRecords)",
        "follower start-overs",
    ] {
        assert!(
            stats.get(what).is_some_and(|count| *count > 0),
            "no seed exercised `{what}`: {stats:#?}"
        );
    }
}

/// Runs `seeds` random plans from `start`, fails on any failing seed, and returns what they
/// exercised, counted.
fn run_seeds(start: u64, seeds: u64) -> BTreeMap<String, u64> {
    let began = Instant::now();
    let mut events = 0;
    let mut failed = Vec::new();
    let mut stats: BTreeMap<String, u64> = BTreeMap::new();
    for seed in start..start + seeds {
        match run(Plan::random(seed)) {
            Ok(world) => {
                events += world.events;
                for (what, count) in &world.stats {
                    *stats.entry(what.to_string()).or_default() += count;
                }
                let isr_changes = world
                    .store
                    .changes
                    .iter()
                    .filter(|(_, _, old, new)| old.leader_epoch == new.leader_epoch)
                    .count();
                *stats.entry("ISR changes".into()).or_default() += isr_changes as u64;
            }
            Err(report) => {
                eprintln!("{report}");
                failed.push(seed);
                if failed.len() >= 3 {
                    break;
                }
            }
        }
    }
    let elapsed = began.elapsed().as_secs_f64();
    eprintln!(
        "replication sim: seeds {start}..{} in {elapsed:.1} s ({:.0} seeds/s, {:.0} events/s)",
        start + seeds,
        seeds as f64 / elapsed,
        events as f64 / elapsed
    );
    eprintln!("over those seeds: {stats:#?}");
    assert!(
        failed.is_empty(),
        "failing seeds: {failed:?} (replay: tools/replication-sim --replay SEED)"
    );
    stats
}

/// Many seeds (`FENCELOG_SIM_SEEDS`, from `FENCELOG_SIM_START`), for `tools/replication-sim`.
#[test]
#[ignore]
fn replication_sim_many_seeds() {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    run_seeds(
        var("FENCELOG_SIM_START", 0),
        var("FENCELOG_SIM_SEEDS", 10_000),
    );
}

/// Replays one seed (`FENCELOG_SIM_SEED`) and prints its trace, failing or not.
#[test]
#[ignore]
fn replication_sim_replay() {
    let seed: u64 = std::env::var("FENCELOG_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("set FENCELOG_SIM_SEED");
    let mut world = World::new(Plan {
        trace: true,
        ..Plan::random(seed)
    });
    world.run();
    for line in &world.trace {
        println!("{line}");
    }
    println!("{}", world.log_summary());
    let failures = checker::check(&world);
    assert!(failures.is_empty(), "seed {seed}: {failures:#?}");
}
