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
fn a_kept_timer_preempts_within_the_period_it_was_armed_for() {
    // The usual way a timer is kept: a pass empties the queues, the loop's
    // poll before parking finds work (here a timer of ours, found while the
    // loop spins before parking), and the next pass starts without the
    // latency timer having fired. Many such short passes, then a spin: it
    // must be preempted, and by the timer armed before them (kept, so it
    // fires well before a full period from the spin's start) or, at the
    // latest, a full period after.
    let period = Duration::from_millis(200);
    // glommio spins before parking only on an executor bound to a CPU.
    let handle = LocalExecutorBuilder::new(glommio::Placement::Fixed(0))
        .preempt_timer(period)
        .io_memory(512 * 1024)
        .spin_before_park(Duration::from_millis(50))
        .spawn(move || async move {
            let start = Instant::now();
            while start.elapsed() < period / 2 {
                glommio::timer::sleep(Duration::from_millis(2)).await;
            }
            spin_until_preempted()
        })
        .expect("executor starts");
    let spin = handle.join().expect("executor ran");
    assert!(
        spin < period,
        "the spin waited {spin:?}: the timer armed before it was not kept"
    );
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
