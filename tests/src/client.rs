//! A blocking HTTP/1.1 client for tests, signing every request with Shared
//! Key (the signer is the server's own, which the SDK suites verify).

use base64::Engine;
use server::addressing::parse_target;
use server::auth::{shared_key_strings, signature};
use server::http::Request;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub const ACCOUNT: &str = "devstoreaccount1";
pub const KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

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
    key: Vec<u8>,
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
    let mut headers: Vec<(String, String)> = vec![
        ("Host".into(), format!("127.0.0.1:{port}")),
        (
            "x-ms-date".into(),
            httpdate::fmt_http_date(std::time::SystemTime::now()),
        ),
        ("x-ms-version".into(), "2026-10-06".into()),
    ];
    for (k, v) in extra {
        headers.push((k.to_string(), v.to_string()));
    }
    let chunked = extra.iter().any(|(k, _)| k.eq_ignore_ascii_case("transfer-encoding"));
    if !chunked {
        headers.push(("Content-Length".into(), body.len().to_string()));
    }
    let req = Request {
        method: method.into(),
        target: target.into(),
        http10: false,
        headers: headers.clone(),
        body: body.to_vec(),
    };
    let t = parse_target(&req, &server::addressing::Addressing::path_style_only())
        .map_err(|e| io::Error::other(e.message))?;
    let sig = signature(key, &shared_key_strings(&req, ACCOUNT, &t)[0]);
    let mut out = format!("{method} {target} HTTP/1.1\r\n");
    for (k, v) in &headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!("Authorization: SharedKey {ACCOUNT}:{sig}\r\n\r\n"));
    let mut bytes = out.into_bytes();
    if !chunked {
        bytes.extend_from_slice(body);
    }
    Ok(bytes)
}

impl Client {
    pub fn new(port: u16) -> Self {
        Client {
            timeout: Duration::from_secs(30),
            port,
            key: base64::engine::general_purpose::STANDARD.decode(KEY).unwrap(),
            conn: None,
            buf: Vec::new(),
        }
    }

    /// Sends one signed request on a kept-alive connection. Any I/O error
    /// means the outcome is unknown (the server may have applied it).
    pub fn call(&mut self, method: &str, target: &str, extra: &[(&str, &str)], body: &[u8]) -> io::Result<Reply> {
        let bytes = signed_request(self.port, &self.key, method, target, extra, body)?;
        if self.conn.is_none() {
            let s = TcpStream::connect(("127.0.0.1", self.port))?;
            s.set_read_timeout(Some(self.timeout))?;
            s.set_nodelay(true)?;
            self.conn = Some(s);
            self.buf.clear();
        }
        let result = self.exchange(&bytes);
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    fn exchange(&mut self, bytes: &[u8]) -> io::Result<Reply> {
        let conn = self.conn.as_mut().expect("connected");
        conn.write_all(bytes)?;
        loop {
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut hs);
            if let httparse::Status::Complete(n) = resp.parse(&self.buf).map_err(|e| io::Error::other(e.to_string()))? {
                let headers: Vec<(String, String)> = resp
                    .headers
                    .iter()
                    .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect();
                let status = resp.code.unwrap_or(0);
                let len: usize = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                while self.buf.len() < n + len {
                    self.fill()?;
                }
                let body = String::from_utf8_lossy(&self.buf[n..n + len]).into_owned();
                self.buf.drain(..n + len);
                let close = headers
                    .iter()
                    .any(|(k, v)| k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close"));
                if close {
                    self.conn = None;
                }
                return Ok(Reply { status, headers, body });
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        let conn = self.conn.as_mut().expect("connected");
        let mut chunk = [0u8; 16384];
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
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
