//! Update Message: `PUT /{queue}/messages/{id}?popreceipt=&visibilitytimeout=`
//! with an optional new `QueueMessage` body → 204 with the new receipt and
//! next-visible time.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio;
use engine::disk::Disk;

pub struct UpdateMessage {
    queue: String,
    id: String,
    receipt: String,
    visibility_timeout: i64,
    text: Option<String>,
}

impl Op for UpdateMessage {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::Letter('u'),
        account_sas: Some(("oc", "u")),
    };

    fn parse(req: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        let receipt = super::required(t, "popreceipt")?.to_string();
        let vt = super::required(t, "visibilitytimeout")?;
        let visibility_timeout = vt
            .trim()
            .parse::<i64>()
            .map_err(|_| ApiError::invalid_query("visibilitytimeout", vt, "The value must be an integer."))?;
        // No body (or only whitespace): the text stays as it is.
        let text = if req.body.bytes().iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            Some(xmlio::parse_message_text(&req.body.bytes())?)
        };
        Ok(UpdateMessage {
            queue: super::queue_of(t)?,
            id: super::message_id_of(t)?,
            receipt,
            visibility_timeout,
            text,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let account = t.account.clone();
        let UpdateMessage {
            queue,
            id,
            receipt,
            visibility_timeout,
            text,
        } = self;
        let owner = ctx.router.owner_of(&account, &queue);
        let u = ctx
            .router
            .exec(owner, move |shard, _| async move {
                shard
                    .update_message(&account, &queue, &id, &receipt, Some(visibility_timeout), text)
                    .await
            })
            .await?;
        Ok(Response::new(204)
            .header("x-ms-popreceipt", u.pop_receipt)
            .header("x-ms-time-next-visible", crate::http::rfc1123_value(u.visible_ms)))
    }
}
