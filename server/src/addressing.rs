//! Addressing (Microsoft's "Addressing Queue service resources"): which
//! account, queue and message a request names, and its decoded query. Which
//! operation that is, is `ops::route`'s business.
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
use crate::http::Request;
use percent_encoding::percent_decode_str;
use std::borrow::Cow;

/// What the request addresses. Borrows from the request where nothing had
/// to be decoded: query names and values were two allocations each, the
/// largest count of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'r> {
    pub account: String,
    /// Addressed through `{account}-secondary`.
    pub secondary: bool,
    pub queue: Option<String>,
    /// `…/{queue}/messages`
    pub messages: bool,
    pub message_id: Option<String>,
    /// The path exactly as sent, still percent-encoded (what Shared Key signs).
    pub raw_path: Cow<'r, str>,
    /// Query parameters, names lower-cased, names and values decoded.
    pub query: Vec<(Cow<'r, str>, Cow<'r, str>)>,
    /// Whether the SAS in `query` verified (see [`SignatureMemo`]).
    pub signature: SignatureMemo,
}

/// Set once the shared access signature a [`Target`] carries has verified
/// against the keys of the account it names. The signature and its string
/// to sign are functions of the target and `Host` alone, which name the
/// account, and an account's keys are fixed for the life of the process
/// (`config`), so a target kept parsed by a connection's [`TargetCache`]
/// verifies on every later request if it verified once: the lookup in the
/// core's table of verified signatures and its dozen comparisons were
/// about 0.3 us of a put signed with a SAS (docs/benchmarks.md, "Fewer
/// allocations, a signature remembered, the commit's copy gone"). Only a
/// success is remembered.
///
/// An account SAS also remembers, once it has passed every check, what
/// those checks found ([`AccountSasGrant`]): its permissions, IP range and
/// protocol are functions of the target and the caller, so a later request
/// from the same caller only compares the clock with the SAS's window
/// (the checks it skips were about 0.08 us of a put; docs/benchmarks.md,
/// "The frame's checksum taken from its source"). Owned by the
/// connection's task, like the target that holds it.
#[derive(Debug, Default, Clone)]
pub struct SignatureMemo {
    verified: std::cell::Cell<bool>,
    account_grant: std::cell::Cell<Option<AccountSasGrant>>,
}

/// An account SAS that passed every check for `caller`, with its window
/// as nanoseconds since the Unix epoch (`st`, when sent, and `se`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountSasGrant {
    pub caller: crate::auth::Caller,
    pub start_ns: Option<i128>,
    pub expiry_ns: i128,
}

impl SignatureMemo {
    pub fn verified(&self) -> bool {
        self.verified.get()
    }

    pub fn set_verified(&self) {
        self.verified.set(true);
    }

    pub fn account_grant(&self) -> Option<AccountSasGrant> {
        self.account_grant.get()
    }

    /// Only after the signature verified: a grant stands on it, and is
    /// not kept otherwise (no caller does that; a panic here would take a
    /// shard down on a request's account).
    pub fn set_account_grant(&self, grant: AccountSasGrant) {
        debug_assert!(self.verified(), "an account SAS granted before its signature verified");
        if self.verified() {
            self.account_grant.set(Some(grant));
        }
    }
}

/// Targets compare by what was sent: whether a copy has verified its
/// signature yet does not make it another target.
impl PartialEq for SignatureMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for SignatureMemo {}

impl Target<'_> {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_ref())
    }

    /// The same target, borrowing nothing from its request.
    pub fn into_owned(self) -> Target<'static> {
        let owned = |c: Cow<'_, str>| -> Cow<'static, str> { Cow::Owned(c.into_owned()) };
        Target {
            account: self.account,
            secondary: self.secondary,
            queue: self.queue,
            messages: self.messages,
            message_id: self.message_id,
            raw_path: owned(self.raw_path),
            query: self.query.into_iter().map(|(n, v)| (owned(n), owned(v))).collect(),
            signature: self.signature,
        }
    }
}

/// The targets of a connection's recent requests, parsed once for all the
/// requests that repeat them. A client sends the same few URLs over and
/// over (an SDK putting to and getting from one queue sends the same path
/// and SAS query with every put, and another with every get), and parsing
/// them, the query above all, was an eighth of a put's instructions
/// (docs/benchmarks.md, "A connection's targets parsed once").
///
/// The parse is a function of the request target and the `Host` header
/// alone (and of the core's fixed [`Addressing`]), so both together are the
/// key, compared in full; only what parsed without error is kept, and a
/// target is kept parsed only from its second sight on, so a URL that never
/// repeats (Delete Message's carries its receipt) costs two copies into
/// reused buffers, not a parse into owned strings. A slot holding only a
/// key is taken before one holding a parse, so such URLs do not push the
/// repeated ones out. Of the request's authority, a kept target holds
/// that its SAS signature verified and, for an account SAS that passed
/// every check, for which caller and until when ([`SignatureMemo`]):
/// every request is still authorized for its operation, and its SAS's
/// window checked, on its own; a service SAS's permissions, IP range,
/// protocol and stored policy too.
///
/// Bounded per connection: a key of at most `MAX_CACHED_TARGET_BYTES`, a
/// parse of at most `MAX_CACHED_TARGET_PARAMETERS` query parameters, in
/// `TARGET_CACHE_SLOTS` slots (docs/SECURITY.md, "Limits"). Owned by one
/// connection, on its core, and used with that core's one `Addressing`.
#[derive(Default)]
pub struct TargetCache {
    slots: [TargetSlot; crate::limits::TARGET_CACHE_SLOTS],
    /// Requests seen: each slot's `used` is from this count, which decides
    /// the slot a new target takes (`remember`).
    clock: u64,
}

#[derive(Default)]
struct TargetSlot {
    /// Whether `raw` and `host` hold a request's (an empty target is one).
    full: bool,
    raw: String,
    host: String,
    /// `raw` and `host` parsed, from their second sight on.
    parsed: Option<Target<'static>>,
    used: u64,
}

impl TargetCache {
    /// [`parse_target`] of `req`, from the cache when a recent request had
    /// the same target and host.
    pub fn parse<'a>(&'a mut self, req: &'a Request, addressing: &Addressing) -> Result<Cow<'a, Target<'a>>, ApiError> {
        let host = req.header("host").unwrap_or("");
        self.clock = self.clock.wrapping_add(1);
        let clock = self.clock;
        let Some(at) = self.find(&req.target, host) else {
            let fresh = parse_target(req, addressing)?;
            self.remember(&req.target, host);
            return Ok(Cow::Owned(fresh));
        };
        let Some(slot) = self.slots.get_mut(at) else {
            return parse_target(req, addressing).map(Cow::Owned);
        };
        slot.used = clock;
        let parsed = match slot.parsed.take() {
            Some(t) => t,
            None => {
                let fresh = parse_target(req, addressing)?;
                if fresh.query.len() > crate::limits::MAX_CACHED_TARGET_PARAMETERS {
                    return Ok(Cow::Owned(fresh));
                }
                fresh.into_owned()
            }
        };
        debug_assert_eq!(
            Some(&parsed),
            parse_target(req, addressing).ok().as_ref(),
            "a cached target differs from its parse"
        );
        Ok(Cow::Borrowed(slot.parsed.insert(parsed)))
    }

    /// A second look at a target this request already went through
    /// [`TargetCache::parse`] with: the kept parse if there is one, else a
    /// fresh one. It neither keeps nor counts anything, so the second look
    /// is not taken for the target's second sight.
    pub fn get<'a>(&'a self, req: &'a Request, addressing: &Addressing) -> Result<Cow<'a, Target<'a>>, ApiError> {
        let host = req.header("host").unwrap_or("");
        let kept = self
            .find(&req.target, host)
            .and_then(|at| self.slots.get(at)?.parsed.as_ref());
        match kept {
            Some(t) => Ok(Cow::Borrowed(t)),
            None => parse_target(req, addressing).map(Cow::Owned),
        }
    }

    /// The slot keyed by this target and host.
    fn find(&self, target: &str, host: &str) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.full && s.raw == target && s.host == host)
    }

    /// Keeps the key, unparsed until it comes again, in the least recently
    /// used slot of those without a parse, or if every slot has one, the
    /// least recently used (its buffers reused).
    fn remember(&mut self, target: &str, host: &str) {
        if target.len().saturating_add(host.len()) > crate::limits::MAX_CACHED_TARGET_BYTES {
            return;
        }
        let clock = self.clock;
        if let Some(slot) = self.slots.iter_mut().min_by_key(|s| (s.parsed.is_some(), s.used)) {
            slot.parsed = None;
            slot.raw.clear();
            slot.raw.push_str(target);
            slot.host.clear();
            slot.host.push_str(host);
            slot.full = true;
            slot.used = clock;
        }
    }
}

/// Decodes one query component with form rules: `+` is a space, `%XX` a byte.
/// One pass, and no allocation when there is nothing to decode (most names
/// and values): this runs for every query parameter of every request.
pub fn form_decode(s: &str) -> Result<Cow<'_, str>, ApiError> {
    let b = s.as_bytes();
    let Some(first) = b.iter().position(|&c| c == b'+' || c == b'%') else {
        return Ok(Cow::Borrowed(s));
    };
    let mut out = Vec::with_capacity(b.len());
    out.extend_from_slice(b.get(..first).unwrap_or_default());
    let mut i = first;
    while let Some(&c) = b.get(i) {
        match c {
            b'+' => out.push(b' '),
            b'%' => {
                let byte = escaped_byte(b, i).ok_or_else(ApiError::invalid_uri)?;
                out.push(byte);
                i = i.saturating_add(2);
            }
            _ => out.push(c),
        }
        i = i.saturating_add(1);
    }
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|_| ApiError::invalid_uri())
}

/// The byte that the `%XX` escape starting at `at` stands for, or None when
/// two hex digits do not follow.
fn escaped_byte(b: &[u8], at: usize) -> Option<u8> {
    let digit = |i: usize| b.get(i).and_then(|&c| (c as char).to_digit(16));
    let hi = digit(at.saturating_add(1))?;
    let lo = digit(at.saturating_add(2))?;
    u8::try_from(hi.checked_mul(16)?.checked_add(lo)?).ok()
}

fn has_bad_escape(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter()
        .enumerate()
        .any(|(i, &c)| c == b'%' && escaped_byte(b, i).is_none())
}

/// `s.split(sep)` for an ASCII separator, by a plain byte scan: `str`'s
/// searches by character set up a `memchr` per piece, which for a query's
/// short names and values cost more than the scan (about 2,000
/// instructions per request).
pub(crate) fn split_ascii(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    debug_assert!(sep.is_ascii());
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let r = rest?;
        match split_once_ascii(r, sep) {
            Some((piece, after)) => {
                rest = Some(after);
                Some(piece)
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// `s.split_once(sep)` for an ASCII separator (see [`split_ascii`]). An
/// ASCII byte is never inside a multi-byte character, so both sides are
/// whole `str`s.
pub(crate) fn split_once_ascii(s: &str, sep: u8) -> Option<(&str, &str)> {
    let at = s.bytes().position(|b| b == sep)?;
    Some((s.get(..at)?, s.get(at.saturating_add(1)..)?))
}

/// Whether `s` holds a control character (Unicode category Cc), or a `:`
/// when `colon` is set. Printable ASCII, all that real clients send, is
/// decided by one byte scan; anything else is read as characters.
fn has_control(s: &str, colon: bool) -> bool {
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return colon && s.as_bytes().contains(&b':');
    }
    s.chars().any(|c| c.is_control() || (colon && c == ':'))
}

/// How hosts map to accounts (docs/SECURITY.md, "What a signature covers").
/// One copy per core, read-only.
#[derive(Debug, Clone)]
pub struct Addressing {
    /// Host-style addressing (`{account}.{suffix}`) applies only to these
    /// suffixes, lower-case, without a leading dot. Every other host is
    /// path-style: `/{account}/…`.
    pub host_suffixes: Vec<String>,
}

/// The emulator's host-style suffix, as in `{account}.queue.localhost`.
pub const DEFAULT_HOST_SUFFIX: &str = "queue.localhost";

impl Default for Addressing {
    fn default() -> Self {
        Addressing {
            host_suffixes: vec![DEFAULT_HOST_SUFFIX.to_string()],
        }
    }
}

impl Addressing {
    /// Only path-style: what a client signing its own path-style requests uses.
    pub fn path_style_only() -> Self {
        Addressing { host_suffixes: vec![] }
    }

    /// The account label of a host-style `Host`, or None for path-style.
    /// The port is ignored; names compare case-blind, as DNS does.
    fn host_account(&self, host: &str) -> Option<String> {
        let name = match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        };
        // `{label}.{suffix}`: the label is everything before the first dot,
        // and the rest must be a configured suffix. Compared without
        // lower-casing a copy: path-style requests, the common case, then
        // allocate nothing here.
        let (label, rest) = name.split_once('.')?;
        (!label.is_empty() && self.host_suffixes.iter().any(|s| s.eq_ignore_ascii_case(rest)))
            .then(|| label.to_ascii_lowercase())
    }
}

/// Refuses query names and values that would make the Shared Key
/// canonicalization ambiguous: the canonical form joins `name:value` lines
/// with `\n` and repeated names with `,`, so a decoded `\n` or control
/// character, a `:` in a name or a repeated name could make two different
/// queries sign alike (a signed Peek replayed as a Get).
fn check_query(query: &[(Cow<'_, str>, Cow<'_, str>)], plain: u64) -> Result<(), ApiError> {
    // `parse_query` stops at `MAX_QUERY_PARAMETERS`.
    let mut seen = [0u64; crate::limits::MAX_QUERY_PARAMETERS];
    for (i, (name, value)) in query.iter().enumerate() {
        // A plain parameter has no control character or `:` to find.
        let plain = plain & bit(i) != 0;
        if name.is_empty() || (!plain && has_control(name, true)) {
            return Err(ApiError::invalid_query(
                &printable(name),
                "",
                "Query parameter names must be non-empty and contain no control characters or ':'.",
            ));
        }
        if !plain && has_control(value, false) {
            return Err(ApiError::invalid_query(
                name,
                &printable(value),
                "Query parameter values must not contain control characters.",
            ));
        }
        let print = fingerprint(name);
        // Never past the bound; if it were, refuse rather than skip the check.
        let Some(earlier) = seen.get(..i) else {
            return Err(too_many_parameters());
        };
        if earlier.iter().zip(query).any(|(&p, (n, _))| p == print && n == name) {
            return Err(ApiError::invalid_query(
                name,
                value,
                "A query parameter may appear only once.",
            ));
        }
        if let Some(slot) = seen.get_mut(i) {
            *slot = print;
        }
    }
    Ok(())
}

/// More than `MAX_QUERY_PARAMETERS` parameters: refused by `parse_query`,
/// and by `check_query` should it ever see more.
fn too_many_parameters() -> ApiError {
    ApiError::invalid_query("", "", "The request has too many query parameters.")
}

/// A name's length and first seven bytes in one word. Equal names have
/// equal prints, so the duplicate check compares words and reads names
/// only where two agree: a SAS query's names are mostly two letters long,
/// and comparing each with every earlier one as strings was about 600
/// instructions a request.
fn fingerprint(name: &str) -> u64 {
    let b = name.as_bytes();
    let mut w = [0u8; 8];
    let head = b.get(..b.len().min(7)).unwrap_or_default();
    if let Some(dst) = w.get_mut(..head.len()) {
        dst.copy_from_slice(head);
    }
    if let Some(last) = w.last_mut() {
        *last = u8::try_from(b.len() & 0xff).unwrap_or(0);
    }
    u64::from_le_bytes(w)
}

/// A value safe to echo in an XML error: control characters shown as `?`.
fn printable(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

pub fn parse_target<'r>(req: &'r Request, addressing: &Addressing) -> Result<Target<'r>, ApiError> {
    let (raw_path, raw_query) = split_once_ascii(&req.target, b'?').unwrap_or((req.target.as_str(), ""));
    if !raw_path.starts_with('/') {
        return Err(ApiError::invalid_uri());
    }
    let (query, plain) = parse_query(raw_query)?;
    check_query(&query, plain)?;
    let (path, path_plain) = decode_path(raw_path)?;
    // At most four segments can name anything (`{account}/{queue}/messages/{id}`),
    // so a fifth is refused and the segments stay on the stack.
    let mut slots: [&str; 4] = [""; 4];
    let mut n = 0usize;
    // After the leading `/`; one trailing `/` names the same resource.
    let body = path.get(1..).unwrap_or_default();
    if !body.is_empty() {
        for s in split_ascii(body.strip_suffix('/').unwrap_or(body), b'/') {
            if s.is_empty() || s == "." || s == ".." || (!path_plain && s.chars().any(char::is_control)) {
                return Err(ApiError::invalid_uri());
            }
            *slots.get_mut(n).ok_or_else(ApiError::invalid_uri)? = s;
            n = n.saturating_add(1);
        }
    }
    let segs = slots.get(..n).unwrap_or_default();
    let host = req.header("host").unwrap_or("");
    // Host-style only for a configured suffix, and never when the first
    // segment names the host's account: that shape is read as path-style
    // (as Azurite does), so `/{account}/{rest}` signs one resource only.
    let (account, rest) = match addressing.host_account(host) {
        Some(label) if !names_account(segs.first().copied(), &label) => (label, segs),
        _ => match segs.split_first() {
            Some((first, rest)) => ((*first).to_string(), rest),
            None => return Err(ApiError::invalid_uri()),
        },
    };
    let (account, secondary) = match account.strip_suffix("-secondary") {
        Some(a) => (a.to_string(), true),
        None => (account, false),
    };
    if rest.len() > 3 || rest.get(1).is_some_and(|s| *s != "messages") {
        return Err(ApiError::invalid_uri());
    }
    Ok(Target {
        account,
        secondary,
        queue: rest.first().map(|s| s.to_string()),
        messages: rest.len() >= 2,
        message_id: rest.get(2).map(|s| s.to_string()),
        raw_path: Cow::Borrowed(raw_path),
        query,
        signature: SignatureMemo::default(),
    })
}

/// What one byte of a query or path may ask of the parser (see [`CLASS`]).
const DECODE: u8 = 1;
const UPPER: u8 = 2;
/// Not printable ASCII: a control character, or part of one, may be here.
const UNUSUAL: u8 = 4;
const COLON: u8 = 8;

/// The class of every byte, so the query is scanned once instead of once
/// per question (split, decode, lower-case, control characters: five
/// byte loops were about 3,000 instructions of a SAS request).
static CLASS: [u8; 256] = byte_classes();

// A table built at compile time over 0..256: the index is in range.
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
const fn byte_classes() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = match b {
            b'+' | b'%' => DECODE,
            b'A'..=b'Z' => UPPER,
            b':' => COLON,
            0x20..=0x7e => 0,
            _ => UNUSUAL,
        };
        i += 1;
    }
    t
}

/// Parameter `i`'s bit in `parse_query`'s mask (none past the 64th).
fn bit(i: usize) -> u64 {
    u32::try_from(i).ok().and_then(|s| 1u64.checked_shl(s)).unwrap_or(0)
}

fn class(b: u8) -> u8 {
    CLASS.get(usize::from(b)).copied().unwrap_or(UNUSUAL)
}

/// The query's parameters, names lower-cased, and a bit per parameter
/// (`MAX_QUERY_PARAMETERS` is 64) set when it is plain: printable ASCII
/// with nothing decoded and no `:` in its name, so `check_query` need not
/// look for control characters in it.
#[allow(clippy::type_complexity)]
fn parse_query(raw: &str) -> Result<(Vec<(Cow<'_, str>, Cow<'_, str>)>, u64), ApiError> {
    const _: () = assert!(crate::limits::MAX_QUERY_PARAMETERS <= 64, "one bit per parameter");
    // A SAS URL carries nine to twelve parameters.
    let mut query = Vec::with_capacity(16);
    let mut plain = 0u64;
    let bytes = raw.as_bytes();
    let mut start = 0usize;
    while start <= bytes.len() {
        // One `name=value` piece: the scan stops at `&`, and the first `=`
        // divides the name's classes from the value's.
        let (mut end, mut eq) = (start, None);
        let (mut name_class, mut value_class) = (0u8, 0u8);
        while let Some(&b) = bytes.get(end) {
            if b == b'&' {
                break;
            }
            if eq.is_some() {
                value_class |= class(b);
            } else if b == b'=' {
                eq = Some(end);
            } else {
                name_class |= class(b);
            }
            end = end.saturating_add(1);
        }
        if end > start {
            if query.len() >= crate::limits::MAX_QUERY_PARAMETERS {
                return Err(too_many_parameters());
            }
            // `&` and `=` are ASCII, so every cut is on a character boundary.
            let (n, v) = match eq {
                Some(at) => (raw.get(start..at), raw.get(at.saturating_add(1)..end)),
                None => (raw.get(start..end), Some("")),
            };
            let (n, v) = (n.unwrap_or_default(), v.unwrap_or_default());
            let mut name = if name_class & DECODE != 0 {
                form_decode(n)?
            } else {
                Cow::Borrowed(n)
            };
            if (name_class & (UPPER | DECODE) != 0) && name.bytes().any(|b| b.is_ascii_uppercase()) {
                name.to_mut().make_ascii_lowercase();
            }
            let value = if value_class & DECODE != 0 {
                form_decode(v)?
            } else {
                Cow::Borrowed(v)
            };
            if name_class & (DECODE | UNUSUAL | COLON) == 0 && value_class & (DECODE | UNUSUAL) == 0 {
                plain |= bit(query.len());
            }
            query.push((name, value));
        }
        start = end.saturating_add(1);
    }
    Ok((query, plain))
}

/// The path percent-decoded, and whether it was plain (printable ASCII
/// without escapes, so decoding changed nothing and no segment can hold a
/// control character).
fn decode_path(raw: &str) -> Result<(Cow<'_, str>, bool), ApiError> {
    if raw.bytes().all(|b| class(b) & (DECODE | UNUSUAL) == 0 || b == b'+') {
        return Ok((Cow::Borrowed(raw), true));
    }
    if has_bad_escape(raw) {
        return Err(ApiError::invalid_uri());
    }
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| ApiError::invalid_uri())?;
    Ok((decoded, false))
}

/// Whether a path's first segment names the host label's account (primary
/// or `-secondary`).
fn names_account(first: Option<&str>, label: &str) -> bool {
    let account = label.strip_suffix("-secondary").unwrap_or(label);
    first.is_some_and(|f| f == account || f.strip_suffix("-secondary") == Some(account))
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
pub(crate) mod tests {
    use super::*;

    /// A request with only a Host header (also for the route tests in `ops`).
    pub(crate) fn req(method: &str, target: &str, host: &str) -> Request {
        Request {
            method: method.into(),
            target: target.into(),
            http10: false,
            headers: [("Host", host)].into_iter().collect(),
            body: Default::default(),
            hangup: None,
        }
    }

    /// Test requests live for the whole test run, so their targets can borrow them.
    pub(crate) fn parse_target_(r: &Request) -> Result<Target<'static>, ApiError> {
        parse_target(Box::leak(Box::new(r.clone())), &Addressing::default())
    }

    /// The form decoding before it was one pass: `+` replaced, escapes
    /// checked, then percent-decoded and read as UTF-8.
    fn form_decode_reference(s: &str) -> Option<String> {
        let spaced = s.replace('+', " ");
        // Its own escape check, so the oracle shares no code with the
        // decoder it checks.
        let b = spaced.as_bytes();
        let hex = |i: usize| b.get(i).is_some_and(u8::is_ascii_hexdigit);
        if (0..b.len()).any(|i| b[i] == b'%' && !(hex(i + 1) && hex(i + 2))) {
            return None;
        }
        percent_decode_str(&spaced).decode_utf8().ok().map(|c| c.into_owned())
    }

    /// The parsing before it was one scan (a pass per question, the
    /// segments in a `Vec`), kept as the oracle for the one-scan version.
    fn parse_target_reference<'r>(req: &'r Request, addressing: &Addressing) -> Result<Target<'r>, ApiError> {
        let (raw_path, raw_query) = req.target.split_once('?').unwrap_or((req.target.as_str(), ""));
        if !raw_path.starts_with('/') {
            return Err(ApiError::invalid_uri());
        }
        // Sized once: a SAS URL carries nine or more parameters, which growing
        // from empty would reallocate three times.
        let pairs = raw_query.bytes().filter(|&b| b == b'&').count().saturating_add(1);
        let mut query = Vec::with_capacity(pairs.min(crate::limits::MAX_QUERY_PARAMETERS));
        for pair in split_ascii(raw_query, b'&').filter(|p| !p.is_empty()) {
            if query.len() >= crate::limits::MAX_QUERY_PARAMETERS {
                return Err(ApiError::invalid_query(
                    "",
                    "",
                    "The request has too many query parameters.",
                ));
            }
            let (n, v) = split_once_ascii(pair, b'=').unwrap_or((pair, ""));
            let mut name = form_decode(n)?;
            if name.bytes().any(|b| b.is_ascii_uppercase()) {
                name.to_mut().make_ascii_lowercase();
            }
            query.push((name, form_decode(v)?));
        }
        check_query_reference(&query)?;
        if has_bad_escape(raw_path) {
            return Err(ApiError::invalid_uri());
        }
        let decoded = percent_decode_str(raw_path)
            .decode_utf8()
            .map_err(|_| ApiError::invalid_uri())?;
        let mut segs: Vec<&str> = decoded.split('/').skip(1).collect();
        if segs.last() == Some(&"") {
            segs.pop();
        }
        if segs
            .iter()
            .any(|s| s.is_empty() || *s == "." || *s == ".." || s.chars().any(char::is_control))
        {
            return Err(ApiError::invalid_uri());
        }
        let host = req.header("host").unwrap_or("");
        // Host-style only for a configured suffix, and never when the first
        // segment names the host's account: that shape is read as path-style
        // (as Azurite does), so `/{account}/{rest}` signs one resource only.
        let account = match addressing.host_account(host) {
            Some(label) if !names_account(segs.first().copied(), &label) => label,
            _ => {
                if segs.is_empty() {
                    return Err(ApiError::invalid_uri());
                }
                segs.remove(0).to_string()
            }
        };
        let (account, secondary) = match account.strip_suffix("-secondary") {
            Some(a) => (a.to_string(), true),
            None => (account, false),
        };
        if segs.len() > 3 || segs.get(1).is_some_and(|s| *s != "messages") {
            return Err(ApiError::invalid_uri());
        }
        Ok(Target {
            account,
            secondary,
            queue: segs.first().map(|s| s.to_string()),
            messages: segs.len() >= 2,
            message_id: segs.get(2).map(|s| s.to_string()),
            raw_path: Cow::Borrowed(raw_path),
            query,
            signature: SignatureMemo::default(),
        })
    }

    fn check_query_reference(query: &[(Cow<'_, str>, Cow<'_, str>)]) -> Result<(), ApiError> {
        for (i, (name, value)) in query.iter().enumerate() {
            if name.is_empty() || has_control(name, true) {
                return Err(ApiError::invalid_query(
                    &printable(name),
                    "",
                    "Query parameter names must be non-empty and contain no control characters or ':'.",
                ));
            }
            if has_control(value, false) {
                return Err(ApiError::invalid_query(
                    name,
                    &printable(value),
                    "Query parameter values must not contain control characters.",
                ));
            }
            if query.iter().take(i).any(|(n, _)| n == name) {
                return Err(ApiError::invalid_query(
                    name,
                    value,
                    "A query parameter may appear only once.",
                ));
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        /// Any target, made of the pieces that steer the parser (escapes
        /// good and bad, separators, case, control and multi-byte
        /// characters, the words addressing looks for), parses exactly as
        /// the reference does: the same target or the same error.
        #[test]
        fn one_scan_parsing_matches_the_reference(
            path in proptest::collection::vec(0usize..PIECES.len(), 0..10),
            query in proptest::option::of(proptest::collection::vec(0usize..PIECES.len(), 0..16)),
            host in 0usize..3,
        ) {
            let mut target = String::from("/");
            target.extend(path.iter().map(|&i| PIECES[i]));
            if let Some(q) = query {
                target.push('?');
                target.extend(q.iter().map(|&i| PIECES[i]));
            }
            let host = ["127.0.0.1:10001", "acct.queue.localhost", "devstoreaccount1.queue.localhost:10001"][host];
            let r: &'static Request = Box::leak(Box::new(req("GET", &target, host)));
            let a = Addressing::default();
            proptest::prop_assert_eq!(parse_target(r, &a), parse_target_reference(r, &a), "{:?}", target);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]
        /// A connection's cache answers every request of any sequence
        /// exactly as a fresh parse does: targets that differ only in the
        /// host (a host-style account), in a query value or in the case of
        /// a path escape (which decode alike, but Shared Key signs the raw
        /// path), a target too long to keep, one with too many parameters
        /// to keep parsed, one that fails to parse, and more distinct
        /// targets than the cache has slots.
        #[test]
        fn the_target_cache_answers_as_a_fresh_parse(
            sequence in proptest::collection::vec((0usize..10, 0usize..3), 1..40),
        ) {
            let long = format!("/acct/q?x={}", "y".repeat(crate::limits::MAX_CACHED_TARGET_BYTES));
            let many = format!(
                "/acct/q?{}",
                (0..=crate::limits::MAX_CACHED_TARGET_PARAMETERS).map(|i| format!("p{i}=v")).collect::<Vec<_>>().join("&")
            );
            let targets = [
                "/acct/q%2A/messages?sv=2026-10-06&sig=a%2Bb",
                "/acct/q%2a/messages?sv=2026-10-06&sig=a%2Bb",
                "/acct/q/messages?sv=2026-10-06&sig=a%2Bc",
                "/q/messages?sig=x",
                "/acct/q/messages/id?popreceipt=r1",
                "/acct/q/messages/id?popreceipt=r2",
                "/acct/q?comp=metadata",
                "relative?sig=x",
                long.as_str(),
                many.as_str(),
            ];
            let hosts = ["127.0.0.1:10001", "acct.queue.localhost", "other.queue.localhost:10001"];
            let a = Addressing::default();
            let mut cache = TargetCache::default();
            for (t, h) in sequence {
                let r: &'static Request = Box::leak(Box::new(req("GET", targets[t], hosts[h])));
                let cached = cache.parse(r, &a).map(Cow::into_owned);
                proptest::prop_assert_eq!(cached, parse_target(r, &a), "{} at {}", targets[t], hosts[h]);
                let looked = cache.get(r, &a).map(Cow::into_owned);
                proptest::prop_assert_eq!(looked, parse_target(r, &a), "get: {} at {}", targets[t], hosts[h]);
            }
        }
    }

    /// A second look within a request (the CORS headers') is not a second
    /// sight: a target sent once stays unparsed in the cache, and one sent
    /// twice is answered from the kept parse.
    #[test]
    fn a_second_look_is_not_a_second_sight() {
        let a = Addressing::default();
        let once: &'static Request =
            Box::leak(Box::new(req("DELETE", "/acct/q/messages/id?popreceipt=r", "127.0.0.1")));
        let mut cache = TargetCache::default();
        cache.parse(once, &a).unwrap();
        assert!(matches!(cache.get(once, &a).unwrap(), Cow::Owned(_)));
        assert!(cache.slots.iter().all(|s| s.parsed.is_none()), "kept after one sight");
        cache.parse(once, &a).unwrap();
        assert!(matches!(cache.get(once, &a).unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn sixty_four_query_parameters_and_no_more() {
        let query = |n: usize, last: &str| {
            let mut q: Vec<String> = (0..n.saturating_sub(1)).map(|i| format!("p{i}=v")).collect();
            q.push(last.to_string());
            format!("/a/q?{}", q.join("&"))
        };
        // The 64th parameter is the mask's last bit: plain, and checked.
        let t = parse_target_(&req("GET", &query(64, "z=1"), "127.0.0.1")).unwrap();
        assert_eq!((t.query.len(), t.param("z")), (64, Some("1")));
        let bad = parse_target_(&req("GET", &query(64, "z=%01"), "127.0.0.1")).unwrap_err();
        assert_eq!(bad.code, "InvalidQueryParameterValue");
        let dup = parse_target_(&req("GET", &query(64, "p0=w"), "127.0.0.1")).unwrap_err();
        assert!(dup.details.iter().any(|(_, v)| v.contains("only once")), "{dup:?}");
        let many = parse_target_(&req("GET", &query(65, "z=1"), "127.0.0.1")).unwrap_err();
        assert!(many.details.iter().any(|(_, v)| v.contains("too many")), "{many:?}");
        // Empty pieces are not parameters.
        assert!(parse_target_(&req("GET", &format!("{}&&&", query(64, "z=1")), "127.0.0.1")).is_ok());
    }

    #[test]
    fn duplicates_are_whole_names_after_lower_casing() {
        let t = |q: &str| parse_target_(&req("GET", &format!("/a/q?{q}"), "127.0.0.1"));
        assert!(
            t("numofmessages=1&numofmessagez=2").is_ok(),
            "same first seven bytes and length, other name"
        );
        assert!(t("abcdefgh=1&abcdefgi=2").is_ok());
        assert!(
            t("numofmessages=1&NumOfMessages=2").is_err(),
            "same name after lower-casing"
        );
        let nul = t("a=1&a%00=2").unwrap_err();
        assert!(
            nul.details.iter().any(|(_, v)| v.contains("control")),
            "not a duplicate: {nul:?}"
        );
        assert!(t("se=1&st=2&sv=3&ss=4&sp=5").is_ok());
        assert!(t("se=1&st=2&sv=3&ss=4&st=5").is_err());
    }

    const PIECES: [&str; 28] = [
        "a",
        "Q",
        "/",
        ".",
        "..",
        "%",
        "%2F",
        "%2f",
        "%41",
        "%0a",
        "%zz",
        "+",
        "&",
        "=",
        ":",
        "messages",
        "\u{e9}",
        "\u{85}",
        "\u{1}",
        "devstoreaccount1",
        "-secondary",
        "%3A",
        "%e2%82",
        " ",
        "%C3%A9",
        "comp",
        "sig",
        "%2B",
    ];

    #[test]
    fn form_decoding_matches_the_reference_on_every_short_mix() {
        // Every string of up to four pieces drawn from escapes good and bad,
        // pluses, multi-byte text and split UTF-8 sequences.
        let pieces = [
            "", "a", "+", "%", "%2", "%2B", "%2b", "%zz", "%e2%82", "%AC", "\u{e9}", "%00", "%ff", "Z",
        ];
        let mut n = 0;
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    for d in pieces {
                        let s = format!("{a}{b}{c}{d}");
                        let ours = form_decode(&s).ok().map(|c| c.into_owned());
                        assert_eq!(ours, form_decode_reference(&s), "{s:?}");
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(n, 14usize.pow(4));
        assert!(matches!(form_decode("plain"), Ok(Cow::Borrowed("plain"))));
    }

    #[test]
    fn ascii_splits_match_str_splits() {
        for s in [
            "",
            "&",
            "a",
            "a&b",
            "&&a=1&",
            "x=1=2&y",
            "\u{e9}=\u{20ac}&z",
            "a&",
            "=&=",
        ] {
            assert_eq!(
                split_ascii(s, b'&').collect::<Vec<_>>(),
                s.split('&').collect::<Vec<_>>(),
                "{s:?}"
            );
            assert_eq!(split_once_ascii(s, b'='), s.split_once('='), "{s:?}");
        }
    }

    #[test]
    fn control_characters_are_found_in_ascii_and_beyond() {
        for (s, colon, want) in [
            ("abc", true, false),
            ("a:b", true, true),
            ("a:b", false, false),
            ("a\u{7f}", false, true),
            ("a\u{1f}", false, true),
            ("caf\u{e9}", false, false),
            ("x\u{85}", false, true),
            ("\u{e9}:", true, true),
            ("~ !", false, false),
        ] {
            assert_eq!(has_control(s, colon), want, "{s:?}");
            assert_eq!(
                has_control(s, colon),
                s.chars().any(|c| c.is_control() || (colon && c == ':'))
            );
        }
    }

    #[test]
    fn host_style_accounts_compare_case_blind_and_need_the_whole_suffix() {
        let a = Addressing::default();
        assert_eq!(a.host_account("Acct1.Queue.LOCALHOST:10001").as_deref(), Some("acct1"));
        assert_eq!(a.host_account("acct1.queue.localhost").as_deref(), Some("acct1"));
        for path_style in [
            "127.0.0.1:10001",
            "localhost",
            ".queue.localhost",
            "a.b.queue.localhost",
            "acct1.queue.localhost.evil",
        ] {
            assert_eq!(a.host_account(path_style), None, "{path_style}");
        }
    }

    #[test]
    fn path_and_host_style_addressing() {
        let t = parse_target_(&req(
            "GET",
            "/devstoreaccount1/q1/messages/abc?peekonly=true&A=%2B+x",
            "127.0.0.1:10001",
        ))
        .unwrap();
        assert_eq!(t.account, "devstoreaccount1");
        assert_eq!(t.queue.as_deref(), Some("q1"));
        assert!(t.messages);
        assert_eq!(t.message_id.as_deref(), Some("abc"));
        assert_eq!(t.param("a"), Some("+ x"));
        let t = parse_target_(&req("GET", "/?comp=list", "account1.queue.localhost:10001")).unwrap();
        assert_eq!((t.account.as_str(), t.queue.as_ref()), ("account1", None));
        let t = parse_target_(&req(
            "GET",
            "/devstoreaccount1-secondary/?restype=service&comp=stats",
            "localhost:10001",
        ))
        .unwrap();
        assert!(t.secondary);
        for bad in [
            "/a/q/notmessages",
            "/a/q/messages/id/extra",
            "/a/../x",
            "/a/%zz",
            "/a/q?x=%g1",
        ] {
            assert!(parse_target_(&req("GET", bad, "127.0.0.1")).is_err(), "{bad}");
        }
    }
}
