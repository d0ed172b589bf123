//! Get Messages: `GET /{queue}/messages?numofmessages=&visibilitytimeout=` →
//! 200 with up to 32 messages, each now invisible with a fresh receipt.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio;
use engine::disk::Disk;

pub struct GetMessages {
    queue: String,
    n: Option<i64>,
    visibility_timeout: Option<i64>,
}

impl Op for GetMessages {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::Letter('p'),
        account_sas: Some(("o", "p")),
    };

    fn parse(_: &Request, t: &Target) -> Result<Self, ApiError> {
        Ok(GetMessages {
            queue: super::queue_of(t)?,
            n: super::int_param(t, "numofmessages")?,
            visibility_timeout: super::int_param(t, "visibilitytimeout")?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target) -> Result<Response, ApiError> {
        let account = t.account.clone();
        let GetMessages {
            queue,
            n,
            visibility_timeout,
        } = self;
        let owner = ctx.router.owner_of(&account, &queue);
        let got = ctx
            .router
            .exec(owner, move |shard, _| async move {
                shard.get_messages(&account, &queue, n, visibility_timeout).await
            })
            .await?;
        Ok(Response::new(200).xml(xmlio::write_received(&got)))
    }
}
