"""The one secret-redaction table of Hermes, applied to everything that leaves the machine.

Memory providers (``prefetch``, ``queue_prefetch``, ``sync_turn``, ``on_session_end``,
``on_memory_write`` …), summarisers, log files and ``hermes config show`` / ``doctor`` all
go through :func:`redact_secrets`. The table is data: each :class:`SecretRule` has an id,
a description, a regular expression and what to keep. The part of a match in a group
whose name starts with ``secret`` is replaced by ``[REDACTED]``; everything else in the
match (a vendor prefix such as ``ghp_``, a key name, a URL's user name) is kept so a
reader can still tell what was there. A rule with a ``check`` only redacts when that
check accepts the key name and value (assignments, natural language, entropy).

The vendor formats follow the published rule facts of gitleaks and detect-secrets
(prefixes, alphabets, lengths); the expressions are written here. Neither library is
used: gitleaks is a Go program, and detect-secrets reports findings per line (not spans
to replace), loads its plugins through a registry at import time and has no rules for
several formats below (Anthropic, Hugging Face, npm, PyPI, GitLab …).

What is *not* redacted, on purpose: bare git SHAs, UUIDs, file paths, base64 payloads
(``data:image/png;base64,…``) and other long random-looking text with no key-like name
or vendor prefix next to it — redacting all high-entropy text would mangle code, hashes
and images that the summariser and memory need.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "REDACTED",
    "SECRET_RULES",
    "RedactingFilter",
    "attach_log_file",
    "SecretMatch",
    "SecretRule",
    "find_secrets",
    "is_secret_key",
    "mask_secrets",
    "redact_secrets",
    "shannon_entropy",
]

#: What a secret is replaced by.
REDACTED = "[REDACTED]"


@dataclass(frozen=True)
class SecretRule:
    """One kind of secret. ``pattern`` is a regular expression; the text of its first
    participating group named ``secret…`` is replaced (the rest of the match is kept).
    ``hints`` are lower-case literals one of which every match contains (a cheap
    pre-test; empty means always run). ``check`` names a test in :data:`_CHECKS` that
    must accept ``(name, value)`` (``name`` is the match's ``name`` group or ``""``)."""

    id: str
    description: str
    pattern: str
    hints: tuple[str, ...] = ()
    check: str = ""
    flags: int = 0
    _compiled: list[re.Pattern[str]] = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern, compiled on first use: ``import hermes.redaction`` (done by
        every kernel, and by ``hermes --help``) stays cheap."""
        if not self._compiled:
            self._compiled.append(re.compile(self.pattern, self.flags))
        return self._compiled[0]


@dataclass(frozen=True)
class SecretMatch:
    """A secret found by :func:`find_secrets`: the rule id and the span of the secret."""

    rule: str
    start: int
    end: int


# Building blocks --------------------------------------------------------------------------

# A key name ends with one of these (after splitting on _ . - and camelCase): any value is
# a secret unless it is a placeholder.
_STRONG_NAMES = (
    r"pass(?:word|wd|phrase)?|pwd|secret|secret[_.-]?key|api[_.-]?key|apikey|access[_.-]?key"
    r"|private[_.-]?key|secret[_.-]?access[_.-]?key|client[_.-]?secret|auth[_.-]?token"
    r"|access[_.-]?token|refresh[_.-]?token|bearer[_.-]?token|id[_.-]?token|session[_.-]?token"
    r"|bot[_.-]?token|api[_.-]?token|app[_.-]?secret|webhook[_.-]?secret|signing[_.-]?key"
    r"|encryption[_.-]?key|master[_.-]?key|account[_.-]?key|credentials?|_?auth[_.-]?token"
    r"|connection[_.-]?string|dsn"
)
# Weaker names: the value must also look random (length, letters and digits, entropy).
_WEAK_NAMES = r"token|key|auth|sig(?:nature)?|salt|cookie|session|license[_.-]?key|hmac"

_STRONG_RE = re.compile(rf"(?:^|[_.\-])(?:{_STRONG_NAMES})$", re.IGNORECASE)
_WEAK_RE = re.compile(rf"(?:^|[_.\-])(?:{_WEAK_NAMES})$", re.IGNORECASE)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

# Values that are not secrets even next to a secret-looking name: placeholders, booleans,
# references to where the secret really is, and common words of prose ("the password is
# incorrect").
_NOT_SECRETS = frozenset("""
true false yes no on off null none nil undefined required optional empty missing unset
set not is was are be the a an of to in on for and or with from by as at it this that
stored saved hashed encrypted invalid incorrect wrong expired correct needed changed reset
rotated revoked same different below above here there still also now being protected
secret password token key hidden redacted masked placeholder example sample dummy test
bearer basic digest string str int bool env file value your my our their his her its
valid weak strong short long too very only used sent generated shown printed visible available
case-sensitive sensitive different unique random new old both shared needed managed rotated
""".split())

_FAKE = re.compile(r"^(?:your|fake|dummy|example|sample|placeholder|insert|put|enter)[-_ ]", re.IGNORECASE)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\[[^\]]*\])?$")
# Code, not a value: a call (section.get(…)), a template field ({name}, {{name}}, %(name)s).
_CODE = re.compile(r"^[A-Za-z_][\w.]*\(|\{[A-Za-z_][\w.]*\}|%\([A-Za-z_]\w*\)s")
_SECRET_WORDS = ("key", "token", "secret", "passw", "pwd", "credential", "auth")
_PLACEHOLDER = re.compile(
    r"^(?:\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\$?(?:env|file)\b.*|<[^>]*>|\[[^\]]*\]|%\(?\w+\)?s?"
    r"|\{\{.*\}\}|\*+|x{3,}|\.{3,}|…|-+)$",
    re.IGNORECASE,
)


def shannon_entropy(text: str) -> float:
    """Shannon entropy of ``text`` in bits per character (0 for empty text)."""
    if not text:
        return 0.0
    counts: dict[str, int] = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


#: A weakly named value is a secret from this entropy (bits per character) and length on.
ENTROPY_THRESHOLD = 3.0
ENTROPY_MIN_LENGTH = 16


def _looks_random(value: str) -> bool:
    return (len(value) >= ENTROPY_MIN_LENGTH and " " not in value
            and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
            and shannon_entropy(value) >= ENTROPY_THRESHOLD)


def _placeholder(value: str) -> bool:
    bare = value.strip().strip("\"'`").rstrip(".,;:!?)]}")
    lowered = bare.lower()
    return (not bare or lowered in _NOT_SECRETS or REDACTED in bare or bool(_PLACEHOLDER.match(bare))
            or value.rstrip().endswith(("...", "…"))  # an example cut short: "m0-..."
            or any(ref in lowered for ref in ("getenv", "environ", "process.env", "secretsmanager"))
            or bool(_FAKE.match(bare)) or bool(_CODE.search(bare))
            # code passing a variable on: api_key=api_key, token=self.token, password=args.password
            or (bool(_IDENTIFIER.match(bare)) and ("_" in bare or "." in bare)
                and any(w in lowered for w in _SECRET_WORDS)))


def _key_kind(name: str) -> str:
    """``"strong"``, ``"weak"`` or ``""`` for a key name such as ``DB_PASSWORD``,
    ``apiKey``, ``"client-secret"`` or ``x-api-key``."""
    bare = _CAMEL.sub("_", name.strip("\"'` $\\")).lower()
    if bare.endswith(("tokens", "keys", "_count", "_id", "_ids", "_name", "_names", "_file",
                      "_path", "_env", "_url", "_len", "_length", "_size", "_type", "_limit")):
        return ""
    if _STRONG_RE.search(bare):
        return "strong"
    if _WEAK_RE.search(bare):
        return "weak"
    return ""


def is_secret_key(name: str) -> bool:
    """Whether a setting or variable named ``name`` holds a secret (``api_key``,
    ``DB_PASSWORD``, ``clientSecret``, ``auth_token`` … but not ``max_tokens``)."""
    return bool(_key_kind(name))


def _check_assignment(name: str, value: str) -> bool:
    if _placeholder(value):
        return False
    kind = _key_kind(name)
    if kind == "strong":
        return len(value.strip()) >= 3
    return kind == "weak" and _looks_random(value)


def _check_prose(name: str, value: str) -> bool:
    if _placeholder(value) or len(value) < 4:
        return False
    # "the token is valid": a plain lower-case word is a secret only after password words
    return not value.isalpha() or not value.islower() or name.lower().startswith(("pass", "pwd"))


def _check_random(name: str, value: str) -> bool:
    return _looks_random(value)


_CHECKS: dict[str, Callable[[str, str], bool]] = {
    "value": lambda name, value: not _placeholder(value) and value not in ("…", "...", "pass", "pw"),
    "assignment": _check_assignment,
    "prose": _check_prose,
    "random": _check_random,
}

_I = re.IGNORECASE
# A quoted or bare value, as three alternative secret groups. Quotes may be escaped
# (JSON inside a JSON string: tool-call arguments, transcripts quoted in a prompt).
_VALUE = (r"(?:\\{0,3}\"(?P<secret_dq>(?:[^\"\\\n]|\\[^\"\\\n]){1,300})\\{0,3}\""
          r"|\\{0,3}'(?P<secret_sq>(?:[^'\\\n]|\\[^'\\\n]){1,300})\\{0,3}'"
          r"|(?P<secret_bare>[^\s\"'\\,;&<>(){}\[\]`][^\s\"',;&`]{0,299}))")
_Q = r"(?:\\{0,3}[\"'])?"  # an optional, possibly escaped, quote
_NL = r"(?:\r?\n|(?:\\r)?\\n)"  # a line break, or an escaped one (text inside a JSON string)
_NOT_END = "".join(f"(?<!END {kind}PRIVATE KEY)(?<!END {kind}PRIVATE KEY BLOCK)"
                   for kind in ("", "RSA ", "EC ", "DSA ", "OPENSSH ", "PGP ", "ENCRYPTED "))
_B = r"(?<![A-Za-z0-9_])"  # a token boundary that, unlike \b, also works before - and _

#: The table. Order matters only where rules overlap: specific formats come first, so
#: the generic rules see ``[REDACTED]`` (a placeholder) where a vendor rule already hit.
SECRET_RULES: tuple[SecretRule, ...] = (
    SecretRule("private-key", "PEM private key block (RSA, EC, DSA, OpenSSH, PGP, PKCS#8); the body "
               "lines are redacted even when the END line or part of the BEGIN line was cut off",
               # starts with the literal (fast to find); "-----END … PRIVATE KEY-----" is no start
               rf"PRIVATE KEY(?: BLOCK)?{_NOT_END}-{{1,5}}(?P<secret>(?:[ \t]*{_NL}[ \t]*"
               r"(?:[A-Za-z0-9+/=]{1,100}|[A-Za-z-]+:[^\n\\]*)?)+?)"
               rf"(?=\s*(?:{_NL})?-----END)"
               rf"|PRIVATE KEY(?: BLOCK)?{_NOT_END}-{{1,5}}(?P<secret_x>(?:[ \t]*{_NL}[ \t]*"
               rf"(?:[A-Za-z0-9+/=]{{1,200}}(?![A-Za-z0-9+/=])|[A-Za-z-]+:[^\n\\]*))+)",
               ("private key",)),
    SecretRule("private-key-tail", "the end of a PEM private key whose BEGIN line was cut off "
               "(a window cut from a long text): the base64 lines before its END line",
               rf"(?<![A-Za-z0-9+/=])(?P<secret>(?:[A-Za-z0-9+/=]{{8,}}{_NL})+)-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----",
               ("private key",)),
    SecretRule("anthropic", "Anthropic API key (sk-ant-…)",
               _B + r"sk-ant-(?P<secret>[A-Za-z0-9_\-]{16,})", ("sk-ant-",)),
    SecretRule("openai", "OpenAI API key (sk-…, sk-proj-…, sk-svcacct-…, sk-admin-…)",
               _B + r"sk-(?:proj-|svcacct-|admin-|None-)?(?P<secret>[A-Za-z0-9_\-]{16,})", ("sk-",)),
    SecretRule("github-token", "GitHub token (ghp_, gho_, ghu_, ghs_, ghr_)",
               _B + r"gh[pousr]_(?P<secret>[A-Za-z0-9]{20,})", ("gh",)),
    SecretRule("github-pat", "GitHub fine-grained personal access token (github_pat_…)",
               _B + r"github_pat_(?P<secret>[A-Za-z0-9_]{20,})", ("github_pat_",)),
    SecretRule("gitlab", "GitLab token (glpat-, gldt-, glrt-, glptt-, glcbt-, glsoat-, glft-)",
               _B + r"gl(?:pat|dt|rt|ptt|cbt|soat|ft|agent|imt|oas)-(?P<secret>[A-Za-z0-9_\-]{20,})",
               ("gl",)),
    SecretRule("slack-token", "Slack token (xoxb-, xoxp-, xoxa-, xoxo-, xoxs-, xoxr-, xoxe-, xapp-)",
               _B + r"(?:xox[abposre](?:\.[a-z0-9]+)?|xapp)-(?P<secret>[A-Za-z0-9\-]{10,})",
               ("xox", "xapp-")),
    SecretRule("slack-webhook", "Slack incoming webhook URL",
               r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9+/_\-]{20,})",
               ("hooks.slack.com",)),
    SecretRule("discord-webhook", "Discord webhook URL",
               r"discord(?:app)?\.com/api/webhooks/\d+/(?P<secret>[A-Za-z0-9_\-]{40,})",
               ("discord",)),
    SecretRule("stripe", "Stripe secret, restricted or webhook key (sk_live_, rk_live_, sk_test_, whsec_)",
               _B + r"(?:(?:sk|rk)_(?:live|test)|whsec)_(?P<secret>[A-Za-z0-9]{16,})",
               ("_live_", "_test_", "whsec_")),
    SecretRule("aws-access-key-id", "AWS access key id (AKIA…, ASIA…)",
               _B + r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])(?P<secret>[A-Z0-9]{16})(?![A-Za-z0-9])",
               ("akia", "asia", "abia", "acca", "a3t")),
    SecretRule("aws-secret-access-key", "AWS secret access key (40 chars near 'aws' and 'secret')",
               r"aws.{0,25}?secret.{0,25}?[=:\s\"'>]\s*[\"']?(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
               ("aws",), flags=_I),
    SecretRule("google-api-key", "Google API key (AIza…)",
               _B + r"AIza(?P<secret>[0-9A-Za-z_\-]{35})", ("aiza",)),
    SecretRule("google-oauth", "Google OAuth client secret (GOCSPX-) or access token (ya29.)",
               _B + r"(?:GOCSPX-|ya29\.)(?P<secret>[0-9A-Za-z_\-]{20,})", ("gocspx-", "ya29.")),
    SecretRule("huggingface", "Hugging Face token (hf_…, api_org_…)",
               _B + r"(?:hf_|api_org_)(?P<secret>[A-Za-z0-9]{30,})", ("hf_", "api_org_")),
    SecretRule("npm", "npm access token (npm_…)", _B + r"npm_(?P<secret>[A-Za-z0-9]{36})", ("npm_",)),
    SecretRule("pypi", "PyPI upload token (pypi-…)", _B + r"pypi-(?P<secret>[A-Za-z0-9_\-]{50,})",
               ("pypi-",)),
    SecretRule("sendgrid", "SendGrid API key (SG.….…)",
               _B + r"SG\.(?P<secret>[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64})", ("sg.",)),
    SecretRule("twilio", "Twilio API key (SK + 32 hex)", _B + r"SK(?P<secret>[0-9a-fA-F]{32})(?![A-Za-z0-9])",
               ("sk",)),
    SecretRule("mailgun", "Mailgun API key (key-…)", _B + r"key-(?P<secret>[0-9a-zA-Z]{32})(?![A-Za-z0-9])",
               ("key-",)),
    SecretRule("shopify", "Shopify token (shpat_, shpca_, shppa_, shpss_)",
               _B + r"shp(?:at|ca|pa|ss)_(?P<secret>[a-fA-F0-9]{32})", ("shp",)),
    SecretRule("digitalocean", "DigitalOcean token (dop_v1_, doo_v1_, dor_v1_)",
               _B + r"do[opr]_v1_(?P<secret>[a-f0-9]{64})", ("_v1_",)),
    SecretRule("telegram-bot", "Telegram bot token (bot id : 35 chars)",
               r"(?<![A-Za-z0-9_:])\d{5,16}:(?P<secret>A[A-Za-z0-9_\-]{34})(?![A-Za-z0-9_\-])", (":a",)),
    SecretRule("discord-bot", "Discord bot token (three dot-separated base64 parts)",
               _B + r"[MNO][A-Za-z0-9_\-]{23,27}\.(?P<secret>[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40})",
               (".",)),
    SecretRule("heroku", "Heroku API key (HRKU-…, or a UUID next to 'heroku')",
               r"(?:" + _B + r"HRKU-(?P<secret>[A-Za-z0-9_\-]{40,})|heroku.{0,30}?[=:\s\"']\s*[\"']?"
               r"(?P<secret_uuid>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}))",
               ("hrku-", "heroku"), flags=_I),
    SecretRule("square", "Square token (sq0atp-, sq0csp-, EAAA…)",
               _B + r"(?:sq0(?:atp|csp)-(?P<secret>[0-9A-Za-z_\-]{22,43})|EAAA(?P<secret_eaaa>[A-Za-z0-9_\-]{60}))",
               ("sq0", "eaaa")),
    SecretRule("databricks", "Databricks token (dapi + 32 hex)", _B + r"dapi(?P<secret>[a-f0-9]{32})(?:-\d)?",
               ("dapi",)),
    SecretRule("other-vendor", "Other prefixed vendor tokens (Groq gsk_, xAI xai-, Perplexity pplx-, "
               "Replicate r8_, Tavily tvly-, Linear lin_api_, Postman PMAK-, Vault hvs./hvb., Grafana "
               "glsa_/glc_, New Relic NRAK-, Sentry sntrys_/sntryu_, Notion ntn_/secret_, 1Password ops_, "
               "Doppler dp.pt., age AGE-SECRET-KEY-1, Atlassian ATATT, Figma figd_, Fly fo1_, Pulumi pul-)",
               _B + r"(?:gsk_|xai-|pplx-|r8_|tvly-|lin_api_|PMAK-|hv[sb]\.|glsa_|glc_|NRAK-|sntry[su]_|ntn_"
               r"|secret_(?=[A-Za-z0-9]{43})|ops_|dp\.pt\.|AGE-SECRET-KEY-1|ATATT|figd_|fo1_|pul-)"
               r"(?P<secret>[A-Za-z0-9_\-=]{20,})",
               ("gsk_", "xai-", "pplx-", "r8_", "tvly-", "lin_api_", "pmak-", "hvs.", "hvb.", "glsa_",
                "glc_", "nrak-", "sntry", "ntn_", "secret_", "ops_", "dp.pt.", "age-secret-key-1",
                "atatt", "figd_", "fo1_", "pul-")),
    SecretRule("jwt", "JSON Web Token (eyJ….eyJ….…)",
               _B + r"(?P<secret>eyJ[A-Za-z0-9_\-]{6,}\.eyJ[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]*)", ("eyj",)),
    SecretRule("azure-key", "Azure storage / Service Bus key (AccountKey=, SharedAccessKey=, sig=)",
               r"(?:AccountKey|SharedAccessKey|SharedAccessSignature|PrimaryKey|SecondaryKey)\s*=\s*"
               r"(?P<secret>[^;\s\"'<>`]{8,})|[?&]sig=(?P<secret_sig>[A-Za-z0-9%+/=]{16,})",
               ("accountkey", "sharedaccess", "primarykey", "secondarykey", "sig="), check="value", flags=_I),
    SecretRule("url-credentials", "user:password@ in a URL or connection string",
               r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@\"'<>]*:(?P<secret>[^\s@/\"'<>`]+)@", ("://",),
               check="value"),
    SecretRule("authorization-header", "Authorization header value (Bearer, Basic, Token, Digest)",
               r"authorization\s*[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token|digest|bot|apikey)\s+"
               r"(?P<secret>[A-Za-z0-9._~+/=\-]{6,})", ("authorization",), check="value", flags=_I),
    SecretRule("bearer-token", "Bearer token anywhere (Bearer <token>)",
               r"\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=\-]{16,})", ("bearer",), flags=_I),
    SecretRule("cli-credentials", "credentials on a command line (-u user:pass, --password X, --token X)",
               r"(?:(?<!\S)(?:-u|--user)\s+[\"']?[^\s:\"'`]+:(?P<secret>[^\s\"'@`]+)"
               r"|--(?:password|passwd|token|api-key|apikey|secret|auth-token|access-token)(?:=|\s+)"
               r"[\"']?(?P<secret_flag>[^\s\"'`]+))",
               ("-u", "--user", "--pass", "--token", "--api", "--secret", "--auth", "--access"),
               check="value"),
    SecretRule("assignment", "value of a key-like name in JSON, YAML, INI, .env, TOML or code "
               "(api_key, password, secret, token …; weak names such as 'key' need a random value)",
               # The value is matched inside a lookahead, so that when the check refuses
               # ("content": "…") the search goes on inside the value ("passwd: …").
               r"(?<![A-Za-z0-9_.\-])(?P<name>" + _Q + r"[A-Za-z_$][A-Za-z0-9_.\-]{0,60}" + _Q + ")"
               r"[ \t]*(?::=|=>|==?|:)[ \t]*(?=(?:[rbuf](?=[\"']))?" + _VALUE + ")",
               ("pass", "pwd", "secret", "key", "token", "auth", "sig", "salt", "cookie", "session",
                "credential", "dsn", "hmac", "connection"), check="assignment"),
    SecretRule("prose-password", "a password, passphrase, PIN or secret given in prose "
               "(\"my password is …\", \"the wifi password for X is …\")",
               r"\b(?P<name>pass(?:word|wd|phrase|code)|pwd|pin|secret|api\s+key|access\s+key|token)"
               r"(?:\s+(?:for|of|to|on)\s+[^\s,.;:]{1,40}(?:\s+[^\s,.;:]{1,40})?)?"
               r"\s+(?:is|was|are|=|:|-)\s+(?=(?:now\s+|still\s+|just\s+)?(?:\\{0,3}[\"'`“])?"
               r"(?P<secret>[^\s\"'`”\\(]{4,200}?)(?=\\{0,3}[\"'`”]|[.,;!?]?(?:\s|\\n|$)))",
               ("pass", "pwd", "pin", "secret", "key", "token"), check="prose", flags=_I),
)


def _secret_group(match: re.Match[str]) -> str | None:
    for name, value in match.groupdict().items():
        if name.startswith("secret") and value is not None:
            return name
    return None


def _rule_spans(rule: SecretRule, text: str) -> list[tuple[int, int]]:
    """The secret spans of ``rule`` in ``text``, sorted, overlapping ones merged."""
    check = _CHECKS[rule.check] if rule.check else None
    spans: list[tuple[int, int]] = []
    for match in rule.compiled.finditer(text):
        group = _secret_group(match)
        if group is None:
            continue
        value = match.group(group)
        if REDACTED in value:
            continue
        if check is not None and not check(match.groupdict().get("name") or "", value):
            continue
        start, end = match.span(group)
        if spans and start < spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def _applicable(text: str) -> list[SecretRule]:
    lowered = text.lower()
    return [r for r in SECRET_RULES if not r.hints or any(h in lowered for h in r.hints)]


def find_secrets(text: str) -> list[SecretMatch]:
    """Every secret in ``text`` (rule id and span), in the order of the text; where rules
    overlap, the first rule of :data:`SECRET_RULES` wins."""
    if not text:
        return []
    taken: list[SecretMatch] = []
    for rule in _applicable(text):
        for start, end in _rule_spans(rule, text):
            if not any(start < m.end and m.start < end for m in taken):
                taken.append(SecretMatch(rule.id, start, end))
    return sorted(taken, key=lambda m: m.start)


def redact_secrets(text: str) -> str:
    """``text`` with every secret the table knows replaced by ``[REDACTED]``: vendor
    tokens keep their prefix (``ghp_[REDACTED]``), assignments their key
    (``"api_key": "[REDACTED]"``), URLs their user (``postgres://me:[REDACTED]@db``).
    Idempotent; text without secrets comes back unchanged."""
    if not text or not isinstance(text, str):
        return text
    # Rules run one after another on the text so far, so a later rule sees [REDACTED]
    # where an earlier one hit and leaves it alone.
    for rule in _applicable(text):
        spans = _rule_spans(rule, text)
        if not spans:
            continue
        out, last = [], 0
        for start, end in spans:
            out.append(text[last:start])
            out.append(REDACTED)
            last = end
        out.append(text[last:])
        text = "".join(out)
    return text


def mask_secrets(value: Any, *, key: str = "") -> Any:
    """A copy of a config value (mappings and lists recursively) fit to print: the value
    of a secret-looking key (:func:`is_secret_key`) is masked unless it is a reference
    such as ``{$env: VAR}``, and every string goes through :func:`redact_secrets`."""
    if isinstance(value, Mapping):
        if set(value) & {"$env", "$file"}:
            return dict(value)  # a reference names where the secret is, not the secret
        return {k: mask_secrets(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v, key=key) for v in value]
    if isinstance(value, str):
        if key and is_secret_key(key) and value and not _placeholder(value):
            return REDACTED
        return redact_secrets(value)
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that redacts secrets from each record's message (arguments
    merged) and from its exception text, so a log file never holds a key."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave the record to the handler
            return True
        redacted = redact_secrets(message)
        if redacted != message or record.args:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_secrets(record.exc_text)
        return True


def attach_log_file(home: os.PathLike[str] | str, config: Any) -> Callable[[], None] | None:
    """Attach a rotating ``$HERMES_HOME/logs/hermes.log`` to the ``hermes`` logger, with
    secrets redacted (:class:`RedactingFilter`), and return the function that detaches
    and closes it (``None`` when ``logging.level`` is ``OFF``). The file and ``logs/``
    are created on the first record, 0600 and 0700.

    A handler on ``hermes`` would stop Python's last-resort handler from printing
    warnings to stderr (it only runs when no handler is found), so when nothing else
    handles ``hermes`` records, that handler is attached beside the file while any log
    file is. A ``logging.level`` below the logger's effective level lowers the logger's
    level until detached."""
    from logging.handlers import RotatingFileHandler

    level_name = str(config.get("logging.level") or "WARNING").upper()
    if level_name == "OFF":
        return None

    class PrivateRotatingFileHandler(RotatingFileHandler):
        def _open(self) -> Any:  # called for the first record and after each rollover
            directory = os.path.dirname(self.baseFilename)
            if not os.path.isdir(directory):
                os.makedirs(directory, exist_ok=True)
                os.chmod(directory, 0o700)
            fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.fchmod(fd, 0o600)
            return open(fd, self.mode, encoding=self.encoding, errors=self.errors)

    handler = PrivateRotatingFileHandler(
        os.path.join(os.fspath(home), "logs", "hermes.log"),
        maxBytes=int(config.get("logging.max_bytes") or 5_000_000),
        backupCount=int(config.get("logging.backup_count") or 0), encoding="utf-8", delay=True)
    handler.set_name("hermes-log-file")
    handler.setLevel(getattr(logging, level_name, logging.WARNING))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(process)d]: %(message)s"))
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("hermes")
    stderr = logging.lastResort if not logger.hasHandlers() else None
    lowered = handler.level if handler.level < logger.getEffectiveLevel() else None
    previous_level = logger.level
    logger.addHandler(handler)
    if stderr is not None:
        logger.addHandler(stderr)
    if lowered is not None:
        logger.setLevel(lowered)

    def detach() -> None:
        logger.removeHandler(handler)
        handler.close()
        if lowered is not None and logger.level == lowered:
            logger.setLevel(previous_level)
        if not any(h.get_name() == "hermes-log-file" for h in logger.handlers) and logging.lastResort:
            logger.removeHandler(logging.lastResort)

    return detach
