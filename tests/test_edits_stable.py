"""Repeated rewrites in one process give the same output (regression: `apply_plan` once marked blocks as
emptied by bare `id()`, and a freed temporary's id reused by another block dropped a whole `if`)."""
from golden import collect, run_case

from migrate.engine import Selection, rewrite_source


def test_same_output_when_interleaved_with_other_rewrites():
    cases = collect()
    target = next(c for c in cases if c.id == "launch/imagenet_spawn")
    outputs = set()
    for i in range(20):
        for c in cases[i % len(cases): i % len(cases) + 5]:
            run_case(c)
        for prefilter_enabled in (True, False):
            res = rewrite_source(target.before, path="x.py", module_name="imagenet_spawn", select=Selection(),
                                 prefilter_enabled=prefilter_enabled)
            outputs.add(res.new_text)
    assert outputs == {target.after}
