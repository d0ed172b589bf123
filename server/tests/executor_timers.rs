//! The executor's timers, as our copy of glommio keeps them
//! (third_party/glommio/HEMATITE.md, change 3): a preemption timer still
//! pending is kept across the loop's passes rather than cancelled and armed
//! anew on each. What that must not change, and what these tests hold it to:
//! a busy task is still told to yield within the preemption period on every
//! pass, not only the first, and a timer still wakes an executor that went
//! to sleep after a busy spell.
//!
//! What they do not reach: a timer is kept only on a pass that something
//! other than the timer itself cut short (a completion on the latency ring:
//! a connect, an eventfd wake-up). Attempts to cause those from a test (a
//! connect, socket reads with a ring depth of 2 so the throughput timer
//! fires) did not preempt a spinning task, so the kept timer is exercised
//! by the server under load (the suites, `bench/compare`) and held by a
//! reading of the code (docs/decisions/0008-preemption-timers-kept.md).

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
