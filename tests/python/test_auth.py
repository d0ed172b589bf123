"""Authentication and authorization: Shared Key with both keys and skew,
service SAS (permissions, expiry, stored policies), account SAS (services,
resource types, permissions), bearer, anonymous, unknown accounts."""

from datetime import datetime, timedelta, timezone
from email.utils import formatdate
from urllib.parse import urlencode

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.storage.queue import (AccessPolicy, AccountSasPermissions, QueueClient, QueueSasPermissions,
                                 QueueServiceClient, ResourceTypes, generate_account_sas, generate_queue_sas)

from conftest import ACCOUNT, KEY, KEY2, OTHER, OTHER_KEY, TLS, Raw, signature


def code(e):
    return e.value.error_code


def future(hours=1):
    return datetime.now(timezone.utc) + timedelta(hours=hours)


def test_second_key_and_wrong_key(server, qname):
    QueueServiceClient.from_connection_string(server.conn_str(key=KEY2)).create_queue(qname)
    bad = QueueServiceClient.from_connection_string(server.conn_str(key=OTHER_KEY))
    with pytest.raises(ClientAuthenticationError) as e:
        bad.get_queue_client(qname).get_queue_properties()
    assert code(e) == "AuthenticationFailed"


def test_other_account_is_separate(server, qname):
    other = QueueServiceClient.from_connection_string(server.conn_str(OTHER, OTHER_KEY))
    other.create_queue(qname)
    assert [q.name for q in other.list_queues()] == [qname]
    mine = QueueServiceClient.from_connection_string(server.conn_str())
    assert qname not in [q.name for q in mine.list_queues()]


def test_signature_mismatch_explains_string_to_sign(raw):
    wrong = Raw(raw.port, key=OTHER_KEY)
    status, headers, body = wrong.request("GET", "/devstoreaccount1/", "comp=list")
    assert (status, headers["x-ms-error-code"]) == (403, "AuthenticationFailed")
    assert "<AuthenticationErrorDetail>" in body and "string to sign" in body


def test_clock_skew_and_missing_date(raw):
    old = formatdate(timeval=datetime.now().timestamp() - 20 * 60, usegmt=True)
    status, headers, body = raw.request("GET", "/devstoreaccount1/", "comp=list", {"x-ms-date": old})
    assert (status, headers["x-ms-error-code"]) == (403, "AuthenticationFailed") and "too old" in body


def test_anonymous_bearer_malformed_and_unknown_account(raw):
    status, headers, _ = raw.request("GET", "/devstoreaccount1/", "comp=list", sign=False)
    assert (status, headers["x-ms-error-code"]) == (403, "AuthenticationFailed")
    status, headers, body = raw.request("GET", "/devstoreaccount1/", "comp=list", {"Authorization": "Bearer abc.def.ghi"}, sign=False)
    assert (status, headers["x-ms-error-code"]) == (403, "AuthenticationFailed") and "Bearer" in body
    assert "www-authenticate" not in headers
    status, headers, _ = raw.request("GET", "/devstoreaccount1/", "comp=list", {"Authorization": "Basic Zm9v"}, sign=False)
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidAuthenticationInfo")
    status, headers, _ = Raw(raw.port, account="nosuchaccount").request("GET", "/nosuchaccount/", "comp=list")
    assert (status, headers["x-ms-error-code"]) == (404, "ResourceNotFound")


def test_service_sas_permissions(server, queue):
    sas = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission=QueueSasPermissions(read=True, add=True, process=True), expiry=future())
    q = QueueClient.from_queue_url(f"{server.endpoint}/{queue.queue_name}", credential=sas)
    q.send_message("via sas")
    assert q.peek_messages()[0].content == "via sas"
    m = q.receive_message()
    with pytest.raises(HttpResponseError) as e:
        q.update_message(m, content="no u permission", visibility_timeout=0)
    assert code(e) == "AuthorizationPermissionMismatch"
    q.delete_message(m)
    with pytest.raises(HttpResponseError) as e:
        q.clear_messages()
    assert code(e) == "AuthorizationPermissionMismatch"
    with pytest.raises(HttpResponseError) as e:
        q.get_queue_access_policy()
    assert code(e) == "AuthorizationFailure"
    # the SAS names one queue; it does not verify for another
    other = QueueClient.from_queue_url(f"{server.endpoint}/someotherqueue", credential=sas)
    with pytest.raises(ClientAuthenticationError):
        other.peek_messages()


def test_service_sas_expired_and_not_yet_valid(server, queue):
    expired = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission="r", expiry=future(-1))
    with pytest.raises(ClientAuthenticationError) as e:
        QueueClient.from_queue_url(f"{server.endpoint}/{queue.queue_name}", credential=expired).peek_messages()
    assert code(e) == "AuthenticationFailed"
    later = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission="r", start=future(2), expiry=future(3))
    with pytest.raises(ClientAuthenticationError):
        QueueClient.from_queue_url(f"{server.endpoint}/{queue.queue_name}", credential=later).peek_messages()


def test_stored_access_policy_grants_and_revokes(server, queue):
    queue.set_queue_access_policy(signed_identifiers={"readers": AccessPolicy(permission="rp", expiry=future())})
    sas = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, policy_id="readers")
    q = QueueClient.from_queue_url(f"{server.endpoint}/{queue.queue_name}", credential=sas)
    queue.send_message("x")
    assert q.receive_message().content == "x"
    queue.set_queue_access_policy(signed_identifiers={})
    with pytest.raises(ClientAuthenticationError):
        q.peek_messages()


def test_stored_policy_sas_on_the_service_is_refused(raw):
    # A service SAS signed for no queue that names a stored policy: there is
    # no queue to hold the policy, so it matches none (the handler grants
    # such a SAS only after reading the policy from its queue's shard).
    # Built by hand: the SDK will not sign for an empty queue name. The
    # service string to sign: sp, st, se, resource, si, sip, spr, sv.
    sts = "\n".join(["", "", "", f"/queue/{ACCOUNT}/", "readers", "", "", "2026-10-06"])
    sig = signature(KEY, sts)
    sas = urlencode({"sv": "2026-10-06", "si": "readers", "sig": sig})
    status, headers, body = raw.request("GET", "/devstoreaccount1/", "comp=list&" + sas, sign=False)
    assert (status, headers["x-ms-error-code"]) == (403, "AuthenticationFailed")
    assert "does not match any stored access policy" in body


def test_account_sas(server, qname):
    sas = generate_account_sas(ACCOUNT, KEY, resource_types=ResourceTypes(service=True, container=True, object=True),
                               permission=AccountSasPermissions(read=True, list=True, write=True, add=True, process=True),
                               expiry=future())
    svc = QueueServiceClient(server.endpoint, credential=sas)
    svc.create_queue(qname)
    assert qname in [q.name for q in svc.list_queues()]
    q = svc.get_queue_client(qname)
    q.send_message("a")
    assert q.receive_message().content == "a"
    with pytest.raises(HttpResponseError) as e:
        q.delete_queue()
    assert code(e) == "AuthorizationPermissionMismatch"
    objects_only = generate_account_sas(ACCOUNT, KEY, resource_types=ResourceTypes(object=True),
                                        permission=AccountSasPermissions(read=True, list=True), expiry=future())
    with pytest.raises(HttpResponseError) as e:
        list(QueueServiceClient(server.endpoint, credential=objects_only).list_queues())
    assert code(e) == "AuthorizationResourceTypeMismatch"
    QueueServiceClient.from_connection_string(server.conn_str()).delete_queue(qname)


def test_shared_key_lite(raw, qname):
    status, _, _ = raw.request("PUT", f"/devstoreaccount1/{qname}", lite=True)
    assert status == 201
    status, headers, _ = raw.request("GET", f"/devstoreaccount1/{qname}", "comp=metadata", lite=True)
    assert status == 200 and headers["x-ms-approximate-messages-count"] == "0"
    wrong = Raw(raw.port, key=OTHER_KEY)
    status, headers, _ = wrong.request("GET", f"/devstoreaccount1/{qname}", "comp=metadata", lite=True)
    assert (status, headers["x-ms-error-code"]) == (403, "AuthenticationFailed")
    raw.request("DELETE", f"/devstoreaccount1/{qname}")


def test_host_style_addressing(raw, qname):
    # account.queue.<host>: the account comes from the host, the path has none
    host = {"Host": f"devstoreaccount1.queue.localhost:{raw.port}"}
    status, _, _ = raw.request("PUT", f"/{qname}", headers=host)
    assert status == 201
    status, _, body = raw.request("GET", "/", "comp=list&prefix=" + qname, headers=host)
    assert status == 200 and f"<Name>{qname}</Name>" in body
    raw.request("DELETE", f"/{qname}", headers=host)


def test_sas_ip_and_protocol_restrictions(server, queue):
    elsewhere = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission="r", expiry=future(), ip="10.9.8.7")
    with pytest.raises(HttpResponseError) as e:
        QueueClient.from_queue_url(f"{server.endpoint}/{queue.queue_name}", credential=elsewhere).peek_messages()
    assert code(e) == "AuthorizationSourceIPMismatch"
    here = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission="r", expiry=future(), ip="127.0.0.0-127.0.0.255")
    QueueClient.from_queue_url(f"{server.endpoint}/{queue.queue_name}", credential=here).peek_messages()
    # spr=https: refused over plain HTTP, accepted over TLS (the suite runs
    # both ways); spr=https,http is accepted either way.
    https_only = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission="r", expiry=future(), protocol="https")
    if TLS:
        QueueClient.from_queue_url(f"{server.endpoint}/{queue.queue_name}", credential=https_only).peek_messages()
    else:
        with pytest.raises(HttpResponseError) as e:
            QueueClient.from_queue_url(f"{server.endpoint}/{queue.queue_name}", credential=https_only).peek_messages()
        assert code(e) == "AuthorizationProtocolMismatch"
    both = generate_queue_sas(ACCOUNT, queue.queue_name, KEY, permission="r", expiry=future(), protocol="https,http")
    QueueClient.from_queue_url(f"{server.endpoint}/{queue.queue_name}", credential=both).peek_messages()


def test_account_sas_for_another_service(server):
    se = future().strftime("%Y-%m-%dT%H:%M:%SZ")
    sts = f"{ACCOUNT}\nrl\nb\nsco\n\n{se}\n\n\n2026-10-06\n\n"
    sig = signature(KEY, sts)
    token = urlencode({"sv": "2026-10-06", "ss": "b", "srt": "sco", "sp": "rl", "se": se, "sig": sig})
    with pytest.raises(HttpResponseError) as e:
        list(QueueServiceClient(f"{server.endpoint}?{token}").list_queues())
    assert code(e) == "AuthorizationServiceMismatch"


def test_azurite_receipt_mode():
    from conftest import Server
    s = Server(extra_args=["--azurite-receipt-errors", "--shards", "1"])
    try:
        q = QueueServiceClient.from_connection_string(s.conn_str()).create_queue("azmode")
        sent = q.send_message("x")
        q.receive_message()
        with pytest.raises(HttpResponseError) as e:
            q.delete_message(sent.id, sent.pop_receipt)
        assert (e.value.status_code, code(e)) == (400, "PopReceiptMismatch")
    finally:
        assert s.stop() == 0
