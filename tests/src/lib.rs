//! End-to-end harnesses that drive the real `hematite` binary.
//!
//! # Layout
//! - [`client`]: a small blocking HTTP/1.1 client over `hematite_client`
//!   (Shared Key signing and response parsing).
//! - [`proc`]: starting, stopping and killing the real binary.
//! - [`crash`]: the kill -9 crash harness: concurrent load with a ledger of
//!   acknowledged operations, SIGKILL at a random moment, restart, verify.

pub mod client;
pub mod crash;
pub mod proc;
