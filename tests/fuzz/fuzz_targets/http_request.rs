//! The HTTP/1.1 reader on arbitrary bytes, delivered in arbitrary pieces:
//! it must frame or refuse, never panic or loop; then addressing and routing.
#![no_main]

use futures_lite::{AsyncRead, AsyncWrite};
use libfuzzer_sys::fuzz_target;
use server::http::Reader;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

struct Bytes {
    data: Vec<u8>,
    pos: usize,
    step: usize,
}

impl AsyncRead for Bytes {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let n = self.step.min(buf.len()).min(self.data.len() - self.pos);
        let p = self.pos;
        buf[..n].copy_from_slice(&self.data[p..p + n]);
        self.pos += n;
        Poll::Ready(Ok(n))
    }
}

impl AsyncWrite for Bytes {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else { return };
    let mut r = Reader::new(Bytes { data: rest.to_vec(), pos: 0, step: (step as usize % 64) + 1 });
    futures_lite::future::block_on(async {
        for _ in 0..16 {
            match r.next_request().await {
                Ok(Some(req)) => {
                    if let Ok(t) = server::addressing::parse_target(&req, &server::addressing::Addressing::path_style_only()) {
                        let _ = server::ops::route(&req.method, &t);
                        let _ = server::auth::Sas::from_target(&t);
                    }
                    if let Some(a) = req.header("authorization") {
                        let _ = server::auth::parse_authorization(a);
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    });
});
