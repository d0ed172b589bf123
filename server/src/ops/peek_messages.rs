//! Peek Messages: `GET /{queue}/messages?peekonly=true&numofmessages=` → 200
//! with up to 32 visible messages, unchanged (no receipt).

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio;
use engine::disk::Disk;

pub struct PeekMessages {
    queue: String,
    n: Option<i64>,
}

impl Op for PeekMessages {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::Letter('r'),
        account_sas: Some(("o", "r")),
    };

    fn parse(_: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        Ok(PeekMessages {
            queue: super::queue_of(t)?,
            n: super::int_param(t, "numofmessages")?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let (account, PeekMessages { queue, n }) = (t.account.clone(), self);
        let owner = ctx.router.owner_of(&account, &queue);
        let peeked = ctx
            .router
            .exec(owner, move |shard, _| async move {
                shard.peek_messages(&account, &queue, n).await
            })
            .await?;
        Ok(Response::new(200).xml(xmlio::write_peeked(&peeked)))
    }
}
