"""Finding a session from what a person types, and where a conversation continues.

Used by ``hermes chat`` (``--resume``, ``/resume``) and the ``hermes sessions`` commands,
so that an id, a unique id prefix or a title resolves the same way everywhere, and an
ambiguous prefix is refused with its candidates instead of "not found".
"""

from __future__ import annotations

from typing import Any

from .errors import HermesError

#: End reasons after which a conversation lives on in its newest child session:
#: a compaction split, and ``/undo`` (the parent keeps the dropped exchange as a branch).
CONTINUED_REASONS = ("compression", "undo")
_MAX_HOPS = 10_000


def resolve_session_ref(store: Any, ref: str) -> str:
    """The session id for ``ref``: an id, a title (``NAME`` means its newest ``NAME #N``)
    or a unique id prefix. Raises :class:`HermesError` saying the prefix is ambiguous and
    naming the candidates, or that nothing matched."""
    found = store.resolve_session(ref)
    if found:
        return str(found)
    ref = (ref or "").strip()
    matches = sorted(sid for sid in store.iter_session_ids() if ref and sid.startswith(ref))
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:8]) + (f" and {len(matches) - 8} more" if len(matches) > 8 else "")
        raise HermesError(f"session id prefix {ref!r} is ambiguous: it matches {shown}. "
                          "Type more of the id.")
    raise HermesError(f"no session matches {ref!r} (an id, a unique id prefix or a title). "
                      "See `hermes sessions list --all`.")


def live_tip(store: Any, session_id: str) -> str:
    """Where the conversation of ``session_id`` continues now: follows compaction splits
    and ``/undo`` branches to the newest child started after its parent ended."""
    current, seen = session_id, {session_id}
    for _ in range(_MAX_HOPS):
        row = store.get_session(current) or {}
        ended = row.get("ended_at")
        if row.get("end_reason") not in CONTINUED_REASONS or ended is None:
            return current
        later = [c for c in store.children(current) if (c.get("started_at") or 0) >= ended]
        if not later:
            return current
        nxt = max(later, key=lambda c: (c.get("started_at") or 0, c["id"]))["id"]
        if nxt in seen:
            return current
        seen.add(nxt)
        current = nxt
    return current


__all__ = ["CONTINUED_REASONS", "live_tip", "resolve_session_ref"]
