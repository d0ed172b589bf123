//! One client connection, on the core that accepted it: read requests
//! (pipelined or not), handle them in order, write the responses, enforce the
//! idle and slow-request timeouts, and close after bad framing.

use crate::error::ApiError;
use crate::handler::{handle, Ctx};
use crate::http::{FrameError, Reader, Request};
use crate::limits::*;
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use std::cell::Cell;
use std::future::Future;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

enum Waited<T> {
    Done(T),
    TimedOut,
    Stopping,
}

/// Runs `f` until it finishes, `limit` passes, or shutdown begins.
async fn bounded<T>(limit: Duration, stop: &AtomicBool, f: impl Future<Output = T>) -> Waited<T> {
    let done = async { Waited::Done(f.await) };
    let timer = async {
        glommio::timer::sleep(limit).await;
        Waited::TimedOut
    };
    let stopping = async {
        loop {
            glommio::timer::sleep(Duration::from_millis(100)).await;
            if stop.load(Ordering::Relaxed) {
                return Waited::Stopping;
            }
        }
    };
    futures_lite::future::or(done, futures_lite::future::or(timer, stopping)).await
}

fn framing_error(e: &FrameError) -> Option<ApiError> {
    match e {
        FrameError::Bad(why) => Some(ApiError::new(
            400,
            "InvalidInput",
            format!("One of the request inputs is not valid: {why}."),
        )),
        FrameError::HeadTooLarge => Some(ApiError::new(
            431,
            "InvalidInput",
            "The request line and headers are too large.",
        )),
        FrameError::BodyTooLarge => Some(ApiError::body_too_large(MAX_BODY_BYTES)),
        FrameError::Incomplete => None,
    }
}

/// Live connections on this core, for the per-core limit and for draining.
#[derive(Default)]
pub struct ConnCount(Cell<usize>);

impl ConnCount {
    pub fn get(&self) -> usize {
        self.0.get()
    }
}

struct Held(Rc<ConnCount>);
impl Drop for Held {
    fn drop(&mut self) {
        self.0 .0.set(self.0 .0.get() - 1);
    }
}

pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    peer: IpAddr,
    ctx: Rc<Ctx>,
    stop: Arc<AtomicBool>,
    count: Rc<ConnCount>,
) {
    count.0.set(count.0.get() + 1);
    let _held = Held(count.clone());
    let mut r = Reader::new(stream);
    let mut out = Vec::with_capacity(4096);
    if count.get() > MAX_CONNECTIONS_PER_CORE {
        let e = ApiError::new(
            503,
            "ServerBusy",
            "The server is busy: too many connections. Please retry your request.",
        );
        e.response(&uuid::Uuid::new_v4().to_string(), "")
            .encode(&mut out, false, true);
        let _ = r.stream.write_all(&out).await;
        return;
    }
    loop {
        let limit = if r.buffered() == 0 {
            IDLE_TIMEOUT
        } else {
            REQUEST_TIMEOUT
        };
        let next = match bounded(limit, &stop, r.next_request()).await {
            Waited::Done(x) => x,
            Waited::TimedOut | Waited::Stopping => break,
        };
        let req: Request = match next {
            Ok(Some(req)) => req,
            Ok(None) => break,
            Err((e, _)) => {
                if let Some(err) = framing_error(&e) {
                    let now = crate::xmlio::iso8601_7(time::OffsetDateTime::now_utc());
                    let mut resp = err.response(&uuid::Uuid::new_v4().to_string(), &now);
                    resp.headers
                        .push(("Date".into(), httpdate::fmt_http_date(std::time::SystemTime::now())));
                    resp.encode(&mut out, false, true);
                }
                break;
            }
        };
        let keep = req.keep_alive() && !stop.load(Ordering::Relaxed);
        let resp = handle(&ctx, &req, peer).await;
        resp.encode(&mut out, req.method == "HEAD", !keep);
        if !keep {
            break;
        }
        // Pipelined requests already here: answer them in one write.
        if !r.has_next_head() {
            if r.stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
    if !out.is_empty() {
        let _ = r.stream.write_all(&out).await;
    }
    let _ = r.stream.close().await;
}
