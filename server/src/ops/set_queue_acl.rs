//! Set Queue ACL: `PUT /{queue}?comp=acl` with a `SignedIdentifiers`
//! document (an empty body removes every policy) → 204. Account key only.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio;
use engine::disk::Disk;
use engine::model::SignedIdentifier;

pub struct SetQueueAcl {
    queue: String,
    acl: Vec<SignedIdentifier>,
}

impl Op for SetQueueAcl {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::OwnerOnly,
        account_sas: None,
    };

    fn parse(req: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        Ok(SetQueueAcl {
            queue: super::queue_of(t)?,
            acl: xmlio::parse_signed_identifiers(&req.body.bytes())?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let (account, SetQueueAcl { queue, acl }) = (t.account.clone(), self);
        let owner = ctx.router.owner_of(&account, &queue);
        ctx.router
            .exec(owner, move |shard, _| async move {
                shard.set_acl(&account, &queue, acl).await
            })
            .await?;
        Ok(Response::new(204))
    }
}
