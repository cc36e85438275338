"""The HTTP guard's decisions (``node.http_guard.decide``, a pure function), one rule at a
time; the dashboard's tests check the same rules on a real server over a real cluster."""
from __future__ import annotations

import pytest

from node.http_guard import (Refusal, Request, allowed_names, decide, is_loopback,
                             split_host, token_from)

PORT = 8090
TOKEN = "s3cret-Token_1"
NAMES = allowed_names("127.0.0.1", "127.0.0.1")
AUTH = f"token {TOKEN}"


def _decide(method="GET", host=f"127.0.0.1:{PORT}", token=TOKEN, names=NAMES, **headers):
    return decide(Request(method, host, **headers), token=token, names=names, port=PORT)


def _post(**headers):
    headers.setdefault("authorization", AUTH)
    headers.setdefault("content_type", "application/json")
    return _decide("POST", **headers)


@pytest.mark.parametrize("host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}",
                                  f"LOCALHOST:{PORT}", f"[0:0:0:0:0:0:0:1]:{PORT}"])
def test_the_loopback_names_with_the_port_pass(host):
    assert _decide(host=host, authorization=AUTH) is None
    assert _post(host=host, origin=f"http://{host}") is None


@pytest.mark.parametrize("host", [f"evil.example:{PORT}", "evil.example", f"127.0.0.1:{PORT + 1}",
                                  "127.0.0.1", f"0.0.0.0:{PORT}", f"127.0.0.2:{PORT}",
                                  f"localhost.:{PORT}", f"localhost.evil.example:{PORT}",
                                  "", "127.0.0.1:", "[::1", f"::1:{PORT}", None])
def test_a_foreign_or_malformed_host_is_403_before_anything_else(host):
    """A DNS-rebinding page's requests carry its own name: refused even with the token."""
    refusal = _decide(host=host, authorization=AUTH)
    assert refusal is not None and refusal.status == 403 and "Host" in refusal.reason
    assert _post(host=host, origin=f"http://{host}").status == 403


def test_the_bound_address_passes_and_a_wildcard_bind_adds_no_name():
    names = allowed_names("192.0.2.7", "192.0.2.7")
    assert _decide(host=f"192.0.2.7:{PORT}", names=names, authorization=AUTH) is None
    assert _post(host=f"192.0.2.7:{PORT}", origin=f"http://192.0.2.7:{PORT}",
                 names=names) is None
    assert allowed_names("0.0.0.0", "::", None) == allowed_names()
    assert "192.0.2.7" in allowed_names("0.0.0.0", "192.0.2.7")   # the connection's address
    assert _decide(host=f"192.0.2.7:{PORT}", authorization=AUTH).status == 403


@pytest.mark.parametrize("origin", ["http://evil.example", f"http://evil.example:{PORT}",
                                    f"http://127.0.0.1:{PORT + 1}", f"https://127.0.0.1:{PORT}",
                                    "http://127.0.0.1", "null", "", f"http://localhost:{PORT}x",
                                    f"file://127.0.0.1:{PORT}"])
def test_a_foreign_origin_is_403_even_with_the_token(origin):
    assert _post(origin=origin).status == 403
    assert _decide(origin=origin, authorization=AUTH).status == 403   # reads too


def test_a_cross_site_simple_post_is_refused_with_or_without_the_token():
    """What a form or a no-cors fetch of another page sends: text/plain, its Origin."""
    for authorization in (None, AUTH):
        refusal = _post(origin="http://evil.example", content_type="text/plain",
                        authorization=authorization)
        assert refusal.status == 403 and "Origin" in refusal.reason


def test_the_token_is_needed_on_every_request():
    for refusal in (_decide(), _decide(authorization="token wrong"),
                    _decide(authorization=f"Basic {TOKEN}"), _decide(authorization="token "),
                    _decide(query_token=TOKEN[:-1]), _decide(query_token=""),
                    _post(authorization=None), _post(authorization=f"token {TOKEN}x"),
                    _decide(authorization="token é"), _decide(query_token="ü")):
        assert refusal == Refusal(401, refusal.reason) and "token" in refusal.reason
    assert _decide(authorization=AUTH) is None
    assert _decide(authorization=f"Token  {TOKEN} ") is None
    assert _decide("HEAD", authorization=AUTH) is None


def test_the_query_token_is_for_reads_only():
    """The page's address and its EventSource carry ?token=; a POST must use the header."""
    assert _decide(query_token=TOKEN) is None
    assert _post(authorization=None, query_token=TOKEN).status == 401


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x",
                                          "application/jsonx", "text/json"])
def test_a_state_change_needs_json(content_type):
    refusal = _post(content_type=content_type)
    assert refusal.status == 415 and "application/json" in refusal.reason
    assert _decide("DELETE", authorization=AUTH, content_type=content_type).status == 415


def test_a_json_post_with_the_token_from_the_page_passes():
    assert _post(origin=f"http://127.0.0.1:{PORT}") is None
    assert _post(origin=f"http://localhost:{PORT}",
                 content_type="Application/JSON; charset=utf-8") is None
    assert _post() is None   # no Origin: a script, not a browser page


def test_without_a_token_only_the_token_rule_is_off():
    assert _decide(token=None) is None
    assert _post(token=None, authorization=None) is None
    assert _post(token=None, origin="http://evil.example").status == 403
    assert _post(token=None, host=f"evil.example:{PORT}").status == 403
    assert _post(token=None, content_type="text/plain").status == 415


def test_the_helpers_parse_what_browsers_send():
    assert split_host(f"[::1]:{PORT}") == ("::1", PORT)
    assert split_host("LocalHost") == ("localhost", 80)
    assert split_host("127.0.0.1:x") is None and split_host(":80") is None
    assert token_from(f"token {TOKEN}") == TOKEN and token_from(f"Bearer {TOKEN}") is None
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.0.2.7", "example.org", ""))
