"""L3 editors (SPEC §8): what proposes a description revision from a critique.

- `GroundedEditor` (the default) needs no model: it appends the critic's missing package words.
- `OpenAICompatibleEditor` asks an OpenAI-compatible `/chat/completions` endpoint, over httpx. A model
  endpoint is a remote party that can be slow, broken or hostile, so every call is bounded: one deadline
  for the whole call (connect, send, headers, body and every retry: not per socket read, which a server
  dripping a byte at a time defeats), a cap on the response size (the body is streamed and dropped past
  it), and a bounded number of retries with exponential backoff on connection errors, 5xx and 429.
  Whatever goes wrong becomes an `EditorError` whose reason the round records against that revision.

Both editors' output must still pass the round's grounding check (`descriptions.ungrounded_words`).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx

from ..config import EvolutionConfig

T = TypeVar("T")

# Statuses worth another try: the server says it is overloaded or failed on its side.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_SNIPPET = 160  # characters of an error body kept in a reason

SYSTEM_PROMPT = (
    "Rewrite the skill description so an agent can tell when to use the skill. "
    "Use only words that occur in the package excerpt. Reply with the description only."
)


@dataclass
class Critique:
    skill: str
    query: str
    missing: list[str]  # surface words from the package, rarest first
    note: str


class EditorError(Exception):
    """The editor produced no revision; the message is the reason recorded in `revisions.parquet`."""


class Editor(Protocol):
    name: str

    def propose(self, before: str, critique: Critique, package_text: str) -> str | None: ...


class GroundedEditor:
    """Appends the critic's missing package words to the description, in the package's own spelling."""

    name = "grounded"

    def __init__(self, max_terms: int = 6):
        self.max_terms = max_terms

    def propose(self, before: str, critique: Critique, package_text: str) -> str | None:
        terms = critique.missing[: self.max_terms]
        if not terms:
            return None
        base = before.rstrip()
        return f"{base} ({', '.join(terms)})" if base else ", ".join(terms)


# -------------------------------------------------------------------------------------- the model editor


def reply_text(data: bytes) -> str:
    """The assistant's text of a chat-completions reply, whitespace collapsed; any other shape is an
    `EditorError` naming what is wrong (an endpoint's answer is untrusted input)."""
    try:
        reply = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EditorError(f"malformed reply: not JSON ({exc.__class__.__name__})") from None
    if not isinstance(reply, dict):
        raise EditorError(f"malformed reply: the JSON is {_kind(reply)}, not an object")
    if "choices" not in reply and isinstance(reply.get("error"), dict | str):
        error = reply["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise EditorError(f"endpoint error: {str(message)[:_SNIPPET]}")
    choices = reply.get("choices")
    if not isinstance(choices, list):
        raise EditorError(f"malformed reply: 'choices' is {_kind(choices)}, not a list")
    if not choices:
        raise EditorError("malformed reply: 'choices' is empty")
    first = choices[0]
    if not isinstance(first, dict):
        raise EditorError(f"malformed reply: choices[0] is {_kind(first)}, not an object")
    message = first.get("message")
    if not isinstance(message, dict):
        raise EditorError(f"malformed reply: choices[0].message is {_kind(message)}, not an object")
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = " ".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    if not isinstance(content, str):
        raise EditorError(f"malformed reply: choices[0].message.content is {_kind(content)}, not text")
    return " ".join(content.split())


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def _retry_after(value: str | None) -> float | None:
    """Seconds of a `Retry-After` header given as a number (its date form is ignored)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def run_sync(make: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, also when the calling thread already runs an
    event loop (an async host): then it runs on a loop of its own in a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, make).result()


class OpenAICompatibleEditor:
    """A model-backed editor over an OpenAI-compatible `/chat/completions` endpoint.

    Only constructed when an endpoint is configured. A call costs at most `deadline_s` seconds whatever
    the server does; its revision must still pass the grounding check.
    """

    name = "openai"

    def __init__(
        self,
        endpoint: str,
        model: str,
        api_key: str | None = None,
        deadline_s: float = 30.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        max_response_bytes: int = 1 << 20,
    ):
        if deadline_s <= 0 or retries < 0 or backoff_s < 0 or max_response_bytes <= 0:
            raise ValueError(
                "editor limits must be positive: deadline_s > 0, retries >= 0, backoff_s >= 0, "
                "max_response_bytes > 0"
            )
        self.url = endpoint.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.deadline_s = deadline_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_response_bytes = max_response_bytes

    def request_body(self, before: str, critique: Critique, package_text: str) -> dict[str, Any]:
        prompt = {
            "description": before,
            "missing_words": critique.missing,
            "critique": critique.note,
            "package_excerpt": package_text[:6000],
        }
        return {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": json.dumps(prompt)},
            ],
        }

    def propose(self, before: str, critique: Critique, package_text: str) -> str | None:
        body = json.dumps(self.request_body(before, critique, package_text)).encode()
        return reply_text(run_sync(self._call(body))) or None

    async def _call(self, body: bytes) -> bytes:
        """The reply body of a successful call, or an `EditorError`; never longer than the deadline."""
        progress: list[str] = []  # what each attempt ended with, for the deadline's reason
        try:
            return await asyncio.wait_for(self._attempts(body, progress), timeout=self.deadline_s)
        except TimeoutError:
            tried = f" after {'; '.join(progress)}" if progress else ""
            raise EditorError(
                f"no complete answer within the {self.deadline_s:g} s deadline (attempt {len(progress) + 1})"
                f"{tried}"
            ) from None

    async def _attempts(self, body: bytes, progress: list[str]) -> bytes:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        loop = asyncio.get_running_loop()
        end = loop.time() + self.deadline_s
        # No httpx timeouts: the deadline around this coroutine bounds connect, every read and the backoff.
        async with httpx.AsyncClient(timeout=None) as client:
            for attempt in range(self.retries + 1):
                try:
                    status, data, retry_after = await self._once(client, body, headers)
                except httpx.TransportError as exc:  # refused, reset, broken protocol: worth another try
                    failure = f"{type(exc).__name__}: {exc}".rstrip(": ")[:_SNIPPET]
                    retry_after = None
                except httpx.HTTPError as exc:  # e.g. an undecodable body: the same again would fail
                    raise EditorError(f"{type(exc).__name__}: {exc}"[:_SNIPPET]) from None
                else:
                    if status == 200:
                        return data
                    snippet = data.decode("utf-8", "replace")[:_SNIPPET].strip()
                    failure = f"HTTP {status}" + (f": {snippet}" if snippet else "")
                    if status not in RETRY_STATUSES:
                        raise EditorError(failure)
                progress.append(failure)
                if attempt == self.retries:
                    break
                delay = retry_after if retry_after is not None else self.backoff_s * 2**attempt
                if loop.time() + delay >= end:
                    raise EditorError(f"{failure}; no time left for a retry within the deadline")
                await asyncio.sleep(delay)
        raise EditorError(f"{progress[-1]} (gave up after {len(progress)} attempts)")

    async def _once(
        self, client: httpx.AsyncClient, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, float | None]:
        """One POST: (status, body read up to the cap, Retry-After seconds)."""
        cap = self.max_response_bytes
        async with client.stream("POST", self.url, content=body, headers=headers) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > cap:
                raise EditorError(f"response too large: {declared} bytes declared, the cap is {cap}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():  # decoded bytes: a compressed bomb hits the cap too
                size += len(chunk)
                if size > cap:
                    raise EditorError(f"response too large: more than {cap} bytes (cap), read stopped")
                chunks.append(chunk)
            return response.status_code, b"".join(chunks), _retry_after(response.headers.get("retry-after"))


def make_editor(config: EvolutionConfig) -> Editor:
    if config.editor == "grounded":
        return GroundedEditor(config.l3_max_terms)
    if config.editor == "openai":
        if not config.editor_endpoint or not config.editor_model:
            raise ValueError(
                "the openai editor needs editor_endpoint and editor_model in the evolution config"
            )
        return OpenAICompatibleEditor(
            config.editor_endpoint,
            config.editor_model,
            os.environ.get(config.editor_api_key_env),
            deadline_s=config.editor_timeout_s,
            retries=config.editor_retries,
            backoff_s=config.editor_backoff_s,
            max_response_bytes=config.editor_max_response_bytes,
        )
    raise ValueError(f"unknown editor {config.editor!r}: use 'grounded' or 'openai'")
