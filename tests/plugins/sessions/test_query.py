"""The query sanitizer and planner: exact outputs for the rules the contract names."""

from __future__ import annotations

import pytest

from hermes.plugins.sessions.query import (
    MAX_QUERY_CHARS,
    MAX_TERMS,
    has_cjk,
    like_pattern,
    parse,
    plan,
    sanitize,
    stem,
)


@pytest.mark.parametrize("query, expected", [
    ("deploy", '"deploy"'),
    ("deploy staging", '"deploy" AND "staging"'),
    ("chat-send", '"chat-send"'),
    ("my-app.config.ts", '"my-app.config.ts"'),
    ("P2.2", '"P2.2"'),
    ("snake_case_name", '"snake_case_name"'),
    ("deploy*", '"deploy"*'),
    ("***", ""),
    ("*deploy", '"deploy"'),
    ("dep**", '"dep"*'),
    ("do*", '"do"'),  # prefixes need three characters
    ('"exact phrase" other', '"exact phrase" AND "other"'),
    ('"unterminated', '"unterminated"'),
    ('say "hi" and "bye', '"say" AND "hi" AND "bye"'),  # noise words go when others remain
    ("C++", '"C"'),
    ("(problem", '"problem"'),
    ("{test}", '"test"'),
    ("hello AND", '"hello"'),
    ("OR hello", '"hello"'),
    ("a AND OR b", '("a") OR ("b")'),
    ("a OR b c", '("a") OR ("b" AND "c")'),
    ("a NOT b", '"a" NOT "b"'),
    ("NOT a", '"a"'),
    ("a NOT", '"a"'),
    ("TODO: fix", '"TODO" AND "fix"'),
    ("col:value", '"col:value"'),
    ("foo@bar.com", '"foo@bar.com"'),
    ('say "it""s"', '"say" AND "it" AND "s"'),
    ("and or not", '"not"'),
    ("the a", '"the" AND "a"'),  # only noise: kept
    ('"to the" end', '"to the" AND "end"'),  # phrases keep every word
    ("", ""),
    ("   ", ""),
    ("— … !!", ""),
])
def test_sanitize(query: str, expected: str) -> None:
    assert sanitize(query) == expected


def test_phrases_of_noise_words_are_listed_newest_first() -> None:
    assert plan('"the config"')[0].ranked is False
    assert plan('"config file"')[0].ranked is True
    assert plan("the config")[0].ranked is True  # a loose noise word is simply dropped


def test_input_and_terms_are_bounded() -> None:
    long = " ".join(f"w{i}" for i in range(1000))
    assert len(parse(long).terms) == MAX_TERMS
    parsed = parse("x" * (MAX_QUERY_CHARS + 500) + " tail")
    assert len(parsed.terms[0].text) == MAX_QUERY_CHARS and "tail" not in sanitize("x" * 3000 + " tail")


def test_quotes_inside_terms_are_escaped() -> None:
    assert parse('"a ""b"" c"').terms  # never produces an unbalanced FTS5 string
    for term in parse('x"y "z').terms:
        assert term.fts5().count('"') % 2 == 0


def test_plan_latin_question_relaxes_to_informative_terms() -> None:
    stages = plan("when did I move the staging database to Postgres?")
    assert [(s.mode, s.combine) for s in stages] == [
        ("strict", ""), ("relaxed", "pairs"), ("relaxed", "any"), ("relaxed", "all_pairs")]
    move, staging = '("move" OR "mov")', '("staging" OR "stag")'
    assert stages[2].match == f'({move} OR {staging} OR "databas"* OR "postgr"*)'
    assert stages[1].match.count(" AND ") == 6  # every pair of the four terms
    assert stages[1].match.startswith(f"(({move} AND {staging}) OR ")
    assert plan("when did I move", fallback=False)[0].mode == "strict"
    assert len(plan("when did I move the database", fallback=False)) == 1


def test_plan_single_term_has_nothing_to_relax() -> None:
    assert [s.mode for s in plan("postgres")] == ["strict"]
    assert [s.match for s in plan("the postgres")] == ['"postgres"', '("postgr"*)']
    assert [s.mode for s in plan("what is it")] == ["strict"]  # only stop words


def test_plan_keeps_negations_in_relaxed_mode() -> None:
    stages = plan("deploy staging NOT prod")
    assert stages[1].match == '(("deploy"* AND ("staging" OR "stag"))) NOT "prod"'
    assert stages[2].match == '("deploy"* OR ("staging" OR "stag")) NOT "prod"'


@pytest.mark.parametrize("query, mode", [
    ("记忆断裂", "trigram"),       # 4 CJK chars
    ("记忆", "like"),              # 2: below trigram length
    ("数据库 Redis", "trigram"),
    ("数据库 Go", "trigram"),      # the short Latin term is a LIKE filter beside MATCH
    ("广西 OR 桂林 OR 漓江", "like"),  # short terms under OR: all LIKE
    ("数据库 OR 缓存层", "trigram"),
    ("カタカナ", "trigram"),
    ("한국어", "trigram"),
])
def test_cjk_routing_per_token(query: str, mode: str) -> None:
    stage = plan(query, fallback=False)[0]
    assert stage.mode == mode and stage.index == "trigram"


def test_cjk_mixed_match_and_like() -> None:
    stage = plan("数据库 Go NOT 测试", fallback=False)[0]
    assert stage.match == '"数据库"'
    assert stage.params == ["%Go%"] * 3 + ["%测试%"] * 3
    assert stage.where.count("LIKE") == 6 and "NOT (" in stage.where


def test_cjk_relaxed_uses_trigrams_then_words() -> None:
    stages = plan("我们什么时候把数据库迁移到Postgres")
    assert [(s.mode, s.index) for s in stages] == [
        ("trigram", "trigram"), ("relaxed", "trigram"), ("relaxed", "words")]
    assert '"数据库"' in stages[1].match and '"Postgres"' in stages[1].match
    assert stages[2].match == '("postgr"*)'


@pytest.mark.parametrize("word, expected", [
    ("websockets", "websocket"), ("disconnecting", "disconnect"), ("isolate", "isolat"),
    ("isolation", "isol"), ("tenants", "tenant"), ("failed", "fail"), ("logs", "log"),
    ("Postgres", "postgr"), ("keep", "keep"), ("is", "is"), ("uses", "use"),
])
def test_stem(word: str, expected: str) -> None:
    assert stem(word) == expected


def test_relaxed_stage_keeps_phrases_and_prefixes_as_typed() -> None:
    stage = plan('"staging database" deploy* moved 15 cafés')[2]
    assert stage.match == '("staging database" OR "deploy"* OR ("moved" OR "mov") OR "15" OR "cafés")'


def test_like_pattern_escapes_wildcards() -> None:
    assert like_pattern("100%_\\") == "%100\\%\\_\\\\%"


def test_has_cjk() -> None:
    assert has_cjk("abc 数") and has_cjk("ひらがな") and has_cjk("한")
    assert not has_cjk("café") and not has_cjk("，。") and not has_cjk("") and not has_cjk(None)
