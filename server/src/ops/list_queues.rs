//! List Queues: `GET /?comp=list&prefix=&marker=&maxresults=&include=metadata`
//! → 200 with one page of queue names, merged from every core.

use super::{Needs, Op, SasRule};
use crate::addressing::Target;
use crate::error::ApiError;
use crate::handler::Ctx;
use crate::http::{Request, Response};
use crate::xmlio::{escape, escape_text, DECL};
use engine::disk::Disk;
use engine::limits::MAX_LIST_RESULTS;
use engine::shard::QueueListing;

pub struct ListQueues {
    prefix: String,
    max: usize,
    with_metadata: bool,
    /// The marker as given (echoed back).
    marker: Option<String>,
    /// The queue name the marker points at.
    from: Option<String>,
}

impl Op for ListQueues {
    const NEEDS: Needs = Needs {
        service_sas: SasRule::NotPermitted,
        account_sas: Some(("s", "l")),
    };

    fn parse(_: &Request, t: &Target<'_>) -> Result<Self, ApiError> {
        let max = match super::int_param(t, "maxresults")? {
            None => MAX_LIST_RESULTS,
            Some(n) if n <= 0 => {
                return Err(engine::QueueError::OutOfRangeQueryParameterValue {
                    name: "maxresults",
                    value: n.to_string(),
                    min: 1,
                    max: MAX_LIST_RESULTS as i64,
                }
                .into())
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(MAX_LIST_RESULTS),
        };
        let with_metadata = match t.param("include") {
            None => false,
            Some(v) if v.split(',').all(|part| part.trim() == "metadata") => true,
            Some(v) => return Err(ApiError::invalid_query("include", v, "Only metadata may be included.")),
        };
        let marker = t.param("marker").filter(|m| !m.is_empty()).map(str::to_string);
        let from = match &marker {
            None => None,
            Some(m) => match m.strip_prefix(&format!("/{}/", t.account)) {
                Some(name) if !name.is_empty() => Some(name.to_string()),
                _ => return Err(engine::QueueError::InvalidMarker.into()),
            },
        };
        Ok(ListQueues {
            prefix: t.param("prefix").unwrap_or("").to_string(),
            max,
            with_metadata,
            marker,
            from,
        })
    }

    async fn run<D: Disk>(self, ctx: &Ctx<D>, req: &Request, t: &Target<'_>) -> Result<Response, ApiError> {
        // Every core returns its first max+1 names from the marker on; the
        // merged (max+1)-th name, if any, is the next marker.
        let want = self.max.saturating_add(1);
        let replies = ctx
            .router
            .exec_all(|| {
                let (account, prefix, from) = (t.account.clone(), self.prefix.clone(), self.from.clone());
                move |shard: std::rc::Rc<engine::Shard<D>>, _| async move {
                    shard.list_queues(&account, &prefix, from.as_deref(), want).await
                }
            })
            .await;
        let mut all = Vec::new();
        for r in replies {
            all.extend(r?.0);
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        let next = all.get(self.max).map(|q| format!("/{}/{}", t.account, q.name));
        all.truncate(self.max);
        let scheme = if ctx.security.https { "https" } else { "http" };
        Ok(Response::new(200).xml(self.write(req, t, scheme, &all, next)))
    }
}

impl ListQueues {
    /// The `EnumerationResults` document.
    fn write(
        &self,
        req: &Request,
        t: &Target<'_>,
        scheme: &str,
        page: &[QueueListing],
        next: Option<String>,
    ) -> String {
        let host = req.header("host").unwrap_or("127.0.0.1:10001");
        let endpoint = if t.raw_path.starts_with(&format!("/{}", t.account)) {
            format!("{scheme}://{host}/{}", t.account)
        } else {
            format!("{scheme}://{host}/")
        };
        let mut s = format!(
            "{DECL}<EnumerationResults ServiceEndpoint=\"{}\"><Prefix>{}</Prefix>",
            escape(&endpoint),
            escape(&self.prefix)
        );
        if let Some(m) = &self.marker {
            s.push_str(&format!("<Marker>{}</Marker>", escape(m)));
        }
        s.push_str(&format!("<MaxResults>{}</MaxResults>", self.max));
        if page.is_empty() {
            s.push_str("<Queues />");
        } else {
            s.push_str("<Queues>");
            for q in page {
                s.push_str(&format!("<Queue><Name>{}</Name>", escape(&q.name)));
                if self.with_metadata {
                    write_metadata(&mut s, q);
                }
                s.push_str("</Queue>");
            }
            s.push_str("</Queues>");
        }
        match next {
            Some(n) => s.push_str(&format!("<NextMarker>{}</NextMarker>", escape(&n))),
            None => s.push_str("<NextMarker />"),
        }
        s.push_str("</EnumerationResults>");
        s
    }
}

fn write_metadata(s: &mut String, q: &QueueListing) {
    if q.metadata.0.is_empty() {
        s.push_str("<Metadata />");
        return;
    }
    s.push_str("<Metadata>");
    for (k, v) in &q.metadata.0 {
        // Element text: only <, > and & need escaping, so a value of quotes
        // is not six times its size on the wire.
        s.push_str(&format!("<{k}>{}</{k}>", escape_text(v)));
    }
    s.push_str("</Metadata>");
}
