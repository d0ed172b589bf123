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
//! - [`buffers`]: read and answer buffers a core lends its connections
//!   only while bytes are in them.
//! - [`handler`]: from request to response: addressing, version, auth,
//!   then the operation.
//! - [`addressing`]: which account, queue and message a request names.
//! - [`ops`]: one module per operation (parse, permission, work, answer),
//!   the route table and the registry.
//! - [`auth`]: Shared Key, Shared Key Lite, service and account SAS.
//! - [`oauth`]: bearer tokens under `--oauth basic` (checked, not verified).
//! - [`tls`]: HTTPS with rustls over our own sockets.
//! - [`router`]: work sent to the owning core over the channel mesh.
//! - [`service`]: service properties (CORS, logging, metrics), owned by core 0.
//! - [`xmlio`]: XML in and out; time formats.
//! - [`error`]: Azure error responses.
//! - [`limits`]: the server's hard limits.
//! - [`metrics`]: per-core counters, merged into Prometheus text at a scrape.
//! - [`admin`]: the admin address: `/metrics`, `/healthz`, `/readyz`.
//! - [`allocator`]: the process's allocator (mimalloc).
//!
//! # Ownership
//! Every connection, and everything it touches, belongs to the core that
//! accepted it. Queue state belongs to the core that owns the queue; other
//! cores reach it only by sending a `router::Job`.

pub mod addressing;
pub mod admin;
pub mod allocator;
pub mod auth;
pub mod buffers;
pub mod config;
pub mod conn;
pub mod error;
pub mod handler;
pub mod http;
pub mod limits;
pub mod metrics;
pub mod oauth;
pub mod ops;
pub mod router;
pub mod runtime;
pub mod service;
pub mod startup;
pub mod tls;
pub mod xmlio;
