//! One module per Azure operation, in the manner of mini-redis's `cmd/`.
//! Each holds everything about its operation: how it is read from the
//! routed request, the permission it needs, the work it sends to the core
//! that owns its data, and the answer it writes. This file holds the route
//! table and the registry that connects the two.
//!
//! **Adding an operation** touches its own file and two places here: a
//! variant with its route in [`route`], and one line in [`run`].
// Input from the network flows through here: no unchecked arithmetic,
// indexing or panicking unwraps (docs/SECURITY.md).
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::string_slice
)]

mod clear_messages;
pub mod cors;
mod create_queue;
mod delete_message;
mod delete_message_batch;
mod delete_queue;
mod get_messages;
mod get_queue_acl;
mod get_queue_metadata;
mod get_service_properties;
mod get_service_stats;
mod list_queues;
mod peek_messages;
mod put_message;
mod put_message_batch;
mod set_queue_acl;
mod set_queue_metadata;
mod set_service_properties;
mod update_message;

pub use get_queue_acl::stored_policies;

use crate::addressing::Target;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use engine::attributes::{self, QueueAttributes};
use engine::disk::Disk;
use engine::model::Metadata;

/// A dead-letter queue named in `metadata` must exist when it is named
/// (it may live on another core). Anything else wrong with the reserved
/// keys is left to the engine, which reports it in its own order.
async fn check_dead_letter_queue<D: Disk>(
    ctx: &Ctx<D>,
    account: &str,
    queue: &str,
    metadata: &Metadata,
) -> Result<(), ApiError> {
    let Ok(QueueAttributes {
        redrive: Some(redrive), ..
    }) = QueueAttributes::parse(queue, metadata)
    else {
        return Ok(());
    };
    let refuse = |reason: &str| -> ApiError {
        engine::QueueError::InvalidQueueAttribute {
            key: attributes::DEAD_LETTER_QUEUE.to_string(),
            value: redrive.dead_letter_queue.clone(),
            reason: reason.into(),
        }
        .into()
    };
    // Follow the chain of dead-letter queues: the first must exist, and
    // none may lead back here (a cycle would move messages round forever).
    let mut next = redrive.dead_letter_queue.clone();
    for hop in 0..engine::limits::MAX_DEAD_LETTER_CHAIN {
        let (acct, q) = (account.to_string(), next.clone());
        let owner = ctx.router.owner_of(&acct, &q);
        let found = ctx
            .router
            .exec(
                owner,
                move |shard, _| async move { shard.get_properties(&acct, &q).await },
            )
            .await;
        let metadata = match found {
            Ok(p) => p.metadata,
            Err(engine::QueueError::QueueNotFound) if hop == 0 => {
                return Err(refuse("no queue of that name exists in this account"))
            }
            Err(engine::QueueError::QueueNotFound) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        match QueueAttributes::of_stored(&next, &metadata).redrive {
            None => return Ok(()),
            Some(r) if r.dead_letter_queue == queue => {
                return Err(refuse("its dead-letter queues lead back to this queue"))
            }
            Some(r) => next = r.dead_letter_queue,
        }
    }
    Err(refuse("the chain of dead-letter queues is too long"))
}

/// What a SAS must grant for an operation. The account key may do anything.
#[derive(Debug, Clone, Copy)]
pub struct Needs {
    pub service_sas: SasRule,
    /// Account SAS: one of these resource types (`s`, `c`, `o`) and one of
    /// these permission letters; `None`: only the account key may.
    pub account_sas: Option<(&'static str, &'static str)>,
}

/// What a service SAS (one queue, letters `raup`) may do for an operation.
#[derive(Debug, Clone, Copy)]
pub enum SasRule {
    /// Allowed with this permission letter.
    Letter(char),
    /// Never with a service SAS: 403 `AuthorizationPermissionMismatch`.
    NotPermitted,
    /// Only with the account key: 403 `AuthorizationFailure` (ACLs).
    OwnerOnly,
}

/// One Azure operation. `parse` runs on the core that accepted the
/// connection; `run` sends work to the core that owns the data through the
/// router and writes the answer back on the accepting core.
#[allow(async_fn_in_trait)] // used with generics on one core, never boxed or sent
pub trait Op: Sized {
    const NEEDS: Needs;
    /// Reads the operation's parameters; every error is the client's.
    fn parse(req: &Request, t: &Target<'_>) -> Result<Self, ApiError>;
    async fn run<D: Disk>(self, ctx: &Ctx<D>, req: &Request, t: &Target<'_>) -> Result<Response, ApiError>;
}

/// Authorizes, checks the body headers and parses one operation, which
/// the registry then runs. Not itself async: as a step of its own around
/// the operation's future it was one more state every request wrote into
/// its connection's task and read back after the commit's wait.
fn prepare<O: Op>(req: &Request, t: &Target<'_>, who: &Principal<'_>) -> Result<O, ApiError> {
    crate::auth::authorize(who, &O::NEEDS)?;
    check_body_headers(req)?;
    O::parse(req, t)
}

/// The registry: one line per operation.
pub async fn run<D: Disk>(
    op: Operation,
    ctx: &Ctx<D>,
    req: &Request,
    t: &Target<'_>,
    who: &Principal<'_>,
) -> Result<Response, ApiError> {
    use Operation::*;
    // Bodies above Azure's limit exist only with `--max-message-kib` above
    // 64, for message text: every other operation keeps Azure's limit.
    if req.body.len() > crate::limits::MAX_BODY_BYTES && !matches!(op, PutMessage | UpdateMessage | PutMessageBatch) {
        return Err(ApiError::body_too_large(crate::limits::MAX_BODY_BYTES));
    }
    // One line per operation: `prepare`, then the operation's own future,
    // awaited here rather than inside a step of its own (see `prepare`).
    macro_rules! go {
        ($op:ty) => {
            prepare::<$op>(req, t, who)?.run(ctx, req, t).await
        };
    }
    match op {
        ListQueues => go!(list_queues::ListQueues),
        GetServiceProperties => go!(get_service_properties::GetServiceProperties),
        SetServiceProperties => go!(set_service_properties::SetServiceProperties),
        GetServiceStats => go!(get_service_stats::GetServiceStats),
        CreateQueue => go!(create_queue::CreateQueue),
        DeleteQueue => go!(delete_queue::DeleteQueue),
        GetQueueMetadata => go!(get_queue_metadata::GetQueueMetadata),
        SetQueueMetadata => go!(set_queue_metadata::SetQueueMetadata),
        GetQueueAcl => go!(get_queue_acl::GetQueueAcl),
        SetQueueAcl => go!(set_queue_acl::SetQueueAcl),
        PutMessage => go!(put_message::PutMessage),
        GetMessages => go!(get_messages::GetMessages),
        PeekMessages => go!(peek_messages::PeekMessages),
        ClearMessages => go!(clear_messages::ClearMessages),
        DeleteMessage => go!(delete_message::DeleteMessage),
        UpdateMessage => go!(update_message::UpdateMessage),
        DeleteMessageBatch => go!(delete_message_batch::DeleteMessageBatch),
        PutMessageBatch => go!(put_message_batch::PutMessageBatch),
    }
}

/// Every operation of the queue service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    ListQueues,
    GetServiceProperties,
    SetServiceProperties,
    GetServiceStats,
    CreateQueue,
    DeleteQueue,
    GetQueueMetadata,
    SetQueueMetadata,
    GetQueueAcl,
    SetQueueAcl,
    PutMessage,
    GetMessages,
    PeekMessages,
    ClearMessages,
    DeleteMessage,
    UpdateMessage,
    /// Hematite extensions (docs/EXTENSIONS.md).
    DeleteMessageBatch,
    PutMessageBatch,
}

impl Operation {
    /// The operation's name in metrics and the request log.
    pub fn name(self) -> &'static str {
        use Operation::*;
        match self {
            ListQueues => "list_queues",
            GetServiceProperties => "get_service_properties",
            SetServiceProperties => "set_service_properties",
            GetServiceStats => "get_service_stats",
            CreateQueue => "create_queue",
            DeleteQueue => "delete_queue",
            GetQueueMetadata => "get_queue_metadata",
            SetQueueMetadata => "set_queue_metadata",
            GetQueueAcl => "get_queue_acl",
            SetQueueAcl => "set_queue_acl",
            PutMessage => "put_message",
            GetMessages => "get_messages",
            PeekMessages => "peek_messages",
            ClearMessages => "clear_messages",
            DeleteMessage => "delete_message",
            UpdateMessage => "update_message",
            DeleteMessageBatch => "delete_message_batch",
            PutMessageBatch => "put_message_batch",
        }
    }
}

fn bad_comp(comp: &str) -> ApiError {
    ApiError::invalid_query("comp", comp, "The comp value is not valid for this resource.")
}

/// Maps method + target to the operation (the request line of each operation in the REST reference).
pub fn route(method: &str, t: &Target<'_>) -> Result<Operation, ApiError> {
    use Operation::*;
    let comp = t.param("comp");
    let restype = t.param("restype");
    // HEAD exists only where Azure defines it: Get Queue Metadata and Get
    // Queue ACL. Anywhere else it would run a GET (a dequeue on /messages).
    let m = match method {
        "HEAD" if t.queue.is_some() && !t.messages && matches!(comp, Some("metadata" | "acl")) => "GET",
        "HEAD" => return Err(ApiError::unsupported_verb()),
        other => other,
    };
    let Some(_) = &t.queue else {
        return match (m, restype, comp) {
            ("GET", _, Some("list")) => Ok(ListQueues),
            ("GET", Some("service"), Some("properties")) => Ok(GetServiceProperties),
            ("PUT", Some("service"), Some("properties")) => Ok(SetServiceProperties),
            ("GET", Some("service"), Some("stats")) => Ok(GetServiceStats),
            (_, _, Some("list" | "properties" | "stats")) => Err(ApiError::unsupported_verb()),
            (_, _, Some(c)) => Err(bad_comp(c)),
            _ => Err(ApiError::invalid_uri()),
        };
    };
    if t.message_id.is_some() {
        if let Some(c) = comp {
            return Err(bad_comp(c));
        }
        return match m {
            "DELETE" => Ok(DeleteMessage),
            "PUT" => Ok(UpdateMessage),
            _ => Err(ApiError::unsupported_verb()),
        };
    }
    if t.messages {
        // Message operations take no comp; accepting one would let a signed
        // `?comp=metadata` read run as a dequeue. The extension comps are
        // POSTs and need the permission of the operation they batch.
        match (m, comp) {
            ("POST", Some("batchdelete")) => return Ok(DeleteMessageBatch),
            ("POST", Some("batch")) => return Ok(PutMessageBatch),
            (_, Some(c)) => return Err(bad_comp(c)),
            _ => {}
        }
        return match m {
            "POST" => Ok(PutMessage),
            "GET" if t.param("peekonly").is_some_and(|v| v.eq_ignore_ascii_case("true")) => Ok(PeekMessages),
            "GET" => Ok(GetMessages),
            "DELETE" => Ok(ClearMessages),
            _ => Err(ApiError::unsupported_verb()),
        };
    }
    match (m, comp) {
        ("PUT", None) => Ok(CreateQueue),
        ("DELETE", None) => Ok(DeleteQueue),
        ("GET", Some("metadata")) => Ok(GetQueueMetadata),
        ("PUT", Some("metadata")) => Ok(SetQueueMetadata),
        ("GET", Some("acl")) => Ok(GetQueueAcl),
        ("PUT", Some("acl")) => Ok(SetQueueAcl),
        (_, Some(c)) if c != "metadata" && c != "acl" => Err(bad_comp(c)),
        ("GET", None) => Err(ApiError::invalid_uri()),
        _ => Err(ApiError::unsupported_verb()),
    }
}

/// What `op` needs, for tests of the authorization tables.
#[cfg(test)]
pub fn needs(op: Operation) -> Needs {
    use Operation::*;
    match op {
        ListQueues => <list_queues::ListQueues as Op>::NEEDS,
        GetServiceProperties => <get_service_properties::GetServiceProperties as Op>::NEEDS,
        SetServiceProperties => <set_service_properties::SetServiceProperties as Op>::NEEDS,
        GetServiceStats => <get_service_stats::GetServiceStats as Op>::NEEDS,
        CreateQueue => <create_queue::CreateQueue as Op>::NEEDS,
        DeleteQueue => <delete_queue::DeleteQueue as Op>::NEEDS,
        GetQueueMetadata => <get_queue_metadata::GetQueueMetadata as Op>::NEEDS,
        SetQueueMetadata => <set_queue_metadata::SetQueueMetadata as Op>::NEEDS,
        GetQueueAcl => <get_queue_acl::GetQueueAcl as Op>::NEEDS,
        SetQueueAcl => <set_queue_acl::SetQueueAcl as Op>::NEEDS,
        PutMessage => <put_message::PutMessage as Op>::NEEDS,
        GetMessages => <get_messages::GetMessages as Op>::NEEDS,
        PeekMessages => <peek_messages::PeekMessages as Op>::NEEDS,
        ClearMessages => <clear_messages::ClearMessages as Op>::NEEDS,
        DeleteMessage => <delete_message::DeleteMessage as Op>::NEEDS,
        UpdateMessage => <update_message::UpdateMessage as Op>::NEEDS,
        DeleteMessageBatch => <delete_message_batch::DeleteMessageBatch as Op>::NEEDS,
        PutMessageBatch => <put_message_batch::PutMessageBatch as Op>::NEEDS,
    }
}

// ----- parameters shared by several operations -----

/// Queue operations take no conditional headers (Azure answers 400
/// `ConditionHeadersNotSupported`), and a `Content-MD5` must match the body.
fn check_body_headers(req: &Request) -> Result<(), ApiError> {
    use base64::Engine;
    use md5::{Digest, Md5};
    // Each name a literal at its own call, so its tag and bloom bit fold to
    // constants (`Headers::get`); a loop over the names computed them at
    // run time on every put, about 100 instructions.
    let conditional = req.header("if-match").is_some()
        || req.header("if-none-match").is_some()
        || req.header("if-modified-since").is_some()
        || req.header("if-unmodified-since").is_some();
    if conditional {
        return Err(ApiError::new(
            400,
            "ConditionHeadersNotSupported",
            "Condition headers are not supported.",
        ));
    }
    let Some(md5) = req.header("content-md5") else {
        return Ok(());
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let Some(given) = b64.decode(md5).ok().filter(|d| d.len() == 16) else {
        return Err(ApiError::new(
            400,
            "InvalidMd5",
            "The MD5 value specified in the request is invalid. The MD5 value must be 128 bits and Base64-encoded.",
        )
        .detail("HeaderName", "Content-MD5")
        .detail("HeaderValue", md5));
    };
    let actual = Md5::digest(&*req.body.bytes());
    if actual.as_slice() != given.as_slice() {
        return Err(ApiError::new(
            400,
            "Md5Mismatch",
            "The MD5 value specified in the request did not match with the MD5 value calculated by the server.",
        )
        .detail("UserSpecifiedMd5", md5)
        .detail("ServerCalculatedMd5", b64.encode(actual)));
    }
    Ok(())
}

/// An integer query parameter, if present.
fn int_param(t: &Target<'_>, name: &'static str) -> Result<Option<i64>, ApiError> {
    match t.param(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| ApiError::invalid_query(name, v, "The value must be an integer.")),
    }
}

/// A query parameter the operation cannot do without.
fn required<'a>(t: &'a Target<'_>, name: &'static str) -> Result<&'a str, ApiError> {
    t.param(name)
        .ok_or_else(|| engine::QueueError::MissingRequiredQueryParameter { name }.into())
}

/// Metadata from `x-ms-meta-*` headers ("Set Queue Metadata"). The bare
/// `x-ms-meta` header Python sends is ignored.
fn metadata_of(req: &Request) -> Result<Metadata, ApiError> {
    let mut md = Vec::new();
    const PREFIX: &str = "x-ms-meta-";
    for (n, v) in &req.headers {
        if !n.to_ascii_lowercase().starts_with(PREFIX) {
            continue;
        }
        // The prefix is ASCII, so its length is a character boundary.
        let name = n.get(PREFIX.len()..).unwrap_or_default();
        if name.is_empty() {
            return Err(engine::QueueError::EmptyMetadataKey.into());
        }
        md.push((name.to_string(), v.trim().to_string()));
    }
    Ok(Metadata(md))
}

/// The queue a queue-level operation names (routing guarantees one).
fn queue_of(t: &Target<'_>) -> Result<String, ApiError> {
    queue_of_ref(t).map(str::to_string)
}

/// [`queue_of`], borrowed.
fn queue_of_ref<'t>(t: &'t Target<'_>) -> Result<&'t str, ApiError> {
    t.queue.as_deref().ok_or_else(ApiError::invalid_uri)
}

/// A batch request (docs/EXTENSIONS.md) holds 1 to `MAX_BATCH_MESSAGES`
/// `item` elements.
fn check_batch_len(n: usize, item: &str) -> Result<(), ApiError> {
    if n == 0 || n > crate::limits::MAX_BATCH_MESSAGES {
        return Err(ApiError::invalid_xml(format!(
            "A batch holds 1 to {} {item} elements.",
            crate::limits::MAX_BATCH_MESSAGES
        )));
    }
    Ok(())
}

/// One failed entry of a batch answer: the status and error code the single
/// operation would have answered.
fn write_batch_error(xml: &mut String, e: engine::QueueError) {
    use std::fmt::Write;
    let e = ApiError::from(e);
    let _ = write!(xml, "<Status>{}</Status><Code>{}</Code>", e.status, e.code);
}

/// The message id a message-level operation names (routing guarantees one).
fn message_id_of(t: &Target<'_>) -> Result<String, ApiError> {
    t.message_id.clone().ok_or_else(ApiError::invalid_uri)
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
    use crate::addressing::tests::{parse_target_, req};

    #[test]
    fn service_stats_route_on_the_secondary() {
        let t = parse_target_(&req(
            "GET",
            "/devstoreaccount1-secondary/?restype=service&comp=stats",
            "localhost:10001",
        ))
        .unwrap();
        assert_eq!(route("GET", &t).unwrap(), Operation::GetServiceStats);
    }

    #[test]
    fn routing_table() {
        use Operation::*;
        let cases = [
            ("GET", "/a/?comp=list", Ok(ListQueues)),
            ("PUT", "/a?restype=service&comp=properties", Ok(SetServiceProperties)),
            ("PUT", "/a/q", Ok(CreateQueue)),
            ("DELETE", "/a/q", Ok(DeleteQueue)),
            ("HEAD", "/a/q?comp=metadata", Ok(GetQueueMetadata)),
            ("PUT", "/a/q?comp=acl", Ok(SetQueueAcl)),
            ("POST", "/a/q/messages?visibilitytimeout=1", Ok(PutMessage)),
            ("GET", "/a/q/messages?peekonly=TRUE", Ok(PeekMessages)),
            ("GET", "/a/q/messages", Ok(GetMessages)),
            ("DELETE", "/a/q/messages", Ok(ClearMessages)),
            ("DELETE", "/a/q/messages/id?popreceipt=x", Ok(DeleteMessage)),
            ("PUT", "/a/q/messages/id?popreceipt=x", Ok(UpdateMessage)),
            ("POST", "/a/q/messages?comp=batchdelete", Ok(DeleteMessageBatch)),
            ("POST", "/a/q/messages?comp=batch", Ok(PutMessageBatch)),
        ];
        for (m, p, want) in cases {
            assert_eq!(
                route(m, &parse_target_(&req(m, p, "127.0.0.1")).unwrap()),
                want,
                "{m} {p}"
            );
        }
        assert_eq!(
            route(
                "PATCH",
                &parse_target_(&req("PATCH", "/a/q/messages", "127.0.0.1")).unwrap()
            )
            .unwrap_err()
            .code,
            "UnsupportedHttpVerb"
        );
        assert_eq!(
            route(
                "GET",
                &parse_target_(&req("GET", "/a/q?comp=bogus", "127.0.0.1")).unwrap()
            )
            .unwrap_err()
            .code,
            "InvalidQueryParameterValue"
        );
    }
}
