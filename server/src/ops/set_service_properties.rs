//! Set Queue Service Properties: `PUT /?restype=service&comp=properties`
//! with a `StorageServiceProperties` document; omitted groups keep their
//! value → 202.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use engine::disk::Disk;

pub struct SetServiceProperties {
    body: Vec<u8>,
}

impl Op for SetServiceProperties {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::NotPermitted,
        account_sas: Some(("s", "w")),
    };

    fn parse(req: &Request, _: &Target<'_>) -> Result<Self, ApiError> {
        Ok(SetServiceProperties {
            body: req.body.to_vec(),
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let (account, body) = (t.account.clone(), self.body);
        ctx.router
            .exec(0, move |_, service| async move {
                service.merge_and_store(&account, &body).await
            })
            .await?;
        Ok(Response::new(202))
    }
}
