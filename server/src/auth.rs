//! Authentication and authorization (Microsoft's "Authorize with Shared Key", "Create a service SAS", "Create an account SAS"): Shared Key,
//! Shared Key Lite, service SAS (with stored access policies) and account
//! SAS. Runs on the core that accepted the connection; no request is served
//! on a signature that does not verify.
// Input from the network flows through here: no unchecked arithmetic,
// indexing or panicking unwraps (docs/SECURITY.md).
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::string_slice
)]

use crate::addressing::{AccountSasGrant, SignatureMemo, Target};
use crate::error::ApiError;
use crate::http::Request;
use crate::ops::{Needs, SasRule};
use crate::xmlio::parse_iso8601;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use engine::model::SignedIdentifier;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::SystemTime;
use time::OffsetDateTime;

type HmacSha256 = Hmac<Sha256>;

/// The configured accounts by name, looked up once per request. A seeded
/// fast hash: std's SipHash of the name was about 300 instructions of
/// every request (docs/benchmarks.md), and the map is fixed at startup, so
/// no request can insert into it.
pub type Accounts = foldhash::HashMap<String, Account>;

/// An account and its (one or two) decoded keys.
#[derive(Debug, Clone)]
pub struct Account {
    pub name: String,
    pub keys: Vec<Vec<u8>>,
}

/// Who the request proved to be.
#[derive(Debug, Clone, PartialEq, Eq)]
/// Borrows the SAS fields from the request where it can (`'t`): copying
/// them cost three allocations per request.
pub enum Principal<'t> {
    /// Shared Key or Shared Key Lite: the account owner.
    Owner,
    /// A service SAS for one queue, with its effective permissions (the
    /// stored policy's, owned, when the SAS names one).
    ServiceSas { permissions: Cow<'t, str> },
    /// An account SAS.
    AccountSas {
        services: &'t str,
        resource_types: &'t str,
        permissions: &'t str,
    },
}

fn sign(key: &[u8], msg: &str) -> HmacSha256 {
    sign_parts(key, &[msg])
}

/// The HMAC of `parts` one after another, as of their concatenation.
// HMAC takes keys of any length (longer ones are hashed first, RFC 2104
// section 2), so this cannot fail; the API is fallible only for MACs with fixed
// key sizes.
#[allow(clippy::expect_used)]
fn sign_parts(key: &[u8], parts: &[&str]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    for p in parts {
        mac.update(p.as_bytes());
    }
    mac
}

/// Base64 HMAC-SHA256 of `msg` under `key` (what clients put in signatures).
pub fn signature(key: &[u8], msg: &str) -> String {
    STANDARD.encode(sign(key, msg).finalize().into_bytes())
}

/// Constant-time check of a base64 signature against every key.
fn verifies(keys: &[Vec<u8>], msg: &str, sig: &str) -> bool {
    let Ok(sig) = STANDARD.decode(sig) else { return false };
    verifies_decoded(keys, msg, &sig)
}

/// [`verifies`] for a signature already decoded.
fn verifies_decoded(keys: &[Vec<u8>], msg: &str, sig: &[u8]) -> bool {
    keys.iter().any(|k| sign(k, msg).verify_slice(sig).is_ok())
}

/// [`sas_verifies_lines`] for a string to sign given whole.
#[cfg(test)]
fn sas_verifies(keys: &[Vec<u8>], msg: &str, sig: &str) -> bool {
    sas_verifies_lines(
        keys,
        &Lines {
            lines: &[msg],
            trailing: false,
        },
        sig,
    )
}

/// A string to sign as its lines: joined by newlines, with one after the
/// last when `trailing` (and there is a last). A remembered string is
/// compared with it without building it (the build and its copies were
/// most of a remembered SAS's cost).
struct Lines<'a> {
    lines: &'a [&'a str],
    trailing: bool,
}

impl Lines<'_> {
    fn len(&self) -> usize {
        let newlines = match self.lines.len() {
            0 => 0,
            n => n.saturating_sub(usize::from(!self.trailing)),
        };
        self.lines.iter().fold(newlines, |n, l| n.saturating_add(l.len()))
    }

    fn build(&self) -> String {
        let mut s = String::with_capacity(self.len());
        for (i, l) in self.lines.iter().enumerate() {
            if i > 0 {
                s.push('\n');
            }
            s.push_str(l);
        }
        if self.trailing && !self.lines.is_empty() {
            s.push('\n');
        }
        s
    }

    /// Whether `text` is what [`Lines::build`] would make.
    fn matches(&self, text: &str) -> bool {
        let mut rest = text.as_bytes();
        for (i, l) in self.lines.iter().enumerate() {
            if i > 0 {
                let Some(after) = rest.strip_prefix(b"\n") else {
                    return false;
                };
                rest = after;
            }
            let Some(after) = rest.strip_prefix(l.as_bytes()) else {
                return false;
            };
            rest = after;
        }
        rest == if self.trailing && !self.lines.is_empty() {
            &b"\n"[..]
        } else {
            &b""[..]
        }
    }
}

/// [`verifies`] for a SAS, remembering what verified. A client holding a
/// SAS URL sends the same signature with every request, and its HMAC was a
/// tenth of a metadata request's CPU. Exact: the entry holds every input of
/// the check (the keys, the signature and the string to sign), so only a
/// request that would verify finds one; only successes are kept, so
/// unsigned traffic cannot fill it. The time window and the permissions are
/// still checked on every request by the caller. One per core.
fn sas_verifies_lines(keys: &[Vec<u8>], sts: &Lines<'_>, sig: &str) -> bool {
    /// The keys and the string to sign each remembered signature verified.
    // A seeded fast hash: only signatures that verified are inserted, so no
    // request can choose what collides, and SipHash of the signature was
    // about 300 instructions of every SAS request.
    type Verified = foldhash::HashMap<Vec<u8>, (Vec<Vec<u8>>, String)>;
    thread_local! {
        /// Keyed by the signature alone, which is a tenth of the entry:
        /// hashing the whole entry cost more than the rest of the lookup.
        /// The entry is then compared whole.
        static VERIFIED: std::cell::RefCell<Verified> = std::cell::RefCell::new(Default::default());
    }
    VERIFIED.with_borrow_mut(|seen| {
        if seen
            .get(sig.as_bytes())
            .is_some_and(|(k, msg)| k.as_slice() == keys && sts.matches(msg))
        {
            return true;
        }
        let msg = sts.build();
        if !verifies(keys, &msg, sig) {
            return false;
        }
        // Counted as before the entries were split: 8 bytes per part plus its length.
        let entry_bytes = keys
            .iter()
            .map(Vec::len)
            .chain([sig.len(), msg.len()])
            .fold(0usize, |n, l| n.saturating_add(8).saturating_add(l));
        if entry_bytes <= crate::limits::MAX_CACHED_SAS_ENTRY_BYTES {
            if seen.len() >= crate::limits::MAX_CACHED_SAS_SIGNATURES {
                seen.clear();
            }
            // A signature verified under other keys or for another string
            // (a key rotated) replaces the entry before it.
            seen.insert(sig.as_bytes().to_vec(), (keys.to_vec(), msg));
        }
        true
    })
}

/// Sort key emulating the service's culture-aware header order: symbols
/// ignored, case-blind, `_` before digits before letters ("Authorize with Shared Key", constructing the canonicalized headers string).
fn culture_key(name: &str) -> Vec<u8> {
    name.bytes()
        .filter_map(|b| match b {
            b'_' => Some(0),
            // In range by the match arm: at most 36.
            b'0'..=b'9' => Some(b.wrapping_sub(b'0').wrapping_add(1)),
            b'a'..=b'z' => Some(b.wrapping_sub(b'a').wrapping_add(11)),
            b'A'..=b'Z' => Some(b.wrapping_sub(b'A').wrapping_add(11)),
            _ => None,
        })
        .collect()
}

/// One `x-ms-*` header as signed: its name lower-cased, its value
/// normalized ([`ms_headers`]).
type MsHeader<'r> = (Cow<'r, str>, Cow<'r, str>);

/// `x-ms-*` headers, names lower-cased, values with their runs of spaces
/// and tabs made one space and trimmed, repeated names joined with `,`, in
/// the order they came. Borrowed from the request where nothing changes,
/// which is every header the SDKs send: lower-casing every header's name
/// and joining every value's words made about ten allocations a request
/// (the SDKs' headers have single spaces and lower-case names).
fn ms_headers(req: &Request) -> Vec<MsHeader<'_>> {
    let mut out: Vec<MsHeader<'_>> = Vec::new();
    for (n, v) in &req.headers {
        if !n.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("x-ms-")) {
            continue;
        }
        let n: Cow<'_, str> = if n.bytes().any(|b| b.is_ascii_uppercase()) {
            n.to_ascii_lowercase().into()
        } else {
            n.into()
        };
        let v = collapse_blanks(v);
        match out.iter_mut().find(|(o, _)| *o == n) {
            Some((_, existing)) => {
                let joined = existing.to_mut();
                joined.push(',');
                joined.push_str(&v);
            }
            None => out.push((n, v)),
        }
    }
    out
}

/// "Authorize with Shared Key": runs of spaces and tabs become one space,
/// and none is left at either end. Other Unicode spaces are data: they
/// must change the signature, since they change what is stored.
fn collapse_blanks(v: &str) -> Cow<'_, str> {
    let b = v.as_bytes();
    let unchanged =
        !b.contains(&b'\t') && !b.windows(2).any(|w| w == b"  ") && !v.starts_with(' ') && !v.ends_with(' ');
    if unchanged {
        return v.into();
    }
    v.split([' ', '\t'])
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .into()
}

/// The canonicalized headers, in byte order of their names, or in the
/// service's culture-aware order ([`culture_key`], computed once per
/// header rather than twice per comparison).
fn canonical_headers(h: &[MsHeader<'_>], culture: bool) -> String {
    let mut sorted: Vec<(Vec<u8>, &MsHeader<'_>)> = h
        .iter()
        .map(|e| (if culture { culture_key(&e.0) } else { Vec::new() }, e))
        .collect();
    // Names are unique (repeats were joined), so the order is total.
    sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1 .0.cmp(&b.1 .0)));
    let mut s = String::with_capacity(
        h.iter()
            .map(|(n, v)| n.len().saturating_add(v.len()).saturating_add(2))
            .sum(),
    );
    for (_, (n, v)) in sorted {
        s.push_str(n);
        s.push(':');
        s.push_str(v);
        s.push('\n');
    }
    s
}

fn canonical_resource(account: &str, t: &Target<'_>) -> String {
    let path = if t.raw_path.is_empty() { "/" } else { &t.raw_path };
    let mut s = String::with_capacity(account.len().saturating_add(path.len()).saturating_add(64));
    s.push('/');
    s.push_str(account);
    s.push_str(path);
    let mut names: Vec<&str> = t.query.iter().map(|(n, _)| n.as_ref()).collect();
    names.sort_unstable();
    names.dedup();
    for n in names {
        let mut vals: Vec<&str> = t
            .query
            .iter()
            .filter(|(q, _)| q == n)
            .map(|(_, v)| v.as_ref())
            .collect();
        vals.sort_unstable();
        s.push('\n');
        s.push_str(n);
        s.push(':');
        for (i, v) in vals.into_iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(v);
        }
    }
    s
}

/// One request's Shared Key strings to sign, in parts ("Authorize with
/// Shared Key"). The strings worth trying differ only in the date line
/// (empty, or the `Date` header) and in the headers' order (byte or
/// culture-aware), so every other part is built once, and each candidate
/// goes to the HMAC part by part instead of being assembled: the old code
/// formatted every candidate up front, with an allocation per header
/// lookup and two per sort comparison.
struct SharedKeyParts<'r> {
    /// The verb through Content-Type, each line with its `\n`.
    before_date: String,
    /// The date lines worth trying, most likely first.
    dates: [Option<&'r str>; 2],
    /// `\n` after the date, then If-Modified-Since through Range.
    after_date: String,
    ms: Vec<MsHeader<'r>>,
    resource: String,
}

impl<'r> SharedKeyParts<'r> {
    fn new(req: &'r Request, account: &str, t: &Target<'_>) -> Self {
        let h = |n: &str| req.header(n).unwrap_or("");
        let mut before_date = String::with_capacity(64);
        before_date.push_str(&req.method);
        before_date.push('\n');
        for n in ["content-encoding", "content-language"] {
            before_date.push_str(h(n));
            before_date.push('\n');
        }
        // The body's real length, not the header: a chunked body has no
        // Content-Length, and signing "" for it would let a captured
        // request carry any body. (For Content-Length framing the two are
        // equal.)
        if !req.body.is_empty() {
            // Writing to a String cannot fail.
            let _ = write!(before_date, "{}", req.body.len());
        }
        before_date.push('\n');
        for n in ["content-md5", "content-type"] {
            before_date.push_str(h(n));
            before_date.push('\n');
        }
        // An empty Date beside x-ms-date makes the same string twice: it
        // is tried once.
        let dates = match (req.header("x-ms-date").is_some(), req.header("date")) {
            (true, Some(date)) if !date.is_empty() => [Some(""), Some(date)],
            (true, _) => [Some(""), None],
            (false, date) => [Some(date.unwrap_or("")), None],
        };
        let mut after_date = String::with_capacity(16);
        after_date.push('\n');
        for n in [
            "if-modified-since",
            "if-match",
            "if-none-match",
            "if-unmodified-since",
            "range",
        ] {
            after_date.push_str(h(n));
            after_date.push('\n');
        }
        SharedKeyParts {
            before_date,
            dates,
            after_date,
            ms: ms_headers(req),
            resource: canonical_resource(account, t),
        }
    }

    /// The parts of the candidate with `date` and `headers`, in order.
    fn pieces<'a>(&'a self, date: &'a str, headers: &'a str) -> [&'a str; 5] {
        [&self.before_date, date, &self.after_date, headers, &self.resource]
    }

    /// Whether some candidate verifies `sig` under one of `keys`, trying
    /// them most likely first: the byte-ordered headers with each date
    /// line, then, only if those fail and the order differs, the
    /// culture-aware one. A refused request tries every distinct
    /// candidate, at most four per key, as before.
    fn any_verifies(&self, keys: &[Vec<u8>], sig: &[u8]) -> bool {
        let with_headers = |headers: &str| {
            self.dates.iter().flatten().any(|date| {
                keys.iter()
                    .any(|k| sign_parts(k, &self.pieces(date, headers)).verify_slice(sig).is_ok())
            })
        };
        let bytewise = canonical_headers(&self.ms, false);
        if with_headers(&bytewise) {
            return true;
        }
        let culture = canonical_headers(&self.ms, true);
        culture != bytewise && with_headers(&culture)
    }

    /// The most likely candidate, assembled: what a refusal shows.
    fn first(&self) -> String {
        let date = self.dates.iter().flatten().next().copied().unwrap_or_default();
        self.pieces(date, &canonical_headers(&self.ms, false)).concat()
    }

    /// Every distinct candidate, assembled, in the order `any_verifies`
    /// tries them.
    fn strings(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for culture in [false, true] {
            let headers = canonical_headers(&self.ms, culture);
            for date in self.dates.iter().flatten() {
                let s = self.pieces(date, &headers).concat();
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        out
    }
}

/// The Shared Key strings-to-sign worth trying, most likely first ("Authorize with Shared Key":
/// byte versus culture header order; Date line empty or not).
pub fn shared_key_strings(req: &Request, account: &str, t: &Target<'_>) -> Vec<String> {
    SharedKeyParts::new(req, account, t).strings()
}

fn shared_key_lite_string(req: &Request, account: &str, t: &Target<'_>) -> String {
    let h = |n: &str| req.header(n).unwrap_or("");
    let date = if req.header("x-ms-date").is_some() {
        ""
    } else {
        h("date")
    };
    let mut s = String::with_capacity(256);
    for line in [req.method.as_str(), h("content-md5"), h("content-type"), date] {
        s.push_str(line);
        s.push('\n');
    }
    s.push_str(&canonical_headers(&ms_headers(req), false));
    s.push('/');
    s.push_str(account);
    s.push_str(if t.raw_path.is_empty() { "/" } else { &t.raw_path });
    if let Some(c) = t.param("comp") {
        s.push_str("?comp=");
        s.push_str(c);
    }
    s
}

fn check_date(req: &Request, now: SystemTime) -> Result<(), ApiError> {
    let raw = req.header("x-ms-date").or_else(|| req.header("date")).ok_or_else(|| {
        ApiError::auth_failed("Request date header not specified (x-ms-date or Date is required with Shared Key).")
    })?;
    let t = httpdate::parse_http_date(raw)
        .map_err(|_| ApiError::auth_failed(format!("Request date header '{raw}' is not a valid RFC 1123 date.")))?;
    let skew = crate::limits::MAX_CLOCK_SKEW;
    if t.checked_add(skew).is_none_or(|latest| latest < now) {
        return Err(ApiError::auth_failed(format!("Request date header too old: '{raw}'")));
    }
    if now.checked_add(skew).is_none_or(|limit| t > limit) {
        return Err(ApiError::auth_failed(format!(
            "Request date header too far in the future: '{raw}'"
        )));
    }
    Ok(())
}

/// The parts of an `Authorization` header.
pub enum Scheme<'a> {
    SharedKey(&'a str, &'a str),
    SharedKeyLite(&'a str, &'a str),
    Bearer,
}

pub fn parse_authorization(v: &str) -> Result<Scheme<'_>, ApiError> {
    let malformed = || {
        ApiError::new(
            400,
            "InvalidAuthenticationInfo",
            "Authentication information is not given in the correct format. Check the value of Authorization header.",
        )
    };
    let (scheme, rest) = v.split_once(' ').ok_or_else(malformed)?;
    match scheme {
        "Bearer" => Ok(Scheme::Bearer),
        "SharedKey" | "SharedKeyLite" => {
            let (acct, sig) = rest.trim().rsplit_once(':').ok_or_else(malformed)?;
            if acct.is_empty() || sig.is_empty() {
                return Err(malformed());
            }
            Ok(if scheme == "SharedKey" {
                Scheme::SharedKey(acct, sig)
            } else {
                Scheme::SharedKeyLite(acct, sig)
            })
        }
        _ => Err(malformed()),
    }
}

/// Verifies an `Authorization` header.
pub fn shared_key(
    req: &Request,
    account: &Account,
    t: &Target<'_>,
    now: SystemTime,
) -> Result<Principal<'static>, ApiError> {
    let header = req
        .header("authorization")
        .ok_or_else(|| ApiError::auth_failed("No Authorization header."))?;
    let (lite, acct, sig) = match parse_authorization(header)? {
        Scheme::Bearer => return Err(ApiError::auth_failed("Authentication scheme Bearer is not supported.")),
        Scheme::SharedKey(a, s) => (false, a, s),
        Scheme::SharedKeyLite(a, s) => (true, a, s),
    };
    if acct != account.name {
        return Err(ApiError::auth_failed(format!(
            "The account '{acct}' in the Authorization header does not match the request's account '{}'.",
            account.name
        )));
    }
    check_date(req, now)?;
    let decoded = STANDARD.decode(sig).ok();
    let first = if lite {
        let sts = shared_key_lite_string(req, acct, t);
        if decoded.is_some_and(|d| verifies_decoded(&account.keys, &sts, &d)) {
            return Ok(Principal::Owner);
        }
        sts
    } else {
        let parts = SharedKeyParts::new(req, acct, t);
        if decoded.is_some_and(|d| parts.any_verifies(&account.keys, &d)) {
            return Ok(Principal::Owner);
        }
        // Only a refused request pays for the string in the message.
        parts.first()
    };
    Err(ApiError::auth_failed(format!(
        "The MAC signature found in the HTTP request '{sig}' is not the same as any computed signature. Server used following string to sign: '{first}'."
    )))
}

/// SAS fields from the query (decoded), borrowed from the request's [`Target`].
#[derive(Debug, Default, Clone)]
pub struct Sas<'t> {
    pub sv: Option<&'t str>,
    pub ss: Option<&'t str>,
    pub srt: Option<&'t str>,
    pub sp: Option<&'t str>,
    pub st: Option<&'t str>,
    pub se: Option<&'t str>,
    pub sip: Option<&'t str>,
    pub spr: Option<&'t str>,
    pub si: Option<&'t str>,
    pub ses: Option<&'t str>,
    pub sig: Option<&'t str>,
    pub skoid: Option<&'t str>,
    /// The memo of the target these fields came from: the signature check
    /// is skipped once it has passed for that target (see
    /// [`SignatureMemo`]). Private, so that only [`Sas::from_target`] sets
    /// it and no `Sas { .., ..from_target }` elsewhere carries it over to
    /// other fields; `None` for fields put together any other way. With
    /// it, [`verify_service_sas`] must be given that target's queue (the
    /// handler's only call does), and the fields must not be changed.
    memo: Option<&'t SignatureMemo>,
}

impl<'t> Sas<'t> {
    pub fn from_target(t: &'t Target<'_>) -> Option<Sas<'t>> {
        // One pass over the query (a name appears at most once: parse_target
        // refuses repeats).
        let mut sas = Sas::default();
        for (name, value) in &t.query {
            let slot = match name.as_ref() {
                "sv" => &mut sas.sv,
                "ss" => &mut sas.ss,
                "srt" => &mut sas.srt,
                "sp" => &mut sas.sp,
                "st" => &mut sas.st,
                "se" => &mut sas.se,
                "sip" => &mut sas.sip,
                "spr" => &mut sas.spr,
                "si" => &mut sas.si,
                "ses" => &mut sas.ses,
                "sig" => &mut sas.sig,
                "skoid" => &mut sas.skoid,
                _ => continue,
            };
            *slot = Some(value.as_ref());
        }
        sas.memo = Some(&t.signature);
        sas.sig.is_some().then_some(sas)
    }

    /// [`sas_verifies_lines`], unless this SAS's target has verified
    /// before (its memo is set), and the memo set when it verifies.
    fn signature_holds(&self, keys: &[Vec<u8>], sts: &Lines<'_>) -> bool {
        if self.memo.is_some_and(SignatureMemo::verified) {
            debug_assert!(
                sas_verifies_lines(keys, sts, opt(&self.sig)),
                "a remembered signature fails"
            );
            return true;
        }
        let holds = sas_verifies_lines(keys, sts, opt(&self.sig));
        if let (true, Some(memo)) = (holds, self.memo) {
            memo.set_verified();
        }
        holds
    }
}

fn opt<'a>(s: &Option<&'a str>) -> &'a str {
    s.unwrap_or("")
}

fn in_ip_range(range: &str, peer: IpAddr) -> bool {
    let parse = |s: &str| s.trim().parse::<IpAddr>().ok();
    match range.split_once('-') {
        Some((a, b)) => match (parse(a), parse(b)) {
            (Some(a), Some(b)) => a <= peer && peer <= b,
            _ => false,
        },
        None => parse(range) == Some(peer),
    }
}

/// [`parse_iso8601`] of a SAS's `st` or `se`, remembered: a client sends
/// the same one or two with every request it signs with that SAS (an SDK's
/// SAS URL is fixed), and the RFC 3339 parse was about 500 instructions a
/// request. Each core keeps the last few texts it parsed, with their
/// answers, failures included; the answer depends on the text alone.
fn sas_time(text: &str) -> Option<OffsetDateTime> {
    const SLOTS: usize = 4;
    // Longer texts are parsed every time (a valid one is at most 28 bytes).
    const MAX_KEPT_LEN: usize = 64;
    struct Seen {
        slots: [(String, Option<OffsetDateTime>); SLOTS],
        /// The slot the next miss overwrites (round robin).
        victim: usize,
    }
    thread_local! {
        // Owned by this core. An empty text's parse is `None`, as kept.
        static SEEN: std::cell::RefCell<Seen> = const {
            std::cell::RefCell::new(Seen { slots: [const { (String::new(), None) }; SLOTS], victim: 0 })
        };
    }
    if text.len() > MAX_KEPT_LEN {
        return parse_iso8601(text);
    }
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        if let Some((_, parsed)) = seen.slots.iter().find(|(kept, _)| kept == text) {
            debug_assert_eq!(*parsed, parse_iso8601(text), "a kept SAS time answers as a parse");
            return *parsed;
        }
        let parsed = parse_iso8601(text);
        let victim = seen.victim % SLOTS;
        seen.victim = victim.wrapping_add(1) % SLOTS;
        if let Some(slot) = seen.slots.get_mut(victim) {
            slot.0.clear();
            slot.0.push_str(text);
            slot.1 = parsed;
        }
        parsed
    })
}

/// The SAS's window, `st` (if sent) and `se`, as nanoseconds since the
/// epoch, once `now` is inside it ([`window_holds`]).
fn check_window(st: Option<&str>, se: &str, now: SystemTime) -> Result<(Option<i128>, i128), ApiError> {
    let bad = |what: &str| ApiError::auth_failed(format!("{what} is not a valid ISO 8601 time."));
    let expiry = sas_time(se).ok_or_else(|| bad("se"))?.unix_timestamp_nanos();
    let start = match st {
        Some(s) if !s.is_empty() => Some(sas_time(s).ok_or_else(|| bad("st"))?.unix_timestamp_nanos()),
        _ => None,
    };
    if !window_holds(start, expiry, unix_nanos(now)) {
        return Err(ApiError::auth_failed(format!(
            "Signature not valid in the specified time frame: Start [{}] - Expiry [{se}] - Current [{}]",
            st.unwrap_or(""),
            crate::xmlio::iso8601_7(OffsetDateTime::from(now))
        )));
    }
    Ok((start, expiry))
}

/// A SAS's window rule, in nanoseconds since the epoch: started (with a
/// little skew on the start, as the service allows) and not yet expired.
/// The one rule for the whole check and for a remembered grant.
fn window_holds(start_ns: Option<i128>, expiry_ns: i128, now_ns: i128) -> bool {
    let skew_ns = i128::from(crate::limits::SAS_START_SKEW_SECS).saturating_mul(1_000_000_000);
    let started = start_ns.is_none_or(|s| s <= now_ns.saturating_add(skew_ns));
    started && now_ns < expiry_ns
}

/// `t` as nanoseconds since the epoch, negative before it. Any
/// `Duration`'s nanoseconds fit an `i128`; the bounds are never reached.
fn unix_nanos(t: SystemTime) -> i128 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
        Err(before) => i128::try_from(before.duration().as_nanos()).map_or(i128::MIN, |n| n.saturating_neg()),
    }
}

/// Whether a remembered grant still admits a request at `now`.
fn grant_admits(grant: &AccountSasGrant, now: SystemTime) -> bool {
    window_holds(grant.start_ns, grant.expiry_ns, unix_nanos(now))
}

/// Who sent a request, as a SAS's `sip` and `spr` judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub ip: IpAddr,
    /// The request came over TLS (the server runs with `--cert`).
    pub https: bool,
}

fn common_sas_checks(sas: &Sas<'_>, caller: Caller) -> Result<(), ApiError> {
    if let Some(sip) = &sas.sip {
        if !sip.is_empty() && !in_ip_range(sip, caller.ip) {
            return Err(Denied::SourceIpMismatch.into());
        }
    }
    // `spr` is `https` or `https,http` ("Create a service SAS"): a plain
    // HTTP request needs the second.
    if let Some(spr) = &sas.spr {
        let scheme = if caller.https { "https" } else { "http" };
        if !spr.split(',').any(|p| p.trim() == scheme) {
            return Err(Denied::ProtocolMismatch.into());
        }
    }
    Ok(())
}

/// Permission letters a service SAS for a queue may carry (Microsoft's
/// "Create a service SAS": read, add, update, process), the same set a
/// stored access policy may hold.
const SERVICE_SAS_LETTERS: &str = engine::limits::ACL_PERMISSION_LETTERS;
/// Permission letters an account SAS may carry (Microsoft's "Create an
/// account SAS"); letters for other services are allowed but grant nothing here.
const ACCOUNT_SAS_LETTERS: &str = "rwdxylacuptfi";

/// Refuses an `sp` with a letter outside `allowed` or any letter twice, as
/// the service does ("Signature fields not well formed"): a permission
/// string has one meaning only.
fn check_permissions(sp: &str, allowed: &str) -> Result<(), ApiError> {
    // `allowed` is ASCII letters, so any other byte (a UTF-8 sequence's
    // included) is refused before it can index the seen-set.
    let mut seen = 0u128;
    for b in sp.bytes() {
        let bit = 1u128.checked_shl(u32::from(b)).unwrap_or(0);
        if !allowed.as_bytes().contains(&b) || bit == 0 || seen & bit != 0 {
            return Err(ApiError::auth_failed(format!(
                "Signature fields not well formed: sp '{sp}' may contain each of '{allowed}' at most once."
            )));
        }
        seen |= bit;
    }
    Ok(())
}

/// Verifies an account SAS ("Create an account SAS"). Authorization happens in [`authorize`].
pub fn account_sas<'t>(
    sas: &Sas<'t>,
    account: &Account,
    now: SystemTime,
    caller: Caller,
) -> Result<Principal<'t>, ApiError> {
    // Checked in full once for this target and caller: only the clock is
    // left to compare (see `SignatureMemo`).
    if let (Some(grant), Some(sp)) = (sas.memo.and_then(SignatureMemo::account_grant), sas.sp) {
        if grant.caller == caller && grant_admits(&grant, now) {
            debug_assert!(
                account_sas_in_full(sas, account, now, caller).is_ok(),
                "a remembered account SAS grant is refused in full"
            );
            return Ok(Principal::AccountSas {
                services: opt(&sas.ss),
                resource_types: opt(&sas.srt),
                permissions: sp,
            });
        }
    }
    account_sas_in_full(sas, account, now, caller)
}

fn account_sas_in_full<'t>(
    sas: &Sas<'t>,
    account: &Account,
    now: SystemTime,
    caller: Caller,
) -> Result<Principal<'t>, ApiError> {
    let sv = sas
        .sv
        .ok_or_else(|| ApiError::auth_failed("sv is mandatory. Cannot be empty"))?;
    let se = sas
        .se
        .ok_or_else(|| ApiError::auth_failed("se is mandatory. Cannot be empty"))?;
    let sp = sas
        .sp
        .ok_or_else(|| ApiError::auth_failed("sp is mandatory. Cannot be empty"))?;
    check_permissions(sp, ACCOUNT_SAS_LETTERS)?;
    let fields = [
        account.name.as_str(),
        sp,
        opt(&sas.ss),
        opt(&sas.srt),
        opt(&sas.st),
        se,
        opt(&sas.sip),
        opt(&sas.spr),
        sv,
        opt(&sas.ses),
    ];
    // The encryption scope line, the last, exists from version 2020-12-06 on.
    let signed = match fields.split_last() {
        Some((_, before_ses)) if sv < "2020-12-06" => before_ses,
        _ => fields.as_slice(),
    };
    let sts = Lines {
        lines: signed,
        trailing: true,
    };
    if !sas.signature_holds(&account.keys, &sts) {
        return Err(ApiError::auth_failed(format!(
            "Signature did not match. String to sign used was {}",
            sts.build()
        )));
    }
    let (start_ns, expiry_ns) = check_window(sas.st, se, now)?;
    common_sas_checks(sas, caller)?;
    // `signature_holds` set the memo's `verified` above, which the grant
    // stands on (`set_account_grant` keeps none otherwise).
    if let Some(memo) = sas.memo {
        memo.set_account_grant(AccountSasGrant {
            caller,
            start_ns,
            expiry_ns,
        });
    }
    Ok(Principal::AccountSas {
        services: opt(&sas.ss),
        resource_types: opt(&sas.srt),
        permissions: sp,
    })
}

/// Verifies a service SAS's signature for `queue` ("Create a service SAS"). Runs before the
/// stored policy is fetched: an unsigned request must not cost a trip to
/// another core.
pub fn verify_service_sas(sas: &Sas<'_>, account: &Account, queue: &str) -> Result<(), ApiError> {
    let sv = sas
        .sv
        .ok_or_else(|| ApiError::auth_failed("sv is mandatory. Cannot be empty"))?;
    let resource = ["/queue/", account.name.as_str(), "/", queue].concat();
    let sts = Lines {
        lines: &[
            opt(&sas.sp),
            opt(&sas.st),
            opt(&sas.se),
            &resource,
            opt(&sas.si),
            opt(&sas.sip),
            opt(&sas.spr),
            sv,
        ],
        // The service string to sign has no newline after its last field.
        trailing: false,
    };
    if let Some(sp) = &sas.sp {
        check_permissions(sp, SERVICE_SAS_LETTERS)?;
    }
    if !sas.signature_holds(&account.keys, &sts) {
        return Err(ApiError::auth_failed(format!(
            "Signature did not match. String to sign used was {}",
            sts.build()
        )));
    }
    Ok(())
}

/// What a verified service SAS grants ("Define a stored access policy"): its fields merged with the
/// stored policy named by `si`, which the caller looked up on the queue's
/// core after [`verify_service_sas`] passed.
pub fn service_sas_grant<'t>(
    sas: &Sas<'t>,
    policy: Option<&SignedIdentifier>,
    now: SystemTime,
    caller: Caller,
) -> Result<Principal<'t>, ApiError> {
    // Merge with the stored policy: each field from exactly one side.
    let (mut sp, mut st, mut se) = (
        sas.sp.map(Cow::Borrowed),
        sas.st.map(Cow::Borrowed),
        sas.se.map(Cow::Borrowed),
    );
    if let Some(id) = &sas.si {
        let p = policy.ok_or_else(|| {
            ApiError::auth_failed(format!(
                "The signed identifier '{id}' does not match any stored access policy."
            ))
        })?;
        for (mine, theirs, name) in [
            (&mut sp, &p.permission, "sp"),
            (&mut st, &p.start, "st"),
            (&mut se, &p.expiry, "se"),
        ] {
            match (mine.is_some(), theirs) {
                (true, Some(_)) => {
                    return Err(ApiError::new(
                        400,
                        "InvalidQueryParameterValue",
                        "Value for one of the query parameters specified in the request URI is invalid.",
                    )
                    .detail("QueryParameterName", name)
                    .detail(
                        "Reason",
                        "The field is given both by the SAS and by its stored access policy.",
                    ))
                }
                (false, Some(v)) => *mine = Some(Cow::Owned(v.clone())),
                _ => {}
            }
        }
    }
    let se = se.ok_or_else(|| ApiError::auth_failed("se is mandatory. Cannot be empty"))?;
    let sp = sp.ok_or_else(|| ApiError::auth_failed("sp is mandatory. Cannot be empty"))?;
    check_permissions(&sp, SERVICE_SAS_LETTERS)?;
    check_window(st.as_deref(), &se, now)?;
    common_sas_checks(sas, caller)?;
    Ok(Principal::ServiceSas { permissions: sp })
}

/// [`verify_service_sas`] then [`service_sas_grant`], for callers that
/// already hold the policy.
pub fn service_sas<'t>(
    sas: &Sas<'t>,
    account: &Account,
    queue: &str,
    policy: Option<&SignedIdentifier>,
    now: SystemTime,
    caller: Caller,
) -> Result<Principal<'t>, ApiError> {
    verify_service_sas(sas, account, queue)?;
    service_sas_grant(sas, policy, now, caller)
}

/// Why an authenticated request may not run its operation: 403 with the
/// code named after each variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// `AuthorizationFailure`: this kind of credential can never do it.
    Failure,
    PermissionMismatch,
    ServiceMismatch,
    ResourceTypeMismatch,
    SourceIpMismatch,
    ProtocolMismatch,
}

/// May `who` run an operation that needs `needs`? (the permission tables of
/// "Create a service SAS" and "Create an account SAS")
pub fn authorize(who: &Principal, needs: &Needs) -> Result<(), Denied> {
    match who {
        Principal::Owner => Ok(()),
        Principal::ServiceSas { permissions } => match needs.service_sas {
            SasRule::Letter(l) if permissions.contains(l) => Ok(()),
            SasRule::Letter(_) | SasRule::NotPermitted => Err(Denied::PermissionMismatch),
            SasRule::OwnerOnly => Err(Denied::Failure),
        },
        Principal::AccountSas {
            services,
            resource_types,
            permissions,
        } => {
            if !services.contains('q') {
                return Err(Denied::ServiceMismatch);
            }
            let Some((types, letters)) = needs.account_sas else {
                return Err(Denied::Failure);
            };
            if !types.chars().any(|c| resource_types.contains(c)) {
                return Err(Denied::ResourceTypeMismatch);
            }
            if !letters.chars().any(|c| permissions.contains(c)) {
                return Err(Denied::PermissionMismatch);
            }
            Ok(())
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
    use super::*;
    use crate::addressing::parse_target;
    use crate::ops::{needs, Operation};

    const KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    /// A plain-HTTP caller on the loopback address.
    fn local() -> Caller {
        Caller {
            ip: "127.0.0.1".parse().unwrap(),
            https: false,
        }
    }

    fn acct() -> Account {
        Account {
            name: "devstoreaccount1".into(),
            keys: vec![STANDARD.decode(KEY).unwrap()],
        }
    }

    fn req(method: &str, target: &str, headers: &[(&str, &str)]) -> Request {
        let mut h: crate::http::Headers = headers.iter().copied().collect();
        h.push("Host", "127.0.0.1:10001");
        Request {
            method: method.into(),
            target: target.into(),
            http10: false,
            headers: h,
            body: Default::default(),
            hangup: None,
        }
    }

    #[test]
    fn shared_key_string_to_sign_matches_the_captured_python_request() {
        let r = req(
            "GET",
            "/devstoreaccount1/?comp=list&maxresults=1&include=metadata",
            &[
                ("x-ms-version", "2026-10-06"),
                ("x-ms-date", "Sun, 22 Nov 2026 10:43:06 GMT"),
                ("x-ms-client-request-id", "806160dc-e661-11f1-926c-02fc00000001"),
            ],
        );
        let t = parse_target(&r, &crate::addressing::Addressing::default()).unwrap();
        let sts = &shared_key_strings(&r, "devstoreaccount1", &t)[0];
        assert_eq!(
            sts,
            "GET\n\n\n\n\n\n\n\n\n\n\n\nx-ms-client-request-id:806160dc-e661-11f1-926c-02fc00000001\nx-ms-date:Sun, 22 Nov 2026 10:43:06 GMT\nx-ms-version:2026-10-06\n/devstoreaccount1/devstoreaccount1/\ncomp:list\ninclude:metadata\nmaxresults:1"
        );
    }

    /// The Shared Key strings to sign as they were built before
    /// `SharedKeyParts` (every candidate formatted up front), kept as the
    /// reference the faster code must agree with.
    #[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
    mod reference {
        use super::super::*;

        fn old_ms_headers(req: &Request) -> Vec<(String, String)> {
            let mut out: Vec<(String, String)> = Vec::new();
            for (n, v) in &req.headers {
                let n = n.to_ascii_lowercase();
                if !n.starts_with("x-ms-") {
                    continue;
                }
                // "Authorize with Shared Key": runs of spaces and tabs become one
                // space. Other Unicode spaces are data: they must change the
                // signature, since they change what is stored.
                let v = v
                    .split([' ', '\t'])
                    .filter(|w| !w.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                match out.iter_mut().find(|(o, _)| *o == n) {
                    Some((_, existing)) => {
                        existing.push(',');
                        existing.push_str(&v);
                    }
                    None => out.push((n, v)),
                }
            }
            out
        }

        fn old_canonical_headers(mut h: Vec<(String, String)>, culture: bool) -> String {
            if culture {
                h.sort_by(|a, b| culture_key(&a.0).cmp(&culture_key(&b.0)).then_with(|| a.0.cmp(&b.0)));
            } else {
                h.sort_by(|a, b| a.0.cmp(&b.0));
            }
            h.iter().map(|(n, v)| format!("{n}:{v}\n")).collect()
        }

        fn old_canonical_resource(account: &str, t: &Target<'_>) -> String {
            let path = if t.raw_path.is_empty() { "/" } else { &t.raw_path };
            let mut s = format!("/{account}{path}");
            let mut names: Vec<&str> = t.query.iter().map(|(n, _)| n.as_ref()).collect();
            names.sort_unstable();
            names.dedup();
            for n in names {
                let mut vals: Vec<&str> = t
                    .query
                    .iter()
                    .filter(|(q, _)| q == n)
                    .map(|(_, v)| v.as_ref())
                    .collect();
                vals.sort_unstable();
                s.push_str(&format!("\n{n}:{}", vals.join(",")));
            }
            s
        }

        fn old_shared_key_strings(req: &Request, account: &str, t: &Target<'_>) -> Vec<String> {
            let h = |n: &str| req.header(n).unwrap_or("").to_string();
            // The body's real length, not the header: a chunked body has no
            // Content-Length, and signing "" for it would let a captured request
            // carry any body. (For Content-Length framing the two are equal.)
            let len = if req.body.is_empty() {
                String::new()
            } else {
                req.body.len().to_string()
            };
            let resource = old_canonical_resource(account, t);
            let dates: Vec<String> = if req.header("x-ms-date").is_some() && req.header("date").is_some() {
                vec![String::new(), h("date")]
            } else if req.header("x-ms-date").is_some() {
                vec![String::new()]
            } else {
                vec![h("date")]
            };
            let mut out = Vec::new();
            for culture in [false, true] {
                let headers = old_canonical_headers(old_ms_headers(req), culture);
                for date in &dates {
                    out.push(format!(
                        "{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}{}",
                        req.method,
                        h("content-encoding"),
                        h("content-language"),
                        len,
                        h("content-md5"),
                        h("content-type"),
                        date,
                        h("if-modified-since"),
                        h("if-match"),
                        h("if-none-match"),
                        h("if-unmodified-since"),
                        h("range"),
                        headers,
                        resource
                    ));
                }
            }
            out.dedup();
            out
        }

        fn old_shared_key_lite_string(req: &Request, account: &str, t: &Target<'_>) -> String {
            let h = |n: &str| req.header(n).unwrap_or("").to_string();
            let date = if req.header("x-ms-date").is_some() {
                String::new()
            } else {
                h("date")
            };
            let mut resource = format!("/{account}{}", if t.raw_path.is_empty() { "/" } else { &t.raw_path });
            if let Some(c) = t.param("comp") {
                resource.push_str(&format!("?comp={c}"));
            }
            format!(
                "{}\n{}\n{}\n{}\n{}{}",
                req.method,
                h("content-md5"),
                h("content-type"),
                date,
                old_canonical_headers(old_ms_headers(req), false),
                resource
            )
        }
        pub(super) fn strings(req: &Request, account: &str, t: &Target<'_>) -> Vec<String> {
            old_shared_key_strings(req, account, t)
        }
        pub(super) fn lite(req: &Request, account: &str, t: &Target<'_>) -> String {
            old_shared_key_lite_string(req, account, t)
        }
    }

    /// A request with `headers` (name, value), a body of `body` bytes, and
    /// the query of `target`.
    fn signed_req(method: &str, target: &str, headers: &[(String, String)], body: usize) -> Request {
        let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let mut r = req(method, target, &h);
        r.body = crate::http::Body::new(vec![b'x'; body]);
        r
    }

    proptest::proptest! {
        /// The candidates are the reference's, in its order (its repeats
        /// aside), and the Lite string is its string, whatever the headers:
        /// names in any case and order, repeated, with runs of spaces and
        /// tabs, with and without Date and x-ms-date, with culture and
        /// byte order apart.
        #[test]
        fn shared_key_strings_match_the_reference(
            picks in proptest::collection::vec(
                (0usize..12, proptest::sample::select(vec![
                    "", "a", " a", "a ", "a  b", "a\tb", " \t a \t b \t ", "Sun, 22 Nov 2026 10:43:06 GMT", "x,y", "\u{a0}a",
                ])),
                0..8,
            ),
            body in proptest::sample::select(vec![0usize, 1, 1024]),
            target in proptest::sample::select(vec![
                "/devstoreaccount1/q1/messages?visibilitytimeout=0&messagettl=-1",
                "/devstoreaccount1/?comp=list&maxresults=1&include=metadata",
                "/devstoreaccount1/q1",
            ]),
        ) {
            const NAMES: [&str; 12] = [
                "x-ms-date", "X-MS-Date", "x-ms-version", "x-ms-meta-b", "x-ms-meta_a", "x-ms-meta-A1",
                "x-ms-client-request-id", "Date", "Content-Type", "content-md5", "x-msnot", "Range",
            ];
            let headers: Vec<(String, String)> = picks
                .iter()
                .map(|&(n, v)| (NAMES[n].to_string(), v.to_string()))
                .collect();
            let r = signed_req("PUT", target, &headers, body);
            let t = parse_target(&r, &crate::addressing::Addressing::default()).unwrap();
            let mut want = reference::strings(&r, "devstoreaccount1", &t);
            let mut seen = Vec::new();
            want.retain(|s| if seen.contains(s) { false } else { seen.push(s.clone()); true });
            proptest::prop_assert_eq!(shared_key_strings(&r, "devstoreaccount1", &t), want.clone());
            // And each of them verifies through the HMAC fed in parts,
            // under either key; a signature of something else does not.
            let keys = vec![b"first key".to_vec(), acct().keys[0].clone()];
            let parts = SharedKeyParts::new(&r, "devstoreaccount1", &t);
            for s in &want {
                for k in &keys {
                    let sig = sign(k, s).finalize().into_bytes();
                    proptest::prop_assert!(parts.any_verifies(&keys, &sig), "{:?}", s);
                }
            }
            let other = sign(&keys[1], "something else").finalize().into_bytes();
            proptest::prop_assert!(!parts.any_verifies(&keys, &other));
            proptest::prop_assert_eq!(
                shared_key_lite_string(&r, "devstoreaccount1", &t),
                reference::lite(&r, "devstoreaccount1", &t)
            );
        }
    }

    /// Every candidate verifies, not only the first: a client that signs
    /// with the culture-aware header order, or with the Date line filled
    /// although it also sent x-ms-date, is the owner too.
    #[test]
    fn shared_key_accepts_every_candidate() {
        let now = SystemTime::now();
        let date = httpdate::fmt_http_date(now);
        let headers: Vec<(String, String)> = [
            ("x-ms-date", date.as_str()),
            ("Date", date.as_str()),
            ("x-ms-meta-b", "1"),
            ("x-ms-meta_a", "2"),
            ("x-ms-version", "2026-10-06"),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        let unsigned = signed_req("PUT", "/devstoreaccount1/q1?comp=metadata", &headers, 0);
        let t = parse_target(&unsigned, &crate::addressing::Addressing::default()).unwrap();
        let candidates = shared_key_strings(&unsigned, "devstoreaccount1", &t);
        assert_eq!(
            candidates.len(),
            4,
            "two dates times two header orders: {candidates:#?}"
        );
        for sts in &candidates {
            let mut r = unsigned.clone();
            let sig = signature(&acct().keys[0], sts);
            r.headers
                .push("Authorization", &format!("SharedKey devstoreaccount1:{sig}"));
            assert_eq!(shared_key(&r, &acct(), &t, now), Ok(Principal::Owner), "{sts:?}");
        }
        // And a Lite signature.
        let mut r = unsigned.clone();
        let sig = signature(
            &acct().keys[0],
            &shared_key_lite_string(&unsigned, "devstoreaccount1", &t),
        );
        r.headers
            .push("Authorization", &format!("SharedKeyLite devstoreaccount1:{sig}"));
        assert_eq!(shared_key(&r, &acct(), &t, now), Ok(Principal::Owner));
        // A signature that is not base64 is refused with the string to sign.
        let mut r = unsigned.clone();
        r.headers.push("Authorization", "SharedKey devstoreaccount1:%%%");
        let e = shared_key(&r, &acct(), &t, now).unwrap_err();
        // (The detail is cut to a bounded length; its start is the first candidate's.)
        let first: String = candidates[0].chars().take(60).collect();
        assert!(e.details[0].1.contains(&format!("string to sign: '{first}")), "{e:?}");
    }

    #[test]
    fn shared_key_accepts_a_good_signature_and_explains_a_bad_one() {
        let now = SystemTime::now();
        let date = httpdate::fmt_http_date(now);
        let mut r = req(
            "PUT",
            "/devstoreaccount1/q1",
            &[("x-ms-date", &date), ("x-ms-version", "2026-10-06")],
        );
        let signed = r.clone();
        let t = parse_target(&signed, &crate::addressing::Addressing::default()).unwrap();
        let sig = signature(&acct().keys[0], &shared_key_strings(&r, "devstoreaccount1", &t)[0]);
        let unsigned = r.clone();
        r.headers
            .push("Authorization", &format!("SharedKey devstoreaccount1:{sig}"));
        assert_eq!(shared_key(&r, &acct(), &t, now), Ok(Principal::Owner));
        r = unsigned;
        r.headers.push("Authorization", "SharedKey devstoreaccount1:AAAA");
        let e = shared_key(&r, &acct(), &t, now).unwrap_err();
        assert_eq!((e.status, e.code), (403, "AuthenticationFailed"));
        assert!(e.details[0].1.contains("string to sign"));
        // 16 minutes of skew is refused
        let e = shared_key(&r, &acct(), &t, now + std::time::Duration::from_secs(16 * 60)).unwrap_err();
        assert!(e.details[0].1.contains("too old"));
    }

    #[test]
    fn service_sas_signature_policy_and_permissions() {
        let now = SystemTime::now();
        let sts = "rap\n\n2099-11-22T11:43:27Z\n/queue/devstoreaccount1/sasq\n\n\n\n2026-10-06";
        let sas = Sas {
            sv: Some("2026-10-06"),
            sp: Some("rap"),
            se: Some("2099-11-22T11:43:27Z"),
            sig: Some(signature(&acct().keys[0], sts).leak()),
            ..Default::default()
        };
        let who = service_sas(&sas, &acct(), "sasq", None, now, local()).unwrap();
        assert!(authorize(&who, &needs(Operation::PutMessage)).is_ok());
        assert_eq!(
            authorize(&who, &needs(Operation::UpdateMessage)).unwrap_err(),
            Denied::PermissionMismatch
        );
        assert_eq!(
            authorize(&who, &needs(Operation::GetQueueAcl)).unwrap_err(),
            Denied::Failure
        );
        // another queue: the signature no longer matches
        assert_eq!(
            service_sas(&sas, &acct(), "other", None, now, local())
                .unwrap_err()
                .code,
            "AuthenticationFailed"
        );
        // expired
        let sts = "r\n\n2000-01-01T00:00:00Z\n/queue/devstoreaccount1/sasq\n\n\n\n2026-10-06";
        let old = Sas {
            sp: Some("r"),
            se: Some("2000-01-01T00:00:00Z"),
            sig: Some(signature(&acct().keys[0], sts).leak()),
            ..sas.clone()
        };
        let e = service_sas(&old, &acct(), "sasq", None, now, local()).unwrap_err();
        assert!(e.details[0].1.contains("time frame"));
        // a stored policy supplies sp and se
        let sts = "\n\n\n/queue/devstoreaccount1/sasq\np1\n\n\n2026-10-06";
        let with_si = Sas {
            sv: Some("2026-10-06"),
            si: Some("p1"),
            sig: Some(signature(&acct().keys[0], sts).leak()),
            ..Default::default()
        };
        let policy = SignedIdentifier {
            id: "p1".into(),
            start: None,
            expiry: Some("2099-01-01T00:00:00.0000000Z".into()),
            permission: Some("p".into()),
        };
        let who = service_sas(&with_si, &acct(), "sasq", Some(&policy), now, local()).unwrap();
        assert!(authorize(&who, &needs(Operation::GetMessages)).is_ok());
        assert!(service_sas(&with_si, &acct(), "sasq", None, now, local()).is_err());
    }

    #[test]
    fn a_string_to_sign_given_as_lines_matches_only_what_it_builds() {
        for trailing in [true, false] {
            for lines in [&["a", "b", ""][..], &["", ""], &["a"], &[], &["a\nb"]] {
                let sts = Lines { lines, trailing };
                let built = sts.build();
                assert_eq!(built.len(), sts.len());
                assert!(sts.matches(&built), "{built:?}");
                for other in [format!("{built}\n"), format!("{built}x"), format!("x{built}")] {
                    assert!(!sts.matches(&other), "{other:?} against {built:?}");
                }
                if let Some(shorter) = built
                    .get(..built.len().saturating_sub(1))
                    .filter(|s| !built.is_empty() && s.len() < built.len())
                {
                    assert!(!sts.matches(shorter), "{shorter:?} against {built:?}");
                }
            }
        }
        let sts = Lines {
            lines: &["a", "b"],
            trailing: true,
        };
        assert_eq!(sts.build(), "a\nb\n");
        let sts = Lines {
            lines: &["a", "b"],
            trailing: false,
        };
        assert_eq!(sts.build(), "a\nb");
    }

    #[test]
    fn a_remembered_sas_signature_verifies_only_the_same_inputs() {
        let (a, b) = (b"key-a".to_vec(), b"key-b".to_vec());
        let sts = "devstoreaccount1\nr\nq\no\n\n2099-01-01T00:00:00Z\n\n\n2026-10-06\n\n";
        let sig = signature(&a, sts);
        assert!(sas_verifies(std::slice::from_ref(&a), sts, &sig));
        assert!(sas_verifies(std::slice::from_ref(&a), sts, &sig), "remembered");
        assert!(!sas_verifies(std::slice::from_ref(&b), sts, &sig), "another key");
        assert!(
            !sas_verifies(std::slice::from_ref(&a), &format!("{sts}x"), &sig),
            "another string"
        );
        assert!(
            !sas_verifies(std::slice::from_ref(&a), sts, &signature(&b, sts)),
            "another signature"
        );
        assert!(
            !sas_verifies(&[b"key-".to_vec(), b"a".to_vec()], sts, &sig),
            "the key split in two"
        );
    }

    #[test]
    fn account_sas_before_2020_12_06_signs_no_encryption_scope_line() {
        let sts = "devstoreaccount1\nr\nq\no\n\n2099-11-22T11:43:27Z\n\n\n2019-12-12\n";
        let sas = Sas {
            sv: Some("2019-12-12"),
            ss: Some("q"),
            srt: Some("o"),
            sp: Some("r"),
            se: Some("2099-11-22T11:43:27Z"),
            sig: Some(signature(&acct().keys[0], sts).leak()),
            ..Default::default()
        };
        assert!(account_sas(&sas, &acct(), SystemTime::now(), local()).is_ok());
        let with_line = format!("{sts}\n");
        let sas = Sas {
            sig: Some(signature(&acct().keys[0], &with_line).leak()),
            ..sas
        };
        assert!(account_sas(&sas, &acct(), SystemTime::now(), local()).is_err());
    }

    #[test]
    fn permissions_are_known_letters_each_at_most_once() {
        assert!(check_permissions("raup", SERVICE_SAS_LETTERS).is_ok());
        assert!(check_permissions("", SERVICE_SAS_LETTERS).is_ok());
        for bad in ["rr", "rapr", "x", "r\u{e9}", "\u{7f}", "R"] {
            assert!(check_permissions(bad, SERVICE_SAS_LETTERS).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_target_remembers_a_signature_only_once_it_verified_and_still_checks_the_window() {
        use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
        let signed_target = |se: &str, sig: &str| {
            let sig = utf8_percent_encode(sig, NON_ALPHANUMERIC);
            format!("/devstoreaccount1?comp=list&sv=2026-10-06&ss=q&srt=sco&sp=rlap&se={se}&sig={sig}")
        };
        let sts = |se: &str| format!("devstoreaccount1\nrlap\nq\nsco\n\n{se}\n\n\n2026-10-06\n\n");
        let addressing = crate::addressing::Addressing::default();
        let now = SystemTime::now();
        let future = "2099-11-22T11:43:27Z";
        let good = signature(&acct().keys[0], &sts(future));

        // A wrong signature fails, every time, and leaves nothing behind.
        let forged = req("GET", &signed_target(future, "AAAA"), &[]);
        let t = parse_target(&forged, &addressing).unwrap();
        for _ in 0..2 {
            let sas = Sas::from_target(&t).unwrap();
            assert!(account_sas(&sas, &acct(), now, local()).is_err());
            assert!(!t.signature.verified());
        }

        // The right one verifies and is remembered by its target alone.
        let signed = req("GET", &signed_target(future, &good), &[]);
        let t = parse_target(&signed, &addressing).unwrap();
        let sas = Sas::from_target(&t).unwrap();
        assert!(account_sas(&sas, &acct(), now, local()).is_ok());
        assert!(t.signature.verified());
        let again = Sas::from_target(&t).unwrap();
        assert!(account_sas(&again, &acct(), now, local()).is_ok());

        // Remembered, the window is still checked on every request.
        let later = now + std::time::Duration::from_secs(200 * 365 * 24 * 3600);
        assert!(account_sas(&again, &acct(), later, local()).is_err());

        // Fields put together by hand carry no memo and are checked in full.
        let by_hand = Sas {
            memo: None,
            sig: Some("AAAA"),
            ..again.clone()
        };
        assert!(account_sas(&by_hand, &acct(), now, local()).is_err());
    }

    /// `check_window`'s rule in nanoseconds, against the instants compared
    /// directly (as the window was judged before it was nanoseconds):
    /// offsets, fractions of a second and a clock before 1970.
    #[test]
    fn the_window_in_nanoseconds_agrees_with_the_instants() {
        let windows = [
            (None, "2026-11-29T12:00:00Z"),
            (Some("2026-11-29T11:00:00Z"), "2026-11-29T12:00:00Z"),
            (Some("2026-11-29T11:00:00.5+01:30"), "2026-11-29T12:00:00.25-02:00"),
            (Some("1969-12-31T23:00:00Z"), "1970-01-01T01:00:00.000000001Z"),
            (Some(""), "9999-12-31T23:59:59Z"),
        ];
        let skew = time::Duration::seconds(crate::limits::SAS_START_SKEW_SECS);
        for (st, se) in windows {
            let start = st.filter(|s| !s.is_empty()).map(|s| sas_time(s).unwrap());
            let expiry = sas_time(se).unwrap();
            let mut instants = vec![expiry, expiry - time::Duration::nanoseconds(1)];
            if let Some(s) = start {
                for d in [-1i64, 0, 1] {
                    instants.push(s - skew + time::Duration::nanoseconds(d));
                }
            }
            for now in instants {
                let by_instants = start.is_none_or(|s| s <= now + skew) && now < expiry;
                let clock = SystemTime::from(now);
                assert_eq!(
                    check_window(st, se, clock).is_ok(),
                    by_instants,
                    "st {st:?}, se {se}, now {now}"
                );
            }
        }
    }

    /// A target whose account SAS passed every check once answers later
    /// requests from the clock alone, for the caller it was checked for:
    /// the same answer as the whole check, at every instant around the
    /// window's edges, and for any other caller the whole check.
    #[test]
    fn a_remembered_account_sas_grant_answers_as_the_whole_check() {
        use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
        use std::time::{Duration, UNIX_EPOCH};
        let (st, se) = ("2030-01-01T00:00:00Z", "2030-01-02T00:00:00Z");
        let (st_s, se_s) = (1_893_456_000u64, 1_893_542_400u64);
        let sts = format!("devstoreaccount1\nrap\nq\no\n{st}\n{se}\n127.0.0.1\nhttps,http\n2026-10-06\n\n");
        let sig = signature(&acct().keys[0], &sts);
        let target = format!(
            "/devstoreaccount1/q/messages?sv=2026-10-06&ss=q&srt=o&sp=rap&st={st}&se={se}&sip=127.0.0.1&spr=https,http&sig={}",
            utf8_percent_encode(&sig, NON_ALPHANUMERIC)
        );
        let r = req("POST", &target, &[]);
        let t = parse_target(&r, &crate::addressing::Addressing::default()).unwrap();
        let at = |s: u64, ns: i64| {
            let base = UNIX_EPOCH + Duration::from_secs(s);
            if ns >= 0 {
                base + Duration::from_nanos(ns as u64)
            } else {
                base - Duration::from_nanos(ns.unsigned_abs())
            }
        };
        let inside = at(st_s, 3_600_000_000_000);
        let sas = Sas::from_target(&t).unwrap();
        assert!(t.signature.account_grant().is_none());
        assert!(account_sas(&sas, &acct(), inside, local()).is_ok());
        let grant = t.signature.account_grant().expect("granted after the whole check");
        assert_eq!(grant.caller, local());

        // Around the start (with its 300 s of skew) and the expiry.
        let skew = crate::limits::SAS_START_SKEW_SECS * 1_000_000_000;
        let edges = [
            (st_s, -skew - 1),
            (st_s, -skew),
            (st_s, -skew + 1),
            (st_s, 0),
            (se_s, -1),
            (se_s, 0),
            (se_s, 1),
        ];
        for (s, ns) in edges {
            let now = at(s, ns);
            let fast = account_sas(&sas, &acct(), now, local()).is_ok();
            let full = account_sas_in_full(&sas, &acct(), now, local()).is_ok();
            assert_eq!(fast, full, "at {s} s {ns} ns");
        }
        assert!(
            account_sas(&sas, &acct(), at(st_s, -skew - 1), local()).is_err(),
            "not started"
        );
        assert!(account_sas(&sas, &acct(), at(se_s, 0), local()).is_err(), "expired");
        assert!(
            account_sas(&sas, &acct(), at(se_s, -1), local()).is_ok(),
            "the last instant"
        );

        // Another caller is checked in full: outside `sip`, it is refused.
        let elsewhere = Caller {
            ip: "10.0.0.1".parse().unwrap(),
            https: false,
        };
        assert!(account_sas(&sas, &acct(), inside, elsewhere).is_err());
        assert_eq!(
            t.signature.account_grant(),
            Some(grant),
            "the grant stays the first caller's"
        );
    }

    #[test]
    fn account_sas_checks_service_type_and_permission() {
        let now = SystemTime::now();
        let sts = "devstoreaccount1\nrlap\nq\nsco\n\n2099-11-22T11:43:27Z\n\n\n2026-10-06\n\n";
        let sas = Sas {
            sv: Some("2026-10-06"),
            ss: Some("q"),
            srt: Some("sco"),
            sp: Some("rlap"),
            se: Some("2099-11-22T11:43:27Z"),
            sig: Some(signature(&acct().keys[0], sts).leak()),
            ..Default::default()
        };
        let who = account_sas(
            &sas,
            &acct(),
            now,
            Caller {
                ip: "10.0.0.1".parse().unwrap(),
                https: false,
            },
        )
        .unwrap();
        assert!(authorize(&who, &needs(Operation::ListQueues)).is_ok());
        assert_eq!(
            authorize(&who, &needs(Operation::DeleteQueue)).unwrap_err(),
            Denied::PermissionMismatch
        );
        let ip = Sas {
            sip: Some("1.2.3.4"),
            ..sas.clone()
        };
        assert!(account_sas(
            &ip,
            &acct(),
            now,
            Caller {
                ip: "10.0.0.1".parse().unwrap(),
                https: false
            }
        )
        .is_err());
        let blob_only = Principal::AccountSas {
            services: "b",
            resource_types: "sco",
            permissions: "rwdlacup",
        };
        assert_eq!(
            authorize(&blob_only, &needs(Operation::ListQueues)).unwrap_err(),
            Denied::ServiceMismatch
        );
        let objects = Principal::AccountSas {
            services: "q",
            resource_types: "o",
            permissions: "rwdlacup",
        };
        assert_eq!(
            authorize(&objects, &needs(Operation::CreateQueue)).unwrap_err(),
            Denied::ResourceTypeMismatch
        );
    }

    #[test]
    fn ip_ranges() {
        assert!(in_ip_range("10.0.0.1-10.0.0.9", "10.0.0.5".parse().unwrap()));
        assert!(!in_ip_range("10.0.0.1-10.0.0.9", "10.0.1.5".parse().unwrap()));
        assert!(in_ip_range("127.0.0.1", "127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn a_kept_sas_time_answers_as_a_fresh_parse() {
        let texts = [
            "2026-11-22T11:43:27Z",
            "2026-11-22T11:43Z",
            "2026-11-22",
            "yesterday",
            "",
            "2026-11-22T11:43:27.1234567Z",
            "2030-01-01T00:00:00Z",
            "2026-13-01T00:00:00Z",
        ];
        let long = format!("2026-11-22T11:43:27.{}Z", "1".repeat(80));
        // More distinct texts than slots, each coming back after others
        // pushed it out, and texts seen twice in a row.
        for round in 0..3 {
            for (i, t) in texts.iter().enumerate() {
                let t = if (i + round) % 5 == 0 { long.as_str() } else { t };
                assert_eq!(sas_time(t), parse_iso8601(t), "{t}");
                assert_eq!(sas_time(t), parse_iso8601(t), "{t} again");
            }
        }
    }
}
