#![allow(dead_code)]
//! Shared helpers for the engine's integration tests: a shard on the
//! simulated disk with a manual clock.

use engine::disk::sim::{CrashMode, SimDisk};
use engine::shard::ShardConfig;
use engine::{ManualClock, Shard};
use futures::executor::block_on;
use std::rc::Rc;

pub const ACCT: &str = "devstoreaccount1";
pub const T0: u64 = 1_800_000_000_000;

/// The crashes every durability test replays: unsynced writes lost, and
/// torn two ways.
pub const CRASHES: [CrashMode; 3] = [
    CrashMode::LoseUnsynced,
    CrashMode::TearUnsynced { seed: 1 },
    CrashMode::TearUnsynced { seed: 2 },
];

pub fn small_config() -> ShardConfig {
    let mut cfg = ShardConfig::new(0);
    cfg.segment_bytes = engine::limits::MIN_SEGMENT_BYTES;
    cfg.body_cache_bytes = 16 * 1024;
    cfg
}

pub fn open(disk: &SimDisk, clock: &Rc<ManualClock>, cfg: ShardConfig) -> Shard<SimDisk> {
    block_on(Shard::open(disk.clone(), cfg, clock.clone())).expect("shard opens")
}

pub fn fresh() -> (SimDisk, Rc<ManualClock>, Shard<SimDisk>) {
    fresh_with(small_config())
}

/// A new shard on an empty simulated disk, with `cfg`.
pub fn fresh_with(cfg: ShardConfig) -> (SimDisk, Rc<ManualClock>, Shard<SimDisk>) {
    let disk = SimDisk::new();
    let clock = Rc::new(ManualClock::new(T0));
    let shard = open(&disk, &clock, cfg);
    (disk, clock, shard)
}
