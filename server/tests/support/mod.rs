//! What the binary-level test files share: the shared process and client
//! helpers (by path: the end-to-end crate depends on this one), and a test
//! server on a temporary directory. Not a test target itself.
#![allow(dead_code)] // each test file uses part of it

use client::{signed_request, Client, KEY};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::time::Duration;

pub use hematite_tests::proc;

pub use hematite_tests::client;

pub struct Server {
    pub child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let port = proc::free_port();
        let mut args = vec!["--shards", "1", "--io-memory-kib", "512"];
        args.extend_from_slice(extra);
        let bin = std::env::var("HEMATITE_BIN_UNDER_TEST").unwrap_or_else(|_| env!("CARGO_BIN_EXE_hematite").into());
        let cmd = proc::command(bin.as_ref(), port, dir.path(), &args);
        let child = proc::spawn_ready(cmd).expect("hematite starts");
        Server { child, port, _dir: dir }
    }

    pub fn client(&self) -> Client {
        Client::new(self.port)
    }

    /// A fresh connection answers a signed request.
    pub fn healthy(&self) {
        let mut c = self.client();
        c.call("GET", "/devstoreaccount1/?comp=list", &[], b"")
            .map(|r| assert_eq!(r.status, 200, "{}", r.body))
            .expect("the server still answers on a new connection");
    }

    /// Sends raw bytes on a new connection and reads until the server closes
    /// (or 10 s pass).
    pub fn raw(&self, bytes: &[u8]) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(bytes).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// A request signed for `target`, as bytes, with `Connection: close`.
    pub fn signed(&self, method: &str, target: &str, body: &[u8]) -> String {
        let key = base64_key();
        let bytes = signed_request(self.port, &key, method, target, &[("Connection", "close")], body).unwrap();
        String::from_utf8(bytes).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let status = proc::stop(&mut self.child);
        assert!(status.success() || std::thread::panicking(), "exit {status}");
    }
}

/// The development key, decoded.
pub fn base64_key() -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(KEY).unwrap()
}
