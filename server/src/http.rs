//! Our HTTP/1.1 layer on `httparse`: request framing (Content-Length and
//! chunked bodies, `Expect: 100-continue`), keep-alive and pipelining, and
//! response encoding. A connection lives on the core that accepted it.
//!
//! Every number and length here comes from the network, so the module
//! denies unchecked arithmetic, indexing and panicking unwraps: a hostile
//! request may be refused, never crash a core.
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::string_slice
)]

use crate::limits::*;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use std::borrow::Cow;
use std::cell::Cell;
use std::io;
use std::rc::Rc;

/// One parsed request. Header names keep their case; look them up with [`Request::header`].
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub method: String,
    /// The request target exactly as sent (path and query, still percent-encoded).
    pub target: String,
    pub http10: bool,
    pub headers: Headers,
    pub body: Body,
    /// Raised when the peer hangs up while the request is handled (set by
    /// the connection; a long poll stops waiting on it).
    pub hangup: Option<std::rc::Rc<Hangup>>,
}

/// A request's body, in a buffer lent by the core ([`crate::buffers`]):
/// taken when the body is read, and given back as soon as the operation
/// has what it needs from it ([`Body::give_back`]), else when the request
/// is recycled. Why: a body kept by its connection is written every 64
/// requests at 64 connections, long gone from the cache each time, and
/// Put Message would hold it through its commit's wait; given back before
/// that wait, the next request copies its body into the same lines, still
/// in cache (docs/benchmarks.md, "Bodies given back before the commit").
///
/// The cell lets an operation give the body back through the `&Request`
/// every operation gets. Invariant: its mutable borrows never outlive one
/// of this type's own methods, which call nothing that borrows it, so
/// [`Body::bytes`] always finds it free. Owned by the connection's task.
#[derive(Debug, Clone, Default)]
pub struct Body(std::cell::RefCell<Vec<u8>>);

impl Body {
    /// A body in a buffer of its own (a large or chunked body, a test's).
    pub fn new(bytes: Vec<u8>) -> Self {
        Body(std::cell::RefCell::new(bytes))
    }

    /// The body's bytes; empty once given back.
    pub fn bytes(&self) -> std::cell::Ref<'_, [u8]> {
        std::cell::Ref::map(self.0.borrow(), Vec::as_slice)
    }

    pub fn len(&self) -> usize {
        self.0.try_borrow().map_or(0, |b| b.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the bytes, for an operation that keeps them.
    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes().to_vec()
    }

    /// Copies `bytes` in after what the body holds, into a buffer lent by
    /// the core if it holds none.
    fn extend(&mut self, bytes: &[u8]) {
        let buf = self.0.get_mut();
        if buf.capacity() == 0 {
            *buf = crate::buffers::take_answer();
        }
        buf.extend_from_slice(bytes);
    }

    /// Gives the buffer back to the core, leaving the body empty: for an
    /// operation that has taken what it needs, before it waits.
    pub fn give_back(&self) {
        if let Ok(mut buf) = self.0.try_borrow_mut() {
            crate::buffers::give_answer(std::mem::take(&mut *buf));
        }
    }
}

/// Compares the bytes (tests, and a caller that checks a body's content).
impl<T: AsRef<[u8]> + ?Sized> PartialEq<T> for Body {
    fn eq(&self, other: &T) -> bool {
        *self.bytes() == *other.as_ref()
    }
}

/// A request's headers, in the order sent, names keeping their case. All
/// names and values share one buffer: two allocations per request instead
/// of two per header, and none when an answered request's buffers are
/// reused from the core's pool ([`Reader::recycle`], `buffers::take_request`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers {
    text: String,
    spans: Vec<Span>,
    /// One bit per name present, at [`bloom_bit`] of its tag: most
    /// lookups are for headers a request does not have, and this answers
    /// them without walking the spans.
    present: u64,
}

/// One header in [`Headers::text`]: where its name starts, where the name
/// ends and the value starts, where the value ends, and its name's [`tag`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: usize,
    name_end: usize,
    value_end: usize,
    tag: u32,
}

/// A name's length and its first and last bytes, lower-cased. Lookups
/// compare tags and read names only where the tags agree: most lookups are
/// for headers a request does not have (conditional headers, `Origin`,
/// `Content-MD5`…), and a dozen of them ran per request.
#[inline(always)]
fn tag(name: &[u8]) -> u32 {
    let low = |b: Option<&u8>| u32::from(b.map_or(0, u8::to_ascii_lowercase));
    // Longer names share tags with shorter ones; the name compare decides.
    let len = u32::try_from(name.len() & 0xffff).unwrap_or(0);
    len.wrapping_shl(16) | low(name.first()).wrapping_shl(8) | low(name.last())
}

/// A tag's bit in [`Headers::present`]: the top six bits of a
/// multiplicative hash, so tags that differ only in length or one letter
/// land apart. Two names may share a bit; the spans then decide.
#[inline(always)]
fn bloom_bit(tag: u32) -> u64 {
    1u64 << (tag.wrapping_mul(0x9E37_79B1) >> 26)
}

impl Headers {
    /// Empties the list, keeping its buffers for the next request's headers.
    fn clear(&mut self) {
        self.text.clear();
        self.spans.clear();
        self.present = 0;
    }

    /// Whether nothing of a request is left: no header, no text, no bit.
    fn is_clear(&self) -> bool {
        self.spans.is_empty() && self.text.is_empty() && self.present == 0
    }

    /// Bytes held by the list's buffers.
    fn capacity_bytes(&self) -> usize {
        let spans = self.spans.capacity().saturating_mul(std::mem::size_of::<Span>());
        self.text.capacity().saturating_add(spans)
    }

    pub fn push(&mut self, name: &str, value: &str) {
        let start = self.text.len();
        self.text.push_str(name);
        let name_end = self.text.len();
        self.text.push_str(value);
        let tag = tag(name.as_bytes());
        self.present |= bloom_bit(tag);
        self.spans.push(Span {
            start,
            name_end,
            value_end: self.text.len(),
            tag,
        });
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The first value of header `name` (case-blind). Always inlined, so
    /// a literal name's tag and bloom bit fold to constants (left to the
    /// compiler, it called one shared copy: about 50 instructions for a
    /// name the request does not have).
    #[inline(always)]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.named(name).next()
    }

    /// Every value of header `name` (case-blind), in the order sent.
    #[inline(always)]
    pub fn named<'a, 'n>(&'a self, name: &'n str) -> impl Iterator<Item = &'a str> + use<'a, 'n> {
        let want = tag(name.as_bytes());
        let bytes = self.text.as_bytes();
        // An absent name's bit is usually clear: then no span is read.
        let candidates = if self.present & bloom_bit(want) != 0 {
            self.spans.as_slice()
        } else {
            &[]
        };
        candidates
            .iter()
            .filter(move |s| {
                s.tag == want
                    && bytes
                        .get(s.start..s.name_end)
                        .is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes()))
            })
            // The spans were recorded at `push` on char boundaries of `text`.
            .map(|s| self.text.get(s.name_end..s.value_end).unwrap_or(""))
    }

    pub fn iter(&self) -> HeaderIter<'_> {
        HeaderIter { headers: self, next: 0 }
    }
}

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Self {
        let mut h = Headers::default();
        for (n, v) in pairs {
            h.push(n.as_ref(), v.as_ref());
        }
        h
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = (&'a str, &'a str);
    type IntoIter = HeaderIter<'a>;
    fn into_iter(self) -> HeaderIter<'a> {
        self.iter()
    }
}

/// (name, value) pairs of [`Headers`].
pub struct HeaderIter<'a> {
    headers: &'a Headers,
    next: usize,
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a str, &'a str);
    fn next(&mut self) -> Option<Self::Item> {
        let h = self.headers;
        let span = h.spans.get(self.next)?;
        self.next = self.next.saturating_add(1);
        // The spans were recorded at `push` on char boundaries of `text`.
        Some((
            h.text.get(span.start..span.name_end).unwrap_or(""),
            h.text.get(span.name_end..span.value_end).unwrap_or(""),
        ))
    }
}

/// A connection's "the peer went away" signal. Owned by the connection's
/// core; raised by its reaper, awaited by a long poll.
#[derive(Debug, Default)]
pub struct Hangup {
    raised: std::cell::Cell<bool>,
    waker: std::cell::RefCell<Option<std::task::Waker>>,
}

impl Hangup {
    pub fn raise(&self) {
        self.raised.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    pub fn raised(&self) -> bool {
        self.raised.get()
    }

    /// Resolves once raised.
    pub fn wait(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.raised.get() {
                return std::task::Poll::Ready(());
            }
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            std::task::Poll::Pending
        })
    }
}

impl Request {
    /// Whether it holds nothing of a request, every field as
    /// `Reader::recycle` leaves it for the core's pool
    /// (`buffers::give_request`).
    pub fn is_empty(&self) -> bool {
        self.method.is_empty()
            && self.target.is_empty()
            && !self.http10
            && self.headers.is_clear()
            && self.body.is_empty()
            && self.hangup.is_none()
    }

    /// Bytes held by the method's, target's and headers' buffers (the
    /// body's is the core's, given back apart).
    pub fn capacity_bytes(&self) -> usize {
        [
            self.method.capacity(),
            self.target.capacity(),
            self.headers.capacity_bytes(),
        ]
        .into_iter()
        .fold(0usize, usize::saturating_add)
    }

    /// Inlined, like [`Headers::get`], so a literal name's tag folds.
    #[inline(always)]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    /// Whether the client wants the connection kept open after this request.
    pub fn keep_alive(&self) -> bool {
        // Every `Connection` line's tokens, as one list (RFC 9110 §5.3), a
        // `close` anywhere winning (RFC 9112 §9.3); compared case-blind in
        // place: most clients send `keep-alive` on every request, and a
        // lower-cased copy was an allocation each time.
        let has = |token: &str| {
            self.headers
                .named("connection")
                .flat_map(|v| v.split(','))
                .any(|t| t.trim().eq_ignore_ascii_case(token))
        };
        if has("close") {
            false
        } else {
            has("keep-alive") || !self.http10
        }
    }
}

/// A response to encode. Header names and most values are static text:
/// `Cow` keeps them unallocated (they were a string pair per header), and
/// the short values every answer carries are held in place ([`HeaderValue`]).
#[derive(Debug, Clone, Default)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(Cow<'static, str>, HeaderValue)>,
    pub body: Vec<u8>,
}

/// A response header's value: static text, an owned string, or up to
/// [`INLINE_VALUE_BYTES`] bytes held in place. Every answer carries a
/// request id (36 bytes), a `Date` (29) and the version it was asked in
/// (10); as `String`s they were three allocations and frees of every
/// request.
#[derive(Clone)]
pub struct HeaderValue(Value);

/// The longest value [`HeaderValue`] holds in place: a request id is 36.
pub const INLINE_VALUE_BYTES: usize = 38;

#[derive(Clone)]
enum Value {
    Shared(Cow<'static, str>),
    /// `len` bytes of `bytes` are the text; `len` is at most the array's.
    Inline {
        len: u8,
        bytes: [u8; INLINE_VALUE_BYTES],
    },
}

impl HeaderValue {
    /// `text` held in place if it fits, else owned.
    pub fn copied(text: &str) -> Self {
        let mut bytes = [0u8; INLINE_VALUE_BYTES];
        match (bytes.get_mut(..text.len()), u8::try_from(text.len())) {
            (Some(head), Ok(len)) => {
                head.copy_from_slice(text.as_bytes());
                HeaderValue(Value::Inline { len, bytes })
            }
            _ => HeaderValue(Value::Shared(Cow::Owned(text.to_string()))),
        }
    }

    /// The text's bytes, as an answer is encoded: the inline bytes were
    /// copied from a `str`, so unlike [`HeaderValue::as_str`] this need not
    /// check them again.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Value::Shared(s) => s.as_bytes(),
            Value::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
        }
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            Value::Shared(s) => s,
            // Only `copied` makes this variant, from a whole `str` of `len`
            // bytes: the prefix is that text.
            Value::Inline { len, bytes } => bytes
                .get(..usize::from(*len))
                .and_then(|b| std::str::from_utf8(b).ok())
                .unwrap_or_default(),
        }
    }
}

impl Default for HeaderValue {
    fn default() -> Self {
        HeaderValue(Value::Shared(Cow::Borrowed("")))
    }
}

impl std::ops::Deref for HeaderValue {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for HeaderValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for HeaderValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&'static str> for HeaderValue {
    fn from(s: &'static str) -> Self {
        HeaderValue(Value::Shared(Cow::Borrowed(s)))
    }
}

impl From<String> for HeaderValue {
    fn from(s: String) -> Self {
        HeaderValue(Value::Shared(Cow::Owned(s)))
    }
}

impl From<engine::model::ReceiptText> for HeaderValue {
    fn from(r: engine::model::ReceiptText) -> Self {
        HeaderValue::copied(&r)
    }
}

impl From<Cow<'static, str>> for HeaderValue {
    fn from(s: Cow<'static, str>) -> Self {
        HeaderValue(Value::Shared(s))
    }
}

impl PartialEq for HeaderValue {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for HeaderValue {}

impl PartialEq<str> for HeaderValue {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for HeaderValue {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Headers a response has room for from the start ([`Response::new`]).
const RESPONSE_HEADERS: usize = 8;

impl Response {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            // Room for what every answer carries (the handler adds five
            // headers to the op's own): one allocation, not two.
            headers: Vec::with_capacity(RESPONSE_HEADERS),
            body: Vec::new(),
        }
    }

    pub fn header(mut self, name: impl Into<Cow<'static, str>>, value: impl Into<HeaderValue>) -> Self {
        self.push_header(name, value);
        self
    }

    pub fn push_header(&mut self, name: impl Into<Cow<'static, str>>, value: impl Into<HeaderValue>) {
        self.headers.push((name.into(), value.into()));
    }

    /// A body as is (the caller sets its Content-Type).
    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }

    pub fn xml(mut self, body: String) -> Self {
        self.push_header("Content-Type", "application/xml");
        self.body = body.into_bytes();
        self
    }

    /// Appends the encoded response. `head`: a HEAD request, so no body.
    /// Plain copies, no `fmt`: this runs for every answer.
    pub fn encode(&self, out: &mut Vec<u8>, head: bool, close: bool) {
        out.extend_from_slice(b"HTTP/1.1 ");
        push_decimal(out, u64::from(self.status));
        out.push(b' ');
        out.extend_from_slice(reason(self.status).as_bytes());
        out.extend_from_slice(b"\r\n");
        for (n, v) in &self.headers {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"Content-Length: ");
        push_decimal(out, if head { 0 } else { self.body.len() as u64 });
        out.extend_from_slice(b"\r\n");
        if close {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if !head {
            out.extend_from_slice(&self.body);
        }
    }
}

/// The `Date` header's text for `now` (RFC 9110 §5.6.7), from the per-core
/// texts of [`crate::xmlio::push_rfc1123`]: it has second resolution.
pub fn http_date(now: std::time::SystemTime) -> HeaderValue {
    let ms = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    rfc1123_value(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// A header value with [`crate::xmlio::rfc1123`]'s text of `ms`, held in
/// place rather than allocated.
pub fn rfc1123_value(ms: u64) -> HeaderValue {
    crate::xmlio::with_rfc1123(ms, HeaderValue::copied)
}

/// Appends `n` in decimal.
pub fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut rest = n;
    let mut start = digits.len();
    for slot in digits.iter_mut().rev() {
        // A digit: `rest % 10` is below 10.
        *slot = b'0'.wrapping_add((rest % 10) as u8);
        start = start.saturating_sub(1);
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(start..).unwrap_or_default());
}

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Request Entity Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Why a request could not be framed. Every variant closes the connection:
/// after bad framing we no longer know where the next request starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// Malformed request line, header or chunk syntax; conflicting lengths.
    Bad(&'static str),
    HeadTooLarge,
    BodyTooLarge,
    /// A large body (above Azure's limit) found its core's budget for them
    /// spent: answered 503 `ServerBusy`, which clients retry.
    Busy,
    /// The peer closed or timed out mid-request.
    Incomplete,
}

/// The bytes of large request bodies one core holds at once. A body above
/// Azure's limit (`MAX_BODY_BYTES`; only possible with `--max-message-kib`
/// above 64) takes its length from here before it is read, and gives it back
/// once its request has been answered. Without it, each connection could
/// hold a body of the configured size (2 MiB at 1 MiB messages), and a core
/// has thousands of connections. Owned by one core, shared by its
/// connections.
pub struct LargeBodies {
    free: Cell<usize>,
}

impl LargeBodies {
    pub fn new(bytes: usize) -> Rc<Self> {
        Rc::new(LargeBodies { free: Cell::new(bytes) })
    }

    /// Bytes not taken by a body in flight.
    pub fn free(&self) -> usize {
        self.free.get()
    }

    fn take(self: &Rc<Self>, bytes: usize) -> Option<BodyPermit> {
        let left = self.free.get().checked_sub(bytes)?;
        self.free.set(left);
        Some(BodyPermit {
            pool: self.clone(),
            bytes,
        })
    }
}

/// A large body's share of [`LargeBodies`], given back when dropped. Held
/// by the connection's reader, on the core that owns the budget.
struct BodyPermit {
    pool: Rc<LargeBodies>,
    bytes: usize,
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        self.pool.free.set(self.pool.free.get().saturating_add(self.bytes));
    }
}

/// How a request's body is framed.
enum Framing {
    None,
    Length(usize),
    Chunked,
}

/// A connection's read side: a buffer and the stream it refills from.
/// Bytes `start..end` of `buf` are received and not yet consumed. The
/// buffer is the core's ([`crate::buffers`]): taken when bytes arrive,
/// given back when the last of them is consumed, so a connection waiting
/// for its next request holds none, and the next request read on this
/// core reuses it, still in cache. Buffers are zeroed once, so refilling
/// one costs no memset.
///
/// Invariants: `start <= end <= buf.len()`. Every index below goes through
/// [`Reader::pending`] and [`Reader::consume`], which keep it. A buffer is
/// held only while `start < end`: [`Reader::consume`] gives it back when
/// the last byte goes. Bytes past `end` are another request's, perhaps
/// another connection's, and are never read.
pub struct Reader<S> {
    pub stream: S,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Largest body accepted (`MAX_BODY_BYTES` unless configured larger).
    max_body: usize,
    /// Where bodies above `MAX_BODY_BYTES` take their bytes from, and the
    /// share the last request took (held until the next one is read: the
    /// request is answered by then).
    large: Rc<LargeBodies>,
    permit: Option<BodyPermit>,
    /// The longest the read buffer grew to (for tests of the growth bounds).
    #[cfg(test)]
    largest: usize,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Reader<S> {
    /// A reader with Azure's body limit.
    pub fn new(stream: S) -> Self {
        Reader {
            stream,
            buf: Vec::new(),
            start: 0,
            end: 0,
            max_body: MAX_BODY_BYTES,
            large: LargeBodies::new(0),
            permit: None,
            #[cfg(test)]
            largest: 0,
        }
    }

    /// Accepts bodies up to `max_body` bytes; those above `MAX_BODY_BYTES`
    /// only while `large` has room for them (else 503 `ServerBusy`).
    pub fn with_body_limit(mut self, max_body: usize, large: Rc<LargeBodies>) -> Self {
        self.max_body = max_body.max(MAX_BODY_BYTES);
        self.large = large;
        self
    }

    /// Bytes already received but not yet consumed (pipelined requests).
    pub fn buffered(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// The received, unconsumed bytes.
    fn pending(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or_default()
    }

    /// Marks `n` pending bytes as consumed (never more than are pending).
    fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.buffered(), "consuming bytes that never arrived");
        self.start = self.start.saturating_add(n).min(self.end);
        if self.start == self.end && !self.buf.is_empty() {
            crate::buffers::give_read(std::mem::take(&mut self.buf));
            self.start = 0;
            self.end = 0;
        }
    }

    /// The buffer's current length (for tests: 0 when none is held).
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Whether the buffered bytes mention `100-continue`: the next request
    /// may make the reader answer `100 Continue` at once, which must not
    /// overtake responses still queued for earlier requests.
    pub fn may_expect_continue(&self) -> bool {
        const NEEDLE: &[u8] = b"100-continue";
        self.pending()
            .windows(NEEDLE.len())
            .any(|w| w.eq_ignore_ascii_case(NEEDLE))
    }

    /// Whether the buffer already holds the whole head of another request, so
    /// its response can be batched with the ones before it.
    pub fn has_next_head(&self) -> bool {
        self.pending().windows(4).any(|w| w == b"\r\n\r\n")
    }

    /// Waits for the first bytes of the next request, if none are buffered.
    /// Ok(false): the peer closed. Lets the caller time idleness separately
    /// from a request's arrival.
    pub async fn wait_for_request(&mut self) -> io::Result<bool> {
        // The previous request has been answered: its large body is gone.
        self.permit = None;
        self.shrink();
        if self.buffered() > 0 {
            return Ok(true);
        }
        self.fill().await
    }

    /// Moves the bytes left after a large request (pipelined ones) out of
    /// the buffer it grew, once they fit a normal one, so the connection
    /// does not keep its largest body's memory while they wait. A buffer
    /// emptied is given back by [`Reader::consume`]; this is for the rest.
    fn shrink(&mut self) {
        if self.buf.len() <= MAX_IDLE_READ_BUFFER || self.buffered() > READ_CHUNK {
            return;
        }
        let mut small = crate::buffers::take_read();
        let n = self.buffered();
        // Pooled buffers are at least `READ_CHUNK` long, and `n` is at most that.
        debug_assert!(n <= small.len(), "pipelined bytes would be lost");
        if let Some(dst) = small.get_mut(..n) {
            dst.copy_from_slice(self.pending());
        }
        self.buf = small;
        self.start = 0;
        self.end = n;
    }

    /// Reads more bytes. Ok(false) on a clean EOF.
    async fn fill(&mut self) -> io::Result<bool> {
        debug_assert!(self.buf.is_empty() || self.start < self.end, "an empty buffer is held");
        if self.buf.is_empty() {
            return self.fill_lent().await;
        }
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end = self.buffered();
                self.start = 0;
            } else {
                // A request larger than the buffer: grow. The callers bound
                // what they wait for by the head and body limits, so this
                // stops near 2 × (MAX_HEAD_BYTES + MAX_BODY_BYTES): larger
                // bodies, and chunks, never wait in the buffer whole.
                let len = self.buf.len().saturating_mul(2);
                self.buf.resize(len, 0);
                #[cfg(test)]
                {
                    self.largest = self.largest.max(len);
                }
            }
        }
        let free = self.buf.get_mut(self.end..).unwrap_or_default();
        let n = self.stream.read(free).await?;
        self.end = self.end.saturating_add(n).min(self.buf.len());
        Ok(n > 0)
    }

    /// Reads into a buffer lent by the core, held only if bytes arrive: one
    /// taken and given back within each poll, so a connection that waits
    /// for its peer holds none. The stream writes into the buffer only
    /// when it answers Ready (`AsyncRead`), never while it waits.
    async fn fill_lent(&mut self) -> io::Result<bool> {
        debug_assert!(self.buf.is_empty() && self.start == 0 && self.end == 0);
        let n = std::future::poll_fn(|cx| {
            let mut lent = crate::buffers::take_read();
            let read = std::pin::Pin::new(&mut self.stream).poll_read(cx, &mut lent);
            match read {
                std::task::Poll::Ready(Ok(n)) if n > 0 => {
                    #[cfg(test)]
                    {
                        self.largest = self.largest.max(lent.len());
                    }
                    self.buf = lent;
                }
                _ => crate::buffers::give_read(lent),
            }
            read
        })
        .await?;
        self.end = n.min(self.buf.len());
        Ok(n > 0)
    }

    /// The request head in the buffer, or `None` while it is incomplete.
    /// Not async on purpose: httparse's header array (3 KiB) lives in this
    /// frame only, where it sat in every connection's future while the
    /// loop above waited for bytes.
    fn parse_head(&mut self) -> Result<Option<(Request, usize)>, FrameError> {
        // Left uninitialized for httparse to fill: writing a hundred empty
        // headers first was half of `read_request`'s samples at 256
        // connections (docs/benchmarks.md, "Commit buffers kept").
        let mut headers = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut []);
        // `pending()` by its fields: it would borrow all of `self`.
        let pending = self.buf.get(self.start..self.end).unwrap_or_default();
        match parsed.parse_with_uninit_headers(pending, &mut headers) {
            Ok(httparse::Status::Complete(n)) => {
                // An answered request's buffers, emptied by `recycle`.
                let mut req = crate::buffers::take_request();
                req.method.push_str(parsed.method.unwrap_or(""));
                req.target.push_str(parsed.path.unwrap_or(""));
                req.http10 = parsed.version == Some(0);
                // One validation of the whole head (every real client's is
                // UTF-8) instead of one per value, each with its own start-up.
                let head = pending.get(..n).and_then(|h| simdutf8::basic::from_utf8(h).ok());
                collect_headers(parsed.headers, head, &mut req.headers);
                Ok(Some((req, n)))
            }
            Ok(httparse::Status::Partial) => Ok(None),
            Err(httparse::Error::TooManyHeaders) => Err(FrameError::HeadTooLarge),
            Err(_) => Err(FrameError::Bad("malformed request line or header")),
        }
    }

    /// Takes back a request that was answered and gives it to the core,
    /// emptied, whose next request reuses its buffers (four allocations
    /// fewer per request) unless they are larger than
    /// `MAX_KEPT_REQUEST_BYTES` together (`buffers::give_request`); its
    /// body's buffer goes back to the core ([`Body`]).
    pub fn recycle(&mut self, mut req: Request) {
        // Destructured, so a field added to `Request` fails to compile here
        // until it is reset too.
        let Request {
            method,
            target,
            http10,
            headers,
            body,
            hangup,
        } = &mut req;
        // The body's buffer is the core's, given back whatever happens to
        // the rest.
        body.give_back();
        method.clear();
        target.clear();
        *http10 = false;
        headers.clear();
        *hangup = None;
        crate::buffers::give_request(req);
    }

    /// Reads the next request. `Ok(None)`: the peer closed cleanly between requests.
    pub async fn next_request(&mut self) -> Result<Option<Request>, (FrameError, bool)> {
        self.permit = None;
        // The head.
        let (req, head_len) = loop {
            if let Some(head) = self.parse_head().map_err(|e| (e, false))? {
                break head;
            }
            if self.buffered() > MAX_HEAD_BYTES {
                return Err((FrameError::HeadTooLarge, false));
            }
            match self.fill().await {
                Ok(true) => continue,
                Ok(false) if self.buffered() == 0 => return Ok(None),
                _ => return Err((FrameError::Incomplete, false)),
            }
        };
        if head_len > MAX_HEAD_BYTES {
            return Err((FrameError::HeadTooLarge, false));
        }
        self.consume(head_len);
        let mut req = req;
        check_host(&req).map_err(|e| (e, false))?;
        let body = framing(&req).map_err(|e| (e, false))?;
        let expects_continue = req
            .header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
            && !req.http10;
        match body {
            Framing::None => {}
            Framing::Length(n) => {
                if n > self.max_body {
                    return Err((FrameError::BodyTooLarge, false));
                }
                if n > MAX_BODY_BYTES {
                    // Refused before `100 Continue`, so the body need not come.
                    self.permit = Some(self.large.take(n).ok_or((FrameError::Busy, false))?);
                    if expects_continue && self.buffered() < n {
                        self.send_continue().await.map_err(|_| (FrameError::Incomplete, true))?;
                    }
                    req.body = Body::new(self.read_large_body(n).await.map_err(|e| (e, true))?);
                    return Ok(Some(req));
                }
                if expects_continue && self.buffered() < n {
                    self.send_continue().await.map_err(|_| (FrameError::Incomplete, true))?;
                }
                while self.buffered() < n {
                    if !self.fill().await.map_err(|_| (FrameError::Incomplete, true))? {
                        return Err((FrameError::Incomplete, true));
                    }
                }
                req.body
                    .extend(self.pending().get(..n).ok_or((FrameError::Incomplete, true))?);
                self.consume(n);
            }
            Framing::Chunked => {
                if expects_continue && self.buffered() == 0 {
                    self.send_continue().await.map_err(|_| (FrameError::Incomplete, true))?;
                }
                req.body = Body::new(self.read_chunked().await.map_err(|e| (e, true))?);
            }
        }
        Ok(Some(req))
    }

    /// A body of `n` bytes (above `MAX_BODY_BYTES`, within its permit) read
    /// straight into a buffer of its own: the read buffer does not grow to
    /// twice its size, and nothing past the body (a pipelined request) is
    /// read.
    async fn read_large_body(&mut self, n: usize) -> Result<Vec<u8>, FrameError> {
        let mut body = vec![0u8; n];
        let have = self.buffered().min(n);
        if let (Some(dst), Some(src)) = (body.get_mut(..have), self.pending().get(..have)) {
            dst.copy_from_slice(src);
        }
        self.consume(have);
        let mut got = have;
        while got < n {
            let dst = body.get_mut(got..).unwrap_or_default();
            match self.stream.read(dst).await {
                Ok(0) | Err(_) => return Err(FrameError::Incomplete),
                Ok(r) => got = got.saturating_add(r).min(n),
            }
        }
        Ok(body)
    }

    async fn send_continue(&mut self) -> io::Result<()> {
        self.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        self.stream.flush().await
    }

    async fn read_chunked(&mut self) -> Result<Vec<u8>, FrameError> {
        let mut body = Vec::new();
        loop {
            let size = loop {
                match httparse::parse_chunk_size(self.pending()) {
                    Ok(httparse::Status::Complete((used, size))) => {
                        self.consume(used);
                        break size;
                    }
                    Ok(httparse::Status::Partial) => {
                        if self.buffered() > MAX_CHUNK_LINE_BYTES {
                            return Err(FrameError::Bad("chunk size line too long"));
                        }
                        if !self.fill().await.map_err(|_| FrameError::Incomplete)? {
                            return Err(FrameError::Incomplete);
                        }
                    }
                    Err(_) => return Err(FrameError::Bad("invalid chunk size")),
                }
            };
            if size == 0 {
                self.skip_trailers().await?;
                return Ok(body);
            }
            // The size is the peer's number: check it against the limit
            // before any arithmetic, so nothing below can overflow.
            let room = self.max_body.saturating_sub(body.len());
            let size = match usize::try_from(size) {
                Ok(n) if n <= room => n,
                _ => return Err(FrameError::BodyTooLarge),
            };
            // Past Azure's limit, the body may go on only with room in the
            // core's budget for the largest body it could become.
            if body.len().saturating_add(size) > MAX_BODY_BYTES && self.permit.is_none() {
                self.permit = Some(self.large.take(self.max_body).ok_or(FrameError::Busy)?);
            }
            // The data as it arrives: a chunk never waits in the read
            // buffer whole, so the buffer does not grow to its size.
            let mut left = size;
            while left > 0 {
                if self.buffered() == 0 && !self.fill().await.map_err(|_| FrameError::Incomplete)? {
                    return Err(FrameError::Incomplete);
                }
                let take = left.min(self.buffered());
                body.extend_from_slice(self.pending().get(..take).unwrap_or_default());
                self.consume(take);
                left = left.saturating_sub(take);
            }
            while self.buffered() < 2 {
                if !self.fill().await.map_err(|_| FrameError::Incomplete)? {
                    return Err(FrameError::Incomplete);
                }
            }
            if self.pending().get(..2) != Some(&b"\r\n"[..]) {
                return Err(FrameError::Bad("chunk data not followed by CRLF"));
            }
            self.consume(2);
        }
    }

    /// Trailer fields after the last chunk (ignored), up to the empty line.
    async fn skip_trailers(&mut self) -> Result<(), FrameError> {
        let mut skipped = 0usize;
        loop {
            if let Some(i) = self.pending().windows(2).position(|w| w == b"\r\n") {
                self.consume(i.saturating_add(2));
                if i == 0 {
                    return Ok(());
                }
                skipped = skipped.saturating_add(i);
                if skipped > MAX_HEAD_BYTES {
                    return Err(FrameError::HeadTooLarge);
                }
                continue;
            }
            if self.buffered() > MAX_HEAD_BYTES {
                return Err(FrameError::HeadTooLarge);
            }
            if !self.fill().await.map_err(|_| FrameError::Incomplete)? {
                return Err(FrameError::Incomplete);
            }
        }
    }
}

/// Copies the parsed headers into `out`, values trimmed (RFC 9110 §5.5:
/// only spaces and tabs surround a value) and made UTF-8 (invalid bytes
/// become U+FFFD). `head`: the request's head, when it is valid UTF-8 as a
/// whole; each value is then that text's slice, not validated again.
fn collect_headers(parsed: &[httparse::Header<'_>], head: Option<&str>, out: &mut Headers) {
    debug_assert!(out.is_empty());
    let bytes = parsed.iter().map(|h| h.name.len().saturating_add(h.value.len())).sum();
    out.text.reserve(bytes);
    out.spans.reserve(parsed.len());
    for h in parsed {
        let v = match head.and_then(|head| slice_of(head, h.value)) {
            Some(v) => Cow::Borrowed(v),
            // Valid UTF-8 is checked by the fast validator; only the rest
            // goes through the lossy rewrite.
            None => match simdutf8::basic::from_utf8(h.value) {
                Ok(v) => Cow::Borrowed(v),
                Err(_) => String::from_utf8_lossy(h.value),
            },
        };
        out.push(h.name, v.trim_matches([' ', '\t']));
    }
}

/// `part`, a slice of `whole`'s bytes, as a slice of `whole`: no second
/// validation. `None` if `part` does not lie within `whole` on character
/// boundaries (httparse's values always do: they end at ASCII delimiters).
fn slice_of<'a>(whole: &'a str, part: &[u8]) -> Option<&'a str> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    whole.get(start..start.checked_add(part.len())?)
}

/// RFC 9112 §3.2: an HTTP/1.1 request carries exactly one `Host`; HTTP/1.0
/// may omit it but never repeat it. Addressing reads the host, so two
/// different values would make the resource ambiguous.
fn check_host(req: &Request) -> Result<(), FrameError> {
    let hosts = req.headers.named("host").count();
    match (hosts, req.http10) {
        (1, _) | (0, true) => Ok(()),
        (0, false) => Err(FrameError::Bad("a version 1.1 request needs a Host header")),
        _ => Err(FrameError::Bad("more than one Host header")),
    }
}

/// Decides how the body is framed (RFC 9112 §6), refusing anything ambiguous.
fn framing(req: &Request) -> Result<Framing, FrameError> {
    // Content-Length is iterated, not collected: the usual request has one
    // and needs no allocation to say so (an empty `te` allocates nothing).
    let te: Vec<&str> = req.headers.named("transfer-encoding").collect();
    let mut cl = req.headers.named("content-length").peekable();
    if !te.is_empty() {
        // RFC 9112 §6.1: HTTP/1.0 has no transfer codings; such a message's
        // framing is faulty (a proxy in front may frame it differently).
        if req.http10 {
            return Err(FrameError::Bad("Transfer-Encoding in an HTTP/1.0 request"));
        }
        if cl.peek().is_some() {
            return Err(FrameError::Bad("both Transfer-Encoding and Content-Length"));
        }
        let last = te.join(",");
        let codings: Vec<String> = last.split(',').map(|t| t.trim().to_ascii_lowercase()).collect();
        if codings.last().map(String::as_str) != Some("chunked")
            || codings.iter().filter(|c| *c == "chunked").count() != 1
        {
            return Err(FrameError::Bad("unsupported Transfer-Encoding"));
        }
        return Ok(Framing::Chunked);
    }
    let mut len = None;
    for v in cl {
        for part in v.split(',') {
            let part = part.trim();
            if part.is_empty() || part.len() > 12 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(FrameError::Bad("invalid Content-Length"));
            }
            let n: usize = part.parse().map_err(|_| FrameError::Bad("invalid Content-Length"))?;
            if len.is_some_and(|l| l != n) {
                return Err(FrameError::Bad("conflicting Content-Length values"));
            }
            len = Some(n);
        }
    }
    Ok(match len {
        Some(0) | None => Framing::None,
        Some(n) => Framing::Length(n),
    })
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::string_slice
)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    #[test]
    fn a_header_value_reads_back_as_given_in_place_or_not() {
        let fits = "é".repeat(INLINE_VALUE_BYTES / 2); // exactly full, multi-byte
        let spills = "x".repeat(INLINE_VALUE_BYTES + 1);
        for text in ["", "2026-10-06", fits.as_str(), spills.as_str()] {
            let v = HeaderValue::copied(text);
            assert_eq!(v.as_str(), text);
            assert_eq!(v.as_bytes(), text.as_bytes());
            assert_eq!(v, HeaderValue::from(text.to_string()));
        }
        assert!(matches!(HeaderValue::copied(&fits).0, Value::Inline { .. }));
        assert!(matches!(HeaderValue::copied(&spills).0, Value::Shared(_)));
        let mut out = Vec::new();
        Response::new(200)
            .header("x-ms-version", HeaderValue::copied("2026-10-06"))
            .encode(&mut out, false, false);
        assert!(out.windows(24).any(|w| w == b"x-ms-version: 2026-10-06"));
    }

    /// The presence bits answer "absent" without reading the spans: a
    /// name whose bit another name set must still be compared, and a name
    /// that is there must always be found, whatever bit it shares.
    #[test]
    fn every_present_name_is_found_and_no_absent_one_whatever_bits_they_share() {
        let names: Vec<String> = (0..300).map(|i| format!("x-h{i}-{}", "a".repeat(i % 7))).collect();
        let h: Headers = names.iter().step_by(2).map(|n| (n.to_uppercase(), n.clone())).collect();
        for (i, n) in names.iter().enumerate() {
            let want = (i % 2 == 0).then_some(n.as_str());
            assert_eq!(h.get(n), want, "{n}");
            assert_eq!(h.named(n).count(), usize::from(want.is_some()), "{n}");
        }
        // The case the bits cannot settle was met: absent names whose bit is set.
        let shared = names
            .iter()
            .skip(1)
            .step_by(2)
            .filter(|n| h.present & bloom_bit(tag(n.as_bytes())) != 0);
        assert!(shared.count() > 100);
        assert!(h.get("content-md5").is_none() && h.get("if-match").is_none());
    }

    #[test]
    fn headers_keep_order_case_and_empty_parts() {
        let pairs = [
            ("Host", "h:1"),
            ("X-Empty", ""),
            ("", "v"),
            ("x-ms-meta-\u{e9}", "\u{1F600} x"),
            ("Host", "h:2"),
        ];
        let h: Headers = pairs.into_iter().collect();
        assert_eq!(h.len(), pairs.len());
        assert_eq!(h.iter().collect::<Vec<_>>(), pairs.to_vec());
        assert!(Headers::default().iter().next().is_none());
        let req = Request {
            method: "GET".into(),
            target: "/".into(),
            http10: false,
            headers: h,
            body: Default::default(),
            hangup: None,
        };
        assert_eq!(req.header("host"), Some("h:1"));
        assert_eq!(req.header("x-empty"), Some(""));
        assert_eq!(req.header("missing"), None);
        assert_eq!(req.header("HOST"), Some("h:1"), "case-blind, first match");
        assert_eq!(req.header("hosu"), None, "same length, other name");
        assert_eq!(req.header("x-ms-meta-\u{c9}"), None, "only ASCII folds");
        assert_eq!(req.header(""), Some("v"));
        assert_eq!(
            req.header("hast"),
            None,
            "same tag (length, first and last byte), other name"
        );
        assert_eq!(req.header("HosT"), Some("h:1"));
        assert_eq!(req.headers.named("host").collect::<Vec<_>>(), ["h:1", "h:2"]);
        assert_eq!(req.headers.named("x-empty").collect::<Vec<_>>(), [""]);
        assert_eq!(req.headers.named("x-ms-meta-\u{e9}").count(), 1);
        assert_eq!(req.headers.named("x-ms-meta-\u{c9}").count(), 0);
        // A name longer than the tag's 16 bits of length still compares whole.
        let long = "x".repeat(70_000);
        let h: Headers = [(long.as_str(), "1")].into_iter().collect();
        assert_eq!(h.get(&long), Some("1"));
        assert_eq!(h.get(&"x".repeat(70_000 - 65_536)), None);
    }

    /// An in-memory duplex stream: reads from `input` in small pieces, records writes.
    /// Past the input, the peer closes, or with `silent` stays open sending nothing.
    struct Mock {
        input: Vec<u8>,
        pos: usize,
        step: usize,
        written: Vec<u8>,
        silent: bool,
    }
    impl AsyncRead for Mock {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
            if self.silent && self.pos == self.input.len() {
                return Poll::Pending;
            }
            let n = self.step.min(buf.len()).min(self.input.len() - self.pos);
            let p = self.pos;
            buf[..n].copy_from_slice(&self.input[p..p + n]);
            self.pos += n;
            Poll::Ready(Ok(n))
        }
    }
    impl AsyncWrite for Mock {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.written.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn reader(input: &[u8], step: usize) -> Reader<Mock> {
        Reader::new(Mock {
            input: input.to_vec(),
            pos: 0,
            step,
            written: vec![],
            silent: false,
        })
    }

    /// `Connection` tokens are compared case-blind, in a list over every
    /// line, with spaces around them, `close` winning; without either,
    /// HTTP/1.1 keeps the connection and 1.0 does not.
    #[test]
    fn connection_tokens_decide_keep_alive_case_blind() {
        let req = |http10: bool, conn: Option<&str>| Request {
            http10,
            // Two lines where the text holds a `|`: one list (RFC 9110 §5.3).
            headers: conn
                .into_iter()
                .flat_map(|v| v.split('|'))
                .map(|v| ("Connection", v))
                .collect(),
            ..Request::default()
        };
        for (http10, conn, keep) in [
            (false, None, true),
            (true, None, false),
            (false, Some("CLOSE"), false),
            (false, Some("upgrade , Close"), false),
            (true, Some("Keep-Alive"), true),
            (true, Some("te,  keep-alive "), true),
            (true, Some("keep-alive-ish"), false),
            (false, Some("keep-alive, close"), false),
            (false, Some("keep-alive|close"), false),
            (true, Some("te|Keep-Alive"), true),
        ] {
            assert_eq!(req(http10, conn).keep_alive(), keep, "{http10} {conn:?}");
        }
    }

    /// A body read into a buffer lent by the core goes back to the core
    /// when given back (the next taker gets the same buffer), leaving the
    /// request's body empty, and a second give-back or the recycle after
    /// it gives nothing twice.
    #[test]
    fn a_body_given_back_is_the_next_buffer_lent_and_only_once() {
        let raw = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello";
        let mut r = reader(raw, 4096);
        let req = block_on(r.next_request()).unwrap().unwrap();
        assert!(req.body == b"hello" && req.body.len() == 5);
        let lent = req.body.bytes().as_ptr();
        req.body.give_back();
        assert!(req.body.is_empty() && req.body.bytes().is_empty());
        req.body.give_back();
        r.recycle(req);
        let again = crate::buffers::take_answer();
        assert_eq!(again.as_ptr(), lent, "the body's buffer is the next one lent");
        let other = crate::buffers::take_answer();
        assert_ne!(other.as_ptr(), lent, "given back once, not twice");
    }

    #[test]
    fn a_recycled_request_carries_nothing_into_the_next() {
        let raw = b"POST /first?x=1 HTTP/1.0\r\nHost: h\r\nConnection: close\r\nX-Old: 1\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: h\r\n\r\n";
        let mut r = reader(raw, 4096);
        let mut first = block_on(r.next_request()).unwrap().unwrap();
        assert_eq!((&*first.body.bytes(), first.http10), (&b"hello"[..], true));
        assert!(!first.keep_alive());
        first.hangup = Some(Rc::new(Hangup::default()));
        let (first_target, first_text) = (first.target.as_ptr(), first.headers.text.as_ptr());
        r.recycle(first);
        let second = block_on(r.next_request()).unwrap().unwrap();
        // The same buffers, through the core's pool.
        assert_eq!(
            (second.target.as_ptr(), second.headers.text.as_ptr()),
            (first_target, first_text)
        );
        assert_eq!((second.method.as_str(), second.target.as_str()), ("GET", "/b"));
        assert!(second.body.is_empty() && !second.http10 && second.hangup.is_none());
        assert_eq!(second.headers.len(), 1);
        assert_eq!((second.header("x-old"), second.header("connection")), (None, None));
        assert!(second.keep_alive());
        // The answered request went to the core, whose next head reuses its
        // buffers; one holding more than the bound is freed instead.
        let target_at = second.target.as_ptr();
        r.recycle(second);
        let third = crate::buffers::take_request();
        assert!(third.is_empty() && third.target.as_ptr() == target_at);
        let mut big = third;
        big.target.reserve(MAX_KEPT_REQUEST_BYTES + 1);
        r.recycle(big);
        assert!(crate::buffers::take_request().target.capacity() <= MAX_KEPT_REQUEST_BYTES);
    }

    #[test]
    fn a_header_value_that_is_not_utf8_is_rewritten_and_the_others_are_kept() {
        let raw = b"GET /a HTTP/1.1\r\nHost: h\r\nX-Bad: a\xffb\r\nX-Good:  caf\xc3\xa9 \r\n\r\n";
        let req = block_on(reader(raw, 4096).next_request()).unwrap().unwrap();
        assert_eq!(req.header("x-bad"), Some("a\u{FFFD}b"));
        assert_eq!(req.header("x-good"), Some("caf\u{e9}"));
        let raw = b"GET /a HTTP/1.1\r\nHost: h\r\nX-Good:\tcaf\xc3\xa9\t\r\nX-Empty:\r\n\r\n";
        let req = block_on(reader(raw, 4096).next_request()).unwrap().unwrap();
        assert_eq!(
            (req.header("x-good"), req.header("x-empty")),
            (Some("caf\u{e9}"), Some(""))
        );
    }

    #[test]
    fn pipelined_requests_with_both_body_framings_in_tiny_reads() {
        let raw = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloPUT /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\nGET /c HTTP/1.0\r\n\r\n";
        for step in [1, 3, 7, 4096] {
            let mut r = reader(raw, step);
            block_on(async {
                let a = r.next_request().await.unwrap().unwrap();
                assert_eq!(
                    (a.method.as_str(), a.target.as_str(), &*a.body.bytes()),
                    ("POST", "/a", &b"hello"[..])
                );
                let b = r.next_request().await.unwrap().unwrap();
                assert_eq!(&*b.body.bytes(), b"abcde");
                let c = r.next_request().await.unwrap().unwrap();
                assert!(c.http10 && !c.keep_alive());
                assert!(r.next_request().await.unwrap().is_none());
            });
        }
    }

    /// Header values reach the handlers without the spaces and tabs around
    /// them (httparse strips most, `collect_headers` the rest), an empty one
    /// as empty, and a head that is not UTF-8 with its invalid bytes made
    /// U+FFFD; a recycled request's headers are the next head's alone.
    #[test]
    fn header_values_are_trimmed_whether_or_not_the_head_is_utf8() {
        let raw = b"GET /a HTTP/1.1\r\nHost:h\r\nX-A: \t spaced \t \r\nX-B:\r\nx-ms-meta-k:  caf\xc3\xa9  \r\n\r\n\
                    GET /b HTTP/1.1\r\nHost: h2\r\nX-Bad: \xff v \r\nX-A:  a2\r\n\r\n";
        let mut r = reader(raw, 4096);
        block_on(async {
            let a = r.next_request().await.unwrap().unwrap();
            let all: Vec<_> = a.headers.iter().collect();
            assert_eq!(
                all,
                [
                    ("Host", "h"),
                    ("X-A", "spaced"),
                    ("X-B", ""),
                    ("x-ms-meta-k", "caf\u{e9}")
                ]
            );
            assert_eq!(a.header("x-a"), Some("spaced"));
            assert_eq!(a.header("x-missing"), None);
            r.recycle(a);
            let b = r.next_request().await.unwrap().unwrap();
            let all: Vec<_> = b.headers.iter().collect();
            assert_eq!(all, [("Host", "h2"), ("X-Bad", "\u{fffd} v"), ("X-A", "a2")]);
            assert_eq!(b.header("x-a"), Some("a2"));
        });
    }

    #[test]
    fn a_hundred_headers_are_read_and_one_more_is_refused() {
        let head = |n: usize| {
            let mut h = String::from("GET / HTTP/1.1\r\nHost: h\r\n");
            for i in 1..n {
                h.push_str(&format!("X-{i}: v{i}\r\n"));
            }
            h + "\r\n"
        };
        // In pieces, so the head is parsed partially, then again.
        let mut r = reader(head(MAX_HEADERS).as_bytes(), 7);
        let req = block_on(r.next_request()).unwrap().unwrap();
        assert_eq!(req.headers.len(), MAX_HEADERS);
        assert_eq!((req.header("host"), req.header("x-99")), (Some("h"), Some("v99")));
        let mut r = reader(head(MAX_HEADERS + 1).as_bytes(), 7);
        assert_eq!(block_on(r.next_request()).unwrap_err().0, FrameError::HeadTooLarge);
    }

    #[test]
    fn ambiguous_or_oversized_framing_is_refused() {
        let cases: [(&[u8], FrameError); 6] = [
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                FrameError::Bad("conflicting Content-Length values"),
            ),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
                FrameError::Bad("invalid Content-Length"),
            ),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                FrameError::Bad("both Transfer-Encoding and Content-Length"),
            ),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
                FrameError::Bad("unsupported Transfer-Encoding"),
            ),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 999999999\r\n\r\n",
                FrameError::BodyTooLarge,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                FrameError::Bad("invalid chunk size"),
            ),
        ];
        for (raw, want) in cases {
            let mut r = reader(raw, 4096);
            let got = block_on(r.next_request()).unwrap_err().0;
            assert_eq!(got, want, "{}", String::from_utf8_lossy(raw));
        }
        let mut r = reader(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 4096);
        assert_eq!(
            block_on(r.next_request()).unwrap_err().0,
            FrameError::Bad("Transfer-Encoding in an HTTP/1.0 request")
        );
        let mut r = reader(b"GARBAGE\x01\r\n\r\n", 4096);
        assert!(matches!(block_on(r.next_request()).unwrap_err().0, FrameError::Bad(_)));
        let big = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES + 10));
        let mut r = reader(big.as_bytes(), 4096);
        assert_eq!(block_on(r.next_request()).unwrap_err().0, FrameError::HeadTooLarge);
        let mut r = reader(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nshort", 4096);
        assert_eq!(block_on(r.next_request()).unwrap_err().0, FrameError::Incomplete);
    }

    /// RFC 9110 §8.6: a list of one repeated length is that length.
    #[test]
    fn a_content_length_list_of_one_length_is_that_length() {
        for cl in ["5", "5, 5", "5,5", " 5 ,5", "000005"] {
            let raw = format!("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: {cl}\r\n\r\nhello");
            let req = block_on(reader(raw.as_bytes(), 4096).next_request()).unwrap().unwrap();
            assert_eq!(&*req.body.bytes(), b"hello", "{cl:?}");
        }
        for cl in ["5, 6", "5,", ",5", "5 5", "0x5", "1234567890123", "+5"] {
            let raw = format!("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: {cl}\r\n\r\nhello");
            let err = block_on(reader(raw.as_bytes(), 4096).next_request()).unwrap_err().0;
            assert!(matches!(err, FrameError::Bad(_)), "{cl:?}: {err:?}");
        }
    }

    #[test]
    fn chunk_sizes_that_would_overflow_are_refused() {
        // Issue 8.1: a non-empty chunk, then a size of 2^64 - 1.
        let raw = b"PUT /a/q HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nA\r\nffffffffffffffff\r\nBB";
        for step in [1, 5, 4096] {
            let mut r = reader(raw, step);
            assert_eq!(block_on(r.next_request()).unwrap_err().0, FrameError::BodyTooLarge);
        }
        let raw = b"PUT /a/q HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffe\r\n";
        assert_eq!(
            block_on(reader(raw, 4096).next_request()).unwrap_err().0,
            FrameError::BodyTooLarge
        );
    }

    #[test]
    fn host_header_must_appear_exactly_once_in_http11() {
        let none = b"GET / HTTP/1.1\r\n\r\n";
        let two = b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n";
        for raw in [&none[..], &two[..]] {
            assert!(matches!(
                block_on(reader(raw, 4096).next_request()).unwrap_err().0,
                FrameError::Bad(_)
            ));
        }
        let old = b"GET / HTTP/1.0\r\n\r\n";
        assert!(block_on(reader(old, 4096).next_request()).unwrap().is_some());
    }

    /// A connection holds a read buffer only while bytes wait in it: one
    /// that read a whole request gives it back, and the next connection
    /// reads into that same buffer; one left with the first bytes of a
    /// pipelined request keeps them, intact, while another reads; one
    /// whose peer has sent nothing holds none while it waits.
    #[test]
    fn read_buffers_are_lent_only_while_bytes_wait_in_them() {
        let put = b"PUT /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc";
        let get = |t: &str| format!("GET /{t} HTTP/1.1\r\nHost: h\r\n\r\n").into_bytes();
        block_on(async {
            let mut a = reader(put, 4096);
            assert_eq!(a.next_request().await.unwrap().unwrap().body, b"abc");
            assert_eq!(a.capacity(), 0, "nothing buffered, no buffer held");
            let lent = crate::buffers::take_read();
            let first = lent.as_ptr();
            crate::buffers::give_read(lent);

            // `b` reads its request and the first bytes of the next one.
            let mut raw = put.to_vec();
            raw.extend_from_slice(&get("b"));
            let mut b = reader(&raw, put.len() + 5);
            assert_eq!(b.next_request().await.unwrap().unwrap().body, b"abc");
            assert_eq!((b.capacity(), b.buffered()), (READ_CHUNK, 5));
            assert_eq!(b.buf.as_ptr(), first, "the buffer given back is the next one lent");
            let mut c = reader(&get("c"), 4096);
            assert_eq!(c.next_request().await.unwrap().unwrap().target, "/c");
            assert_eq!(b.next_request().await.unwrap().unwrap().target, "/b");
            assert_eq!(b.capacity(), 0);
        });

        // A peer that has sent nothing yet.
        let mut waiting = reader(b"", 4096);
        waiting.stream.silent = true;
        let lent = crate::buffers::take_read();
        let top = lent.as_ptr();
        crate::buffers::give_read(lent);
        assert!(block_on(futures_lite::future::poll_once(waiting.wait_for_request())).is_none());
        assert_eq!(waiting.capacity(), 0, "a waiting connection holds no buffer");
        let again = crate::buffers::take_read();
        assert_eq!(again.as_ptr(), top, "the buffer it tried was given back");
    }

    /// A lent buffer keeps the bytes of the connection that gave it back;
    /// the next one to read into it sees only its own. Here they would
    /// complete its partial head.
    #[test]
    fn bytes_another_connection_left_in_a_lent_buffer_are_never_read() {
        block_on(async {
            let mut a = reader(b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n", 4096);
            assert_eq!(a.next_request().await.unwrap().unwrap().target, "/a");
            let mut b = reader(b"GET /b HT", 4096);
            assert_eq!(b.next_request().await.unwrap_err().0, FrameError::Incomplete);
        });
    }

    #[test]
    fn a_grown_read_buffer_is_given_back_between_requests() {
        let body = vec![b'x'; 100_000];
        let mut raw = format!("PUT /a HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        raw.extend_from_slice(&body);
        raw.extend_from_slice(b"GET /b HTTP/1.1\r\nHost: h\r\n\r\n");
        let mut r = reader(&raw, 4096);
        block_on(async {
            assert_eq!(r.next_request().await.unwrap().unwrap().body.len(), body.len());
            assert!(r.capacity() > MAX_IDLE_READ_BUFFER);
            assert!(r.wait_for_request().await.unwrap());
            assert_eq!(r.capacity(), READ_CHUNK);
            assert_eq!(r.next_request().await.unwrap().unwrap().target, "/b");
        });
    }

    #[test]
    fn large_bodies_take_the_core_budget_and_never_grow_the_buffer() {
        let big = MAX_BODY_BYTES * 4;
        let body = vec![b'y'; big];
        let mut raw = format!("PUT /a HTTP/1.1\r\nHost: h\r\nContent-Length: {big}\r\n\r\n").into_bytes();
        raw.extend_from_slice(&body);
        raw.extend_from_slice(b"GET /b HTTP/1.1\r\nHost: h\r\n\r\n");
        let pool = LargeBodies::new(big);
        let mut r = reader(&raw, 7000).with_body_limit(big, pool.clone());
        block_on(async {
            let req = r.next_request().await.unwrap().unwrap();
            assert_eq!(req.body, body);
            assert!(r.largest <= 2 * READ_CHUNK, "read buffer grew to {}", r.largest);
            assert_eq!(pool.free(), 0, "the body holds its share until the next request");
            // The pipelined request after it is intact.
            assert!(r.wait_for_request().await.unwrap());
            assert_eq!(pool.free(), big);
            assert_eq!(r.next_request().await.unwrap().unwrap().target, "/b");
        });
        // Over the configured limit: 413, as at Azure's limit.
        let raw = format!("PUT /a HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n", big + 1);
        let mut r = reader(raw.as_bytes(), 4096).with_body_limit(big, LargeBodies::new(big));
        assert_eq!(block_on(r.next_request()).unwrap_err().0, FrameError::BodyTooLarge);
        // The budget spent by another connection: 503 before any body byte
        // (and before a `100 Continue`).
        let pool = LargeBodies::new(big);
        let _other = pool.take(1).unwrap();
        let raw = format!("PUT /a HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: {big}\r\n\r\n");
        let mut r = reader(raw.as_bytes(), 4096).with_body_limit(big, pool.clone());
        assert_eq!(block_on(r.next_request()).unwrap_err().0, FrameError::Busy);
        assert!(r.stream.written.is_empty(), "no 100 Continue for a refused body");
        assert_eq!(pool.free(), big - 1);
        // A body within Azure's limit never needs the budget.
        let raw = b"PUT /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc";
        let mut r = reader(raw, 4096).with_body_limit(big, LargeBodies::new(0));
        assert_eq!(block_on(r.next_request()).unwrap().unwrap().body, b"abc");
    }

    #[test]
    fn chunked_bodies_past_azures_limit_take_the_budget_and_stream_through() {
        let big = MAX_BODY_BYTES * 3;
        let chunk = vec![b'z'; MAX_BODY_BYTES];
        let mut raw = b"PUT /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..2 {
            raw.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            raw.extend_from_slice(&chunk);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        for step in [1000, 65536] {
            let pool = LargeBodies::new(big);
            let mut r = reader(&raw, step).with_body_limit(big, pool.clone());
            let req = block_on(r.next_request()).unwrap().unwrap();
            assert_eq!(req.body.len(), 2 * MAX_BODY_BYTES);
            assert!(r.largest <= 2 * READ_CHUNK, "read buffer grew to {}", r.largest);
            assert_eq!(pool.free(), 0);
            // Without room, the second chunk is refused.
            let mut r = reader(&raw, step).with_body_limit(big, LargeBodies::new(big - 1));
            assert_eq!(block_on(r.next_request()).unwrap_err().0, FrameError::Busy);
        }
    }

    #[test]
    fn expect_continue_sends_100_before_the_body() {
        let head = b"PUT /q HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
        let mut raw = head.to_vec();
        raw.extend_from_slice(b"ok");
        // The head arrives alone; the body only after the 100 Continue.
        let mut r = reader(&raw, head.len());
        let req = block_on(r.next_request()).unwrap().unwrap();
        assert_eq!(req.body, b"ok");
        assert_eq!(r.stream.written, b"HTTP/1.1 100 Continue\r\n\r\n");
    }

    #[test]
    fn response_encoding() {
        let mut out = Vec::new();
        Response::new(204)
            .header("x-ms-request-id", "r")
            .encode(&mut out, false, false);
        assert_eq!(
            out,
            b"HTTP/1.1 204 No Content\r\nx-ms-request-id: r\r\nContent-Length: 0\r\n\r\n"
        );
        let mut out = Vec::new();
        Response::new(200).xml("<a/>".into()).encode(&mut out, true, true);
        let s = String::from_utf8(out).unwrap();
        assert!(s.ends_with("Content-Length: 0\r\nConnection: close\r\n\r\n"), "{s}");
    }
}
