//! Hematite's storage engine: Azure Queue semantics over a per-shard,
//! segmented, O_DIRECT write-ahead log. No HTTP here.
//!
//! # Layout
//! - [`limits`]: every limit, Azure's and ours, in one place.
//! - [`error`]: `QueueError` (one variant per Azure error code) and `StorageError`.
//! - [`attributes`]: queue attributes beyond Azure's, from reserved `hematite_` metadata keys.
//! - [`model`]: queue names, metadata, access policies, pop receipts, and their rules.
//! - [`clock`]: injected time (`SystemClock`, `ManualClock`).
//! - [`shard`]: the `Shard`, which owns one core's queues and WAL; every
//!   queue operation lives here.
//! - [`queue`]: one queue's message table and its visibility and expiry indexes.
//! - [`run_map`]: the ordered map those three are kept in (sorted runs, cheap appends).
//! - [`body_cache`]: bounded cache of recent message bodies (bodies live in the WAL).
//! - [`wal`]: framing, records, group commit, rotation, recovery.
//! - [`disk`]: the disk trait, with the glommio `DmaFile` backend and the simulated disk.
//!
//! # Ownership
//! Everything here is owned by exactly one core (shard): types use `Rc` and
//! `RefCell`, are not `Send`, and are never shared across cores. The server
//! routes each request to the core that owns its queue.

pub mod attributes;
pub mod body_cache;
pub mod clock;
pub mod disk;
pub mod error;
pub mod limits;
pub mod model;
pub mod queue;
pub mod run_map;
pub mod shard;
pub mod wal;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{QueueError, StorageError};
pub use shard::{Shard, ShardConfig};
