"""--max-message-kib (docs/EXTENSIONS.md, "Larger messages") through the
official Python SDK: a server started with 1024 takes and returns messages of
up to 1 MiB, answers one byte more as Azure answers a message over its limit
(413 RequestBodyTooLarge, MaxLimit the configured size), and a Get stops at
2 MiB of text. The default server keeps Azure's 64 KiB."""

from email.utils import formatdate

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import BinaryBase64DecodePolicy, BinaryBase64EncodePolicy, QueueServiceClient

from conftest import Raw, Server, open_socket

KIB = 1024
MIB = 1024 * KIB


@pytest.fixture(scope="module")
def large():
    s = Server(extra_args=["--max-message-kib", "1024", "--shards", "1"])
    yield s
    assert s.stop() == 0


@pytest.fixture
def big_queue(large, qname):
    q = QueueServiceClient.from_connection_string(large.conn_str()).create_queue(qname)
    yield q
    q.delete_queue()


def max_limit(body):
    return body.split("<MaxLimit>")[1].split("</MaxLimit>")[0]


def head_only(port, path, length):
    """Sends only the head of a signed POST announcing a `length`-byte body,
    and reads the answer: a body over the limit is refused from the head
    alone, before any of it is sent (sending it to a server that has
    answered and closed would end in a reset, and lose the answer)."""
    raw = Raw(port)
    headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2026-10-06", "Content-Length": str(length)}
    headers["Authorization"] = raw.sign("POST", path, "", headers)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with open_socket(port) as sock:
        sock.sendall(head.encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.decode().partition("\r\n")
    code = rest.split("x-ms-error-code: ")[1].split("\r\n")[0]
    return int(status_line.split()[1]), code, rest


def test_a_1000_kib_message_round_trips(big_queue):
    text = "".join(chr(ord("a") + i % 26) for i in range(1000 * KIB))
    sent = big_queue.send_message(text)
    peeked = big_queue.peek_messages()
    assert [m.content for m in peeked] == [text]
    got = big_queue.receive_message()
    assert got.id == sent.id and got.content == text and got.dequeue_count == 1
    updated = big_queue.update_message(got, pop_receipt=got.pop_receipt, content=text[::-1], visibility_timeout=0)
    again = big_queue.receive_message()
    assert again.content == text[::-1]
    big_queue.delete_message(again.id, again.pop_receipt)
    assert updated.pop_receipt and big_queue.get_queue_properties().approximate_message_count == 0


def test_binary_content_base64_encoded_up_to_the_limit(large, qname):
    # Base64 makes 4 characters of 3 bytes: 786,432 bytes fill exactly 1 MiB.
    svc = QueueServiceClient.from_connection_string(large.conn_str())
    q = svc.get_queue_client(qname, message_encode_policy=BinaryBase64EncodePolicy(),
                             message_decode_policy=BinaryBase64DecodePolicy())
    q.create_queue()
    try:
        data = bytes(range(256)) * (786_432 // 256)
        q.send_message(data)
        assert q.receive_message().content == data
    finally:
        q.delete_queue()


def test_one_byte_over_the_limit_is_refused_as_azure_refuses_it(big_queue, large, qname):
    big_queue.send_message("x" * MIB)
    with pytest.raises(HttpResponseError) as e:
        big_queue.send_message("x" * (MIB + 1))
    assert e.value.status_code == 413 and e.value.error_code == "RequestBodyTooLarge"
    raw = Raw(large.port)
    status, headers, body = raw.request("POST", f"/devstoreaccount1/{qname}/messages",
                                        body=f"<QueueMessage><MessageText>{'y' * (MIB + 1)}</MessageText></QueueMessage>".encode())
    assert (status, headers["x-ms-error-code"], max_limit(body)) == (413, "RequestBodyTooLarge", str(MIB))
    # A body over the request limit (twice the message size, plus 512) is
    # refused before it is read, with that limit.
    status, code, body = head_only(large.port, f"/devstoreaccount1/{qname}/messages", 2 * MIB + 513)
    assert (status, code, max_limit(body)) == (413, "RequestBodyTooLarge", str(2 * MIB + 512))
    assert [len(m.content) for m in big_queue.peek_messages()] == [MIB]


def test_a_get_stops_at_two_mib_of_text(big_queue, large, qname):
    for i in range(5):
        big_queue.send_message(f"{i}" * (600 * KIB))
    raw = Raw(large.port)

    def first_chars(query):
        status, _, body = raw.request("GET", f"/devstoreaccount1/{qname}/messages", query)
        assert status == 200
        return [t[0] for t in body.split("<MessageText>")[1:]]

    # 600 KiB each: three fit in 2 MiB of text, the fourth would not.
    assert first_chars("numofmessages=32&peekonly=true") == ["0", "1", "2"]
    assert first_chars("numofmessages=32&visibilitytimeout=60") == ["0", "1", "2"]
    assert first_chars("numofmessages=32&peekonly=true") == ["3", "4"]
    # The SDK's iterator asks again until it has what it wanted.
    assert [m.content[0] for m in big_queue.receive_messages(max_messages=32)] == ["3", "4"]


def test_the_default_server_keeps_azures_64_kib(queue, raw):
    queue.send_message("a" * 64 * KIB)
    for size in (64 * KIB + 1, 65 * KIB + 1):
        with pytest.raises(HttpResponseError) as e:
            queue.send_message("a" * size)
        assert e.value.status_code == 413 and e.value.error_code == "RequestBodyTooLarge"
        status, headers, body = raw.request("POST", f"/devstoreaccount1/{queue.queue_name}/messages",
                                            body=f"<QueueMessage><MessageText>{'a' * size}</MessageText></QueueMessage>".encode())
        assert (status, headers["x-ms-error-code"], max_limit(body)) == (413, "RequestBodyTooLarge", "65536")
    status, code, body = head_only(raw.port, f"/devstoreaccount1/{queue.queue_name}/messages", 131_585)
    assert (status, code, max_limit(body)) == (413, "RequestBodyTooLarge", "131584")


def test_only_message_operations_take_bodies_past_azures_limit(large, big_queue, qname):
    raw = Raw(large.port)
    acl = "<SignedIdentifiers>" + " " * (200 * KIB) + "</SignedIdentifiers>"
    status, headers, body = raw.request("PUT", f"/devstoreaccount1/{qname}", "comp=acl", body=acl.encode())
    assert (status, headers["x-ms-error-code"], max_limit(body)) == (413, "RequestBodyTooLarge", "131584")
    status, _, _ = raw.request("PUT", f"/devstoreaccount1/{qname}", "comp=acl", body=b"<SignedIdentifiers></SignedIdentifiers>")
    assert status == 204
