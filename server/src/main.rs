use clap::Parser;
use server::config::LogFormat;
use tracing_subscriber::EnvFilter;

// Requests allocate many small strings; glibc's malloc spent ~15% of a core
// on them under load (perf, docs/benchmarks.md). mimalloc is far cheaper here.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cfg = server::config::Config::parse();
    // HEMATITE_LOG sets the filter (warnings by default); --request-log
    // adds the request lines on top of whatever it says.
    let mut filter = EnvFilter::try_from_env("HEMATITE_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    if cfg.request_log {
        if let Ok(d) = "hematite_request=info".parse() {
            filter = filter.add_directive(d);
        }
    }
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cfg.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    if let Err(e) = server::runtime::run(cfg) {
        eprintln!("hematite: {e}");
        std::process::exit(1);
    }
}
