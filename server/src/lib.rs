//! The Hematite server: Azure Queue Storage's REST API over a thread-per-core
//! glommio runtime, on top of `hematite-engine`.
//!
//! # Layout
//! - [`config`]: flags and environment variables.
//! - [`startup`]: checks before any executor starts (io_uring, memlock,
//!   O_DIRECT, shard count, CPUs).
//! - [`runtime`]: one executor per shard, the listeners, readiness and shutdown.
//! - [`conn`]: one connection: framing, pipelining, timeouts.
//! - [`http`]: our HTTP/1.1 on httparse (requests, bodies, responses).
//! - [`handler`]: from request to response: addressing, version, auth,
//!   routing, and every operation's wire shape.
//! - [`request`]: addressing and the operation table.
//! - [`auth`]: Shared Key, Shared Key Lite, service and account SAS.
//! - [`shards`]: commands to the owning core over the channel mesh.
//! - [`service`]: service properties (CORS, logging, metrics), owned by core 0.
//! - [`xmlio`]: XML in and out; time formats.
//! - [`error`]: Azure error responses.
//! - [`limits`]: the server's hard limits.
//!
//! # Ownership
//! Every connection, and everything it touches, belongs to the core that
//! accepted it. Queue state belongs to the core that owns the queue; other
//! cores reach it only by sending a `shards::Command`.

pub mod auth;
pub mod config;
pub mod conn;
pub mod error;
pub mod handler;
pub mod http;
pub mod limits;
pub mod request;
pub mod runtime;
pub mod service;
pub mod shards;
pub mod startup;
pub mod xmlio;
