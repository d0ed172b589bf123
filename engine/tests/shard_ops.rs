//! Every queue and message operation, and every rule and limit, on the
//! simulated disk with a manual clock.

mod common;
use common::*;
use engine::limits::*;
use engine::model::{Metadata, PopReceipt, SignedIdentifier};
use engine::shard::Created;
use engine::QueueError;
use futures::executor::block_on;

fn md(pairs: &[(&str, &str)]) -> Metadata {
    Metadata(pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect())
}

#[test]
fn create_queue_201_204_409_and_name_rules() {
    let (_d, _c, s) = fresh();
    block_on(async {
        assert_eq!(s.create_queue(ACCT, "qu1", md(&[("Foo", "1")])).await, Ok(Created::New));
        assert_eq!(
            s.create_queue(ACCT, "qu1", md(&[("foo", "1")])).await,
            Ok(Created::AlreadyExisted)
        );
        assert_eq!(
            s.create_queue(ACCT, "qu1", md(&[])).await,
            Err(QueueError::QueueAlreadyExists)
        );
        assert_eq!(s.create_queue(ACCT, "qu2", md(&[])).await, Ok(Created::New));
        assert_eq!(s.create_queue(ACCT, "qu2", md(&[])).await, Ok(Created::AlreadyExisted));
        assert_eq!(
            s.create_queue(ACCT, "ab", md(&[])).await,
            Err(QueueError::OutOfRangeInput)
        );
        assert_eq!(
            s.create_queue(ACCT, "Abc", md(&[])).await,
            Err(QueueError::InvalidResourceName)
        );
        assert!(matches!(
            s.create_queue(ACCT, "qu3", md(&[("1x", "")])).await,
            Err(QueueError::InvalidMetadata { .. })
        ));
        // same name in another account is another queue
        assert_eq!(s.create_queue("other", "qu1", md(&[])).await, Ok(Created::New));
    });
}

#[test]
fn delete_queue_removes_messages_and_404s_after() {
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "qu1", md(&[])).await.unwrap();
        s.put_message(ACCT, "qu1", "a".into(), None, None).await.unwrap();
        s.delete_queue(ACCT, "qu1").await.unwrap();
        assert_eq!(s.delete_queue(ACCT, "qu1").await, Err(QueueError::QueueNotFound));
        assert_eq!(s.get_properties(ACCT, "qu1").await, Err(QueueError::QueueNotFound));
        assert_eq!(
            s.put_message(ACCT, "qu1", "a".into(), None, None).await.unwrap_err(),
            QueueError::QueueNotFound
        );
        s.create_queue(ACCT, "qu1", md(&[])).await.unwrap();
        assert_eq!(
            s.get_properties(ACCT, "qu1").await.unwrap().approximate_message_count,
            0
        );
    });
}

#[test]
fn list_queues_prefix_marker_max() {
    let (_d, _c, s) = fresh();
    block_on(async {
        for n in ["bbb", "aaa", "abc", "abd", "zzz"] {
            s.create_queue(ACCT, n, md(&[("K", n)])).await.unwrap();
        }
        s.create_queue("other", "aab", md(&[])).await.unwrap();
        let (all, more) = s.list_queues(ACCT, "", None, 100).await.unwrap();
        assert_eq!(
            all.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(),
            ["aaa", "abc", "abd", "bbb", "zzz"]
        );
        assert!(!more);
        let (page, more) = s.list_queues(ACCT, "ab", None, 1).await.unwrap();
        assert_eq!((page[0].name.as_str(), more), ("abc", true));
        let (page, more) = s.list_queues(ACCT, "ab", Some("abd"), 1).await.unwrap();
        assert_eq!((page[0].name.as_str(), more), ("abd", false));
        assert_eq!(page[0].metadata, md(&[("K", "abd")]));
        let (page, _) = s.list_queues(ACCT, "", Some("b"), 10).await.unwrap();
        assert_eq!(page.len(), 2);
    });
}

#[test]
fn metadata_and_acl_round_trip() {
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "qu1", md(&[("A", "1")])).await.unwrap();
        s.set_metadata(ACCT, "qu1", md(&[("Foo", "bar"), ("x", "")]))
            .await
            .unwrap();
        assert_eq!(
            s.get_properties(ACCT, "qu1").await.unwrap().metadata,
            md(&[("Foo", "bar"), ("x", "")])
        );
        s.set_metadata(ACCT, "qu1", md(&[])).await.unwrap();
        assert_eq!(s.get_properties(ACCT, "qu1").await.unwrap().metadata, md(&[]));
        assert_eq!(
            s.set_metadata(ACCT, "nope", md(&[])).await,
            Err(QueueError::QueueNotFound)
        );
        let big = "v".repeat(MAX_METADATA_BYTES);
        assert_eq!(
            s.set_metadata(ACCT, "qu1", md(&[("k", &big)])).await,
            Err(QueueError::MetadataTooLarge)
        );
        let acl = vec![SignedIdentifier {
            id: "p1".into(),
            start: Some("2020-01-01T00:00:00.0000000Z".into()),
            expiry: None,
            permission: Some("rp".into()),
        }];
        s.set_acl(ACCT, "qu1", acl.clone()).await.unwrap();
        assert_eq!(s.get_acl(ACCT, "qu1").await.unwrap(), acl);
        // metadata survives an ACL change and vice versa
        s.set_metadata(ACCT, "qu1", md(&[("B", "2")])).await.unwrap();
        assert_eq!(s.get_acl(ACCT, "qu1").await.unwrap(), acl);
        let bad = vec![SignedIdentifier {
            id: "x".into(),
            permission: Some("w".into()),
            ..Default::default()
        }];
        assert!(matches!(
            s.set_acl(ACCT, "qu1", bad).await,
            Err(QueueError::InvalidXmlDocument { .. })
        ));
        s.set_acl(ACCT, "qu1", vec![]).await.unwrap();
        assert!(s.get_acl(ACCT, "qu1").await.unwrap().is_empty());
    });
}

#[test]
fn put_validation() {
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        let too_big = "x".repeat(MAX_MESSAGE_BYTES + 1);
        assert_eq!(
            s.put_message(ACCT, "que", too_big, None, None).await.unwrap_err(),
            QueueError::RequestBodyTooLarge { max_limit: 65536 }
        );
        // the limit counts UTF-8 bytes: 65536 bytes of multi-byte text is fine
        let exact = "é".repeat(MAX_MESSAGE_BYTES / 2);
        assert!(s.put_message(ACCT, "que", exact, None, None).await.is_ok());
        let e = s
            .put_message(ACCT, "que", "a".into(), Some(604_801), None)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "OutOfRangeQueryParameterValue");
        let e = s
            .put_message(ACCT, "que", "a".into(), Some(-1), None)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "OutOfRangeQueryParameterValue");
        for ttl in [0, -2, i32::MAX as i64 + 1] {
            let e = s
                .put_message(ACCT, "que", "a".into(), None, Some(ttl))
                .await
                .unwrap_err();
            assert_eq!(e.code(), "InvalidQueryParameterValue", "ttl {ttl}");
        }
        let e = s
            .put_message(ACCT, "que", "a".into(), Some(10), Some(10))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "InvalidQueryParameterValue");
        assert!(s
            .put_message(ACCT, "que", "a".into(), Some(604_800), Some(-1))
            .await
            .is_ok());
        assert!(s.put_message(ACCT, "que", "".into(), None, None).await.is_ok());
    });
}

#[test]
fn put_times_and_ttl() {
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        let r = s
            .put_message(ACCT, "que", "a".into(), Some(5), Some(100))
            .await
            .unwrap();
        assert_eq!(r.inserted_ms, T0);
        assert_eq!(r.visible_ms, T0 + 5_000);
        assert_eq!(r.expires_ms, T0 + 100_000);
        let r = s.put_message(ACCT, "que", "a".into(), None, None).await.unwrap();
        assert_eq!(r.expires_ms, T0 + DEFAULT_MESSAGE_TTL_SECS as u64 * 1000);
        let r = s.put_message(ACCT, "que", "a".into(), None, Some(-1)).await.unwrap();
        assert_eq!(r.expires_ms, EXPIRY_NEVER_MS);
        let r = s
            .put_message(ACCT, "que", "a".into(), None, Some(i32::MAX as i64))
            .await
            .unwrap();
        // The longest finite TTL is exact, not clamped to "never".
        assert_eq!(r.expires_ms, T0 + i32::MAX as u64 * 1000);
        assert!(r.expires_ms < EXPIRY_NEVER_MS);
    });
}

#[test]
fn get_peek_order_visibility_and_dequeue_count() {
    let (_d, clock, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        for i in 0..5 {
            s.put_message(ACCT, "que", format!("m{i}"), None, None).await.unwrap();
        }
        s.put_message(ACCT, "que", "delayed".into(), Some(60), None)
            .await
            .unwrap();
        let peek = s.peek_messages(ACCT, "que", Some(32)).await.unwrap();
        assert_eq!(
            peek.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
            ["m0", "m1", "m2", "m3", "m4"]
        );
        assert!(peek.iter().all(|m| m.dequeue_count == 0));
        let got = s.get_messages(ACCT, "que", Some(2), Some(10)).await.unwrap();
        assert_eq!(got.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), ["m0", "m1"]);
        assert!(got.iter().all(|m| m.dequeue_count == 1 && m.visible_ms == T0 + 10_000));
        // invisible ones are skipped by get and peek
        let peek = s.peek_messages(ACCT, "que", None).await.unwrap();
        assert_eq!(peek[0].text, "m2");
        assert_eq!(
            s.get_properties(ACCT, "que").await.unwrap().approximate_message_count,
            6
        );
        clock.advance_ms(10_000);
        // m0, m1 visible again at T0+10s: ordered by visible-at, so m2..m4 (visible at T0) come first
        let got = s.get_messages(ACCT, "que", Some(32), None).await.unwrap();
        assert_eq!(
            got.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
            ["m2", "m3", "m4", "m0", "m1"]
        );
        let m0 = got.iter().find(|m| m.text == "m0").unwrap();
        assert_eq!(m0.dequeue_count, 2);
        assert_eq!(
            m0.visible_ms,
            T0 + 10_000 + 30_000,
            "default visibility timeout is 30 s"
        );
        // nothing visible: empty list, not an error
        assert!(s.get_messages(ACCT, "que", Some(32), None).await.unwrap().is_empty());
        assert!(s.peek_messages(ACCT, "que", Some(32)).await.unwrap().is_empty());
        clock.advance_ms(60_000);
        let got = s.get_messages(ACCT, "que", Some(32), None).await.unwrap();
        assert_eq!(
            got.len(),
            6,
            "everything is visible again, including the delayed message"
        );
    });
}

#[test]
fn get_and_peek_parameter_ranges() {
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        for (n, vt) in [
            (Some(0), None),
            (Some(33), None),
            (None, Some(0)),
            (None, Some(604_801)),
        ] {
            let e = s.get_messages(ACCT, "que", n, vt).await.unwrap_err();
            assert_eq!(e.code(), "OutOfRangeQueryParameterValue");
        }
        let e = s.peek_messages(ACCT, "que", Some(33)).await.unwrap_err();
        assert_eq!(
            e,
            QueueError::OutOfRangeQueryParameterValue {
                name: "numofmessages",
                value: "33".into(),
                min: 1,
                max: 32
            }
        );
        assert_eq!(
            s.get_messages(ACCT, "nope", None, None).await.unwrap_err(),
            QueueError::QueueNotFound
        );
        assert_eq!(
            s.peek_messages(ACCT, "nope", None).await.unwrap_err(),
            QueueError::QueueNotFound
        );
    });
}

#[test]
fn delete_with_receipts() {
    let (_d, clock, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        let put = s.put_message(ACCT, "que", "a".into(), None, None).await.unwrap();
        let id = put.id.to_string();
        // the receipt from Put works (e.g. to shorten a delay or delete)
        let got = s.get_messages(ACCT, "que", None, Some(5)).await.unwrap();
        // Put's receipt is stale after a Get issued a new one: Azure answers 404
        assert_eq!(
            s.delete_message(ACCT, "que", &id, &put.pop_receipt).await,
            Err(QueueError::MessageNotFound)
        );
        let e = s.delete_message(ACCT, "que", &id, "not-a-receipt!").await.unwrap_err();
        assert_eq!(e.code(), "InvalidQueryParameterValue");
        assert_eq!(
            s.delete_message(ACCT, "que", "nonsense", &got[0].pop_receipt).await,
            Err(QueueError::MessageNotFound)
        );
        // the visibility timeout elapsing alone does not invalidate the receipt
        clock.advance_ms(6_000);
        s.delete_message(ACCT, "que", &id, &got[0].pop_receipt).await.unwrap();
        assert_eq!(
            s.delete_message(ACCT, "que", &id, &got[0].pop_receipt).await,
            Err(QueueError::MessageNotFound)
        );
        assert_eq!(
            s.get_properties(ACCT, "que").await.unwrap().approximate_message_count,
            0
        );
        let put = s.put_message(ACCT, "que", "b".into(), Some(100), None).await.unwrap();
        s.delete_message(ACCT, "que", &put.id.to_string(), &put.pop_receipt)
            .await
            .unwrap();
    });
}

#[test]
fn receipt_dies_when_another_get_takes_the_message() {
    let (_d, clock, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        s.put_message(ACCT, "que", "a".into(), None, None).await.unwrap();
        let first = s.get_messages(ACCT, "que", None, Some(1)).await.unwrap().remove(0);
        clock.advance_ms(1_000);
        let second = s.get_messages(ACCT, "que", None, Some(1)).await.unwrap().remove(0);
        assert_eq!(second.dequeue_count, 2);
        let id = first.id.to_string();
        assert_eq!(
            s.delete_message(ACCT, "que", &id, &first.pop_receipt).await,
            Err(QueueError::MessageNotFound)
        );
        s.delete_message(ACCT, "que", &id, &second.pop_receipt).await.unwrap();
    });
}

#[test]
fn azurite_mode_answers_pop_receipt_mismatch() {
    let disk = engine::disk::sim::SimDisk::new();
    let clock = std::rc::Rc::new(engine::ManualClock::new(T0));
    let mut cfg = small_config();
    cfg.stale_receipt_is_mismatch = true;
    let s = open(&disk, &clock, cfg);
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        let put = s.put_message(ACCT, "que", "a".into(), None, None).await.unwrap();
        s.get_messages(ACCT, "que", None, None).await.unwrap();
        let e = s
            .delete_message(ACCT, "que", &put.id.to_string(), &put.pop_receipt)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "PopReceiptMismatch");
    });
}

#[test]
fn update_message_rules() {
    let (_d, clock, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        s.put_message(ACCT, "que", "old".into(), None, Some(100)).await.unwrap();
        let got = s.get_messages(ACCT, "que", None, Some(30)).await.unwrap().remove(0);
        let id = got.id.to_string();
        let e = s
            .update_message(ACCT, "que", &id, &got.pop_receipt, None, None)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            QueueError::MissingRequiredQueryParameter {
                name: "visibilitytimeout"
            }
        );
        let e = s
            .update_message(ACCT, "que", &id, &got.pop_receipt, Some(604_801), None)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "OutOfRangeQueryParameterValue");
        let e = s
            .update_message(ACCT, "que", &id, &got.pop_receipt, Some(101), None)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "InvalidQueryParameterValue", "may not extend past expiry");
        let e = s
            .update_message(ACCT, "que", &id, &got.pop_receipt, Some(0), Some("x".repeat(65_537)))
            .await
            .unwrap_err();
        assert_eq!(e.code(), "RequestBodyTooLarge");
        // new text, visible now, new receipt; dequeue count unchanged
        let up = s
            .update_message(ACCT, "que", &id, &got.pop_receipt, Some(0), Some("new".into()))
            .await
            .unwrap();
        assert_eq!(up.visible_ms, T0);
        assert_ne!(up.pop_receipt, got.pop_receipt);
        let peek = s.peek_messages(ACCT, "que", None).await.unwrap();
        assert_eq!((peek[0].text.as_str(), peek[0].dequeue_count), ("new", 1));
        // the old receipt is dead
        assert_eq!(
            s.update_message(ACCT, "que", &id, &got.pop_receipt, Some(0), None)
                .await,
            Err(QueueError::MessageNotFound)
        );
        // visibility only: the text stays
        let up2 = s
            .update_message(ACCT, "que", &id, &up.pop_receipt, Some(20), None)
            .await
            .unwrap();
        assert_eq!(up2.visible_ms, T0 + 20_000);
        assert!(s.peek_messages(ACCT, "que", None).await.unwrap().is_empty());
        clock.advance_ms(20_000);
        assert_eq!(s.peek_messages(ACCT, "que", None).await.unwrap()[0].text, "new");
        // an expired message is gone for update and delete
        clock.advance_ms(100_000);
        assert_eq!(
            s.update_message(ACCT, "que", &id, &up2.pop_receipt, Some(0), None)
                .await,
            Err(QueueError::MessageNotFound)
        );
        assert_eq!(
            s.delete_message(ACCT, "que", &id, &up2.pop_receipt).await,
            Err(QueueError::MessageNotFound)
        );
    });
}

#[test]
fn expiry_hides_and_counts_correctly() {
    let (_d, clock, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        s.put_message(ACCT, "que", "short".into(), None, Some(10))
            .await
            .unwrap();
        s.put_message(ACCT, "que", "long".into(), None, Some(-1)).await.unwrap();
        clock.advance_ms(10_000);
        assert_eq!(
            s.get_properties(ACCT, "que").await.unwrap().approximate_message_count,
            1
        );
        let peek = s.peek_messages(ACCT, "que", Some(32)).await.unwrap();
        assert_eq!(peek.len(), 1);
        assert_eq!(peek[0].expires_ms, EXPIRY_NEVER_MS);
        // a message may expire while invisible
        s.put_message(ACCT, "que", "mid".into(), None, Some(20)).await.unwrap();
        let got = s.get_messages(ACCT, "que", Some(32), Some(600)).await.unwrap();
        assert_eq!(got.len(), 2);
        clock.advance_ms(21_000);
        assert_eq!(
            s.get_properties(ACCT, "que").await.unwrap().approximate_message_count,
            1
        );
    });
}

#[test]
fn clear_removes_visible_and_invisible() {
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        for _ in 0..10 {
            s.put_message(ACCT, "que", "x".into(), None, None).await.unwrap();
        }
        s.get_messages(ACCT, "que", Some(5), None).await.unwrap();
        s.clear_messages(ACCT, "que").await.unwrap();
        assert_eq!(
            s.get_properties(ACCT, "que").await.unwrap().approximate_message_count,
            0
        );
        assert_eq!(s.clear_messages(ACCT, "nope").await, Err(QueueError::QueueNotFound));
    });
}

#[test]
fn concurrent_gets_never_return_the_same_message_and_share_commits() {
    let (disk, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        let puts = (0..64).map(|i| s.put_message(ACCT, "que", format!("{i}"), None, None));
        let before = disk.stats().syncs;
        for r in futures::future::join_all(puts).await {
            r.unwrap();
        }
        let syncs = disk.stats().syncs - before;
        assert!(
            syncs < 64,
            "64 concurrent puts took {syncs} fdatasyncs: group commit is not grouping"
        );
        let gets = (0..40).map(|_| s.get_messages(ACCT, "que", Some(2), None));
        let mut seen = std::collections::HashSet::new();
        for r in futures::future::join_all(gets).await {
            for m in r.unwrap() {
                assert!(seen.insert(m.id), "message {} handed out twice", m.id);
            }
        }
        assert_eq!(seen.len(), 64);
    });
}

#[test]
fn pop_receipt_shape() {
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        let put = s.put_message(ACCT, "que", "a".into(), None, None).await.unwrap();
        assert!(PopReceipt::decode(&put.pop_receipt).is_ok());
        assert_eq!(put.pop_receipt.len(), 22);
    });
}

#[test]
fn bodies_survive_cache_eviction() {
    // The test config caches 16 KiB; write 200 KiB so most bodies come from disk.
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "que", md(&[])).await.unwrap();
        for i in 0..50 {
            s.put_message(ACCT, "que", format!("{i:04}{}", "z".repeat(4000)), None, None)
                .await
                .unwrap();
        }
        let got = s.peek_messages(ACCT, "que", Some(32)).await.unwrap();
        for (i, m) in got.iter().enumerate() {
            assert!(m.text.starts_with(&format!("{i:04}")));
            assert_eq!(m.text.len(), 4004);
        }
        let (_hits, misses, bytes) = s.cache_stats();
        assert!(misses > 0 && bytes <= 16 * 1024);
    });
}

/// Clear Messages answers without releasing each message: the messages are
/// gone from the queue at once, their records stay pinned until maintenance
/// releases them a slice per pass, and then nothing is left pinned but the queue's
/// definition and the clock.
#[test]
fn clear_releases_its_messages_in_maintenance() {
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "qu1", md(&[])).await.unwrap();
        let n = RELEASE_SLICE + 7; // two slices
                                   // Concurrent puts share group commits: the test stays fast.
        let puts = (0..n).map(|i| s.put_message(ACCT, "qu1", format!("m{i}"), None, None));
        for r in futures::future::join_all(puts).await {
            r.unwrap();
        }
        let live = |s: &engine::shard::Shard<engine::disk::sim::SimDisk>| {
            s.segment_stats().iter().map(|x| x.live_records).sum::<u64>()
        };
        let before = live(&s);
        assert!(before >= n as u64);
        s.clear_messages(ACCT, "qu1").await.unwrap();
        assert!(s.peek_messages(ACCT, "qu1", Some(32)).await.unwrap().is_empty());
        assert_eq!(live(&s), before, "released lazily, not in the request");
        assert_eq!(s.message_count(), n, "pending releases still count as held");
        s.maintenance().await.unwrap();
        assert_eq!(s.message_count(), 7, "one slice per maintenance pass");
        s.maintenance().await.unwrap();
        assert_eq!(s.message_count(), 0);
        assert!(
            live(&s) <= 2,
            "only the definition and the clock stay pinned: {}",
            live(&s)
        );
        assert_eq!(s.cache_len(), 0, "cleared bodies leave the cache");
    });
}

/// Delete Message Batch: one group commit for the whole batch, each message
/// answered on its own.
#[test]
fn delete_messages_is_one_commit_with_an_answer_per_message() {
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "qu1", md(&[])).await.unwrap();
        for i in 0..4 {
            s.put_message(ACCT, "qu1", format!("m{i}"), None, None).await.unwrap();
        }
        let got = s.get_messages(ACCT, "qu1", Some(4), Some(30)).await.unwrap();
        let mut items: Vec<(String, String)> = got
            .iter()
            .map(|m| (m.id.to_string(), m.pop_receipt.to_string()))
            .collect();
        items[1].1 = got[0].pop_receipt.to_string(); // another message's receipt
        items.push(("not-a-uuid".into(), got[2].pop_receipt.to_string()));
        let commits = s.wal().commits();
        let out = s.delete_messages(ACCT, "qu1", &items).await.unwrap();
        assert_eq!(s.wal().commits(), commits + 1, "one group commit for the batch");
        assert_eq!(
            out,
            vec![
                Ok(()),
                Err(QueueError::MessageNotFound),
                Ok(()),
                Ok(()),
                Err(QueueError::MessageNotFound)
            ]
        );
        let left = s.peek_messages(ACCT, "qu1", Some(32)).await.unwrap();
        assert!(left.is_empty(), "the one left is invisible");
        assert_eq!(s.message_count(), 1);
        assert_eq!(
            s.delete_messages(ACCT, "nope", &items).await,
            Err(QueueError::QueueNotFound)
        );
    });
}

/// Put Message Batch: one group commit for the whole batch; a message Put
/// Message would refuse is refused alone.
#[test]
fn put_messages_is_one_commit_with_an_answer_per_message() {
    let (_d, _c, s) = fresh();
    block_on(async {
        s.create_queue(ACCT, "qu1", md(&[])).await.unwrap();
        s.put_message(ACCT, "qu1", "warm".into(), None, None).await.unwrap();
        let commits = s.wal().commits();
        let texts = vec!["a".to_string(), "x".repeat(MAX_MESSAGE_BYTES + 1), "c".to_string()];
        let out = s.put_messages(ACCT, "qu1", texts, None, None).await.unwrap();
        assert_eq!(s.wal().commits(), commits + 1, "one group commit for the batch");
        assert!(out[0].is_ok() && out[2].is_ok());
        assert!(
            matches!(out[1], Err(QueueError::RequestBodyTooLarge { .. })),
            "{:?}",
            out[1]
        );
        assert_eq!(s.message_count(), 3);
        assert_eq!(
            s.put_messages(ACCT, "nope", vec!["a".into()], None, None).await,
            Err(QueueError::QueueNotFound)
        );
    });
}
