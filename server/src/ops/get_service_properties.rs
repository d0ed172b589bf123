//! Get Queue Service Properties: `GET /?restype=service&comp=properties` →
//! 200 with logging, metrics and CORS rules (kept on core 0).

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use engine::disk::Disk;

pub struct GetServiceProperties;

impl Op for GetServiceProperties {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::NotPermitted,
        account_sas: Some(("s", "r")),
    };

    fn parse(_: &Request, _: &Target<'_>) -> Result<Self, ApiError> {
        Ok(GetServiceProperties)
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, _: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        let props = service_properties(ctx, &t.account).await?;
        Ok(Response::new(200).xml(props.to_xml()))
    }
}

/// The account's service properties, from core 0 (also what CORS reads).
pub async fn service_properties<D: Disk>(
    ctx: &Ctx<D>,
    account: &str,
) -> Result<crate::service::ServiceProperties, ApiError> {
    let account = account.to_string();
    Ok(ctx
        .router
        .exec(0, move |_, service| async move { Ok(service.get(&account)) })
        .await?)
}
