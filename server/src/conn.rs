//! One client connection, on the core that accepted it: read requests
//! (pipelined or not), handle them in order, write the responses, enforce the
//! idle and slow-request timeouts, and close after bad framing.

use crate::addressing::TargetCache;
use crate::error::ApiError;
use crate::handler::{handle_parsed, Ctx};
use crate::http::{FrameError, Hangup, LargeBodies, Reader, Request};
use crate::limits::*;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::unix::io::RawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Deadlines for connections waiting on their peer, enforced by one task per
/// core. Per-request timers would cost an io_uring timeout submission and a
/// cancellation on every request; instead each connection records when it
/// must give up, and the reaper shuts the socket down once that passes (or at
/// shutdown), which wakes the blocked read with end-of-file.
///
/// A connection sets its deadlines without reading the clock: a request
/// set and cleared three or four, each a clock read of about 30 ns
/// (docs/benchmarks.md, "Clock reads nobody reads, and Get Messages'
/// text"). It records the reaper's tick count and the limit; the reaper,
/// which reads the clock once per tick, fixes the deadline's time at its
/// first look after that tick (see [`due`]). So a deadline never fires
/// before its limit, and at most about two ticks (and their own delays)
/// after it, however long the deadline: a stalled core does not stretch
/// it by more than the stall. Owned by one core; not `Send`.
#[derive(Default)]
pub struct Reaper {
    next: Cell<u64>,
    /// Ticks counted since the core started, shared with every `Watch`.
    tick: Rc<Cell<u64>>,
    conns: RefCell<HashMap<u64, Rc<Watch>>>,
}

/// A deadline as a connection sets it, and as the reaper fixes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deadline {
    /// Set while the reaper's count was `tick`, for `limit` from then.
    Armed { tick: u64, limit: Duration },
    /// Due at this time.
    At(Instant),
    /// Beyond what an `Instant` can hold: never due.
    Never,
}

/// Whether the deadline in `cell` has passed at `now`, the reaper's clock
/// read for tick `tick`. A deadline armed at an earlier tick is fixed here,
/// at its first look: the arming saw the earlier count, and this tick's
/// count and clock read come after it, so `now + limit` is never early,
/// and at most one tick (and that tick's delay) late. One armed during
/// this tick waits for the next.
fn due(cell: &Cell<Option<Deadline>>, tick: u64, now: Instant) -> bool {
    let at = match cell.get() {
        None | Some(Deadline::Never) => return false,
        Some(Deadline::At(at)) => at,
        Some(Deadline::Armed { tick: armed, .. }) if armed == tick => return false,
        Some(Deadline::Armed { limit, .. }) => {
            let fixed = now.checked_add(limit).map_or(Deadline::Never, Deadline::At);
            cell.set(Some(fixed));
            match fixed {
                Deadline::At(at) => at,
                _ => return false,
            }
        }
    };
    at <= now
}

/// One connection's entry: its socket and, while it waits, its deadline.
pub struct Watch {
    fd: RawFd,
    /// The reaper's tick count (see [`Reaper`]).
    tick: Rc<Cell<u64>>,
    /// When the reaper gives up on the peer.
    deadline: Cell<Option<Deadline>>,
    /// While a request that may wait long (a long poll) is handled: from
    /// when the reaper checks whether the peer has gone.
    check_peer_from: Cell<Option<Deadline>>,
    /// Raised when the peer closed while its request was handled.
    hangup: RefCell<Option<Rc<Hangup>>>,
}

impl Watch {
    /// `limit` from now, as the reaper will read it.
    fn deadline_in(&self, limit: Duration) -> Option<Deadline> {
        Some(Deadline::Armed {
            tick: self.tick.get(),
            limit,
        })
    }

    /// Gives the peer `limit` from now.
    fn arm(&self, limit: Duration) {
        self.deadline.set(self.deadline_in(limit));
    }

    fn disarm(&self) {
        self.deadline.set(None);
    }

    /// Whether the peer has closed its end or the socket failed, whatever
    /// unread data is still waiting (a pipelined request, or a TLS
    /// close_notify alert, which arrives before the FIN): `POLLRDHUP`.
    fn peer_closed(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd,
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: polls one descriptor the connection still owns, without
        // waiting (timeout 0).
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }
}

impl Reaper {
    fn register(&self, fd: RawFd) -> (u64, Rc<Watch>) {
        let id = self.next.get();
        self.next.set(id + 1);
        let w = Rc::new(Watch {
            fd,
            tick: self.tick.clone(),
            deadline: Cell::new(None),
            check_peer_from: Cell::new(None),
            hangup: RefCell::new(None),
        });
        self.conns.borrow_mut().insert(id, w.clone());
        (id, w)
    }

    fn unregister(&self, id: u64) {
        self.conns.borrow_mut().remove(&id);
    }

    /// Runs until `stop`, then wakes every waiting connection so it closes.
    pub async fn run(self: Rc<Self>, stop: Arc<AtomicBool>) {
        let mut now = Instant::now();
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            let tick = self.tick.get();
            for w in self.conns.borrow().values() {
                let expired = w.deadline.get().is_some() && (stopping || due(&w.deadline, tick, now));
                if expired {
                    // SAFETY: shutdown on a socket the connection still owns;
                    // the blocked read then returns end-of-file.
                    unsafe {
                        libc::shutdown(w.fd, libc::SHUT_RDWR);
                    }
                }
                if due(&w.check_peer_from, tick, now) {
                    if let Some(h) = w.hangup.borrow().as_ref().filter(|h| !h.raised()) {
                        if w.peer_closed() {
                            h.raise();
                        }
                    }
                }
            }
            if stopping && self.conns.borrow().is_empty() {
                return;
            }
            glommio::timer::sleep(REAPER_TICK).await;
            // The count moves, then the clock is read, with no await
            // between: every arming that saw the old count came before this
            // read, which `due` relies on to never fix a deadline early.
            self.tick.set(tick.wrapping_add(1));
            now = Instant::now();
        }
    }
}

/// The answer to a request that could not be framed (none if the peer
/// went away mid-request). The connection closes after it.
fn framing_error(e: &FrameError, max_body: usize) -> Option<crate::http::Response> {
    let err = match e {
        FrameError::Bad(why) => ApiError::new(
            400,
            "InvalidInput",
            format!("One of the request inputs is not valid: {why}."),
        ),
        FrameError::HeadTooLarge => ApiError::new(431, "InvalidInput", "The request line and headers are too large."),
        FrameError::BodyTooLarge => ApiError::body_too_large(max_body),
        FrameError::Busy => ApiError::new(
            503,
            "ServerBusy",
            "The server is busy: too many large request bodies in flight. Please retry your request.",
        ),
        FrameError::Incomplete => return None,
    };
    let now = crate::xmlio::iso8601_7(time::OffsetDateTime::now_utc());
    let mut resp = err.response(&uuid::Uuid::new_v4().to_string(), &now);
    resp.push_header("Date", crate::http::http_date(std::time::SystemTime::now()));
    Some(resp)
}

/// The answer to a connection over the per-core limit.
fn busy_response() -> crate::http::Response {
    ApiError::new(
        503,
        "ServerBusy",
        "The server is busy: too many connections. Please retry your request.",
    )
    .response(&uuid::Uuid::new_v4().to_string(), "")
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
        crate::metrics::connection_closed();
    }
}

#[allow(clippy::too_many_arguments)] // one connection's socket and its core's shared state, each needed
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin, D: engine::disk::Disk>(
    stream: S,
    fd: RawFd,
    peer: IpAddr,
    ctx: Rc<Ctx<D>>,
    stop: Arc<AtomicBool>,
    count: Rc<ConnCount>,
    reaper: Rc<Reaper>,
    large: Rc<LargeBodies>,
) {
    count.0.set(count.0.get().saturating_add(1));
    crate::metrics::connection_opened();
    let _held = Held(count.clone());
    let mut r = Reader::new(stream).with_body_limit(ctx.limits.max_body_bytes, large);
    // Declared after the reader, so it is dropped first: the reaper must
    // forget this fd before the socket closes (when `r` is dropped), or it
    // could shut down the next connection that reuses the number. Until
    // then it keeps a deadline on every write and on the close.
    let (watch_id, watch) = reaper.register(fd);
    let unwatch = Unwatch(reaper, watch_id);
    // The answers not yet written: a buffer lent by the core
    // (`crate::buffers`), taken for an answer and given back once written
    // (freed instead if a write fails mid-connection or the connection was
    // refused; given back cleared after the last write, whatever its result).
    let mut out = Vec::new();
    let mut targets = TargetCache::default();
    if count.get() > ctx.limits.max_connections {
        // Over TLS this answer never arrives (no handshake happens): the
        // client sees the connection closed.
        let busy = busy_response();
        crate::metrics::record_request("connection_limit", busy.status, Duration::ZERO, 0, busy.body.len());
        busy.encode(&mut out, false, true);
        let _ = write_before(&watch, ctx.limits.request_timeout, &mut r.stream, &out).await;
        close_before(&watch, ctx.limits.request_timeout, &mut r.stream).await;
        drop(unwatch);
        return;
    }
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Some(mut req) = read_request(&mut r, &watch, &ctx.limits, &mut out).await else {
            break;
        };
        let keep = req.keep_alive() && !stop.load(Ordering::Relaxed);
        let head = req.method == "HEAD";
        let resp = handle_watching_peer(&ctx, &mut req, peer, &watch, &mut targets).await;
        if out.capacity() == 0 {
            out = crate::buffers::take_answer();
        }
        resp.encode(&mut out, head, !keep);
        r.recycle(req);
        if !keep {
            break;
        }
        // Pipelined requests already here are answered in one write, but
        // only up to a bound: a client that sends without reading must not
        // make us queue its answers without limit. Until the bytes are
        // taken, no further request is read. They are also written before a
        // request that may get an immediate `100 Continue`, which must not
        // overtake them.
        if !r.has_next_head() || out.len() >= MAX_PENDING_RESPONSE_BYTES || r.may_expect_continue() {
            if write_before(&watch, ctx.limits.request_timeout, &mut r.stream, &out)
                .await
                .is_err()
            {
                close_before(&watch, ctx.limits.request_timeout, &mut r.stream).await;
                drop(unwatch);
                return;
            }
            crate::buffers::give_answer(std::mem::take(&mut out));
        }
    }
    let answered = !out.is_empty();
    if answered {
        let _ = write_before(&watch, ctx.limits.request_timeout, &mut r.stream, &out).await;
    }
    crate::buffers::give_answer(out);
    close_before(&watch, ctx.limits.request_timeout, &mut r.stream).await;
    if answered {
        // Boxed: its 4 KiB of state is needed once, at the end, and would
        // otherwise be part of every connection's future for its whole life.
        Box::pin(linger(&watch, &mut r.stream)).await;
    }
    drop(unwatch);
}

/// Reads and drops what the peer still sends after our side closed, until
/// it closes too, or `LINGER_TIME` or `LINGER_BYTES` runs out (the reaper
/// shuts the socket at the deadline). A peer still sending a body we
/// refused would otherwise find the socket closed with unread data, and the
/// kernel's reset can discard our answer before the client reads it.
async fn linger<R: AsyncRead + Unpin>(watch: &Watch, stream: &mut R) {
    watch.arm(LINGER_TIME);
    let mut scratch = [0u8; 4096];
    let mut dropped = 0usize;
    while dropped < LINGER_BYTES {
        match stream.read(&mut scratch).await {
            Ok(0) | Err(_) => break,
            Ok(n) => dropped = dropped.saturating_add(n),
        }
    }
    watch.disarm();
}

/// The next request, or `None` when the connection should end (closed,
/// timed out, or a framing error whose answer is queued in `out`). Idle
/// until the first byte; from then on the whole request must arrive within
/// the request timeout.
async fn read_request<S: AsyncRead + AsyncWrite + Unpin>(
    r: &mut Reader<S>,
    watch: &Watch,
    limits: &ConnLimits,
    out: &mut Vec<u8>,
) -> Option<Request> {
    watch.arm(limits.idle_timeout);
    if !matches!(r.wait_for_request().await, Ok(true)) {
        return None;
    }
    watch.arm(limits.request_timeout);
    let next = r.next_request().await;
    watch.disarm();
    match next {
        Ok(req) => req,
        Err((e, _)) => {
            if let Some(resp) = framing_error(&e, limits.max_body_bytes) {
                crate::metrics::record_request("unframed", resp.status, Duration::ZERO, 0, resp.body.len());
                resp.encode(out, false, true);
            }
            None
        }
    }
}

/// Handles `req`. A GET (Get Messages may long-poll) carries a hangup
/// signal the reaper raises if the peer closes while it runs: a long poll
/// then stops waiting and answers empty. Nothing is ever dropped half-way:
/// the engine's steps (a group commit above all) must run to their end.
async fn handle_watching_peer<D: engine::disk::Disk>(
    ctx: &Ctx<D>,
    req: &mut Request,
    peer: IpAddr,
    watch: &Watch,
    targets: &mut TargetCache,
) -> crate::http::Response {
    if req.method != "GET" {
        return handle_parsed(ctx, req, peer, targets).await;
    }
    let hangup = Rc::new(Hangup::default());
    req.hangup = Some(hangup.clone());
    *watch.hangup.borrow_mut() = Some(hangup);
    watch.check_peer_from.set(watch.deadline_in(LONG_REQUEST));
    let resp = handle_parsed(ctx, req, peer, targets).await;
    watch.check_peer_from.set(None);
    watch.hangup.borrow_mut().take();
    // `req.hangup` is reset by `Reader::recycle`, which `serve` calls right
    // after encoding the answer, with no await between.
    resp
}

struct Unwatch(Rc<Reaper>, u64);
impl Drop for Unwatch {
    fn drop(&mut self) {
        self.0.unregister(self.1);
    }
}

/// Writes `bytes` with a deadline: a peer that stops reading is cut off by
/// the reaper (its shutdown fails the blocked write), so neither the
/// connection slot nor the queued response is held forever.
async fn write_before<W: AsyncWrite + Unpin>(
    watch: &Watch,
    limit: std::time::Duration,
    stream: &mut W,
    bytes: &[u8],
) -> std::io::Result<()> {
    watch.arm(limit);
    // The flush matters over TLS: a write may leave ciphertext queued.
    let result = match stream.write_all(bytes).await {
        Ok(()) => stream.flush().await,
        Err(e) => Err(e),
    };
    watch.disarm();
    result
}

/// Closes the stream with a deadline: over TLS the close sends what is
/// still queued, and a peer that stops reading must not hold it forever.
async fn close_before<W: AsyncWrite + Unpin>(watch: &Watch, limit: Duration, stream: &mut W) {
    watch.arm(limit);
    let _ = stream.close().await;
    watch.disarm();
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use engine::disk::sim::SimDisk;
    use engine::{ManualClock, Shard};
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A deadline armed at a tick is left alone during that tick (the
    /// reaper's clock read could predate the arming), fixed at the first
    /// look after it as that look's time plus the limit, and due from then
    /// on; a zero limit is due at that first look, and a limit past what an
    /// `Instant` holds never is.
    #[test]
    fn a_deadline_is_fixed_at_the_first_tick_after_its_arming() {
        let t0 = Instant::now();
        let limit = Duration::from_secs(2);
        let armed = Some(Deadline::Armed { tick: 3, limit });
        let cell = Cell::new(armed);
        assert!(!due(&cell, 3, t0 + Duration::from_secs(60)));
        assert_eq!(cell.get(), armed, "not fixed during its own tick");
        assert!(!due(&cell, 4, t0));
        assert_eq!(cell.get(), Some(Deadline::At(t0 + limit)));
        assert!(!due(&cell, 5, t0 + limit - Duration::from_nanos(1)));
        assert!(due(&cell, 6, t0 + limit));

        let zero = Cell::new(Some(Deadline::Armed {
            tick: 3,
            limit: Duration::ZERO,
        }));
        assert!(!due(&zero, 3, t0));
        assert!(due(&zero, 4, t0));

        let far = Cell::new(Some(Deadline::Armed {
            tick: 0,
            limit: Duration::MAX,
        }));
        assert!(!due(&far, 1, t0));
        assert_eq!(far.get(), Some(Deadline::Never));
        assert!(!due(&far, 2, t0 + Duration::from_secs(1 << 40)));
        assert!(!due(&Cell::new(None), 9, t0));
    }

    /// A peer that closes at once, and checks when its socket is released
    /// (dropped: that is when glommio closes the fd; `close` only shuts
    /// the write side down) that the reaper no longer knows its fd: the
    /// number may then be reused by the next connection, which the reaper
    /// must never shut down.
    struct ClosingPeer {
        reaper: Rc<Reaper>,
        closed_while_watched: Rc<Cell<Option<bool>>>,
    }
    impl AsyncRead for ClosingPeer {
        fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut [u8]) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(0))
        }
    }
    impl AsyncWrite for ClosingPeer {
        fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(b.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }
    impl Drop for ClosingPeer {
        fn drop(&mut self) {
            let watched = !self.reaper.conns.borrow().is_empty();
            self.closed_while_watched.set(Some(watched));
        }
    }

    /// Each write's address and bytes.
    type Writes = Rc<RefCell<Vec<(usize, Vec<u8>)>>>;

    /// A peer that sends `input` in one read, then closes, and records
    /// where each write's bytes were.
    struct OneShot {
        input: Vec<u8>,
        written_from: Writes,
    }
    impl AsyncRead for OneShot {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, b: &mut [u8]) -> Poll<std::io::Result<usize>> {
            let n = self.input.len().min(b.len());
            b[..n].copy_from_slice(&self.input[..n]);
            self.input.drain(..n);
            Poll::Ready(Ok(n))
        }
    }
    impl AsyncWrite for OneShot {
        fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<std::io::Result<usize>> {
            self.written_from.borrow_mut().push((b.as_ptr() as usize, b.to_vec()));
            Poll::Ready(Ok(b.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A core's context on a simulated disk, and the directory its service
    /// properties live in (removed when dropped).
    async fn test_ctx() -> (Rc<Ctx<SimDisk>>, tempfile::TempDir) {
        let shard = Shard::open(
            SimDisk::new(),
            engine::shard::ShardConfig::new(0),
            Rc::new(ManualClock::new(1_800_000_000_000)),
        )
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let service = Rc::new(crate::service::ServiceStore::open(dir.path().into(), true).unwrap());
        let ctx = Rc::new(Ctx {
            router: crate::router::Router::join(None, Rc::new(shard), service, 0, 1).await,
            accounts: Rc::default(),
            limits: Default::default(),
            addressing: Default::default(),
            security: Default::default(),
            tls: None,
            request_log: false,
        });
        (ctx, dir)
    }

    /// Serves one connection from `peer` to its end on a core with no
    /// other connections.
    async fn serve_alone<S: AsyncRead + AsyncWrite + Unpin>(peer: S, ctx: Rc<Ctx<SimDisk>>, reaper: Rc<Reaper>) {
        serve(
            peer,
            -1,
            "127.0.0.1".parse().unwrap(),
            ctx,
            Arc::new(AtomicBool::new(false)),
            Rc::new(ConnCount::default()),
            reaper,
            LargeBodies::new(0),
        )
        .await;
    }

    /// An answer is encoded into the core's answer buffer, the one given
    /// back last, and the buffer is given back once the answer is written:
    /// connections do not each keep one.
    #[test]
    fn answers_are_written_from_the_cores_buffer_and_it_is_given_back() {
        futures::executor::block_on(async {
            let (ctx, _dir) = test_ctx().await;
            let lent = crate::buffers::take_answer();
            let top = lent.as_ptr() as usize;
            crate::buffers::give_answer(lent);
            let written_from = Rc::new(RefCell::new(Vec::new()));
            let peer = OneShot {
                input: b"GET /devstoreaccount1?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_vec(),
                written_from: written_from.clone(),
            };
            serve_alone(peer, ctx, Rc::default()).await;
            let writes = written_from.borrow();
            assert_eq!(writes.len(), 1);
            assert!(writes[0].1.starts_with(b"HTTP/1.1 "));
            assert_eq!(writes[0].0, top, "the answer was not encoded into the core's buffer");
            let again = crate::buffers::take_answer();
            assert_eq!(again.as_ptr() as usize, top, "not given back");
        });
    }

    #[test]
    fn the_reaper_forgets_a_connection_before_its_socket_closes() {
        futures::executor::block_on(async {
            let (ctx, _dir) = test_ctx().await;
            let reaper = Rc::new(Reaper::default());
            let seen = Rc::new(Cell::new(None));
            let peer = ClosingPeer {
                reaper: reaper.clone(),
                closed_while_watched: seen.clone(),
            };
            serve_alone(peer, ctx, reaper.clone()).await;
            assert_eq!(
                seen.get(),
                Some(false),
                "the socket closed while the reaper still held its fd"
            );
            assert!(reaper.conns.borrow().is_empty());
        });
    }
}
