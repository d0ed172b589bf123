//! An incremental HTTP/1.1 response parser. The caller appends what it
//! reads to a buffer and calls [`parse_response`] until it returns a
//! response; the parser never does I/O and never blocks.

use crate::Error;
use std::borrow::Cow;

/// Headers per response (Azure sends about 10).
pub const MAX_HEADERS: usize = 64;
/// Bytes of a status line and headers, and of a chunked body's trailers.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Bytes of a decoded body. The largest Queue answers are 32 messages of
/// 64 KiB (base64-grown) or a long queue listing: a few MiB.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Bytes of one chunk-size line (hex digits and extensions).
pub const MAX_CHUNK_LINE: usize = 1024;

/// One final (non-1xx) response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub reason: String,
    /// HTTP/1.0 rather than 1.1.
    pub http10: bool,
    /// In the order received; values decoded lossily as UTF-8.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Response {
    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn body_text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    /// Whether the connection can carry another request after this answer.
    pub fn keeps_alive(&self) -> bool {
        let has = |token: &str| {
            self.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
                .flat_map(|(_, v)| v.split(','))
                .any(|t| t.trim().eq_ignore_ascii_case(token))
        };
        if self.http10 {
            has("keep-alive")
        } else {
            !has("close")
        }
    }
}

/// How a response's body is delimited.
enum Framing {
    None,
    Length(usize),
    Chunked,
}

/// The first complete final response at the start of `buf`, and how many
/// bytes it used (interim 1xx responses before it included), or `None` if
/// more bytes are needed. `request_method` is the method of the request it
/// answers: the answer to HEAD has no body whatever its headers say.
///
/// Bodies delimited only by the connection closing are refused: Hematite,
/// Azurite and Azure always send a length or chunks.
pub fn parse_response(buf: &[u8], request_method: &str) -> Result<Option<(Response, usize)>, Error> {
    let mut start = 0usize;
    loop {
        let rest = buf.get(start..).unwrap_or_default();
        let Some((mut resp, head_len)) = parse_head(rest)? else {
            return Ok(None);
        };
        let body_start = start.checked_add(head_len).ok_or(Error::TooLarge("response"))?;
        // 100 Continue and friends precede the real answer; 101 is final
        // (the protocol changes, and what follows is not HTTP/1.1).
        if (100..200).contains(&resp.status) && resp.status != 101 {
            start = body_start;
            continue;
        }
        let data = buf.get(body_start..).unwrap_or_default();
        let used = match framing(&resp, request_method)? {
            Framing::None => 0,
            Framing::Length(n) => match data.get(..n) {
                Some(body) => {
                    resp.body = body.to_vec();
                    n
                }
                None => return Ok(None),
            },
            Framing::Chunked => match dechunk(data)? {
                Some((body, n)) => {
                    resp.body = body;
                    n
                }
                None => return Ok(None),
            },
        };
        let end = body_start.checked_add(used).ok_or(Error::TooLarge("response"))?;
        return Ok(Some((resp, end)));
    }
}

/// The status line and headers (body empty), and their length.
fn parse_head(buf: &[u8]) -> Result<Option<(Response, usize)>, Error> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Response::new(&mut slots);
    let n = match head.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => return Err(Error::TooLarge("head")),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Error::TooLarge("header count")),
        Err(e) => return Err(Error::Malformed(e.to_string())),
    };
    if n > MAX_HEAD_BYTES {
        return Err(Error::TooLarge("head"));
    }
    let status = head.code.ok_or_else(|| Error::Malformed("no status code".into()))?;
    let resp = Response {
        status,
        reason: head.reason.unwrap_or("").to_string(),
        http10: head.version == Some(0),
        headers: head
            .headers
            .iter()
            .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).into_owned()))
            .collect(),
        body: Vec::new(),
    };
    Ok(Some((resp, n)))
}

fn framing(resp: &Response, request_method: &str) -> Result<Framing, Error> {
    if request_method.eq_ignore_ascii_case("HEAD") || resp.status == 204 || resp.status == 304 || resp.status < 200 {
        return Ok(Framing::None);
    }
    let named = |name: &'static str| {
        resp.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    if let Some(te) = named("transfer-encoding").next_back() {
        // Chunked must be the last coding; anything else ends at close.
        let last = te.rsplit(',').next().unwrap_or("").trim();
        return if last.eq_ignore_ascii_case("chunked") {
            Ok(Framing::Chunked)
        } else {
            Err(Error::Malformed(format!("unsupported Transfer-Encoding '{te}'")))
        };
    }
    let mut length = None;
    for v in named("content-length") {
        let n: usize = v
            .parse()
            .map_err(|_| Error::Malformed(format!("bad Content-Length '{v}'")))?;
        if length.is_some_and(|l| l != n) {
            return Err(Error::Malformed("conflicting Content-Length headers".into()));
        }
        length = Some(n);
    }
    match length {
        Some(n) if n > MAX_BODY_BYTES => Err(Error::TooLarge("body")),
        Some(n) => Ok(Framing::Length(n)),
        None => Err(Error::Malformed("neither Content-Length nor chunked".into())),
    }
}

/// A chunked body's decoded bytes and the bytes it used (through the
/// trailers' blank line), or `None` if incomplete.
fn dechunk(data: &[u8]) -> Result<Option<(Vec<u8>, usize)>, Error> {
    let mut body = Vec::new();
    let mut pos = 0usize;
    loop {
        let rest = data.get(pos..).unwrap_or_default();
        let (line, size) = match httparse::parse_chunk_size(rest) {
            Ok(httparse::Status::Complete(x)) => x,
            Ok(httparse::Status::Partial) if rest.len() > MAX_CHUNK_LINE => {
                return Err(Error::TooLarge("chunk-size line"))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(Error::Malformed("bad chunk-size line".into())),
        };
        let size = usize::try_from(size).map_err(|_| Error::TooLarge("chunk"))?;
        if body.len().checked_add(size).is_none_or(|total| total > MAX_BODY_BYTES) {
            return Err(Error::TooLarge("body"));
        }
        let chunk_start = pos.checked_add(line).ok_or(Error::TooLarge("body"))?;
        if size == 0 {
            let trailers = data.get(chunk_start..).unwrap_or_default();
            return Ok(trailers_end(trailers)?
                .and_then(|n| chunk_start.checked_add(n))
                .map(|end| (body, end)));
        }
        let chunk_end = chunk_start.checked_add(size).ok_or(Error::TooLarge("body"))?;
        let crlf_end = chunk_end.checked_add(2).ok_or(Error::TooLarge("body"))?;
        let (Some(chunk), Some(crlf)) = (data.get(chunk_start..chunk_end), data.get(chunk_end..crlf_end)) else {
            return Ok(None);
        };
        if crlf != b"\r\n" {
            return Err(Error::Malformed("a chunk does not end with CRLF".into()));
        }
        body.extend_from_slice(chunk);
        pos = crlf_end;
    }
}

/// The length of the trailer section and its closing blank line.
fn trailers_end(data: &[u8]) -> Result<Option<usize>, Error> {
    if data.starts_with(b"\r\n") {
        return Ok(Some(2));
    }
    if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
        return Ok(i.checked_add(4));
    }
    if data.len() > MAX_HEAD_BYTES {
        return Err(Error::TooLarge("trailers"));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `wire` fed in two parts split at every byte boundary: every
    /// strict prefix is incomplete and the whole gives the same answer.
    fn parse_at_every_split(wire: &[u8], method: &str) -> (Response, usize) {
        let whole = parse_response(wire, method).unwrap().expect("complete");
        for cut in 0..whole.1 {
            assert_eq!(parse_response(&wire[..cut], method).unwrap(), None, "cut at {cut}");
        }
        whole
    }

    #[test]
    fn content_length_at_every_split_with_pipelined_rest() {
        let wire = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nx-ms-request-id: 1\r\n\r\nhelloHTTP/1.1 204";
        let (r, used) = parse_at_every_split(wire, "PUT");
        assert_eq!(
            (r.status, r.reason.as_str(), r.body.as_slice()),
            (201, "Created", &b"hello"[..])
        );
        assert_eq!(r.header("X-MS-REQUEST-ID"), Some("1"));
        assert_eq!(&wire[used..], b"HTTP/1.1 204");
        assert!(r.keeps_alive());
    }

    #[test]
    fn chunked_at_every_split() {
        let wire =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\n<Queu\r\nA\r\neMessages/\r\n0\r\n\r\n";
        let (r, used) = parse_at_every_split(wire, "GET");
        assert_eq!(r.body_text(), "<QueueMessages/");
        assert_eq!(used, wire.len());
    }

    #[test]
    fn chunked_with_trailers() {
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nT: 1\r\n\r\nrest";
        let (r, used) = parse_at_every_split(wire, "GET");
        assert_eq!(r.body, b"x");
        assert_eq!(&wire[used..], b"rest");
    }

    #[test]
    fn head_and_no_content_have_no_body() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n";
        let (r, used) = parse_at_every_split(wire, "HEAD");
        assert_eq!((r.body.len(), used), (0, wire.len()));
        let wire = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(parse_at_every_split(wire, "DELETE").1, wire.len());
    }

    #[test]
    fn interim_responses_are_skipped() {
        let wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n";
        let (r, used) = parse_at_every_split(wire, "POST");
        assert_eq!((r.status, used), (201, wire.len()));
    }

    #[test]
    fn connection_close_and_http10() {
        let r = |wire: &[u8]| parse_response(wire, "GET").unwrap().unwrap().0;
        assert!(!r(b"HTTP/1.1 400 Bad\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").keeps_alive());
        assert!(!r(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").keeps_alive());
        assert!(r(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n").keeps_alive());
    }

    #[test]
    fn bad_framing_is_an_error() {
        let e = |wire: &[u8]| parse_response(wire, "GET").unwrap_err();
        assert!(matches!(e(b"HTTP/1.1 200 OK\r\n\r\n"), Error::Malformed(_)));
        assert!(matches!(
            e(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"),
            Error::Malformed(_)
        ));
        assert!(matches!(
            e(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            Error::Malformed(_)
        ));
        assert!(matches!(
            e(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Error::Malformed(_)
        ));
        assert!(matches!(
            e(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n"),
            Error::Malformed(_)
        ));
        assert!(matches!(e(b"HTTX/1.1 200 OK\r\n\r\n"), Error::Malformed(_)));
    }

    #[test]
    fn limits_hold() {
        let e = |wire: &[u8]| parse_response(wire, "GET").unwrap_err();
        let huge = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", MAX_BODY_BYTES + 1);
        assert_eq!(e(huge.as_bytes()), Error::TooLarge("body"));
        let long_head = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(MAX_HEAD_BYTES));
        assert_eq!(e(long_head.as_bytes()), Error::TooLarge("head"));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("H{i}: 1\r\n")).collect();
        assert_eq!(
            e(format!("HTTP/1.1 200 OK\r\n{many}\r\n").as_bytes()),
            Error::TooLarge("header count")
        );
        let chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n";
        assert_eq!(e(chunk), Error::TooLarge("body"));
    }
}
