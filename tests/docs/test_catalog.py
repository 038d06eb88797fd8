"""The error catalog cannot drift: every code has a page, every page's example raises exactly its code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import kvcanary
from kvcanary import codes
from kvcanary.cli import main
from kvcanary.errors import CODEBOOK_PATH
from kvcanary.guard import codes as guard_codes
from kvcanary_contracts import ContractError
from tools.docsgen import catalog as cat
from tools.docsgen import generate, guard_pages

ROOT = Path(__file__).resolve().parents[2]

CODES = sorted(codes.by_code())
GUARD_CODES = sorted(f.code for f in guard_codes.failure_codes())
ALL_CODES = sorted(CODES + GUARD_CODES)
SECTIONS = ["The message", "What it means", "When it happens", "How to fix it", "Example", "Related errors",
            "Where it is declared"]


@pytest.fixture(scope="module")
def catalog() -> cat.Catalog:
    return cat.catalog()


def test_every_check_has_a_stable_code_and_every_code_a_check() -> None:
    checks = codes.checks()
    assert all(re.fullmatch(r"KVC-[A-Z]\d{3}", c.code) for c in checks), "run `kvcanary docs --update-codes`"
    assert len({c.code for c in checks}) == len(checks)
    book = json.loads(CODEBOOK_PATH.read_text())["codes"]
    assert sorted(book.values()) == ALL_CODES
    assert sorted(codes.all_codes()) == ALL_CODES


def test_every_guard_failure_code_is_numbered_by_the_code_book() -> None:
    """The isolate policy's failure codes are catalog codes of their own letter, each with an alias or none."""
    assert all(re.fullmatch(rf"KVC-{guard_codes.LETTER}\d{{3}}", c) for c in GUARD_CODES), \
        "run `kvcanary docs --update-codes`"
    book = json.loads(CODEBOOK_PATH.read_text())["codes"]
    for f in guard_codes.failure_codes():
        assert book[f"{guard_codes.CONTRACT}/{f.slug}"] == f.code == guard_codes.FAILURE_CODES[f.slug]
    aliases = {f.slug: f.alias for f in guard_codes.failure_codes()}
    assert aliases == {"verify": "KVCANARY-CORRUPT-READ", "write": "KVCANARY-CORRUPT-WRITE",
                       "sweep": "KVCANARY-CORRUPT-CACHED", "quarantined": None}


def test_every_code_has_a_page_and_every_page_a_code(catalog: cat.Catalog, tmp_path: Path) -> None:
    assert sorted(catalog.pages) == CODES
    assert sorted(guard_pages.pages()) == GUARD_CODES
    generate(tmp_path)
    (tmp_path / "errors" / "KVC-Z999.md").write_text("# stale\n")
    report = generate(tmp_path)
    assert report.removed == ["errors/KVC-Z999.md"]
    on_disk = sorted(p.stem for p in (tmp_path / "errors").glob("*.md") if p.stem != "index")
    assert on_disk == ALL_CODES
    index = (tmp_path / "errors" / "index.md").read_text()
    assert all(f"[{code}]({code}.md)" in index for code in ALL_CODES)
    assert generate(tmp_path, dry_run=True).stale == []


def test_every_page_has_every_section_and_an_explanation(catalog: cat.Catalog) -> None:
    for code, page in catalog.pages.items():
        assert [s.title for s in page.sections] == SECTIONS, code
        assert all(s.blocks for s in page.sections), code
        assert page.check.why.strip() and page.check.fix.strip() and page.check.summary.strip(), code
        md = page.markdown()
        assert md.startswith(f"# {code}: "), code
        assert page.failing_src in md, code
        # a corrected call is shown from the statement it changes (the lines above are the failing call's)
        assert all((cat.corrected_tail(page.failing_src, src) or src) in md for _, src in page.fixed_srcs), code


@pytest.mark.parametrize("code", CODES)
def test_failing_example_raises_exactly_its_code_and_corrected_calls_pass(code: str,
                                                                          catalog: cat.Catalog) -> None:
    page = catalog.pages[code]
    with pytest.raises(ContractError) as info:
        exec(page.failing_src, cat.namespace())  # the page's code, as shown, through the real launcher
    err = info.value
    assert err.code == code and err.check is page.check
    assert str(err) == page.error_text  # the page shows the exact text, first line and pointer
    lines = str(err).splitlines()
    assert lines[0] == page.message and lines[0].startswith("kv-canary: ")
    assert lines[1].startswith(f"[{code}] ") and f"`kvcanary explain {code}`" in lines[1]
    for _, src in page.fixed_srcs:
        exec(src, cat.namespace(validate_only=True))


def test_examples_break_one_rule_except_where_none_can(catalog: cat.Catalog) -> None:
    """A counterexample breaks only its own check, except where no value can (listed, and said on the page)."""
    also = {(p.check.contract, p.check.slug) for p in catalog.pages.values() if p.example.also_breaks}
    assert also == {
        ("RealKvSource", "RealKvSource.tensor:min_rank"),  # any 1-D tensor also has a 1-element row stride
        ("launch_plan_offsets_kernel", "write_offsets_len_positive"),  # implied by ..._is_capacity_plus_one
    }
    preempted = {(p.check.contract, p.check.slug) for p in catalog.pages.values() if p.example.preempted}
    # a source's own constructor runs these checks first; the launch re-checks what it reads
    per_source = [f"real_kv_sources[].{attr}:type" for attr in ("tensor", "page_size", "num_bytes_per_token",
                                                                  "read_bytes")]
    per_source += [f"real_kv_sources[].{attr}:{kind}" for attr in ("page_size", "num_bytes_per_token", "read_bytes")
                   for kind in ("not_bool", "int64")]
    per_source.append("real_kv_sources[]:has_rows")
    assert preempted == {(launcher, slug) for launcher in ("launch_canary_verify_kernel", "launch_canary_write_kernel")
                         for slug in per_source}


def test_explain_prints_the_page(capsys: pytest.CaptureFixture[str], catalog: cat.Catalog) -> None:
    code = CODES[len(CODES) // 2]
    assert main(["explain", code.lower()]) == 0
    out = capsys.readouterr().out
    assert out == catalog.pages[code].text()
    for title in SECTIONS:
        assert f"\n{title}\n{'-' * len(title)}\n" in out
    assert catalog.pages[code].message in out
    assert main(["explain", code, "--markdown"]) == 0
    assert capsys.readouterr().out == catalog.pages[code].markdown()
    assert main(["explain", "KVC-Q999"]) == 2
    assert "unknown error code" in capsys.readouterr().err


@pytest.mark.parametrize("code", GUARD_CODES)
def test_guard_pages_say_what_happened_what_is_seen_and_what_to_do(code: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    page = guard_pages.pages()[code]
    f = page.failure
    assert [s.title for s in page.sections] == list(guard_pages.SECTIONS)
    md = page.markdown()
    assert md.startswith(f"# {code}: ") and f.happened in md and f.operator_sees in md and f.action in md
    # the page's example is the text the engines build, ending with the code (and alias) and the command
    assert page.error_text in md and page.error_text.endswith(f"{f.tag}") and f"explain {code}`]" in f.tag
    assert (f.alias is None) or f" {f.alias};" in page.error_text
    assert main(["explain", code.lower()]) == 0
    assert capsys.readouterr().out == page.text()


def test_the_package_ships_the_pages_as_generated(catalog: cat.Catalog) -> None:
    """``kvcanary explain`` and ``contracts`` read kvcanary/catalog.json.gz: it must match the contracts."""
    from kvcanary import catalog as shipped
    from tools.docsgen import package_data

    assert shipped.decode(shipped.DATA_PATH.read_bytes()) == shipped.decode(package_data()), (
        "kvcanary/catalog.json.gz is stale: run `kvcanary docs`")
    assert shipped.codes() == ALL_CODES
    g = shipped.page(GUARD_CODES[0])
    assert g is not None and g.markdown == guard_pages.pages()[GUARD_CODES[0]].markdown()
    page = shipped.page(CODES[0])
    assert page is not None and page.text == catalog.pages[CODES[0]].text()


def test_pages_say_where_the_rule_is_declared(catalog: cat.Catalog) -> None:
    """The file is named inside the package (the same text installed or in a checkout) and exists there."""
    package_parent = Path(kvcanary.__file__).resolve().parent.parent
    for code, page in catalog.pages.items():
        where = cat.declared(page.check.origin)
        assert where.file.startswith("kvcanary/") and where.file.endswith(".py"), (code, where.file)
        assert where.line > 0 and (package_parent / where.file).is_file(), (code, page.check.origin)
    assert cat.module_file("kvcanary.ops") == "kvcanary/ops/__init__.py"


def test_docs_command_writes_checks_and_updates_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = str(tmp_path / "docs")
    assert main(["docs", "--check", "--out", out]) == 1  # nothing written yet: everything is stale
    assert main(["docs", "--out", out]) == 0
    assert main(["docs", "--check", "--out", out]) == 0
    (tmp_path / "docs" / "support-matrix.md").write_text("old\n")
    assert main(["docs", "--check", "--out", out]) == 1
    assert "stale: support-matrix.md" in capsys.readouterr().out
    called: list[bool] = []

    def update() -> list[str]:
        called.append(True)
        return []

    monkeypatch.setattr(codes, "update_codebook", update)
    assert main(["docs", "--update-codes", "--out", out]) == 0
    assert called == [True]


def test_docs_command_finds_the_docs_folder_or_says_there_is_none(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    monkeypatch.chdir(bare)
    assert main(["docs"]) == 2
    out = capsys.readouterr().err
    assert "no docs folder" in out and "--out DIR" in out
    assert list(bare.iterdir()) == [], "nothing is written when there is no docs folder"
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "mkdocs.yml").write_text("site_name: x\ndocs_dir: 'pages'  # where the pages are\n")
    monkeypatch.chdir(project / "sub")
    assert main(["docs"]) == 0
    assert (project / "pages" / "errors" / "index.md").is_file()
    assert f"under {project / 'pages'}/" in capsys.readouterr().out


def test_benchmarks_page_reads_the_results_folder_it_is_given(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    row = {"benchmark": "verify", "case": "bs=8", "figure": 1.0, "unit": "us", "machine": "m", "date": "d"}
    (results / "a.json").write_text(json.dumps([row]))
    generate(tmp_path / "docs", results_dir=results)
    assert "## verify" in (tmp_path / "docs" / "benchmarks.md").read_text()
    generate(tmp_path / "docs")  # default: benchmarks/results beside the docs folder, absent here
    assert "No results yet" in (tmp_path / "docs" / "benchmarks.md").read_text()


def test_generated_pages_on_disk_are_ignored_or_fresh() -> None:
    """Generated pages are rebuilt by every mkdocs build; any committed copy must match the code."""
    root = ROOT
    ignored = {line.strip() for line in (root / ".gitignore").read_text().splitlines()}
    for rel in generate(root / "docs", dry_run=True).stale:
        top = "/docs/" + (rel.split("/")[0] + "/" if "/" in rel else rel)
        assert top in ignored, f"docs/{rel} is not git-ignored and is stale: run `kvcanary docs`"
