use clap::Parser;

// Requests allocate many small strings; glibc's malloc spent ~15% of a core
// on them under load (perf, docs/benchmarks.md). mimalloc is far cheaper here.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cfg = server::config::Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("HEMATITE_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = server::runtime::run(cfg) {
        eprintln!("hematite: {e}");
        std::process::exit(1);
    }
}
