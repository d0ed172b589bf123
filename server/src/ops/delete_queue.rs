//! Delete Queue: `DELETE /{queue}` → 204.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use engine::disk::Disk;

pub struct DeleteQueue {
    queue: String,
}

impl Op for DeleteQueue {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::NotPermitted,
        account_sas: Some(("c", "d")),
    };

    fn parse(_: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        Ok(DeleteQueue {
            queue: super::queue_of(t)?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let (account, queue) = (t.account.clone(), self.queue);
        let owner = ctx.router.owner_of(&account, &queue);
        ctx.router
            .exec(owner, move |shard, _| async move {
                shard.delete_queue(&account, &queue).await
            })
            .await?;
        Ok(Response::new(204))
    }
}
