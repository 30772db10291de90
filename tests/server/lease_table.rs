//! Behaviour of the lease table: epochs are installed before they are handed
//! out, at most one lease per partition is live at a time, and the TTL only
//! ever moves a partition on (it never lets two holders share an epoch).
//!
//! All time is synthetic: tests pick a base `Instant` and add offsets, so
//! nothing here depends on how fast the machine runs.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fencelog::lease::{
    EpochInstaller, Grant, LeaseConfig, LeaseError, LeaseInfo, LeaseTable, Renewed,
    DEFAULT_MAX_TTL_MS, DEFAULT_MIN_TTL_MS, MAX_HOLDER_BYTES,
};
use proptest::prelude::*;

#[derive(Debug, thiserror::Error)]
#[error("injected install failure for epoch {0}")]
struct InjectedFailure(u64);

/// Stands in for the storage writer: records every install, refuses
/// overlapping installs (the table must serialize them per partition), checks
/// that each install is exactly current + 1, and fails on demand.
#[derive(Debug, Default)]
struct FakeInstaller {
    current: AtomicU64,
    calls: Mutex<Vec<u64>>,
    /// How many of the next installs fail.
    fail_next: AtomicUsize,
    installing: AtomicBool,
    /// How long each install "fsyncs", to widen race windows.
    delay: Duration,
}

impl FakeInstaller {
    fn at_epoch(epoch: u64) -> Self {
        Self {
            current: AtomicU64::new(epoch),
            ..Self::default()
        }
    }

    fn slow(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::default()
        }
    }

    fn calls(&self) -> Vec<u64> {
        self.calls.lock().unwrap().clone()
    }
}

impl EpochInstaller for FakeInstaller {
    type Error = InjectedFailure;

    fn current_epoch(&self) -> u64 {
        self.current.load(SeqCst)
    }

    fn install_epoch(&self, epoch: u64) -> Result<(), InjectedFailure> {
        assert!(
            !self.installing.swap(true, SeqCst),
            "two installs overlapped on one partition"
        );
        self.calls.lock().unwrap().push(epoch);
        assert_eq!(
            epoch,
            self.current.load(SeqCst) + 1,
            "install must be current + 1"
        );
        if !self.delay.is_zero() {
            thread::sleep(self.delay);
        }
        let fail = self
            .fail_next
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if !fail {
            self.current.store(epoch, SeqCst);
        }
        self.installing.store(false, SeqCst);
        if fail {
            Err(InjectedFailure(epoch))
        } else {
            Ok(())
        }
    }
}

const TTL: u64 = 1000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn table() -> LeaseTable {
    LeaseTable::new(LeaseConfig::default())
}

fn acquire(
    t: &LeaseTable,
    holder: &str,
    inst: &FakeInstaller,
    now: Instant,
) -> Result<Grant, LeaseError> {
    t.acquire("orders", 0, holder, TTL, inst, now)
}

#[track_caller]
fn assert_lost(res: Result<impl std::fmt::Debug, LeaseError>, expected_epoch: u64) {
    match res {
        Err(LeaseError::Lost { current_epoch, .. }) => assert_eq!(current_epoch, expected_epoch),
        other => panic!("expected Lost at epoch {expected_epoch}, got {other:?}"),
    }
}

#[test]
fn grant_installs_current_plus_one_before_returning() {
    let t = table();
    let inst = FakeInstaller::at_epoch(41);
    let now = Instant::now();

    let g = acquire(&t, "a", &inst, now).unwrap();

    assert_eq!(g.epoch, 42);
    assert_eq!(g.ttl_ms, TTL);
    assert_eq!(g.holder, "a");
    // By the time the grant is visible, the writer already enforces it.
    assert_eq!(inst.calls(), vec![42]);
    assert_eq!(inst.current_epoch(), 42);
    assert_eq!(
        t.lookup("orders", 0, now),
        Some(LeaseInfo {
            holder: "a".into(),
            epoch: 42,
            expires_in_ms: TTL
        })
    );
}

#[test]
fn epochs_strictly_increase_across_grants() {
    let t = table();
    let inst = FakeInstaller::default();
    let mut now = Instant::now();
    let mut last = 0;
    for i in 0..20 {
        let g = acquire(&t, "a", &inst, now).unwrap();
        assert!(g.epoch > last, "epoch {} after {last}", g.epoch);
        last = g.epoch;
        // Alternate between releasing and letting the lease expire.
        if i % 2 == 0 {
            t.release("orders", 0, g.lease_id, now).unwrap();
        } else {
            now += ms(TTL);
        }
    }
    assert_eq!(inst.calls(), (1..=20).collect::<Vec<_>>());
}

#[test]
fn second_acquire_while_live_is_held_until_expiry() {
    let t = table();
    let inst = FakeInstaller::default();
    let t0 = Instant::now();
    acquire(&t, "a", &inst, t0).unwrap();

    let err = acquire(&t, "b", &inst, t0 + ms(400)).unwrap_err();
    match &err {
        LeaseError::Held {
            holder,
            expires_in_ms,
            current_epoch,
            ..
        } => {
            assert_eq!(holder, "a");
            assert_eq!(*expires_in_ms, 600);
            assert_eq!(*current_epoch, 1);
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "lease on orders/0 is held by \"a\" (epoch 1) for another 600 ms"
    );
    // One millisecond before expiry it is still held, by the same name too.
    assert!(matches!(
        acquire(&t, "a", &inst, t0 + ms(TTL - 1)),
        Err(LeaseError::Held {
            expires_in_ms: 1,
            ..
        })
    ));
    assert_eq!(inst.calls(), vec![1], "a refused acquire must not install");

    // At exactly t0 + ttl the lease has expired.
    let g = acquire(&t, "b", &inst, t0 + ms(TTL)).unwrap();
    assert_eq!((g.epoch, g.holder.as_str()), (2, "b"));
}

#[test]
fn renew_extends_the_lease() {
    let t = table();
    let inst = FakeInstaller::default();
    let t0 = Instant::now();
    let g = acquire(&t, "a", &inst, t0).unwrap();

    let r = t.renew("orders", 0, g.lease_id, t0 + ms(800)).unwrap();
    assert_eq!(
        r,
        Renewed {
            epoch: 1,
            ttl_ms: TTL
        }
    );

    let info = t.lookup("orders", 0, t0 + ms(1500)).expect("still live");
    assert_eq!((info.epoch, info.expires_in_ms), (1, 300));
    assert!(matches!(
        acquire(&t, "b", &inst, t0 + ms(1500)),
        Err(LeaseError::Held { .. })
    ));
    assert_eq!(t.lookup("orders", 0, t0 + ms(1800)), None);
}

#[test]
fn renew_after_expiry_is_lost_even_if_nobody_took_the_partition() {
    let t = table();
    let inst = FakeInstaller::default();
    let t0 = Instant::now();
    let g = acquire(&t, "a", &inst, t0).unwrap();

    assert_lost(t.renew("orders", 0, g.lease_id, t0 + ms(TTL)), 1);
    assert_eq!(t.lookup("orders", 0, t0 + ms(TTL)), None);
    // Renewing is not a way back in: the holder re-acquires at a new epoch.
    assert_lost(t.renew("orders", 0, g.lease_id, t0 + ms(TTL + 1)), 1);
    let g2 = acquire(&t, "a", &inst, t0 + ms(TTL + 1)).unwrap();
    assert_eq!(g2.epoch, 2);
    assert_ne!(g2.lease_id, g.lease_id);
}

#[test]
fn renew_after_another_holder_was_granted_reports_the_new_epoch() {
    let t = table();
    let inst = FakeInstaller::default();
    let t0 = Instant::now();
    let a = acquire(&t, "a", &inst, t0).unwrap();
    let b = acquire(&t, "b", &inst, t0 + ms(TTL)).unwrap();
    assert_eq!(b.epoch, 2);

    let err = t
        .renew("orders", 0, a.lease_id, t0 + ms(TTL + 5))
        .unwrap_err();
    // The live lease is b's: the message says the id is not that lease's, and whose it is.
    assert_eq!(
        err.to_string(),
        format!(
            "lease lost: the lease id is not the id of the live lease on orders/0, which \"b\" holds at epoch 2 for another {} ms (the id is mistyped, or a newer lease superseded yours): acquire a new lease once it ends",
            TTL - 5
        )
    );
    assert_lost(Err::<(), _>(err), 2);
    // The new holder is unaffected.
    assert_eq!(
        t.renew("orders", 0, b.lease_id, t0 + ms(TTL + 5))
            .unwrap()
            .epoch,
        2
    );
}

#[test]
fn release_frees_the_partition_immediately() {
    let t = table();
    let inst = FakeInstaller::default();
    let t0 = Instant::now();
    let a = acquire(&t, "a", &inst, t0).unwrap();

    t.release("orders", 0, a.lease_id, t0 + ms(10)).unwrap();
    assert_eq!(t.lookup("orders", 0, t0 + ms(10)), None);
    let b = acquire(&t, "b", &inst, t0 + ms(10)).unwrap();
    assert_eq!(b.epoch, 2);

    // The released id is dead for good.
    assert_lost(t.renew("orders", 0, a.lease_id, t0 + ms(20)), 2);
    assert_lost(t.release("orders", 0, a.lease_id, t0 + ms(20)), 2);
}

#[test]
fn release_with_wrong_id_or_after_expiry_is_lost() {
    let t = table();
    let inst = FakeInstaller::default();
    let t0 = Instant::now();
    let a = acquire(&t, "a", &inst, t0).unwrap();

    assert_lost(t.release("orders", 0, a.lease_id ^ 1, t0 + ms(10)), 1);
    assert_lost(t.renew("orders", 0, a.lease_id ^ 1, t0 + ms(10)), 1);
    // A wrong id while the lease is live is told whose live lease it is not (issue 33: it
    // said only "lost ... at epoch 1", as if the live lease were gone).
    match t.renew("orders", 0, a.lease_id ^ 1, t0 + ms(10)) {
        Err(LeaseError::Lost {
            live: Some(live), ..
        }) => assert_eq!(
            (live.holder.as_str(), live.epoch, live.expires_in_ms),
            ("a", 1, TTL - 10)
        ),
        other => panic!("expected Lost naming the live lease, got {other:?}"),
    }
    // The real holder kept its lease.
    assert_eq!(t.lookup("orders", 0, t0 + ms(10)).unwrap().holder, "a");

    assert_lost(t.release("orders", 0, a.lease_id, t0 + ms(TTL)), 1);
}

#[test]
fn unknown_partition_is_lost_at_epoch_zero_and_creates_no_slot() {
    let t = table();
    let now = Instant::now();
    assert_lost(t.renew("nope", 3, 42, now), 0);
    assert_lost(t.release("nope", 3, 42, now), 0);
    assert_eq!(t.lookup("nope", 3, now), None);
    assert_eq!(t.slot_count(), 0);
}

#[test]
fn failing_install_leaves_no_lease_and_bumps_nothing() {
    let t = table();
    let inst = FakeInstaller::default();
    let t0 = Instant::now();
    let a = acquire(&t, "a", &inst, t0).unwrap();
    t.release("orders", 0, a.lease_id, t0).unwrap();

    inst.fail_next.store(1, SeqCst);
    let err = acquire(&t, "b", &inst, t0).unwrap_err();
    match &err {
        LeaseError::Install { epoch, .. } => assert_eq!(*epoch, 2),
        other => panic!("expected Install, got {other:?}"),
    }
    let source = std::error::Error::source(&err).expect("cause is kept");
    assert_eq!(source.to_string(), "injected install failure for epoch 2");

    assert_eq!(t.lookup("orders", 0, t0), None);
    assert_eq!(inst.current_epoch(), 1);
    // Lost still reports the last *granted* epoch, not the failed one.
    assert_lost(t.renew("orders", 0, a.lease_id, t0), 1);

    // The retry tries the very same epoch.
    let b = acquire(&t, "b", &inst, t0).unwrap();
    assert_eq!(b.epoch, 2);
    assert_eq!(inst.calls(), vec![1, 2, 2]);
}

#[test]
fn failing_first_install_leaves_partition_free() {
    let t = table();
    let inst = FakeInstaller::default();
    inst.fail_next.store(2, SeqCst);
    let now = Instant::now();
    for _ in 0..2 {
        assert!(matches!(
            acquire(&t, "a", &inst, now),
            Err(LeaseError::Install { epoch: 1, .. })
        ));
        assert_eq!(t.lookup("orders", 0, now), None);
    }
    assert_eq!(acquire(&t, "a", &inst, now).unwrap().epoch, 1);
}

#[test]
fn ttl_must_be_within_configured_bounds() {
    let t = table();
    let inst = FakeInstaller::default();
    let now = Instant::now();
    for bad in [0, DEFAULT_MIN_TTL_MS - 1, DEFAULT_MAX_TTL_MS + 1, u64::MAX] {
        match t.acquire("orders", 0, "a", bad, &inst, now) {
            Err(LeaseError::InvalidTtl { ttl_ms, min, max }) => {
                assert_eq!((ttl_ms, min, max), (bad, 100, 300_000));
            }
            other => panic!("ttl {bad}: expected InvalidTtl, got {other:?}"),
        }
    }
    assert!(inst.calls().is_empty());

    let g = t
        .acquire("orders", 0, "a", DEFAULT_MIN_TTL_MS, &inst, now)
        .unwrap();
    t.release("orders", 0, g.lease_id, now).unwrap();
    t.acquire("orders", 0, "a", DEFAULT_MAX_TTL_MS, &inst, now)
        .unwrap();

    let custom = LeaseTable::new(LeaseConfig {
        min_ttl_ms: 10,
        max_ttl_ms: 20,
        ..LeaseConfig::default()
    });
    assert!(matches!(
        custom.acquire("orders", 0, "a", 21, &FakeInstaller::default(), now),
        Err(LeaseError::InvalidTtl {
            min: 10,
            max: 20,
            ..
        })
    ));
}

#[test]
fn holder_names_are_bounded() {
    let t = table();
    let inst = FakeInstaller::default();
    let now = Instant::now();
    let long = "x".repeat(MAX_HOLDER_BYTES + 1);
    for bad in ["", long.as_str()] {
        assert!(matches!(
            acquire(&t, bad, &inst, now),
            Err(LeaseError::InvalidHolder { .. })
        ));
    }
    assert!(inst.calls().is_empty());
    let max = "x".repeat(MAX_HOLDER_BYTES);
    assert_eq!(acquire(&t, &max, &inst, now).unwrap().holder, max);
}

#[test]
fn exhausted_epochs_are_refused_without_installing() {
    let t = table();
    let inst = FakeInstaller::at_epoch(u64::MAX);
    assert!(matches!(
        acquire(&t, "a", &inst, Instant::now()),
        Err(LeaseError::EpochExhausted { .. })
    ));
    assert!(inst.calls().is_empty());
}

/// A writer that forgot its epoch (reports 0) and accepts anything.
#[derive(Default)]
struct ForgetfulInstaller {
    calls: Mutex<Vec<u64>>,
}

impl EpochInstaller for ForgetfulInstaller {
    type Error = InjectedFailure;
    fn current_epoch(&self) -> u64 {
        0
    }
    fn install_epoch(&self, epoch: u64) -> Result<(), InjectedFailure> {
        self.calls.lock().unwrap().push(epoch);
        Ok(())
    }
}

#[test]
fn epochs_never_repeat_even_if_the_installer_lags_the_table() {
    let t = table();
    let now = Instant::now();
    let g = acquire(&t, "a", &FakeInstaller::default(), now).unwrap();
    t.release("orders", 0, g.lease_id, now).unwrap();

    let forgetful = ForgetfulInstaller::default();
    let g = t.acquire("orders", 0, "b", TTL, &forgetful, now).unwrap();
    assert_eq!(g.epoch, 2, "fencing tokens must never be reissued");
    assert_eq!(*forgetful.calls.lock().unwrap(), vec![2]);
}

/// An installer with a bug: it panics.
struct PanickingInstaller;

impl EpochInstaller for PanickingInstaller {
    type Error = InjectedFailure;
    fn current_epoch(&self) -> u64 {
        0
    }
    fn install_epoch(&self, _epoch: u64) -> Result<(), InjectedFailure> {
        panic!("installer bug");
    }
}

#[test]
fn a_panicking_installer_does_not_wedge_the_partition() {
    let t = table();
    let now = Instant::now();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        t.acquire("orders", 0, "a", TTL, &PanickingInstaller, now)
    }));
    assert!(caught.is_err());
    assert_eq!(t.lookup("orders", 0, now), None);
    assert_eq!(
        acquire(&t, "b", &FakeInstaller::default(), now)
            .unwrap()
            .epoch,
        1
    );
}

#[test]
fn concurrent_acquires_on_one_partition_have_exactly_one_winner() {
    const THREADS: usize = 16;
    let t = Arc::new(table());
    let inst = Arc::new(FakeInstaller::slow(ms(2)));
    let barrier = Arc::new(Barrier::new(THREADS));
    let now = Instant::now();

    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (t, inst, barrier) = (t.clone(), inst.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                t.acquire("orders", 0, &format!("h{i}"), TTL, &*inst, now)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();

    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1);
    assert_eq!(winners[0].epoch, 1);
    for r in &results {
        if let Err(e) = r {
            assert!(
                matches!(e, LeaseError::Held { current_epoch: 1, holder, .. } if *holder == winners[0].holder),
                "unexpected {e:?}"
            );
        }
    }
    assert_eq!(inst.calls(), vec![1]);
}

#[test]
fn concurrent_acquire_release_rounds_give_each_epoch_to_one_holder() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 40;
    let t = Arc::new(table());
    let inst = Arc::new(FakeInstaller::slow(Duration::from_micros(200)));
    let barrier = Arc::new(Barrier::new(THREADS));
    let now = Instant::now();

    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (t, inst, barrier) = (t.clone(), inst.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                let mut won = Vec::new();
                for _ in 0..ROUNDS {
                    match t.acquire("orders", 0, &format!("h{i}"), TTL, &*inst, now) {
                        Ok(g) => {
                            won.push(g.epoch);
                            thread::yield_now();
                            t.release("orders", 0, g.lease_id, now).unwrap();
                        }
                        Err(LeaseError::Held { .. }) => thread::yield_now(),
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                }
                won
            })
        })
        .collect();
    let mut epochs: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    epochs.sort_unstable();

    let n = epochs.len() as u64;
    assert!(n > 0, "somebody must have won");
    // Each epoch was won by exactly one thread, with no gaps...
    assert_eq!(epochs, (1..=n).collect::<Vec<_>>());
    // ...and installed exactly once, in order (the fake also asserted that no
    // two installs overlapped).
    assert_eq!(inst.calls(), (1..=n).collect::<Vec<_>>());
}

/// An installer that parks inside `install_epoch` until told to go on.
struct ParkedInstaller {
    entered: mpsc::SyncSender<()>,
    proceed: Mutex<mpsc::Receiver<()>>,
}

impl EpochInstaller for ParkedInstaller {
    type Error = InjectedFailure;
    fn current_epoch(&self) -> u64 {
        0
    }
    fn install_epoch(&self, _epoch: u64) -> Result<(), InjectedFailure> {
        self.entered.send(()).unwrap();
        self.proceed
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(10))
            .expect("test never released the parked install");
        Ok(())
    }
}

#[test]
fn a_slow_install_does_not_block_other_partitions() {
    let t = Arc::new(table());
    let (entered_tx, entered_rx) = mpsc::sync_channel(1);
    let (proceed_tx, proceed_rx) = mpsc::channel();
    let parked = ParkedInstaller {
        entered: entered_tx,
        proceed: Mutex::new(proceed_rx),
    };
    let now = Instant::now();

    let t2 = t.clone();
    let slow = thread::spawn(move || t2.acquire("orders", 0, "slow", TTL, &parked, now));
    entered_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("install started");

    // While orders/0 is mid-install, other partitions and topics proceed.
    let other = FakeInstaller::default();
    let g = t.acquire("orders", 1, "fast", TTL, &other, now).unwrap();
    t.renew("orders", 1, g.lease_id, now).unwrap();
    assert!(t.lookup("orders", 1, now).is_some());
    t.acquire("logs", 0, "fast", TTL, &FakeInstaller::default(), now)
        .unwrap();
    assert_eq!(t.slot_count(), 3);

    proceed_tx.send(()).unwrap();
    assert_eq!(slow.join().unwrap().unwrap().epoch, 1);
    assert_eq!(t.lookup("orders", 0, now).unwrap().holder, "slow");
}

#[test]
fn lease_ids_are_distinct() {
    let t = table();
    let inst = FakeInstaller::default();
    let now = Instant::now();
    let mut ids = HashSet::new();
    for _ in 0..5000 {
        let g = acquire(&t, "a", &inst, now).unwrap();
        assert!(ids.insert(g.lease_id), "lease id repeated");
        t.release("orders", 0, g.lease_id, now).unwrap();
    }
}

#[test]
fn grant_debug_does_not_leak_the_lease_id() {
    let t = table();
    let g = acquire(&t, "a", &FakeInstaller::default(), Instant::now()).unwrap();
    let shown = format!("{g:?}");
    assert!(!shown.contains(&g.lease_id.to_string()), "{shown}");
    assert!(shown.contains("redacted"));
}

#[test]
fn slots_are_bounded_and_removable_per_topic() {
    let t = LeaseTable::new(LeaseConfig {
        max_slots: 3,
        ..LeaseConfig::default()
    });
    let now = Instant::now();
    let inst = FakeInstaller::default;
    let g = t.acquire("orders", 0, "a", TTL, &inst(), now).unwrap();
    t.acquire("orders", 1, "a", TTL, &inst(), now).unwrap();
    t.acquire("logs", 0, "a", TTL, &inst(), now).unwrap();
    assert_eq!(t.slot_count(), 3);
    assert!(matches!(
        t.acquire("logs", 1, "a", TTL, &inst(), now),
        Err(LeaseError::TooManySlots { max: 3 })
    ));
    // Refused acquires on existing slots do not count against the bound.
    assert!(matches!(
        t.acquire("orders", 0, "b", TTL, &inst(), now),
        Err(LeaseError::Held { .. })
    ));

    assert_eq!(t.remove_topic("orders"), 2);
    assert_eq!(t.remove_topic("orders"), 0);
    assert_eq!(t.slot_count(), 1);
    assert_eq!(t.lookup("orders", 0, now), None);
    assert_lost(t.renew("orders", 0, g.lease_id, now), 0);
    assert!(t.lookup("logs", 0, now).is_some());
    t.acquire("logs", 1, "a", TTL, &inst(), now).unwrap();
}

// ---------------------------------------------------------------------------
// Model-based property test
// ---------------------------------------------------------------------------

const PARTS: u32 = 3;

#[derive(Debug, Clone)]
enum LeaseRef {
    /// The i-th (mod count) lease id ever granted on the partition.
    Granted(usize),
    /// An id the table never issued.
    Forged(u128),
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        part: u32,
        holder: u8,
        ttl_ms: u64,
        fail_install: bool,
    },
    Renew {
        part: u32,
        lease: LeaseRef,
    },
    Release {
        part: u32,
        lease: LeaseRef,
    },
    Advance {
        ms: u64,
    },
}

fn lease_ref() -> impl Strategy<Value = LeaseRef> {
    prop_oneof![
        4 => any::<usize>().prop_map(LeaseRef::Granted),
        1 => any::<u128>().prop_map(LeaseRef::Forged),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..PARTS, 0u8..3, prop::sample::select(vec![100u64, 250, 1000]), prop::bool::weighted(0.15))
            .prop_map(|(part, holder, ttl_ms, fail_install)| Op::Acquire { part, holder, ttl_ms, fail_install }),
        2 => (0..PARTS, lease_ref()).prop_map(|(part, lease)| Op::Renew { part, lease }),
        1 => (0..PARTS, lease_ref()).prop_map(|(part, lease)| Op::Release { part, lease }),
        2 => (0u64..1200).prop_map(|ms| Op::Advance { ms }),
    ]
}

#[derive(Debug, Clone)]
struct ModelLease {
    id: u128,
    holder: String,
    epoch: u64,
    ttl_ms: u64,
    expires_at_ms: u64,
}

#[derive(Debug, Default)]
struct ModelPart {
    lease: Option<ModelLease>,
    last_epoch: u64,
    /// Every id ever granted here, oldest first.
    granted: Vec<u128>,
}

impl ModelPart {
    fn live(&self, now_ms: u64) -> Option<&ModelLease> {
        self.lease.as_ref().filter(|l| now_ms < l.expires_at_ms)
    }

    fn resolve(&self, r: &LeaseRef) -> u128 {
        match *r {
            LeaseRef::Granted(i) if !self.granted.is_empty() => {
                self.granted[i % self.granted.len()]
            }
            LeaseRef::Granted(i) => i as u128,
            LeaseRef::Forged(id) => id,
        }
    }
}

fn run_model(ops: Vec<Op>) {
    let table = LeaseTable::new(LeaseConfig::default());
    let installers: Vec<FakeInstaller> = (0..PARTS).map(|_| FakeInstaller::default()).collect();
    let mut model: Vec<ModelPart> = (0..PARTS).map(|_| ModelPart::default()).collect();
    let base = Instant::now();
    let mut now_ms = 0u64;
    let mut all_epochs: Vec<Vec<u64>> = vec![Vec::new(); PARTS as usize];

    for op in ops {
        let now = base + ms(now_ms);
        match op {
            Op::Advance { ms } => now_ms += ms,
            Op::Acquire {
                part,
                holder,
                ttl_ms,
                fail_install,
            } => {
                let m = &mut model[part as usize];
                let inst = &installers[part as usize];
                let holder = format!("h{holder}");
                inst.fail_next.store(usize::from(fail_install), SeqCst);
                let res = table.acquire("t", part, &holder, ttl_ms, inst, now);
                inst.fail_next.store(0, SeqCst);
                match (m.live(now_ms), res) {
                    (
                        Some(live),
                        Err(LeaseError::Held {
                            holder: h,
                            expires_in_ms,
                            current_epoch,
                            ..
                        }),
                    ) => {
                        assert_eq!(h, live.holder);
                        assert_eq!(current_epoch, live.epoch);
                        assert_eq!(expires_in_ms, live.expires_at_ms - now_ms);
                    }
                    (None, Err(LeaseError::Install { epoch, .. })) => {
                        assert!(fail_install);
                        assert_eq!(epoch, m.last_epoch + 1);
                    }
                    (None, Ok(g)) => {
                        assert!(!fail_install);
                        assert_eq!(g.epoch, m.last_epoch + 1);
                        assert_eq!(g.ttl_ms, ttl_ms);
                        let epochs = &mut all_epochs[part as usize];
                        if let Some(&prev) = epochs.last() {
                            assert!(g.epoch > prev, "epoch {} after {prev}", g.epoch);
                        }
                        epochs.push(g.epoch);
                        m.last_epoch = g.epoch;
                        m.granted.push(g.lease_id);
                        m.lease = Some(ModelLease {
                            id: g.lease_id,
                            holder,
                            epoch: g.epoch,
                            ttl_ms,
                            expires_at_ms: now_ms + ttl_ms,
                        });
                    }
                    (live, res) => panic!("model {live:?} but table said {res:?}"),
                }
            }
            Op::Renew { part, lease } => {
                let m = &mut model[part as usize];
                let id = m.resolve(&lease);
                let res = table.renew("t", part, id, now);
                match m.live(now_ms).cloned() {
                    Some(live) if live.id == id => {
                        assert_eq!(
                            res.unwrap(),
                            Renewed {
                                epoch: live.epoch,
                                ttl_ms: live.ttl_ms
                            }
                        );
                        m.lease.as_mut().unwrap().expires_at_ms = now_ms + live.ttl_ms;
                    }
                    _ => assert_lost(res, m.last_epoch),
                }
            }
            Op::Release { part, lease } => {
                let m = &mut model[part as usize];
                let id = m.resolve(&lease);
                let res = table.release("t", part, id, now);
                match m.live(now_ms) {
                    Some(live) if live.id == id => {
                        res.unwrap();
                        m.lease = None;
                    }
                    _ => assert_lost(res, m.last_epoch),
                }
            }
        }

        // Invariants after every step.
        let now = base + ms(now_ms);
        for part in 0..PARTS {
            let m = &model[part as usize];
            let live = m.live(now_ms);
            assert_eq!(
                table.lookup("t", part, now),
                live.map(|l| LeaseInfo {
                    holder: l.holder.clone(),
                    epoch: l.epoch,
                    expires_in_ms: l.expires_at_ms - now_ms,
                })
            );
            assert_eq!(installers[part as usize].current_epoch(), m.last_epoch);
            // At most one live lease: every other id ever granted is refused
            // (a refused renew changes nothing).
            for &id in &m.granted {
                if live.is_some_and(|l| l.id == id) {
                    continue;
                }
                assert_lost(table.renew("t", part, id, now), m.last_epoch);
            }
        }
    }
}

proptest! {
    #![proptest_config(crate::support::proptest_config(256))]

    #[test]
    fn table_matches_model(ops in prop::collection::vec(op(), 1..80)) {
        run_model(ops);
    }
}
