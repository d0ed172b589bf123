//! Set Queue Metadata: `PUT /{queue}?comp=metadata` with `x-ms-meta-*`
//! headers (replacing all metadata) → 204.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use engine::disk::Disk;
use engine::model::Metadata;

pub struct SetQueueMetadata {
    queue: String,
    metadata: Metadata,
}

impl Op for SetQueueMetadata {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::NotPermitted,
        account_sas: Some(("c", "w")),
    };

    fn parse(req: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        Ok(SetQueueMetadata {
            queue: super::queue_of(t)?,
            metadata: super::metadata_of(req)?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let (account, SetQueueMetadata { queue, metadata }) = (t.account.clone(), self);
        super::check_dead_letter_queue(ctx, &account, &queue, &metadata).await?;
        let owner = ctx.router.owner_of(&account, &queue);
        ctx.router
            .exec(owner, move |shard, _| async move {
                shard.set_metadata(&account, &queue, metadata).await
            })
            .await?;
        Ok(Response::new(204))
    }
}
