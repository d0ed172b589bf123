//! Queue attributes beyond Azure's, set through reserved metadata keys
//! (docs/EXTENSIONS.md, "Queue attributes"). Azure lets any client set
//! queue metadata whose names are C# identifiers, so an unmodified SDK sets
//! these with Set Queue Metadata and reads them back with Get Queue
//! Properties. A queue without any `hematite_` key behaves exactly as
//! Azure's.
//!
//! Plain data, derived from a queue's metadata whenever the metadata
//! changes; owned with its queue by the queue's shard.

use crate::error::QueueError;
use crate::limits::{MAX_DEAD_LETTER_DEQUEUE_COUNT, MAX_RECEIVE_WAIT_SECS};
use crate::model::{validate_queue_name, Metadata};

/// Every reserved key starts with this (compared without regard to case,
/// as metadata names are).
pub const PREFIX: &str = "hematite_";
/// Seconds a Get Messages on an empty queue waits for a message (0–20).
pub const RECEIVE_WAIT_SECONDS: &str = "hematite_receive_wait_seconds";
/// Deliveries after which a message moves to the dead-letter queue.
pub const MAX_DEQUEUE_COUNT: &str = "hematite_max_dequeue_count";
/// The queue, in the same account, that takes messages past that count.
pub const DEAD_LETTER_QUEUE: &str = "hematite_dead_letter_queue";

const KNOWN: [&str; 3] = [RECEIVE_WAIT_SECONDS, MAX_DEQUEUE_COUNT, DEAD_LETTER_QUEUE];

/// What a queue's reserved keys ask for. The default is Azure's behaviour.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueAttributes {
    /// Long polling: how long an empty Get Messages waits, in seconds.
    pub receive_wait_secs: u64,
    pub redrive: Option<Redrive>,
}

/// Where messages delivered too often go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redrive {
    /// A message already delivered this many times is moved instead of
    /// being delivered once more.
    pub max_dequeue_count: u64,
    pub dead_letter_queue: String,
}

impl QueueAttributes {
    /// Parses and checks the reserved keys of `m` for queue `queue`. Every
    /// refusal names the key, so the caller sees which one to fix. Unknown
    /// `hematite_` keys are refused too: a misspelt key must not silently
    /// do nothing.
    pub fn parse(queue: &str, m: &Metadata) -> Result<Self, QueueError> {
        let mut out = QueueAttributes::default();
        let (mut max_count, mut dlq) = (None, None);
        for (name, value) in &m.0 {
            if !starts_with_prefix(name) {
                continue;
            }
            let key = KNOWN
                .into_iter()
                .find(|k| k.eq_ignore_ascii_case(name))
                .ok_or_else(|| invalid(name, value, format!("unknown key; the keys are {}", KNOWN.join(", "))))?;
            match key {
                RECEIVE_WAIT_SECONDS => out.receive_wait_secs = number(name, value, 0, MAX_RECEIVE_WAIT_SECS)?,
                MAX_DEQUEUE_COUNT => max_count = Some(number(name, value, 1, MAX_DEAD_LETTER_DEQUEUE_COUNT)?),
                _ => {
                    validate_queue_name(value).map_err(|_| invalid(name, value, "not a valid queue name".into()))?;
                    if value == queue {
                        return Err(invalid(
                            name,
                            value,
                            "a queue cannot be its own dead-letter queue".into(),
                        ));
                    }
                    dlq = Some(value.clone());
                }
            }
        }
        out.redrive = match (max_count, dlq) {
            (None, None) => None,
            (Some(max_dequeue_count), Some(dead_letter_queue)) => Some(Redrive {
                max_dequeue_count,
                dead_letter_queue,
            }),
            (Some(_), None) => return Err(invalid(MAX_DEQUEUE_COUNT, "", format!("needs {DEAD_LETTER_QUEUE} too"))),
            (None, Some(q)) => return Err(invalid(DEAD_LETTER_QUEUE, &q, format!("needs {MAX_DEQUEUE_COUNT} too"))),
        };
        Ok(out)
    }

    /// The attributes of metadata already stored. Stored metadata passed
    /// [`QueueAttributes::parse`] when it was set, unless an older version
    /// wrote it: then the reserved keys are ignored rather than refusing to
    /// open the queue, and the log says so.
    pub fn of_stored(queue: &str, m: &Metadata) -> Self {
        QueueAttributes::parse(queue, m).unwrap_or_else(|e| {
            tracing::warn!(queue, error = %e, "stored queue attributes are invalid and ignored");
            QueueAttributes::default()
        })
    }
}

fn starts_with_prefix(name: &str) -> bool {
    name.get(..PREFIX.len()).is_some_and(|p| p.eq_ignore_ascii_case(PREFIX))
}

fn number(name: &str, value: &str, min: u64, max: u64) -> Result<u64, QueueError> {
    match value.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) && !value.starts_with('+') => Ok(v),
        _ => Err(invalid(
            name,
            value,
            format!("must be a whole number from {min} to {max}"),
        )),
    }
}

fn invalid(name: &str, value: &str, reason: String) -> QueueError {
    QueueError::InvalidQueueAttribute {
        key: name.to_string(),
        value: value.to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(pairs: &[(&str, &str)]) -> Metadata {
        Metadata(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn no_reserved_key_is_azure_behaviour() {
        let a = QueueAttributes::parse("q1", &md(&[("color", "blue")])).unwrap();
        assert_eq!(a, QueueAttributes::default());
    }

    #[test]
    fn keys_parse_in_any_case() {
        let a = QueueAttributes::parse(
            "work",
            &md(&[
                ("Hematite_Receive_Wait_Seconds", "20"),
                ("hematite_max_dequeue_count", "3"),
                ("HEMATITE_DEAD_LETTER_QUEUE", "work-dlq"),
            ]),
        )
        .unwrap();
        assert_eq!(a.receive_wait_secs, 20);
        assert_eq!(
            a.redrive,
            Some(Redrive {
                max_dequeue_count: 3,
                dead_letter_queue: "work-dlq".into()
            })
        );
    }

    #[test]
    fn every_refusal_names_its_key() {
        let cases: [&[(&str, &str)]; 9] = [
            &[("hematite_receive_wait_seconds", "21")],
            &[("hematite_receive_wait_seconds", "-1")],
            &[("hematite_receive_wait_seconds", "+5")],
            &[
                ("hematite_max_dequeue_count", "0"),
                ("hematite_dead_letter_queue", "dlq"),
            ],
            &[
                ("hematite_max_dequeue_count", "1001"),
                ("hematite_dead_letter_queue", "dlq"),
            ],
            &[("hematite_max_dequeue_count", "3")],
            &[("hematite_dead_letter_queue", "dlq")],
            &[
                ("hematite_max_dequeue_count", "3"),
                ("hematite_dead_letter_queue", "Bad_Name"),
            ],
            &[("hematite_recieve_wait_seconds", "5")],
        ];
        for pairs in cases {
            let e = QueueAttributes::parse("work", &md(pairs)).unwrap_err();
            let QueueError::InvalidQueueAttribute { key, .. } = &e else {
                panic!("{pairs:?}: {e:?}")
            };
            assert!(key.to_ascii_lowercase().starts_with(PREFIX), "{pairs:?}: {e:?}");
        }
        let own = md(&[
            ("hematite_max_dequeue_count", "3"),
            ("hematite_dead_letter_queue", "work"),
        ]);
        assert!(
            QueueAttributes::parse("work", &own).is_err(),
            "its own dead-letter queue"
        );
    }
}
