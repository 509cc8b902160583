"""A request the service refuses: its HTTP status, the reason in one sentence, and any headers (Retry-After,
WWW-Authenticate). The routes raise it; :func:`autograder.service.app.application` answers it."""

from __future__ import annotations


class Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}
