"""Message operations through the official Python SDK: put, get, peek,
delete, update, clear, with every parameter range and error code."""

import time

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError


def code(e):
    return e.value.error_code


def test_send_receive_delete_cycle(queue):
    sent = queue.send_message("hello <&> 'world' \"x\" é")
    assert sent.id and sent.pop_receipt and sent.inserted_on and sent.expires_on
    got = list(queue.receive_messages(max_messages=32))
    assert [m.content for m in got] == ["hello <&> 'world' \"x\" é"]
    assert got[0].dequeue_count == 1 and got[0].id == sent.id
    queue.delete_message(got[0])
    assert list(queue.peek_messages(max_messages=32)) == []
    assert queue.get_queue_properties().approximate_message_count == 0


def test_fifo_order_peek_and_counts(queue):
    for i in range(10):
        queue.send_message(f"m{i}")
    peeked = queue.peek_messages(max_messages=32)
    assert [m.content for m in peeked] == [f"m{i}" for i in range(10)]
    assert all(m.dequeue_count == 0 for m in peeked)
    got = queue.receive_messages(messages_per_page=4, max_messages=4, visibility_timeout=30)
    assert [m.content for m in got] == ["m0", "m1", "m2", "m3"]
    assert queue.peek_messages()[0].content == "m4"
    assert queue.get_queue_properties().approximate_message_count == 10


def test_visibility_timeout_and_dequeue_count(queue):
    queue.send_message("x")
    first = queue.receive_message(visibility_timeout=1)
    assert queue.receive_message() is None
    time.sleep(1.3)
    second = queue.receive_message(visibility_timeout=30)
    assert second.dequeue_count == 2 and second.id == first.id
    # the first receipt is now stale: Azure answers 404 MessageNotFound
    with pytest.raises(ResourceNotFoundError) as e:
        queue.delete_message(first.id, first.pop_receipt)
    assert code(e) == "MessageNotFound"
    queue.delete_message(second)


def test_delayed_message_and_put_receipt(queue):
    sent = queue.send_message("later", visibility_timeout=60)
    assert queue.receive_message() is None
    # the receipt from Put shortens the delay
    queue.update_message(sent.id, sent.pop_receipt, visibility_timeout=0)
    assert queue.receive_message().content == "later"


def test_ttl_forever_and_bad_ttl(queue):
    sent = queue.send_message("forever", time_to_live=-1)
    assert sent.expires_on.year == 9999
    with pytest.raises(HttpResponseError) as e:
        queue.send_message("x", time_to_live=0)
    assert code(e) == "InvalidQueryParameterValue"
    with pytest.raises(HttpResponseError) as e:
        queue.send_message("x", visibility_timeout=10, time_to_live=10)
    assert code(e) == "InvalidQueryParameterValue"
    with pytest.raises(HttpResponseError) as e:
        queue.send_message("x", visibility_timeout=604801)
    assert code(e) == "OutOfRangeQueryParameterValue"


def test_message_expires(queue):
    queue.send_message("short", time_to_live=1)
    time.sleep(1.2)
    assert list(queue.peek_messages(max_messages=32)) == []
    assert queue.get_queue_properties().approximate_message_count == 0


def test_size_limit_counts_utf8_bytes(queue):
    queue.send_message("a" * 65536)
    # The limit counts the unescaped text's UTF-8 bytes: escaping and
    # multi-byte characters make the body larger than 64 KiB (as the JS SDK's
    # recorded tests against Azure do).
    special = "<>&\"'" + "中" * ((65536 - 5) // 3)
    special += "a" * (65536 - len(special.encode()))
    assert len(special.encode()) == 65536
    queue.send_message(special)
    with pytest.raises(HttpResponseError) as e:
        queue.send_message("a" * 65537)
    assert e.value.status_code == 413 and code(e) == "RequestBodyTooLarge"
    with pytest.raises(HttpResponseError) as e:
        queue.send_message("é" * 32769)
    assert e.value.status_code == 413
    got = list(queue.receive_messages(max_messages=2))
    assert sorted(len(m.content.encode()) for m in got) == [65536, 65536]
    assert special in [m.content for m in got]


def test_numofmessages_and_visibility_ranges(queue, raw):
    path = f"/devstoreaccount1/{queue.queue_name}/messages"
    for query in ["numofmessages=0", "numofmessages=33", "visibilitytimeout=0", "visibilitytimeout=604801"]:
        status, headers, body = raw.request("GET", path, query)
        assert (status, headers["x-ms-error-code"]) == (400, "OutOfRangeQueryParameterValue"), query
        assert "<QueryParameterName>" in body and "<MinimumAllowed>" in body and "<MaximumAllowed>" in body
    status, headers, _ = raw.request("GET", path, "numofmessages=abc")
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidQueryParameterValue")
    status, _, body = raw.request("GET", path, "numofmessages=32")
    assert status == 200 and body.endswith("<QueueMessagesList />")


def test_update_message_content_and_visibility(queue):
    queue.send_message("old")
    m = queue.receive_message(visibility_timeout=30)
    u = queue.update_message(m, content="new", visibility_timeout=0)
    assert u.pop_receipt != m.pop_receipt
    peeked = queue.peek_messages()[0]
    assert (peeked.content, peeked.dequeue_count) == ("new", 1)
    # the old receipt no longer works
    with pytest.raises(ResourceNotFoundError):
        queue.update_message(m.id, m.pop_receipt, visibility_timeout=0)
    # visibility only keeps the text
    u2 = queue.update_message(m.id, u.pop_receipt, visibility_timeout=30)
    assert queue.peek_messages() == []
    queue.update_message(m.id, u2.pop_receipt, visibility_timeout=0)
    assert queue.peek_messages()[0].content == "new"


def test_update_and_delete_errors_on_the_wire(queue, raw):
    sent = queue.send_message("x")
    path = f"/devstoreaccount1/{queue.queue_name}/messages/{sent.id}"
    status, headers, _ = raw.request("DELETE", path)
    assert (status, headers["x-ms-error-code"]) == (400, "MissingRequiredQueryParameter")
    status, headers, body = raw.request("DELETE", path, "popreceipt=not*valid")
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidQueryParameterValue")
    assert "Invalid pop receipt format" in body
    status, headers, _ = raw.request("PUT", path, f"popreceipt={sent.pop_receipt}")
    assert (status, headers["x-ms-error-code"]) == (400, "MissingRequiredQueryParameter")
    status, headers, _ = raw.request("PUT", path, f"popreceipt={sent.pop_receipt}&visibilitytimeout=0",
                                     {"Content-Type": "application/xml"}, b"")
    assert status == 204 and headers["x-ms-popreceipt"] and headers["x-ms-time-next-visible"].endswith("GMT")
    status, headers, _ = raw.request("DELETE", f"/devstoreaccount1/{queue.queue_name}/messages/00000000-0000-0000-0000-000000000000",
                                     f"popreceipt={headers['x-ms-popreceipt']}")
    assert (status, headers["x-ms-error-code"]) == (404, "MessageNotFound")


def test_put_xml_errors(queue, raw):
    path = f"/devstoreaccount1/{queue.queue_name}/messages"
    for body in [b"not xml", b"<Wrong><MessageText>x</MessageText></Wrong>", b"<QueueMessage></QueueMessage>"]:
        status, headers, _ = raw.request("POST", path, "", {"Content-Type": "application/xml"}, body)
        assert (status, headers["x-ms-error-code"]) == (400, "InvalidXmlDocument"), body
    big = b"<QueueMessage><MessageText>" + b"a" * 140000 + b"</MessageText></QueueMessage>"
    status, headers, body = raw.request("POST", path, "", {"Content-Type": "application/xml"}, big)
    assert status == 413 and headers["x-ms-error-code"] == "RequestBodyTooLarge" and "<MaxLimit>131584</MaxLimit>" in body


def test_put_response_shape(queue, raw):
    path = f"/devstoreaccount1/{queue.queue_name}/messages"
    body = b"<QueueMessage><MessageText>hi</MessageText></QueueMessage>"
    status, headers, text = raw.request("POST", path, "messagettl=-1", {"Content-Type": "application/xml"}, body)
    assert status == 201 and headers["content-type"] == "application/xml"
    order = ["MessageId", "InsertionTime", "ExpirationTime", "PopReceipt", "TimeNextVisible"]
    positions = [text.index(f"<{t}>") for t in order]
    assert positions == sorted(positions)
    assert "<ExpirationTime>Fri, 31 Dec 9999 23:59:59 GMT</ExpirationTime>" in text


def test_clear_messages(queue):
    for i in range(5):
        queue.send_message(str(i))
    # receive_messages is a lazy pager: list() sends the request, so two
    # messages really are invisible when Clear runs.
    received = list(queue.receive_messages(max_messages=2, visibility_timeout=300))
    assert len(received) == 2
    assert len(queue.peek_messages(max_messages=32)) == 3
    queue.clear_messages()
    assert queue.get_queue_properties().approximate_message_count == 0
    # Invisible ones are gone too: nothing comes back once they would be visible.
    for m in received:
        with pytest.raises(ResourceNotFoundError):
            queue.delete_message(m.id, m.pop_receipt)


def test_operations_on_missing_queue(svc):
    q = svc.get_queue_client("no-such-queue-here")
    for op in [lambda: q.send_message("x"), lambda: q.receive_message(), lambda: q.peek_messages(), q.clear_messages]:
        with pytest.raises(ResourceNotFoundError) as e:
            op()
        assert code(e) == "QueueNotFound"


def test_conditional_headers_and_content_md5(queue, raw):
    import base64
    import hashlib
    path = f"/devstoreaccount1/{queue.queue_name}/messages"
    body = b"<QueueMessage><MessageText>md5</MessageText></QueueMessage>"
    status, headers, _ = raw.request("GET", path, "peekonly=true", {"If-Match": "*"})
    assert (status, headers["x-ms-error-code"]) == (400, "ConditionHeadersNotSupported")
    good = base64.b64encode(hashlib.md5(body).digest()).decode()
    status, _, _ = raw.request("POST", path, "", {"Content-Type": "application/xml", "Content-MD5": good}, body)
    assert status == 201
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    status, headers, text = raw.request("POST", path, "", {"Content-Type": "application/xml", "Content-MD5": wrong}, body)
    assert (status, headers["x-ms-error-code"]) == (400, "Md5Mismatch") and "<ServerCalculatedMd5>" in text
    status, headers, _ = raw.request("POST", path, "", {"Content-Type": "application/xml", "Content-MD5": "short"}, body)
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidMd5")
