//! From a parsed request to a response: addressing, version check,
//! authentication, routing to the owning core, and the wire shapes of every
//! operation (Microsoft's Queue service REST reference). Runs on the core that accepted the
//! connection.

use crate::auth::{self, Account, Principal, Sas};
use crate::error::ApiError;
use crate::http::{Request, Response};
use crate::request::{parse_target, route, Addressing, Operation, Target};
use crate::service::ServiceProperties;
use crate::shards::{Command, Outcome, Router};
use crate::xmlio::{self, escape, iso8601_7, rfc1123, DECL};
use engine::disk::dma::DmaDisk;
use engine::disk::Disk;
use engine::limits::MAX_LIST_RESULTS;
use engine::model::Metadata;
use engine::shard::Created;
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::SystemTime;
use time::OffsetDateTime;

/// The version we answer with when the request names none.
pub const DEFAULT_VERSION: &str = "2026-10-06";

/// Everything a core needs to serve requests.
pub struct Ctx<D: Disk = DmaDisk> {
    pub router: Router<D>,
    pub accounts: Rc<HashMap<String, Account>>,
    pub limits: crate::limits::ConnLimits,
    pub addressing: Addressing,
}

/// Handles one request; never fails (errors become Azure error responses).
pub async fn handle<D: Disk>(ctx: &Ctx<D>, req: &Request, peer: IpAddr) -> Response {
    // Test builds only: lets the suite prove that a panicking shard stops
    // the whole process (docs/decisions/0004-a-dead-shard-stops-the-process.md).
    #[cfg(feature = "fault-injection")]
    if req.header("x-hematite-fault") == Some("panic") {
        panic!("x-hematite-fault: panic (fault-injection build)");
    }
    let request_id = uuid::Uuid::new_v4().to_string();
    let now = SystemTime::now();
    let version = req.header("x-ms-version").unwrap_or(DEFAULT_VERSION).to_string();
    let result = if req.method == "OPTIONS" {
        preflight(ctx, req).await
    } else {
        dispatch(ctx, req, peer, now).await
    };
    let mut resp = result.unwrap_or_else(|e| e.response(&request_id, &iso8601_7(OffsetDateTime::from(now))));
    resp.headers.push(("x-ms-request-id".into(), request_id));
    resp.headers.push(("x-ms-version".into(), version));
    resp.headers.push(("Date".into(), httpdate::fmt_http_date(now)));
    resp.headers.push(("Server".into(), "Hematite-Queue/0.1".into()));
    if let Some(id) = req.header("x-ms-client-request-id") {
        if id.len() <= crate::limits::MAX_CLIENT_REQUEST_ID {
            resp.headers.push(("x-ms-client-request-id".into(), id.to_string()));
        }
    }
    // Last, so the exposed-headers list sees every header of the response.
    if req.method != "OPTIONS" {
        if let Some(origin) = req.header("origin") {
            cors_headers(ctx, req, origin, &mut resp).await;
        }
    }
    resp
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

/// Queue operations take no conditional headers (Azure answers 400
/// `ConditionHeadersNotSupported`), and a `Content-MD5` must match the body.
fn check_body_headers(req: &Request) -> Result<(), ApiError> {
    for h in ["if-match", "if-none-match", "if-modified-since", "if-unmodified-since"] {
        if req.header(h).is_some() {
            return Err(ApiError::new(
                400,
                "ConditionHeadersNotSupported",
                "Condition headers are not supported.",
            ));
        }
    }
    if let Some(md5) = req.header("content-md5") {
        use base64::Engine;
        use md5::{Digest, Md5};
        let given = base64::engine::general_purpose::STANDARD
            .decode(md5)
            .ok()
            .filter(|d| d.len() == 16);
        let Some(given) = given else {
            return Err(ApiError::new(
                400,
                "InvalidMd5",
                "The MD5 value specified in the request is invalid. The MD5 value must be 128 bits and Base64-encoded.",
            )
            .detail("HeaderName", "Content-MD5")
            .detail("HeaderValue", md5));
        };
        let actual = Md5::digest(&req.body);
        if actual.as_slice() != given.as_slice() {
            use base64::Engine as _;
            return Err(ApiError::new(
                400,
                "Md5Mismatch",
                "The MD5 value specified in the request did not match with the MD5 value calculated by the server.",
            )
            .detail("UserSpecifiedMd5", md5)
            .detail(
                "ServerCalculatedMd5",
                base64::engine::general_purpose::STANDARD.encode(actual),
            ));
        }
    }
    Ok(())
}

fn int_param(t: &Target, name: &'static str) -> Result<Option<i64>, ApiError> {
    match t.param(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| ApiError::invalid_query(name, v, "The value must be an integer.")),
    }
}

fn required<'a>(t: &'a Target, name: &'static str) -> Result<&'a str, ApiError> {
    t.param(name)
        .ok_or_else(|| engine::QueueError::MissingRequiredQueryParameter { name }.into())
}

/// Metadata from `x-ms-meta-*` headers ("Set Queue Metadata"). The bare `x-ms-meta` header
/// Python sends is ignored.
fn metadata_of(req: &Request) -> Result<Metadata, ApiError> {
    let mut md = Vec::new();
    for (n, v) in &req.headers {
        let lower = n.to_ascii_lowercase();
        if let Some(name) = lower.strip_prefix("x-ms-meta-") {
            if name.is_empty() {
                return Err(engine::QueueError::EmptyMetadataKey.into());
            }
            md.push((n["x-ms-meta-".len()..].to_string(), v.trim().to_string()));
        }
    }
    Ok(Metadata(md))
}

fn queue_of(t: &Target) -> &str {
    t.queue.as_deref().expect("queue-level operation has a queue")
}

async fn authenticate<D: Disk>(
    ctx: &Ctx<D>,
    req: &Request,
    t: &Target,
    account: &Account,
    now: SystemTime,
    peer: IpAddr,
) -> Result<Principal, ApiError> {
    if req.header("authorization").is_some() {
        return auth::shared_key(req, account, t, now);
    }
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
        return auth::account_sas(&sas, account, now, peer);
    }
    let queue = t.queue.as_deref().unwrap_or("");
    auth::verify_service_sas(&sas, account, queue)?;
    let policy = match (&sas.si, queue.is_empty()) {
        (Some(id), false) => {
            let owner = ctx.router.owner_of(&account.name, queue);
            match ctx
                .router
                .exec(
                    owner,
                    Command::GetAcl {
                        account: account.name.clone(),
                        queue: queue.to_string(),
                    },
                )
                .await
            {
                Ok(Outcome::Acl(acl)) => acl.into_iter().find(|p| &p.id == id),
                _ => None,
            }
        }
        _ => None,
    };
    let who = auth::service_sas_grant(&sas, policy.as_ref(), now, peer)?;
    if queue.is_empty() {
        return Err(ApiError::authorization("AuthorizationFailure"));
    }
    Ok(who)
}

async fn dispatch<D: Disk>(ctx: &Ctx<D>, req: &Request, peer: IpAddr, now: SystemTime) -> Result<Response, ApiError> {
    let t = parse_target(req, &ctx.addressing)?;
    if let Some(v) = req.header("x-ms-version") {
        if !valid_version(v) {
            return Err(ApiError::invalid_header("x-ms-version", v));
        }
    }
    let account = ctx
        .accounts
        .get(&t.account)
        .ok_or_else(|| ApiError::new(404, "ResourceNotFound", "The specified resource does not exist."))?;
    let who = authenticate(ctx, req, &t, account, now, peer).await?;
    let op = route(&req.method, &t)?;
    auth::authorize(&who, op)?;
    check_body_headers(req)?;
    execute(ctx, req, &t, op).await
}

fn unexpected(o: Outcome) -> ApiError {
    ApiError::internal(&format!("unexpected reply from a shard: {o:?}"))
}

async fn on_owner<D: Disk>(ctx: &Ctx<D>, t: &Target, cmd: Command) -> Result<Outcome, ApiError> {
    let owner = ctx.router.owner_of(&t.account, queue_of(t));
    Ok(ctx.router.exec(owner, cmd).await?)
}

async fn execute<D: Disk>(ctx: &Ctx<D>, req: &Request, t: &Target, op: Operation) -> Result<Response, ApiError> {
    use Operation::*;
    let account = t.account.clone();
    let queue = || queue_of(t).to_string();
    Ok(match op {
        ListQueues => list_queues(ctx, req, t).await?,
        GetServiceProperties => match ctx.router.exec(0, Command::GetService { account }).await? {
            Outcome::Service(p) => Response::new(200).xml(p.to_xml()),
            o => return Err(unexpected(o)),
        },
        SetServiceProperties => {
            ctx.router
                .exec(
                    0,
                    Command::SetService {
                        account,
                        body: req.body.clone(),
                    },
                )
                .await?;
            Response::new(202)
        }
        GetServiceStats => {
            if !t.secondary {
                return Err(ApiError::invalid_query(
                    "comp",
                    "stats",
                    "Service stats are only available on the secondary endpoint.",
                ));
            }
            Response::new(200).xml(format!(
                "{DECL}<StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>{}</LastSyncTime></GeoReplication></StorageServiceStats>",
                httpdate::fmt_http_date(SystemTime::now())
            ))
        }
        CreateQueue => {
            let metadata = metadata_of(req)?;
            match on_owner(
                ctx,
                t,
                Command::CreateQueue {
                    account,
                    queue: queue(),
                    metadata,
                },
            )
            .await?
            {
                Outcome::Created(Created::New) => Response::new(201),
                Outcome::Created(Created::AlreadyExisted) => Response::new(204),
                o => return Err(unexpected(o)),
            }
        }
        DeleteQueue => {
            on_owner(
                ctx,
                t,
                Command::DeleteQueue {
                    account,
                    queue: queue(),
                },
            )
            .await?;
            Response::new(204)
        }
        GetQueueMetadata => match on_owner(
            ctx,
            t,
            Command::GetProperties {
                account,
                queue: queue(),
            },
        )
        .await?
        {
            Outcome::Properties(p) => {
                let mut r = Response::new(200).header(
                    "x-ms-approximate-messages-count",
                    p.approximate_message_count.to_string(),
                );
                for (n, v) in p.metadata.0 {
                    r = r.header(format!("x-ms-meta-{n}"), v);
                }
                r
            }
            o => return Err(unexpected(o)),
        },
        SetQueueMetadata => {
            let metadata = metadata_of(req)?;
            on_owner(
                ctx,
                t,
                Command::SetMetadata {
                    account,
                    queue: queue(),
                    metadata,
                },
            )
            .await?;
            Response::new(204)
        }
        GetQueueAcl => match on_owner(
            ctx,
            t,
            Command::GetAcl {
                account,
                queue: queue(),
            },
        )
        .await?
        {
            Outcome::Acl(acl) => Response::new(200).xml(xmlio::write_signed_identifiers(&acl)),
            o => return Err(unexpected(o)),
        },
        SetQueueAcl => {
            let acl = xmlio::parse_signed_identifiers(&req.body)?;
            on_owner(
                ctx,
                t,
                Command::SetAcl {
                    account,
                    queue: queue(),
                    acl,
                },
            )
            .await?;
            Response::new(204)
        }
        PutMessage => {
            let visibility_timeout = int_param(t, "visibilitytimeout")?;
            let ttl = int_param(t, "messagettl")?;
            let text = xmlio::parse_message_text(&req.body)?;
            match on_owner(
                ctx,
                t,
                Command::Put {
                    account,
                    queue: queue(),
                    text,
                    visibility_timeout,
                    ttl,
                },
            )
            .await?
            {
                Outcome::Put(p) => Response::new(201).xml(xmlio::write_put(&p)),
                o => return Err(unexpected(o)),
            }
        }
        GetMessages => {
            let n = int_param(t, "numofmessages")?;
            let visibility_timeout = int_param(t, "visibilitytimeout")?;
            match on_owner(
                ctx,
                t,
                Command::Get {
                    account,
                    queue: queue(),
                    n,
                    visibility_timeout,
                },
            )
            .await?
            {
                Outcome::Received(msgs) => Response::new(200).xml(xmlio::write_received(&msgs)),
                o => return Err(unexpected(o)),
            }
        }
        PeekMessages => {
            let n = int_param(t, "numofmessages")?;
            match on_owner(
                ctx,
                t,
                Command::Peek {
                    account,
                    queue: queue(),
                    n,
                },
            )
            .await?
            {
                Outcome::Peeked(msgs) => Response::new(200).xml(xmlio::write_peeked(&msgs)),
                o => return Err(unexpected(o)),
            }
        }
        ClearMessages => {
            on_owner(
                ctx,
                t,
                Command::Clear {
                    account,
                    queue: queue(),
                },
            )
            .await?;
            Response::new(204)
        }
        DeleteMessage => {
            let receipt = required(t, "popreceipt")?.to_string();
            let id = t.message_id.clone().expect("message-level operation has an id");
            on_owner(
                ctx,
                t,
                Command::Delete {
                    account,
                    queue: queue(),
                    id,
                    receipt,
                },
            )
            .await?;
            Response::new(204)
        }
        UpdateMessage => {
            let receipt = required(t, "popreceipt")?.to_string();
            let visibility_timeout = Some(required(t, "visibilitytimeout")?)
                .map(|v| {
                    v.trim()
                        .parse::<i64>()
                        .map_err(|_| ApiError::invalid_query("visibilitytimeout", v, "The value must be an integer."))
                })
                .transpose()?;
            let text = if req.body.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(xmlio::parse_message_text(&req.body)?)
            };
            let id = t.message_id.clone().expect("message-level operation has an id");
            match on_owner(
                ctx,
                t,
                Command::Update {
                    account,
                    queue: queue(),
                    id,
                    receipt,
                    visibility_timeout,
                    text,
                },
            )
            .await?
            {
                Outcome::Updated(u) => Response::new(204)
                    .header("x-ms-popreceipt", u.pop_receipt)
                    .header("x-ms-time-next-visible", rfc1123(u.visible_ms)),
                o => return Err(unexpected(o)),
            }
        }
    })
}

async fn list_queues<D: Disk>(ctx: &Ctx<D>, req: &Request, t: &Target) -> Result<Response, ApiError> {
    let prefix = t.param("prefix").unwrap_or("").to_string();
    let max = match int_param(t, "maxresults")? {
        None => MAX_LIST_RESULTS,
        Some(n) if n <= 0 => {
            return Err(engine::QueueError::OutOfRangeQueryParameterValue {
                name: "maxresults",
                value: n.to_string(),
                min: 1,
                max: MAX_LIST_RESULTS as i64,
            }
            .into())
        }
        Some(n) => (n as usize).min(MAX_LIST_RESULTS),
    };
    let with_metadata = match t.param("include") {
        None => false,
        Some(v) => {
            for part in v.split(',') {
                if part.trim() != "metadata" {
                    return Err(ApiError::invalid_query("include", v, "Only metadata may be included."));
                }
            }
            true
        }
    };
    let marker = t.param("marker").filter(|m| !m.is_empty());
    let from = match marker {
        None => None,
        Some(m) => {
            let want = format!("/{}/", t.account);
            match m.strip_prefix(&want) {
                Some(name) if !name.is_empty() => Some(name.to_string()),
                _ => return Err(engine::QueueError::InvalidMarker.into()),
            }
        }
    };
    // Every core returns its first max+1 names from the marker on; the
    // merged (max+1)-th name, if any, is the next marker.
    let replies = ctx
        .router
        .exec_all(|| Command::List {
            account: t.account.clone(),
            prefix: prefix.clone(),
            from: from.clone(),
            max: max + 1,
        })
        .await;
    let mut all = Vec::new();
    for r in replies {
        match r? {
            Outcome::Listed(items, _) => all.extend(items),
            o => return Err(unexpected(o)),
        }
    }
    all.sort_by(|a, b| a.name.cmp(&b.name));
    let next = if all.len() > max {
        Some(format!("/{}/{}", t.account, all[max].name))
    } else {
        None
    };
    all.truncate(max);
    let host = req.header("host").unwrap_or("127.0.0.1:10001");
    let endpoint = if t.raw_path.starts_with(&format!("/{}", t.account)) {
        format!("http://{host}/{}", t.account)
    } else {
        format!("http://{host}/")
    };
    let mut s = format!(
        "{DECL}<EnumerationResults ServiceEndpoint=\"{}\"><Prefix>{}</Prefix>",
        escape(&endpoint),
        escape(&prefix)
    );
    if let Some(m) = marker {
        s.push_str(&format!("<Marker>{}</Marker>", escape(m)));
    }
    s.push_str(&format!("<MaxResults>{max}</MaxResults>"));
    if all.is_empty() {
        s.push_str("<Queues />");
    } else {
        s.push_str("<Queues>");
        for q in all {
            s.push_str(&format!("<Queue><Name>{}</Name>", escape(&q.name)));
            if with_metadata {
                if q.metadata.0.is_empty() {
                    s.push_str("<Metadata />");
                } else {
                    s.push_str("<Metadata>");
                    for (k, v) in &q.metadata.0 {
                        s.push_str(&format!("<{k}>{}</{k}>", escape(v)));
                    }
                    s.push_str("</Metadata>");
                }
            }
            s.push_str("</Queue>");
        }
        s.push_str("</Queues>");
    }
    match next {
        Some(n) => s.push_str(&format!("<NextMarker>{}</NextMarker>", escape(&n))),
        None => s.push_str("<NextMarker />"),
    }
    s.push_str("</EnumerationResults>");
    Ok(Response::new(200).xml(s))
}

async fn service_props<D: Disk>(ctx: &Ctx<D>, account: &str) -> Option<ServiceProperties> {
    match ctx
        .router
        .exec(
            0,
            Command::GetService {
                account: account.to_string(),
            },
        )
        .await
    {
        Ok(Outcome::Service(p)) => Some(*p),
        _ => None,
    }
}

fn list_has(list: &str, item: &str, case_insensitive: bool) -> bool {
    list.split(',').map(str::trim).any(|x| {
        x == "*"
            || if case_insensitive {
                x.eq_ignore_ascii_case(item)
            } else {
                x == item
            }
    })
}

fn header_allowed(allowed: &str, h: &str) -> bool {
    allowed
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .any(|a| match a.strip_suffix('*') {
            Some(prefix) => h.to_ascii_lowercase().starts_with(&prefix.to_ascii_lowercase()),
            None => a.eq_ignore_ascii_case(h),
        })
}

/// Preflight ("Preflight Queue Request"): no authentication, the resource need not exist.
async fn preflight<D: Disk>(ctx: &Ctx<D>, req: &Request) -> Result<Response, ApiError> {
    let t = parse_target(req, &ctx.addressing)?;
    let origin = req
        .header("origin")
        .ok_or_else(|| ApiError::invalid_header("Origin", ""))?;
    let method = req
        .header("access-control-request-method")
        .ok_or_else(|| ApiError::invalid_header("Access-Control-Request-Method", ""))?;
    let headers = req.header("access-control-request-headers").unwrap_or("");
    let fail = || {
        ApiError::new(
            403,
            "CorsPreflightFailure",
            "CORS not enabled or no matching rule found for this request.",
        )
    };
    if !ctx.accounts.contains_key(&t.account) {
        return Err(fail());
    }
    let props = service_props(ctx, &t.account).await.ok_or_else(fail)?;
    let rule = props.cors.iter().find(|r| {
        list_has(&r.allowed_origins, origin, true)
            && list_has(&r.allowed_methods, method, false)
            && headers
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .all(|h| header_allowed(&r.allowed_headers, h))
    });
    let rule = rule.ok_or_else(fail)?;
    // As on ordinary requests: a `*` rule answers `*` and never allows
    // credentials (a browser must not send cookies to any origin's page);
    // a listed origin is echoed, with credentials and `Vary: Origin`.
    let star = rule.allowed_origins.trim() == "*";
    let mut r = Response::new(200)
        .header("Access-Control-Allow-Origin", if star { "*" } else { origin })
        .header("Access-Control-Allow-Methods", method)
        .header("Access-Control-Max-Age", rule.max_age.to_string());
    if !star {
        r = r
            .header("Access-Control-Allow-Credentials", "true")
            .header("Vary", "Origin");
    }
    if !headers.is_empty() {
        r = r.header("Access-Control-Allow-Headers", headers);
    }
    Ok(r)
}

/// CORS headers on a normal response ("CORS support for the Azure Storage services").
async fn cors_headers<D: Disk>(ctx: &Ctx<D>, req: &Request, origin: &str, resp: &mut Response) {
    let Ok(t) = parse_target(req, &ctx.addressing) else {
        return;
    };
    if !ctx.accounts.contains_key(&t.account) {
        return;
    }
    let Some(props) = service_props(ctx, &t.account).await else {
        return;
    };
    if props.cors.is_empty() {
        return;
    }
    let rule = props
        .cors
        .iter()
        .find(|r| list_has(&r.allowed_origins, origin, true) && list_has(&r.allowed_methods, &req.method, false));
    let Some(rule) = rule else {
        resp.headers.push(("Vary".into(), "Origin".into()));
        return;
    };
    let star = rule.allowed_origins.trim() == "*";
    resp.headers.push((
        "Access-Control-Allow-Origin".into(),
        if star { "*".into() } else { origin.to_string() },
    ));
    let exposed: Vec<String> = resp
        .headers
        .iter()
        .map(|(n, _)| n.clone())
        .filter(|n| header_allowed(&rule.exposed_headers, n))
        .chain(
            rule.exposed_headers
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty() && !e.ends_with('*'))
                .map(str::to_string),
        )
        .collect();
    if !exposed.is_empty() {
        resp.headers
            .push(("Access-Control-Expose-Headers".into(), exposed.join(",")));
    }
    if !star {
        resp.headers.push(("Vary".into(), "Origin".into()));
        resp.headers
            .push(("Access-Control-Allow-Credentials".into(), "true".into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert!(valid_version("2026-10-06"));
        assert!(valid_version("3025-01-01"), "future versions are accepted");
        assert!(!valid_version("2009-09-18"));
        assert!(!valid_version("latest"));
        assert!(!valid_version("2026-1-06"));
    }
}
