//! Clear Messages: `DELETE /{queue}/messages` → 204; visible and invisible
//! messages alike are gone.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use engine::disk::Disk;

pub struct ClearMessages {
    queue: String,
}

impl Op for ClearMessages {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::NotPermitted,
        account_sas: Some(("oc", "d")),
    };

    fn parse(_: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        Ok(ClearMessages {
            queue: super::queue_of(t)?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let (account, queue) = (t.account.clone(), self.queue);
        let owner = ctx.router.owner_of(&account, &queue);
        ctx.router
            .exec(owner, move |shard, _| async move {
                shard.clear_messages(&account, &queue).await
            })
            .await?;
        Ok(Response::new(204))
    }
}
