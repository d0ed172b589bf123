//! Get Queue Metadata (the SDKs' "get properties"): `GET|HEAD /{queue}?comp=metadata`
//! → 200 with `x-ms-approximate-messages-count` and `x-ms-meta-*`.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use engine::disk::Disk;

pub struct GetQueueMetadata {
    queue: String,
}

impl Op for GetQueueMetadata {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::Letter('r'),
        account_sas: Some(("c", "r")),
    };

    fn parse(_: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        Ok(GetQueueMetadata {
            queue: super::queue_of(t)?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let (account, queue) = (t.account.clone(), self.queue);
        let owner = ctx.router.owner_of(&account, &queue);
        let p = ctx
            .router
            .exec(owner, move |shard, _| async move {
                shard.get_properties(&account, &queue).await
            })
            .await?;
        let mut r = Response::new(200).header(
            "x-ms-approximate-messages-count",
            p.approximate_message_count.to_string(),
        );
        for (n, v) in p.metadata.0 {
            r = r.header(format!("x-ms-meta-{n}"), v);
        }
        Ok(r)
    }
}
