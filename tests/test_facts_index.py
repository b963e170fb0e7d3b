"""The facts index answers exactly what the plain per-fact check answers (`prefilter.mentions_fact`)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.records import RepoFacts
from migrate import prefilter
from migrate.facts_index import FactsIndex

NAMES = ["train", "train_one_epoch", "rain", "fit", "fit_amp", "utils", "engine", "é_step", "a.b", "", "save",
         "initialize", "apex", "Trainer.step", "_impl", "x"]
MODULES = ["pkg.utils", "pkg.sub.engine", "utils", "", "train", "pkg.train_1", "pkg.train_12", "a.", "pkg"]
WORDS = NAMES + ["raise", "assert", "import", "from", ".", " ", "\n", "train_1234", "pkg.sub", "#",
                 "\u00e9", "=", "(", ")", "x" * 70, "utils" * 14]

names = st.lists(st.sampled_from(NAMES), max_size=3)
modules = st.sampled_from(MODULES)


@st.composite
def facts_of(draw) -> RepoFacts:
    f = RepoFacts()
    for module in draw(st.lists(modules, max_size=4)):
        prefix = draw(st.sampled_from(["", "path/x.py::"]))
        f.scaler_functions[prefix + module] = draw(names)
    for module in draw(st.lists(modules, max_size=3)):
        f.scaler_required[module] = {n: ("scaler", 1) for n in draw(names)}
    f.unmigrated_amp = draw(st.lists(modules, max_size=2))
    for name in draw(st.lists(st.sampled_from(NAMES), max_size=2)):
        f.spawn_entries["pkg.mod." + name] = True
    for module in draw(st.lists(modules, max_size=2)):
        f.attr_candidates[module] = ["Mixin"]
        f.scaler_bases[module + ".Mixin"] = "Base"
    return f


@settings(max_examples=400, deadline=None)
@given(facts_of(), st.lists(st.sampled_from(WORDS), max_size=12), modules,
       st.lists(st.sampled_from(MODULES + ["path/x.py::pkg.utils"]), max_size=2))
def test_index_agrees_with_the_plain_check(facts, words, module_name, skip_keys):
    data = "".join(words).encode("utf-8")
    index = FactsIndex(facts)
    expected = prefilter.mentions_fact(data, facts, module_name, tuple(skip_keys))
    assert index.mentions(data, module_name, tuple(skip_keys)) is expected
    assert index.mentions(data, module_name, tuple(skip_keys)) is expected  # again, from the run cache


def test_a_name_inside_a_longer_identifier_counts_as_the_plain_check_counts_it():
    facts = RepoFacts()
    facts.scaler_functions["pkg.train_1"] = ["train"]
    index = FactsIndex(facts)
    data = b"from pkg import train_12\ntrain_12.train_loop()\n"
    assert prefilter.mentions_fact(data, facts, "other") is True
    assert index.mentions(data, "other") is True
    assert index.mentions(b"import os\n", "other") is prefilter.mentions_fact(b"import os\n", facts, "other") is False
    assert index.mentions(b"train()\n", "pkg.train_1.sub") is True  # a module under the publisher


def test_no_facts_mention_nothing():
    assert FactsIndex(RepoFacts()).mentions(b"anything", "m") is False
    assert FactsIndex(None).mentions(b"anything", "m") is False
