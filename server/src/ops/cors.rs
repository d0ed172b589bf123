//! CORS (Microsoft's "CORS support for the Azure Storage services"): the
//! unauthenticated preflight (`OPTIONS`, "Preflight Queue Request") and the
//! headers added to ordinary answers. The rules are the account's service
//! properties, kept on core 0.

use super::get_service_properties::service_properties;
use crate::addressing::TargetCache;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use engine::disk::Disk;

/// Whether a comma list holds `item` (or `*`).
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

/// A rule that admits any origin (`*` anywhere in its list) never echoes an
/// origin and never allows credentials.
fn is_star(origins: &str) -> bool {
    origins.split(',').any(|o| o.trim() == "*")
}

/// Whether header `h` is allowed by a list of names and `prefix*` entries.
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

/// Preflight: no authentication, and the resource need not exist.
pub async fn preflight<D: Disk>(ctx: &Ctx<D>, req: &Request, targets: &mut TargetCache) -> Result<Response, ApiError> {
    let t = targets.parse(req, &ctx.addressing)?;
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
    let props = service_properties(ctx, &t.account).await.map_err(|_| fail())?;
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
    let star = is_star(&rule.allowed_origins);
    let mut r = Response::new(200)
        .header(
            "Access-Control-Allow-Origin",
            if star { "*".to_string() } else { origin.to_string() },
        )
        .header("Access-Control-Allow-Methods", method.to_string())
        .header("Access-Control-Max-Age", rule.max_age.to_string());
    if !star {
        r = r
            .header("Access-Control-Allow-Credentials", "true")
            .header("Vary", "Origin");
    }
    if !headers.is_empty() {
        r = r.header("Access-Control-Allow-Headers", headers.to_string());
    }
    Ok(r)
}

/// CORS headers on an ordinary answer (errors included) to a request that
/// carries `Origin`. The target was just parsed for the request itself;
/// it is taken from the connection's cache when kept there (a target the
/// connection sent before), and parsed again otherwise.
pub async fn add_headers<D: Disk>(
    ctx: &Ctx<D>,
    req: &Request,
    origin: &str,
    resp: &mut Response,
    targets: &TargetCache,
) {
    let Ok(t) = targets.get(req, &ctx.addressing) else {
        return;
    };
    if !ctx.accounts.contains_key(&t.account) {
        return;
    }
    let Ok(props) = service_properties(ctx, &t.account).await else {
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
    let star = is_star(&rule.allowed_origins);
    resp.headers.push((
        "Access-Control-Allow-Origin".into(),
        if star { "*".into() } else { origin.to_string().into() },
    ));
    let exposed: Vec<String> = resp
        .headers
        .iter()
        .map(|(n, _)| n.to_string())
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
            .push(("Access-Control-Expose-Headers".into(), exposed.join(",").into()));
    }
    if !star {
        resp.headers.push(("Vary".into(), "Origin".into()));
        resp.headers
            .push(("Access-Control-Allow-Credentials".into(), "true".into()));
    }
}
