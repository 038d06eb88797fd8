"""The catalog's valid example calls are real calls, and every page's code runs pasted into a fresh file;
the generic engine works on any contract (a toy here)."""

from __future__ import annotations

import pytest
import torch

from kvcanary import codes
from kvcanary.registry import use_backend
from kvcanary.valid_calls import EXAMPLES
from kvcanary_contracts import ContractError
from kvcanary_contracts.examples import ExampleSet, Variant
from tests.contracts.toy import Plan, ToyLaunch, valid
from tools.counterexamples import NoCounterexample, counterexample, render_call
from tools.docsgen.catalog import catalog, corrected_tail, example_imports, namespace


def test_every_contract_has_valid_examples() -> None:
    assert sorted(EXAMPLES) == sorted(c.contract.name for c in codes.contracts())


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_valid_examples_run_through_the_real_callee(name: str) -> None:
    """Each variant, rendered as the pages render it, runs (the launchers on the torch reference)."""
    examples = EXAMPLES[name]
    for variant in examples.variants:
        src = render_call(examples.callee, variant.build(), examples.extra)
        with use_backend("torch_ref"):
            exec(src, namespace())


@pytest.mark.parametrize("code", sorted(codes.by_code()))
def test_page_code_runs_pasted_into_a_fresh_file(code: str) -> None:
    """What a page shows (its imports, then the call) runs in an empty namespace: the failing call raises
    exactly its code, each corrected call runs through the real launcher (the torch reference)."""
    page = catalog().pages[code]
    assert "from kvcanary" in page.imports and page.imports.endswith("\n\n"), page.imports  # the launcher's module
    with pytest.raises(ContractError) as info:
        exec(page.imports + page.failing_src, {})
    assert info.value.code == code
    for _, src in page.fixed_srcs:
        with use_backend("torch_ref"):
            exec(page.imports + src, {})


def test_corrected_calls_show_only_what_follows_the_failing_calls_setup() -> None:
    """A corrected block is the failing call's lines down to the statement it changes, then the block: the page
    shows the long setup once (KVC-W083 used to repeat three near-identical 35-line blocks)."""
    page = catalog().pages["KVC-W083"]
    md = page.markdown()
    assert md.count("context = VerifyOrWriteContext(") == 1, md
    assert "expected_input_tokens=None,  # <- breaks the rule" in page.failing_src  # the common misuse: both None
    assert "expected_input_positions=None,  # <- breaks the rule" in page.failing_src
    for _, src in page.fixed_srcs:
        tail = corrected_tail(page.failing_src, src)
        assert tail is not None and tail.startswith("launch_canary_write_kernel(") and tail in md
        kept = page.failing_src[: page.failing_src.index("launch_canary_write_kernel(")]
        assert kept + tail == src  # what the page shows runs, after the failing call's setup
    assert corrected_tail("a = 1\nf(\n    x=1,\n)\n", "a = 2\nf(\n    x=1,\n)\n") is None  # first statement: all shown


def test_example_imports_name_only_what_the_code_uses() -> None:
    src = "plan = WritePlan.allocate(write_req_capacity=4, device='cpu')\nx = unchecked(SimpleNamespace, a=plan)\n"
    assert example_imports(src) == ("from types import SimpleNamespace\nfrom kvcanary import WritePlan\n"
                                    "from kvcanary_contracts.examples import unchecked  # builds an object without "
                                    "its checks\n\n")
    assert example_imports("x = 1\n") == ""


TOY = ExampleSet("toy_launch", (
    Variant("base", valid),
    Variant("checked", lambda: valid(check=True, expected=torch.zeros(3, dtype=torch.int64))),
    Variant("range", lambda: valid(lo=torch.zeros(2, dtype=torch.int64), hi=torch.zeros(2, dtype=torch.int64))),
    Variant("window", lambda: valid(window=2, lut=torch.zeros(4, dtype=torch.int64))),
    Variant("scratch", lambda: valid(plan=Plan(torch.zeros(5, dtype=torch.int64), torch.zeros(1, dtype=torch.int32),
                                               torch.zeros(6, dtype=torch.int64)))),
))


def test_engine_derives_a_counterexample_for_every_toy_check() -> None:
    kinds = set()
    for check in ToyLaunch.checks():
        ce = counterexample(ToyLaunch, TOY, check)
        assert ce.error.check is check and not ce.also_breaks, check.slug
        ToyLaunch.checker()(**ce.valid)
        kinds.add(check.kind)
    assert kinds >= {"type", "contiguous", "dtype", "rank", "size", "min_size", "device", "max_len", "relation",
                     "all_or_none", "required_if", "forbidden_unless", "required_when"}


def test_engine_says_why_it_found_nothing() -> None:
    check = next(c for c in ToyLaunch.checks() if c.kind == "required_if")
    with pytest.raises(NoCounterexample, match="no applicable mutation"):
        counterexample(ToyLaunch, ExampleSet("toy_launch", (Variant("base", valid),)), check)


def test_rendering_reproduces_layout() -> None:
    t = torch.zeros(8, 64, dtype=torch.uint8)[:, ::2]
    src = render_call("f", {"t": t, "u": torch.zeros(20, dtype=torch.int64)[3:].view(1, 17), "n": None})
    ns: dict[str, object] = {"torch": torch}
    exec(src.replace("f(", "out = dict("), ns)
    out = ns["out"]
    assert isinstance(out, dict)
    assert out["t"].stride() == t.stride() and out["t"].shape == t.shape
    assert out["u"].storage_offset() == 3 and out["n"] is None
