//! Starting and stopping the real `hematite` binary in tests. Shared by the
//! server's own integration tests (by path) and the end-to-end crate.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `--addr 127.0.0.1:PORT --data-dir DIR` and the given extra flags.
pub fn command(bin: &Path, port: u16, data_dir: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["--addr", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(data_dir)
        .args(extra);
    cmd
}

/// Spawns the command and waits for the ready line. Stderr is piped (tests
/// may read the log after the process ends).
pub fn spawn_ready(mut cmd: Command) -> Result<Child, String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start hematite: {e}"))?;
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line);
    if line.contains("hematite ready") {
        return Ok(child);
    }
    let _ = child.kill();
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(child.stderr.as_mut().expect("piped"), &mut err);
    let _ = child.wait();
    Err(format!("hematite did not become ready: {line} {err}"))
}

/// SIGTERM, then wait: a graceful stop.
pub fn stop(child: &mut Child) -> ExitStatus {
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    child.wait().expect("wait for hematite")
}

/// SIGKILL, then wait: a crash.
pub fn kill9(child: &mut Child) {
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    let _ = child.wait();
}
