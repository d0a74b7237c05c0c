"""The validation report (backend/validate/report.py, view.py, fingerprint.py): its JSON round
trip, the strict reader against malformed and hostile files (each refused with its message id,
nothing written), storage under <runs>/validation/ that follows no link, the comparison of two
hand-made reports, the machine fingerprint on a simulated sysfs and ROCm tree, and the data
fingerprint computed by LLaMA-Factory's own preprocessing in the real helper process.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from backend.i18n import CATALOGUE, localized
from backend.validate import report as rep
from backend.validate.fingerprint import (
    ABSENT,
    DATA_FINGERPRINT_FILE,
    combine_fingerprints,
    machine_fingerprint,
    path_data_fingerprint,
    read_data_fingerprint,
    record_data_fingerprint,
)
from backend.validate.report import (
    MAX_CURVE_POINTS,
    MAX_REPORT_BYTES,
    Note,
    ReportError,
    RungResult,
    ValidationReport,
    compare_reports,
    import_report,
    list_reports,
    load_report,
    report_from_json,
    save_report,
    to_json,
)
from backend.validate.view import comparison_markdown, report_markdown
from tests.test_zh_no_english import english_runs

ROOT = Path(__file__).resolve().parent.parent
DEMO_MODEL = ROOT / "demo" / "model"
DEMO_DATA = ROOT / "demo" / "data"


def make_report(report_id: str = "20261202-010000-abc123", **changes) -> ValidationReport:
    one = RungResult(
        "one_gpu",
        "pass",
        ("20261202-010001-r1",),
        {"final_loss": 2.31, "tokens_per_s": 1200.0, "steps_per_s": 4.0, "vram_peak_mib_per_gpu": "0:4000"},
        (),
        tuple((step, 5.0 - step * 0.1) for step in range(1, 21)),
    )
    two = RungResult(
        "n_gpus",
        "fail",
        ("20261202-010002-r2",),
        {"max_loss_gap": 0.4, "tokens_per_s": 2000.0, "scaling_efficiency": 0.83, "vram_peak_mib_per_gpu": "0:4100,1:4050"},
        (Note("validate.report.not_found", {"id": "x"}),),
        tuple((step, 5.0 - step * 0.1) for step in range(1, 21)),
    )
    report = ValidationReport(
        report_id,
        1764637200.0,
        {"preset": "cpu-demo", "model": "/models/tiny", "dataset": "demo", "gpus": 2, "rungs": ["one_gpu", "n_gpus"], "tolerance": 0.02},
        (one, two),
        {"rocm": "6.3.1", "torch": "2.5.1+rocm6.3", "gpu.0.gfx": "gfx942", "env.HSA_OVERRIDE_GFX_VERSION": "absent"},
        "sha256:" + "ab" * 32,
    )
    return replace(report, **changes)


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# --- round trip and storage --------------------------------------------------------------------


def test_a_report_reads_back_equal_from_its_json_and_from_its_file(tmp_path):
    report = make_report()
    assert report_from_json(to_json(report)) == report
    path = save_report(tmp_path, report)
    assert path == tmp_path / "validation" / f"{report.id}.json"
    assert load_report(tmp_path, report.id) == report
    newer = make_report("20261203-010000-def456", created_at=report.created_at + 86400)
    save_report(tmp_path, newer)
    assert [r.id for r in list_reports(tmp_path)] == [newer.id, report.id]
    assert files_under(tmp_path / "validation") == sorted([f"{report.id}.json", f"{newer.id}.json"])  # no temporary left


def test_a_diverged_loss_is_written_as_json_a_browser_reads():
    rung = RungResult("one_gpu", "fail", (), {"final_loss": math.nan, "tokens_per_s": math.inf}, (), ((1, 2.0), (2, math.nan), (3, 1.0)))
    text = to_json(make_report(rungs=(rung,)))

    def refuse(name):
        raise AssertionError(f"{name} in the JSON")

    json.loads(text, parse_constant=refuse)
    back = report_from_json(text).rungs[0]
    assert back.figures == {"final_loss": "nan", "tokens_per_s": "inf"}
    assert back.curve == ((1, 2.0), (3, 1.0))


# --- malformed and hostile files ---------------------------------------------------------------


def _with(change) -> bytes:
    data = rep.report_to_dict(make_report())
    change(data)
    return json.dumps(data).encode()


def _deep_request(data):
    value: object = 1
    for _ in range(50):
        value = [value]
    data["request"]["rungs"] = value


HOSTILE = {
    "huge": (b" " * (MAX_REPORT_BYTES + 1), "validate.report.too_large"),
    "deep nesting": (b"[" * 200_000 + b"]" * 200_000, "validate.report.too_deep"),
    "nesting inside a field": (_with(_deep_request), "validate.report.bad_field"),
    "not JSON": (b"{'id': 1}", "validate.report.not_json"),
    "not UTF-8": (b'{"id": "\xff"}', "validate.report.not_utf8"),
    "NaN": (_with(lambda d: None).replace(b'"created_at": 1764637200.0', b'"created_at": NaN'), "validate.report.not_finite"),
    "a 5000-digit number": (_with(lambda d: None).replace(b'"created_at": 1764637200.0', b'"created_at": 1' + b"0" * 5000), "validate.report.not_json"),
    "a list, not an object": (b"[]", "validate.report.bad_field"),
    "created_at is text": (_with(lambda d: d.update(created_at="yesterday")), "validate.report.bad_field"),
    "rungs is text": (_with(lambda d: d.update(rungs="all")), "validate.report.bad_field"),
    "a curve step that is not whole": (_with(lambda d: d["rungs"][0].update(curve=[[1.5, 2.0]])), "validate.report.bad_field"),
    "a figure that is a list": (_with(lambda d: d["rungs"][0]["figures"].update(final_loss=[1])), "validate.report.bad_field"),
    "a machine value that is a number": (_with(lambda d: d["machine"].update(rocm=6.3)), "validate.report.bad_field"),
    "a status of its own": (_with(lambda d: d["rungs"][0].update(status="win")), "validate.report.bad_choice"),
    "an unknown key": (_with(lambda d: d.update(script="rm -rf /")), "validate.report.unknown_key"),
    "an unknown key in a rung": (_with(lambda d: d["rungs"][0].update(extra=1)), "validate.report.unknown_key"),
    "a missing key": (_with(lambda d: d.pop("rungs")), "validate.report.missing_key"),
    "a newer format": (_with(lambda d: d.update(format=2)), "validate.report.format"),
    "an id with ../": (_with(lambda d: d.update(id="../../outside")), "validate.report.bad_id"),
    "a hidden id": (_with(lambda d: d.update(id=".hidden")), "validate.report.bad_id"),
    "too many curve points": (_with(lambda d: d["rungs"][0].update(curve=[[i, 1.0] for i in range(MAX_CURVE_POINTS + 1)])), "validate.report.too_many"),
    "a huge text": (_with(lambda d: d["machine"].update(rocm="x" * 5000)), "validate.report.too_long"),
    "a note id that is markup": (_with(lambda d: d["rungs"][1]["causes"][0].update(message_id="<img src=x>")), "validate.report.bad_field"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_malformed_or_hostile_report_is_refused_with_its_message_and_nothing_is_written(tmp_path, case):
    data, message_id = HOSTILE[case]
    with pytest.raises(ReportError) as caught:
        import_report(tmp_path, data)
    assert caught.value.message_id == message_id
    assert files_under(tmp_path) == []
    for locale in ("en", "zh-CN"):  # a message in each language, its values filled in
        text = localized(caught.value.message, locale)
        assert text and "{" not in text, text
    assert not english_runs(localized(caught.value.message, "zh-CN"))


def test_every_refusal_id_is_in_both_catalogues():
    source = Path(rep.__file__).read_text(encoding="utf-8")
    import re

    ids = set(re.findall(r'"(validate\.report\.[a-z_.]+)"', source))
    assert len(ids) > 15
    for locale in ("en", "zh-CN"):
        assert ids <= set(CATALOGUE[locale]), ids - set(CATALOGUE[locale])


def test_a_link_in_the_validation_folder_is_not_followed(tmp_path):
    runs = tmp_path / "runs"
    outside = tmp_path / "outside.json"
    outside.write_text(to_json(make_report()), encoding="utf-8")
    (runs / "validation").mkdir(parents=True)
    report_id = make_report().id
    (runs / "validation" / f"{report_id}.json").symlink_to(outside)
    with pytest.raises(ReportError) as caught:
        load_report(runs, report_id)
    assert caught.value.message_id == "validate.report.unsafe"
    assert list_reports(runs) == []
    # Saving over the planted link replaces the link; the file it pointed at is untouched.
    before = outside.read_bytes()
    save_report(runs, make_report(created_at=5.0))
    assert outside.read_bytes() == before
    assert not (runs / "validation" / f"{report_id}.json").is_symlink()


def test_a_validation_folder_that_is_a_link_is_refused(tmp_path):
    runs = tmp_path / "runs"
    elsewhere = tmp_path / "elsewhere"
    runs.mkdir()
    elsewhere.mkdir()
    (runs / "validation").symlink_to(elsewhere)
    with pytest.raises(ReportError) as caught:
        save_report(runs, make_report())
    assert caught.value.message_id == "validate.report.unsafe_dir"
    with pytest.raises(ReportError) as caught:
        import_report(runs, to_json(make_report()).encode())
    assert caught.value.message_id == "validate.report.unsafe_dir"
    assert list(elsewhere.iterdir()) == []
    assert list_reports(runs) == []


def test_ids_that_leave_the_folder_are_refused(tmp_path):
    for bad in ("../state", "a/b", "", ".x", "x" * 81):
        with pytest.raises(ReportError) as caught:
            load_report(tmp_path, bad)
        assert caught.value.message_id == "validate.report.bad_id"


def test_importing_a_report_copies_it_in_once(tmp_path):
    report = make_report()
    assert import_report(tmp_path, to_json(report).encode()) == report
    assert import_report(tmp_path, to_json(report).encode()) == report  # the same again: fine
    with pytest.raises(ReportError) as caught:
        import_report(tmp_path, to_json(replace(report, data_fingerprint=None)).encode())
    assert caught.value.message_id == "validate.report.exists"
    assert load_report(tmp_path, report.id) == report


def test_a_file_holding_another_report_is_refused(tmp_path):
    save_report(tmp_path, make_report())
    os.rename(tmp_path / "validation" / f"{make_report().id}.json", tmp_path / "validation" / "20260101-000000-ffffff.json")
    with pytest.raises(ReportError) as caught:
        load_report(tmp_path, "20260101-000000-ffffff")
    assert caught.value.message_id == "validate.report.id_mismatch"


# --- comparing ---------------------------------------------------------------------------------


def test_compare_names_the_changed_fingerprint_and_the_figures_beyond_tolerance():
    old = make_report()
    one, two = old.rungs
    new_one = replace(
        one,
        figures={**one.figures, "tokens_per_s": 900.0, "steps_per_s": 3.9, "vram_peak_mib_per_gpu": "0:4150"},  # -25 %; -2.5 % and +3.75 %: within
        curve=tuple((step, loss * (1.05 if step == 10 else 1.001)) for step, loss in one.curve),  # +5 % at step 10
    )
    new_two = replace(two, status="pass", figures={**two.figures, "vram_peak_mib_per_gpu": "0:4100,1:6000"})  # GPU 1: +48 %
    machine = {**old.machine, "rocm": "6.4.0", "hip": "6.4.43482"}
    del machine["env.HSA_OVERRIDE_GFX_VERSION"]
    new = make_report("20261203-000000-bbbbbb", rungs=(new_one, new_two), machine=machine)
    cmp = compare_reports(old, new)
    assert [(c.key, c.old, c.new) for c in cmp.machine] == [
        ("env.HSA_OVERRIDE_GFX_VERSION", "absent", None),
        ("hip", None, "6.4.43482"),
        ("rocm", "6.3.1", "6.4.0"),
    ]
    assert not cmp.data_changed
    by_rung = {r.rung: r for r in cmp.rungs}
    assert [m.figure for m in by_rung["one_gpu"].moved] == ["loss_curve", "tokens_per_s"]
    curve_move = by_rung["one_gpu"].moved[0]
    assert curve_move.change == pytest.approx(0.05)
    assert by_rung["one_gpu"].moved[1].change == pytest.approx(-0.25)
    assert not by_rung["one_gpu"].status_changed
    assert [m.figure for m in by_rung["n_gpus"].moved] == ["vram_peak_mib_per_gpu:1"]
    assert (by_rung["n_gpus"].old_status, by_rung["n_gpus"].new_status) == ("fail", "pass")
    assert cmp.moved

    text = comparison_markdown(cmp, "en")
    for shown in ("6\\.3\\.1", "6\\.4\\.0", "tokens/s", "-25.0 %", "VRAM peak of GPU 1", "fail before, pass now"):
        assert shown in text, (shown, text)
    assert not english_runs(comparison_markdown(cmp, "zh-CN"))


def test_compare_of_a_rerun_within_tolerance_finds_nothing():
    old = make_report()
    one, two = old.rungs
    wobble = replace(one, figures={**one.figures, "tokens_per_s": 1150.0}, curve=tuple((s, loss * 1.005) for s, loss in one.curve))
    new = make_report("20261203-000000-cccccc", rungs=(wobble, two), data_fingerprint="sha256:" + "cd" * 32)
    cmp = compare_reports(old, new)
    assert cmp.machine == () and not cmp.moved
    assert cmp.data_changed  # the data fingerprint is compared apart
    assert "No figure moved beyond tolerance" in comparison_markdown(cmp, "en")


# --- the page's view ---------------------------------------------------------------------------


def test_the_report_page_escapes_what_the_file_brought():
    hostile = "[click](http://evil.example) <img src=x onerror=alert(1)>"
    rung = RungResult("one_gpu", "fail", ("<b>run</b>",), {"<script>": "x|y"}, (Note("check.not-ours.problem", {}), Note("validate.report.not_found", {"id": hostile})))
    report = make_report(request={"model": hostile, "dataset": "**bold**", "preset": "p", "gpus": 1}, rungs=(rung,), machine={"a|b": hostile})
    for locale in ("en", "zh-CN"):
        text = report_markdown(report, locale)
        assert "<img" not in text and "<script>" not in text and "<b>" not in text
        assert "](http" not in text and "**bold**" not in text
        assert "check\\.not\\-ours\\.problem" in text  # an id outside validate.* is not rendered
    assert not english_runs(report_markdown(make_report(), "zh-CN").replace("cpu-demo", ""))


# --- the machine fingerprint -------------------------------------------------------------------


def test_machine_fingerprint_on_a_simulated_amd_machine(tmp_path):
    from backend.config.presets import load_presets
    from backend.telemetry.fake_sysfs import build_fake_sysfs

    sysfs = build_fake_sysfs(tmp_path / "sys")
    (sysfs / "module" / "amdgpu").mkdir(parents=True)
    (sysfs / "module" / "amdgpu" / "version").write_text("6.10.5\n")
    rocm = tmp_path / "rocm"
    (rocm / ".info").mkdir(parents=True)
    (rocm / ".info" / "version").write_text("6.4.1-120\n")
    probe = {
        "python": "3.12.3",
        "torch": {
            "version": "2.6.0+rocm6.4",
            "hip_version": "6.4.43482",
            "cuda_version": None,
            "nccl_version": "2.21.5",
            "gpus": [{"index": 0, "name": "AMD Instinct MI300X", "gfx_target": "gfx942:sramecc+:xnack-"}],
        },
    }
    preset = load_presets()[0]["mi300x"]
    facts = machine_fingerprint(preset, probe=lambda: probe, sysfs_root=sysfs, rocm_root=rocm)
    assert facts["rocm"] == "6.4.1-120" and facts["driver.amdgpu"] == "6.10.5"
    assert facts["torch"] == "2.6.0+rocm6.4" and facts["torch.hip"] == "6.4.43482" and facts["torch.nccl"] == "2.21.5"
    assert facts["torch.cuda"] == ABSENT
    assert (facts["gpu.count"], facts["gpu.0.name"], facts["gpu.0.gfx"]) == ("1", "AMD Instinct MI300X", "gfx942:sramecc+:xnack-")
    assert facts["gpu.kfd_targets"] not in ("", ABSENT)
    assert facts["preset"] == "mi300x"
    assert {f"env.{name}" for name, _ in preset.env} <= set(facts)
    assert all(isinstance(v, str) for v in facts.values())

    def broken():
        raise OSError("no python")

    bare = machine_fingerprint(None, probe=broken, sysfs_root=tmp_path / "none", rocm_root=tmp_path / "none")
    assert bare["torch"] == bare["rocm"] == bare["gpu.kfd_targets"] == bare["driver.amdgpu"] == bare["preset"] == ABSENT
    assert bare["gpu.count"] == "0"


# --- the data fingerprint (LLaMA-Factory's preprocessing in the helper process) ----------------


def test_combined_fingerprint_of_several_datasets_depends_on_each_and_their_order():
    a, b = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    assert combine_fingerprints([("x", a)]) == a
    assert combine_fingerprints([("x", a), ("y", b)]) != combine_fingerprints([("y", b), ("x", a)])


@pytest.fixture(scope="module")
def lf_helper(tmp_path_factory, demo_assets, starts_lf_helper):
    from backend.llama_factory import helper_client
    from backend.runs.launcher import helper_env

    made = helper_client.install_shared(lambda: helper_env(tmp_path_factory.mktemp("fingerprint-helper-runs")))
    assert made.wait_ready(240), made.ready_info
    yield made
    helper_client.close_shared()


def _run_dir(folder: Path, dataset_dir: Path) -> Path:
    from backend.config.presets import demo_form

    folder.mkdir(parents=True)
    form = {**demo_form(), "dataset_dir": str(dataset_dir), "max_samples": 40}
    (folder / "form.json").write_text(json.dumps(form), encoding="utf-8")
    return folder


@pytest.mark.timeout(300)
def test_data_fingerprint_is_the_same_for_the_same_data_and_changes_with_one_example(tmp_path, lf_helper, monkeypatch):
    from backend.data import lengths

    copy = tmp_path / "data-copy"
    shutil.copytree(DEMO_DATA, copy)
    first = _run_dir(tmp_path / "run-a", DEMO_DATA)
    second = _run_dir(tmp_path / "run-b", copy)
    digest_a, findings = record_data_fingerprint(first)
    assert findings == [] and digest_a is not None
    digest_b, _ = record_data_fingerprint(second)
    assert digest_b == digest_a  # the same tokens from another folder (another machine's copy)
    assert read_data_fingerprint(first) == digest_a
    kept = json.loads((first / DATA_FINGERPRINT_FILE).read_text())
    assert kept["examples"] == 40 and kept["cutoff_len"] == 128

    rows = json.loads((copy / "demo.json").read_text(encoding="utf-8"))
    rows[3]["output"] = rows[3]["output"] + " Changed."
    (copy / "demo.json").write_text(json.dumps(rows), encoding="utf-8")
    digest_c, _ = record_data_fingerprint(second)
    assert digest_c is not None and digest_c != digest_a

    # The run's cutoff_len reaches the helper: truncated examples hash differently.
    short, _ = lengths.fingerprint_dataset(str(DEMO_MODEL), "llama3", str(DEMO_DATA), "demo", 8, "sft", 40)
    assert short is not None and short.digest != digest_a

    # A fresh process (the one-shot worker, no helper) hashes the same bytes.
    monkeypatch.setattr(lengths, "_ask_helper", lambda request, timeout_s: None)
    alone_short, _ = lengths.fingerprint_dataset(str(DEMO_MODEL), "llama3", str(DEMO_DATA), "demo", 8, "sft", 40)
    assert alone_short is not None and alone_short.digest == short.digest
    # helper_only without a helper: nothing computed, nothing said
    assert lengths.fingerprint_dataset(str(DEMO_MODEL), "llama3", str(DEMO_DATA), "demo", 8, "sft", 40, helper_only=True) == (None, [])

    from backend.service.run_view import data_fingerprint_markdown

    assert digest_a in data_fingerprint_markdown(first, "en")
    assert data_fingerprint_markdown(tmp_path, "en") == ""


@pytest.mark.timeout(300)
def test_a_run_started_beside_the_warm_helper_records_its_data_fingerprint(tmp_path, lf_helper, monkeypatch):
    import sys

    import yaml

    from backend.config.presets import demo_form
    from backend.runs import CONFIG_FILE, FORM_FILE, LOG_FILE
    from backend.service import RocBoard
    from tests.harness import wait_for

    monkeypatch.delenv("ROCBOARD_WARM_START", raising=False)
    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports", warm_helper=True)
    assert board.helper is lf_helper
    form = {**demo_form(), "run_name": "fp", "max_samples": 30}
    config = board.parse(form)[0]
    run_id = board.store.new_run_id("fp")
    files = {CONFIG_FILE: yaml.safe_dump(board.run_args(config, None, board.store.root / run_id / "output")), FORM_FILE: json.dumps(form), LOG_FILE: ""}
    board.store.create(name="fp", preset="cpu-demo", model="demo", files=files, run_id=run_id)
    # a stand-in for the trainer: the fingerprint does not wait for it
    board.run_manager.launch(run_id, {}, command=[sys.executable, "-c", "pass"])
    run_dir = board.store.run_dir(run_id)
    assert wait_for(lambda: read_data_fingerprint(run_dir), 120, interval=0.2)
    digest, _ = record_data_fingerprint(tmp_path / "runs" / run_id)
    assert read_data_fingerprint(run_dir) == digest
    assert json.loads((run_dir / DATA_FINGERPRINT_FILE).read_text())["examples"] == 30
    for locale, words in (("en", "Data fingerprint"), ("zh-CN", "数据指纹")):  # on the run panel
        status = board.run_view(run_id, locale).status
        assert f"{words}" in status and digest in status, status
    # the report's: the first run that has one (nothing recomputed)
    assert path_data_fingerprint([tmp_path / "none", run_dir]) == digest
