"""codeguard: every rule proven by an escape it refuses, and realistic agents it must accept.

Rejections assert the complaint names the culprit and its line, because the generator hands these
complaints back to the model: a vague or misplaced complaint is a wasted retry.
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agentgod import codeguard, guardpolicy

if TYPE_CHECKING:
    from _pytest.mark import ParameterSet

RUN = "\n\ndef run(task, previous_outputs):\n    return task\n"
COMPLAINT = re.compile(r"^line \d+: \S.*$")


# ---- realistic agents (bodies as the generator checks them: the runtime header provides json,
# os, sys, time, urllib, Path, call_llm and format_previous) ------------------------------------

CSV_STATS = """
import csv
import io
import statistics


def run(task, previous_outputs):
    text = previous_outputs.get("data_fetcher", "")
    if not text.strip():
        return "No CSV data was provided upstream."
    reader = csv.DictReader(io.StringIO(text))
    columns: dict[str, list[float]] = {}
    for row in reader:
        for key, value in row.items():
            try:
                columns.setdefault(key, []).append(float(value.replace(",", "")))
            except (TypeError, ValueError):
                continue
    lines = [f"Rows analysed for: {task}"]
    for name, values in sorted(columns.items()):
        if len(values) < 2:
            continue
        mean = statistics.mean(values)
        spread = statistics.stdev(values)
        lines.append(f"- {name}: mean {mean:.2f}, stdev {spread:.2f}, n={len(values)}")
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["column", "median"])
    for name, values in columns.items():
        writer.writerow([name, statistics.median(values)])
    return "\\n".join(lines) + "\\n\\n" + out.getvalue()
"""

JSON_RESTRUCTURE = """
def _flatten(value, prefix=""):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _flatten(inner, f"{prefix}{key}.")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _flatten(inner, f"{prefix}{index}.")
    else:
        yield prefix.rstrip("."), value


def run(task, previous_outputs):
    merged = {}
    for name, output in previous_outputs.items():
        try:
            merged[name] = json.loads(output)
        except json.JSONDecodeError:
            merged[name] = {"text": output.strip()}
    flat = dict(_flatten(merged))
    summary = {
        "task": task,
        "sources": sorted(previous_outputs),
        "fields": len(flat),
        "values": {k: v for k, v in flat.items() if v not in (None, "")},
    }
    return json.dumps(summary, indent=2, ensure_ascii=False, sort_keys=True)
"""

REGEX_EXTRACT = """
import re

EMAIL = re.compile(r"[\\w.+-]+@[\\w-]+\\.[\\w.-]+")
URL = re.compile(r"https?://[^\\s)>\\"']+")
PHONE = re.compile(r"\\+?\\d[\\d\\s().-]{7,}\\d")


def run(task, previous_outputs):
    corpus = "\\n".join(previous_outputs.values()) or task
    found = {
        "emails": sorted(set(EMAIL.findall(corpus))),
        "urls": sorted({u.rstrip(".,;") for u in URL.findall(corpus)}),
        "phones": sorted({re.sub(r"\\s+", " ", p).strip() for p in PHONE.findall(corpus)}),
    }
    parts = []
    for kind, items in found.items():
        parts.append(f"## {kind.title()} ({len(items)})")
        parts.extend(f"- {item}" for item in items[:50])
    if not any(found.values()):
        return "No contact details or links were found."
    return "\\n".join(parts)
"""

DATES = """
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo


def _parse(value):
    for fmt in ("%Y-%m-%d", "%d/%m/%Y", "%B %d, %Y"):
        try:
            return datetime.strptime(value.strip(), fmt).date()
        except ValueError:
            continue
    return None


def run(task, previous_outputs):
    today = datetime.now(timezone.utc).replace(microsecond=0)
    local = today.astimezone(ZoneInfo("Europe/Paris")).replace(tzinfo=None)
    lines = [f"Reference time: {local.isoformat()}"]
    for name, text in previous_outputs.items():
        for token in text.split(";"):
            parsed = _parse(token)
            if parsed is None:
                continue
            delta = parsed - date.today()
            deadline = parsed + timedelta(days=14)
            lines.append(f"{name}: {parsed} is {delta.days} days away; review by {deadline}")
    if len(lines) == 1:
        lines.append(call_llm(f"List the key dates implied by: {task}"))
    return "\\n".join(lines)
"""

TEXTWRAP = '''
import textwrap
import unicodedata


def run(task, previous_outputs):
    sections = []
    for name, body in previous_outputs.items():
        clean = unicodedata.normalize("NFKC", body).replace("\\t", "    ").strip()
        title = name.replace("_", " ").title()
        wrapped = textwrap.fill(clean, width=78, break_long_words=False)
        sections.append(f"{title}\\n{'=' * len(title)}\\n{wrapped}")
    if not sections:
        sections.append(textwrap.dedent(f"""
            Nothing upstream; summarising the request instead:
            {textwrap.shorten(task, width=200, placeholder=' ...')}
        """).strip())
    preface = textwrap.indent("Generated report", "> ")
    return preface + "\\n\\n" + "\\n\\n".join(sections)
'''

SQLITE_MEMORY = """
import csv
import io
import sqlite3


def run(task, previous_outputs):
    rows = list(csv.reader(io.StringIO(previous_outputs.get("sales_table", ""))))
    if len(rows) < 2:
        return "No sales rows to aggregate."
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE TABLE sales (region TEXT, product TEXT, amount REAL)")
        conn.executemany(
            "INSERT INTO sales VALUES (?, ?, ?)",
            [(r[0], r[1], float(r[2])) for r in rows[1:] if len(r) >= 3],
        )
        conn.commit()
        cursor = conn.execute(
            "SELECT region, COUNT(*), ROUND(SUM(amount), 2) FROM sales "
            "GROUP BY region ORDER BY SUM(amount) DESC"
        )
        report = [f"{region}: {count} sales, total {total}" for region, count, total in cursor]
    finally:
        conn.close()
    return "Sales by region\\n" + "\\n".join(report)
"""

COUNTER = """
import string
from collections import Counter, defaultdict

STOP = frozenset("a an and are as at be by for from in is it of on or the to with".split())


def run(task, previous_outputs):
    text = " ".join(previous_outputs.values()) or task
    table = str.maketrans("", "", string.punctuation)
    words = [w for w in text.lower().translate(table).split() if w not in STOP]
    counts = Counter(words)
    by_length = defaultdict(list)
    for word in counts:
        by_length[len(word)].append(word)
    longest = max(by_length) if by_length else 0
    lines = [f"{len(words)} words, {len(counts)} distinct"]
    lines += [f"{word}: {n}" for word, n in counts.most_common(15)]
    lines.append(f"Longest words ({longest} letters): {', '.join(sorted(by_length[longest]))}")
    return "\\n".join(lines)
"""

LLM_PIPELINE = """
from concurrent.futures import ThreadPoolExecutor

SYSTEM = "You are a meticulous editor. Answer in plain prose, no headings."


def _clean(text):
    return text.replace("\\r\\n", "\\n").replace("\\u00a0", " ").replace("  ", " ").strip()


def _review(item):
    name, text = item
    prompt = f"Critique this draft from {name.replace('_', ' ')}:\\n\\n{_clean(text)}"
    return name, call_llm(prompt, system=SYSTEM, max_tokens=1200)


def run(task, previous_outputs):
    if not previous_outputs:
        return call_llm(f"Write a short plan for: {task}", system=SYSTEM)
    with ThreadPoolExecutor(max_workers=4) as pool:
        reviews = dict(pool.map(_review, previous_outputs.items()))
    combined = "\\n\\n".join(f"{name}: {review}" for name, review in reviews.items())
    final = call_llm(
        f"Task: {task}\\n\\nUpstream work:\\n{format_previous(previous_outputs)}"
        f"\\n\\nReviews:\\n{combined}\\n\\nWrite the improved final answer.",
        system=SYSTEM,
    )
    return final.replace("**", "").strip()
"""

READ_FILES = """
import glob
import os.path


def run(task, previous_outputs):
    folder = os.environ.get("AGENT_INPUT_DIR", ".")
    chunks = []
    for path in sorted(glob.glob(os.path.join(folder, "*.md")))[:5]:
        with open(path, encoding="utf-8") as handle:
            chunks.append(f"## {os.path.basename(path)}\\n{handle.read(4000)}")
    notes = Path(folder) / "notes.txt"
    if notes.is_file():
        chunks.append(notes.read_text(encoding="utf-8", errors="replace"))
    for entry in Path(folder).glob("*.csv"):
        with entry.open("r", newline="") as handle:
            chunks.append(handle.readline())
    with open(os.path.join(folder, "data.bin"), "rb") as raw:
        chunks.append(f"{len(raw.read())} bytes of binary data")
    return call_llm(f"{task}\\n\\n" + "\\n\\n".join(chunks)) if chunks else "No input files."
"""

TEMPFILES = """
import csv
import tempfile


def run(task, previous_outputs):
    rows = [line.split("|") for line in previous_outputs.get("table", "").splitlines()]
    with tempfile.NamedTemporaryFile("w+", suffix=".csv", newline="") as scratch:
        writer = csv.writer(scratch)
        writer.writerows(rows)
        scratch.seek(0)
        echoed = list(csv.reader(scratch))
    with tempfile.TemporaryDirectory(prefix="agent-") as workdir:
        listing = sorted(p.name for p in Path(workdir).iterdir())
    with tempfile.SpooledTemporaryFile(max_size=1024, mode="w+") as buffer:
        buffer.write(task)
        buffer.seek(0)
        echo = buffer.read()
    return f"{len(echoed)} rows staged; scratch held {len(listing)} files; task: {echo[:80]}"
"""

DATACLASSES = """
from dataclasses import asdict, dataclass, field, replace
from typing import Optional


@dataclass(order=True)
class Finding:
    severity: int
    title: str
    details: str = ""
    tags: list[str] = field(default_factory=list)
    owner: Optional["Finding"] = None


def _parse(line):
    level, _, rest = line.partition(":")
    title, _, details = rest.partition(" - ")
    return Finding(int(level) if level.isdigit() else 0, title.strip(), details.strip())


def run(task, previous_outputs):
    findings = [
        _parse(line)
        for text in previous_outputs.values()
        for line in text.splitlines()
        if ":" in line
    ]
    findings = [replace(f, tags=["urgent"]) if f.severity >= 3 else f for f in findings]
    findings.sort(reverse=True)
    return json.dumps([asdict(f) for f in findings], indent=2)
"""

ITERTOOLS_HEAPQ = """
import heapq
import itertools
import math
import operator


def run(task, previous_outputs):
    scores = []
    for name, text in previous_outputs.items():
        numbers = [float(tok) for tok in text.split() if tok.replace(".", "", 1).isdigit()]
        if numbers:
            scores.append((name, math.fsum(numbers) / len(numbers)))
    top = heapq.nlargest(3, scores, key=operator.itemgetter(1))
    ordered = sorted(scores, key=lambda pair: pair[0][0])
    groups = {k: [n for n, _ in g] for k, g in itertools.groupby(ordered, key=lambda p: p[0][0])}
    pairs = list(itertools.combinations(sorted(n for n, _ in scores), 2))
    cumulative = list(itertools.accumulate(s for _, s in scores))
    lines = [f"Top: {', '.join(f'{n} ({s:.1f})' for n, s in top)}"]
    lines.append(f"Groups: {groups}")
    lines.append(f"Pairs to compare: {len(pairs)}; running total {cumulative[-1:]} ")
    lines.append(f"Geometric spread: {math.sqrt(sum(s * s for _, s in scores)):.3f}")
    return "\\n".join(lines)
"""

HTML_URL = """
import html
import urllib.parse


def run(task, previous_outputs):
    links = []
    for name, text in previous_outputs.items():
        for token in text.split():
            if not token.startswith(("http://", "https://")):
                continue
            parts = urllib.parse.urlparse(token)
            query = urllib.parse.parse_qs(parts.query)
            clean = parts._replace(query="", fragment="").geturl()
            links.append((name, clean, query))
    rows = [
        f"<li><a href=\\"{html.escape(url, quote=True)}\\">{html.escape(url)}</a>"
        f" from {html.escape(name)} ({len(query)} params)</li>"
        for name, url, query in links
    ]
    search = urllib.parse.quote_plus(task)
    rows.append(f"<li>search: https://example.org/?q={search}</li>")
    return "<ul>\\n" + "\\n".join(rows) + "\\n</ul>"
"""

FULL_FILE = """
import json
import os
import sys
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path


def api_key():
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
    if key:
        return key
    for folder in (Path(__file__).resolve().parent, *Path(__file__).resolve().parents):
        env = folder / ".env"
        if env.is_file():
            for line in env.read_text(encoding="utf-8").splitlines():
                name, _, value = line.partition("=")
                if name.strip() == "ANTHROPIC_API_KEY":
                    return value.strip().strip("\\"'")
    raise RuntimeError("no key")


def call_llm(prompt):
    request = urllib.request.Request(
        "https://api.anthropic.com/v1/messages",
        data=json.dumps({"prompt": prompt}).encode(),
        headers={"x-api-key": api_key()},
        method="POST",
    )
    for attempt in range(3):
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["content"][0]["text"]
        except urllib.error.HTTPError as error:
            sys.stderr.write(f"HTTP {error.code}: {error.read()[:200]!r}\\n")
            time.sleep(2**attempt)
    return ""


def run(task, previous_outputs):
    return call_llm(task)


if __name__ == "__main__":
    payload = json.loads(sys.stdin.read() or "{}")
    try:
        result = run(payload.get("task", ""), payload.get("previous_outputs", {}))
    except Exception:
        traceback.print_exc()
        sys.exit(1)
    sys.stdout.write(str(result) + "\\n")
    sys.stdout.flush()
"""

CLASSES = """
from html.parser import HTMLParser


class LinkCollector(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self._stack = []
        self.links = []

    def handle_starttag(self, tag, attrs):
        self._stack.append(tag)
        if tag == "a":
            self.links.append(dict(attrs).get("href", ""))

    def handle_endtag(self, tag):
        if self._stack and self._stack[-1] == tag:
            self._stack.pop()

    def __repr__(self):
        return f"{type(self).__name__}(links={len(self.links)})"


class Report:
    def __init__(self, title, items):
        self.title = title
        self.items = list(items)

    def __str__(self):
        return self.title + "\\n" + "\\n".join(f"- {i}" for i in self.items)

    def __len__(self):
        return len(self.items)


def run(task, previous_outputs):
    parser = LinkCollector()
    for text in previous_outputs.values():
        parser.feed(text)
    parser.close()
    report = Report(f"Links for {task}", filter(None, parser.links))
    return str(report) if len(report) else repr(parser)
"""

DIFFLIB = """
import difflib


def run(task, previous_outputs):
    drafts = list(previous_outputs.items())
    if len(drafts) < 2:
        return "Need at least two drafts to compare."
    (first_name, first), (second_name, second) = drafts[:2]
    diff = difflib.unified_diff(
        first.splitlines(), second.splitlines(), fromfile=first_name, tofile=second_name,
        lineterm="",
    )
    ratio = difflib.SequenceMatcher(None, first, second).ratio()
    close = difflib.get_close_matches(task.split()[0] if task.split() else "", first.split(), n=3)
    return f"Similarity {ratio:.0%}; close words {close}\\n" + "\\n".join(diff)
"""

MONEY = """
from decimal import ROUND_HALF_UP, Decimal, getcontext
from fractions import Fraction


def run(task, previous_outputs):
    getcontext().prec = 28
    amounts = []
    for text in previous_outputs.values():
        for token in text.replace("$", " ").replace(",", "").split():
            try:
                amounts.append(Decimal(token))
            except ArithmeticError:
                continue
    if not amounts:
        return "No amounts found."
    total = sum(amounts, Decimal("0"))
    share = Fraction(1, len(amounts))
    each = (total * Decimal(share.numerator) / Decimal(share.denominator)).quantize(
        Decimal("0.01"), rounding=ROUND_HALF_UP
    )
    return f"Total {total:.2f} across {len(amounts)} items; equal share {each} ({share})"
"""

HASHING = """
import base64
import hashlib
import hmac
import secrets
import uuid


def run(task, previous_outputs):
    lines = []
    for name, text in sorted(previous_outputs.items()):
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        short = base64.urlsafe_b64encode(bytes.fromhex(digest)[:9]).decode("ascii")
        lines.append(f"{name}: sha256={digest[:16]}... id={short}")
    key = secrets.token_bytes(16)
    tag = hmac.new(key, task.encode(), hashlib.sha256).hexdigest()[:12]
    lines.append(f"run {uuid.uuid4()} tag {tag}")
    lines.append(base64.b64decode(base64.b64encode(b"round trip")).decode())
    return "\\n".join(lines)
"""

TEMPLATE = '''
from string import Template

LETTER = Template("""Dear $name,

Thank you for your interest in $topic. ${summary}

Regards,
$sender""")


def run(task, previous_outputs):
    summary = previous_outputs.get("summary_writer", "").strip() or call_llm(
        f"Two sentences answering: {task}"
    )
    fields = {"name": "reader", "topic": task[:60], "summary": summary, "sender": "the team"}
    return LETTER.safe_substitute(fields).replace("  ", " ")
'''

ETREE = """
import io
import xml.etree.ElementTree as ET


def run(task, previous_outputs):
    feed = previous_outputs.get("feed_fetcher", "")
    try:
        root = ET.fromstring(feed)
    except ET.ParseError:
        root = ET.parse(io.StringIO("<rss><channel/></rss>")).getroot()
    items = []
    for item in root.iter("item"):
        title = (item.findtext("title") or "").strip()
        link = item.findtext("link", default="")
        items.append(f"- {title} <{link}>")
    out = ET.Element("summary", attrib={"count": str(len(items))})
    ET.SubElement(out, "task").text = task
    return "\\n".join(items) + "\\n" + ET.tostring(out, encoding="unicode")
"""

PACKAGES = """
import requests
import yaml
from bs4 import BeautifulSoup
from dateutil import parser as dateparser
from tabulate import tabulate


def run(task, previous_outputs):
    config = yaml.safe_load(previous_outputs.get("config_writer", "") or "{}") or {}
    url = config.get("url", "https://example.org")
    response = requests.get(url, timeout=20, headers={"user-agent": "agentgod"})
    response.raise_for_status()
    soup = BeautifulSoup(response.text, "html.parser")
    for tag in soup(["script", "style"]):
        tag.extract()
    rows = []
    for heading in soup.find_all(["h1", "h2"])[:10]:
        stamp = heading.get("data-date")
        when = dateparser.parse(stamp).date().isoformat() if stamp else ""
        rows.append([heading.get_text(strip=True), when])
    return tabulate(rows, headers=["heading", "date"]) + "\\n" + yaml.safe_dump(config)
"""

LOGGING_ENV = """
import logging
import os
import sys

log = logging.getLogger("agent")


def run(task, previous_outputs):
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    model = os.environ.get("AGENT_MODEL", "default")
    home = os.path.expanduser("~")
    env = dict(os.environ)
    known = [name for name in os.environ if name.startswith("AGENT_")]
    log.info("model=%s cwd=%s home=%s", model, os.getcwd(), os.path.basename(home))
    visible = sorted(os.listdir("."))[:10]
    debug = "AGENT_DEBUG" in os.environ and env.get("AGENT_DEBUG") == "1"
    if debug:
        sys.stderr.write(f"settings: {known}; files: {visible}\\n")
    return call_llm(f"{task}\\n(cpu count {os.cpu_count()}, sep {os.sep!r})")
"""

ZIP_READER = """
import base64
import io
import zipfile


def run(task, previous_outputs):
    blob = previous_outputs.get("archive_fetcher", "")
    try:
        data = base64.b64decode(blob, validate=True)
    except ValueError:
        return "Upstream output is not a base64 archive."
    summaries = []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist()[:20]:
            if info.is_dir():
                continue
            with archive.open(info.filename, "r") as member:
                head = member.read(200).decode("utf-8", "replace")
            summaries.append(f"{info.filename} ({info.file_size} bytes): {head!r}")
    return "\\n".join(summaries) or "Empty archive."
"""

ASYNC_FANOUT = """
import asyncio
from collections import namedtuple

Answer = namedtuple("Answer", "name text")


async def _ask(name, text, task):
    reply = await asyncio.to_thread(call_llm, f"{task}\\n\\nDraft from {name}:\\n{text}")
    return Answer(name, reply)


async def _gather(task, previous_outputs):
    jobs = [_ask(n, t, task) for n, t in previous_outputs.items()]
    done = await asyncio.wait_for(asyncio.gather(*jobs), timeout=300)
    return [a._replace(text=a.text.strip()) for a in done]


def run(task, previous_outputs):
    answers = asyncio.run(_gather(task, previous_outputs))
    payload = [a._asdict() for a in answers]
    return json.dumps(payload, indent=2) if payload else call_llm(task)
"""

TYPED = """
from __future__ import annotations

from enum import Enum
from typing import NamedTuple, TypedDict


class Tone(Enum):
    FORMAL = "formal"
    CASUAL = "casual"


class Section(NamedTuple):
    heading: str
    body: str


class Outline(TypedDict):
    title: str
    sections: list[Section]


def build(task: str, notes: dict[str, str], tone: "Tone" = Tone.FORMAL) -> Outline:
    sections = [Section(k.replace("_", " "), v[:500]) for k, v in notes.items()]
    return {"title": f"{task[:60]} ({tone.value})", "sections": sections}


def run(task: str, previous_outputs: dict[str, str]) -> str:
    outline = build(task, previous_outputs)
    lines = [outline["title"]]
    for section in outline["sections"]:
        lines.append(f"* {section.heading}: {section.body}")
    return "\\n".join(lines)
"""


ACCEPTED = {
    "csv-stats": CSV_STATS,
    "json-restructure": JSON_RESTRUCTURE,
    "regex-extract": REGEX_EXTRACT,
    "dates": DATES,
    "textwrap": TEXTWRAP,
    "sqlite-memory": SQLITE_MEMORY,
    "counter": COUNTER,
    "llm-pipeline": LLM_PIPELINE,
    "read-files": READ_FILES,
    "tempfiles": TEMPFILES,
    "dataclasses": DATACLASSES,
    "itertools-heapq": ITERTOOLS_HEAPQ,
    "html-url": HTML_URL,
    "classes": CLASSES,
    "difflib": DIFFLIB,
    "money": MONEY,
    "hashing": HASHING,
    "template": TEMPLATE,
    "etree": ETREE,
    "packages": PACKAGES,
    "logging-env": LOGGING_ENV,
    "zip-reader": ZIP_READER,
    "async-fanout": ASYNC_FANOUT,
    "typed": TYPED,
}


def _case(
    text: str, line: int, fragment: str, case_id: str, *, with_run: bool = True
) -> ParameterSet:
    body = textwrap.dedent(text).lstrip("\n")
    return pytest.param(body + RUN if with_run else body, line, fragment, id=case_id)


REJECTED = [
    # -- dynamic code and reflection
    _case('x = eval("1 + 1")', 1, "eval", "eval-call"),
    _case('exec("import os")', 1, "exec", "exec-call"),
    _case('code = compile("1", "<s>", "eval")', 1, "compile", "compile-call"),
    _case('mod = __import__("os")', 1, "__import__", "dunder-import"),
    _case('sp = __import__("subprocess")', 1, "__import__", "dunder-import-subprocess"),
    _case("breakpoint()", 1, "breakpoint", "breakpoint"),
    _case('ev = globals()["__builtins__"]', 1, "globals", "globals-builtins"),
    _case("names = locals()", 1, "locals", "locals"),
    _case("state = vars(object())", 1, "vars", "vars"),
    _case(
        """
        def fetch(obj, name):
            return getattr(obj, name)
        """,
        2,
        "getattr",
        "getattr-computed-name",
    ),
    _case('f = getattr(__builtins__, "ev" + "al")', 1, "getattr", "getattr-string-built"),
    _case('getattr(__builtins__, "eval")("1")', 1, "eval", "getattr-builtins-literal"),
    _case("b = __builtins__", 1, "__builtins__", "builtins-name"),
    _case('__builtins__["exec"]("1")', 1, "__builtins__", "builtins-subscript"),
    _case("setattr(obj, key, 1)", 1, "setattr", "setattr-computed"),
    _case('setattr(obj, "__class__", dict)', 1, "__class__", "setattr-dunder"),
    _case("delattr(obj, key)", 1, "delattr", "delattr-computed"),
    _case('hasattr(obj, "__globals__")', 1, "__globals__", "hasattr-dunder"),
    _case("lookup = getattr", 1, "getattr", "getattr-aliased"),
    _case("import builtins", 1, "builtins", "import-builtins"),
    _case('from builtins import eval as e\ne("1")', 1, "builtins", "from-builtins-eval"),
    _case('X = type("X", (), {"__del__": lambda self: None})', 1, "type()", "type-three-args"),
    _case("eval = print", 1, "eval", "rebind-eval"),
    _case("def open(path):\n    return path", 1, "open", "redefine-open"),
    # -- the class-hierarchy walk and other dunder routes
    _case(
        """
        for cls in ().__class__.__bases__[0].__subclasses__():
            if cls.__name__ == "Popen":
                cls(["id"])
        """,
        1,
        "__subclasses__",
        "subclasses-walk-to-popen",
    ),
    _case("def f():\n    pass\ng = f.__globals__", 3, "__globals__", "dunder-globals"),
    _case("code = (lambda: 0).__code__", 1, "__code__", "dunder-code"),
    _case('obj.__dict__["x"] = 1', 1, "__dict__", "dunder-dict"),
    _case("order = str.__mro__", 1, "__mro__", "dunder-mro"),
    _case("bases = int.__bases__", 1, "__bases__", "dunder-bases"),
    _case('os_mod = obj.__init__.__globals__["os"]', 1, "__globals__", "init-globals"),
    _case("init = obj.__init__", 1, "__init__", "dunder-init-uncalled"),
    _case(
        """
        class Swap:
            def become(self, other):
                self.__class__ = other
        """,
        3,
        "__class__",
        "assign-dunder-class",
    ),
    _case(
        """
        class Sneaky:
            def __del__(self):
                print("runs at exit")
        """,
        2,
        "__del__",
        "del-method-smolagents",
    ),
    _case(
        """
        def sneaky(fn):
            return eval
        @sneaky
        def helper(text):
            return text
        """,
        2,
        "eval",
        "decorator-returns-eval",
    ),
    _case("@eval\ndef helper():\n    pass", 1, "eval", "decorator-eval"),
    _case("run_code = lambda s: eval(s)", 1, "eval", "lambda-eval"),
    _case('values = list(map(eval, ["1", "2"]))', 1, "eval", "map-eval"),
    _case("tools = {'e': eval}", 1, "eval", "eval-in-container"),
    _case('ns["__builtins__"]', 1, "__builtins__", "dunder-subscript-key"),
    # -- processes
    _case("import subprocess", 1, "subprocess", "import-subprocess"),
    _case("from subprocess import run as sprun", 1, "subprocess", "from-subprocess-run"),
    _case("import subprocess as sp", 1, "subprocess", "import-subprocess-as"),
    _case('subprocess.run(["id"])', 1, "subprocess", "subprocess-without-import"),
    _case(
        "import importlib\nm = importlib.import_module('subprocess')",
        1,
        "importlib",
        "importlib-import-module",
    ),
    _case("from importlib import import_module", 1, "importlib", "from-importlib"),
    _case('import os\nos.system("id")', 2, "os.system", "os-system"),
    _case('import os\nos.popen("ls").read()', 2, "os.popen", "os-popen"),
    _case('import os as o\no.system("id")', 2, "os.system", "os-alias-system"),
    _case('import os\nsh = os.system\nsh("id")', 2, "os.system", "os-system-aliased"),
    _case("from os import system", 1, "system", "from-os-import-system"),
    _case('from os import system as s\ns("id")', 1, "system", "from-os-import-system-as"),
    _case(
        """
        import os
        def shell(cmd, runner=os.system):
            return runner(cmd)
        """,
        2,
        "os.system",
        "os-system-default-arg",
    ),
    _case('import os\nos.execv("/bin/sh", ["sh"])', 2, "os.execv", "os-execv"),
    _case("import os\npid = os.fork()", 2, "os.fork", "os-fork"),
    _case("import os\nos.kill(1, 9)", 2, "os.kill", "os-kill"),
    _case('import os\nos.posix_spawn("/bin/sh", ["sh"], {})', 2, "posix_spawn", "os-posix-spawn"),
    _case('getattr(os, "system")("id")', 1, "os.system", "getattr-literal-os-system"),
    _case(
        """
        def f(os):
            return os.system("id")
        value = f(os)
        """,
        2,
        "os.system",
        "runtime-os-shadowed-by-parameter",
    ),
    _case("import os\nmodules = [os]", 2, "module os", "module-in-container"),
    _case('import glob\nglob.os.system("id")', 2, "os", "module-detour"),
    _case("from glob import os", 1, "os", "from-glob-import-os"),
    _case('import tempfile\ntempfile._os.system("id")', 2, "_os", "private-module-attribute"),
    _case(
        'from operator import attrgetter\nf = attrgetter("system")',
        2,
        "attrgetter",
        "attrgetter-system",
    ),
    _case('import ctypes\nctypes.CDLL(None).system(b"id")', 1, "ctypes", "ctypes-cdll"),
    _case(
        'from ctypes import CDLL\nlibc = CDLL("libc.so.6")\nlibc.system(b"id")',
        1,
        "ctypes",
        "ctypes-libc",
    ),
    _case(
        """
        import asyncio
        async def go():
            await asyncio.create_subprocess_exec("id")
        """,
        3,
        "create_subprocess_exec",
        "asyncio-create-subprocess-exec",
    ),
    _case("loop.subprocess_shell(factory, 'id')", 1, "subprocess_shell", "loop-subprocess-shell"),
    _case(
        "from concurrent.futures import ProcessPoolExecutor",
        1,
        "ProcessPoolExecutor",
        "process-pool",
    ),
    _case("import multiprocessing", 1, "multiprocessing", "import-multiprocessing"),
    _case("import pty\npty.spawn('sh')", 1, "pty", "import-pty"),
    _case("import signal", 1, "signal", "import-signal"),
    _case("import platform", 1, "platform", "import-platform"),
    _case("import uuid\nnode = uuid.uuid1()", 2, "uuid1", "uuid1-shells-out"),
    # -- filesystem writes
    _case('open("x.txt", "w")', 1, "'w'", "open-write"),
    _case('with open("log.txt", "a") as fh:\n    fh.write("x")', 1, "'a'", "open-append"),
    _case('open("data.db", "r+b")', 1, "'r+b'", "open-plus"),
    _case('open("x.bin", mode="wb")', 1, "'wb'", "open-mode-keyword"),
    _case("def save(path, mode):\n    return open(path, mode)", 2, "open", "open-mode-variable"),
    _case('open("x.txt", **options)', 1, "open", "open-kwargs-splat"),
    _case("o = open", 1, "open", "open-aliased"),
    _case('import io\nio.open("x.txt", "w")', 2, "io.open", "io-open-write"),
    _case('import codecs\ncodecs.open("x.txt", "w", "utf-8")', 2, "codecs.open", "codecs-open"),
    _case('import io\nio.FileIO("x.bin", "w")', 2, "FileIO", "fileio-write"),
    _case('Path("notes.txt").write_text("hi")', 1, "write_text", "path-write-text"),
    _case(
        "import pathlib\npathlib.Path.home().joinpath('x').unlink()",
        2,
        "unlink",
        "pathlib-home-unlink",
    ),
    _case('p = Path("a.txt")\np.replace("b.txt")', 2, "replace", "path-replace-tracked"),
    _case('Path("a.txt").rename("b.txt")', 1, "rename", "path-rename-direct"),
    _case("def move(item, target):\n    item.rename(target)", 2, "rename", "rename-shape"),
    _case('Path.replace(Path("a"), "b")', 1, "replace", "path-replace-unbound"),
    _case('Path("x.txt").open("w")', 1, "'w'", "path-open-write"),
    _case('base = Path("out")\n(base / "f.txt").open(mode)', 2, "open", "path-open-variable-mode"),
    _case('Path("d").mkdir(parents=True)', 1, "mkdir", "path-mkdir"),
    _case('import os\nos.remove("x")', 2, "os.remove", "os-remove"),
    _case('import os\nos.rename("a", "b")', 2, "os.rename", "os-rename"),
    _case('import os\nos.makedirs("a/b")', 2, "os.makedirs", "os-makedirs"),
    _case('import os\nfd = os.open("x", os.O_WRONLY)', 2, "os.open", "os-open"),
    _case("import shutil\nshutil.rmtree('/')", 1, "shutil", "import-shutil"),
    _case(
        'import sqlite3\nconn = sqlite3.connect("db.sqlite")', 2, "sqlite3.connect", "sqlite-file"
    ),
    _case(
        "import sqlite3\nconn = sqlite3.connect(path)", 2, "sqlite3.connect", "sqlite-variable-path"
    ),
    _case(
        "import sqlite3\nconn.execute(\"ATTACH DATABASE 'x.db' AS x\")", 2, "SQL", "sqlite-attach"
    ),
    _case("conn.enable_load_extension(True)", 1, "enable_load_extension", "sqlite-extension"),
    _case('import zipfile\nzipfile.ZipFile("a.zip", "w")', 2, "'w'", "zipfile-write"),
    _case('import tarfile\ntarfile.open("a.tar", "w:gz")', 2, "'w:gz'", "tarfile-write"),
    _case('import gzip\ngzip.open("a.gz", "wt")', 2, "'wt'", "gzip-write"),
    _case('archive.extractall("/tmp/x")', 1, "extractall", "archive-extractall"),
    _case('archive.extract("a.txt", "/etc")', 1, "extract", "archive-extract"),
    _case("import shelve", 1, "shelve", "import-shelve"),
    _case("import dbm\ndb = dbm.open('x', 'c')", 1, "dbm", "import-dbm"),
    _case("import pickle", 1, "pickle", "import-pickle"),
    _case(
        'import tempfile\ntempfile.NamedTemporaryFile(dir="/etc")',
        2,
        "dir=",
        "tempfile-outside-scratch",
    ),
    _case(
        'import urllib.request\nurllib.request.urlretrieve(url, "x")',
        2,
        "urlretrieve",
        "urlretrieve",
    ),
    _case(
        'import logging\nlogging.basicConfig(filename="x.log")', 2, "basicConfig", "logging-to-file"
    ),
    _case(
        'import logging\nh = logging.FileHandler("x.log")', 2, "FileHandler", "logging-file-handler"
    ),
    _case(
        """
        import xml.etree.ElementTree as ET
        tree = ET.parse(source)
        tree.write("out.xml")
        """,
        3,
        "write",
        "elementtree-write",
    ),
    _case("ctx.keylog_filename = 'keys.txt'", 1, "keylog_filename", "ssl-keylog"),
    # -- environment
    _case('import os\nos.environ["PATH"] = "/tmp"', 2, "os.environ", "environ-setitem"),
    _case('import os\nos.environ.update({"X": "1"})', 2, "os.environ.update", "environ-update"),
    _case('import os\nos.environ.pop("HOME")', 2, "os.environ.pop", "environ-pop"),
    _case("import os\nos.environ.clear()", 2, "os.environ.clear", "environ-clear"),
    _case('import os\nos.putenv("X", "1")', 2, "os.putenv", "os-putenv"),
    _case('import os\nenv = os.environ\nenv["X"] = "1"', 3, "env", "environ-alias-setitem"),
    _case('from os import environ\ndel environ["HOME"]', 2, "environ", "environ-del"),
    _case(
        """
        def poke(mapping):
            mapping["X"] = "1"
        poke(os.environ)
        """,
        3,
        "os.environ",
        "environ-passed-on",
    ),
    # -- interpreter internals
    _case('import sys\nsys.modules["os"].system("id")', 2, "sys.modules", "sys-modules"),
    _case("import sys\nframe = sys._getframe(0)", 2, "_getframe", "sys-getframe"),
    _case('import sys\nsys.path.insert(0, "/tmp")', 2, "sys.path", "sys-path"),
    _case("import sys\nsys.settrace(tracer)", 2, "sys.settrace", "sys-settrace"),
    _case("import sys\ng = sys.exc_info()[2].tb_frame.f_globals", 2, "f_globals", "frame-globals"),
    _case("code = gen.gi_frame.f_code", 1, "f_code", "generator-frame"),
    _case("consts = fn.co_consts", 1, "co_consts", "code-object"),
    _case("import inspect", 1, "inspect", "import-inspect"),
    _case("import gc\nobjs = gc.get_objects()", 1, "gc", "import-gc"),
    _case("import types\nf = types.FunctionType(code, {})", 2, "FunctionType", "types-function"),
    _case(
        'import string\nstring.Formatter().get_field("0.x", [1], {})',
        2,
        "get_field",
        "formatter-get-field",
    ),
    _case(
        "import typing\nhints = typing.get_type_hints(run)", 2, "get_type_hints", "get-type-hints"
    ),
    _case(
        """
        def convert(value: "__import__('os').system('id')"):
            return value
        """,
        1,
        "__import__",
        "string-annotation-code",
    ),
    _case("Alias = list[\"os.system('id')\"]", 1, "os.system", "forward-ref-in-generic"),
    _case("import json\njson.loads = print", 2, "json.loads", "monkeypatch-module"),
    _case('import json\nsetattr(json, "loads", print)', 2, "json", "setattr-on-module"),
    _case("import json\ndel json.dumps", 2, "json.dumps", "delete-module-attribute"),
    # -- yaml, imports, terminal
    _case("import yaml\ndata = yaml.load(text, Loader=yaml.Loader)", 2, "yaml.load", "yaml-load"),
    _case("import yaml\ndata = yaml.unsafe_load(text)", 2, "unsafe_load", "yaml-unsafe-load"),
    _case("import numpy as np", 1, "numpy", "package-not-allowed"),
    _case("import _posixsubprocess", 1, "private", "private-stdlib-module"),
    _case("import posix\nposix.system('id')", 1, "posix", "import-posix"),
    _case("import socket", 1, "socket", "import-socket"),
    _case("import logging.config", 1, "logging.config", "logging-config"),
    _case("import dateutil.zoneinfo.rebuild", 1, "dateutil.zoneinfo.rebuild", "dateutil-rebuild"),
    _case("from . import helpers", 1, "relative", "relative-import"),
    _case("from os.path import *", 1, "star", "star-import"),
    _case('answer = input("continue? ")', 1, "input", "input-call"),
    _case("help(str)", 1, "help", "help-call"),
    _case("import getpass", 1, "getpass", "import-getpass"),
    _case("import timeit\ntimeit.timeit('1')", 1, "timeit", "import-timeit"),
    # -- aliasing tricks that resolution must see through
    _case('(o := os).system("id")', 1, "os.system", "walrus-receiver"),
    _case('def f(m):\n    return m.system("id")\nf(m2 := os)', 3, "module os", "walrus-argument"),
    _case('class C:\n    m = os\nC.m.system("id")', 2, "module os", "class-attribute-alias"),
    _case('class C:\n    import os as m\nC.m.system("id")', 2, "class body", "class-body-import"),
    _case('o = os\np = o\no = p\np.system("id")', 4, "os.system", "alias-cycle"),
    _case('match eval:\n    case ev:\n        ev("1")', 1, "eval", "match-captures-eval"),
    _case("match x:\n    case open:\n        pass", 2, "open", "match-rebinds-open"),
    _case('(e := os.environ)["X"] = "1"', 1, "os.environ", "environ-walrus"),
    _case('\uff45\uff56\uff41\uff4c("1")', 1, "eval", "fullwidth-eval"),
    _case(
        """
        import string
        class Leak(string.Formatter):
            def format_field(self, value, spec):
                return value
        """,
        3,
        "format_field",
        "formatter-subclass",
    ),
    _case(
        "import string\nBase = string.Formatter\nclass Leak(Base):\n    convert_field = print",
        4,
        "convert_field",
        "formatter-hook-assigned",
    ),
    _case(
        "import concurrent.futures\ndef spawn(cf):\n    return cf.process.mp\n"
        "spawn(concurrent.futures)",
        4,
        "concurrent.futures",
        "module-with-blocked-child-travels",
    ),
    _case(
        "import urllib.request\njar = urllib.request.http.cookiejar",
        2,
        "http",
        "detour-to-cookiejar",
    ),
    _case(
        """
        import xml.etree.ElementTree as ET
        def load(path):
            return ET.parse(path)
        load("a.xml").write("b.xml")
        """,
        3,
        "ElementTree",
        "elementtree-escapes-helper",
    ),
    _case(
        """
        import zipfile
        class Z(zipfile.ZipFile):
            def go(self, member):
                return self._extract_member(member, "/", None)
        """,
        4,
        "_extract_member",
        "inherited-private-method",
    ),
    _case(
        'import typing\nT = typing.TypeVar("T", bound="os.system(\'id\')")',
        2,
        "os.system",
        "typevar-bound-code",
    ),
    _case("def f(x: \"'os.system(1)'\"):\n    return x", 1, "os.system", "nested-forward-ref"),
    _case("a = os\na = a.b\na = a.c\na = a.d", 1, "too many", "overloaded-alias"),
    _case("# -*- coding: utf_7 -*-\nx = 1 +AAo-print(1)", 1, "utf_7", "utf7-coding-cookie"),
    # -- pattern matching reads attributes too
    _case(
        "match f:\n    case object(__globals__=g):\n        pass",
        2,
        "__globals__",
        "match-kwd-dunder",
    ),
    _case(
        "match f:\n    case object(__init__=object(__globals__=g)):\n        pass",
        2,
        "__globals__",
        "match-nested-kwd-dunder",
    ),
    _case(
        "match fs:\n    case [object(__globals__=g), *rest]:\n        pass",
        2,
        "__globals__",
        "match-kwd-in-sequence",
    ),
    _case("match gen:\n    case object(gi_frame=fr):\n        pass", 2, "gi_frame", "match-frame"),
    _case("match glob:\n    case object(os=o):\n        pass", 2, "os", "match-module-detour"),
    _case(
        "match ns:\n    case {'__builtins__': b}:\n        pass",
        2,
        "__builtins__",
        "match-mapping-key",
    ),
    _case("class C:\n    __match_args__ = ('__init__',)", 2, "__init__", "match-args-dunder"),
    # -- string.Formatter hooks attached after the class, and format strings that walk to dunders
    _case(
        "import string\nclass L(string.Formatter):\n    pass\n"
        "L.format_field: object = lambda self, value, spec: value",
        4,
        "format_field",
        "formatter-hook-annotated",
    ),
    _case(
        "import string\nclass L(string.Formatter):\n    pass\nsetattr(L, 'format_field', hook)",
        4,
        "format_field",
        "formatter-hook-setattr",
    ),
    _case(
        "import string\nclass L(string.Formatter):\n    pass\n"
        "for L.convert_field in [hook]:\n    pass",
        4,
        "convert_field",
        "formatter-hook-for-target",
    ),
    _case(
        "import string\nfm = string.Formatter()\nfm.format_field = hook",
        3,
        "format_field",
        "formatter-hook-on-instance",
    ),
    _case(
        "import string\nclass L(string.Formatter):\n    format_field: object = print",
        3,
        "format_field",
        "formatter-hook-class-annotated",
    ),
    _case(
        "import string\nclass L(string.Formatter):\n    for format_field in [print]:\n        pass",
        3,
        "format_field",
        "formatter-hook-class-for",
    ),
    _case("s = '{0.__globals__[os]}'.format(f)", 1, "__globals__", "format-field-dunder"),
    _case("s = '{0.__init__.__globals__}'.format_map(m)", 1, "__init__", "format-map-dunder"),
    _case("s = '{0[__builtins__]}'.format(ns)", 1, "__builtins__", "format-field-dunder-key"),
    _case("s = '{0:{1.__globals__}}'.format(x, f)", 1, "__globals__", "format-spec-nested-field"),
    _case("s = '{0.gi_frame.f_globals}'.format(gen)", 1, "gi_frame", "format-field-frame"),
    _case("T = '{0.__class__}'\ns = T.format(x)", 1, "__class__", "format-string-constant"),
    _case(
        "import string\ns = string.Formatter().vformat('{0.__globals__}', [f], {})",
        2,
        "__globals__",
        "formatter-vformat-dunder",
    ),
    _case("s = ('{0.__glob' + 'als__}').format(f)", 1, "format string", "format-string-spliced"),
    _case("s = f'{{0.{name}}}'.format(f)", 1, "format string", "format-string-fstring"),
    _case(
        "t = '{0.__glob' + 'als__}'\ns = t.format(f)",
        2,
        "format string",
        "format-string-spliced-name",
    ),
    _case(
        "import string\nfm = string.Formatter()\ns = fm.format(f'{{0.__{name}__}}', f)",
        3,
        "format string",
        "formatter-format-spliced",
    ),
    _case("fmt = ('{0.__glob' + 'als__}').format\ns = fmt(f)", 1, "__globals__", "format-uncalled"),
    _case(
        "import sqlite3\nrun_sql = conn.execute\nrun_sql(sql)", 2, "execute", "sql-execute-aliased"
    ),
    # -- classes built at runtime: type() however it travels, metaclasses
    _case("X = [type][0]('X', (), {})", 1, "type", "type-in-a-list"),
    _case("X = (t := type)('X', (), {})", 1, "type()", "type-through-walrus"),
    _case("class C:\n    t = type\nX = C.t('X', (), {})", 2, "type", "type-as-class-attribute"),
    _case("def f():\n    return type\nX = f()('X', (), {})", 2, "type", "type-returned"),
    _case("def f(t=type):\n    return t('X', (), {})", 1, "type", "type-default-argument"),
    _case("X = type(int)('X', (), {})", 1, "type", "type-of-a-class-called"),
    _case("T = type(int)\nX = T('X', (), {})", 2, "type", "type-of-a-class-aliased"),
    _case(
        "import functools\np = functools.partial(type, 'X')\nX = p((), {})",
        2,
        "type",
        "type-in-partial",
    ),
    _case("class Meta(type):\n    pass", 1, "type", "metaclass-subclass"),
    _case("import abc\nX = abc.ABCMeta('X', (), {})", 2, "ABCMeta", "abcmeta-called"),
    _case(
        "import dataclasses\nX = dataclasses.make_dataclass('X', [], namespace=ns)",
        2,
        "namespace",
        "make-dataclass-namespace",
    ),
    _case("ns = {'format_field': hook}", 1, "format_field", "hook-name-as-dict-key"),
    # -- finalisers
    _case("ns = {'__del__': lambda self: print('late')}", 1, "__del__", "del-in-class-dict"),
    _case("ns = dict(__del__=finaliser)", 1, "__del__", "del-as-keyword"),
    _case("import atexit\natexit.register(print, 'late')", 1, "atexit", "atexit"),
    _case(
        "import weakref\nweakref.finalize(obj, print, 'late')", 2, "finalize", "weakref-finalize"
    ),
    _case("from weakref import finalize", 1, "finalize", "from-weakref-finalize"),
    _case("import weakref\nr = weakref.ref(obj, callback)", 2, "callback", "weakref-callback"),
    # -- file writers off the opener list
    _case(
        "import zipfile\nzipfile.main(['-c', 'out.zip', 'in'])", 2, "zipfile.main", "zipfile-main"
    ),
    _case("import tarfile\ntarfile.main()", 2, "tarfile.main", "tarfile-main"),
    _case("from gzip import main", 1, "main", "from-gzip-import-main"),
    _case("import json.tool\njson.tool.main()", 2, "json.tool.main", "json-tool-main"),
    _case("import filecmp\nfilecmp.demo()", 2, "filecmp.demo", "filecmp-demo"),
    _case("import wave\nw = wave.Wave_write('x.wav')", 2, "Wave_write", "wave-writer-class"),
    _case("import sunau\nw = sunau.Au_write('x.au')", 2, "Au_write", "sunau-writer-class"),
    # -- SQL that writes files, however it is spelled or built
    _case(
        "import sqlite3\nconn.execute('ATTACH ? AS x', (path,))", 2, "attaches", "sql-attach-param"
    ),
    _case("import sqlite3\nconn.execute('ATTACH x AS y')", 2, "attaches", "sql-attach-identifier"),
    _case(
        "import sqlite3\nconn.execute('ATT' + \"ACH 'x.db' AS x\")",
        2,
        "attaches",
        "sql-concatenated",
    ),
    _case(
        "import sqlite3\nconn.execute(f\"{verb} 'x.db' AS x\")", 2, "runtime", "sql-fstring-verb"
    ),
    _case(
        "import sqlite3\nconn.execute(\"VACUUM/**/INTO 'x.db'\")", 2, "VACUUM INTO", "sql-comment"
    ),
    _case(
        "import sqlite3\nconn.execute(\"VACUUM main INTO 'x.db'\")",
        2,
        "VACUUM",
        "sql-vacuum-schema",
    ),
    _case(
        "import sqlite3\nconn.execute(\"/* x */ AtTaCh --y\\n 'x.db' AS x\")",
        2,
        "attaches",
        "sql-comments-and-case",
    ),
    _case(
        "import sqlite3\nconn.execute(\"PRAGMA temp_store_directory = '/tmp/x'\")",
        2,
        "pragma",
        "sql-file-pragma",
    ),
    _case(
        "import sqlite3\nQ = \"ATTACH 'x.db' AS x\"\nconn.execute(Q)", 3, "attaches", "sql-constant"
    ),
    _case("import sqlite3\ncur.executescript(script)", 2, "script", "sql-script-variable"),
    _case(
        "import sqlite3\ncur.executescript('CREATE TABLE t(a);' + more)",
        2,
        "script",
        "sql-script-spliced",
    ),
    _case(
        "import sqlite3\ndef q(sql):\n    return conn.execute(sql)", 3, "runtime", "sql-parameter"
    ),
    _case(
        "import sqlite3\nfor s in ['SELECT 1', \"ATTACH 'x' AS y\"]:\n    conn.execute(s)",
        3,
        "attaches",
        "sql-loop-over-attach",
    ),
    # -- raw sockets
    _case(
        "import asyncio\nasync def go():\n    return await asyncio.open_connection('h', 25)",
        3,
        "open_connection",
        "asyncio-open-connection",
    ),
    _case(
        "import asyncio\nasync def go():\n    loop = asyncio.get_running_loop()\n"
        "    await loop.create_connection(Proto, 'h', 25)",
        4,
        "create_connection",
        "asyncio-create-connection",
    ),
    _case(
        "async def go(loop, s):\n    await loop.sock_sendall(s, b'x')",
        2,
        "sock_sendall",
        "loop-sock",
    ),
    _case(
        "async def go(loop):\n    await loop.create_datagram_endpoint(P, remote_addr=('h', 1))",
        2,
        "create_datagram_endpoint",
        "asyncio-datagram",
    ),
    _case(
        "import http.client\nc = http.client.HTTPConnection('h', 6379)\nc.connect()\n"
        "c.sock.sendall(b'FLUSHALL\\r\\n')",
        4,
        "sock",
        "http-client-sock",
    ),
    _case(
        "import http.client\nc = http.client.HTTPConnection('h', 6379)\nc.send(b'FLUSHALL\\r\\n')",
        3,
        "send",
        "http-client-send",
    ),
    # -- run() itself
    _case(
        "async def run(task, previous_outputs):\n    return task",
        1,
        "async",
        "async-run",
        with_run=False,
    ),
    _case("def run(task):\n    return task", 1, "two positional", "run-one-param", with_run=False),
    _case(
        "def run(task, previous_outputs, extra):\n    return task",
        1,
        "two positional",
        "run-three-params",
        with_run=False,
    ),
    _case("def run(*args):\n    return args", 1, "two positional", "run-varargs", with_run=False),
    _case(
        "def run(task, *, previous_outputs):\n    return task",
        1,
        "two positional",
        "run-keyword-only",
        with_run=False,
    ),
    _case(
        "def main(task, previous_outputs):\n    return task",
        1,
        "no top-level",
        "run-missing",
        with_run=False,
    ),
    _case(
        "if True:\n    def run(task, previous_outputs):\n        return task",
        2,
        "binds the name run",
        "run-not-top-level",
        with_run=False,
    ),
    _case(
        "def run(task, previous_outputs):\n    return task\nrun = print",
        3,
        "binds the name run",
        "run-rebound",
        with_run=False,
    ),
    _case(
        "def run(task, previous_outputs):\n    return task\ndef run(a, b):\n    return b",
        3,
        "binds the name run",
        "run-redefined",
        with_run=False,
    ),
    _case("def sneaky():\n    global run\n    run = print", 2, "global run", "run-global"),
    _case(
        "def run(task, previous_outputs)\n    return task",
        1,
        "syntax error",
        "syntax-error",
        with_run=False,
    ),
]


# ---- escapes that must be refused ------------------------------------------------------------


@pytest.mark.parametrize(("source", "line", "culprit"), REJECTED)
def test_escape_is_refused_naming_the_culprit_and_its_line(
    source: str, line: int, culprit: str
) -> None:
    complaints = codeguard.check_agent_source(source)
    assert complaints, "accepted"
    assert all(COMPLAINT.match(c) for c in complaints), complaints
    assert any(c.startswith(f"line {line}: ") and culprit in c for c in complaints), complaints


def test_the_escape_catalogue_is_large_and_uniquely_named() -> None:
    ids = [case.id for case in REJECTED]
    assert len(ids) >= 60
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("module", sorted(guardpolicy.BLOCKED_STDLIB))
def test_every_blocked_module_is_refused_in_every_import_form(module: str) -> None:
    parent, _, leaf = module.rpartition(".")
    forms = [f"import {module}", f"import {module} as alias"]
    forms.append(f"from {parent} import {leaf}" if parent else f"from {module} import name")
    for form in forms:
        complaints = codeguard.check_agent_source(form + RUN)
        assert any(c.startswith("line 1: ") and module in c for c in complaints), (form, complaints)


OS_MUTATORS = (
    "system", "popen", "execv", "execve", "execl", "execlp", "execvp", "spawnl", "spawnv",
    "posix_spawn", "posix_spawnp", "fork", "forkpty", "kill", "killpg", "remove", "unlink",
    "rmdir", "removedirs", "rename", "renames", "replace", "chmod", "chown", "lchown", "mkdir",
    "makedirs", "symlink", "link", "truncate", "putenv", "unsetenv", "open", "fdopen", "write",
    "dup2", "setuid", "setgid", "chdir", "mkfifo", "utime",
)  # fmt: skip


@pytest.mark.parametrize("name", OS_MUTATORS)
def test_every_mutating_os_function_is_refused_called_or_not(name: str) -> None:
    for use in (f"os.{name}('x')", f"handle = os.{name}", f"from os import {name}"):
        complaints = codeguard.check_agent_source(f"import os\n{use}" + RUN)
        assert any(c.startswith("line 2: ") and name in c for c in complaints), (use, complaints)


@pytest.mark.parametrize(
    "call",
    [
        "write_text('x')", "write_bytes(b'x')", "unlink()", "rmdir()", "mkdir()", "touch()",
        "rename('y')", "replace('y')", "chmod(0o777)", "lchmod(0o777)", "symlink_to('/etc')",
        "hardlink_to('/etc/passwd')", "open('w')", "open('a')", "open(mode='r+')",
    ],
)  # fmt: skip
def test_every_path_mutator_is_refused_on_every_kind_of_path(call: str) -> None:
    verb = call.split("(")[0]
    for path in ("Path('x')", "pathlib.Path.home()", "(Path('d') / 'x')", "here"):
        source = f"import pathlib\nhere = Path('x').resolve()\n{path}.{call}" + RUN
        complaints = codeguard.check_agent_source(source)
        assert any(c.startswith("line 3: ") and verb in c for c in complaints), (path, complaints)


MUST_BLOCK = (
    "subprocess", "shutil", "ctypes", "importlib", "pickle", "marshal", "shelve",
    "multiprocessing", "socket", "pty", "signal", "code", "codeop", "runpy", "builtins", "gc",
    "inspect", "_posixsubprocess", "_ctypes", "posix", "nt", "mmap", "resource", "fcntl",
    "termios", "tty", "pdb", "bdb", "trace", "zipimport", "pkgutil", "webbrowser", "ensurepip",
    "venv", "idlelib", "tkinter", "turtle", "_winapi", "msvcrt", "winreg", "_thread", "_io",
)  # fmt: skip


@pytest.mark.parametrize("module", MUST_BLOCK)
def test_the_modules_that_undo_checks_cannot_be_imported(module: str) -> None:
    complaints = codeguard.check_agent_source(f"import {module}" + RUN)
    assert any(c.startswith("line 1: ") and module in c for c in complaints), complaints


# ---- what must pass ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_realistic_agent_is_accepted(name: str) -> None:
    source = textwrap.dedent(ACCEPTED[name]).lstrip("\n")
    compile(source, name, "exec")  # the sample itself must be valid Python
    assert codeguard.check_agent_source(source) == []


# ---- the runtime's private part and the home (issue 23) ------------------------------------


def test_an_agent_that_finds_its_own_key_is_refused() -> None:
    """How a standalone agent used to find its key: a .env up the tree from its own file."""
    complaints = codeguard.check_agent_source(textwrap.dedent(FULL_FILE).lstrip("\n"))
    assert any("__file__ leads to where the agent is stored" in c for c in complaints)
    assert any("the string 'ANTHROPIC_API_KEY' names" in c for c in complaints)
    assert any("the string '.env' names '.env'" in c for c in complaints)


@pytest.mark.parametrize(
    ("body", "culprit"),
    [
        ("key = _api_key()", "_api_key is none of this code's own names"),
        ("key = _setting('ANTHROPIC_BASE_URL')", "_setting is none of this code's own names"),
        ("reply = _post({'model': 'm'})", "_post is none of this code's own names"),
        ("reply = _ask_broker('3', {'op': 'messages'})", "_ask_broker is none of this"),
        ("road = _standalone", "_standalone is none of this code's own names"),
        ("_BROKEN.clear()", "_BROKEN is none of this code's own names"),
        ("_main()", "_main is none of this code's own names"),
        ("here = Path(__file__).parent", "__file__ leads to where the agent is stored"),
        ("me = sys.argv[0]", "sys.argv leads to where the agent is stored"),
        ("python = sys.executable", "sys.executable leads to where"),
        ("root = sys.prefix", "sys.prefix leads to where"),
        ("import sysconfig", "sysconfig leads to where the agent is stored"),
        ("line = open('/proc/self/cmdline').read()", "names '/proc/'"),
        ("home = os.environ.get('AGENTGOD_HOME')", "names 'AGENTGOD_HOME'"),
        ("home = Path.home() / '.agentgod'", "names '.agentgod'"),
        ("raw = open('../../.env', 'rb').read()", "names '.env'"),
        ("raw = b'.ENV'", "the bytes b'.ENV' names '.ENV'"),
        ("text = 'a\u202eb'", "U+202E is an invisible bidi control character"),
    ],
)
def test_the_runtimes_private_names_and_the_home_are_refused(body: str, culprit: str) -> None:
    complaints = codeguard.check_agent_source(body + "\n" + RUN)
    assert any(culprit in complaint for complaint in complaints), complaints


def test_underscore_names_of_the_agents_own_are_accepted() -> None:
    body = (
        "_CACHE = {}\n"
        "def _helper(text):\n    return text.strip()\n"
        "class _Parser:\n    _seen = 0\n"
        "for _ in range(3):\n    _CACHE[_] = _helper(' x ')\n"
        "try:\n    pass\nexcept ValueError as _error:\n    print(_error)\n"
        "text = 'see environment variables and .environ'\n"
    )
    assert codeguard.check_agent_source(body + RUN) == []


def test_there_are_at_least_twenty_realistic_agents() -> None:
    assert len(ACCEPTED) >= 20


@pytest.mark.parametrize("module", sorted(sys.stdlib_module_names))
def test_every_public_unblocked_stdlib_module_can_be_imported_and_no_other(module: str) -> None:
    complaints = codeguard.check_agent_source(f"import {module}" + RUN)
    private = module.startswith("_") and module != "__future__"
    if private or module in guardpolicy.BLOCKED_STDLIB:
        assert any(c.startswith("line 1: ") and module in c for c in complaints), complaints
    else:
        assert complaints == []


def test_str_replace_stays_legal_while_path_replace_is_refused() -> None:
    legal = """
        def run(task, previous_outputs):
            text = task.replace("a", "b").replace("\\n", " ", 1)
            stamp = Path("x").read_text().replace("-", "")
            return text + Path("y").name.replace("_", " ") + stamp
    """
    assert codeguard.check_agent_source(textwrap.dedent(legal)) == []
    for escape in ("Path('a').replace('b')", "(Path('d') / 'a').replace('b')", "p.replace(t)"):
        assert codeguard.check_agent_source(f"{escape}{RUN}"), escape


@pytest.mark.parametrize(
    "body",
    [
        'env = {**os.environ, "EXTRA": "1"}\nok = "HOME" in os.environ\n'
        "keys = [k for k in os.environ]",
        "type = 'kind'\nlabel = type.upper()",
        "class Archive:\n    def extract(self, item):\n        return item\n"
        "    def use(self):\n        return self.extract('x')",
        "from typing import Literal\nMode = Literal['read-only', 'a (b)']",
        "row = {'Price (USD)': 1}\nprice = row['Price (USD)']",
        "stamp = datetime_value.replace(microsecond=0, tzinfo=None)",
        "import zipfile\nwith zipfile.ZipFile(buffer) as zf:\n    text = zf.read('a.txt')",
        "import tarfile\nwith tarfile.open(fileobj=buffer, mode='r:gz') as tf:\n"
        "    names = tf.getnames()",
        "import gzip\nwith gzip.open('data.gz', 'rt', encoding='utf-8') as fh:\n"
        "    first = fh.readline()",
        "import sqlite3\nconn = sqlite3.connect(database=':memory:')",
        "import tempfile\nwith tempfile.TemporaryDirectory(prefix='agent-') as d:\n    pass",
        "import os\ngetenv = os.environ.get\nvalue = getenv('HOME', '')",
        "soup_tag.extract()",
        "import sys\nsys.stderr.write('progress\\n')\nsys.stdout.flush()",
        "ok = __name__ == '__main__' and __doc__ is None",
        "client.connect()",
        "import os.path\nfolder = os.path.dirname(os.path.abspath('x'))",
        "cached = hasattr(holder, '_cache') and getattr(holder, 'name', None)",
        "PROMPT = 'Never run ATTACH DATABASE or VACUUM INTO.'\nanswer = call_llm(PROMPT)",
        "import io\nimport zipfile\nwith zipfile.ZipFile(io.BytesIO(blob)) as archive:\n"
        "    for member in archive.namelist():\n        with archive.open(member) as fh:\n"
        "            head = fh.read(10)",
        "import zipfile\ntext = zipfile.ZipFile(buffer).open(info).read()",
        "class Extractor:\n    def extract(self, text):\n        return text.split()\n"
        "extractor = Extractor()\nwords = extractor.extract('a b')",
        "class Finder:\n    def extract(self, text):\n        return text\n"
        "found = Finder().extract('x')",
        "import sqlite3\nconn = sqlite3.connect(':memory:')\n"
        "for table in ('a', 'b'):\n    conn.execute(f'CREATE TABLE {table} (x TEXT)')\n"
        "    rows = conn.execute(f'SELECT * FROM {table} WHERE x = ?', ('-',)).fetchall()",
        "import sqlite3\nconn = sqlite3.connect(':memory:')\n"
        "QUERY = 'SELECT 1 -- no ATTACH here'\nconn.execute(QUERY)\n"
        "conn.executescript('CREATE TABLE t (a); INSERT INTO t VALUES (1);')",
        "import sqlite3\nSCHEMA = ('CREATE TABLE a (x)', 'CREATE INDEX ix ON a (x)')\n"
        "conn = sqlite3.connect(':memory:')\nfor statement in SCHEMA:\n    conn.execute(statement)",
        "def attach(files):\n    return files\nmail.attach(part)",
        "label = '{0.__name__}: {1} {name!r} {items[0]}'.format(cls, 1, name='n', items=[1])\n"
        "PROMPT = 'Summarise {task}'\ntext = PROMPT.format(task='x')",
        "ok = isinstance(x, type) or issubclass(type(x), (int, type)) or type(x) is dict\n"
        "name = type(x).__name__\nkind = type(x)\nlabel = f'{type}'",
        "from abc import ABCMeta, abstractmethod\nclass Base(metaclass=ABCMeta):\n"
        "    @abstractmethod\n    def go(self) -> type[int]:\n        return int\n"
        "def make(cls: type, table: dict[str, type]) -> None:\n    return None",
        "import weakref\ncache = weakref.WeakValueDictionary()\nr = weakref.ref(obj)",
        "import asyncio\nasync def go():\n    await asyncio.sleep(0)\n"
        "    return await asyncio.gather(asyncio.to_thread(print, 1))",
        "match point:\n    case Point(x=0, y=y) if y > 0:\n        pass\n"
        "    case {'kind': kind, **rest}:\n        pass",
    ],
    ids=[
        "environ-copies", "type-as-variable", "own-extract-method", "literal-strings",
        "dict-key-with-parens", "datetime-replace", "zip-read", "tar-read", "gzip-read",
        "sqlite-memory-keyword", "tempdir-prefix", "environ-get-alias", "bs4-extract",
        "std-streams", "module-dunders", "connect-without-database", "import-os-path",
        "hasattr-private", "attach-in-a-prompt", "zip-member-by-variable", "zip-open-direct",
        "own-extract-on-instance", "own-extract-on-call", "sql-fstring-select", "sql-literals",
        "sql-loop-over-literals", "attach-as-a-name", "format-harmless-fields", "type-inert-uses",
        "metaclass-keyword", "weakref-without-callback", "asyncio-without-sockets",
        "match-ordinary",
    ],
)  # fmt: skip
def test_ordinary_code_near_the_rules_is_accepted(body: str) -> None:
    assert codeguard.check_agent_source(body + RUN) == []


# ---- the policy tables ------------------------------------------------------------------------


def test_blocked_modules_are_real_standard_library_modules() -> None:
    for module in guardpolicy.BLOCKED_STDLIB:
        assert module.split(".")[0] in sys.stdlib_module_names, module


def test_the_modules_agents_need_most_are_importable_and_unknown_packages_are_not() -> None:
    for module in ("json", "csv", "sqlite3", "zipfile", "os", "sys", "__future__"):
        assert codeguard.check_agent_source(f"import {module}" + RUN) == [], module
    [complaint] = codeguard.check_agent_source("import leftpad" + RUN)
    assert complaint.startswith("line 1: ") and "leftpad is not an allowed module" in complaint
    for import_name in guardpolicy.ALLOWED_PACKAGES.values():
        assert import_name in complaint


def test_allowed_packages_map_pip_names_to_import_names() -> None:
    assert guardpolicy.ALLOWED_PACKAGES["beautifulsoup4"] == "bs4"
    assert guardpolicy.ALLOWED_PACKAGES["pyyaml"] == "yaml"
    assert guardpolicy.ALLOWED_PACKAGES["python-dateutil"] == "dateutil"
    for pip_name, import_name in guardpolicy.ALLOWED_PACKAGES.items():
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*", pip_name), pip_name
        assert import_name.isidentifier(), import_name
        assert codeguard.check_agent_source(f"import {import_name}" + RUN) == []


# ---- complaint format and robustness ----------------------------------------------------------


def test_complaints_are_formatted_with_a_line_and_a_reason() -> None:
    [complaint] = codeguard.check_agent_source('import os\nos.system("id")' + RUN)
    assert complaint == (
        "line 2: os.system() starts or signals processes; agents may not start processes"
    )


def test_identical_complaints_on_one_line_are_reported_once() -> None:
    complaints = codeguard.check_agent_source('x = eval("1") + eval("2")' + RUN)
    assert complaints == [
        "line 1: eval() runs code chosen at runtime, which no static check can see"
    ]


def test_every_complaint_is_collected_in_line_order() -> None:
    source = textwrap.dedent(
        """
        import subprocess
        def run(task, previous_outputs):
            open("out.txt", "w").write(task)
            value = eval(task)
            import pickle
            return os.system(value)
        """
    ).lstrip("\n")
    complaints = codeguard.check_agent_source(source)
    lines = [int(c.split(":")[0].removeprefix("line ")) for c in complaints]
    assert lines == [1, 3, 4, 5, 6]
    for culprit, complaint in zip(
        ["subprocess", "'w'", "eval", "pickle", "os.system"], complaints, strict=True
    ):
        assert culprit in complaint


def test_the_empty_source_has_no_run() -> None:
    assert codeguard.check_agent_source("") == [
        "line 1: no top-level `def run(task, previous_outputs):` was found"
    ]


@pytest.mark.parametrize(
    "source",
    [
        "b'\\x89PNG\\r\\n\\x1a\\n\\x00\\x00'",
        "\x00\x01\x02def run(task, previous_outputs): pass",
        bytes(range(256)).decode("latin-1"),
        "\ufeffdef run(task, previous_outputs):\n    return task\n\udcff",
    ],
    ids=["bytes-literal", "null-bytes", "binary-junk", "bom-and-surrogate"],
)
def test_bytes_looking_source_gets_a_complaint_not_an_exception(source: str) -> None:
    complaints = codeguard.check_agent_source(source)
    assert complaints
    assert all(COMPLAINT.match(c) for c in complaints)


def test_actual_bytes_are_refused_politely() -> None:
    [complaint] = codeguard.check_agent_source(b"def run(task, previous_outputs): pass")  # type: ignore[arg-type]
    assert complaint.startswith("line 1: ") and "bytes" in complaint


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 1000 + "1" + ")" * 1000,
        "+".join(["1"] * 600),
        "a." * 600 + "b",
        "-" * 100_000 + "1",
        "not " * 5000 + "x",
    ],
    ids=["1000-parens", "600-term-sum", "600-attribute-chain", "100k-unary", "5000-not"],
)
def test_deep_nesting_is_a_complaint_not_a_crash(expression: str) -> None:
    [complaint] = codeguard.check_agent_source(f"x = {expression}" + RUN)
    assert complaint.startswith("line 1: ")
    assert any(word in complaint for word in ("nested", "nests", "cannot be parsed")), complaint


def test_long_but_ordinary_expressions_are_still_checked() -> None:
    total = " + ".join(f"len(part{i})" for i in range(200))
    assert codeguard.check_agent_source(f"x = {total}" + RUN) == []
    assert codeguard.check_agent_source(f"x = {total} + eval('1')" + RUN)


def test_the_checker_never_raises_on_real_world_python() -> None:
    stdlib = Path(ast.__file__).parent
    files = sorted(stdlib.glob("*.py"))[:80] + sorted((stdlib / "asyncio").glob("*.py"))
    for path in files:
        complaints = codeguard.check_agent_source(path.read_text(encoding="utf-8"))
        assert all(COMPLAINT.match(c) for c in complaints), path


def test_a_package_the_agent_did_not_declare_is_refused_when_its_plan_is_known() -> None:
    source = "import yaml\nimport dateutil\n\ndef run(task, previous_outputs):\n    return task\n"
    assert codeguard.check_agent_source(source) == [], "without a plan, any vetted package"
    [complaint] = codeguard.check_agent_source(source, declared=["PyYAML"])
    assert complaint.startswith("line 2: import dateutil: dateutil is not installed for this agent")
    assert codeguard.check_agent_source(source, declared=["pyyaml", "python-dateutil"]) == []
