//! Starting and stopping the real `hematite` binary in tests. Shared by the
//! server's own integration tests (by path) and the end-to-end crate.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

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
///
/// The child is SIGKILLed when the thread that started it ends: a test that
/// panics before its guard stops the server (or that has no guard) must not
/// leave a server running, holding a port and a CPU through later tests and
/// measurements. libtest runs each test on a thread of its own, so that
/// thread's end is the test's end. A caller that wants the server to outlive
/// the starting thread must start it from the thread that outlives it.
pub fn spawn_ready(mut cmd: Command) -> Result<Child, String> {
    // SAFETY: prctl and getppid are async-signal-safe, and nothing else runs
    // in the child between fork and exec.
    unsafe {
        let parent = libc::getpid();
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have ended between fork and prctl, with no
            // signal to come: do not run orphaned.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
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

/// How a process ended, in words: `exit status 70` or `killed by signal 9`.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => format!("{status}"),
    }
}

/// SIGKILL a child that must still be running, then wait: a crash the
/// caller causes. Err, with the status, when the child had already exited
/// on its own before the signal (e.g. status 70 after a panic), or when the
/// wait status is anything but "killed by SIGKILL" (it exited on its own
/// while the signal was on its way).
pub fn kill9_checked(child: &mut Child) -> Result<ExitStatus, String> {
    match child.try_wait() {
        Ok(Some(status)) => {
            return Err(format!(
                "hematite had exited on its own ({}) before the SIGKILL",
                describe(status)
            ))
        }
        Ok(None) => {}
        Err(e) => return Err(format!("cannot query hematite's state: {e}")),
    }
    // SAFETY: signalling our own child, which try_wait just found unreaped.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    let status = child.wait().map_err(|e| format!("wait for hematite: {e}"))?;
    if status.signal() == Some(libc::SIGKILL) {
        Ok(status)
    } else {
        Err(format!(
            "hematite ended with {} instead of being killed by the SIGKILL",
            describe(status)
        ))
    }
}

/// SIGKILL, then wait: a crash. Panics if the process was not running any
/// more or did not die of this SIGKILL (see [`kill9_checked`]): an exit the
/// test did not cause is a failure, never taken for the crash.
pub fn kill9(child: &mut Child) -> ExitStatus {
    kill9_checked(child).unwrap_or_else(|e| panic!("{e}"))
}

/// A child's stderr, read on a thread as it comes (so the pipe never fills
/// and blocks the server), keeping the last [`StderrTail::CAP`] bytes.
pub struct StderrTail {
    buf: Arc<Mutex<VecDeque<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl StderrTail {
    pub const CAP: usize = 64 * 1024;

    /// Takes the child's piped stderr.
    pub fn attach(child: &mut Child) -> StderrTail {
        let buf = Arc::new(Mutex::new(VecDeque::new()));
        let reader = child.stderr.take().map(|mut err| {
            let buf = buf.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = err.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    let mut b = buf.lock().unwrap_or_else(|p| p.into_inner());
                    b.extend(&chunk[..n]);
                    let excess = b.len().saturating_sub(Self::CAP);
                    b.drain(..excess);
                }
            })
        });
        StderrTail { buf, reader }
    }

    /// The last `max` bytes written so far. Once the process has ended, pass
    /// `ended` to read everything it wrote first.
    pub fn tail(&mut self, max: usize, ended: bool) -> String {
        if ended {
            if let Some(r) = self.reader.take() {
                let _ = r.join();
            }
        }
        let b = self.buf.lock().unwrap_or_else(|p| p.into_inner());
        let skip = b.len().saturating_sub(max);
        let bytes: Vec<u8> = b.iter().skip(skip).copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}
