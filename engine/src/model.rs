//! The values queues are made of, and the rules they obey (Microsoft's "Naming Queues and Metadata" and "Set Queue ACL").
//! Plain data: no owner, freely cloned between cores inside requests and replies.

use crate::error::QueueError;
use crate::limits::*;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// Queue metadata: name/value pairs in the case they were given; names are
/// unique case-insensitively.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata(pub Vec<(String, String)>);

impl Metadata {
    /// Validates names, duplicates and total size ("Naming Queues and Metadata": C# identifiers, 8 KiB in all).
    pub fn validate(&self) -> Result<(), QueueError> {
        let mut total = 0usize;
        for (i, (name, value)) in self.0.iter().enumerate() {
            if name.is_empty() {
                return Err(QueueError::EmptyMetadataKey);
            }
            if !is_csharp_identifier(name) {
                return Err(QueueError::InvalidMetadata { name: name.clone() });
            }
            if self.0[..i].iter().any(|(other, _)| other.eq_ignore_ascii_case(name)) {
                return Err(QueueError::InvalidMetadata { name: name.clone() });
            }
            total += name.len() + value.len();
        }
        if total > MAX_METADATA_BYTES {
            return Err(QueueError::MetadataTooLarge);
        }
        Ok(())
    }

    /// Same pairs, names compared case-insensitively, values exactly, order
    /// ignored. Decides "already existed" versus "conflict" on Create Queue.
    pub fn equivalent(&self, other: &Metadata) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .all(|(n, v)| other.0.iter().any(|(on, ov)| on.eq_ignore_ascii_case(n) && ov == v))
    }
}

fn is_csharp_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A stored access policy ("Get Queue ACL", "Set Queue ACL"). Times are ISO 8601 strings as the server
/// normalised them; each field may be absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignedIdentifier {
    pub id: String,
    pub start: Option<String>,
    pub expiry: Option<String>,
    pub permission: Option<String>,
}

/// Validates a whole Set Queue ACL document ("Set Queue ACL"). Azure answers every
/// violation with `InvalidXmlDocument`.
pub fn validate_acl(acl: &[SignedIdentifier]) -> Result<(), QueueError> {
    let bad = |reason: String| Err(QueueError::InvalidXmlDocument { reason });
    if acl.len() > MAX_SIGNED_IDENTIFIERS {
        return bad(format!(
            "At most {MAX_SIGNED_IDENTIFIERS} signed identifiers are allowed."
        ));
    }
    for (i, si) in acl.iter().enumerate() {
        if si.id.is_empty() || si.id.len() > MAX_SIGNED_IDENTIFIER_ID_LEN {
            return bad(format!(
                "Signed identifier ids must be 1 to {MAX_SIGNED_IDENTIFIER_ID_LEN} characters."
            ));
        }
        if acl[..i].iter().any(|o| o.id == si.id) {
            return bad(format!("Signed identifier '{}' appears more than once.", si.id));
        }
        if let Some(p) = &si.permission {
            // Each of r, a, u, p at most once: so at most four characters, and
            // a record can never be asked to hold a huge string.
            let mut seen = String::new();
            for c in p.chars() {
                if !ACL_PERMISSION_LETTERS.contains(c) || seen.contains(c) {
                    let shown: String = p.chars().take(8).collect();
                    return bad(format!(
                        "Permission '{shown}' may only contain the letters r, a, u and p, each at most once."
                    ));
                }
                seen.push(c);
            }
        }
        for t in [&si.start, &si.expiry].into_iter().flatten() {
            let iso = t.bytes().all(|b| b.is_ascii_digit() || b"-:.TZ+".contains(&b));
            if t.len() > MAX_ACL_TIME_LEN || !iso {
                let shown: String = t.chars().take(32).collect();
                return bad(format!(
                    "Start and Expiry must be ISO 8601 times of at most {MAX_ACL_TIME_LEN} characters, not '{shown}'."
                ));
            }
        }
    }
    Ok(())
}

/// Checks a queue name: length first, then characters ("Naming Queues and Metadata").
pub fn validate_queue_name(name: &str) -> Result<(), QueueError> {
    if !(MIN_QUEUE_NAME_LEN..=MAX_QUEUE_NAME_LEN).contains(&name.len()) {
        return Err(QueueError::OutOfRangeInput);
    }
    let b = name.as_bytes();
    let ok_chars = b
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    let ok_ends = b[0].is_ascii_alphanumeric() && b[b.len() - 1].is_ascii_alphanumeric();
    if !ok_chars || !ok_ends || name.contains("--") {
        return Err(QueueError::InvalidResourceName);
    }
    Ok(())
}

/// The length of a pop receipt's wire form.
pub const RECEIPT_TEXT_LEN: usize = 22;

/// A pop receipt's wire form ([`PopReceipt::encode`]), held in place: a
/// `String` was an allocation of every put and every message got.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReceiptText([u8; RECEIPT_TEXT_LEN]);

impl ReceiptText {
    pub fn as_str(&self) -> &str {
        // Only `encode` makes one, from the base64url alphabet: ASCII.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::ops::Deref for ReceiptText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for ReceiptText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for ReceiptText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for ReceiptText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<String> for ReceiptText {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ReceiptText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A pop receipt: which issue of which message it is. On the wire it is 16
/// bytes, base64url without padding (22 characters), so it survives URLs
/// without escaping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PopReceipt {
    /// The LSN of the record that issued it; unique per issue.
    pub nonce: u64,
    /// The message's shard-local sequence number.
    pub seq: u64,
}

impl PopReceipt {
    /// The wire form: what `URL_SAFE_NO_PAD.encode` gives for the 16
    /// bytes (a test holds the two equal), written directly: the base64
    /// crate's general engine cost about 400 instructions a receipt, one
    /// per put and per message got.
    pub fn encode(&self) -> ReceiptText {
        const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.nonce.to_le_bytes());
        b[8..].copy_from_slice(&self.seq.to_le_bytes());
        let sextet = |v: u32, shift: u32| ALPHABET[((v >> shift) & 63) as usize];
        let mut out = [0u8; RECEIPT_TEXT_LEN];
        // Five groups of three bytes make twenty characters; the last byte
        // makes two more: its top six bits, then its low two bits followed
        // by four zero bits.
        for (group, text) in b[..15].chunks_exact(3).zip(out.chunks_exact_mut(4)) {
            let v = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
            text.copy_from_slice(&[sextet(v, 18), sextet(v, 12), sextet(v, 6), sextet(v, 0)]);
        }
        let last = u32::from(b[15]) << 16;
        out[20..].copy_from_slice(&[sextet(last, 18), sextet(last, 12)]);
        ReceiptText(out)
    }

    /// Accepts the base64url form we issue, and the standard alphabet with
    /// padding in case a client re-encoded it.
    pub fn decode(s: &str) -> Result<Self, QueueError> {
        let invalid = || QueueError::InvalidQueryParameterValue {
            name: "popreceipt",
            value: s.to_string(),
            reason: "Invalid pop receipt format".to_string(),
        };
        let normalised: String = s
            .trim_end_matches('=')
            .chars()
            .map(|c| match c {
                '+' => '-',
                '/' => '_',
                c => c,
            })
            .collect();
        let bytes = URL_SAFE_NO_PAD.decode(normalised.as_bytes()).map_err(|_| invalid())?;
        let b: [u8; 16] = bytes.as_slice().try_into().map_err(|_| invalid())?;
        Ok(PopReceipt {
            nonce: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            seq: u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names() {
        assert_eq!(validate_queue_name("ab"), Err(QueueError::OutOfRangeInput));
        assert_eq!(validate_queue_name(&"a".repeat(64)), Err(QueueError::OutOfRangeInput));
        assert!(validate_queue_name(&"a".repeat(63)).is_ok());
        assert!(validate_queue_name("my-queue-1").is_ok());
        for bad in ["My-queue", "-abc", "abc-", "a--b", "a_b", "ab c", "abç"] {
            assert_eq!(validate_queue_name(bad), Err(QueueError::InvalidResourceName), "{bad}");
        }
        // length is checked before characters
        assert_eq!(validate_queue_name("A"), Err(QueueError::OutOfRangeInput));
    }

    #[test]
    fn metadata_rules() {
        let m = |pairs: &[(&str, &str)]| Metadata(pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect());
        assert!(m(&[("Foo", "bar"), ("_x1", "")]).validate().is_ok());
        assert!(matches!(
            m(&[("1abc", "v")]).validate(),
            Err(QueueError::InvalidMetadata { .. })
        ));
        assert!(matches!(
            m(&[("a-b", "v")]).validate(),
            Err(QueueError::InvalidMetadata { .. })
        ));
        assert!(matches!(
            m(&[("foo", "1"), ("FOO", "2")]).validate(),
            Err(QueueError::InvalidMetadata { .. })
        ));
        assert_eq!(m(&[("", "v")]).validate(), Err(QueueError::EmptyMetadataKey));
        let big = "x".repeat(MAX_METADATA_BYTES);
        assert_eq!(m(&[("a", &big)]).validate(), Err(QueueError::MetadataTooLarge));
        assert!(m(&[("a", &big[1..])]).validate().is_ok());
        assert!(m(&[("Foo", "1"), ("b", "2")]).equivalent(&m(&[("B", "2"), ("foo", "1")])));
        assert!(!m(&[("Foo", "1")]).equivalent(&m(&[("foo", "2")])));
        assert!(m(&[]).equivalent(&m(&[])));
    }

    #[test]
    fn acl_rules() {
        let si = |id: &str, p: Option<&str>| SignedIdentifier {
            id: id.into(),
            permission: p.map(Into::into),
            ..Default::default()
        };
        assert!(validate_acl(&[si("a", Some("raup")), si("b", None)]).is_ok());
        assert!(validate_acl(&[si("a", Some("rw"))]).is_err());
        assert!(validate_acl(&[si("a", Some("rr"))]).is_err(), "a repeated letter");
        assert!(validate_acl(&[si("a", Some("puar"))]).is_ok());
        let timed = |t: &str| SignedIdentifier {
            id: "t".into(),
            start: Some(t.into()),
            ..Default::default()
        };
        assert!(validate_acl(&[timed("2030-01-01T00:00:00.0000000Z")]).is_ok());
        assert!(validate_acl(&[timed(&"2".repeat(MAX_ACL_TIME_LEN + 1))]).is_err());
        assert!(validate_acl(&[timed("tomorrow")]).is_err());
        assert!(validate_acl(&[si("a", None), si("a", None)]).is_err());
        assert!(validate_acl(&[si("", None)]).is_err());
        assert!(validate_acl(&[si(&"x".repeat(65), None)]).is_err());
        let six: Vec<_> = (0..6).map(|i| si(&i.to_string(), None)).collect();
        assert!(validate_acl(&six).is_err());
        assert!(validate_acl(&six[..5]).is_ok());
    }

    #[test]
    fn pop_receipts_are_encoded_as_base64url_would() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let edges = [(0, 0), (u64::MAX, u64::MAX), (1, u64::MAX), (u64::MAX, 0)];
        let random = (0..10_000).map(|_| (next(), next()));
        for (nonce, seq) in edges.into_iter().chain(random) {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&nonce.to_le_bytes());
            b[8..].copy_from_slice(&seq.to_le_bytes());
            assert_eq!(PopReceipt { nonce, seq }.encode(), URL_SAFE_NO_PAD.encode(b));
        }
    }

    #[test]
    fn pop_receipts_round_trip_and_reject_garbage() {
        let r = PopReceipt {
            nonce: 0xdead_beef_0102,
            seq: 77,
        };
        let s = r.encode();
        assert_eq!(s.len(), 22);
        assert!(s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(PopReceipt::decode(&s).unwrap(), r);
        for bad in ["", "abc", "!!!!", "AgAAAAMAAAAAAAAAYUMWAIg+1gE=XX"] {
            assert!(matches!(
                PopReceipt::decode(bad),
                Err(QueueError::InvalidQueryParameterValue { name: "popreceipt", .. })
            ));
        }
    }
}
