//! Micro-benchmarks of the server's per-request work: HTTP parse plus
//! route, Shared Key verification, and XML encoding of a 32-message Get
//! response. Run: `cargo bench -p hematite-server`.

use base64::Engine;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use server::addressing::parse_target;
use server::auth::{shared_key, shared_key_strings, signature, Account};
use server::http::{Reader, Request};
use server::ops::route;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

const KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

struct Once(Vec<u8>, usize);
impl futures_lite::AsyncRead for Once {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let n = buf.len().min(self.0.len() - self.1);
        let p = self.1;
        buf[..n].copy_from_slice(&self.0[p..p + n]);
        self.1 += n;
        Poll::Ready(Ok(n))
    }
}
impl futures_lite::AsyncWrite for Once {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn signed_put() -> (Request, Vec<u8>) {
    let body = format!(
        "<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
        "x".repeat(1024)
    );
    let headers: server::http::Headers = [
        ("Host".to_string(), "127.0.0.1:10001".to_string()),
        ("x-ms-version".to_string(), "2026-10-06".to_string()),
        ("x-ms-date".to_string(), httpdate::fmt_http_date(SystemTime::now())),
        (
            "x-ms-client-request-id".to_string(),
            "6f0d6a8e-6a4e-4b7e-9a57-0c1f7e2b9d11".to_string(),
        ),
        ("Content-Type".to_string(), "application/xml".to_string()),
        ("Content-Length".to_string(), body.len().to_string()),
    ]
    .into_iter()
    .collect();
    let mut req = Request {
        method: "POST".into(),
        target: "/devstoreaccount1/myqueue/messages?visibilitytimeout=0&messagettl=-1".into(),
        http10: false,
        headers,
        body: Default::default(),
        hangup: None,
    };
    let key = base64::engine::general_purpose::STANDARD.decode(KEY).unwrap();
    let unsigned = req.clone();
    let t = parse_target(&unsigned, &server::addressing::Addressing::path_style_only()).unwrap();
    let sig = signature(&key, &shared_key_strings(&req, "devstoreaccount1", &t)[0]);
    req.headers
        .push("Authorization", &format!("SharedKey devstoreaccount1:{sig}"));
    let mut raw = format!("{} {} HTTP/1.1\r\n", req.method, req.target);
    for (k, v) in &req.headers {
        raw.push_str(&format!("{k}: {v}\r\n"));
    }
    raw.push_str("\r\n");
    raw.push_str(&body);
    (req, raw.into_bytes())
}

fn http(c: &mut Criterion) {
    let (_, raw) = signed_put();
    let mut g = c.benchmark_group("http");
    g.throughput(Throughput::Bytes(raw.len() as u64));
    g.bench_function("parse_and_route_1KiB_put", |b| {
        b.iter(|| {
            let mut r = Reader::new(Once(raw.clone(), 0));
            let req = futures_lite::future::block_on(r.next_request()).unwrap().unwrap();
            let t = parse_target(&req, &server::addressing::Addressing::path_style_only()).unwrap();
            route(&req.method, &t).unwrap()
        })
    });
    g.finish();
}

fn auth(c: &mut Criterion) {
    let (req, _) = signed_put();
    let account = Account {
        name: "devstoreaccount1".into(),
        keys: vec![base64::engine::general_purpose::STANDARD.decode(KEY).unwrap()],
    };
    let t = parse_target(&req, &server::addressing::Addressing::path_style_only()).unwrap();
    c.bench_function("shared_key_verify", |b| {
        b.iter(|| shared_key(&req, &account, &t, SystemTime::now()).unwrap())
    });
}

fn xml(c: &mut Criterion) {
    let msgs: Vec<engine::shard::ReceivedMessage> = (0..32)
        .map(|i| engine::shard::ReceivedMessage {
            id: uuid::Uuid::new_v4(),
            inserted_ms: 1_800_000_000_000 + i,
            expires_ms: engine::limits::EXPIRY_NEVER_MS,
            pop_receipt: engine::model::PopReceipt { nonce: i, seq: i }.encode(),
            visible_ms: 1_800_000_030_000,
            dequeue_count: 1,
            text: format!("message {i} <with> & {}", "t".repeat(1000)),
        })
        .collect();
    let mut g = c.benchmark_group("xml");
    g.throughput(Throughput::Elements(32));
    g.bench_function("encode_get_response_32x1KiB", |b| {
        b.iter(|| server::xmlio::write_received(&msgs))
    });
    g.finish();
}

criterion_group!(benches, http, auth, xml);
criterion_main!(benches);
