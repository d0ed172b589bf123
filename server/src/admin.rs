//! The admin address (`--admin-addr`, 127.0.0.1:10011 by default): off the
//! data port, for the operator's tools only.
//!
//! - `GET /healthz`: 200 whenever the process answers, recovery included
//!   (a liveness probe: restart only a process that does not answer).
//! - `GET /readyz`: 200 once every shard has recovered and serves, and none
//!   is poisoned; otherwise 503 with the reason (a readiness probe).
//! - `GET /metrics`: Prometheus text ([`crate::metrics`]), once ready.
//!
//! Served by core 0 alone, one request per connection. It binds before
//! core 0 opens its shard, so `/healthz` answers during a long recovery.

use crate::handler::Ctx;
use crate::http::{Reader, Response};
use crate::metrics::CoreSnapshot;
use engine::disk::Disk;
use futures_lite::AsyncWriteExt;
use glommio::net::TcpListener;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long an admin exchange may take, from accept to close: reading the
/// request, gathering every core's snapshot, writing the answer.
const ADMIN_EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// Admin connections served at once; more are closed at once. Probes and
/// a scraper need a handful.
const MAX_ADMIN_CONNECTIONS: usize = 16;

/// Core 0's admin state: the context once the shard serves, and whether
/// every shard is up (set by the main thread after startup).
pub struct Admin<D: Disk> {
    pub ctx: RefCell<Option<Rc<Ctx<D>>>>,
    pub ready: Arc<AtomicBool>,
    /// Admin connections being served.
    pub open: std::cell::Cell<usize>,
}

/// Serves the admin address until `stop`.
pub async fn serve<D: Disk>(listener: TcpListener, admin: Rc<Admin<D>>, stop: Arc<AtomicBool>) {
    while let Some(stream) = crate::runtime::next_connection(&listener, &stop, "admin").await {
        if admin.open.get() >= MAX_ADMIN_CONNECTIONS {
            drop(stream);
            continue;
        }
        admin.open.set(admin.open.get().saturating_add(1));
        let admin = admin.clone();
        glommio::spawn_local(async move {
            let exchange = async {
                answer(stream, &admin).await;
            };
            // A client that sends slowly or never reads is cut off.
            let cut = glommio::timer::sleep(ADMIN_EXCHANGE_TIMEOUT);
            futures_lite::future::or(exchange, cut).await;
            admin.open.set(admin.open.get().saturating_sub(1));
        })
        .detach();
    }
}

async fn answer<D: Disk>(stream: glommio::net::TcpStream, admin: &Admin<D>) {
    let mut r = Reader::new(stream);
    let (resp, head) = match r.next_request().await {
        // Admin requests have no body (one is read, at most the server's
        // body limit, and refused).
        Ok(Some(req)) if !req.body.is_empty() || req.header("transfer-encoding").is_some() => {
            (text(400, "admin requests have no body\n"), false)
        }
        Ok(Some(req)) if req.method == "GET" || req.method == "HEAD" => {
            (route(&req.target, admin).await, req.method == "HEAD")
        }
        Ok(Some(_)) => (text(405, "only GET and HEAD\n"), false),
        Err(_) => (text(400, "bad request\n"), false),
        Ok(None) => return,
    };
    let mut out = Vec::with_capacity(resp.body.len() + 256);
    resp.encode(&mut out, head, true);
    let _ = r.stream.write_all(&out).await;
    let _ = r.stream.close().await;
}

async fn route<D: Disk>(target: &str, admin: &Admin<D>) -> Response {
    let path = target.split('?').next().unwrap_or("");
    if path == "/healthz" {
        return text(200, "ok\n");
    }
    if path != "/readyz" && path != "/metrics" {
        return text(
            404,
            "not found: the admin address serves /healthz, /readyz and /metrics\n",
        );
    }
    let ctx = admin.ctx.borrow().clone();
    let Some(ctx) = ctx.filter(|_| admin.ready.load(Ordering::Relaxed)) else {
        return text(503, "not ready: shards are recovering\n");
    };
    let snapshots = snapshots(&ctx).await;
    let problems: Vec<String> = snapshots
        .iter()
        .filter_map(|s| match s {
            Err(e) => Some(e.clone()),
            Ok(s) => s
                .poisoned
                .as_ref()
                .map(|why| format!("shard {} is poisoned: {why}", s.shard)),
        })
        .collect();
    if path == "/readyz" {
        return if problems.is_empty() {
            text(200, "ready\n")
        } else {
            text(503, &format!("not ready:\n{}\n", problems.join("\n")))
        };
    }
    // A scrape missing a core would make its counters look reset.
    if !problems.is_empty() && snapshots.iter().any(Result::is_err) {
        return text(503, &format!("incomplete:\n{}\n", problems.join("\n")));
    }
    let cores: Vec<CoreSnapshot> = snapshots.into_iter().filter_map(Result::ok).collect();
    Response::new(200)
        .header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        .body(crate::metrics::render(&cores).into_bytes())
}

/// Every core's snapshot, each taken on its own core.
async fn snapshots<D: Disk>(ctx: &Ctx<D>) -> Vec<Result<CoreSnapshot, String>> {
    ctx.router
        .exec_all(|| {
            |shard: Rc<engine::Shard<D>>, _| async move {
                let i = shard.config().shard_id as usize;
                Ok(CoreSnapshot::take(i, &shard))
            }
        })
        .await
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.map_err(|e| format!("shard {i} did not answer: {e}")))
        .collect()
}

fn text(status: u16, body: &str) -> Response {
    Response::new(status)
        .header("Content-Type", "text/plain; charset=utf-8")
        .body(body.as_bytes().to_vec())
}
