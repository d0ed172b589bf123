"""Service level: properties (logging, metrics, CORS), stats on the
secondary, CORS preflight and CORS headers, versions, common headers, and the
development connection string."""

import os

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import CorsRule, Metrics, QueueAnalyticsLogging, QueueServiceClient, RetentionPolicy

from conftest import ACCOUNT, IN_MEMORY, KEY, Server, connection, plain_http_only


def test_service_properties_round_trip(svc):
    svc.set_service_properties(
        analytics_logging=QueueAnalyticsLogging(read=True, write=True, delete=False, retention_policy=RetentionPolicy(enabled=True, days=5)),
        hour_metrics=Metrics(enabled=True, include_apis=True, retention_policy=RetentionPolicy(enabled=True, days=2)),
        cors=[CorsRule(["http://a.example"], ["GET", "PUT"], allowed_headers=["x-ms-meta-*"], exposed_headers=["x-ms-request-id"], max_age_in_seconds=60)],
    )
    p = svc.get_service_properties()
    assert p["analytics_logging"].read and p["analytics_logging"].retention_policy.days == 5
    assert p["hour_metrics"].enabled and p["hour_metrics"].include_apis
    assert not p["minute_metrics"].enabled
    assert p["cors"][0].allowed_origins == "http://a.example" and p["cors"][0].max_age_in_seconds == 60
    with pytest.raises(HttpResponseError) as e:
        svc.set_service_properties(cors=[CorsRule(["*"], ["GET"])] * 6)
    assert e.value.error_code == "InvalidXmlDocument"
    svc.set_service_properties(cors=[])
    assert svc.get_service_properties()["cors"] == []


def test_service_properties_wire_status(raw):
    body = b"<StorageServiceProperties><MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics></StorageServiceProperties>"
    status, _, _ = raw.request("PUT", "/devstoreaccount1/", "restype=service&comp=properties", {"Content-Type": "application/xml"}, body)
    assert status == 202
    bad = body.replace(b"<Enabled>false</Enabled></RetentionPolicy>", b"<Enabled>false</Enabled><Days>3</Days></RetentionPolicy>")
    status, headers, text = raw.request("PUT", "/devstoreaccount1/", "restype=service&comp=properties", {"Content-Type": "application/xml"}, bad)
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidXmlDocument") and "only expected" in text


def test_service_stats_only_on_secondary(server, raw):
    # Raw requests only: the Python SDK sends Get Service Stats to a
    # configured secondary host, and with path-style addressing it appends
    # the account after the secondary one (a path this server does not route).
    status, _, body = raw.request("GET", f"/{ACCOUNT}-secondary/", "restype=service&comp=stats")
    assert status == 200 and "<Status>live</Status>" in body
    status, headers, _ = raw.request("GET", f"/{ACCOUNT}/", "restype=service&comp=stats")
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidQueryParameterValue")



def options(port, path, headers):
    c = connection(port)
    c.request("OPTIONS", path, headers=headers)
    r = c.getresponse()
    r.read()
    return r.status, {k.lower(): v for k, v in r.getheaders()}


def test_cors_preflight_and_response_headers(server, svc, raw, queue):
    svc.set_service_properties(cors=[CorsRule(["http://app.example"], ["GET", "PUT"], allowed_headers=["x-ms-meta-*", "content-type"], exposed_headers=["x-ms-*"], max_age_in_seconds=99)])
    try:
        status, h = options(server.port, f"/{ACCOUNT}/{queue.queue_name}", {"Origin": "http://app.example", "Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "x-ms-meta-foo"})
        assert status == 200
        assert h["access-control-allow-origin"] == "http://app.example" and h["access-control-max-age"] == "99"
        status, h = options(server.port, f"/{ACCOUNT}/{queue.queue_name}", {"Origin": "http://evil.example", "Access-Control-Request-Method": "PUT"})
        assert (status, h["x-ms-error-code"]) == (403, "CorsPreflightFailure")
        status, h = options(server.port, f"/{ACCOUNT}/x", {"Access-Control-Request-Method": "PUT"})
        assert status == 400
        status, headers, _ = raw.request("GET", f"/{ACCOUNT}/{queue.queue_name}", "comp=metadata", {"Origin": "http://app.example"})
        assert status == 200 and headers["access-control-allow-origin"] == "http://app.example"
        assert "x-ms-request-id" in headers["access-control-expose-headers"]
    finally:
        svc.set_service_properties(cors=[])


def test_common_headers_and_versions(raw):
    status, headers, _ = raw.request("GET", "/devstoreaccount1/", "comp=list", {"x-ms-client-request-id": "my-id-123"})
    assert status == 200
    assert headers["x-ms-client-request-id"] == "my-id-123"
    assert headers["x-ms-version"] == "2026-10-06" and headers["x-ms-request-id"] and headers["date"].endswith("GMT")
    status, headers, _ = raw.request("GET", "/devstoreaccount1/", "comp=list", {"x-ms-version": "3025-01-01"})
    assert status == 200 and headers["x-ms-version"] == "3025-01-01"
    status, headers, body = raw.request("GET", "/devstoreaccount1/", "comp=list", {"x-ms-version": "latest"})
    assert (status, headers["x-ms-error-code"]) == (400, "InvalidHeaderValue") and "<HeaderName>x-ms-version</HeaderName>" in body


@plain_http_only
def test_use_development_storage_on_the_default_port():
    import socket
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 10001)) == 0:
            pytest.skip("port 10001 is in use")
    srv = Server(port=10001)
    try:
        assert "http://127.0.0.1:10001/devstoreaccount1" in srv.ready_line
        svc = QueueServiceClient.from_connection_string("UseDevelopmentStorage=true")
        q = svc.create_queue("devstorage")
        q.send_message("works")
        assert q.receive_message().content == "works"
        if not IN_MEMORY:
            assert os.path.isdir(os.path.join(srv.data, "shard-000"))
    finally:
        assert srv.stop() == 0
