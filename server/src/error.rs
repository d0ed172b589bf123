//! Azure error answers: status, `x-ms-error-code`, and the XML error body
//! (Microsoft's "Queue service error codes" and "Common REST API error codes"). Every failure the server reports goes through
//! [`ApiError`], so no client ever gets a bare status.

use crate::http::Response;
use crate::xmlio::escape;
use engine::QueueError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    /// Extra elements of the error body, in order.
    pub details: Vec<(&'static str, String)>,
    /// Extra response headers (a bearer challenge's `WWW-Authenticate`).
    pub headers: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: Vec::new(),
            headers: Vec::new(),
        }
    }

    /// Adds an element to the error body. Values often echo client input,
    /// so they are cut to `MAX_ECHOED_CHARS` (an error must not amplify a
    /// request) and made XML-safe when the body is written.
    pub fn detail(mut self, name: &'static str, value: impl Into<String>) -> Self {
        let value = value.into();
        let max = crate::limits::MAX_ECHOED_CHARS;
        let value = match value.char_indices().nth(max) {
            Some((cut, _)) => format!("{}…", value.get(..cut).unwrap_or_default()),
            None => value,
        };
        self.details.push((name, value));
        self
    }

    pub fn auth_failed(detail: impl Into<String>) -> Self {
        ApiError::new(
            403,
            "AuthenticationFailed",
            "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature.",
        )
        .detail("AuthenticationErrorDetail", detail)
    }

    pub fn invalid_query(name: &str, value: &str, reason: &str) -> Self {
        ApiError::new(
            400,
            "InvalidQueryParameterValue",
            "Value for one of the query parameters specified in the request URI is invalid.",
        )
        .detail("QueryParameterName", name)
        .detail("QueryParameterValue", value)
        .detail("Reason", reason)
    }

    pub fn invalid_header(name: &str, value: &str) -> Self {
        ApiError::new(
            400,
            "InvalidHeaderValue",
            "The value for one of the HTTP headers is not in the correct format.",
        )
        .detail("HeaderName", name)
        .detail("HeaderValue", value)
    }

    pub fn invalid_xml(reason: impl Into<String>) -> Self {
        ApiError::new(400, "InvalidXmlDocument", "XML specified is not syntactically valid.").detail("Reason", reason)
    }

    pub fn invalid_uri() -> Self {
        ApiError::new(
            400,
            "InvalidUri",
            "The requested URI does not represent any resource on the server.",
        )
    }

    pub fn unsupported_verb() -> Self {
        ApiError::new(
            405,
            "UnsupportedHttpVerb",
            "The resource doesn't support specified Http Verb.",
        )
    }

    pub fn body_too_large(limit: usize) -> Self {
        ApiError::new(
            413,
            "RequestBodyTooLarge",
            "The request body is too large and exceeds the maximum permissible limit.",
        )
        .detail("MaxLimit", limit.to_string())
    }

    pub fn internal(reason: &str) -> Self {
        tracing::error!("internal error: {reason}");
        ApiError::new(
            500,
            "InternalError",
            "The server encountered an internal error. Please retry the request.",
        )
    }

    /// The full response, with the common headers the caller adds later.
    pub fn response(&self, request_id: &str, now: &str) -> Response {
        let mut body = String::with_capacity(256);
        body.push_str("<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>");
        body.push_str(self.code);
        body.push_str("</Code><Message>");
        body.push_str(&escape(&xml_safe(&format!(
            "{}\nRequestId:{request_id}\nTime:{now}",
            self.message
        ))));
        body.push_str("</Message>");
        for (name, value) in &self.details {
            body.push_str(&format!("<{name}>{}</{name}>", escape(&xml_safe(value))));
        }
        body.push_str("</Error>");
        let mut resp = Response::new(self.status).header("x-ms-error-code", self.code);
        for (name, value) in &self.headers {
            resp = resp.header(*name, value.clone());
        }
        resp.xml(body)
    }
}

/// Text XML 1.0 can carry: characters it forbids (C0 controls other than
/// tab, LF and CR; U+FFFE and U+FFFF) become U+FFFD.
fn xml_safe(s: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || matches!(c, '\u{FFFE}' | '\u{FFFF}');
    if s.chars().any(bad) {
        s.chars()
            .map(|c| if bad(c) { '\u{FFFD}' } else { c })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// The HTTP status of each engine error: the one table that maps the
/// engine's queue terms to HTTP (Microsoft's "Queue service error codes").
fn status_of(e: &QueueError) -> u16 {
    use QueueError::*;
    match e {
        QueueNotFound | MessageNotFound => 404,
        QueueAlreadyExists => 409,
        RequestBodyTooLarge { .. } => 413,
        Internal { .. } => 500,
        ServerBusy { .. } => 503,
        PopReceiptMismatch
        | InvalidResourceName
        | OutOfRangeInput
        | InvalidMetadata { .. }
        | InvalidQueueAttribute { .. }
        | EmptyMetadataKey
        | MetadataTooLarge
        | OutOfRangeQueryParameterValue { .. }
        | InvalidQueryParameterValue { .. }
        | MissingRequiredQueryParameter { .. }
        | InvalidXmlDocument { .. }
        | InvalidMarker => 400,
    }
}

impl From<QueueError> for ApiError {
    fn from(e: QueueError) -> Self {
        ApiError {
            status: status_of(&e),
            code: e.code(),
            message: e.to_string(),
            details: e.details(),
            headers: Vec::new(),
        }
    }
}

impl From<crate::auth::Denied> for ApiError {
    fn from(d: crate::auth::Denied) -> Self {
        use crate::auth::Denied::*;
        let (code, what) = match d {
            Failure => ("AuthorizationFailure", ""),
            PermissionMismatch => ("AuthorizationPermissionMismatch", " using this permission"),
            ServiceMismatch => ("AuthorizationServiceMismatch", " using this service"),
            ResourceTypeMismatch => ("AuthorizationResourceTypeMismatch", " using this resource type"),
            SourceIpMismatch => ("AuthorizationSourceIPMismatch", " using this source IP"),
            ProtocolMismatch => ("AuthorizationProtocolMismatch", " using this protocol"),
        };
        ApiError::new(
            403,
            code,
            format!("This request is not authorized to perform this operation{what}."),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long because it is a table: one row per engine error, the whole
    /// mapping checked in one place.
    #[test]
    fn every_error_maps_to_a_code_and_status() {
        let cases = [
            (QueueError::QueueNotFound, "QueueNotFound", 404),
            (QueueError::QueueAlreadyExists, "QueueAlreadyExists", 409),
            (QueueError::MessageNotFound, "MessageNotFound", 404),
            (QueueError::PopReceiptMismatch, "PopReceiptMismatch", 400),
            (QueueError::InvalidResourceName, "InvalidResourceName", 400),
            (QueueError::OutOfRangeInput, "OutOfRangeInput", 400),
            (QueueError::EmptyMetadataKey, "EmptyMetadataKey", 400),
            (QueueError::MetadataTooLarge, "MetadataTooLarge", 400),
            (QueueError::InvalidMarker, "InvalidMarker", 400),
            (
                QueueError::RequestBodyTooLarge { max_limit: 65536 },
                "RequestBodyTooLarge",
                413,
            ),
            (QueueError::Internal { reason: "x".into() }, "InternalError", 500),
            (QueueError::ServerBusy { reason: "x".into() }, "ServerBusy", 503),
            (
                QueueError::InvalidMetadata { name: "1a".into() },
                "InvalidMetadata",
                400,
            ),
            (
                QueueError::InvalidQueueAttribute {
                    key: "hematite_receive_wait_seconds".into(),
                    value: "99".into(),
                    reason: "must be a whole number from 0 to 20".into(),
                },
                "InvalidMetadata",
                400,
            ),
            (
                QueueError::OutOfRangeQueryParameterValue {
                    name: "numofmessages",
                    value: "33".into(),
                    min: 1,
                    max: 32,
                },
                "OutOfRangeQueryParameterValue",
                400,
            ),
            (
                QueueError::InvalidQueryParameterValue {
                    name: "popreceipt",
                    value: "x".into(),
                    reason: "r".into(),
                },
                "InvalidQueryParameterValue",
                400,
            ),
            (
                QueueError::MissingRequiredQueryParameter { name: "popreceipt" },
                "MissingRequiredQueryParameter",
                400,
            ),
            (
                QueueError::InvalidXmlDocument { reason: "r".into() },
                "InvalidXmlDocument",
                400,
            ),
        ];
        // Every variant is in the table: this match has no wildcard, so a
        // new variant does not compile until it is added above.
        for (e, _, _) in &cases {
            match e {
                QueueError::QueueNotFound
                | QueueError::QueueAlreadyExists
                | QueueError::MessageNotFound
                | QueueError::PopReceiptMismatch
                | QueueError::InvalidResourceName
                | QueueError::OutOfRangeInput
                | QueueError::InvalidMetadata { .. }
                | QueueError::InvalidQueueAttribute { .. }
                | QueueError::EmptyMetadataKey
                | QueueError::MetadataTooLarge
                | QueueError::OutOfRangeQueryParameterValue { .. }
                | QueueError::InvalidQueryParameterValue { .. }
                | QueueError::MissingRequiredQueryParameter { .. }
                | QueueError::RequestBodyTooLarge { .. }
                | QueueError::InvalidXmlDocument { .. }
                | QueueError::InvalidMarker
                | QueueError::Internal { .. }
                | QueueError::ServerBusy { .. } => {}
            }
        }
        assert_eq!(cases.len(), 18, "one row per variant");
        for (e, code, status) in cases {
            assert_eq!(e.code(), code);
            assert_eq!(status_of(&e), status);
        }
        let e = QueueError::OutOfRangeQueryParameterValue {
            name: "numofmessages",
            value: "33".into(),
            min: 1,
            max: 32,
        };
        assert_eq!(status_of(&e), 400);
        assert_eq!(e.details()[3], ("MaximumAllowed", "32".to_string()));
    }
}
