//! Put Message Batch, a Hematite extension (docs/EXTENSIONS.md):
//! `POST /{queue}/messages?comp=batch&visibilitytimeout=&messagettl=` with a
//! `QueueMessageBatch` body of 1 to 32 `QueueMessage` elements → 201 with a
//! `QueueMessagesList` holding one `QueueMessage` per message, in the order
//! sent: its `Status` (201, or what Put Message would have answered for it
//! alone, with `Code`), and for a stored message its id, times and receipt.
//!
//! The messages are appended in one step on the owning core
//! (`Shard::put_messages`), so one group commit covers them all. The times
//! apply to every message; times Put Message would refuse, or a missing
//! queue, refuse the whole batch.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio;
use engine::disk::Disk;

pub struct PutMessageBatch {
    queue: String,
    texts: Vec<String>,
    visibility_timeout: Option<i64>,
    ttl: Option<i64>,
}

impl Op for PutMessageBatch {
    // Exactly what Put Message needs.
    const NEEDS: Needs = Needs {
        service_sas: SasRule::Letter('a'),
        account_sas: Some(("o", "a")),
    };

    fn parse(req: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        let root = xmlio::parse(&req.body.bytes())?;
        if root.name != "QueueMessageBatch" {
            return Err(ApiError::invalid_xml("The root element must be QueueMessageBatch."));
        }
        let mut texts = Vec::new();
        for m in root.children_named("QueueMessage") {
            let text = m
                .child("MessageText")
                .ok_or_else(|| ApiError::invalid_xml("Each QueueMessage must contain MessageText."))?;
            texts.push(text.text.clone());
        }
        super::check_batch_len(texts.len(), "QueueMessage")?;
        Ok(PutMessageBatch {
            queue: super::queue_of(t)?,
            texts,
            visibility_timeout: super::int_param(t, "visibilitytimeout")?,
            ttl: super::int_param(t, "messagettl")?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let account = t.account.clone();
        let PutMessageBatch {
            queue,
            texts,
            visibility_timeout,
            ttl,
        } = self;
        let owner = ctx.router.owner_of(&account, &queue);
        let outcomes = ctx
            .router
            .exec(owner, move |shard, _| async move {
                shard
                    .put_messages(&account, &queue, texts, visibility_timeout, ttl)
                    .await
            })
            .await?;
        let mut xml = format!("{}<QueueMessagesList>", xmlio::DECL);
        for outcome in outcomes {
            xml.push_str("<QueueMessage>");
            match outcome {
                Ok(p) => {
                    xml.push_str("<Status>201</Status>");
                    xmlio::write_put_fields(&mut xml, &p);
                }
                Err(e) => super::write_batch_error(&mut xml, e),
            }
            xml.push_str("</QueueMessage>");
        }
        xml.push_str("</QueueMessagesList>");
        Ok(Response::new(201).xml(xml))
    }
}
