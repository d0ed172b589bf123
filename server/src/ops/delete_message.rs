//! Delete Message: `DELETE /{queue}/messages/{id}?popreceipt=` → 204, only
//! with the receipt of the message's newest dequeue or update.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use engine::disk::Disk;

pub struct DeleteMessage {
    queue: String,
    id: String,
    receipt: String,
}

impl Op for DeleteMessage {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::Letter('p'),
        account_sas: Some(("oc", "p")),
    };

    fn parse(_: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        Ok(DeleteMessage {
            queue: super::queue_of(t)?,
            id: super::message_id_of(t)?,
            receipt: super::required(t, "popreceipt")?.to_string(),
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let (account, DeleteMessage { queue, id, receipt }) = (t.account.clone(), self);
        let owner = ctx.router.owner_of(&account, &queue);
        ctx.router
            .exec(owner, move |shard, _| async move {
                shard.delete_message(&account, &queue, &id, &receipt).await
            })
            .await?;
        Ok(Response::new(204))
    }
}
