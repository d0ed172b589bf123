//! Errors. `QueueError` is what a request can fail with; each variant maps to
//! exactly one Azure error code and HTTP status, so the server never has to
//! guess. `StorageError` is what the WAL and the disk can fail with.

use std::io;
use thiserror::Error;

/// Failures of the log and the disk beneath it.
#[derive(Debug, Error)]
pub enum StorageError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    /// A record or header that should be valid is not, somewhere other than a
    /// torn tail. Recovery stops rather than silently dropping data.
    #[error("WAL corruption in {file} at offset {offset}: {reason}. Run `hematite-wal check` on the data directory; start with --quarantine-corrupt-segments to set the segment aside and lose its records")]
    Corruption { file: String, offset: u64, reason: String },
    /// An earlier write or fdatasync failed. Nothing after it can be made
    /// durable with certainty, so the shard refuses every mutation.
    #[error("shard is poisoned after an I/O failure and refuses writes until restarted: {0}")]
    Poisoned(String),
    /// The disk could not hold a new segment. Mutations are refused; reads work.
    #[error("no space left for the write-ahead log: {0}")]
    NoSpace(String),
    /// The directory belongs to another shard or format.
    #[error("{0}")]
    Mismatch(String),
    /// A record that cannot be framed (a length over its field). Nothing was
    /// appended; the input should have been refused by validation.
    #[error("record cannot be written: {0}")]
    Unencodable(String),
    /// The shard's configuration cannot work (`ShardConfig::validate`).
    #[error("invalid shard configuration: {0}")]
    Config(String),
}

impl StorageError {
    pub fn io(path: impl Into<String>, source: io::Error) -> Self {
        if source.raw_os_error() == Some(libc::ENOSPC) {
            return StorageError::NoSpace(format!("{}: {source}", path.into()));
        }
        StorageError::Io {
            path: path.into(),
            source,
        }
    }
}

/// A request-level failure with Azure's code and status.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum QueueError {
    #[error("The specified queue does not exist.")]
    QueueNotFound,
    #[error("The specified queue already exists.")]
    QueueAlreadyExists,
    #[error("The specified message does not exist.")]
    MessageNotFound,
    /// Only answered in Azurite-compatibility mode; Azure answers `MessageNotFound`.
    #[error("The specified pop receipt did not match the pop receipt for a dequeued message.")]
    PopReceiptMismatch,
    #[error("The specified resource name contains invalid characters.")]
    InvalidResourceName,
    #[error("The specified resource name length is not within the permissible limits.")]
    OutOfRangeInput,
    #[error("The metadata specified is invalid. It has characters that are not permitted.")]
    InvalidMetadata { name: String },
    /// A reserved `hematite_` metadata key with a value it cannot take
    /// (docs/EXTENSIONS.md); answered as Azure answers invalid metadata.
    #[error("The metadata key '{key}' has an invalid value '{value}': {reason}.")]
    InvalidQueueAttribute { key: String, value: String, reason: String },
    #[error("The key for one of the metadata key-value pairs is empty.")]
    EmptyMetadataKey,
    #[error("The size of the specified metadata exceeds the maximum size permitted.")]
    MetadataTooLarge,
    #[error("One of the query parameters specified in the request URI is outside the permissible range.")]
    OutOfRangeQueryParameterValue {
        name: &'static str,
        value: String,
        min: i64,
        max: i64,
    },
    #[error("Value for one of the query parameters specified in the request URI is invalid.")]
    InvalidQueryParameterValue {
        name: &'static str,
        value: String,
        reason: String,
    },
    #[error("A query parameter that's mandatory for this request is not specified.")]
    MissingRequiredQueryParameter { name: &'static str },
    #[error("The request body is too large and exceeds the maximum permissible limit.")]
    RequestBodyTooLarge { max_limit: usize },
    #[error("XML specified is not syntactically valid.")]
    InvalidXmlDocument { reason: String },
    #[error("The specified marker is invalid.")]
    InvalidMarker,
    /// The shard cannot make writes durable (poisoned, or out of space).
    #[error("The server encountered an internal error. Please retry the request.")]
    Internal { reason: String },
    #[error("The server is currently unable to receive requests. Please retry your request.")]
    ServerBusy { reason: String },
}

impl QueueError {
    /// Azure's name for the rule broken (the `x-ms-error-code` the server
    /// sends). The HTTP status is the server's business (`server/src/error.rs`).
    pub fn code(&self) -> &'static str {
        use QueueError::*;
        match self {
            QueueNotFound => "QueueNotFound",
            QueueAlreadyExists => "QueueAlreadyExists",
            MessageNotFound => "MessageNotFound",
            PopReceiptMismatch => "PopReceiptMismatch",
            InvalidResourceName => "InvalidResourceName",
            OutOfRangeInput => "OutOfRangeInput",
            InvalidMetadata { .. } | InvalidQueueAttribute { .. } => "InvalidMetadata",
            EmptyMetadataKey => "EmptyMetadataKey",
            MetadataTooLarge => "MetadataTooLarge",
            OutOfRangeQueryParameterValue { .. } => "OutOfRangeQueryParameterValue",
            InvalidQueryParameterValue { .. } => "InvalidQueryParameterValue",
            MissingRequiredQueryParameter { .. } => "MissingRequiredQueryParameter",
            RequestBodyTooLarge { .. } => "RequestBodyTooLarge",
            InvalidXmlDocument { .. } => "InvalidXmlDocument",
            InvalidMarker => "InvalidMarker",
            Internal { .. } => "InternalError",
            ServerBusy { .. } => "ServerBusy",
        }
    }

    /// Extra elements of the XML error body, in the order Azure emits them.
    pub fn details(&self) -> Vec<(&'static str, String)> {
        use QueueError::*;
        match self {
            OutOfRangeQueryParameterValue { name, value, min, max } => vec![
                ("QueryParameterName", (*name).to_string()),
                ("QueryParameterValue", value.clone()),
                ("MinimumAllowed", min.to_string()),
                ("MaximumAllowed", max.to_string()),
            ],
            InvalidQueryParameterValue { name, value, reason } => vec![
                ("QueryParameterName", (*name).to_string()),
                ("QueryParameterValue", value.clone()),
                ("Reason", reason.clone()),
            ],
            MissingRequiredQueryParameter { name } => {
                vec![("QueryParameterName", (*name).to_string())]
            }
            RequestBodyTooLarge { max_limit } => vec![("MaxLimit", max_limit.to_string())],
            InvalidQueueAttribute { key, value, reason } => vec![
                ("MetadataKey", key.clone()),
                ("MetadataValue", value.clone()),
                ("Reason", reason.clone()),
            ],
            InvalidXmlDocument { reason } if !reason.is_empty() => {
                vec![("Reason", reason.clone())]
            }
            _ => Vec::new(),
        }
    }

    pub(crate) fn out_of_range(name: &'static str, value: i64, min: i64, max: i64) -> Self {
        QueueError::OutOfRangeQueryParameterValue {
            name,
            value: value.to_string(),
            min,
            max,
        }
    }
}

impl From<StorageError> for QueueError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::NoSpace(reason) => QueueError::ServerBusy { reason },
            other => QueueError::Internal {
                reason: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_become_internal_or_busy() {
        let q: QueueError = StorageError::Poisoned("fdatasync failed".into()).into();
        assert!(matches!(q, QueueError::Internal { .. }), "{q}");
        let q: QueueError = StorageError::io("x", io::Error::from_raw_os_error(libc::ENOSPC)).into();
        assert!(matches!(q, QueueError::ServerBusy { .. }), "{q}");
    }
}
