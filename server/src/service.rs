//! Queue service properties (Logging, Hour/Minute Metrics, CORS), per
//! account ("Get/Set Queue Service Properties", "Preflight Queue Request"). Owned by core 0: other cores ask
//! it over the mesh. Persisted as one XML file per account, replaced
//! atomically (write, fsync, rename, fsync the directory); with
//! `--in-memory`, kept in memory only.

use crate::error::ApiError;
use crate::xmlio::{escape, parse, Node, DECL};
use engine::QueueError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Retention {
    pub enabled: bool,
    pub days: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logging {
    pub version: String,
    pub delete: bool,
    pub read: bool,
    pub write: bool,
    pub retention: Retention,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metrics {
    pub version: String,
    pub enabled: bool,
    pub include_apis: Option<bool>,
    pub retention: Retention,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CorsRule {
    pub allowed_origins: String,
    pub allowed_methods: String,
    pub allowed_headers: String,
    pub exposed_headers: String,
    pub max_age: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceProperties {
    pub logging: Logging,
    pub hour_metrics: Metrics,
    pub minute_metrics: Metrics,
    pub cors: Vec<CorsRule>,
}

impl Default for ServiceProperties {
    fn default() -> Self {
        let metrics = Metrics {
            version: "1.0".into(),
            enabled: false,
            include_apis: None,
            retention: Retention::default(),
        };
        ServiceProperties {
            logging: Logging {
                version: "1.0".into(),
                delete: false,
                read: false,
                write: false,
                retention: Retention::default(),
            },
            hour_metrics: metrics.clone(),
            minute_metrics: metrics,
            cors: Vec::new(),
        }
    }
}

const MAX_CORS_RULES: usize = 5;
const CORS_METHODS: [&str; 7] = ["DELETE", "GET", "HEAD", "MERGE", "POST", "OPTIONS", "PUT"];

fn bool_of(n: &Node, name: &str) -> Result<bool, ApiError> {
    match n.child(name).map(|c| c.text.trim()) {
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(other) => Err(ApiError::invalid_xml(format!(
            "{name} must be true or false, not '{other}'."
        ))),
        None => Err(ApiError::invalid_xml(format!("{} requires {name}.", n.name))),
    }
}

fn retention_of(n: &Node) -> Result<Retention, ApiError> {
    let r = n
        .child("RetentionPolicy")
        .ok_or_else(|| ApiError::invalid_xml(format!("{} requires RetentionPolicy.", n.name)))?;
    let enabled = bool_of(r, "Enabled")?;
    let days = match r.child("Days").map(|d| d.text.trim()) {
        None | Some("") => None,
        Some(d) => Some(
            d.parse::<u32>()
                .ok()
                .filter(|d| (1..=365).contains(d))
                .ok_or_else(|| ApiError::invalid_xml("Days must be between 1 and 365."))?,
        ),
    };
    match (enabled, days) {
        (false, Some(_)) => Err(ApiError::invalid_xml(
            "Element Days is only expected when RetentionPolicy is enabled.",
        )),
        (true, None) => Err(ApiError::invalid_xml(
            "Days is required when RetentionPolicy is enabled.",
        )),
        _ => Ok(Retention { enabled, days }),
    }
}

fn version_of(n: &Node) -> String {
    n.child("Version")
        .map(|v| v.text.trim().to_string())
        .unwrap_or_else(|| "1.0".into())
}

fn metrics_of(n: &Node) -> Result<Metrics, ApiError> {
    let enabled = bool_of(n, "Enabled")?;
    let include_apis = if n.child("IncludeAPIs").is_some() {
        Some(bool_of(n, "IncludeAPIs")?)
    } else {
        None
    };
    if enabled && include_apis.is_none() {
        return Err(ApiError::invalid_xml(
            "IncludeAPIs is required when metrics are enabled.",
        ));
    }
    Ok(Metrics {
        version: version_of(n),
        enabled,
        include_apis: if enabled { include_apis } else { None },
        retention: retention_of(n)?,
    })
}

impl ServiceProperties {
    /// Applies a Set Service Properties document: groups present replace the
    /// current ones; groups left out keep their value.
    pub fn merge(&self, body: &[u8]) -> Result<ServiceProperties, ApiError> {
        let root = parse(body)?;
        if root.name != "StorageServiceProperties" {
            return Err(ApiError::invalid_xml(
                "The root element must be StorageServiceProperties.",
            ));
        }
        let mut out = self.clone();
        if let Some(l) = root.child("Logging") {
            out.logging = Logging {
                version: version_of(l),
                delete: bool_of(l, "Delete")?,
                read: bool_of(l, "Read")?,
                write: bool_of(l, "Write")?,
                retention: retention_of(l)?,
            };
        }
        if let Some(m) = root.child("HourMetrics") {
            out.hour_metrics = metrics_of(m)?;
        }
        if let Some(m) = root.child("MinuteMetrics") {
            out.minute_metrics = metrics_of(m)?;
        }
        if let Some(c) = root.child("Cors") {
            let mut rules = Vec::new();
            for r in c.children_named("CorsRule") {
                let text = |name: &str| r.child(name).map(|n| n.text.trim().to_string()).unwrap_or_default();
                let rule = CorsRule {
                    allowed_origins: text("AllowedOrigins"),
                    allowed_methods: text("AllowedMethods"),
                    allowed_headers: text("AllowedHeaders"),
                    exposed_headers: text("ExposedHeaders"),
                    max_age: text("MaxAgeInSeconds")
                        .parse()
                        .map_err(|_| ApiError::invalid_xml("MaxAgeInSeconds must be a non-negative integer."))?,
                };
                if rule.allowed_origins.is_empty() || rule.allowed_methods.is_empty() {
                    return Err(ApiError::invalid_xml(
                        "A CorsRule needs AllowedOrigins and AllowedMethods.",
                    ));
                }
                if !rule
                    .allowed_methods
                    .split(',')
                    .all(|m| CORS_METHODS.contains(&m.trim()))
                {
                    return Err(ApiError::invalid_xml(
                        "AllowedMethods may only list DELETE, GET, HEAD, MERGE, POST, OPTIONS and PUT.",
                    ));
                }
                let origins = rule.allowed_origins.split(',').count();
                if origins > 64 || rule.allowed_origins.split(',').any(|o| o.trim().len() > 256) {
                    return Err(ApiError::invalid_xml(
                        "At most 64 allowed origins of at most 256 characters each.",
                    ));
                }
                rules.push(rule);
            }
            if rules.len() > MAX_CORS_RULES {
                return Err(ApiError::invalid_xml(format!(
                    "At most {MAX_CORS_RULES} CORS rules are allowed."
                )));
            }
            out.cors = rules;
        }
        Ok(out)
    }

    pub fn to_xml(&self) -> String {
        fn retention(r: &Retention) -> String {
            match r.days {
                Some(d) if r.enabled => {
                    format!("<RetentionPolicy><Enabled>true</Enabled><Days>{d}</Days></RetentionPolicy>")
                }
                _ => "<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>".into(),
            }
        }
        fn metrics(tag: &str, m: &Metrics) -> String {
            let apis = match (m.enabled, m.include_apis) {
                (true, Some(a)) => format!("<IncludeAPIs>{a}</IncludeAPIs>"),
                _ => String::new(),
            };
            format!(
                "<{tag}><Version>{}</Version><Enabled>{}</Enabled>{apis}{}</{tag}>",
                escape(&m.version),
                m.enabled,
                retention(&m.retention)
            )
        }
        let l = &self.logging;
        let mut s = format!(
            "{DECL}<StorageServiceProperties><Logging><Version>{}</Version><Delete>{}</Delete><Read>{}</Read><Write>{}</Write>{}</Logging>{}{}",
            escape(&l.version),
            l.delete,
            l.read,
            l.write,
            retention(&l.retention),
            metrics("HourMetrics", &self.hour_metrics),
            metrics("MinuteMetrics", &self.minute_metrics)
        );
        if self.cors.is_empty() {
            s.push_str("<Cors />");
        } else {
            s.push_str("<Cors>");
            for r in &self.cors {
                s.push_str(&format!(
                    "<CorsRule><AllowedOrigins>{}</AllowedOrigins><AllowedMethods>{}</AllowedMethods><AllowedHeaders>{}</AllowedHeaders><ExposedHeaders>{}</ExposedHeaders><MaxAgeInSeconds>{}</MaxAgeInSeconds></CorsRule>",
                    escape(&r.allowed_origins),
                    escape(&r.allowed_methods),
                    escape(&r.allowed_headers),
                    escape(&r.exposed_headers),
                    r.max_age
                ));
            }
            s.push_str("</Cors>");
        }
        s.push_str("</StorageServiceProperties>");
        s
    }
}

/// Core 0's store of every account's service properties.
pub struct ServiceStore {
    /// Where the documents are stored; `None` in memory (`--in-memory`).
    dir: Option<PathBuf>,
    by_account: RefCell<HashMap<String, ServiceProperties>>,
    /// Held from reading the current value to storing the merged one: two
    /// concurrent Set Service Properties must not both merge into the same
    /// old value (one update would be lost), nor write the same temp file.
    updating: futures::lock::Mutex<()>,
}

impl ServiceStore {
    /// Loads the stored documents. Only core 0 calls this with `load = true`.
    pub fn open(dir: PathBuf, load: bool) -> std::io::Result<Self> {
        let mut map = HashMap::new();
        if load {
            std::fs::create_dir_all(&dir)?;
            for e in std::fs::read_dir(&dir)? {
                let path = e?.path();
                let Some(account) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".xml"))
                else {
                    continue;
                };
                let body = std::fs::read(&path)?;
                let props = ServiceProperties::default().merge(&body).map_err(|e| {
                    std::io::Error::other(format!(
                        "{}: stored service properties do not parse: {}",
                        path.display(),
                        e.message
                    ))
                })?;
                map.insert(account.to_string(), props);
            }
        }
        Ok(ServiceStore {
            dir: Some(dir),
            by_account: RefCell::new(map),
            updating: futures::lock::Mutex::new(()),
        })
    }

    /// A store that keeps the properties in memory only (`--in-memory`):
    /// they start at the defaults and are gone with the process.
    pub fn in_memory() -> Self {
        ServiceStore {
            dir: None,
            by_account: RefCell::new(HashMap::new()),
            updating: futures::lock::Mutex::new(()),
        }
    }

    pub fn get(&self, account: &str) -> ServiceProperties {
        self.by_account.borrow().get(account).cloned().unwrap_or_default()
    }

    /// Set Service Properties: merges `body` into the stored value and
    /// stores the result durably, one update at a time.
    pub async fn merge_and_store(&self, account: &str, body: &[u8]) -> Result<(), QueueError> {
        let _one_at_a_time = self.updating.lock().await;
        let merged = self
            .get(account)
            .merge(body)
            .map_err(|e| QueueError::InvalidXmlDocument {
                reason: e.details.first().map(|(_, r)| r.clone()).unwrap_or(e.message),
            })?;
        self.set(account, merged).await
    }

    async fn set(&self, account: &str, props: ServiceProperties) -> Result<(), QueueError> {
        if let Some(dir) = self.dir.clone() {
            let xml = props.to_xml();
            let name = format!("{account}.xml");
            let written = glommio::executor()
                .spawn_blocking(move || -> std::io::Result<()> {
                    use std::io::Write;
                    let tmp = dir.join(format!("{name}.tmp"));
                    let mut f = std::fs::File::create(&tmp)?;
                    f.write_all(xml.as_bytes())?;
                    f.sync_all()?;
                    std::fs::rename(&tmp, dir.join(&name))?;
                    std::fs::File::open(&dir)?.sync_all()
                })
                .await;
            written.map_err(|e| QueueError::Internal {
                reason: format!("storing service properties: {e}"),
            })?;
        }
        self.by_account.borrow_mut().insert(account.to_string(), props);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_validates_and_keeps_omitted_groups() {
        let base = ServiceProperties::default();
        let doc = b"<StorageServiceProperties><Logging><Version>1.0</Version><Delete>true</Delete><Read>false</Read><Write>true</Write><RetentionPolicy><Enabled>true</Enabled><Days>7</Days></RetentionPolicy></Logging><Cors><CorsRule><AllowedOrigins>http://a.com</AllowedOrigins><AllowedMethods>GET,PUT</AllowedMethods><MaxAgeInSeconds>60</MaxAgeInSeconds><ExposedHeaders>x-ms-meta-*</ExposedHeaders><AllowedHeaders></AllowedHeaders></CorsRule></Cors></StorageServiceProperties>";
        let p = base.merge(doc).unwrap();
        assert!(p.logging.delete && p.logging.retention.days == Some(7));
        assert_eq!(p.hour_metrics, base.hour_metrics);
        assert_eq!(p.cors[0].max_age, 60);
        // round trip through our own XML
        assert_eq!(ServiceProperties::default().merge(p.to_xml().as_bytes()).unwrap(), p);
        let bad = b"<StorageServiceProperties><HourMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled><Days>3</Days></RetentionPolicy></HourMetrics></StorageServiceProperties>";
        assert!(base.merge(bad).unwrap_err().details[0].1.contains("only expected"));
        let six = format!("<StorageServiceProperties><Cors>{}</Cors></StorageServiceProperties>", "<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds></CorsRule>".repeat(6));
        assert!(base.merge(six.as_bytes()).is_err());
        // an empty Cors element removes all rules
        assert!(p
            .merge(b"<StorageServiceProperties><Cors/></StorageServiceProperties>")
            .unwrap()
            .cors
            .is_empty());
    }
}
