"""The signed one-time notices, in process."""

from __future__ import annotations

from fastapi import Request, Response

from apollo11.scheduler.web.flash import Flash, Notice


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _request(cookie: str, value: str) -> Request:
    header = f"{cookie}={value}".encode()
    return Request({"type": "http", "method": "GET", "path": "/", "headers": [(b"cookie", header)]})


def _set(flash: Flash, path: str, notice: Notice) -> str:
    response = Response()
    flash.set(response, path, notice)
    header = response.headers["set-cookie"]
    assert "httponly" in header.lower() and "samesite=strict" in header.lower()
    return header.split(";")[0].split("=", 1)[1]


def test_a_notice_for_its_page_only_and_before_it_expires() -> None:
    clock = Clock()
    flash = Flash(cookie="f", tls=False, clock=clock)
    value = _set(flash, "/tasks/t1", Notice(message="retry recorded"))
    assert flash.take(_request("f", value), "/tasks/t2") is None, "left for its own page"
    assert flash.take(_request("f", value), "/tasks/t1") == Notice(message="retry recorded")
    clock.now += 60
    assert flash.take(_request("f", value), "/tasks/t1") == Notice(), "expired: cleared, empty"


def test_a_notice_signed_by_another_key_or_garbled_is_empty() -> None:
    ours = Flash(cookie="f", tls=False)
    theirs = Flash(cookie="f", tls=False)
    value = _set(theirs, "/tasks/t1", Notice(error="call +1 555 0100"))
    assert ours.take(_request("f", value), "/tasks/t1") == Notice()
    for garbled in ("x", "x.y", ".", "e30.AAAA", value.replace(".", "")):
        assert ours.take(_request("f", garbled), "/tasks/t1") == Notice(), garbled
    assert ours.take(_request("g", value), "/tasks/t1") is None, "no cookie of ours"
