//! Read and answer buffers a core lends its connections only while bytes
//! are in them, and the emptied requests whose method, target and headers
//! strings the next request fills.
//!
//! Why: with a 16 KiB read buffer and a 4 KiB answer buffer of its own,
//! every connection's request and answer pass through memory no other
//! connection touches, so at 64 connections each put wrote cache lines
//! that had gone cold since that connection's last request, in a core's
//! L2 of 512 KiB (docs/benchmarks.md, "The same system calls, far more
//! memory"). A connection that has nothing buffered holds no buffer: it
//! takes one when bytes arrive and gives it back when they are consumed
//! or written. The pools are last in, first out, so the buffer given back
//! by one request is the one the next takes, still in cache.
//!
//! A buffer with bytes in it stays with its connection across awaits (a
//! partial head, an answer to a slow reader); a read that finds nothing
//! takes a buffer and gives it back within the same poll. A request is
//! taken once its head is complete and given back once its answer is
//! encoded (`http::Reader::recycle`; one refused while being read is
//! dropped): kept by its connection instead, its strings were written
//! every 64 requests at 64 connections, cold each time, and the one given
//! back last is the one the next head is copied into.
//!
//! Owned by one core: each pool is a thread-local, and each core's
//! executor is one thread. No borrow of a pool is held across an await.

use crate::http::Request;
use crate::limits::{
    ANSWER_CHUNK, MAX_IDLE_READ_BUFFER, MAX_KEPT_REQUEST_BYTES, MAX_POOLED_ANSWER_BYTES, MAX_POOLED_BUFFERS,
    MAX_POOLED_REQUESTS, READ_CHUNK,
};
use std::cell::RefCell;
use std::thread::LocalKey;

thread_local! {
    /// Read buffers of `READ_CHUNK` to `MAX_IDLE_READ_BUFFER` bytes, zeroed
    /// once: a buffer that grew for a request of up to 64 KiB is kept at
    /// its size, so the next such request neither grows nor zeroes one.
    static READ: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    /// Empty answer buffers of `ANSWER_CHUNK` to `MAX_POOLED_ANSWER_BYTES`
    /// bytes of capacity.
    static ANSWER: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    /// Answered requests, emptied, holding at most `MAX_KEPT_REQUEST_BYTES`
    /// of string capacity each.
    static REQUESTS: RefCell<Vec<Request>> = const { RefCell::new(Vec::new()) };
}

/// A read buffer of at least `READ_CHUNK` bytes (its whole length is
/// usable): the last one given back, or a new one.
pub fn take_read() -> Vec<u8> {
    let buf = READ
        .with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| vec![0; READ_CHUNK]);
    debug_assert!((READ_CHUNK..=MAX_IDLE_READ_BUFFER).contains(&buf.len()));
    buf
}

/// Gives back a read buffer whose bytes are all consumed. One that grew
/// past `MAX_IDLE_READ_BUFFER` (a large body) is freed, as are those past
/// the pool's bound.
pub fn give_read(buf: Vec<u8>) {
    if !(READ_CHUNK..=MAX_IDLE_READ_BUFFER).contains(&buf.len()) {
        return;
    }
    park(&READ, buf, MAX_POOLED_BUFFERS);
}

/// An empty answer buffer: the last one given back, or a new one.
pub fn take_answer() -> Vec<u8> {
    let buf = ANSWER
        .with(|p| p.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(ANSWER_CHUNK));
    debug_assert!(buf.is_empty());
    buf
}

/// Gives back an answer buffer whose bytes are written. One that grew
/// past `MAX_POOLED_ANSWER_BYTES` (a large Get or Peek) is freed.
pub fn give_answer(mut buf: Vec<u8>) {
    if buf.capacity() < ANSWER_CHUNK || buf.capacity() > MAX_POOLED_ANSWER_BYTES {
        return;
    }
    buf.clear();
    park(&ANSWER, buf, MAX_POOLED_BUFFERS);
}

/// An empty request to copy a head into: the last one given back (its
/// strings' capacity kept, found empty by `give_request`), or a new one.
pub(crate) fn take_request() -> Request {
    REQUESTS.with(|p| p.borrow_mut().pop()).unwrap_or_default()
}

/// Gives back an answered request, emptied by the caller
/// (`http::Reader::recycle`). One whose strings hold more than
/// `MAX_KEPT_REQUEST_BYTES` together is freed, and so, in every build, is
/// one not emptied: the next head is appended to what it holds, and a
/// header of this request (its `Authorization`) must never reach another
/// connection's.
pub(crate) fn give_request(req: Request) {
    let emptied = req.is_empty();
    debug_assert!(emptied, "a request goes back to the pool emptied");
    if !emptied || req.capacity_bytes() > MAX_KEPT_REQUEST_BYTES {
        return;
    }
    park(&REQUESTS, req, MAX_POOLED_REQUESTS);
}

/// Keeps `item` in `pool` for the next taker, unless the pool holds `max`.
fn park<T: 'static>(pool: &'static LocalKey<RefCell<Vec<T>>>, item: T, max: usize) {
    pool.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < max {
            p.push(item);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pools are last in, first out (the buffer given back is the next
    /// taken, still in cache), keep only buffers of their own sizes, and
    /// hold at most `MAX_POOLED_BUFFERS` each.
    #[test]
    fn the_last_buffer_given_back_is_the_next_taken_and_odd_sizes_are_freed() {
        let (a, b) = (take_read(), take_read());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        give_read(a);
        give_read(b);
        let (b, a) = (take_read(), take_read());
        assert_eq!((b.as_ptr(), a.as_ptr()), (pb, pa));
        drop((a, b));

        let mut grown = take_read();
        grown.resize(MAX_IDLE_READ_BUFFER, 0);
        let pg = grown.as_ptr();
        give_read(grown);
        let kept = take_read();
        assert_eq!(
            (kept.as_ptr(), kept.len()),
            (pg, MAX_IDLE_READ_BUFFER),
            "kept at its size"
        );
        let mut large = kept;
        large.resize(MAX_IDLE_READ_BUFFER + 1, 0);
        give_read(large);
        give_read(vec![0; READ_CHUNK - 1]);
        assert_eq!(READ.with(|p| p.borrow().len()), 0, "larger and smaller ones are freed");

        let mut answer = take_answer();
        answer.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        let pa = answer.as_ptr();
        give_answer(answer);
        let again = take_answer();
        assert!(
            again.is_empty() && again.as_ptr() == pa,
            "given back cleared, taken again"
        );
        give_answer(Vec::with_capacity(MAX_POOLED_ANSWER_BYTES + 1));
        give_answer(Vec::new());
        assert_eq!(ANSWER.with(|p| p.borrow().len()), 0, "odd capacities are freed");

        for _ in 0..MAX_POOLED_BUFFERS + 3 {
            give_read(vec![0; READ_CHUNK]);
            give_answer(Vec::with_capacity(ANSWER_CHUNK));
        }
        assert_eq!(READ.with(|p| p.borrow().len()), MAX_POOLED_BUFFERS);
        assert_eq!(ANSWER.with(|p| p.borrow().len()), MAX_POOLED_BUFFERS);
    }

    /// At most `MAX_POOLED_REQUESTS` answered requests stay with a core, the
    /// last given back taken first; one holding more than
    /// `MAX_KEPT_REQUEST_BYTES` is freed.
    #[test]
    fn the_request_pool_is_bounded_and_last_in_first_out() {
        let with_target = |capacity: usize| {
            let mut req = Request::default();
            req.target.reserve(capacity);
            req
        };
        for _ in 0..MAX_POOLED_REQUESTS + 3 {
            give_request(with_target(16));
        }
        assert_eq!(REQUESTS.with(|p| p.borrow().len()), MAX_POOLED_REQUESTS);
        give_request(with_target(MAX_KEPT_REQUEST_BYTES + 1));
        assert_eq!(
            REQUESTS.with(|p| p.borrow().len()),
            MAX_POOLED_REQUESTS,
            "a large one is freed"
        );
        REQUESTS.with(|p| p.borrow_mut().clear());
        let (a, b) = (with_target(16), with_target(16));
        let (pa, pb) = (a.target.as_ptr(), b.target.as_ptr());
        give_request(a);
        give_request(b);
        assert_eq!(
            (take_request().target.as_ptr(), take_request().target.as_ptr()),
            (pb, pa)
        );
    }
}
