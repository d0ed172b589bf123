//! XML in and out, in Azure's shapes (Microsoft's Queue service REST reference). Requests are
//! parsed with quick-xml, order-insensitively, tolerating any declaration;
//! responses are written directly, elements in the order the REST reference
//! gives. Times: RFC 1123 in message XML, ISO 8601 with 7 digits in ACLs.
// Input from the network flows through here: no unchecked arithmetic,
// indexing or panicking unwraps (docs/SECURITY.md).
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::string_slice
)]

use crate::error::ApiError;
use engine::model::SignedIdentifier;
use quick_xml::events::Event;
use quick_xml::Reader;
use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};
use time::format_description::well_known::Rfc3339;
use time::{Date, OffsetDateTime, PrimitiveDateTime, Time};

pub const DECL: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?>";

pub fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    quick_xml::escape::escape(s)
}

/// Escapes element text: only `<`, `>` and `&` need it there. Quotes stay
/// as they are, so a message of `"` is not six times its size on the wire.
pub fn escape_text(s: &str) -> std::borrow::Cow<'_, str> {
    quick_xml::escape::partial_escape(s)
}

/// Appends `text` as element content, escaped as [`escape_text`] does. The
/// search for the three bytes is memchr's vectorized one: quick-xml's
/// escape tests a byte at a time, and a message text is 64 KiB at most by
/// default, more with `--max-message-kib` (on a 1 KiB Get Messages it was
/// 1.3% of a put-get-delete cycle's samples).
pub fn push_text(out: &mut String, text: &str) {
    let mut rest = text;
    while let Some(at) = memchr::memchr3(b'<', b'>', b'&', rest.as_bytes()) {
        // `at` is the index of an ASCII byte, so a char boundary on both sides.
        let (Some(clean), Some(tail)) = (rest.get(..at), rest.get(at..)) else {
            // Unreachable; if it were not, the rest goes out escaped all
            // the same, never raw.
            out.push_str(&escape_text(rest));
            return;
        };
        out.push_str(clean);
        out.push_str(match tail.as_bytes().first() {
            Some(b'<') => "&lt;",
            Some(b'>') => "&gt;",
            _ => "&amp;",
        });
        rest = tail.get(1..).unwrap_or_default();
    }
    out.push_str(rest);
}

/// RFC 1123 (`Sun, 22 Nov 2026 10:43:06 GMT`) from milliseconds since the epoch.
pub fn rfc1123(ms: u64) -> String {
    let mut s = String::with_capacity(29);
    push_rfc1123(&mut s, ms);
    s
}

/// Appends [`rfc1123`]'s text. The texts have second resolution, and an
/// answer's times are mostly "now" and "now + TTL", so each core keeps the
/// last few distinct seconds' texts (formatting three times per put was 2%
/// of it). The slots are searched, not indexed by the second: "now" and
/// "now + 7 days" would share any slot chosen by seconds modulo a power of
/// two, and evict each other on every put.
pub fn push_rfc1123(out: &mut String, ms: u64) {
    with_rfc1123(ms, |text| out.push_str(text));
}

/// Calls `f` with [`rfc1123`]'s text of `ms`, from the core's kept texts.
/// `f` runs while they are borrowed: it must not format a time itself.
pub fn with_rfc1123<R>(ms: u64, f: impl FnOnce(&str) -> R) -> R {
    // Times here come from our own clock plus bounded timeouts; a value past
    // SystemTime's range still prints (as the latest time) rather than panic.
    // (httpdate refuses years past 9999, so the value is capped there first).
    const LAST_HTTP_DATE_MS: u64 = 253_402_300_799_000; // 9999-12-31T23:59:59Z
    const SLOTS: usize = 4;
    struct Texts {
        /// (seconds since the epoch, their text); u64::MAX marks an empty slot.
        slots: [(u64, String); SLOTS],
        /// The slot the next miss overwrites (round robin).
        victim: usize,
    }
    thread_local! {
        // Owned by this core.
        static TEXTS: std::cell::RefCell<Texts> = const {
            std::cell::RefCell::new(Texts { slots: [const { (u64::MAX, String::new()) }; SLOTS], victim: 0 })
        };
    }
    let secs = ms.min(LAST_HTTP_DATE_MS) / 1000;
    TEXTS.with_borrow_mut(|texts| {
        if let Some((_, text)) = texts.slots.iter().find(|(at, _)| *at == secs) {
            return f(text);
        }
        let t = UNIX_EPOCH.checked_add(Duration::from_secs(secs)).unwrap_or(UNIX_EPOCH);
        let text = httpdate::fmt_http_date(t);
        let answer = f(&text);
        #[cfg(test)]
        RFC1123_FORMATS.with(|n| n.set(n.get().saturating_add(1)));
        let victim = texts.victim % SLOTS;
        if let Some(slot) = texts.slots.get_mut(victim) {
            *slot = (secs, text);
        }
        texts.victim = victim.checked_add(1).filter(|&v| v < SLOTS).unwrap_or(0);
        answer
    })
}

#[cfg(test)]
thread_local! {
    /// How many RFC 1123 texts this thread formatted (tests only).
    static RFC1123_FORMATS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Every byte value's two lower-case hex digits, for [`hyphenated_id`].
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)] // constant evaluation, `b` < 256
static HEX_PAIRS: [[u8; 2]; 256] = {
    let digits = *b"0123456789abcdef";
    let mut table = [[0u8; 2]; 256];
    let mut b = 0usize;
    while b < 256 {
        table[b] = [digits[b >> 4], digits[b & 0xF]];
        b += 1;
    }
    table
};

/// A UUID as Azure writes its ids (`MessageId`, `x-ms-request-id`): 36
/// characters, lower-case hex digits in groups of 8-4-4-4-12. One table
/// read a byte: uuid's own encoder writes the plain form and then copies
/// it around the hyphens a byte at a time (about 115 instructions an id
/// against about 50), and every put writes two ids.
pub fn hyphenated_id(id: &uuid::Uuid) -> HyphenatedId {
    // Each group's bytes and where their digits go, between the hyphens at
    // 8, 13, 18 and 23.
    const GROUPS: [(std::ops::Range<usize>, std::ops::Range<usize>); 5] = [
        (0..4, 0..8),
        (4..6, 9..13),
        (6..8, 14..18),
        (8..10, 19..23),
        (10..16, 24..36),
    ];
    let mut out = [b'-'; 36];
    for (from, to) in GROUPS {
        if let (Some(bytes), Some(digits)) = (id.as_bytes().get(from), out.get_mut(to)) {
            for (b, pair) in bytes.iter().zip(digits.chunks_exact_mut(2)) {
                if let Some(hex) = HEX_PAIRS.get(usize::from(*b)) {
                    pair.copy_from_slice(hex);
                }
            }
        }
    }
    HyphenatedId(out)
}

/// [`hyphenated_id`]'s text. Invariant: ASCII only (hex digits from
/// `HEX_PAIRS` and hyphens); only [`hyphenated_id`] makes one.
pub struct HyphenatedId([u8; 36]);

impl HyphenatedId {
    pub fn as_str(&self) -> &str {
        debug_assert!(self.0.is_ascii());
        // SAFETY: ASCII is UTF-8, and the type's invariant makes every byte
        // ASCII. (A checked conversion would cost about as much as the
        // encoding it follows.)
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }
}

/// ISO 8601 with seven fractional digits, as Azure writes ACL times and error times.
pub fn iso8601_7(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:07}Z",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.nanosecond() / 100
    )
}

/// Parses the ISO 8601 forms Azure accepts in ACLs and SAS tokens:
/// `YYYY-MM-DD`, `YYYY-MM-DDThh:mmZ`, `YYYY-MM-DDThh:mm:ssZ`, with optional
/// fractions and offsets.
pub fn parse_iso8601(s: &str) -> Option<OffsetDateTime> {
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc3339) {
        return Some(t);
    }
    let date_part = s.get(..10)?;
    let date = Date::parse(date_part, time::macros::format_description!("[year]-[month]-[day]")).ok()?;
    let rest = s.get(10..)?;
    if rest.is_empty() {
        return Some(PrimitiveDateTime::new(date, Time::MIDNIGHT).assume_utc());
    }
    let hm = rest.strip_prefix('T')?.strip_suffix('Z')?;
    let time = Time::parse(hm, time::macros::format_description!("[hour]:[minute]")).ok()?;
    Some(PrimitiveDateTime::new(date, time).assume_utc())
}

/// Put Message's 201 body (REST reference: "Put Message").
pub fn write_put(p: &engine::shard::PutReceipt) -> String {
    let mut s = String::with_capacity(512);
    s.push_str(DECL);
    s.push_str("<QueueMessagesList><QueueMessage>");
    write_put_fields(&mut s, p);
    s.push_str("</QueueMessage></QueueMessagesList>");
    s
}

/// The fields of one stored message in Put Message's answer, also each
/// stored entry of Put Message Batch's.
pub fn write_put_fields(s: &mut String, p: &engine::shard::PutReceipt) {
    push_stored_fields(s, &p.id, p.inserted_ms, p.expires_ms);
    push_receipt_fields(s, &p.pop_receipt, p.visible_ms);
}

/// A `QueueMessagesList`, each message written by `item`; the empty list is
/// `<QueueMessagesList />`, which the SDKs' iterators stop on.
fn write_list<T>(msgs: &[T], text_len: impl Fn(&T) -> usize, item: impl Fn(&mut String, &T)) -> String {
    let guess = msgs
        .iter()
        .fold(128usize, |acc, m| acc.saturating_add(text_len(m)).saturating_add(400));
    let mut s = String::with_capacity(guess);
    s.push_str(DECL);
    if msgs.is_empty() {
        s.push_str("<QueueMessagesList />");
        return s;
    }
    s.push_str("<QueueMessagesList>");
    for m in msgs {
        item(&mut s, m);
    }
    s.push_str("</QueueMessagesList>");
    s
}

/// Get Messages' body (REST reference: "Get Messages").
pub fn write_received(msgs: &[engine::shard::ReceivedMessage]) -> String {
    write_list(
        msgs,
        |m| m.text.len(),
        |s, m| {
            s.push_str("<QueueMessage>");
            push_stored_fields(s, &m.id, m.inserted_ms, m.expires_ms);
            push_receipt_fields(s, &m.pop_receipt, m.visible_ms);
            push_count_and_text(s, m.dequeue_count, &m.text);
        },
    )
}

/// Peek Messages' body (REST reference: "Peek Messages"): no receipt, no next-visible time.
pub fn write_peeked(msgs: &[engine::shard::PeekedMessage]) -> String {
    write_list(
        msgs,
        |m| m.text.len(),
        |s, m| {
            s.push_str("<QueueMessage>");
            push_stored_fields(s, &m.id, m.inserted_ms, m.expires_ms);
            push_count_and_text(s, m.dequeue_count, &m.text);
        },
    )
}

/// A listed message's id, insertion and expiration times.
fn push_stored_fields(s: &mut String, id: &uuid::Uuid, inserted_ms: u64, expires_ms: u64) {
    s.push_str("<MessageId>");
    s.push_str(hyphenated_id(id).as_str());
    s.push_str("</MessageId><InsertionTime>");
    push_rfc1123(s, inserted_ms);
    s.push_str("</InsertionTime><ExpirationTime>");
    push_rfc1123(s, expires_ms);
    s.push_str("</ExpirationTime>");
}

/// A received or stored message's pop receipt and next-visible time.
fn push_receipt_fields(s: &mut String, pop_receipt: &str, visible_ms: u64) {
    s.push_str("<PopReceipt>");
    s.push_str(pop_receipt);
    s.push_str("</PopReceipt><TimeNextVisible>");
    push_rfc1123(s, visible_ms);
    s.push_str("</TimeNextVisible>");
}

/// A listed message's dequeue count and text, and the element's end.
fn push_count_and_text(s: &mut String, dequeue_count: u64, text: &str) {
    use std::fmt::Write;
    let _ = write!(s, "<DequeueCount>{dequeue_count}</DequeueCount><MessageText>");
    push_text(s, text);
    s.push_str("</MessageText></QueueMessage>");
}

/// A tiny element tree, enough for Azure's small request documents.
#[derive(Debug, Default, Clone)]
pub struct Node {
    pub name: String,
    pub text: String,
    pub children: Vec<Node>,
}

impl Node {
    pub fn child(&self, name: &str) -> Option<&Node> {
        self.children.iter().find(|c| c.name == name)
    }
    pub fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }
}

/// Depth past which a request document is refused (Azure's documents are ≤ 4 deep).
const MAX_DEPTH: usize = 16;

/// Parses a whole document into a tree. Entities other than XML's five and
/// character references are refused; DTDs are refused.
pub fn parse(body: &[u8]) -> Result<Node, ApiError> {
    let text = std::str::from_utf8(body).map_err(|_| ApiError::invalid_xml("The request body is not UTF-8."))?;
    let mut reader = Reader::from_str(text);
    reader.config_mut().trim_text(false);
    let mut stack: Vec<Node> = Vec::new();
    let mut root: Option<Node> = None;
    let mut elements = 0usize;
    loop {
        let ev = reader.read_event().map_err(|e| ApiError::invalid_xml(format!("{e}")))?;
        if matches!(ev, Event::Start(_) | Event::Empty(_)) {
            elements = elements.saturating_add(1);
            if elements > crate::limits::MAX_XML_ELEMENTS {
                return Err(ApiError::invalid_xml("The document has too many elements."));
            }
        }
        match ev {
            Event::Start(e) => {
                if root.is_some() {
                    return Err(ApiError::invalid_xml("Content after the root element."));
                }
                if stack.len() >= MAX_DEPTH {
                    return Err(ApiError::invalid_xml("The document is nested too deeply."));
                }
                let name = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
                stack.push(Node {
                    name,
                    ..Default::default()
                });
            }
            Event::Empty(e) => {
                let node = Node {
                    name: String::from_utf8_lossy(e.local_name().as_ref()).into_owned(),
                    ..Default::default()
                };
                match stack.last_mut() {
                    Some(parent) => parent.children.push(node),
                    None if root.is_none() => root = Some(node),
                    None => return Err(ApiError::invalid_xml("Content after the root element.")),
                }
            }
            Event::End(_) => {
                let node = stack
                    .pop()
                    .ok_or_else(|| ApiError::invalid_xml("Unbalanced end tag."))?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(node),
                    None => root = Some(node),
                }
            }
            Event::Text(t) => {
                let s = t.unescape().map_err(|e| ApiError::invalid_xml(format!("{e}")))?;
                check_xml_chars(&s)?;
                match stack.last_mut() {
                    Some(n) => n.text.push_str(&s),
                    None if s.trim().is_empty() => {}
                    None => return Err(ApiError::invalid_xml("Text outside the root element.")),
                }
            }
            Event::CData(t) => {
                let s = String::from_utf8_lossy(&t.into_inner()).into_owned();
                check_xml_chars(&s)?;
                if let Some(n) = stack.last_mut() {
                    n.text.push_str(&s);
                }
            }
            Event::DocType(_) => return Err(ApiError::invalid_xml("Document type declarations are not allowed.")),
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) => {}
            Event::Eof => break,
        }
    }
    if !stack.is_empty() {
        return Err(ApiError::invalid_xml("The document ends inside an element."));
    }
    root.ok_or_else(|| ApiError::invalid_xml("The request body has no root element."))
}

/// XML 1.0's `Char` production (W3C XML 1.0, section 2.2): C0 control characters other than tab,
/// line feed and carriage return, and U+FFFE/U+FFFF, are not XML, raw or as
/// character references. A text holding one could be stored but never
/// returned in a well-formed answer, so it is refused as the service does.
fn check_xml_chars(s: &str) -> Result<(), ApiError> {
    // Fast pass over bytes (this runs on every message body): only a C0
    // byte or 0xEF, the lead byte of U+FFFE and U+FFFF, can start a bad
    // character; without one there is nothing to look for.
    let suspicious = s
        .bytes()
        .any(|b| (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r')) || b == 0xEF);
    if !suspicious {
        return Ok(());
    }
    let bad = s
        .chars()
        .find(|&c| (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || matches!(c, '\u{FFFE}' | '\u{FFFF}'));
    match bad {
        None => Ok(()),
        Some(c) => Err(ApiError::invalid_xml(format!(
            "The character U+{:04X} is not allowed in an XML document.",
            u32::from(c)
        ))),
    }
}

/// The text of the body every SDK sends for Put and Update Message, found
/// without the XML reader: an optional plain declaration, then exactly
/// `<QueueMessage><MessageText>` text `</MessageText></QueueMessage>`, where
/// the text holds nothing the reader would transform or question (no `<`,
/// `&`, carriage return or `]]>`) and is UTF-8. Anything else returns
/// `None` and goes through [`parse`], which gives the same answer for these
/// bodies (a unit test compares the two); the reader was a tenth of a put's
/// CPU. Read as bytes: all but the text must match ASCII, so the body is
/// UTF-8 exactly when its text is, and the text's one scan also says
/// whether it needs the UTF-8 check at all.
fn plain_message_text(body: &[u8]) -> Option<&str> {
    const OPEN: &[u8] = b"<QueueMessage><MessageText>";
    const CLOSE: &[u8] = b"</MessageText></QueueMessage>";
    let mut rest = body;
    if let Some(decl) = rest.strip_prefix(b"<?xml ") {
        let end = decl.windows(2).position(|w| w == b"?>")?;
        let (inside, after) = decl.split_at(end);
        let plain = inside
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b' ' | b'=' | b'\'' | b'"' | b'.' | b'-' | b'_'));
        if !plain {
            return None;
        }
        rest = trim_xml_space_start(after.strip_prefix(b"?>")?);
    }
    let text = trim_xml_space_end(rest.strip_prefix(OPEN)?).strip_suffix(CLOSE)?;
    plain_text_bytes(text)
}

/// `s` without the spaces, tabs and line feeds it starts with.
fn trim_xml_space_start(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t' | b'\n', rest @ ..] = s {
        s = rest;
    }
    s
}

/// `s` without the spaces, tabs and line feeds it ends with.
fn trim_xml_space_end(mut s: &[u8]) -> &[u8] {
    while let [rest @ .., b' ' | b'\t' | b'\n'] = s {
        s = rest;
    }
    s
}

/// What a scan of a text's bytes found ([`finish_plain_scan`]).
const SCAN_REFUSED: u8 = 1;
const SCAN_BRACKET: u8 = 2;
const SCAN_EF: u8 = 4;
const SCAN_NON_ASCII: u8 = 8;

/// The text as a `str`, if it holds nothing the reader would transform and
/// nothing [`check_xml_chars`] refuses (no `<`, `&`, `]]>`, U+FFFE, U+FFFF
/// or C0 control but tab and line feed) and is UTF-8. One pass over the
/// bytes in fixed-size chunks without an early exit inside a chunk, so the
/// compiler vectorizes it (the four scans it replaces were 6% of a put's
/// CPU); it also notes any byte above 0x7F, so an ASCII text (what an SDK's
/// base64 is) skips the UTF-8 check, a second pass over its bytes. Only a
/// text with a `]` or an 0xEF byte (the lead byte of U+FFFE and U+FFFF,
/// and of the rest of U+F000..U+FFFF) is looked at again, closely.
fn plain_text_bytes(text: &[u8]) -> Option<&str> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return finish_plain_scan(text, unsafe { plain_text_bytes_avx2(text) });
    }
    finish_plain_scan(text, plain_text_bytes_in(text))
}

/// [`plain_text_bytes_in`] for AVX2, 32 bytes at a time, each byte
/// classified by two table lookups (`vpshufb`) on its nibbles: a byte's
/// class is the AND of its high nibble's bits and its low nibble's. About
/// eight instructions per 32 bytes where the compiled per-byte compares of
/// [`plain_text_bytes_in`] took 29 (cachegrind; the scan runs over every
/// byte of every put's text). What it finds must be that function's (which
/// stops at a refused byte, so past one only the refusal must agree): a
/// test compares them on every character of the Basic Multilingual Plane
/// and on every byte value, alone and as a sequence's lead.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn plain_text_bytes_avx2(bytes: &[u8]) -> u8 {
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_loadu_si256, _mm256_or_si256, _mm256_set1_epi8, _mm256_setr_epi8,
        _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_srli_epi16, _mm256_testz_si256,
    };
    // Classes: C0 controls 0x00-0x0F but tab and line feed (LOW), 0x10-0x1F
    // (HIGH), `&` 0x26 (AMP), `<` 0x3C (LT), `]` 0x5D (BR), 0xEF (EF), any
    // byte above 0x7F (TOP).
    const LOW: i8 = 1;
    const HIGH: i8 = 2;
    const AMP: i8 = 4;
    const LT: i8 = 8;
    const BR: i8 = 16;
    const EF: i8 = 32;
    const TOP: i8 = 64;
    const BAD: i8 = LOW | HIGH | AMP | LT;
    // By high nibble, 0 to 15 (`vpshufb` looks up within each 128-bit lane,
    // so each table is given twice).
    #[rustfmt::skip]
    let by_high = _mm256_setr_epi8(
        LOW, HIGH, AMP, LT, 0, BR, 0, 0, TOP, TOP, TOP, TOP, TOP, TOP, TOP | EF, TOP,
        LOW, HIGH, AMP, LT, 0, BR, 0, 0, TOP, TOP, TOP, TOP, TOP, TOP, TOP | EF, TOP,
    );
    // By low nibble: LOW but for 0x9 (tab) and 0xA (line feed); HIGH and
    // TOP for all; AMP at 6, LT at 0xC, BR at 0xD, EF at 0xF.
    const L: i8 = LOW | HIGH | TOP;
    const H: i8 = HIGH | TOP;
    #[rustfmt::skip]
    let by_low = _mm256_setr_epi8(
        L, L, L, L, L, L, L | AMP, L, L, H, H, L, L | LT, L | BR, L, L | EF,
        L, L, L, L, L, L, L | AMP, L, L, H, H, L, L | LT, L | BR, L, L | EF,
    );
    let nibble = _mm256_set1_epi8(0x0f);
    let blocks = bytes.chunks_exact(32);
    let tail = blocks.remainder();
    let mut seen: __m256i = _mm256_setzero_si256();
    for block in blocks {
        // SAFETY: `block` is 32 readable bytes; the load is unaligned.
        let v = unsafe { _mm256_loadu_si256(block.as_ptr().cast::<__m256i>()) };
        // The shift moves bits across bytes within 16-bit lanes; the mask
        // keeps each byte's own high nibble (0 to 15: never `vpshufb`'s
        // zeroing bit).
        let high = _mm256_and_si256(_mm256_srli_epi16::<4>(v), nibble);
        let low = _mm256_and_si256(v, nibble);
        let class = _mm256_and_si256(_mm256_shuffle_epi8(by_high, high), _mm256_shuffle_epi8(by_low, low));
        seen = _mm256_or_si256(seen, class);
    }
    let has = |bits: i8| _mm256_testz_si256(seen, _mm256_set1_epi8(bits)) == 0;
    // The last 0-31 bytes, one at a time.
    let flag = |found: bool, bit: u8| if found { bit } else { 0 };
    flag(has(BAD) || tail.iter().any(|&b| is_refused_byte(b)), SCAN_REFUSED)
        | flag(has(BR) || tail.contains(&b']'), SCAN_BRACKET)
        | flag(has(EF) || tail.contains(&0xEF), SCAN_EF)
        | flag(has(TOP) || !tail.is_ascii(), SCAN_NON_ASCII)
}

/// A byte that makes a text not plain on its own: a C0 control other than
/// tab and line feed, `<` or `&`. Non-short-circuit `&` and `|` on bools,
/// so that inlined into the portable scan's fold it leaves no branch per
/// byte and the loop compiles to vector compares. (Three `||` folds per
/// chunk stayed scalar: about five instructions a byte.)
#[inline(always)]
fn is_refused_byte(b: u8) -> bool {
    let control = (b < 0x20) & (b != b'\t') & (b != b'\n');
    control | (b == b'<') | (b == b'&')
}

/// The closer look, given what a scan found (`SCAN_*`): refused outright;
/// else checked as UTF-8 only if some byte is above 0x7F; then a `]` found
/// means a search for `]]>`, an 0xEF byte one for U+FFFE and U+FFFF.
fn finish_plain_scan(text: &[u8], found: u8) -> Option<&str> {
    if found & SCAN_REFUSED != 0 {
        return None;
    }
    let text = if found & SCAN_NON_ASCII == 0 {
        debug_assert!(text.is_ascii());
        // SAFETY: the scan found no byte above 0x7F: the text is ASCII, so
        // UTF-8. Both scans OR every byte's class into what they return,
        // the AVX2 one each 32-byte block's and each tail byte's; a test
        // compares the finding with `is_ascii` for every byte value at
        // places in both halves of a block, across blocks and in the tail.
        unsafe { std::str::from_utf8_unchecked(text) }
    } else {
        simdutf8::basic::from_utf8(text).ok()?
    };
    // Single-character searches use memchr; only flagged texts pay them.
    let cdata_end = found & SCAN_BRACKET != 0 && text.contains("]]>");
    let non_char = found & SCAN_EF != 0 && (text.contains('\u{FFFE}') || text.contains('\u{FFFF}'));
    (!(cdata_end || non_char)).then_some(text)
}

/// The scan on CPUs without AVX2, and the reference the AVX2 scan is
/// tested against: what it found, as `SCAN_*` bits.
#[inline(always)]
fn plain_text_bytes_in(text: &[u8]) -> u8 {
    // Keep in step with `check_xml_chars`: its refusals must all be here.
    const CHUNK: usize = 256;
    // One flag byte per chunk, no branch per byte (see `is_refused_byte`).
    let flags = |b: u8| {
        u8::from(is_refused_byte(b)).wrapping_mul(SCAN_REFUSED)
            | u8::from(b == b']').wrapping_mul(SCAN_BRACKET)
            | u8::from(b == 0xEF).wrapping_mul(SCAN_EF)
            | u8::from(b > 0x7F).wrapping_mul(SCAN_NON_ASCII)
    };
    let mut seen = 0u8;
    let chunks = text.chunks_exact(CHUNK);
    let tail = chunks.remainder();
    for chunk in chunks.chain([tail]) {
        seen |= chunk.iter().fold(0u8, |acc, &b| acc | flags(b));
        if seen & SCAN_REFUSED != 0 {
            return seen;
        }
    }
    seen
}

/// `<QueueMessage><MessageText>…</MessageText></QueueMessage>` → the text.
pub fn parse_message_text(body: &[u8]) -> Result<String, ApiError> {
    if let Some(text) = plain_text_of(body) {
        return Ok(text.to_string());
    }
    parse_message_text_slowly(body)
}

/// [`parse_message_text`] into an `Rc`, where the engine keeps a put's
/// body: one allocation and copy of the text, not a `String`'s then the
/// `Rc`'s.
pub fn parse_shared_message_text(body: &[u8]) -> Result<std::rc::Rc<str>, ApiError> {
    match plain_text_of(body) {
        Some(text) => Ok(std::rc::Rc::from(text)),
        None => parse_message_text_slowly(body).map(std::rc::Rc::from),
    }
}

/// The text of a body with nothing to decode (what every SDK sends), read
/// in place.
fn plain_text_of(body: &[u8]) -> Option<&str> {
    let text = plain_message_text(body)?;
    // `plain_message_text` let through no byte `check_xml_chars` refuses.
    debug_assert!(check_xml_chars(text).is_ok());
    Some(text)
}

/// [`parse_message_text`] through the element tree: entities, CDATA,
/// comments, any layout.
fn parse_message_text_slowly(body: &[u8]) -> Result<String, ApiError> {
    let root = parse(body)?;
    if root.name != "QueueMessage" {
        return Err(ApiError::invalid_xml("The root element must be QueueMessage."));
    }
    root.child("MessageText")
        .map(|n| n.text.clone())
        .ok_or_else(|| ApiError::invalid_xml("QueueMessage must contain MessageText."))
}

/// Set Queue ACL's body → policies. An empty body removes all policies.
pub fn parse_signed_identifiers(body: &[u8]) -> Result<Vec<SignedIdentifier>, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(Vec::new());
    }
    let root = parse(body)?;
    if root.name != "SignedIdentifiers" {
        return Err(ApiError::invalid_xml("The root element must be SignedIdentifiers."));
    }
    let mut out = Vec::new();
    for si in &root.children {
        if si.name != "SignedIdentifier" {
            return Err(ApiError::invalid_xml(format!("Unexpected element {}.", si.name)));
        }
        let id = si
            .child("Id")
            .map(|n| n.text.clone())
            .ok_or_else(|| ApiError::invalid_xml("SignedIdentifier needs an Id."))?;
        let policy = si.child("AccessPolicy");
        let time_field = |name: &str| -> Result<Option<String>, ApiError> {
            match policy.and_then(|p| p.child(name)).map(|n| n.text.trim()) {
                None | Some("") => Ok(None),
                Some(v) => parse_iso8601(v)
                    .map(|t| Some(iso8601_7(t)))
                    .ok_or_else(|| ApiError::invalid_xml(format!("{name} is not a valid ISO 8601 time."))),
            }
        };
        out.push(SignedIdentifier {
            id,
            start: time_field("Start")?,
            expiry: time_field("Expiry")?,
            permission: policy
                .and_then(|p| p.child("Permission"))
                .map(|n| n.text.trim().to_string())
                .filter(|p| !p.is_empty()),
        });
    }
    Ok(out)
}

pub fn write_signed_identifiers(acl: &[SignedIdentifier]) -> String {
    if acl.is_empty() {
        return format!("{DECL}<SignedIdentifiers />");
    }
    let mut s = format!("{DECL}<SignedIdentifiers>");
    for si in acl {
        s.push_str(&format!("<SignedIdentifier><Id>{}</Id><AccessPolicy>", escape(&si.id)));
        for (name, v) in [
            ("Start", &si.start),
            ("Expiry", &si.expiry),
            ("Permission", &si.permission),
        ] {
            if let Some(v) = v {
                s.push_str(&format!("<{name}>{}</{name}>", escape(v)));
            }
        }
        s.push_str("</AccessPolicy></SignedIdentifier>");
    }
    s.push_str("</SignedIdentifiers>");
    s
}

/// Flattens a small document into `path → text` (e.g. `Logging/Read`), for
/// service properties, where element order must not matter.
pub fn flatten(node: &Node, prefix: &str, out: &mut BTreeMap<String, String>) {
    for c in &node.children {
        let path = if prefix.is_empty() {
            c.name.clone()
        } else {
            format!("{prefix}/{}", c.name)
        };
        if c.children.is_empty() {
            out.insert(path, c.text.trim().to_string());
        } else {
            flatten(c, &path, out);
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {

    /// The table encoder writes what uuid's own does: every byte value in
    /// every position, and random ids.
    #[test]
    fn ids_are_hyphenated_as_uuid_writes_them() {
        let mut ids = vec![uuid::Uuid::nil(), uuid::Uuid::max()];
        for b in 0..=255u8 {
            for at in 0..16 {
                let mut bytes = [0x5Au8; 16];
                bytes[at] = b;
                ids.push(uuid::Uuid::from_bytes(bytes));
            }
        }
        ids.extend((0..1000).map(|_| uuid::Uuid::new_v4()));
        for id in ids {
            assert_eq!(
                super::hyphenated_id(&id).as_str(),
                id.hyphenated().to_string(),
                "{id:?}"
            );
        }
    }

    proptest::proptest! {
        /// The vectorized escape writes what quick-xml's does, for any text
        /// (the three escaped bytes dense among multi-byte characters).
        #[test]
        fn pushed_text_is_escaped_as_escape_text_does(
            text in "[<>&a\"'é\u{1F600}]{0,80}",
            prefix in "[a-z]{0,3}",
        ) {
            let mut out = prefix.clone();
            super::push_text(&mut out, &text);
            proptest::prop_assert_eq!(out, format!("{prefix}{}", super::escape_text(&text)));
        }
    }

    /// The reader's answer for a message body, bypassing the fast path.
    fn slow_text(body: &str) -> Result<String, String> {
        let root = parse(body.as_bytes()).map_err(|e| e.message)?;
        if root.name != "QueueMessage" {
            return Err("root".into());
        }
        root.child("MessageText")
            .map(|n| n.text.clone())
            .ok_or_else(|| "child".into())
    }

    #[test]
    fn a_document_of_too_many_elements_is_refused() {
        let doc = |n: usize| {
            format!(
                "<QueueMessage><MessageText>t</MessageText>{}</QueueMessage>",
                "<a/>".repeat(n)
            )
        };
        // Two elements besides the `<a/>`s.
        let most = crate::limits::MAX_XML_ELEMENTS - 2;
        assert!(parse(doc(most).as_bytes()).is_ok());
        assert!(
            doc(most).len() > crate::limits::MAX_BODY_BYTES,
            "Azure-sized bodies never reach the cap"
        );
        let err = parse(doc(most + 1).as_bytes()).unwrap_err();
        assert!(
            format!("{:?}", err.details).contains("too many elements"),
            "{:?}",
            err.details
        );
    }

    #[test]
    fn the_fast_message_path_agrees_with_the_reader_on_every_ascii_byte() {
        // Every ASCII character and a few multi-byte ones, alone and at
        // each position of the 32-byte chunks the fast scan works in.
        let chars = (0u8..0x80).map(char::from).chain([
            '\u{e9}', '\u{FFFD}', '\u{FFFE}', '\u{FFFF}', '\u{EFFF}', '\u{FF01}', '\u{F000}',
        ]);
        for c in chars {
            for at in [0, 1, 31, 32, 33, 40] {
                let mut t: String = "a".repeat(at);
                t.push(c);
                t.push_str("bc");
                let body = format!("<QueueMessage><MessageText>{t}</MessageText></QueueMessage>");
                let fast = parse_message_text(body.as_bytes()).map_err(|e| e.message);
                assert_eq!(fast, slow_text(&body), "char U+{:04X} at {at}", u32::from(c));
            }
        }
    }

    #[test]
    fn remembered_rfc1123_texts_match_fresh_ones() {
        let fresh = |ms: u64| {
            let capped = ms.min(253_402_300_799_000);
            httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(capped))
        };
        let base = 1_795_000_000_000u64;
        // Same slot (seconds 4 apart), same second at other milliseconds,
        // back and forth, the epoch and past the cap.
        for ms in [
            base,
            base + 4_000,
            base,
            base + 999,
            base + 1_000,
            base + 8_001,
            0,
            999,
            u64::MAX,
            base,
        ] {
            assert_eq!(rfc1123(ms), fresh(ms), "{ms}");
        }
        let mut s = String::from("x");
        push_rfc1123(&mut s, base);
        assert_eq!(s, format!("x{}", fresh(base)));
    }

    #[test]
    fn a_puts_times_are_formatted_once_per_distinct_second() {
        // A put answers with now, now + 7 days (the default TTL) and now
        // again, and the Date header is now: two distinct seconds.
        let now = 1_795_000_123_456u64;
        let week = 7 * 24 * 3600 * 1000;
        let formats = || RFC1123_FORMATS.with(|n| n.get());
        rfc1123(now);
        rfc1123(now + week);
        let before = formats();
        for _ in 0..3 {
            for ms in [now, now + week, now + 1, now + week + 2] {
                rfc1123(ms);
            }
        }
        assert_eq!(formats(), before, "both seconds stay remembered");
    }

    /// The scan this CPU runs (AVX2 where it has it) and the baseline one
    /// both give the right answer for each special text at positions across
    /// the vector widths and the 256-byte chunk's edges: refused where the
    /// reader would have work to do or `check_xml_chars` refuses, passed
    /// otherwise (a `]` or an 0xEF lead byte only flags a closer look).
    #[test]
    fn the_scan_gives_one_answer_on_every_cpu_path() {
        let specials = [
            ("<", false),
            ("&", false),
            ("\u{1}", false),
            ("\r", false),
            ("\u{1F}", false),
            ("]]>", false),
            ("\u{FFFE}", false),
            ("\u{FFFF}", false),
            ("]", true),
            ("]]", true),
            ("\u{EFFF}", true),
            ("\u{FFFD}", true),
            ("\t", true),
            ("\n", true),
            ("\u{7F}", true),
        ];
        for len in [0, 1, 31, 32, 33, 63, 64, 65, 255, 256, 257, 511, 512, 600] {
            let base = "a".repeat(len);
            assert!(plain_text_bytes(base.as_bytes()).is_some() && baseline_plain(base.as_bytes()));
            let places = [0, 1, 15, 16, 31, 32, 33, 63, 64, 253, 254, 255, 256, 257, 511, 512, len];
            for (special, plain) in specials {
                for at in places.into_iter().filter(|&at| at <= len) {
                    let t = format!("{}{special}{}", "a".repeat(at), "a".repeat(len - at));
                    let why = format!("{special:?} at {at} of {len}");
                    assert_eq!(plain_text_bytes(t.as_bytes()).is_some(), plain, "{why}");
                    assert_eq!(baseline_plain(t.as_bytes()), plain, "{why} (baseline)");
                }
            }
        }
    }

    /// Every character of the Basic Multilingual Plane (and a few past
    /// it) at places that put each of its bytes in both halves of a
    /// 32-byte block (`vpshufb` looks up within each 16-byte half), across
    /// a block's edge and in the tail read byte by byte: the AVX2 scan
    /// answers as the baseline one does. Without AVX2 there is nothing to
    /// compare, and the test says so rather than pass in silence.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_vector_scan_classifies_every_character_as_the_baseline_does() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            eprintln!("SKIPPED: this CPU has no AVX2, so the AVX2 scan cannot run here");
            return;
        }
        let astral = ['\u{10000}', '\u{1F600}', '\u{7FFFF}', '\u{EFFFF}', '\u{10FFFF}'];
        let places = [
            0, 5, 12, 13, 14, 15, 16, 28, 29, 30, 31, 32, 33, 44, 45, 46, 47, 48, 61, 62, 63, 64, 66,
        ];
        for c in (0..=0xFFFF).filter_map(char::from_u32).chain(astral) {
            for at in places {
                let t = format!("{}{c}{}", "a".repeat(at), "a".repeat(70 - at));
                // SAFETY: the CPU has AVX2, checked above.
                let vector = unsafe { plain_text_bytes_avx2(t.as_bytes()) };
                let baseline = plain_text_bytes_in(t.as_bytes());
                assert!(same_finding(vector, baseline), "U+{:04X} at {at}", u32::from(c));
            }
        }
    }

    /// The portable scan stops at a chunk with a refused byte, so the flags
    /// after it can differ; what is found must not.
    fn same_finding(a: u8, b: u8) -> bool {
        let refused = |f: u8| f & SCAN_REFUSED != 0;
        if refused(a) || refused(b) {
            refused(a) && refused(b)
        } else {
            a == b
        }
    }

    fn baseline_plain(t: &[u8]) -> bool {
        finish_plain_scan(t, plain_text_bytes_in(t)).is_some()
    }

    /// The scan lets an ASCII text skip the UTF-8 check, so it must see
    /// every byte above 0x7F, wherever it lies: each of the 256 byte
    /// values at places in both halves of a 32-byte block, across a
    /// block's edge and in the tail, alone (a lone byte above 0x7F is never
    /// UTF-8) and as the lead of a two-byte sequence, on every path. A text
    /// that is not UTF-8 is never plain, so the body goes to the reader,
    /// which refuses it.
    #[test]
    fn every_byte_above_ascii_is_seen_and_bad_utf8_is_never_plain() {
        let places = [0, 1, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 69];
        for byte in 0..=u8::MAX {
            for at in places {
                for follow in [None, Some(0x80u8), Some(0xBF)] {
                    let mut t = vec![b'a'; 70];
                    t[at] = byte;
                    if let (Some(f), Some(next)) = (follow, t.get_mut(at + 1)) {
                        *next = f;
                    }
                    let why = format!("0x{byte:02X} at {at}, then {follow:?}");
                    let found = plain_text_bytes_in(&t);
                    if found & SCAN_REFUSED == 0 {
                        assert_eq!(found & SCAN_NON_ASCII != 0, !t.is_ascii(), "{why}");
                    }
                    #[cfg(target_arch = "x86_64")]
                    if std::arch::is_x86_feature_detected!("avx2") {
                        // SAFETY: the CPU has AVX2, checked just above.
                        let vector = unsafe { plain_text_bytes_avx2(&t) };
                        assert_eq!(vector & SCAN_NON_ASCII != 0, !t.is_ascii(), "{why} (AVX2)");
                        assert!(same_finding(vector, found), "{why} (AVX2)");
                    }
                    let plain = plain_text_bytes(&t);
                    assert_eq!(plain.is_some(), baseline_plain(&t), "{why}");
                    if std::str::from_utf8(&t).is_err() {
                        assert!(plain.is_none(), "{why}");
                        let body = [
                            &b"<QueueMessage><MessageText>"[..],
                            &t,
                            b"</MessageText></QueueMessage>",
                        ]
                        .concat();
                        assert!(parse_message_text(&body).is_err(), "{why}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_cdata_end_across_a_chunk_edge_is_left_to_the_reader() {
        for at in 28..36 {
            let t = format!("{}]]>{}", "a".repeat(at), "b".repeat(40));
            let body = format!("<QueueMessage><MessageText>{t}</MessageText></QueueMessage>");
            assert!(plain_message_text(body.as_bytes()).is_none(), "at {at}");
            let fast = parse_message_text(body.as_bytes()).map_err(|e| e.message);
            assert_eq!(fast, slow_text(&body), "at {at}");
        }
    }

    #[test]
    fn the_fast_message_path_agrees_with_the_reader() {
        let texts = [
            "",
            "hello",
            "a > b",
            "tab\tand\nnewline",
            "caf\u{e9} \u{1F600}",
            "  spaced  ",
            "x]]y",
            "a]",
            "a]]",
            "\u{FF01}\u{FEFF}\u{F000}",
            "\u{FFFD}",
            "bad\u{1}",
            "bad\u{FFFE}",
            "bad\u{FFFF}",
            "\u{EFFF}ok",
        ];
        let decls = [
            "",
            "<?xml version='1.0' encoding='utf-8'?>\n",
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
        ];
        for decl in decls {
            for t in texts {
                for tail in ["", "\n", "  "] {
                    let body = format!("{decl}<QueueMessage><MessageText>{t}</MessageText></QueueMessage>{tail}");
                    let fast = parse_message_text(body.as_bytes()).map_err(|e| e.message);
                    assert_eq!(fast, slow_text(&body), "body {body:?}");
                    let plain = !t.bytes().any(|b| b < 0x20 && b != b'\t' && b != b'\n')
                        && !t.contains("]]>")
                        && !t.contains(['\u{FFFE}', '\u{FFFF}']);
                    let took_fast = plain_message_text(body.as_bytes()).is_some();
                    assert_eq!(
                        took_fast, plain,
                        "the SDK shape of a plain text takes the fast path: {body:?}"
                    );
                }
            }
        }
        // Shapes the fast path must leave to the reader.
        for body in [
            "<QueueMessage><MessageText>a &amp; b</MessageText></QueueMessage>",
            "<QueueMessage><MessageText>a\r\nb</MessageText></QueueMessage>",
            "<QueueMessage><MessageText><![CDATA[x]]></MessageText></QueueMessage>",
            "<QueueMessage><MessageText>a]]>b</MessageText></QueueMessage>",
            "<?xml version='1.0'?><!DOCTYPE x><QueueMessage><MessageText>a</MessageText></QueueMessage>",
            "<?xml a<b?><QueueMessage><MessageText>a</MessageText></QueueMessage>",
            "<QueueMessage ><MessageText>a</MessageText></QueueMessage>",
        ] {
            assert!(plain_message_text(body.as_bytes()).is_none(), "{body:?}");
            let fast = parse_message_text(body.as_bytes()).map_err(|e| e.message);
            assert_eq!(fast, slow_text(body), "body {body:?}");
        }
    }

    use super::*;

    #[test]
    fn message_text_is_unescaped_and_shapes_are_checked() {
        let b = b"<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage><MessageText>a &lt;&amp;&gt; &#233;</MessageText></QueueMessage>";
        assert_eq!(parse_message_text(b).unwrap(), "a <&> \u{e9}");
        // The shared form reads the same text, by either path.
        let plain = b"<QueueMessage><MessageText>aGVsbG8=</MessageText></QueueMessage>";
        for body in [&b[..], &plain[..], b"<QueueMessage/>"] {
            assert_eq!(
                parse_shared_message_text(body)
                    .map(|t| t.to_string())
                    .map_err(|e| e.message),
                parse_message_text(body).map_err(|e| e.message)
            );
        }
        assert_eq!(
            parse_message_text(b"<QueueMessage><MessageText></MessageText></QueueMessage>").unwrap(),
            ""
        );
        assert_eq!(
            parse_message_text(b"<QueueMessage><MessageText/></QueueMessage>").unwrap(),
            ""
        );
        for bad in [
            &b"<Other><MessageText>x</MessageText></Other>"[..],
            b"<QueueMessage></QueueMessage>",
            b"<QueueMessage><MessageText>x</MessageText>",
            b"not xml",
            b"<QueueMessage><MessageText>&xxe;</MessageText></QueueMessage>",
            b"<!DOCTYPE x [<!ENTITY a \"b\">]><QueueMessage><MessageText>&a;</MessageText></QueueMessage>",
            b"\xff\xfe",
        ] {
            let e = parse_message_text(bad).unwrap_err();
            assert_eq!(e.code, "InvalidXmlDocument", "{}", String::from_utf8_lossy(bad));
        }
        let deep = format!("{}{}", "<a>".repeat(100), "</a>".repeat(100));
        assert_eq!(parse(deep.as_bytes()).unwrap_err().code, "InvalidXmlDocument");
    }

    #[test]
    fn acl_round_trip_normalises_times() {
        let b = b"<SignedIdentifiers><SignedIdentifier><Id>p1</Id><AccessPolicy><Start>2020-01-01T00:00:00Z</Start><Expiry>2030-01-01</Expiry><Permission>raup</Permission></AccessPolicy></SignedIdentifier><SignedIdentifier><Id>p2</Id><AccessPolicy/></SignedIdentifier></SignedIdentifiers>";
        let acl = parse_signed_identifiers(b).unwrap();
        assert_eq!(acl[0].start.as_deref(), Some("2020-01-01T00:00:00.0000000Z"));
        assert_eq!(acl[0].expiry.as_deref(), Some("2030-01-01T00:00:00.0000000Z"));
        assert_eq!(acl[1].permission, None);
        let out = write_signed_identifiers(&acl);
        assert!(out.contains("<SignedIdentifier><Id>p1</Id><AccessPolicy><Start>2020-01-01T00:00:00.0000000Z</Start>"));
        assert_eq!(parse_signed_identifiers(b"").unwrap(), vec![]);
        assert_eq!(write_signed_identifiers(&[]), format!("{DECL}<SignedIdentifiers />"));
    }

    #[test]
    fn times() {
        assert_eq!(rfc1123(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            rfc1123(engine::limits::EXPIRY_NEVER_MS),
            "Fri, 31 Dec 9999 23:59:59 GMT"
        );
        assert!(parse_iso8601("2026-11-22T11:43:27Z").is_some());
        assert!(parse_iso8601("2026-11-22T11:43Z").is_some());
        assert!(parse_iso8601("2026-11-22T11:43:27.1234567Z").is_some());
        assert!(parse_iso8601("2026-11-22").is_some());
        assert!(parse_iso8601("yesterday").is_none());
    }
}
