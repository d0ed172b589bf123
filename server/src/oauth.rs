//! OAuth bearer tokens, `--oauth basic` (like Azurite's mode of the same
//! name): a token is accepted when it is a well-formed JWT, within its
//! lifetime, issued by a Microsoft Entra ID issuer and meant for Azure
//! Storage. **Its signature is not verified** and no role assignment is
//! looked up: whoever can reach the port and write a JWT is the account
//! owner. It exists so code that authenticates with
//! `DefaultAzureCredential` runs unchanged against a test server; it is
//! not access control (docs/OPERATIONS.md, "OAuth").
//!
//! Failures answer as Azure does: `401 InvalidAuthenticationInfo` with the
//! reason in `AuthenticationErrorDetail` and a `WWW-Authenticate` bearer
//! challenge naming the storage resource ("Authorize with Microsoft Entra
//! ID" in Microsoft's REST reference).

use crate::error::ApiError;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest token considered (Entra access tokens are a few KiB; the request
/// head limit bounds it anyway).
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Issuers of Entra ID tokens (v1 per cloud, and v2), compared by prefix:
/// the tenant that follows is not checked.
const ISSUER_PREFIXES: [&str; 5] = [
    "https://sts.windows.net/",
    "https://sts.microsoftonline.de/",
    "https://sts.chinacloudapi.cn/",
    "https://sts.windows-ppe.net",
    "https://login.microsoftonline.com/",
];

/// The storage resource's audiences that name no account.
const STORAGE_AUDIENCES: [&str; 3] = [
    "https://storage.azure.com",
    "https://storage.azure.com/",
    // Azure Storage's application id.
    "e406a681-f3d4-42a8-90b6-c2b029497af1",
];

/// Queue endpoint host suffixes of the public and sovereign clouds, for
/// audiences of the form `https://{account}.queue.{suffix}[/]`.
const QUEUE_ENDPOINT_SUFFIXES: [&str; 4] = [
    ".queue.core.windows.net",
    ".queue.core.chinacloudapi.cn",
    ".queue.core.usgovcloudapi.net",
    ".queue.core.cloudapi.de",
];

/// Checks a bearer token for `account` at `now`.
pub fn check_basic(token: &str, account: &str, now: SystemTime) -> Result<(), ApiError> {
    let claims = claims_of(token).ok_or_else(|| refused("The token is not a well-formed JWT."))?;
    let now = now.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let time = |name: &str| claims.get(name).and_then(serde_json::Value::as_f64);
    let (Some(nbf), Some(exp)) = (time("nbf"), time("exp")) else {
        return Err(refused("The token has no lifetime (nbf and exp)."));
    };
    if now < nbf {
        return Err(refused("Lifetime validation failed. The token is not yet valid."));
    }
    if now > exp {
        return Err(refused("Lifetime validation failed. The token is expired."));
    }
    let iss = claims.get("iss").and_then(serde_json::Value::as_str).unwrap_or("");
    if !ISSUER_PREFIXES.iter().any(|p| iss.starts_with(p)) {
        return Err(refused(
            "Issuer validation failed. The token's issuer is not Microsoft Entra ID.",
        ));
    }
    let aud = claims.get("aud").and_then(serde_json::Value::as_str).unwrap_or("");
    if !audience_ok(aud, account) {
        return Err(refused(
            "Audience validation failed. The token is not for Azure Storage.",
        ));
    }
    Ok(())
}

/// The payload of a three-part JWT, as a JSON object.
fn claims_of(token: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    if token.len() > MAX_TOKEN_BYTES {
        return None;
    }
    let mut parts = token.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(payload)
        .or_else(|_| URL_SAFE.decode(payload))
        .ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        serde_json::Value::Object(m) => Some(m),
        _ => None,
    }
}

fn audience_ok(aud: &str, account: &str) -> bool {
    if STORAGE_AUDIENCES.contains(&aud) {
        return true;
    }
    let Some(host) = aud.strip_prefix("https://") else {
        return false;
    };
    let host = host.strip_suffix('/').unwrap_or(host);
    QUEUE_ENDPOINT_SUFFIXES
        .iter()
        .any(|suffix| host.strip_suffix(suffix) == Some(account))
}

/// Azure's answer to a bearer token it will not take.
fn refused(detail: &str) -> ApiError {
    let mut e = ApiError::new(
        401,
        "InvalidAuthenticationInfo",
        "Server failed to authenticate the request. Please refer to the information in the www-authenticate header.",
    )
    .detail("AuthenticationErrorDetail", detail);
    e.headers.push((
        "WWW-Authenticate",
        "Bearer authorization_uri=https://login.microsoftonline.com/common/oauth2/authorize resource_id=https://storage.azure.com".into(),
    ));
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn token(claims: serde_json::Value) -> String {
        let enc = |v: &serde_json::Value| URL_SAFE_NO_PAD.encode(v.to_string());
        format!(
            "{}.{}.c2ln",
            enc(&serde_json::json!({"alg": "RS256", "typ": "JWT"})),
            enc(&claims)
        )
    }

    const NOW: u64 = 1_800_000_000;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn good() -> serde_json::Value {
        serde_json::json!({
            "aud": "https://storage.azure.com",
            "iss": "https://sts.windows.net/72f988bf-86f1-41af-91ab-2d7cd011db47/",
            "iat": NOW - 60, "nbf": NOW - 60, "exp": NOW + 3600,
        })
    }

    #[test]
    fn a_well_formed_storage_token_in_its_lifetime_is_accepted() {
        assert_eq!(check_basic(&token(good()), "devstoreaccount1", at(NOW)), Ok(()));
        let mut t = good();
        t["aud"] = "https://devstoreaccount1.queue.core.windows.net/".into();
        assert_eq!(check_basic(&token(t), "devstoreaccount1", at(NOW)), Ok(()));
    }

    #[test]
    fn every_rule_refuses_with_401_and_a_challenge() {
        let mut cases = Vec::new();
        for (field, value) in [
            ("exp", serde_json::json!(NOW - 1)),
            ("nbf", serde_json::json!(NOW + 60)),
            ("iss", serde_json::json!("https://evil.example/")),
            ("aud", serde_json::json!("https://vault.azure.net")),
            ("aud", serde_json::json!("https://otheraccount.queue.core.windows.net")),
            ("exp", serde_json::Value::Null),
        ] {
            let mut t = good();
            t[field] = value;
            cases.push(token(t));
        }
        cases.extend(["not-a-jwt".to_string(), "a.b.c.d".into(), "a.!!!.c".into()]);
        for t in cases {
            let e = check_basic(&t, "devstoreaccount1", at(NOW)).unwrap_err();
            assert_eq!((e.status, e.code), (401, "InvalidAuthenticationInfo"), "{t}");
            assert!(e.headers.iter().any(|(h, _)| *h == "WWW-Authenticate"));
        }
    }
}
