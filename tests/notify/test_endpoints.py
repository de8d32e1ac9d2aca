"""The push endpoint guard, played as the attacker: a link holder naming where the host POSTs."""

from __future__ import annotations

import pytest

from tunnel.notify.endpoints import EndpointRefused, check_endpoint, normalize_origin

ALLOWED = [
    "https://fcm.googleapis.com/fcm/send/abc:APA91b",
    "https://updates.push.services.mozilla.com/wpush/v2/gAAAA",
    "https://eu.push.services.mozilla.com/wpush/v2/x",
    "https://wns2-par02p.notify.windows.com/w/?token=BQYAAA",
    "https://web.push.apple.com/QGuQyavXutnMH",
    "https://api.push.apple.com/3/device/x",
]

ATTACKS = [
    "http://fcm.googleapis.com/fcm/send/x",  # not https
    "https://fcm.googleapis.com:8443/fcm/send/x",  # another port
    "https://fcm.googleapis.com.evil.example/x",  # a suffix trick
    "https://evilfcm.googleapis.com/x",
    "https://push.services.mozilla.com.evil.example/x",
    "https://notify.windows.com/x",  # the bare parent of a wildcard
    "https://user@fcm.googleapis.com/x",  # userinfo
    "https://127.0.0.1/x",
    "https://localhost/admin",
    "https://169.254.169.254/latest/meta-data/",
    "https://[::1]/x",
    "http://127.0.0.1:6379/",
    "file:///etc/passwd",
    "gopher://fcm.googleapis.com/x",
    "https://fcm.googleapis.com/x y",
    "https://fcm.googleapis.com/\r\nHost: evil",
    "https://fcm.googleapis.com:notaport/x",
    "not a url",
    "https://fcm.googleapis.com/" + "a" * 3000,
]


@pytest.mark.parametrize("endpoint", ALLOWED)
def test_the_browsers_push_services_are_taken(endpoint: str) -> None:
    assert check_endpoint(endpoint) == endpoint


@pytest.mark.parametrize("endpoint", ATTACKS)
def test_an_endpoint_elsewhere_is_refused(endpoint: str) -> None:
    with pytest.raises(EndpointRefused):
        check_endpoint(endpoint)


def test_an_origin_the_host_adds_is_taken_and_only_that_origin() -> None:
    extra = frozenset({normalize_origin("http://127.0.0.1:8099")})
    assert check_endpoint("http://127.0.0.1:8099/push/1", extra)
    for other in ("http://127.0.0.1:8098/push/1", "https://127.0.0.1:8099/push/1"):
        with pytest.raises(EndpointRefused):
            check_endpoint(other, extra)


@pytest.mark.parametrize(
    "text", ["127.0.0.1:8099", "ftp://x", "https://push.example/path", "https://u@push.example"]
)
def test_a_push_service_option_must_be_an_origin(text: str) -> None:
    with pytest.raises(ValueError, match="--push-service"):
        normalize_origin(text)
