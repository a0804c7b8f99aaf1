"""The shared threat scanner: prompt injection, exfiltration and invisible Unicode.

Anything that ends up in the system prompt from a file a model or a stranger could have
written — memory entries, context files (``AGENTS.md``, ``SOUL.md`` …), skills — is
scanned here first. The public entry point is :func:`scan_for_threats`::

    from hermes import scan_for_threats

    threats = scan_for_threats(text, scope="context")
    if threats:
        ids = ", ".join(t.id for t in threats)       # e.g. "prompt_injection, exfil_curl"
        text = f"[BLOCKED: AGENTS.md contained potential prompt injection ({ids}).]"

How a text is scanned:

1. At most ``max_chars`` (default :data:`MAX_SCAN_CHARS`, 65,536) characters are
   examined, so a huge input can never make the scan slow. A longer text is reported
   as the finding ``oversized_input`` — the unscanned tail could hide anything — so
   callers that want to accept long text must cut it *before* scanning.
2. Invisible and bidirectional-control characters are looked for in the **raw** text;
   each distinct one is a finding ``invisible_unicode_U+XXXX``.
3. The text is then NFKC-normalised (full-width ``ｉｇｎｏｒｅ`` becomes ``ignore``), common
   Cyrillic/Greek look-alike letters are folded to Latin, and format characters are
   removed (so ``ig\\u00adnore`` cannot split a keyword); then every pattern of the
   scope is searched, case-insensitively. Keyword gaps are bounded (at most a few words
   between keywords), so no pattern can backtrack catastrophically.

Scopes are cumulative — ``"all"`` ⊂ ``"context"`` ⊂ ``"strict"``:

* ``all``: unambiguous injection and exfiltration (safe for any text, tool results too);
* ``context``: adds role hijacking, system-prompt leaks, C2 and anti-forensics
  vocabulary (what context files are checked against);
* ``strict``: adds secrets-adjacent rules that are too strict for project files but
  right for memory, which a user can always fix (ssh keys, ``~/.hermes/.env``, sending
  data to URLs, editing agent config files, hard-coded secrets).

Each finding is a :class:`Threat` with a stable ``id`` (the ids in :data:`THREAT_PATTERNS`
plus ``invisible_unicode_U+XXXX`` and ``oversized_input``). The scanner only reports;
what to do (refuse a write, show a placeholder) is the caller's choice.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = [
    "INVISIBLE_CHARS",
    "MAX_SCAN_CHARS",
    "SCOPES",
    "THREAT_PATTERNS",
    "Threat",
    "ThreatPattern",
    "normalize_for_scan",
    "scan_for_threats",
]

#: The most characters one scan examines.
MAX_SCAN_CHARS = 65_536

#: Scope names, narrowest first; each includes the patterns of the ones before it.
SCOPES: tuple[str, ...] = ("all", "context", "strict")

#: Zero-width characters, invisible operators and bidi embedding/override/isolate
#: controls: they hide or reorder text so that what a human reviews differs from what
#: the model reads.
INVISIBLE_CHARS: frozenset[str] = frozenset(
    "\u200b\u200c\u200d"  # zero-width space, non-joiner, joiner
    "\u2060"  # word joiner
    "\u2062\u2063\u2064"  # invisible times, separator, plus
    "\ufeff"  # zero-width no-break space (BOM)
    "\u202a\u202b\u202c\u202d\u202e"  # LRE, RLE, PDF, LRO, RLO
    "\u2066\u2067\u2068\u2069"  # LRI, RLI, FSI, PDI
)

# Unicode "tag" characters (U+E0000–U+E007F) mirror ASCII invisibly ("ASCII smuggling");
# they are reported like the invisible characters above.
_INVISIBLE_RE = re.compile("[" + "".join(sorted(INVISIBLE_CHARS)) + "\U000e0000-\U000e007f]")

# Look-alike letters NFKC leaves alone (Cyrillic and Greek); folding them lets "іgnore"
# with a Cyrillic і match. Only an adversarial text turns into an English injection
# phrase after this folding, so real Cyrillic or Greek prose is not at risk.
_CONFUSABLES = str.maketrans({
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i",
    "ј": "j", "ѕ": "s", "ԁ": "d", "ӏ": "l", "һ": "h", "ԛ": "q", "ԝ": "w", "ո": "n",
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
    "С": "C", "Т": "T", "У": "Y", "Х": "X", "І": "I", "Ј": "J", "Ѕ": "S",
    "α": "a", "ε": "e", "ι": "i", "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "ν": "v",
    "κ": "k", "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K",
    "Μ": "M", "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
})

# A bounded gap of up to N words between keywords: `(?:\w+\W+){0,N}?`.
_W3 = r"(?:[\w'’-]+\s+){0,3}?"
_W4 = r"(?:[\w'’-]+\s+){0,4}?"
_W8 = r"(?:[\w'’-]+\s+){0,8}?"
_SECRET_VAR = r"\$\{?\w*(?:KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)(?:\}|\b)"
_AGENT_FILES = r"(?:AGENTS\.md|CLAUDE\.md|GEMINI\.md|\.cursorrules|\.clinerules|\.windsurfrules)"
_HERMES_FILES = r"(?:\.hermes/config\.ya?ml|SOUL\.md)"
_EDIT_VERBS = r"(?:modify|edit|change|overwrite|rewrite|update|append\s+to|write\s+to|add\s+to|replace)"


@dataclass(frozen=True)
class ThreatPattern:
    """One rule of the scanner: a stable ``id``, the narrowest ``scope`` it belongs to,
    a one-line ``description`` and the compiled ``regex`` (searched on normalised text)."""

    id: str
    scope: str
    description: str
    regex: re.Pattern[str]
    #: When set, ``regex`` only delimits candidate spans (matched without overlap, so
    #: the scan stays linear) and this is what must occur inside one.
    inner: re.Pattern[str] | None = None

    def search(self, text: str) -> str | None:
        """The matched text in ``text`` (already normalised), or ``None``."""
        if self.inner is None:
            match = self.regex.search(text)
            return match.group(0) if match else None
        for span in self.regex.finditer(text):
            if self.inner.search(span.group(0)):
                return span.group(0)
        return None


@dataclass(frozen=True)
class Threat:
    """One finding of :func:`scan_for_threats`.

    ``id`` is stable and machine-readable (``prompt_injection``,
    ``invisible_unicode_U+200B``, ``oversized_input`` …); ``description`` says what it
    means in words; ``excerpt`` is the matched text (normalised, at most 80 characters)
    so a user can find it.
    """

    id: str
    description: str
    excerpt: str = ""

    def __str__(self) -> str:
        return self.id


def _p(id: str, scope: str, description: str, pattern: str, flags: int = re.IGNORECASE,
       inner: str | None = None) -> ThreatPattern:
    return ThreatPattern(id, scope, description, re.compile(pattern, flags),
                         re.compile(inner, flags) if inner else None)


#: Every pattern, in reporting order.
THREAT_PATTERNS: tuple[ThreatPattern, ...] = (
    # -- all: unambiguous injection and exfiltration ----------------------------------
    _p("prompt_injection", "all", "asks the model to ignore earlier instructions",
       rf"\bignore\s+{_W8}(?:previous|all|above|prior|earlier|preceding|former)\s+{_W8}"
       r"(?:instructions|directions|directives|prompts?)\b"),
    _p("sys_prompt_override", "all", "claims to override the system prompt",
       r"\bsystem\s+prompt\s+override\b|\boverride\s+(?:the\s+|your\s+)?system\s+prompt\b"),
    _p("disregard_rules", "all", "asks the model to disregard its rules",
       rf"\bdisregard\s+{_W3}(?:your|all|any|the|previous|prior)\s+{_W3}"
       r"(?:instructions|rules|guidelines|directives|policies)\b"),
    _p("bypass_restrictions", "all", "asks the model to act without restrictions",
       r"\bact\s+as\s+(?:if|though)\s+you\s+(?:have\s+no|don'?t\s+have|do\s+not\s+have)\s+"
       rf"{_W3}(?:restrictions|limits|limitations|rules|guidelines|filters)\b"),
    _p("html_comment_injection", "all", "hides instructions in an HTML comment",
       r"<!--(?:(?!-->).){0,2000}", re.IGNORECASE | re.DOTALL,
       inner=r"\b(?:ignore|override|system|secret|hidden)\b"),
    _p("hidden_div", "all", "hides text from human readers with CSS",
       r"<[a-z][^<>]{0,1000}", inner=r"\bstyle\s*=\s*[\"'][^\"'>]{0,500}?"
       r"(?:display\s*:\s*none|visibility\s*:\s*hidden)"),
    _p("translate_execute", "all", "asks for text to be decoded or translated and then run",
       rf"\b(?:translate|decode|deobfuscate)\s+{_W8}(?:and|then)\s+(?:then\s+)?"
       r"(?:execute|run|eval(?:uate)?)\b"),
    _p("deception_hide", "all", "asks the model to keep something from the user",
       rf"\b(?:do\s+not|don'?t|never)\s+{_W3}(?:tell|inform|notify|alert|show)\s+the\s+user\b"),
    _p("exfil_curl", "all", "sends a secret variable with curl",
       rf"\bcurl\b[^\n]{{0,500}}?{_SECRET_VAR}"),
    _p("exfil_wget", "all", "sends a secret variable with wget",
       rf"\bwget\b[^\n]{{0,500}}?{_SECRET_VAR}"),
    _p("read_secrets", "all", "reads a credentials file",
       r"\bcat\s+[^\n]{0,200}?(?:\.env\b|credentials|\.netrc|\.pgpass|\.npmrc|\.pypirc)"),
    # -- context: role hijacking, leaks, C2 and anti-forensics ------------------------
    _p("role_hijack", "context", "tells the model it is now someone else",
       r"\byou\s+are\s+now\s+(?:a|an|the|my|no\s+longer)\b"),
    _p("role_pretend", "context", "asks the model to pretend to be someone else",
       r"\bpretend\s+(?:that\s+)?(?:you\s+are|you'?re|to\s+be)\s+(?:a|an|the|my)\b"
       r"|\bfrom\s+now\s+on,?\s+you\s+(?:are|will\s+act\s+as)\b"),
    _p("leak_system_prompt", "context", "asks the model to reveal its system prompt",
       rf"\b(?:reveal|print|output|show|repeat|leak|dump|disclose)\s+{_W3}(?:your|the)\s+{_W3}"
       r"(?:system\s+prompt|initial\s+instructions|hidden\s+instructions|system\s+message)\b"),
    _p("remove_filters", "context", "asks the model to drop its safety filters",
       rf"\b(?:remove|disable|turn\s+off|bypass|deactivate)\s+{_W3}"
       r"(?:(?:safety|content|ethical|moral)\s+(?:filters?|guardrails?|guidelines|restrictions|"
       r"polic(?:y|ies))|guardrails)\b"),
    _p("fake_update", "context", "poses as an update from the vendor or developers",
       r"\b(?:new|updated|important|urgent|official)\s+(?:system\s+)?"
       r"(?:update|instructions?|directives?|policy)\s+from\s+(?:the\s+)?"
       r"(?:anthropic|openai|developers?|system\s+administrators?|admins?|your\s+(?:creators?|developers?))\b"),
    _p("identity_override", "context", "renames the model or replaces its identity",
       r"\b(?:name|call)\s+yourself\b|\byour\s+(?:new\s+)?name\s+is\s+now\b"
       r"|\byou\s+are\s+no\s+longer\s+(?:an?\s+)?(?:assistant|ai|claude|hermes)\b"),
    _p("c2_node_registration", "context", "registers the agent with a controller",
       r"\bregister\s+(?:this\s+|the\s+|your\s+)?(?:agent|node|host|machine|instance|bot|implant)\s+"
       r"(?:with|to|at)\s+(?:the\s+)?(?:c2|command|controller|control\s+server|panel)\b"),
    _p("c2_heartbeat", "context", "sends periodic beacons to a remote host",
       rf"\b(?:send|post|emit)\s+(?:a\s+|periodic\s+)?(?:heartbeats?|beacons?)\s+{_W3}(?:to|every)\b"
       r"|\bbeacon\s+(?:back\s+)?(?:home|to)\b"),
    _p("c2_task_pull", "context", "pulls tasks or commands from a remote server",
       r"\b(?:poll|fetch|pull|download|check)\s+(?:\w+\s+){0,2}?(?:for\s+)?(?:new\s+)?"
       r"(?:tasks|commands|orders)\s+from\s+(?:\w+\s+){0,2}?(?:https?://|server|c2|controller|endpoint)"),
    _p("c2_network_connect", "context", "opens a connection back to a controller",
       r"\b(?:connect|call|report)\s+back\s+to\b|/dev/tcp/[^\s/]+/\d+"
       r"|\b(?:nc|ncat|netcat)\s+(?:-\w+\s+)*-e\s"),
    _p("forced_action", "context", "orders the model to contact a remote endpoint",
       rf"\byou\s+must\s+{_W4}(?:register|connect|report|beacon|check\s+in)\s+{_W3}(?:to|with)\s+"
       r"(?:\S+\s+){0,3}?(?:c2|controller|https?://|\d{1,3}(?:\.\d{1,3}){3})"),
    _p("anti_forensic_oneliner", "context", "erases shell history or logs",
       r"\bhistory\s+-c\b|\bunset\s+HISTFILE\b|\bHISTFILE=/dev/null\b"
       r"|\b(?:rm|shred)\s+(?:-\w+\s+)*\S*(?:\.bash_history|\.zsh_history|/var/log/)"),
    _p("anti_forensic_disk", "context", "wipes disks or the root filesystem",
       r"\bshred\s+-\w*[uz]\w*\s+/dev/|\bwipefs\s+-a\b|\bdd\s+if=/dev/(?:zero|urandom)\s+of=/dev/"
       r"|\brm\s+-rf\s+--no-preserve-root\b|\brm\s+-rf\s+/(?:\*|\s|$)|\bmkfs(?:\.\w+)?\s+/dev/"),
    _p("env_var_unset_agent", "context", "unsets the agent's own environment",
       r"\bunset\s+(?:HERMES|AGENT|ANTHROPIC|OPENAI|CLAUDE)_\w+"),
    _p("known_c2_framework", "context", "names a command-and-control framework",
       r"\bcobalt\s*strike\b|\bmetasploit\b|\bmeterpreter\b|\bbrainworm\b"
       r"|\b(?:sliver|havoc|mythic)\s+(?:c2|implant|beacon|teamserver|demon|agent\s+payload)\b"),
    _p("c2_explicit", "context", "mentions a C2 server or channel",
       r"\bc2\s+(?:server|channel|infrastructure|beacon|implant|callback|endpoint|panel)\b"),
    _p("c2_explicit_long", "context", "mentions command-and-control infrastructure",
       r"\bcommand[\s-]+and[\s-]+control\b"),
    # -- strict: memory and skills (the user can always fix a blocked entry) ----------
    _p("send_to_url", "strict", "sends private data to a URL or address",
       rf"\b(?:send|post|upload|exfiltrate|forward|transmit|leak|copy)\s+{_W8}"
       r"(?:conversations?|chats?|history|memor(?:y|ies)|secrets?|credentials?|keys?|tokens?|"
       rf"passwords?|files?|data|context|messages?|prompts?)\s+{_W4}to\s+(?:https?://|\S+@\S+\.\w)"),
    _p("context_exfil", "strict", "smuggles the conversation out through a URL or image",
       rf"\b(?:include|append|embed|encode|put)\s+{_W4}(?:conversation|chat\s+history|system\s+prompt|"
       rf"context|previous\s+messages|user'?s?\s+messages?)\s+{_W4}(?:in|into|as)\s+{_W3}"
       r"(?:urls?|query\s+(?:string|parameters?)|requests?|links?|image|markdown)\b"
       r"|!\[[^\]\n]{0,200}\]\(https?://[^)\s]{0,500}?(?:\{|\$\{|%7B)"),
    _p("ssh_backdoor", "strict", "touches SSH authorized keys",
       r"authorized_keys"),
    _p("ssh_access", "strict", "reaches into the SSH directory",
       r"(?:\$HOME|\$\{HOME\}|~)/\.ssh\b"),
    _p("hermes_env", "strict", "reaches Hermes' secrets file",
       r"(?:\$HOME|\$\{HOME\}|~)/\.hermes/\.env\b"),
    _p("agent_config_mod", "strict", "edits another agent's instruction files",
       rf"\b{_EDIT_VERBS}\s+{_W4}\S*{_AGENT_FILES}|>>?\s*\S*{_AGENT_FILES}"),
    _p("hermes_config_mod", "strict", "edits Hermes' own config or persona",
       rf"\b{_EDIT_VERBS}\s+{_W4}\S*{_HERMES_FILES}|>>?\s*\S*{_HERMES_FILES}"),
    _p("hardcoded_secret", "strict", "contains what looks like a real secret",
       r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}|\bghp_[A-Za-z0-9]{30,}|\bgithub_pat_\w{30,}"
       r"|\bAKIA[0-9A-Z]{16}\b|\bxox[abprs]-[A-Za-z0-9-]{10,}|\bAIza[0-9A-Za-z_-]{35}"
       r"|-----BEGIN (?:RSA |EC |DSA |OPENSSH )?PRIVATE KEY-----", 0),
)

_SCOPE_RANK = {name: i for i, name in enumerate(SCOPES)}
_BY_SCOPE: dict[str, tuple[ThreatPattern, ...]] = {
    scope: tuple(p for p in THREAT_PATTERNS if _SCOPE_RANK[p.scope] <= rank)
    for scope, rank in _SCOPE_RANK.items()
}


def normalize_for_scan(text: str) -> str:
    """The text the patterns see: NFKC-normalised, look-alike letters folded to Latin
    and format characters (``Cf``: soft hyphens, zero-width marks …) removed."""
    if text.isascii():  # nothing to fold (the common case, and the fast one)
        return text
    folded = unicodedata.normalize("NFKC", text).translate(_CONFUSABLES)
    return "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")


def scan_for_threats(text: str, *, scope: str = "strict", max_chars: int = MAX_SCAN_CHARS) -> list[Threat]:
    """Every threat found in ``text``, each id once, invisible characters first.

    ``scope`` is ``"all"``, ``"context"`` or ``"strict"`` (the default and broadest,
    used for memory). At most ``max_chars`` characters are examined; a longer text adds
    the finding ``oversized_input``. An empty list means the text looks clean.
    """
    if scope not in _BY_SCOPE:
        raise ValueError(f"unknown threat scope {scope!r}; choose one of {', '.join(SCOPES)}")
    if not text:
        return []
    found: list[Threat] = []
    head = text[:max_chars]
    seen: set[str] = set()
    for ch in _INVISIBLE_RE.findall(head) if not head.isascii() else ():
        if ch not in seen:
            seen.add(ch)
            code = f"U+{ord(ch):04X}"
            name = unicodedata.name(ch, "invisible character").lower()
            found.append(Threat(f"invisible_unicode_{code}", f"contains invisible character {code} ({name})"))
    normalized = normalize_for_scan(head)
    for pattern in _BY_SCOPE[scope]:
        matched = pattern.search(normalized)
        if matched is not None:
            excerpt = " ".join(matched.split())
            found.append(Threat(pattern.id, pattern.description, excerpt[:80]))
    if len(text) > max_chars:
        found.append(Threat("oversized_input", f"longer than the {max_chars:,}-character scan window"))
    return found
