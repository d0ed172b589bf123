//! From a parsed request to a response: addressing, version check,
//! authentication, routing, and the operation (one module each in
//! [`crate::ops`]). Runs on the core that accepted the connection.

use crate::addressing::{Addressing, Target, TargetCache};
use crate::auth::{self, Account, Accounts, Principal, Sas};
use crate::error::ApiError;
use crate::http::{HeaderValue, Request, Response};
use crate::ops;
use crate::router::Router;
use crate::xmlio::iso8601_7;
use engine::disk::dma::DmaDisk;
use engine::disk::Disk;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::SystemTime;
use time::OffsetDateTime;

/// The version we answer with when the request names none.
pub const DEFAULT_VERSION: &str = "2026-10-06";

/// Everything a core needs to serve requests. One per core.
pub struct Ctx<D: Disk = DmaDisk> {
    pub router: Router<D>,
    pub accounts: Rc<Accounts>,
    pub limits: crate::limits::ConnLimits,
    pub addressing: Addressing,
    pub security: Security,
    /// This core's TLS configuration, when the server serves HTTPS.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    /// `--request-log`: one log line per request.
    pub request_log: bool,
}

/// How requests reach this server: over TLS or not, and whether bearer
/// tokens are taken (`--oauth basic`, which startup allows only with TLS).
#[derive(Debug, Clone, Copy, Default)]
pub struct Security {
    pub https: bool,
    pub oauth: bool,
}

/// Handles one request; never fails (errors become Azure error responses).
pub async fn handle<D: Disk>(ctx: &Ctx<D>, req: &Request, peer: IpAddr) -> Response {
    handle_parsed(ctx, req, peer, &mut TargetCache::default()).await
}

/// [`handle`] for a connection, which keeps its recent requests' targets
/// parsed in `targets` for the requests that repeat them.
pub async fn handle_parsed<D: Disk>(ctx: &Ctx<D>, req: &Request, peer: IpAddr, targets: &mut TargetCache) -> Response {
    // Test builds only: lets the suite prove that a panicking shard stops
    // the whole process (docs/decisions/0004-a-dead-shard-stops-the-process.md).
    #[cfg(feature = "fault-injection")]
    match req.header("x-hematite-fault") {
        Some("panic") => panic!("x-hematite-fault: panic (fault-injection build)"),
        // A core stuck without panicking: blocks its thread for good.
        Some("hang") => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
        _ => {}
    }
    let started = std::time::Instant::now();
    // Read now: an operation may give its body back (`http::Body`).
    let body_len = req.body.len();
    // Encoded directly: `to_string` went through `fmt` (about 400 instructions).
    let request_id = HeaderValue::copied(crate::xmlio::hyphenated_id(&uuid::Uuid::new_v4()).as_str());
    let now = SystemTime::now();
    let mut op = None;
    let version = match req.header("x-ms-version") {
        None => DEFAULT_VERSION.into(),
        Some(v) if v == DEFAULT_VERSION => DEFAULT_VERSION.into(),
        Some(v) => HeaderValue::copied(v),
    };
    let result = if req.method == "OPTIONS" {
        ops::cors::preflight(ctx, req, targets).await
    } else {
        dispatch(ctx, req, peer, now, &mut op, targets).await
    };
    let mut resp = result.unwrap_or_else(|e| e.response(&request_id, &iso8601_7(OffsetDateTime::from(now))));
    resp.push_header("x-ms-request-id", request_id);
    resp.push_header("x-ms-version", version);
    resp.push_header("Date", crate::http::http_date(now));
    resp.push_header("Server", "Hematite-Queue/0.1");
    if let Some(id) = req.header("x-ms-client-request-id") {
        if id.len() <= crate::limits::MAX_CLIENT_REQUEST_ID {
            resp.push_header("x-ms-client-request-id", HeaderValue::copied(id));
        }
    }
    // Last, so the exposed-headers list sees every header of the response.
    if req.method != "OPTIONS" {
        if let Some(origin) = req.header("origin") {
            ops::cors::add_headers(ctx, req, origin, &mut resp, targets).await;
        }
    }
    let name = match (op, req.method.as_str()) {
        (Some(op), _) => op.name(),
        (None, "OPTIONS") => "cors_preflight",
        (None, _) => "unrouted",
    };
    let took = started.elapsed();
    crate::metrics::record_request(name, resp.status, took, body_len, resp.body.len());
    if ctx.request_log {
        log_request(ctx, req, name, resp.status, took);
    }
    resp
}

/// One line per request (`--request-log`), like Azurite's debug log but
/// without secrets: the query's signature and pop receipt are replaced,
/// and no header, key or message body is ever written.
fn log_request<D: Disk>(ctx: &Ctx<D>, req: &Request, op: &str, status: u16, took: std::time::Duration) {
    tracing::info!(
        target: "hematite_request",
        method = %req.method,
        path = %redact_target(&req.target),
        operation = op,
        status,
        latency_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
        shard = ctx.router.me,
        "request"
    );
}

/// The request target with the values of `sig` and `popreceipt` replaced.
pub fn redact_target(target: &str) -> String {
    let Some((path, query)) = target.split_once('?') else {
        return target.to_string();
    };
    // Names are compared as the server reads them (percent-decoded, any
    // case), so `%73ig=` is redacted like `sig=`.
    let secret = |k: &str| {
        let name = percent_encoding::percent_decode_str(k).decode_utf8_lossy();
        name.eq_ignore_ascii_case("sig") || name.eq_ignore_ascii_case("popreceipt")
    };
    let query: Vec<String> = crate::addressing::split_ascii(query, b'&')
        .map(|pair| match crate::addressing::split_once_ascii(pair, b'=') {
            Some((k, _)) if secret(k) => format!("{k}=REDACTED"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{path}?{}", query.join("&"))
}

fn valid_version(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && v >= "2009-09-19"
}

/// Who a request speaks for, decided without waiting for every scheme but
/// one: a service SAS that names a stored access policy, whose policy may
/// live on another shard. That case comes back as [`Authenticated::Later`]
/// for the caller to finish behind a box. As an `.await` inside this
/// function its state (the SAS's fields and the router's call) made this
/// step's future several hundred bytes, which every request moved into its
/// connection's future, a dozen cache lines written a put
/// (docs/benchmarks.md, "Fewer instructions, more time: a put at 256
/// connections").
fn authenticate<'t, D: Disk>(
    ctx: &Ctx<D>,
    req: &Request,
    t: &'t Target<'_>,
    account: &Account,
    now: SystemTime,
    peer: IpAddr,
) -> Result<Authenticated<'t>, ApiError> {
    if let Some(header) = req.header("authorization") {
        if let (Some(token), true) = (header.strip_prefix("Bearer "), ctx.security.oauth) {
            crate::oauth::check_basic(token.trim(), &account.name, now)?;
            return Ok(Authenticated::Now(Principal::Owner));
        }
        return auth::shared_key(req, account, t, now).map(Authenticated::Now);
    }
    let caller = auth::Caller {
        ip: peer,
        https: ctx.security.https,
    };
    let Some(sas) = Sas::from_target(t) else {
        return Err(ApiError::auth_failed(
            "No credentials: the request has neither an Authorization header nor a shared access signature.",
        ));
    };
    if sas.skoid.is_some() {
        return Err(ApiError::auth_failed(
            "User delegation SAS is not supported by this server.",
        ));
    }
    if sas.ss.is_some() && sas.srt.is_some() {
        return auth::account_sas(&sas, account, now, caller).map(Authenticated::Now);
    }
    let queue = t.queue.as_deref().unwrap_or("");
    auth::verify_service_sas(&sas, account, queue)?;
    if let (Some(id), false) = (sas.si, queue.is_empty()) {
        return Ok(Authenticated::Later(Box::new(PolicyGrant { sas, id, queue, caller })));
    }
    let who = auth::service_sas_grant(&sas, None, now, caller)?;
    if queue.is_empty() {
        return Err(auth::Denied::Failure.into());
    }
    Ok(Authenticated::Now(who))
}

/// What [`authenticate`] decided.
enum Authenticated<'t> {
    Now(Principal<'t>),
    /// A service SAS, its signature verified, that names a stored access
    /// policy: granted once the policy is read ([`PolicyGrant::grant`]).
    /// Boxed, so every answer moves as few bytes as an error does, not
    /// the SAS's dozen fields.
    Later(Box<PolicyGrant<'t>>),
}

/// A verified service SAS for `queue` (never empty) waiting on the stored
/// policy `id` its fields are merged with.
struct PolicyGrant<'t> {
    sas: Sas<'t>,
    id: &'t str,
    queue: &'t str,
    caller: auth::Caller,
}

impl<'t> PolicyGrant<'t> {
    /// A policy the queue does not have, or a queue whose policies cannot
    /// be read, refuses the SAS (`service_sas_grant` requires the policy
    /// its `si` names).
    async fn grant<D: Disk>(
        self: Box<Self>,
        ctx: &Ctx<D>,
        account: &Account,
        now: SystemTime,
    ) -> Result<Principal<'t>, ApiError> {
        let policy = ops::stored_policies(ctx, &account.name, self.queue)
            .await
            .ok()
            .and_then(|acl| acl.into_iter().find(|p| p.id == self.id));
        auth::service_sas_grant(&self.sas, policy.as_ref(), now, self.caller)
    }
}

async fn dispatch<D: Disk>(
    ctx: &Ctx<D>,
    req: &Request,
    peer: IpAddr,
    now: SystemTime,
    routed: &mut Option<ops::Operation>,
    targets: &mut TargetCache,
) -> Result<Response, ApiError> {
    let t = targets.parse(req, &ctx.addressing)?;
    if let Some(v) = req.header("x-ms-version") {
        if !valid_version(v) {
            return Err(ApiError::invalid_header("x-ms-version", v));
        }
    }
    let account = ctx
        .accounts
        .get(&t.account)
        .ok_or_else(|| ApiError::new(404, "ResourceNotFound", "The specified resource does not exist."))?;
    let who = match authenticate(ctx, req, &t, account, now, peer)? {
        Authenticated::Now(who) => who,
        // Boxed: see `authenticate`.
        Authenticated::Later(pending) => Box::pin(pending.grant(ctx, account, now)).await?,
    };
    let op = ops::route(&req.method, &t)?;
    *routed = Some(op);
    ops::run(op, ctx, req, &t, &who).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_log_never_shows_a_signature_or_a_receipt() {
        let t = "/acct/q/messages/id?popreceipt=AAAA&sv=2026-10-06&SIG=abc%2Fdef&se=x";
        assert_eq!(
            redact_target(t),
            "/acct/q/messages/id?popreceipt=REDACTED&sv=2026-10-06&SIG=REDACTED&se=x"
        );
        assert_eq!(redact_target("/acct/q"), "/acct/q");
        assert_eq!(
            redact_target("/q?%73ig=abc&s%69G=d"),
            "/q?%73ig=REDACTED&s%69G=REDACTED"
        );
    }

    #[test]
    fn versions() {
        assert!(valid_version("2026-10-06"));
        assert!(valid_version("3025-01-01"), "future versions are accepted");
        assert!(!valid_version("2009-09-18"));
        assert!(!valid_version("latest"));
        assert!(!valid_version("2026-1-06"));
    }
}
