"""The query sanitizer and planner: exact outputs for the rules the contract names."""

from __future__ import annotations

import pytest

from hermes import cjk_bigrams
from hermes.plugins.sessions.query import (
    MAX_QUERY_CHARS,
    MAX_TERMS,
    OWN_COLUMNS,
    Term,
    fts5_term,
    has_cjk,
    like_pattern,
    loosen,
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
        assert fts5_term(term).count('"') % 2 == 0


def test_plan_latin_question_relaxes_to_informative_terms() -> None:
    stages = plan("when did I move the staging database to Postgres?")
    assert [(s.mode, s.combine) for s in stages] == [("strict", ""), ("relaxed", "any")]
    assert stages[0].match.startswith(OWN_COLUMNS + " : (")  # strict: the message's own text
    assert stages[1].match == '("move"* OR ("staging" OR "stage"*) OR "databas"* OR "postgr"*)'
    assert plan("when did I move", fallback=False)[0].mode == "strict"
    assert len(plan("when did I move the database", fallback=False)) == 1


def test_possessives_are_the_name() -> None:
    assert sanitize("Jon's dog") == '"Jon" AND "dog"'
    assert sanitize("James’ car") == '"James" AND "car"'
    assert [t.text for t in parse("what's Jon's").terms] == ["what", "Jon"]


def test_plan_single_term_has_nothing_to_relax() -> None:
    assert [s.mode for s in plan("postgres")] == ["strict", "relaxed"]  # postgres → postgr*
    assert [s.mode for s in plan("deploy")] == ["strict"]  # its own stem: nothing to loosen
    single = plan("the postgres")[1]
    assert single.match == f'{OWN_COLUMNS} : (("postgr"*))'  # one keyword: no context columns
    assert [s.mode for s in plan("what is it")] == ["strict"]  # only stop words


def test_plan_keeps_negations_in_relaxed_mode() -> None:
    stages = plan("deploy staging NOT prod")
    assert stages[1].match == '("deploy"* OR ("staging" OR "stage"*)) NOT "prod"'


@pytest.mark.parametrize("word, expected", [
    ("dances", "danc"), ("dancing", "danc"), ("dance", "danc"), ("opening", "open"),
    ("websockets", "websocket"), ("failed", "fail"), ("logs", "log"), ("keep", "keep"),
])
def test_stem_is_snowball(word: str, expected: str) -> None:
    assert stem(word) == expected


def test_loosen_matches_word_forms() -> None:
    assert loosen(Term("dances")) == '"danc"*'
    assert loosen(Term("happy")) == '("happy" OR "happi"*)'  # the stem is not a prefix of it
    assert loosen(Term("ran")) == '"ran"'


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
    assert stage.match == OWN_COLUMNS + ' : ("数据库")'
    assert stage.params == ["%Go%"] * 3 + ["%测试%"] * 3
    assert stage.where.count("LIKE") == 6 and "NOT (" in stage.where


def test_cjk_relaxed_uses_bigrams_then_words() -> None:
    stages = plan("我们什么时候把数据库迁移到Postgres")
    assert [(s.mode, s.index, s.combine) for s in stages] == [
        ("trigram", "trigram", ""), ("relaxed", "trigram", "grams"), ("relaxed", "words", "any")]
    assert "数据" in stages[1].grams and "迁移" in stages[1].grams
    assert not {"什么", "么时", "时候"} & set(stages[1].grams)  # question words carry no topic
    assert stages[2].match == f'{OWN_COLUMNS} : (("postgr"*))'


def test_cjk_bigrams_leave_out_question_words_and_grammar() -> None:
    assert cjk_bigrams("小王的猫叫什么名字？") == ["小王", "王的", "的猫", "猫叫", "名字"]
    assert cjk_bigrams("京都でどこに泊まる？") == ["京都", "都で", "に泊", "泊ま"]  # no kana-only pairs
    assert cjk_bigrams("どうすればいい") == ["すれ", "れば", "ばい", "いい"]  # unless nothing else is left
    assert cjk_bigrams("我是") == []  # two grammar characters


def test_a_short_cjk_keyword_is_not_relaxed() -> None:
    assert [s.mode for s in plan("数据库")] == ["trigram"]
    assert [s.mode for s in plan("数据库迁移的问题")][-1] == "relaxed"


def test_relaxed_stage_keeps_phrases_and_prefixes_as_typed() -> None:
    stage = plan('"staging database" deploy* moved 15 cafés')[1]
    assert stage.match == '("staging database" OR "deploy"* OR "move"* OR "15" OR "cafés")'


def test_like_pattern_escapes_wildcards() -> None:
    assert like_pattern("100%_\\") == "%100\\%\\_\\\\%"


def test_has_cjk() -> None:
    assert has_cjk("abc 数") and has_cjk("ひらがな") and has_cjk("한")
    assert not has_cjk("café") and not has_cjk("，。") and not has_cjk("") and not has_cjk(None)
