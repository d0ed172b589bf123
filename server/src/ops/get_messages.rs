//! Get Messages: `GET /{queue}/messages?numofmessages=&visibilitytimeout=` →
//! 200 with up to 32 messages, each now invisible with a fresh receipt.
//!
//! Long polling (Hematite's extension, docs/EXTENSIONS.md): on an empty
//! queue the call waits up to `x-hematite-wait-seconds` (0–20), or the
//! queue's `hematite_receive_wait_seconds`, for a message. Without either
//! it answers at once, as Azure does.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio;
use engine::disk::Disk;
use engine::limits::MAX_RECEIVE_WAIT_SECS;

/// The request header that asks for (or, with 0, refuses) a long poll.
pub const WAIT_HEADER: &str = "x-hematite-wait-seconds";

pub struct GetMessages {
    queue: String,
    n: Option<i64>,
    visibility_timeout: Option<i64>,
    wait_secs: Option<u64>,
}

impl Op for GetMessages {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::Letter('p'),
        account_sas: Some(("o", "p")),
    };

    fn parse(req: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        let wait_secs = match req.header(WAIT_HEADER) {
            None => None,
            Some(v) => Some(
                v.parse::<u64>()
                    .ok()
                    .filter(|w| *w <= MAX_RECEIVE_WAIT_SECS && !v.starts_with('+'))
                    .ok_or_else(|| ApiError::invalid_header(WAIT_HEADER, v))?,
            ),
        };
        Ok(GetMessages {
            queue: super::queue_of(t)?,
            n: super::int_param(t, "numofmessages")?,
            visibility_timeout: super::int_param(t, "visibilitytimeout")?,
            wait_secs,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, req: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let account = t.account.clone();
        let GetMessages {
            queue,
            n,
            visibility_timeout,
            wait_secs,
        } = self;
        // A wait never outlasts the request timeout (the engine measures
        // it on the monotonic clock).
        let max_wait_ms = u64::try_from(ctx.limits.request_timeout.as_millis()).unwrap_or(u64::MAX);
        let owner = ctx.router.owner_of(&account, &queue);
        // Tells the owning core, perhaps another one, to stop waiting when
        // the peer hangs up (or when this request is dropped at shutdown).
        let (stop_tx, stop_rx) = futures::channel::oneshot::channel::<()>();
        let get = ctx.router.exec(owner, move |shard, _| async move {
            let cancel = async move {
                let _ = stop_rx.await;
            };
            shard
                .receive_messages(&account, &queue, n, visibility_timeout, wait_secs, max_wait_ms, cancel)
                .await
        });
        // Pinned once for both arms: a future awaited in one arm and
        // pinned in the other was laid out twice in this one's state.
        let get = std::pin::pin!(get);
        let got = match &req.hangup {
            None => get.await?,
            Some(hangup) => match futures::future::select(get, std::pin::pin!(hangup.wait())).await {
                futures::future::Either::Left((got, _)) => got?,
                futures::future::Either::Right((_, get)) => {
                    let _ = stop_tx.send(());
                    get.await?
                }
            },
        };
        Ok(Response::new(200).xml(xmlio::write_received(&got)))
    }
}
