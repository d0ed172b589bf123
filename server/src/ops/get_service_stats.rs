//! Get Queue Service Stats: `GET /?restype=service&comp=stats`, on the
//! secondary endpoint only (`{account}-secondary`) → 200, replication "live".

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio::DECL;
use engine::disk::Disk;

pub struct GetServiceStats;

impl Op for GetServiceStats {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::NotPermitted,
        account_sas: Some(("s", "r")),
    };

    fn parse(_: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        if !t.secondary {
            return Err(ApiError::invalid_query(
                "comp",
                "stats",
                "Service stats are only available on the secondary endpoint.",
            ));
        }
        Ok(GetServiceStats)
    }

    async fn run<D: Disk>(self, _: &Ctx<D>, _: &Request, _: &Target<'_>) -> Result<Response, ApiError> {
        Ok(Response::new(200).xml(format!(
            "{DECL}<StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>{}</LastSyncTime></GeoReplication></StorageServiceStats>",
            httpdate::fmt_http_date(std::time::SystemTime::now())
        )))
    }
}
