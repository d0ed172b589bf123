//! Put Message: `POST /{queue}/messages?visibilitytimeout=&messagettl=` with
//! a `QueueMessage` body → 201 with the new message's id, times and receipt.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio;
use engine::disk::Disk;

pub struct PutMessage {
    queue: String,
    text: String,
    visibility_timeout: Option<i64>,
    ttl: Option<i64>,
}

impl Op for PutMessage {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::Letter('a'),
        account_sas: Some(("o", "a")),
    };

    fn parse(req: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        Ok(PutMessage {
            queue: super::queue_of(t)?,
            visibility_timeout: super::int_param(t, "visibilitytimeout")?,
            ttl: super::int_param(t, "messagettl")?,
            text: xmlio::parse_message_text(&req.body)?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let account = t.account.clone();
        let PutMessage {
            queue,
            text,
            visibility_timeout,
            ttl,
        } = self;
        let owner = ctx.router.owner_of(&account, &queue);
        let put = ctx
            .router
            .exec(owner, move |shard, _| async move {
                shard.put_message(&account, &queue, text, visibility_timeout, ttl).await
            })
            .await?;
        Ok(Response::new(201).xml(xmlio::write_put(&put)))
    }
}
