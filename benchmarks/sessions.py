"""Ingest and search speed of the ``sqlite`` session store, beside raw SQLite.

For each size (default 10k and 100k messages; ``--sizes 10000,100000,1000000`` for the
1M run) this builds a synthetic corpus — sessions of about 40 messages with a Zipf
vocabulary (common English and technical words first, then ~20k pseudo-words), code
snippets, tool calls with JSON arguments and their results, ~5% CJK messages, and a set
of planted facts — and measures, in one run:

* **bulk import**: the store's import path (``create_session`` + ``append_messages`` per
  session, what ``hermes sessions import`` does) in messages/s; baselines: plain
  ``INSERT`` into an unindexed table, and the same table plus a minimal FTS5 index
  (content only, filled per batch);
* **append**: one message per transaction at size N (``append_message``), p50/p95 in ms;
  baseline: one plain ``INSERT`` + commit into the unindexed table;
* **search** p50/p95 in ms for single-term, two-term, phrase, prefix, CJK (≥3 chars,
  trigram index), short CJK (2 chars, LIKE) and natural-language questions (English;
  Chinese and Japanese apart, as ``question_cjk``), through
  ``search_messages`` (ranking, snippets, context, 20 hits); baseline: ``MATCH … ORDER
  BY rank LIMIT 20`` with ``snippet()`` on the minimal index, and for CJK a ``LIKE``
  scan of the unindexed table;
* **bytes on disk per message** (after a WAL checkpoint) and the **index overhead**:
  bytes of both FTS indexes over bytes of the indexed raw text;
* **hit rate of natural-language questions**: for each planted fact, a question written
  for it (its wording differs from the fact's); a hit is the fact among the first 10
  results, with the strict query only and with the relaxed fallback.

Targets at 1M messages: append p50 ≤ 1 ms, bulk import ≥ 20,000 msg/s, search p95 ≤ 50 ms,
index overhead ≤ 3x the raw text. Each figure is one JSON line; the first describes the
machine.

Run: ``.venv/bin/python benchmarks/sessions.py [--sizes 10000,100000] [--queries 50]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hermes
from hermes.plugins.sessions.query import sanitize
from hermes.plugins.sessions.store import SQLiteSessionStore
from hermes.plugins.sessions.transfer import ImportReport, SourceSession, import_sessions

SESSION_LEN = 40
BATCH = 5000

COMMON = """the to and of a in is it you that for on with this be are as was have not at or by
but from can what all do if will we so an my there about one your up out just more like
get when which time they me no how would make them some then than its also into only other
could now use file error test run server database code function data user value config
should need new work first way because well even want these any thing after see most
change update build check fix issue output result request response version path line model
deploy staging production branch commit merge docker python script logs query table index
cache memory session token api key list string number class method module import package
install release backup restore migration schema column field record debug trace warning
network port host client service process thread lock queue worker job task schedule cron
endpoint route handler event message send receive retry timeout limit size length format
parse json yaml csv http https url download upload bucket storage disk volume container
cluster node pod image registry secret password user admin role permission access policy
""".split()

CJK_CHARS = ("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自之着去"
             "之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如"
             "前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种"
             "声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口"
             "数据库迁移缓存服务器记忆断裂问题部署测试环境配置日志错误修复版本更新用户会话索引查询性能")

TOOLS = [
    ("terminal", lambda w: {"command": f"grep -rn {w()} src/{w()}.py | head -20"}),
    ("read_file", lambda w: {"path": f"src/{w()}/{w()}_{w()}.py"}),
    ("write_file", lambda w: {"path": f"docs/{w()}.md", "content": f"# {w()}\n{w()} {w()} {w()}"}),
    ("web_search", lambda w: {"query": f"{w()} {w()} {w()}"}),
    ("patch", lambda w: {"path": f"lib/{w()}.ts", "old": f"{w()}()", "new": f"{w()}({w()})"}),
]

#: Planted facts and the questions written for them. The questions ask the way a person
#: or a model would, reusing some of the fact's words and not others.
FACTS: list[tuple[str, str]] = [
    ("Moved the staging database from MySQL to Postgres 15 last Tuesday; migration script is scripts/migrate_staging.sh",
     "when did I move the staging database to Postgres?"),
    ("The nightly backup job failed because the S3 bucket policy denied PutObject for the backup role",
     "why did the nightly backup fail?"),
    ("We pinned numpy to 1.26.4 because 2.0 broke the pandas_profiling import",
     "which numpy version did we pin and why?"),
    ("Grafana alert threshold for p95 latency was raised from 300ms to 450ms on the checkout service",
     "what is the latency alert threshold for checkout?"),
    ("The flaky login test was caused by a race between the session cookie write and the redirect",
     "what made the login test flaky?"),
    ("Rotated the Stripe webhook signing secret and stored it in Vault under kv/payments/stripe",
     "where did we store the stripe webhook secret?"),
    ("Decided to use Redis streams instead of RabbitMQ for the notification queue",
     "did we pick rabbitmq or redis for notifications?"),
    ("The memory leak in the image resizer came from Pillow keeping decoded frames in a global cache",
     "what caused the memory leak in the image resizer"),
    ("Kubernetes ingress uses cert-manager with the letsencrypt-prod ClusterIssuer for TLS",
     "how are TLS certificates issued for the kubernetes ingress?"),
    ("Sarah prefers pull requests under 400 lines and wants a screenshot for every UI change",
     "what does Sarah want in pull requests?"),
    ("The CSV export timed out for accounts with more than 50k rows, so we switched it to a background job",
     "how did we fix the csv export timeout?"),
    ("Terraform state lives in the tfstate-prod bucket with DynamoDB table tf-locks for locking",
     "where is the terraform state kept?"),
    ("Our API rate limit is 600 requests per minute per token, enforced by the nginx limit_req zone",
     "what's the api rate limit per token?"),
    ("The search index rebuild takes about 40 minutes and must run after every schema migration",
     "how long does rebuilding the search index take?"),
    ("We chose Argon2id with 64MB memory cost for password hashing instead of bcrypt",
     "which password hashing algorithm did we choose?"),
    ("The mobile app crash on Android 12 was a missing exported attribute on the share activity",
     "why was the android app crashing?"),
    ("Feature flags are served by Unleash; the dark-mode flag is enabled for 20 percent of users",
     "what percentage of users have dark mode enabled?"),
    ("Customer invoices are generated on the 1st at 02:00 UTC by the billing-cron worker",
     "when are customer invoices generated?"),
    ("The websocket disconnects every 60 seconds were caused by the load balancer idle timeout",
     "why do websockets keep disconnecting?"),
    ("Log retention is 30 days in Loki and 1 year in the cold archive on Glacier",
     "how long do we keep logs?"),
    ("The ONNX export of the ranking model needs opset 17 because of the LayerNorm op",
     "which opset does the ranking model export need?"),
    ("Dependabot is configured to open at most 5 PRs per week and ignores major bumps of React",
     "how is dependabot configured?"),
    ("The GraphQL N+1 problem in the orders resolver was solved with a DataLoader per request",
     "how did we solve the n+1 queries in graphql?"),
    ("Jenkins was replaced by GitHub Actions; self-hosted runners live in the ci-runners VPC",
     "what replaced jenkins for ci?"),
    ("The PDF renderer uses wkhtmltopdf 0.12.6 with patched Qt, installed from the vendor deb",
     "which wkhtmltopdf version does the pdf renderer use?"),
    ("User avatars are resized to 256x256 WebP and cached on the CDN for 7 days",
     "what size are user avatars resized to?"),
    ("The Elasticsearch cluster was downsized from 6 to 4 data nodes after moving cold indices to S3",
     "how many elasticsearch data nodes do we run now?"),
    ("The timezone bug in reports came from storing naive datetimes; everything is UTC-aware now",
     "what was the timezone bug in the reports?"),
    ("Onboarding emails are sent through Postmark with the welcome-v3 template",
     "which service sends the onboarding emails?"),
    ("The staging VPN uses WireGuard on port 51820 with keys managed by Tailscale ACLs",
     "what vpn do we use for staging?"),
    ("Sentry sampling is 10 percent for transactions and 100 percent for errors in production",
     "what is our sentry sampling rate?"),
    ("Max upload size was raised to 25 MB in both nginx client_max_body_size and the Django setting",
     "what is the maximum upload size?"),
    ("The ETL pipeline runs in Airflow, DAG name daily_revenue_rollup, scheduled at 03:30",
     "which airflow dag computes daily revenue?"),
    ("GPU inference runs on two L4 cards with vLLM and a max batch size of 32",
     "what gpus do we use for inference?"),
    ("Tenant isolation is enforced by Postgres row level security policies keyed on tenant_id",
     "how do we isolate tenants in the database?"),
    ("昨晚把测试环境的数据库从MySQL迁移到了Postgres，迁移脚本在scripts目录下",
     "我们什么时候把测试环境数据库迁移到Postgres的？"),
    ("缓存服务器的内存泄漏是因为会话索引没有设置过期时间",
     "缓存服务器为什么会内存泄漏"),
    ("部署流水线现在用GitHub Actions，生产环境需要两个人审批",
     "生产环境部署需要几个人审批？"),
    ("日志错误告警的阈值从每分钟100条改成了每分钟250条",
     "日志告警阈值改成多少了"),
    ("用户会话超时时间设置为三十分钟，超过后需要重新登录",
     "会话超时时间是多久"),
]


#: More Chinese and Japanese questions, timed only: about things the corpus never
#: mentions (the bigram stage then has nothing to rank: it must not scan), and made of
#: the corpus' most common characters (every bigram is frequent: the expensive case).
CJK_QUESTIONS = [
    "去西安旅游你推荐住哪个酒店？", "做宫保鸡丁的诀窍是什么？", "タイミングベルトの交換はいくら？",
    "読書会の小説の題名は何だっけ", "他说这个人是不是我们的老师？", "数据库迁移的问题怎么修复？",
    "服务器部署到测试环境以后日志里有什么错误？", "我们上次说的那个用户会话索引性能问题解决了吗",
    "国家大事中有人说到了什么？", "这个版本更新了哪些配置？",
]


# --------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------


class Corpus:
    """A deterministic synthetic chat corpus, generated in session-sized chunks."""

    def __init__(self, seed: int = 1, pseudo_words: int = 20_000):
        rng = random.Random(seed)
        syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
        pseudo: set[str] = set()
        while len(pseudo) < pseudo_words:
            pseudo.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
        self.vocab = COMMON + sorted(pseudo)
        rng.shuffle(self.vocab[len(COMMON):])
        self.cum = list(itertools.accumulate(1.0 / (r + 1) ** 1.07 for r in range(len(self.vocab))))
        self.cjk_cum = list(itertools.accumulate(1.0 / (r + 1) ** 0.9 for r in range(len(CJK_CHARS))))
        self.seed = seed

    def words(self, rng: random.Random, n: int) -> str:
        return " ".join(rng.choices(self.vocab, cum_weights=self.cum, k=n))

    def cjk(self, rng: random.Random, n: int) -> str:
        return "".join(rng.choices(CJK_CHARS, cum_weights=self.cjk_cum, k=n))

    def _text(self, rng: random.Random, low: int, high: int) -> str:
        if rng.random() < 0.05:
            text = self.cjk(rng, rng.randint(low, high))
            if rng.random() < 0.5:
                text += " " + self.words(rng, rng.randint(1, 4))
            return text
        return self.words(rng, rng.randint(low, high))

    def session(self, index: int) -> list[dict[str, Any]]:
        """The messages of session ``index`` (same every run)."""
        rng = random.Random(self.seed * 1_000_003 + index)
        w = lambda: rng.choices(self.vocab[len(COMMON):], k=1)[0]  # noqa: E731
        out: list[dict[str, Any]] = []
        ts = 1_700_000_000.0 + index * 3600.0
        while len(out) < SESSION_LEN:
            ts += 5
            out.append({"role": "user", "content": self._text(rng, 5, 30), "timestamp": ts})
            if rng.random() < 0.35:
                name, make = rng.choice(TOOLS)
                call = {"id": f"call_{index}_{len(out)}", "type": "function",
                        "function": {"name": name, "arguments": json.dumps(make(w))}}
                out.append({"role": "assistant", "content": "", "tool_calls": [call], "timestamp": ts + 1})
                body = self._text(rng, 30, 200)
                if rng.random() < 0.4:
                    body += f"\ndef {w()}_{w()}({w()}):\n    return {w()}.{w()}({w()}) + {rng.randint(0, 99)}\n"
                out.append({"role": "tool", "content": body, "name": name,
                            "tool_call_id": call["id"], "timestamp": ts + 2})
            answer = self._text(rng, 20, 150)
            if rng.random() < 0.15:
                answer += f"\n```python\nimport {w()}\n{w()} = {w()}.{w()}('{w()}')\nprint({w()})\n```"
            out.append({"role": "assistant", "content": answer, "timestamp": ts + 3})
        return out[:SESSION_LEN]

    def messages(self, size: int) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """``(session_id, messages)`` chunks totalling ``size`` messages, facts planted at
        evenly spaced positions (replacing a user message's content)."""
        fact_at = {(k + 1) * size // (len(FACTS) + 1): k for k in range(len(FACTS))}
        produced, index = 0, 0
        while produced < size:
            msgs = self.session(index)[: size - produced]
            for offset, msg in enumerate(msgs):
                k = fact_at.get(produced + offset)
                if k is not None:
                    msg.update(role="user", content=FACTS[k][0])
                    msg.pop("tool_calls", None)
                    msg.pop("name", None)
                    msg.pop("tool_call_id", None)
            yield f"bench_{index:07d}", msgs
            produced += len(msgs)
            index += 1


def fact_ids(size: int) -> dict[int, int]:
    """Fact index → message id when the corpus is imported in order into a fresh db."""
    return {k: (k + 1) * size // (len(FACTS) + 1) + 1 for k in range(len(FACTS))}


# --------------------------------------------------------------------------------------
# measurements
# --------------------------------------------------------------------------------------


def emit(**fields: Any) -> None:
    print(json.dumps({"bench": "sessions", **fields}, ensure_ascii=False), flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return (time.perf_counter() - start) * 1000.0, result


def raw_bytes(msg: dict[str, Any]) -> int:
    size = len((msg.get("content") or "").encode("utf-8")) + len((msg.get("name") or "").encode("utf-8"))
    for call in msg.get("tool_calls") or []:
        fn = call["function"]
        size += len(fn["name"].encode("utf-8")) + len(fn["arguments"].encode("utf-8"))
    return size


def build_store(path: Path, chunks: list[tuple[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Import the corpus through the importer's own write path (``import_sessions``:
    fingerprint check, ``create_session``, ``append_messages``, ``set_meta``, in store
    batches). The corpus is generated before, outside the timing."""
    sessions = [SourceSession(sid, msgs, {"source": "cli", "model": "bench-model",
                                          "started_at": msgs[0]["timestamp"]}, "bench", "bench")
                for sid, msgs in chunks]
    text_bytes = sum(raw_bytes(m) for s in sessions for m in s.messages)
    count = sum(len(s.messages) for s in sessions)
    store = SQLiteSessionStore(path)
    start = time.perf_counter()
    report = import_sessions(store, sessions, ImportReport())
    elapsed = time.perf_counter() - start
    store.close()
    assert report.messages_added == count and not report.problems, report.problems[:3]
    return {"messages": count, "seconds": elapsed, "text_bytes": text_bytes}


BASELINE_SCHEMA = """
CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT,
                       tool_calls TEXT, tool_name TEXT, timestamp REAL);
"""


def build_baseline(path: Path, chunks: list[tuple[str, list[dict[str, Any]]]], *, fts: bool) -> float:
    """Raw SQLite: plain inserts in 5,000-row transactions; with ``fts``, plus a minimal
    external-content FTS5 index over content filled per batch. Returns seconds."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(BASELINE_SCHEMA)
    if fts:
        conn.execute("CREATE VIRTUAL TABLE fts USING fts5(content, content='messages', content_rowid='id')")
    rows: list[tuple[Any, ...]] = []
    elapsed, next_id = 0.0, 1

    def flush() -> None:
        nonlocal elapsed, next_id
        start = time.perf_counter()
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        if fts:
            conn.execute("INSERT INTO fts(rowid, content) SELECT id, content FROM messages WHERE id >= ?",
                         (next_id,))
        conn.execute("COMMIT")
        elapsed += time.perf_counter() - start
        next_id += len(rows)
        rows.clear()

    for sid, msgs in chunks:
        for m in msgs:
            rows.append((next_id + len(rows), sid, m["role"], m.get("content"),
                         json.dumps(m["tool_calls"]) if m.get("tool_calls") else None,
                         m.get("name"), m["timestamp"]))
        if len(rows) >= BATCH:
            flush()
    if rows:
        flush()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return elapsed


def sizes_on_disk(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out = {name: int(total) for name, total in conn.execute(
        "SELECT name, sum(pgsize) FROM dbstat GROUP BY name")}
    conn.close()
    return out


def query_sets(corpus: Corpus, size: int, n: int, seed: int) -> dict[str, list[str]]:
    rng = random.Random(seed + size)
    sessions = [msgs for _, msgs in itertools.islice(corpus.messages(min(size, 20_000)), None)]
    latin = [m["content"] for s in sessions for m in s
             if m.get("content") and not any("\u4e00" <= c <= "\u9fff" for c in m["content"][:5])]
    cjk_msgs = [m["content"] for s in sessions for m in s
                if m.get("content") and "\u4e00" <= m["content"][0] <= "\u9fff"]

    def word_at_rank() -> str:
        rank = int(10 ** rng.uniform(1.3, 4.3))  # log-uniform over ranks 20..20,000
        return corpus.vocab[min(rank, len(corpus.vocab) - 1)]

    def adjacent() -> list[str]:
        while True:
            words = [w for w in rng.choice(latin).split() if w.isalpha()]
            if len(words) >= 2:
                i = rng.randrange(len(words) - 1)
                return words[i:i + 2]

    def cjk_sub(length: int) -> str:
        while True:
            text = rng.choice(cjk_msgs)
            run = text.split(" ")[0]
            if len(run) >= length:
                i = rng.randrange(len(run) - length + 1)
                return run[i:i + length]

    return {
        "single": [word_at_rank() for _ in range(n)],
        "two_term": [" ".join(rng.sample(adjacent() + [word_at_rank()], 2)) for _ in range(n)],
        "phrase": ['"' + " ".join(adjacent()) + '"' for _ in range(n)],
        "prefix": [word_at_rank()[:4] + "*" for _ in range(n)],
        "cjk": [cjk_sub(rng.choice((3, 4))) for _ in range(n)],
        "cjk_short": [cjk_sub(2) for _ in range(n)],
        # English and CJK questions take different paths (words vs. bigram stages).
        "question": [q for _, q in FACTS if not hermes.has_cjk(q)],
        "question_cjk": [q for _, q in FACTS if hermes.has_cjk(q)] + CJK_QUESTIONS,
    }


def baseline_search(conn: sqlite3.Connection, kind: str, query: str) -> int:
    if kind.startswith("cjk"):
        return len(conn.execute("SELECT id FROM messages WHERE content LIKE ? LIMIT 20",
                                (f"%{query}%",)).fetchall())
    expr = sanitize(query)
    if kind.startswith("question"):  # the plain way to ask FTS5 a question: OR the words
        expr = " OR ".join(f'"{w}"' for w in query.replace("?", " ").split())
    if not expr:
        return 0
    return len(conn.execute("SELECT rowid, snippet(fts, 0, '>>>', '<<<', '...', 24) FROM fts "
                            "WHERE fts MATCH ? ORDER BY rank LIMIT 20", (expr,)).fetchall())


def run_size(size: int, args: argparse.Namespace, workdir: Path) -> None:
    corpus = Corpus(seed=args.seed)
    store_path = workdir / f"state-{size}.db"
    plain_path = workdir / f"plain-{size}.db"
    fts_path = workdir / f"fts-{size}.db"

    built_file = workdir / f"built-{size}.json"
    if args.reuse and built_file.exists() and all(p.exists() for p in (store_path, plain_path, fts_path)):
        # Databases of an earlier run (--keep): only the search figures are measured again.
        built = json.loads(built_file.read_text())
        n = built["messages"]
        emit(size=n, metric="reused_databases", workdir=str(workdir))
    else:
        chunks = list(corpus.messages(size))
        built = build_store(store_path, chunks)
        plain_s = build_baseline(plain_path, chunks, fts=False)
        fts_s = build_baseline(fts_path, chunks, fts=True)
        del chunks
        n = built["messages"]
        built_file.write_text(json.dumps(built))
        emit(size=n, metric="bulk_import_msgs_per_s", value=round(n / built["seconds"]),
             baseline_plain_insert=round(n / plain_s), baseline_plain_fts5=round(n / fts_s),
             target=20_000, note="store: the importer path (fingerprints, sessions, messages) in 5,000-message batches")

    sizes = sizes_on_disk(store_path)
    total = sum(sizes.values())
    fts_bytes = sum(v for k, v in sizes.items() if k.startswith("messages_fts"))
    words = sum(v for k, v in sizes.items() if k.startswith("messages_fts_") and "trigram" not in k)
    trigram = sum(v for k, v in sizes.items() if k.startswith("messages_fts_trigram"))
    plain_total = sum(sizes_on_disk(plain_path).values())
    fts_sizes = sizes_on_disk(fts_path)
    emit(size=n, metric="bytes_per_message", value=round(total / n), baseline_plain=round(plain_total / n),
         baseline_plain_fts5=round(sum(fts_sizes.values()) / n), raw_text=round(built["text_bytes"] / n))
    emit(size=n, metric="index_overhead", value=round(fts_bytes / built["text_bytes"], 3),
         words_index=round(words / built["text_bytes"], 3), trigram_index=round(trigram / built["text_bytes"], 3),
         baseline_plain_fts5=round(sum(v for k, v in fts_sizes.items() if k.startswith("fts")) / built["text_bytes"], 3),
         target=3.0, unit="x raw indexed text")

    store = SQLiteSessionStore(store_path)
    plain = sqlite3.connect(plain_path, isolation_level=None)
    plain.execute("PRAGMA synchronous=NORMAL")
    rng = random.Random(args.seed)
    append, base_append = [], []
    sid = "bench_append"
    store.create_session(sid, source="cli")
    for _ in range(args.appends):
        text = corpus.words(rng, rng.randint(10, 80))
        append.append(timed(lambda text=text: store.append_message(sid, "user", text))[0])
        def plain_insert(text: str = text) -> None:
            plain.execute("BEGIN")
            plain.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                          (sid, "user", text, time.time()))
            plain.execute("COMMIT")
        base_append.append(timed(plain_insert)[0])
    emit(size=n, metric="append_ms", p50=round(pct(append, 0.5), 3), p95=round(pct(append, 0.95), 3),
         baseline_p50=round(pct(base_append, 0.5), 3), baseline_p95=round(pct(base_append, 0.95), 3),
         n=args.appends, target_p50=1.0)
    plain.close()

    base = sqlite3.connect(fts_path)
    for kind, queries in query_sets(corpus, size, args.queries, args.seed).items():
        times, base_times, hits, modes = [], [], [], {}
        for q in queries:
            ms, result = timed(lambda q=q: store.search_messages(q, limit=20))
            times.append(ms)
            hits.append(len(result))
            for h in result[:1]:
                modes[h["mode"]] = modes.get(h["mode"], 0) + 1
            base_times.append(timed(lambda q=q, kind=kind: baseline_search(base, kind, q))[0])
        emit(size=n, metric="search_ms", query_type=kind, p50=round(pct(times, 0.5), 2),
             p95=round(pct(times, 0.95), 2), baseline_p50=round(pct(base_times, 0.5), 2),
             baseline_p95=round(pct(base_times, 0.95), 2), mean_hits=round(statistics.mean(hits), 1),
             top_modes=modes, n=len(queries), target_p95=50.0)
    base.close()

    expected = fact_ids(size)
    strict_hits = fallback_hits = 0
    misses = []
    for k, (_, question) in enumerate(FACTS):
        strict = [h["id"] for h in store.search_messages(question, limit=10, fallback=False)]
        relaxed = [h["id"] for h in store.search_messages(question, limit=10)]
        strict_hits += expected[k] in strict
        fallback_hits += expected[k] in relaxed
        if expected[k] not in relaxed:
            misses.append(question)
    emit(size=n, metric="question_hit_rate_at_10", strict=round(strict_hits / len(FACTS), 3),
         with_fallback=round(fallback_hits / len(FACTS), 3), questions=len(FACTS), misses=misses)
    store.close()
    if not args.keep:
        for p in (store_path, plain_path, fts_path):
            for suffix in ("", "-wal", "-shm"):
                Path(str(p) + suffix).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated message counts")
    parser.add_argument("--queries", type=int, default=50, help="queries per query type")
    parser.add_argument("--appends", type=int, default=1000, help="single appends to time")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", help="where the databases go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse the databases a --keep run left in --workdir (search figures only)")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="hermes-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    emit(metric="machine", python=platform.python_version(), sqlite=sqlite3.sqlite_version,
         platform=platform.platform(), cpus=os.cpu_count(), hermes=hermes.__version__,
         load_avg=[round(x, 2) for x in os.getloadavg()])
    try:
        for size in (int(s) for s in args.sizes.split(",") if s.strip()):
            run_size(size, args, workdir)
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
