//! Command-line flags and their environment variables.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

/// io_uring registered buffer memory per shard by default, in KiB.
pub const DEFAULT_IO_MEMORY_KIB: usize = 1024;

/// The emulator's well-known development account (Microsoft's "Use the Azurite emulator": devstoreaccount1 and its published key).
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
pub const DEV_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncFlag {
    /// fdatasync on glommio's blocking thread pool (measured best with HTTP on the core).
    Blocking,
    /// glommio's own io_uring fdatasync.
    Uring,
}

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// How bearer tokens are taken (`--oauth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OAuthFlag {
    /// Well-formed, unexpired, Entra-issued tokens for Azure Storage are
    /// accepted as the account owner; THE SIGNATURE IS NOT VERIFIED.
    Basic,
}

/// How a new WAL segment's space is reserved (docs/decisions/0003 and 0005).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreallocFlag {
    /// fallocate, then the log writes zeros into the next segment a little
    /// at a time, paced by the writer, so commits are overwrites.
    ZeroAhead,
    /// fallocate only: commits write into unwritten extents.
    Fallocate,
    /// fallocate, then write zeros over the whole segment at once.
    ZeroFill,
}

/// Hematite: an Azure Queue Storage server. With no arguments it serves
/// http://127.0.0.1:10001/devstoreaccount1 with the well-known development
/// account and key, storing data in ./hematite-data (or, with --in-memory,
/// nowhere).
#[derive(Debug, Clone, Parser)]
#[command(name = "hematite", version, about, long_about = None)]
pub struct Config {
    /// Address to listen on; every core accepts on it (SO_REUSEPORT).
    #[arg(long, env = "HEMATITE_ADDR", default_value = "127.0.0.1:10001")]
    pub addr: SocketAddr,

    /// Where the write-ahead logs and service settings live.
    #[arg(long, env = "HEMATITE_DATA_DIR", default_value = "./hematite-data")]
    pub data_dir: PathBuf,

    /// Keep everything in memory: no data directory, no fsync, and no
    /// O_DIRECT file system needed. NOTHING SURVIVES A RESTART. For tests
    /// and CI that throw the state away (docs/EXTENSIONS.md). Cannot be
    /// combined with --data-dir.
    #[arg(long, env = "HEMATITE_IN_MEMORY", conflicts_with = "data_dir",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub in_memory: bool,

    /// Number of shards (one per core). Default: the CPUs this process may
    /// run on. Fixed for a data directory once it is created.
    #[arg(long, env = "HEMATITE_SHARDS")]
    pub shards: Option<usize>,

    /// An account as NAME:BASE64KEY[:BASE64KEY2]; repeatable. Like Azurite's
    /// AZURITE_ACCOUNTS, the environment form separates accounts with ';'.
    /// Default: the development account devstoreaccount1 and its well-known key.
    #[arg(long = "account", env = "HEMATITE_ACCOUNTS", value_delimiter = ';')]
    pub accounts: Vec<String>,

    /// WAL segment size in MiB; the log rotates to a new file at this size.
    /// Default: 64 (8 with --in-memory, where a segment is memory).
    #[arg(long, env = "HEMATITE_SEGMENT_MIB")]
    pub segment_mib: Option<u64>,

    /// Memory per shard for recently used message bodies, in MiB.
    /// Default: 64 (0 with --in-memory, where every body is in memory already).
    #[arg(long, env = "HEMATITE_BODY_CACHE_MIB")]
    pub body_cache_mib: Option<usize>,

    /// Largest message text in KiB: 64 (Azure's limit) up to 1024 (SQS's).
    /// Above 64, request bodies may be up to twice as large, and a Get or
    /// Peek answer carries at most 2 MiB of text (docs/EXTENSIONS.md).
    #[arg(long, env = "HEMATITE_MAX_MESSAGE_KIB", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(MIN_MESSAGE_KIB..=MAX_MESSAGE_KIB))]
    pub max_message_kib: u32,

    /// How fdatasync is issued (docs/decisions/0002-fdatasync-path.md).
    #[arg(long, env = "HEMATITE_FDATASYNC", value_enum, default_value_t = SyncFlag::Blocking)]
    pub fdatasync: SyncFlag,

    /// How new WAL segments are prepared.
    #[arg(long, env = "HEMATITE_PREALLOCATE", value_enum, default_value_t = PreallocFlag::ZeroAhead)]
    pub preallocate: PreallocFlag,

    /// Let the kernel's policy decide whether the heap gets transparent huge
    /// pages (the process's own switch is cleared). Off by default: in a VM
    /// that hands free memory back to its host, each new 2 MiB page stalled
    /// a core for about 5 ms while the host backed it, and that set the
    /// open-loop put's p99 (docs/decisions/0006-no-huge-pages.md).
    #[arg(long, env = "HEMATITE_HUGE_PAGES", value_parser = clap::builder::BoolishValueParser::new())]
    pub huge_pages: bool,

    /// io_uring registered buffer memory per shard, in KiB. Counts against
    /// `ulimit -l` (memlock).
    #[arg(long, env = "HEMATITE_IO_MEMORY_KIB", default_value_t = DEFAULT_IO_MEMORY_KIB)]
    pub io_memory_kib: usize,

    /// Log each group commit taking at least this many milliseconds, with
    /// its write and fdatasync times (a stall of the disk holds every
    /// request waiting for that commit; docs/OPERATIONS.md).
    #[arg(long, env = "HEMATITE_SLOW_COMMIT_MS", default_value_t = engine::limits::SLOW_COMMIT_MS,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub slow_commit_ms: u64,

    /// Open connections per core; more are answered 503 ServerBusy and closed.
    #[arg(long, env = "HEMATITE_MAX_CONNECTIONS_PER_CORE", default_value_t = crate::limits::MAX_CONNECTIONS_PER_CORE)]
    pub max_connections_per_core: usize,

    /// Seconds a keep-alive connection may sit idle between requests.
    #[arg(long, env = "HEMATITE_IDLE_TIMEOUT_SECS", default_value_t = crate::limits::IDLE_TIMEOUT.as_secs())]
    pub idle_timeout_secs: u64,

    /// Seconds a request may take to arrive completely (slow clients are cut off).
    #[arg(long, env = "HEMATITE_REQUEST_TIMEOUT_SECS", default_value_t = crate::limits::REQUEST_TIMEOUT.as_secs())]
    pub request_timeout_secs: u64,

    /// Start even if a WAL segment is corrupt in the middle of the log: the
    /// damaged segment is renamed *.quarantined and ITS RECORDS ARE LOST.
    #[arg(long, env = "HEMATITE_QUARANTINE_CORRUPT_SEGMENTS")]
    pub quarantine_corrupt_segments: bool,

    /// Host suffixes for host-style addressing (`{account}.{suffix}`),
    /// comma-separated. Any other Host is path-style (`/{account}/…`), so
    /// IP literals, `localhost` and plain names always work.
    #[arg(long = "host-suffix", env = "HEMATITE_HOST_SUFFIXES", value_delimiter = ',', default_value = crate::addressing::DEFAULT_HOST_SUFFIX)]
    pub host_suffixes: Vec<String>,

    /// Seconds a message on its way to a dead-letter queue stays hidden: if
    /// its move does not finish (a crash, the dead-letter queue deleted), a
    /// Get Messages retries it after this (docs/EXTENSIONS.md).
    #[arg(long, env = "HEMATITE_DEAD_LETTER_LEASE_SECS", default_value_t = engine::limits::DEAD_LETTER_LEASE_SECS as u64,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub dead_letter_lease_secs: u64,

    /// The admin address: /metrics (Prometheus), /healthz and /readyz
    /// (docs/OPERATIONS.md). Keep it off the network clients use.
    #[arg(long, env = "HEMATITE_ADMIN_ADDR", default_value = "127.0.0.1:10011")]
    pub admin_addr: SocketAddr,

    /// Log one line per request (method, path without signature or pop
    /// receipt, operation, status, latency, shard), at info level.
    #[arg(long, env = "HEMATITE_REQUEST_LOG")]
    pub request_log: bool,

    /// Log lines as text for people or JSON for machines.
    #[arg(long, env = "HEMATITE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Serve HTTPS on --addr with this PEM certificate chain (and --key).
    #[arg(long, env = "HEMATITE_CERT", requires = "key")]
    pub cert: Option<PathBuf>,

    /// The PEM private key of --cert.
    #[arg(long, env = "HEMATITE_KEY", requires = "cert")]
    pub key: Option<PathBuf>,

    /// Accept OAuth bearer tokens (HTTPS only). `basic`, like Azurite's:
    /// the token's form, lifetime, issuer and audience are checked, its
    /// signature is not (docs/OPERATIONS.md, "OAuth").
    #[arg(long, env = "HEMATITE_OAUTH", value_enum)]
    pub oauth: Option<OAuthFlag>,

    /// Answer stale pop receipts like Azurite (400 PopReceiptMismatch)
    /// instead of like Azure (404 MessageNotFound).
    #[arg(long, env = "HEMATITE_AZURITE_RECEIPT_ERRORS")]
    pub azurite_receipt_errors: bool,
}

/// `--max-message-kib` range: Azure's 64 KiB up to the engine's ceiling.
const MIN_MESSAGE_KIB: i64 = (engine::limits::MAX_MESSAGE_BYTES / 1024) as i64;
const MAX_MESSAGE_KIB: i64 = (engine::limits::MAX_MESSAGE_BYTES_CEILING / 1024) as i64;

/// `--segment-mib` and `--body-cache-mib` when not given.
const DEFAULT_SEGMENT_MIB: u64 = engine::limits::DEFAULT_SEGMENT_BYTES >> 20;
const DEFAULT_BODY_CACHE_MIB: usize = engine::limits::DEFAULT_BODY_CACHE_BYTES >> 20;
/// In memory a segment is RAM, written or not once compaction lags behind
/// churn: smaller segments are reclaimed sooner.
const IN_MEMORY_SEGMENT_MIB: u64 = 8;

impl Config {
    /// WAL segment size in bytes (at least 1 MiB).
    pub fn segment_bytes(&self) -> u64 {
        let default = if self.in_memory {
            IN_MEMORY_SEGMENT_MIB
        } else {
            DEFAULT_SEGMENT_MIB
        };
        self.segment_mib.unwrap_or(default).clamp(1, 1 << 20) << 20
    }

    /// Body cache size in bytes. In memory the bodies are in RAM already,
    /// in the log: a cache would only hold a second copy.
    pub fn body_cache_bytes(&self) -> usize {
        let default = if self.in_memory { 0 } else { DEFAULT_BODY_CACHE_MIB };
        self.body_cache_mib.unwrap_or(default).min(1 << 20) << 20
    }

    /// Largest message text in bytes (clap holds the flag to its range).
    pub fn max_message_bytes(&self) -> usize {
        (self.max_message_kib as usize).saturating_mul(1024)
    }

    /// Largest request body: Azure's 131,584 bytes at 64 KiB messages,
    /// in proportion above.
    pub fn max_body_bytes(&self) -> usize {
        engine::limits::request_body_limit(self.max_message_bytes())
    }
}

/// Parses the accounts, or returns the development account.
pub fn accounts(specs: &[String]) -> Result<Vec<crate::auth::Account>, String> {
    let specs: Vec<String> = if specs.is_empty() {
        vec![format!("{DEV_ACCOUNT}:{DEV_KEY}")]
    } else {
        specs.to_vec()
    };
    let mut out = Vec::new();
    for spec in specs.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let mut parts = spec.split(':');
        let name = parts.next().unwrap_or("").to_string();
        // Azure's rule: 3 to 24 lower-case letters and digits. Anything else
        // could never be addressed (host names compare lower-case, and a
        // `-secondary` suffix names the secondary endpoint).
        let valid =
            (3..=24).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !valid {
            return Err(format!(
                "--account {spec}: the account name must be 3 to 24 lower-case letters and digits"
            ));
        }
        let keys: Result<Vec<Vec<u8>>, String> = parts
            .map(|k| {
                STANDARD
                    .decode(k)
                    .map_err(|_| format!("--account {name}: a key is not valid base64"))
            })
            .collect();
        let keys = keys?;
        if keys.is_empty() || keys.len() > 2 {
            return Err(format!(
                "--account {name}: give one or two base64 keys (NAME:KEY[:KEY2])"
            ));
        }
        out.push(crate::auth::Account { name, keys });
    }
    Ok(out)
}
