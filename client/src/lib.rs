//! The client side of the Azure Queue Storage REST API, for Hematite's load
//! generator, end-to-end tests and kill -9 harness.
//!
//! - [`sign`]: a Shared Key signer written from Microsoft's public spec
//!   ("Authorize with Shared Key"). It deliberately shares no code with the
//!   server: requests it signs cross-check the server's verifier.
//! - [`request`]: the bytes of one request (standard headers, signature).
//! - [`response`]: an incremental HTTP/1.1 response parser over a byte
//!   buffer. No I/O here: blocking and async callers drive it alike.
// Response bytes come from the network: no unchecked arithmetic, indexing
// or panicking unwraps outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::arithmetic_side_effects,
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::string_slice
    )
)]

pub mod request;
pub mod response;
pub mod sign;

pub use request::Request;
pub use response::{parse_response, Response};
pub use sign::{account_sas, service_sas, Credentials};

/// The development storage account every emulator accepts.
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// The development account's well-known key (published by Microsoft for the
/// storage emulator and Azurite; it guards nothing).
pub const DEV_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The `x-ms-version` requests carry unless the caller picks another.
pub const API_VERSION: &str = "2026-10-06";

/// What can go wrong building a request or reading an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The account key is not valid base64.
    BadKey,
    /// The request cannot be signed or written (e.g. a target without a
    /// leading '/', or a query that decodes to invalid UTF-8).
    BadRequest(&'static str),
    /// The answer breaks HTTP/1.1 framing.
    Malformed(String),
    /// The answer exceeds one of the limits in [`response`].
    TooLarge(&'static str),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::BadKey => write!(f, "the account key is not valid base64"),
            Error::BadRequest(why) => write!(f, "cannot build the request: {why}"),
            Error::Malformed(why) => write!(f, "malformed HTTP response: {why}"),
            Error::TooLarge(what) => write!(f, "HTTP response too large: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        let kind = match e {
            Error::BadKey | Error::BadRequest(_) => std::io::ErrorKind::InvalidInput,
            Error::Malformed(_) | Error::TooLarge(_) => std::io::ErrorKind::InvalidData,
        };
        std::io::Error::new(kind, e)
    }
}
