//! The bytes of one HTTP/1.1 request to the Queue service.

use crate::{Credentials, Error, API_VERSION};
use std::time::SystemTime;

/// One request. [`Request::new`] fills in today's date and [`API_VERSION`];
/// the fields are public so a caller can change either.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    /// Path and query, already percent-encoded as they go on the wire.
    pub target: &'a str,
    /// The `Host` header (`host:port`).
    pub host: &'a str,
    /// `x-ms-version`.
    pub version: &'a str,
    /// `x-ms-date`.
    pub date: SystemTime,
    /// Further headers, written in this order after the standard ones. A
    /// `Transfer-Encoding` header here means the caller sends the body
    /// itself (see [`Request::encode`]).
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

impl<'a> Request<'a> {
    pub fn new(method: &'a str, host: &'a str, target: &'a str) -> Self {
        Request {
            method,
            target,
            host,
            version: API_VERSION,
            date: SystemTime::now(),
            headers: &[],
            body: b"",
        }
    }

    pub fn headers(mut self, headers: &'a [(&'a str, &'a str)]) -> Self {
        self.headers = headers;
        self
    }

    pub fn body(mut self, body: &'a [u8]) -> Self {
        self.body = body;
        self
    }

    /// The request's bytes: the request line; `Host`, `x-ms-date`,
    /// `x-ms-version`, the extra headers, `Content-Length`, and
    /// `Authorization` when `creds` are given (Shared Key); then the body.
    ///
    /// If the extra headers carry `Transfer-Encoding`, there is no
    /// `Content-Length` and only the head is returned: the caller sends the
    /// body in chunks, and the signature still covers its decoded length.
    pub fn encode(&self, creds: Option<&Credentials>) -> Result<Vec<u8>, Error> {
        let date = httpdate::fmt_http_date(self.date);
        let length = self.body.len().to_string();
        let chunked = self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding"));
        let mut headers: Vec<(&str, &str)> = vec![
            ("Host", self.host),
            ("x-ms-date", &date),
            ("x-ms-version", self.version),
        ];
        headers.extend_from_slice(self.headers);
        if !chunked {
            headers.push(("Content-Length", &length));
        }
        let auth = match creds {
            Some(c) => Some(c.authorization(self.method, self.target, &headers, self.body.len())?),
            None => None,
        };
        if let Some(auth) = &auth {
            headers.push(("Authorization", auth));
        }
        check_token(self.method, "the method")?;
        if self.target.is_empty() || self.target.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(Error::BadRequest(
                "the target is empty or has spaces or control characters",
            ));
        }
        let mut out = Vec::with_capacity(self.body.len().saturating_add(512));
        out.extend_from_slice(format!("{} {} HTTP/1.1\r\n", self.method, self.target).as_bytes());
        for (name, value) in &headers {
            check_token(name, "a header name")?;
            // CR or LF would end the header early and smuggle in another.
            if value.bytes().any(|b| b == b'\r' || b == b'\n') {
                return Err(Error::BadRequest("a header value contains CR or LF"));
            }
            out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        if !chunked {
            out.extend_from_slice(self.body);
        }
        Ok(out)
    }
}

/// A method or header name: RFC 9110's `token`.
fn check_token(s: &str, what: &'static str) -> Result<(), Error> {
    let ok = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::BadRequest(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_signed_request_has_its_headers_and_body() {
        let creds = Credentials::dev();
        let mut req = Request::new("POST", "127.0.0.1:10001", "/devstoreaccount1/q/messages")
            .headers(&[("Content-Type", "application/xml")])
            .body(b"<x/>");
        req.date = UNIX_EPOCH + Duration::from_secs(1_704_067_200);
        let out = text(req.encode(Some(&creds)).unwrap());
        let sts = creds
            .string_to_sign(
                "POST",
                "/devstoreaccount1/q/messages",
                &[
                    ("x-ms-date", "Mon, 01 Jan 2024 00:00:00 GMT"),
                    ("x-ms-version", API_VERSION),
                    ("Content-Type", "application/xml"),
                ],
                4,
            )
            .unwrap();
        let want = format!(
            "POST /devstoreaccount1/q/messages HTTP/1.1\r\nHost: 127.0.0.1:10001\r\n\
             x-ms-date: Mon, 01 Jan 2024 00:00:00 GMT\r\nx-ms-version: {API_VERSION}\r\n\
             Content-Type: application/xml\r\nContent-Length: 4\r\n\
             Authorization: SharedKey devstoreaccount1:{}\r\n\r\n<x/>",
            creds.sign(&sts)
        );
        assert_eq!(out, want);
    }

    #[test]
    fn chunked_requests_are_head_only() {
        let req = Request::new("POST", "h", "/a/q/messages")
            .headers(&[("Transfer-Encoding", "chunked")])
            .body(b"abc");
        let out = text(req.encode(None).unwrap());
        assert!(out.ends_with("Transfer-Encoding: chunked\r\n\r\n"), "{out}");
        assert!(!out.contains("Content-Length"));
    }

    #[test]
    fn injection_is_refused() {
        let bad_value: &[(&str, &str)] = &[("x-ms-meta-a", "1\r\nX: y")];
        assert!(Request::new("GET", "h", "/a").headers(bad_value).encode(None).is_err());
        assert!(Request::new("GET", "h", "/a b").encode(None).is_err());
        assert!(Request::new("G T", "h", "/a").encode(None).is_err());
        assert!(Request::new("GET", "h\r\n", "/a").encode(None).is_err());
    }
}
