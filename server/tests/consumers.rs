//! Competing consumers on the real server with two shards: connections land
//! on both cores (SO_REUSEPORT spreads them by address), so most of them
//! reach the queue's owner through the channel mesh. A message must never be
//! delivered to two consumers while its visibility timeout runs, and every
//! message must be delivered and deleted exactly once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hematite_tests::client;

use hematite_tests::proc;

const MESSAGES: usize = 400;
/// Eight connections: the chance that all land on one of two cores is 1/128.
const CONSUMERS: usize = 8;

#[test]
fn no_message_is_delivered_to_two_consumers_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let port = proc::free_port();
    let mut server = proc::spawn_ready(proc::command(
        env!("CARGO_BIN_EXE_hematite").as_ref(),
        port,
        dir.path(),
        &["--shards", "2", "--io-memory-kib", "512"],
    ))
    .expect("hematite starts");
    let mut c = client::Client::new(port);
    assert_eq!(
        c.call("PUT", "/devstoreaccount1/sharedq", &[], b"").unwrap().status,
        201
    );
    for i in 0..MESSAGES {
        let r = c
            .call(
                "POST",
                "/devstoreaccount1/sharedq/messages",
                &[],
                &client::message_xml(&format!("m{i}")),
            )
            .unwrap();
        assert_eq!(r.status, 201, "{}", r.body);
    }
    // id -> the consumers that received it (each within a 60 s timeout,
    // longer than the test, so a second delivery is always a violation).
    let got: Arc<Mutex<HashMap<String, Vec<usize>>>> = Arc::default();
    let threads: Vec<_> = (0..CONSUMERS)
        .map(|w| {
            let got = got.clone();
            std::thread::spawn(move || {
                let mut c = client::Client::new(port);
                let mut n = 1 + w % 5;
                loop {
                    let r = c
                        .call(
                            "GET",
                            &format!("/devstoreaccount1/sharedq/messages?numofmessages={n}&visibilitytimeout=60"),
                            &[],
                            b"",
                        )
                        .unwrap();
                    assert_eq!(r.status, 200, "{}", r.body);
                    let ids = client::all_between(&r.body, "MessageId");
                    if ids.is_empty() {
                        return;
                    }
                    let receipts = client::all_between(&r.body, "PopReceipt");
                    for (id, receipt) in ids.iter().zip(&receipts) {
                        got.lock().unwrap().entry(id.clone()).or_default().push(w);
                        let d = c
                            .call(
                                "DELETE",
                                &format!("/devstoreaccount1/sharedq/messages/{id}?popreceipt={receipt}"),
                                &[],
                                b"",
                            )
                            .unwrap();
                        assert_eq!(d.status, 204, "delete with the receipt just received: {}", d.body);
                    }
                    n = n % 32 + 1;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("consumer");
    }
    let got = got.lock().unwrap();
    let twice: Vec<_> = got.iter().filter(|(_, who)| who.len() > 1).collect();
    assert!(twice.is_empty(), "delivered to two consumers at once: {twice:?}");
    assert_eq!(got.len(), MESSAGES, "every message delivered once");
    assert!(proc::stop(&mut server).success());
}
