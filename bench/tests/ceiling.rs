//! The ceiling is the reference every put target is a fraction of, so it
//! must do the work it claims: every body it answered is in its log. It
//! once dropped the bodies that arrived while a commit ran, and no run of
//! `bench/compare` could show it (docs/benchmarks.md, "The ceiling dropped
//! bodies").
//!
//! What this cannot see: a body answered before its fdatasync (or its
//! write), when a later commit writes it before the ceiling is stopped.
//! Only a crash between the answer and the write would show that.

use hematite_tests::proc;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const CONNECTIONS: usize = 8;
const REQUESTS: usize = 150;

/// Kills the ceiling when the test ends, by panic too.
struct Ceiling(Child);

impl Drop for Ceiling {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One POST with `body`, and its answer read to the end.
fn post(stream: &mut TcpStream, body: &str) {
    write!(
        stream,
        "POST /devstoreaccount1/q/messages HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "the ceiling closed the connection");
        got.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some(head) = text.find("\r\n\r\n") {
            let length: usize = text[..head]
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            if got.len() >= head + 4 + length {
                assert!(text.starts_with("HTTP/1.1 201"), "{text}");
                return;
            }
        }
    }
}

#[test]
fn the_durable_ceiling_writes_every_body_it_answers() {
    // Under the build's directory: O_DIRECT needs a real file system,
    // and /tmp may be tmpfs.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let port = proc::free_port();
    let mut ceiling = Ceiling(
        Command::new(env!("CARGO_BIN_EXE_ceiling"))
            .args(["--addr", &format!("127.0.0.1:{port}"), "--ring-mib", "16", "--durable"])
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(ceiling.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("ceiling ready"), "the ceiling did not start: {line:?}");
    // Concurrent connections, so bodies arrive while a commit runs.
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                // A lost wake-up fails the test instead of hanging it.
                stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                for i in 0..REQUESTS {
                    post(&mut stream, &format!("<m>{c:02}-{i:04}</m>"));
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    // Every answered body has been written by now, if the ceiling is right.
    drop(ceiling);
    let log = std::fs::read(dir.path().join("ceiling.log")).unwrap();
    let found: HashSet<&[u8]> = log
        .windows(14)
        .filter(|w| w.starts_with(b"<m>") && w.ends_with(b"</m>"))
        .map(|w| &w[3..10])
        .collect();
    let missing: Vec<String> = (0..CONNECTIONS)
        .flat_map(|c| (0..REQUESTS).map(move |i| format!("{c:02}-{i:04}")))
        .filter(|id| !found.contains(id.as_bytes()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} answered bodies are not in the log, the first {:?}",
        missing.len(),
        CONNECTIONS * REQUESTS,
        missing.first()
    );
}
