"""filesniff.py — what a file is, and a bounded glimpse of it, from its first bytes.

attachments.py decides which files may reach an agent and reads the start of each; this module
only looks at those bytes. The kind (text, CSV, JSON, PDF, image or binary) and the media type come
from the content first and the name's suffix second, so a `.pdf` that is not a PDF is not
called one. The preview is what a prompt can afford: a text's first lines, a CSV's header and a
few rows (with the row count when the whole file was read), a PDF's page count, an image's
format and size. Pure functions of bytes: no file is opened here.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import mimetypes
import re
from pathlib import PurePath

from agentgod.agent_runtime import IMAGE_TYPES
from agentgod.text import clean

PREVIEW_LINES = 10
PREVIEW_CHARS = 1000
CSV_SAMPLE_ROWS = 3
"""Data rows a CSV's preview shows under its header: enough to see the delimiter and quoting."""

TEXT_KINDS = ("text", "csv", "json")
"""The kinds whose content is text: read, scanned for secrets and previewed as such."""
_TEXT_MEDIA = frozenset({"application/json", "application/xml", "application/javascript"})
_SNIFFED_MEDIA = frozenset(
    {"application/pdf", "image/png", "image/jpeg", "image/gif", "image/webp"}
)
"""Types only a file's content may claim: a `.pdf` without the PDF magic is not a PDF."""
_MIME = mimetypes.MimeTypes()
"""Python's own table only, not the machine's /etc/mime.types: the same answer everywhere."""
_PDF_PAGES = re.compile(rb"/Type\s*/Pages\b")
_PDF_COUNT = re.compile(rb"/Count\s+(\d+)")


def sniff(head: bytes, name: str, whole: bool) -> tuple[str, str, str | None]:
    """(kind, media type, text) of a file that starts with `head` and is called `name`.

    `whole`: `head` is the entire file. The text is `head` decoded, for a text, CSV or JSON file
    (None for any other kind): what the caller scans for secrets and hands to `preview`.
    """
    text = _utf8(head, whole)
    kind, media_type = _kind(head, name, text is not None)
    if kind == "text" and media_type == "application/json":
        kind, media_type = _json(text or "", whole)
    return kind, media_type, text if kind in TEXT_KINDS else None


def preview(head: bytes, kind: str, media_type: str, text: str | None, whole: bool) -> str:
    """The bounded glimpse of a sniffed file for prompts, or "" when nothing cheap can be shown."""
    if text is not None:
        text = text.removeprefix("\ufeff")
        if kind == "csv":
            return _csv_preview(text, whole, "\t" if media_type.endswith("values") else ",")
        return _text_preview(text)
    if kind == "pdf":
        pages = _pdf_pages(head)
        return "" if pages is None else f"PDF, {pages} page" + ("" if pages == 1 else "s")
    if kind == "image":
        return _image_preview(head, media_type)
    return ""


def _utf8(head: bytes, whole: bool) -> str | None:
    """`head` as text when it is UTF-8 without NULs (a cut-off last character is forgiven)."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=whole)
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def _kind(head: bytes, name: str, textual: bool) -> tuple[str, str]:
    """(kind, media type) from the content first (`textual`: it decodes as UTF-8), the suffix
    second."""
    if head.startswith(b"%PDF-"):
        return "pdf", "application/pdf"
    for magic, media_type in IMAGE_TYPES:  # the images the agents' file_block sends
        if head.startswith(magic):
            return "image", media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image", "image/webp"
    guessed = _MIME.guess_type(name, strict=False)[0] or ""
    suffix = PurePath(name).suffix.lower()
    if textual:
        if suffix == ".csv":
            return "csv", "text/csv"
        if suffix == ".tsv":
            return "csv", "text/tab-separated-values"
        text_type = (
            guessed.startswith("text/") or guessed in _TEXT_MEDIA or guessed.endswith("+xml")
        )
        return "text", guessed if text_type else "text/plain"
    if guessed in _SNIFFED_MEDIA or guessed.startswith("text/") or not guessed:
        return "binary", "application/octet-stream"
    return "binary", guessed


def _json(text: str, whole: bool) -> tuple[str, str]:
    """A file named as JSON: JSON when it parses (or is too large to read whole, the name then
    standing), else plain text, whatever its name says."""
    if not whole:
        return "json", "application/json"
    try:
        json.loads(text.removeprefix("\ufeff"))
    except ValueError:
        return "text", "text/plain"
    return "json", "application/json"


def _bounded(lines: list[str], more: bool) -> str:
    text = clean("\n".join(lines))
    if len(text) > PREVIEW_CHARS:
        text, more = text[:PREVIEW_CHARS], True
    return text + "\n…" if more else text


def _text_preview(text: str) -> str:
    lines = text[: PREVIEW_CHARS + 1].splitlines()
    more = len(lines) > PREVIEW_LINES or len(text) > PREVIEW_CHARS
    return _bounded(lines[:PREVIEW_LINES], more)


def _csv_preview(text: str, whole: bool, delimiter: str) -> str:
    """The header row and a few rows as written, then the row count when the whole file was read."""
    lines = text[: PREVIEW_CHARS + 1].splitlines()
    shown = [line for line in lines[: 1 + CSV_SAMPLE_ROWS] if line]
    preview = _bounded(shown, more=False)
    if not whole:
        return preview
    try:
        rows = sum(1 for row in csv.reader(io.StringIO(text), delimiter=delimiter) if row)
    except csv.Error:
        return preview
    count = max(rows - 1, 0)
    return preview + f"\n({count} row" + ("" if count == 1 else "s") + " under the header)"


def _pdf_pages(head: bytes) -> int | None:
    """The page count from the page tree's root, when it is in the part read; else None."""
    counts = [
        int(count)
        for found in _PDF_PAGES.finditer(head)
        for count in _PDF_COUNT.findall(head[max(found.start() - 300, 0) : found.end() + 300])
    ]
    return max(counts) if counts else None


def _image_preview(head: bytes, media_type: str) -> str:
    label = media_type.split("/", 1)[1].upper() + " image"
    size = _image_size(head, media_type)
    return f"{label}, {size[0]}x{size[1]}" if size else label


def _image_size(head: bytes, media_type: str) -> tuple[int, int] | None:
    """(width, height) from a PNG, GIF or JPEG header, or None."""
    if media_type == "image/png" and head[12:16] == b"IHDR" and len(head) >= 24:
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if media_type == "image/gif" and len(head) >= 10:
        return int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
    if media_type == "image/jpeg":
        return _jpeg_size(head)
    return None


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    """Walk the JPEG segments to the first start-of-frame, which holds the dimensions."""
    at = 2
    while at + 9 <= len(head):
        if head[at] != 0xFF:
            return None
        marker = head[at + 1]
        if marker == 0xFF:
            at += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:
            at += 2
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height = int.from_bytes(head[at + 5 : at + 7], "big")
            width = int.from_bytes(head[at + 7 : at + 9], "big")
            return width, height
        at += 2 + int.from_bytes(head[at + 2 : at + 4], "big")
    return None
