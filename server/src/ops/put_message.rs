//! Put Message: `POST /{queue}/messages?visibilitytimeout=&messagettl=` with
//! a `QueueMessage` body → 201 with the new message's id, times and receipt.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio;
use engine::disk::Disk;

pub struct PutMessage {
    visibility_timeout: Option<i64>,
    ttl: Option<i64>,
}

impl Op for PutMessage {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::Letter('a'),
        account_sas: Some(("o", "a")),
    };

    fn parse(_: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        // The queue is read from the target, and the text from the body, in
        // `run`, which is called right after and reads the text before
        // anything else: into the form the queue's core takes it in.
        super::queue_of_ref(t)?;
        Ok(PutMessage {
            visibility_timeout: super::int_param(t, "visibilitytimeout")?,
            ttl: super::int_param(t, "messagettl")?,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, req: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let PutMessage {
            visibility_timeout,
            ttl,
        } = self;
        let queue = super::queue_of_ref(t)?;
        let owner = ctx.router.owner_of(&t.account, queue);
        let put = match ctx.router.here(owner) {
            // The queue is this core's: the text goes straight into the
            // `Rc` its body cache keeps, and the shard borrows the names,
            // where a trip over the mesh needs its own copies of them.
            Some(shard) => {
                let text = xmlio::parse_shared_message_text(&req.body.bytes())?;
                // The text is copied out: the body's buffer goes back to the
                // core before the commit's wait, for the next request to
                // fill while it is still in cache (`http::Body`).
                req.body.give_back();
                shard
                    .put_shared_message(&t.account, queue, text, visibility_timeout, ttl)
                    .await?
            }
            // An `Rc` cannot cross cores: the text goes as a `String`.
            None => {
                let text = xmlio::parse_message_text(&req.body.bytes())?;
                req.body.give_back();
                let (account, queue) = (t.account.clone(), queue.to_string());
                ctx.router
                    .exec(owner, move |shard, _| async move {
                        shard.put_message(&account, &queue, text, visibility_timeout, ttl).await
                    })
                    .await?
            }
        };
        Ok(Response::new(201).xml(xmlio::write_put(&put)))
    }
}
