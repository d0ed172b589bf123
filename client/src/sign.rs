//! Shared Key signing, written from Microsoft's public spec ("Authorize with
//! Shared Key", the Blob, Queue and File services' string-to-sign) and
//! nothing else. It must never reuse the server's code: a request signed
//! here and accepted by the server is evidence that the server's verifier
//! follows the spec, not that it agrees with itself.

use crate::{Error, DEV_ACCOUNT, DEV_KEY};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use percent_encoding::percent_decode_str;
use sha2::Sha256;
use std::collections::BTreeMap;

/// What a query value keeps unescaped: RFC 3986's unreserved characters.
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The standard headers the string-to-sign carries, in the spec's order,
/// between the verb and the Content-Length line (before) or after it.
const BEFORE_LENGTH: [&str; 2] = ["content-encoding", "content-language"];
const AFTER_LENGTH: [&str; 3] = ["content-md5", "content-type", "date"];
const CONDITIONS: [&str; 5] = [
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
];

/// An account name and its decoded key.
#[derive(Clone)]
pub struct Credentials {
    account: String,
    key: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    // Never print the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// `key` is the account key as the portal shows it: base64.
    pub fn new(account: &str, key: &str) -> Result<Self, Error> {
        let key = STANDARD.decode(key.trim()).map_err(|_| Error::BadKey)?;
        Ok(Self::from_key_bytes(account, key))
    }

    pub fn from_key_bytes(account: &str, key: Vec<u8>) -> Self {
        Credentials {
            account: account.to_string(),
            key,
        }
    }

    /// The development account (`devstoreaccount1`) and its well-known key.
    pub fn dev() -> Self {
        // A constant, checked by the `dev_key_decodes` test; an empty key
        // would only make every signature wrong, never panic.
        let key = STANDARD.decode(DEV_KEY).unwrap_or_default();
        Self::from_key_bytes(DEV_ACCOUNT, key)
    }

    pub fn account(&self) -> &str {
        &self.account
    }

    /// The base64 HMAC-SHA256 of `string_to_sign` under the account key:
    /// the signature of Shared Key and of SAS tokens alike.
    pub fn sign(&self, string_to_sign: &str) -> String {
        // HMAC takes keys of any length, so this never fails.
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(mac) => mac,
            Err(_) => return String::new(),
        };
        mac.update(string_to_sign.as_bytes());
        STANDARD.encode(mac.finalize().into_bytes())
    }

    /// The `Authorization` header's value for a request.
    pub fn authorization(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        content_length: usize,
    ) -> Result<String, Error> {
        let sts = self.string_to_sign(method, target, headers, content_length)?;
        Ok(format!("SharedKey {}:{}", self.account, self.sign(&sts)))
    }

    /// The Shared Key string-to-sign (service version 2015-02-21 and later).
    /// `target` is the request line's target (path and query, still encoded);
    /// `content_length` is the body's length, which the signature covers
    /// even when the body is sent chunked.
    pub fn string_to_sign(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        content_length: usize,
    ) -> Result<String, Error> {
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map_or("", |(_, v)| v.trim())
        };
        let mut out = String::new();
        out.push_str(method);
        out.push('\n');
        for name in BEFORE_LENGTH {
            out.push_str(header(name));
            out.push('\n');
        }
        // Since 2015-02-21 a zero length is signed as an empty line.
        if content_length > 0 {
            out.push_str(&content_length.to_string());
        }
        out.push('\n');
        let has_ms_date = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("x-ms-date"));
        for name in AFTER_LENGTH {
            // x-ms-date takes precedence; the Date line is then empty.
            if !(name == "date" && has_ms_date) {
                out.push_str(header(name));
            }
            out.push('\n');
        }
        for name in CONDITIONS {
            out.push_str(header(name));
            out.push('\n');
        }
        out.push_str(&canonicalized_headers(headers));
        out.push_str(&self.canonicalized_resource(target)?);
        Ok(out)
    }

    /// `/{account}{encoded path}`, then one `\n{name}:{values}` line per
    /// query parameter: names lower-cased and sorted, names and values
    /// decoded, a repeated name's values sorted and joined with commas.
    fn canonicalized_resource(&self, target: &str) -> Result<String, Error> {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        if !path.starts_with('/') {
            return Err(Error::BadRequest("the target's path must start with '/'"));
        }
        let mut params: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            params
                .entry(form_decode(name)?.to_lowercase())
                .or_default()
                .push(form_decode(value)?);
        }
        let mut out = format!("/{}{}", self.account, path);
        for (name, mut values) in params {
            values.sort();
            out.push('\n');
            out.push_str(&name);
            out.push(':');
            out.push_str(&values.join(","));
        }
        Ok(out)
    }
}

/// Every `x-ms-` header as `name:value\n`: names lower-cased and sorted,
/// values with runs of spaces and tabs unfolded to one space and trimmed, a
/// repeated header's values joined with commas in the order sent.
fn canonicalized_headers(headers: &[(&str, &str)]) -> String {
    let mut ms: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        let name = name.trim().to_ascii_lowercase();
        if name.starts_with("x-ms-") {
            let unfolded = value
                .split([' ', '\t'])
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            ms.entry(name).or_default().push(unfolded);
        }
    }
    let mut out = String::new();
    for (name, values) in ms {
        out.push_str(&name);
        out.push(':');
        out.push_str(&values.join(","));
        out.push('\n');
    }
    out
}

/// Query decoding as the service does it: `application/x-www-form-urlencoded`
/// (`+` is a space), then percent-decoding; a malformed escape stays as sent.
fn form_decode(s: &str) -> Result<String, Error> {
    let spaced = s.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| Error::BadRequest("a query parameter does not decode to UTF-8"))
}

/// The query string (without `?`) of a service SAS for one queue, signed
/// with `creds` (the string-to-sign of "Create a service SAS" for the Queue
/// service, version 2015-04-05 and later, with no start, IP or protocol).
/// `permissions` are the letters (e.g. `raup`), `expiry` an ISO 8601 UTC
/// time (e.g. `2099-01-01T00:00:00Z`).
pub fn service_sas(creds: &Credentials, queue: &str, permissions: &str, expiry: &str, version: &str) -> String {
    let resource = format!("/queue/{}/{}", creds.account, queue);
    let sts = format!("{permissions}\n\n{expiry}\n{resource}\n\n\n\n{version}");
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, QUERY_VALUE).to_string();
    format!(
        "sv={}&sp={}&se={}&sig={}",
        enc(version),
        enc(permissions),
        enc(expiry),
        enc(&creds.sign(&sts))
    )
}

/// The query string (without `?`) of an account SAS for the Queue service
/// (`ss=q`), signed with `creds` (the string-to-sign of "Create an account
/// SAS", version 2020-12-06 and later, with no start, IP, protocol or
/// encryption scope). `resource_types` are among `sco`, `permissions` the
/// letters (e.g. `rwdlacup`), `expiry` an ISO 8601 UTC time.
pub fn account_sas(creds: &Credentials, resource_types: &str, permissions: &str, expiry: &str) -> String {
    const VERSION: &str = "2020-12-06";
    let sts = format!(
        "{}\n{permissions}\nq\n{resource_types}\n\n{expiry}\n\n\n{VERSION}\n\n",
        creds.account
    );
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, QUERY_VALUE).to_string();
    format!(
        "sv={VERSION}&ss=q&srt={}&sp={}&se={}&sig={}",
        enc(resource_types),
        enc(permissions),
        enc(expiry),
        enc(&creds.sign(&sts))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_key_decodes() {
        assert_eq!(STANDARD.decode(DEV_KEY).map(|k| k.len()), Ok(64));
        assert!(Credentials::new("a", "not base64!").is_err());
    }

    // Known answer. Derived independently in Python 3 from the spec's
    // layout, not from this code:
    //   key = base64.b64decode(DEV_KEY)
    //   sts = "\n".join(["PUT", "", "", "64", "", "application/xml", "", "", "", "", "", "",
    //       "x-ms-client-request-id:a b", "x-ms-date:Mon, 01 Jan 2024 00:00:00 GMT",
    //       "x-ms-version:2026-10-06", "/devstoreaccount1/devstoreaccount1/myqueue/messages",
    //       "b:1,2", "messagettl:3600", "x:/y z"])
    //   base64.b64encode(hmac.new(key, sts.encode(), hashlib.sha256).digest())
    // The request exercises header case and unfolding, a repeated and an
    // upper-case query name, and form decoding of a value.
    #[test]
    fn known_answer() {
        let creds = Credentials::dev();
        let headers = [
            ("Host", "127.0.0.1:10001"),
            ("x-ms-version", "2026-10-06"),
            ("X-MS-Date", "Mon, 01 Jan 2024 00:00:00 GMT"),
            ("x-ms-client-request-id", "  a \t b "),
            ("Content-Type", "application/xml"),
        ];
        let target = "/devstoreaccount1/myqueue/messages?MessageTTL=3600&b=2&x=%2Fy+z&b=1";
        let sts = creds.string_to_sign("PUT", target, &headers, 64).unwrap();
        assert_eq!(
            sts,
            "PUT\n\n\n64\n\napplication/xml\n\n\n\n\n\n\nx-ms-client-request-id:a b\n\
             x-ms-date:Mon, 01 Jan 2024 00:00:00 GMT\nx-ms-version:2026-10-06\n\
             /devstoreaccount1/devstoreaccount1/myqueue/messages\nb:1,2\nmessagettl:3600\nx:/y z"
        );
        assert_eq!(creds.sign(&sts), "IiV9PJnfHnGuqW7dUpURD6thW7CyOECuOwn4FyXr0WE=");
        assert_eq!(
            creds.authorization("PUT", target, &headers, 64).unwrap(),
            "SharedKey devstoreaccount1:IiV9PJnfHnGuqW7dUpURD6thW7CyOECuOwn4FyXr0WE="
        );
    }

    #[test]
    fn zero_length_is_an_empty_line_and_date_yields_to_x_ms_date() {
        let creds = Credentials::dev();
        let with_ms = [("Date", "d1"), ("x-ms-date", "d2")];
        let sts = creds.string_to_sign("GET", "/devstoreaccount1", &with_ms, 0).unwrap();
        assert!(sts.starts_with("GET\n\n\n\n\n\n\n"), "{sts:?}");
        assert!(!sts.contains("d1"));
        let date_only = [("Date", "d1")];
        let sts = creds.string_to_sign("GET", "/devstoreaccount1", &date_only, 0).unwrap();
        assert!(sts.starts_with("GET\n\n\n\n\n\nd1\n"), "{sts:?}");
    }

    #[test]
    fn repeated_ms_headers_join_in_order() {
        let h = [("x-ms-meta-b", "2"), ("x-ms-meta-a", "z"), ("X-Ms-Meta-B", "1")];
        assert_eq!(canonicalized_headers(&h), "x-ms-meta-a:z\nx-ms-meta-b:2,1\n");
    }

    #[test]
    fn bad_targets_are_refused() {
        let creds = Credentials::dev();
        assert!(creds.string_to_sign("GET", "devstoreaccount1", &[], 0).is_err());
        assert!(creds.string_to_sign("GET", "/a?x=%FF", &[], 0).is_err());
    }

    // Known answer, derived in Python 3 from "Create a service SAS":
    //   sts = "raup\n\n2099-01-01T00:00:00Z\n/queue/devstoreaccount1/q\n\n\n\n2026-10-06"
    //   sig = base64.b64encode(hmac.new(key, sts.encode(), hashlib.sha256).digest())
    //   urllib.parse.quote(sig, safe="")
    #[test]
    fn service_sas_known_answer() {
        let sas = service_sas(&Credentials::dev(), "q", "raup", "2099-01-01T00:00:00Z", "2026-10-06");
        assert_eq!(
            sas,
            "sv=2026-10-06&sp=raup&se=2099-01-01T00%3A00%3A00Z&sig=oW1CJeurzyVNZDi1bKV1n4NxCiy%2B5%2FWyQFe9wpazcMI%3D"
        );
    }
}
