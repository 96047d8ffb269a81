"""The console's own refusals: a form or query the console cannot act on (the message says why and is shown to
the user as it is). Refusals of the broker itself arrive as ``KafkaError``s and are shown the same way."""

from __future__ import annotations


class ConsoleError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
