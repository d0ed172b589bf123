//! Get Queue ACL: `GET|HEAD /{queue}?comp=acl` → 200 with the stored access
//! policies. Account key only.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio;
use engine::disk::Disk;

pub struct GetQueueAcl {
    queue: String,
}

impl Op for GetQueueAcl {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::OwnerOnly,
        account_sas: None,
    };

    fn parse(_: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        Ok(GetQueueAcl {
            queue: super::queue_of(t)?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let acl = stored_policies(ctx, &t.account, &self.queue).await?;
        Ok(Response::new(200).xml(xmlio::write_signed_identifiers(&acl)))
    }
}

/// The queue's stored access policies, read on the core that owns it (also
/// what a service SAS with `si` is checked against).
pub async fn stored_policies<D: Disk>(
    ctx: &Ctx<D>,
    account: &str,
    queue: &str,
) -> Result<Vec<engine::model::SignedIdentifier>, ApiError> {
    let (account, queue) = (account.to_string(), queue.to_string());
    let owner = ctx.router.owner_of(&account, &queue);
    Ok(ctx
        .router
        .exec(
            owner,
            move |shard, _| async move { shard.get_acl(&account, &queue).await },
        )
        .await?)
}
