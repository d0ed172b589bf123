//! A blocking HTTP/1.1 client for tests. Requests are signed and answers
//! parsed by `hematite_client`, whose Shared Key signer is written from
//! Microsoft's spec apart from the server's, so every signed request the
//! server accepts also checks its verifier.

use hematite_client::{parse_response, Credentials, Request};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub const ACCOUNT: &str = hematite_client::DEV_ACCOUNT;
pub const KEY: &str = hematite_client::DEV_KEY;

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn code(&self) -> &str {
        self.header("x-ms-error-code").unwrap_or("")
    }
}

pub struct Client {
    /// How long to wait for an answer before failing with an I/O error.
    pub timeout: Duration,
    port: u16,
    creds: Credentials,
    conn: Option<TcpStream>,
    buf: Vec<u8>,
}

/// The bytes of one request signed with Shared Key for the development
/// account: `Host`, `x-ms-date`, `x-ms-version`, the extra headers, and a
/// `Content-Length` unless the extra headers choose chunked encoding. With
/// chunked encoding only the head is returned: `body` is the decoded body
/// whose length the signature covers, and the caller sends the chunks.
pub fn signed_request(
    port: u16,
    key: &[u8],
    method: &str,
    target: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> io::Result<Vec<u8>> {
    let creds = Credentials::from_key_bytes(ACCOUNT, key.to_vec());
    let host = format!("127.0.0.1:{port}");
    Ok(Request::new(method, &host, target)
        .headers(extra)
        .body(body)
        .encode(Some(&creds))?)
}

impl Client {
    pub fn new(port: u16) -> Self {
        Client {
            timeout: Duration::from_secs(30),
            port,
            creds: Credentials::dev(),
            conn: None,
            buf: Vec::new(),
        }
    }

    /// Sends one signed request on a kept-alive connection. Any I/O error
    /// means the outcome is unknown (the server may have applied it).
    pub fn call(&mut self, method: &str, target: &str, extra: &[(&str, &str)], body: &[u8]) -> io::Result<Reply> {
        let host = format!("127.0.0.1:{}", self.port);
        let bytes = Request::new(method, &host, target)
            .headers(extra)
            .body(body)
            .encode(Some(&self.creds))?;
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => {
                let s = TcpStream::connect(("127.0.0.1", self.port))?;
                s.set_read_timeout(Some(self.timeout))?;
                s.set_nodelay(true)?;
                self.buf.clear();
                s
            }
        };
        // The connection is kept only after a complete answer that allows it.
        let (reply, keep) = self.exchange(&conn, method, &bytes)?;
        if keep {
            self.conn = Some(conn);
        }
        Ok(reply)
    }

    fn exchange(&mut self, mut conn: &TcpStream, method: &str, bytes: &[u8]) -> io::Result<(Reply, bool)> {
        conn.write_all(bytes)?;
        loop {
            if let Some((resp, used)) = parse_response(&self.buf, method)? {
                self.buf.drain(..used);
                let keep = resp.keeps_alive();
                let body = resp.body_text().into_owned();
                let reply = Reply {
                    status: resp.status,
                    headers: resp.headers,
                    body,
                };
                return Ok((reply, keep));
            }
            let mut chunk = [0u8; READ_CHUNK];
            let n = conn.read(&mut chunk)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Every `<tag>…</tag>` value in `xml`, in order.
pub fn all_between(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(unescape(&after[..j]));
        rest = &after[j + close.len()..];
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

pub fn message_xml(text: &str) -> Vec<u8> {
    let esc = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    format!("<QueueMessage><MessageText>{esc}</MessageText></QueueMessage>").into_bytes()
}
