//! Delete Message Batch, a Hematite extension (docs/EXTENSIONS.md):
//! `POST /{queue}/messages?comp=batchdelete` with a `BatchDelete` body of 1
//! to 32 `Message` elements, each a `MessageId` and a `PopReceipt` → 200
//! with one `Result` per message, in the order sent: its id, the status
//! Delete Message would have answered, and the error code if it failed.
//!
//! The deletes are appended in one step on the owning core
//! (`Shard::delete_messages`), so one group commit covers them all; each
//! succeeds or fails on its own, exactly as Delete Message. The answer is
//! sent once every delete in it is durable.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio;
use engine::disk::Disk;
use std::fmt::Write;

pub struct DeleteMessageBatch {
    queue: String,
    /// (message id, pop receipt), in the order sent.
    items: Vec<(String, String)>,
}

impl Op for DeleteMessageBatch {
    // Exactly what Delete Message needs.
    const NEEDS: Needs = Needs {
        service_sas: SasRule::Letter('p'),
        account_sas: Some(("oc", "p")),
    };

    fn parse(req: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        let root = xmlio::parse(&req.body.bytes())?;
        if root.name != "BatchDelete" {
            return Err(ApiError::invalid_xml("The root element must be BatchDelete."));
        }
        let mut items = Vec::new();
        for m in root.children_named("Message") {
            let field = |name: &str| {
                m.child(name)
                    .map(|n| n.text.clone())
                    .ok_or_else(|| ApiError::invalid_xml(format!("Each Message must contain {name}.")))
            };
            items.push((field("MessageId")?, field("PopReceipt")?));
        }
        super::check_batch_len(items.len(), "Message")?;
        Ok(DeleteMessageBatch {
            queue: super::queue_of(t)?,
            items,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let account = t.account.clone();
        let DeleteMessageBatch { queue, items } = self;
        let owner = ctx.router.owner_of(&account, &queue);
        let (ids, outcomes) = ctx
            .router
            .exec(owner, move |shard, _| async move {
                let outcomes = match shard.delete_messages(&account, &queue, &items).await {
                    Ok(each) => each,
                    // A queue-level failure (the queue is gone) is every
                    // message's answer.
                    Err(e) => items.iter().map(|_| Err(e.clone())).collect(),
                };
                let ids: Vec<String> = items.into_iter().map(|(id, _)| id).collect();
                Ok((ids, outcomes))
            })
            .await?;
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BatchDeleteResults>");
        for (id, outcome) in ids.iter().zip(outcomes) {
            let _ = write!(xml, "<Result><MessageId>{}</MessageId>", xmlio::escape_text(id));
            match outcome {
                Ok(()) => xml.push_str("<Status>204</Status>"),
                Err(e) => super::write_batch_error(&mut xml, e),
            }
            xml.push_str("</Result>");
        }
        xml.push_str("</BatchDeleteResults>");
        Ok(Response::new(200).xml(xml))
    }
}
