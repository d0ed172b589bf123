//! Drives the main flows of `azure_storage_queue` against the queue URL in
//! `QUEUE_SAS_URL` (a URL carrying an account SAS), exiting non-zero on any
//! mismatch. Run by tests/python/test_rust_sdk.py.

use azure_core::http::Url;
use azure_storage_queue::models::QueueMessage;
use azure_storage_queue::QueueClient;

fn check(cond: bool, what: &str) {
    if !cond {
        eprintln!("rust sdk check failed: {what}");
        std::process::exit(1);
    }
}

#[tokio::main]
async fn main() -> azure_core::Result<()> {
    let url = std::env::var("QUEUE_SAS_URL").expect("QUEUE_SAS_URL");
    let q = QueueClient::new(Url::parse(&url)?, None, None)?;
    q.create(None).await?;
    check(q.exists().await?, "queue exists after create");
    for text in ["from rust <&>", "second"] {
        let msg = QueueMessage {
            message_text: Some(text.to_string()),
        };
        q.send_message(msg.try_into()?, None).await?;
    }
    let peeked = q.peek_messages(None).await?.into_model()?;
    let first = peeked.items.unwrap_or_default();
    check(
        first.first().and_then(|m| m.message_text.as_deref()) == Some("from rust <&>"),
        "peek returns the first message",
    );
    let got = q.receive_messages(None).await?.into_model()?.items.unwrap_or_default();
    check(got.len() == 1, "receive returns one message");
    let m = &got[0];
    check(m.dequeue_count == Some(1), "dequeue count is 1");
    let id = m.message_id.clone().unwrap_or_default();
    let receipt = m.pop_receipt.clone().unwrap_or_default();
    q.update_message(&id, &receipt, 0, None).await?;
    // the old receipt is stale now: Azure answers 404 MessageNotFound (any
    // other error, a timeout say, must not pass for it)
    let stale = q.delete_message(&id, &receipt, None).await;
    let refused = match &stale {
        Err(e) => match e.kind() {
            azure_core::error::ErrorKind::HttpResponse { status, error_code, .. } => {
                *status == azure_core::http::StatusCode::NotFound && error_code.as_deref() == Some("MessageNotFound")
            }
            _ => false,
        },
        Ok(_) => false,
    };
    check(refused, "stale receipt is refused with 404 MessageNotFound");
    let opts = azure_storage_queue::models::QueueClientReceiveMessagesOptions {
        number_of_messages: Some(32),
        ..Default::default()
    };
    let again = q
        .receive_messages(Some(opts))
        .await?
        .into_model()?
        .items
        .unwrap_or_default();
    check(again.len() == 2, "both messages are visible again");
    let back = again.iter().find(|x| x.message_id.as_deref() == Some(id.as_str()));
    check(
        back.and_then(|b| b.dequeue_count) == Some(2),
        "the updated message comes back with dequeue count 2",
    );
    let back = back.expect("checked");
    q.delete_message(&id, back.pop_receipt.as_deref().unwrap_or(""), None)
        .await?;
    q.clear(None).await?;
    q.delete(None).await?;
    check(!q.exists().await?, "queue is gone after delete");
    println!("rust sdk: all checks passed");
    Ok(())
}
