//! The executor's timers, as our copy of glommio keeps them
//! (third_party/glommio/HEMATITE.md, change 3): a preemption timer still
//! pending is kept across the loop's passes rather than cancelled and armed
//! anew on each. What that must not change, and what these tests hold it to:
//! a busy task is still told to yield within the preemption period on every
//! pass, not only the first, and a timer still wakes an executor that went
//! to sleep after a busy spell.

use glommio::LocalExecutorBuilder;
use std::time::{Duration, Instant};

/// Far above the period, so a slow machine passes; a preemption that never
/// comes (a timer lost across passes) still fails, rather than hangs.
const NEVER: Duration = Duration::from_secs(5);

fn executor(preempt: Duration) -> LocalExecutorBuilder {
    // Small: the tests run beside others under an 8 MiB memlock limit.
    LocalExecutorBuilder::default()
        .preempt_timer(preempt)
        .io_memory(512 * 1024)
}

/// Spins until the executor asks the running task to yield; how long that took.
fn spin_until_preempted() -> Duration {
    let start = Instant::now();
    while !glommio::executor().need_preempt() {
        assert!(start.elapsed() < NEVER, "no preemption within {NEVER:?}");
        std::hint::spin_loop();
    }
    start.elapsed()
}

#[test]
fn a_busy_task_is_preempted_on_every_pass() {
    let handle = executor(Duration::from_millis(5))
        .spawn(|| async {
            let mut longest = Duration::ZERO;
            for _ in 0..50 {
                longest = longest.max(spin_until_preempted());
                glommio::yield_if_needed().await;
            }
            longest
        })
        .expect("executor starts");
    let longest = handle.join().expect("executor ran");
    assert!(longest < NEVER, "longest wait for a preemption: {longest:?}");
}

#[test]
fn a_spin_after_passes_cut_short_by_io_is_still_preempted() {
    // Bytes arriving on a socket complete on the latency ring, so they
    // preempt the spinning task before the period is up: the pass after
    // each keeps the timer still pending (the path the change adds). Once
    // the bytes stop, a spin must still be preempted, by the kept timer or
    // a new one: a kept timer that is no longer in the kernel would leave
    // it spinning.
    const BYTES: usize = 100;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        let (mut peer, _) = listener.accept().expect("accept");
        for _ in 0..BYTES {
            std::io::Write::write_all(&mut peer, b"x").expect("write");
            std::thread::sleep(Duration::from_millis(1));
        }
        // Open until the executor is done: no close to complete a read.
        let _ = done_rx.recv_timeout(NEVER * 2);
    });
    let handle = executor(Duration::from_millis(50))
        .spawn(move || async move {
            let mut stream = glommio::net::TcpStream::connect(addr).await.expect("connect");
            let finished = std::rc::Rc::new(std::cell::Cell::new(false));
            let reader = glommio::spawn_local({
                let finished = finished.clone();
                async move {
                    use futures_lite::AsyncReadExt;
                    let (mut buf, mut got) = ([0u8; 64], 0);
                    while got < BYTES {
                        got += stream.read(&mut buf).await.expect("read");
                    }
                    finished.set(true);
                    stream
                }
            });
            let mut cut_short = 0;
            let mut passes = 0;
            let start = Instant::now();
            while passes < 10_000 && start.elapsed() < NEVER {
                if spin_until_preempted() < Duration::from_millis(50) {
                    cut_short += 1;
                }
                passes += 1;
                glommio::yield_if_needed().await;
                if finished.get() {
                    break;
                }
            }
            let _stream = reader.await;
            // The bytes have stopped: nothing but a timer can preempt now.
            (cut_short, spin_until_preempted())
        })
        .expect("executor starts");
    let (cut_short, last) = handle.join().expect("executor ran");
    let _ = done_tx.send(());
    writer.join().expect("writer");
    assert!(cut_short > 0, "no pass was cut short by the socket");
    assert!(last < NEVER, "the last spin waited {last:?}");
}

#[test]
fn a_timer_wakes_an_executor_that_slept_after_a_busy_spell() {
    let handle = executor(Duration::from_millis(5))
        .spawn(|| async {
            for _ in 0..10 {
                spin_until_preempted();
                glommio::yield_if_needed().await;
            }
            // Nothing runnable now: the executor sleeps until the timer.
            let start = Instant::now();
            glommio::timer::sleep(Duration::from_millis(30)).await;
            start.elapsed()
        })
        .expect("executor starts");
    let slept = handle.join().expect("executor ran");
    assert!(slept >= Duration::from_millis(30), "woke early: {slept:?}");
    assert!(slept < NEVER, "the timer did not wake the executor: {slept:?}");
}
