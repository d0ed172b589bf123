"""Hematite's extensions (docs/EXTENSIONS.md) through the official Python
SDK, unmodified: queue attributes set as metadata with the SDK itself, long
polling, dead-letter queues, and the batches sent through the SDK's own
signed pipeline. Plus what only raw HTTP can show (a waiter whose
connection closes)."""

import threading
import time
import uuid

import pytest
from azure.core.exceptions import HttpResponseError
from azure.core.rest import HttpRequest
from conftest import ACCOUNT, open_socket, wait_until


def other_queue(svc, **kw):
    return svc.create_queue("x" + uuid.uuid4().hex[:20], **kw)


def test_attributes_are_metadata_and_bad_values_name_their_key(queue, svc):
    queue.set_queue_metadata({"hematite_receive_wait_seconds": "7", "team": "a"})
    assert queue.get_queue_properties().metadata == {"hematite_receive_wait_seconds": "7", "team": "a"}
    for bad, key in [
        ({"hematite_receive_wait_seconds": "21"}, "hematite_receive_wait_seconds"),
        ({"hematite_receive_wait_seconds": "soon"}, "hematite_receive_wait_seconds"),
        ({"hematite_max_dequeue_count": "3"}, "hematite_max_dequeue_count"),
        ({"hematite_max_dequeue_count": "3", "hematite_dead_letter_queue": "nosuchqueue"}, "hematite_dead_letter_queue"),
        ({"hematite_wait": "1"}, "hematite_wait"),
    ]:
        with pytest.raises(HttpResponseError) as e:
            queue.set_queue_metadata(bad)
        assert e.value.status_code == 400 and e.value.error_code == "InvalidMetadata", bad
        assert key in str(e.value), (bad, str(e.value))
    assert queue.get_queue_properties().metadata["hematite_receive_wait_seconds"] == "7", "a refused set changes nothing"
    with pytest.raises(HttpResponseError) as e:
        svc.create_queue("q" + uuid.uuid4().hex[:20], metadata={"hematite_receive_wait_seconds": "-1"})
    assert e.value.error_code == "InvalidMetadata"


def test_long_poll_answers_when_a_message_arrives(queue):
    queue.set_queue_metadata({"hematite_receive_wait_seconds": "10"})
    threading.Timer(0.5, lambda: queue.send_message("late")).start()
    start = time.time()
    got = queue.receive_message()
    took = time.time() - start
    assert got is not None and got.content == "late"
    assert 0.4 <= took < 3, took


def test_long_poll_ends_empty_at_the_deadline_and_zero_means_azure(queue):
    queue.set_queue_metadata({"hematite_receive_wait_seconds": "1"})
    start = time.time()
    assert queue.receive_message() is None
    assert 0.9 <= time.time() - start < 4
    start = time.time()
    assert queue.receive_message(headers={"x-hematite-wait-seconds": "0"}) is None
    assert time.time() - start < 0.5, "a request's 0 answers at once"


def test_a_receive_loop_costs_one_request_per_message(queue):
    requests = []

    def count(response):
        requests.append(response.http_request.url)

    def producer():
        for i in range(3):
            time.sleep(0.3)
            queue.send_message(f"m{i}")

    threading.Thread(target=producer).start()
    got = []
    for _ in range(3):
        m = queue.receive_message(headers={"x-hematite-wait-seconds": "10"}, raw_response_hook=count)
        got.append(m.content)
        queue.delete_message(m)
    assert got == ["m0", "m1", "m2"]
    assert len(requests) == 3, requests


def test_the_wait_header_is_checked(queue):
    with pytest.raises(HttpResponseError) as e:
        queue.receive_message(headers={"x-hematite-wait-seconds": "21"})
    assert e.value.status_code == 400 and e.value.error_code == "InvalidHeaderValue"


def test_a_waiter_whose_connection_closes_takes_no_message(server, queue, raw):
    path = f"/{ACCOUNT}/{queue.queue_name}/messages"
    headers = {"x-hematite-wait-seconds": "20", "x-ms-date": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()),
               "x-ms-version": "2026-10-06"}
    headers["Authorization"] = raw.sign("GET", path, "", headers)
    s = open_socket(server.port)
    head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    s.sendall(head.encode())
    time.sleep(0.3)
    s.close()
    time.sleep(1.8)  # past the server's long-request check (1 s, timed from its first reaper tick) and the next tick
    queue.send_message("for the living")
    got = queue.receive_message()
    assert got is not None and got.content == "for the living"
    assert got.dequeue_count == 1, "the departed waiter must not have taken it first"


def test_dead_letter_queue_takes_a_message_delivered_too_often(svc, queue):
    dlq = other_queue(svc)
    queue.set_queue_metadata({"hematite_max_dequeue_count": "2", "hematite_dead_letter_queue": dlq.queue_name})
    sent = queue.send_message("poison")
    for _ in range(2):
        m = queue.receive_message(visibility_timeout=1)
        assert m is not None and m.content == "poison"
        time.sleep(1.1)
    assert queue.receive_message() is None, "a third delivery is refused"
    assert wait_until(lambda: len(dlq.peek_messages()) == 1)
    moved = dlq.peek_messages()[0]
    assert (moved.id, moved.content, moved.dequeue_count) == (sent.id, "poison", 2)
    assert moved.inserted_on == sent.inserted_on and moved.expires_on == sent.expires_on
    assert queue.get_queue_properties().approximate_message_count == 0
    dlq.delete_queue()


def test_a_cycle_of_dead_letter_queues_is_refused(svc, queue):
    dlq = other_queue(svc)
    queue.set_queue_metadata({"hematite_max_dequeue_count": "2", "hematite_dead_letter_queue": dlq.queue_name})
    with pytest.raises(HttpResponseError) as e:
        dlq.set_queue_metadata({"hematite_max_dequeue_count": "2", "hematite_dead_letter_queue": queue.queue_name})
    assert e.value.error_code == "InvalidMetadata" and "hematite_dead_letter_queue" in str(e.value)
    dlq.delete_queue()


def test_batches_through_the_sdks_signed_pipeline(queue):
    client = queue._client  # the SDK's generated client: its pipeline signs with the account key
    url = f"{queue.url}/messages?comp=batch"
    body = "<QueueMessageBatch>" + "".join(
        f"<QueueMessage><MessageText>b{i}</MessageText></QueueMessage>" for i in range(3)) + "</QueueMessageBatch>"
    resp = client.send_request(HttpRequest("POST", url, content=body.encode(), headers={"Content-Type": "application/xml"}))
    assert resp.status_code == 201, resp.text()
    assert resp.text().count("<Status>201</Status>") == 3
    got = queue.receive_messages(max_messages=32)
    msgs = list(got)
    assert sorted(m.content for m in msgs) == ["b0", "b1", "b2"]
    delete = "<BatchDelete>" + "".join(
        f"<Message><MessageId>{m.id}</MessageId><PopReceipt>{m.pop_receipt}</PopReceipt></Message>" for m in msgs
    ) + "</BatchDelete>"
    resp = client.send_request(
        HttpRequest("POST", f"{queue.url}/messages?comp=batchdelete", content=delete.encode(),
                    headers={"Content-Type": "application/xml"}))
    assert resp.status_code == 200, resp.text()
    assert resp.text().count("<Status>204</Status>") == 3
    assert queue.get_queue_properties().approximate_message_count == 0
