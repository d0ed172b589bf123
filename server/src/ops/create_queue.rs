//! Create Queue: `PUT /{queue}` with optional `x-ms-meta-*` headers. 201 when
//! created, 204 when it existed with the same metadata.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use engine::disk::Disk;
use engine::model::Metadata;
use engine::shard::Created;

pub struct CreateQueue {
    queue: String,
    metadata: Metadata,
}

impl Op for CreateQueue {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::NotPermitted,
        account_sas: Some(("c", "wc")),
    };

    fn parse(req: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        Ok(CreateQueue {
            queue: super::queue_of(t)?,
            metadata: super::metadata_of(req)?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let (account, CreateQueue { queue, metadata }) = (t.account.clone(), self);
        super::check_dead_letter_queue(ctx, &account, &queue, &metadata).await?;
        let owner = ctx.router.owner_of(&account, &queue);
        let created = ctx
            .router
            .exec(owner, move |shard, _| async move {
                shard.create_queue(&account, &queue, metadata).await
            })
            .await?;
        Ok(Response::new(match created {
            Created::New => 201,
            Created::AlreadyExisted => 204,
        }))
    }
}
