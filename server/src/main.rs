use clap::Parser;
use server::config::LogFormat;
use tracing_subscriber::EnvFilter;

// Requests allocate many small strings; glibc's malloc spent ~15% of a core
// on them under load (perf, docs/benchmarks.md). mimalloc is far cheaper
// here; `server::allocator` says how it is called.
#[global_allocator]
static GLOBAL: server::allocator::Mimalloc = server::allocator::Mimalloc;

/// Log lines queued for the writer thread before new ones are dropped.
const LOG_LINES_QUEUED: usize = 64 * 1024;

fn main() {
    let cfg = server::config::Config::parse();
    // First, before the log queue and the threads allocate: pages backed
    // before the switch is set stay huge (docs/decisions/0006-no-huge-pages.md).
    let huge_pages = server::startup::set_huge_pages(cfg.huge_pages);
    // SAFETY: this is still the only thread (mimalloc's options are not
    // synchronized).
    unsafe { server::allocator::return_memory_lazily() };
    // Before the log writer's thread starts (runtime::block_stop_signals).
    server::runtime::block_stop_signals();
    // HEMATITE_LOG sets the filter (warnings by default); --request-log
    // adds the request lines on top of whatever it says.
    let mut filter = EnvFilter::try_from_env("HEMATITE_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    if cfg.request_log {
        if let Ok(d) = "hematite_request=info".parse() {
            filter = filter.add_directive(d);
        }
    }
    // Log lines go through a queue to one writer thread: a core never
    // blocks on stderr (a stalled journald would otherwise stop every core
    // and trip the shard watchdog), and cores share no lock to log. When
    // the queue is full, lines are dropped rather than waited for.
    let (writer, flush_on_exit) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(LOG_LINES_QUEUED)
        .thread_name("hematite-log")
        .finish(std::io::stderr());
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer);
    match cfg.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    server::runtime::keep_log_flush(flush_on_exit);
    // After the stop signals are blocked, which the thread inherits.
    if let Err(e) = server::allocator::start_purge_thread() {
        tracing::warn!("could not start the thread that gives freed memory back: {e}");
    }
    if let Err(e) = huge_pages {
        tracing::warn!("could not set the transparent huge pages switch: {e}");
    }
    let result = server::runtime::run(cfg);
    server::runtime::flush_logs();
    if let Err(e) = result {
        eprintln!("hematite: {e}");
        std::process::exit(1);
    }
}
