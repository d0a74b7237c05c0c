"""Merge and export (backend/export/, backend/service/export_desk.py) on the real thing: the
real `llamafactory-cli export` on a trained demo run, transformers and peft in a child to
compare the merged model's greedy output with base + adapter, llama.cpp's real converter and
the `gguf` package's reader, a real tmpfs for a small and a filling disk."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from backend.export import gguf_convert
from backend.export.job import leftover_staging
from backend.export.merge import ExportRequest, plan_export
from backend.export.size import parse_safetensors_header, read_model_size, read_safetensors_header, size_text
from backend.runs import RunStore
from backend.service.export_desk import ExportDesk
from tests.harness import copy_run, wait_until

ROOT = Path(__file__).resolve().parents[1]
DEMO_MODEL = ROOT / "demo" / "model"
EXPORT_WAIT_S = 240.0

COMPARE = r'''
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from peft import PeftModel

base_dir, adapter_dir, merged_dir = sys.argv[1:4]
torch.manual_seed(0)
tokenizer = AutoTokenizer.from_pretrained(base_dir)
prompt = tokenizer("Tell me about the demo.", return_tensors="pt")

def greedy(model):
    model.eval()
    with torch.no_grad():
        out = model.generate(**prompt, do_sample=False, max_new_tokens=16, pad_token_id=tokenizer.pad_token_id)
    return out[0].tolist()

merged = AutoModelForCausalLM.from_pretrained(merged_dir, torch_dtype=torch.float32)
base = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
plain = greedy(base)
with_adapter = PeftModel.from_pretrained(base, adapter_dir)
print(json.dumps({"merged": greedy(merged), "adapter": greedy(with_adapter), "base": plain, "merged_class": type(merged).__name__}))
'''


# --- helpers ---------------------------------------------------------------------------------------


def run_copy(trained_demo_run, tmp_path: Path) -> tuple[RunStore, str]:
    source_runs, run_id = trained_demo_run
    runs = tmp_path / "runs"
    copy_run(source_runs, run_id, runs)
    return RunStore(runs), run_id


def llamafactory_children() -> list[psutil.Process]:
    """Processes of ours that an export starts (`llamafactory-cli export`, the GGUF runner)."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            line = " ".join(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if " export " in f"{line} " or "gguf_runner.py" in line:
            found.append(process)
    return found


def assert_nothing_left(target: Path) -> None:
    assert leftover_staging(target.parent, target.name) == [], "a staging folder was left behind"
    wait_until(lambda: not llamafactory_children(), 20, what="the export's children to end")


def gguf_read(path: Path) -> dict:
    """What the `gguf` package's reader (llama.cpp's Python reader, from PyPI) finds."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    arch = reader.fields["general.architecture"].contents()
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = {tensor.tensor_type.name for tensor in reader.tensors}
    return {"architecture": arch, "tensors": len(reader.tensors), "tokens": len(tokens), "types": types}


def need_converter() -> None:
    if gguf_convert.find_converter() is None:
        pytest.fail(
            "llama.cpp's GGUF converter is NOT installed, so GGUF export is untested: run `make gguf` "
            f"(expected at {gguf_convert.default_converter()}, or set {gguf_convert.CONVERTER_ENV})"
        )


def mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"LOUD SKIP: cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}); the full-disk cases are untested")


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


# --- pure parts ------------------------------------------------------------------------------------


def test_size_comes_from_the_safetensors_header_not_the_tensors():
    params, by_dtype = parse_safetensors_header(read_safetensors_header(DEMO_MODEL / "model.safetensors"))
    size = read_model_size(DEMO_MODEL)
    assert size.from_headers and size.params == params
    # The demo: vocab 512, hidden 64, 2 layers -> 139,584 parameters, float32.
    assert params == 139_584 and size.dtype == "float32"
    assert by_dtype == {"F32": params * 4}
    assert size.weight_bytes > params * 4  # the file also holds the header


# --- a real export ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(trained_demo_run, tmp_path_factory):
    """One real export (final adapter, GGUF f16) over an existing folder holding a file no export
    wrote, with overwrite ticked and the folder's name typed, watched while it runs: (desk,
    progress, target, old folder seen while running)."""
    tmp_path = tmp_path_factory.mktemp("export")
    store, run_id = run_copy(trained_demo_run, tmp_path)
    root = tmp_path / "exports"
    target = root / "merged"
    target.mkdir(parents=True)
    (target / "old-marker.txt").write_text("the previous export")
    desk = ExportDesk(store, [root], export_dir=tmp_path / "downloads")
    has_converter = gguf_convert.find_converter() is not None
    gguf = "f16" if has_converter else "none"
    # Overwrite alone does not replace a file no export wrote: its name must be typed.
    refusal = desk.start(ExportRequest(run_id, str(target), gguf=gguf, overwrite=True))
    assert not refusal.started and [f.rule for f in refusal.findings] == ["export-dir-foreign"]
    assert sorted(os.listdir(target)) == ["old-marker.txt"]
    request = ExportRequest(run_id, str(target), gguf=gguf, overwrite=True, confirm="merged")
    assert "Size needed" in desk.plan_markdown(request)
    answer = desk.start(request)
    assert answer.started, answer.findings
    seen_phases, old_kept = set(), True
    deadline = time.monotonic() + EXPORT_WAIT_S
    while desk.running() and time.monotonic() < deadline:
        seen_phases.add(desk.progress().phase)
        if desk.progress().phase not in ("finishing",):
            old_kept = old_kept and (target / "old-marker.txt").is_file()
        time.sleep(0.2)
    progress = desk.progress()
    yield desk, store, run_id, progress, target, old_kept, seen_phases, has_converter
    desk.close()


def test_export_writes_safetensors_tokenizer_modelfile_and_replaces_only_at_the_end(exported):
    desk, store, run_id, progress, target, old_kept, seen_phases, _ = exported
    assert progress.phase == "done", (progress.findings, progress.log_tail[-2000:])
    names = {name for name, _ in progress.result.files}
    assert "model.safetensors" in names and "config.json" in names
    assert {"tokenizer.json", "tokenizer_config.json", "Modelfile"} <= names
    assert "old-marker.txt" not in names and not (target / "old-marker.txt").exists()
    # What the export wrote is recorded beside it (not shown, not zipped): the next export may
    # replace it with the replace box alone.
    from backend.export.target import MANIFEST_NAME, foreign_entries, read_manifest

    assert read_manifest(target) == dict(progress.result.files) and MANIFEST_NAME not in names
    assert foreign_entries(target) == ()
    assert old_kept, "the old folder disappeared before the new export was complete"
    assert {"loading", "saving"} <= seen_phases, seen_phases
    modelfile = (target / "Modelfile").read_text()
    assert modelfile.startswith("# ollama modelfile") and "FROM ." in modelfile
    # Small: a zip offered for download, holding the folder's files.
    import zipfile

    assert progress.result.download is not None and progress.result.download.is_file()
    with zipfile.ZipFile(progress.result.download) as archive:
        assert {f"merged/{name}" for name in names} == set(archive.namelist())
    assert_nothing_left(target)
    assert "Written to" in desk.status_markdown("en")


def test_merged_model_answers_as_base_plus_adapter(exported):
    """transformers loads the merged folder; its greedy output on a fixed prompt equals the base
    with the adapter on top (peft), and differs from the bare base (the adapter did something)."""
    desk, store, run_id, progress, target, *_ = exported
    assert progress.phase == "done"
    script = target.parent / "compare.py"
    script.write_text(COMPARE)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(script), str(DEMO_MODEL), str(store.run_dir(run_id) / "output"), str(target)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert answers["merged_class"] == "LlamaForCausalLM"
    assert answers["merged"] == answers["adapter"]
    assert answers["merged"] != answers["base"], "the adapter changed nothing: the comparison proves nothing"


def test_gguf_f16_is_written_and_read_back_by_llama_cpps_reader(exported):
    need_converter()
    desk, store, run_id, progress, target, *_ = exported
    assert progress.phase == "done"
    path = target / "merged-f16.gguf"
    read = gguf_read(path)
    assert read["architecture"] == "llama" and read["tokens"] == 512
    # 2 layers x 9 tensors + embeddings, output norm, output head.
    assert read["tensors"] == 21 and "F16" in read["types"]
    # The demo's tokenizer is unknown to llama.cpp: the fallback is said, not hidden.
    assert progress.result.warnings == ("default-pre-tokenizer",)
    assert "default pre-tokenizer" in desk.status_markdown("en")
    assert progress.result.gguf["tensors"] == 21


def test_cli_export_with_q8_0_end_to_end(trained_demo_run, tmp_path):
    need_converter()
    store, run_id = run_copy(trained_demo_run, tmp_path)
    target = tmp_path / "cli-out" / "model"
    command = [sys.executable, "app.py", "export", run_id, "--to", str(target), "--gguf", "q8_0", "--runs-dir", str(store.root), "--checkpoint", "50"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=EXPORT_WAIT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(target)
    assert "export: saving" in done.stderr and "export: gguf" in done.stderr
    read = gguf_read(target / "model-q8_0.gguf")
    assert read["architecture"] == "llama" and "Q8_0" in read["types"]
    # The same folder again without --overwrite: refused (2), in English, nothing touched.
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "exists and is not empty" in again.stderr
    assert (target / "model-q8_0.gguf").is_file()
    # With it the folder may go: all of it is what the export wrote. A file added since is not:
    # then only --confirm-replace with its name.
    plan, findings = plan_export(store, ExportRequest(run_id, str(target), overwrite=True), None)
    assert plan is not None and findings == [] and plan.replaces and plan.foreign == ()
    (target / "README.md").write_text("my notes")
    again = subprocess.run([*command, "--overwrite"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "no RocBoard export wrote (README.md; 1 in all)" in again.stderr and "--confirm-replace model" in again.stderr
    assert (target / "README.md").read_text() == "my notes"
    assert_nothing_left(target)


def test_the_first_export_to_the_default_root_makes_it_private(trained_demo_run, tmp_path, monkeypatch, capsys):
    """`app.py export RUN --to ~/rocboard-exports/NAME` (a temporary HOME): the root is made,
    0700, by the export and not before; nothing else in the home is touched."""
    from backend.export import cli

    store, run_id = run_copy(trained_demo_run, tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    root = home / "rocboard-exports"
    assert cli.main([run_id, "--to", "~/rocboard-exports/demo/model", "--runs-dir", str(store.root)]) == 0, capsys.readouterr().err[-3000:]
    assert capsys.readouterr().out.strip() == str(root / "demo" / "model")
    for folder in (root, root / "demo"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, oct(os.stat(folder).st_mode)
    assert (root / "demo" / "model" / "model.safetensors").is_file()
    assert_nothing_left(root / "demo" / "model")


def test_cli_reports_a_failure_with_exit_1(trained_demo_run, tmp_path):
    """A broken adapter file passes the checks and fails in LLaMA-Factory: exit 1, a finding."""
    store, run_id = run_copy(trained_demo_run, tmp_path)
    (store.run_dir(run_id) / "output" / "adapter_model.safetensors").write_bytes(b"not safetensors")
    target = tmp_path / "out" / "model"
    done = subprocess.run(
        [sys.executable, "app.py", "export", run_id, "--to", str(target), "--runs-dir", str(store.root)], cwd=ROOT, capture_output=True, text=True, timeout=EXPORT_WAIT_S
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "failed:" in done.stderr and done.stdout.strip() == ""
    assert not target.exists()
    assert_nothing_left(target)


# --- refusals: each with its finding, nothing written, nothing running -------------------------------


def refused(desk: ExportDesk, request: ExportRequest) -> list[str]:
    answer = desk.start(request)
    assert not answer.started
    target = Path(os.path.normpath(request.target))
    assert_nothing_left(target)
    return [finding.rule for finding in answer.findings]


def test_a_run_without_an_adapter_is_refused(trained_demo_run, tmp_path):
    store, run_id = run_copy(trained_demo_run, tmp_path)
    output = store.run_dir(run_id) / "output"
    (output / "adapter_model.safetensors").unlink()
    desk = ExportDesk(store, [tmp_path], export_dir=None)
    assert refused(desk, ExportRequest(run_id, str(tmp_path / "x"))) == ["export-no-adapter"]
    # A checkpoint still has one: it may be chosen, and is offered.
    assert desk.checkpoints(run_id) == ["checkpoint-100", "checkpoint-50"]
    assert refused(desk, ExportRequest(run_id, str(tmp_path / "x"), checkpoint="checkpoint-7")) == ["export-no-adapter"]
    assert not (tmp_path / "x").exists()


def test_a_deleted_base_model_is_refused(trained_demo_run, tmp_path):
    store, run_id = run_copy(trained_demo_run, tmp_path)
    base = tmp_path / "base-model"
    shutil.copytree(DEMO_MODEL, base)
    form_path = store.run_dir(run_id) / "form.json"
    form = json.loads(form_path.read_text())
    form["model_path"] = str(base)
    form_path.write_text(json.dumps(form))
    desk = ExportDesk(store, [tmp_path], export_dir=None)
    assert "Size needed" in desk.plan_markdown(ExportRequest(run_id, str(tmp_path / "out")))
    shutil.rmtree(base)
    answer = desk.start(ExportRequest(run_id, str(tmp_path / "out")))
    assert [f.rule for f in answer.findings] == ["export-base-missing"]
    assert str(base) in answer.findings[0].problem
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_is_refused_without_overwrite(trained_demo_run, tmp_path):
    store, run_id = run_copy(trained_demo_run, tmp_path)
    target = tmp_path / "exports" / "taken"
    target.mkdir(parents=True)
    (target / "keep.txt").write_text("mine")
    desk = ExportDesk(store, [tmp_path / "exports"], export_dir=None)
    assert refused(desk, ExportRequest(run_id, str(target))) == ["export-dir-exists"]
    assert (target / "keep.txt").read_text() == "mine"
    # keep.txt is no export's: overwrite alone is refused, naming it; with the folder's name
    # typed the plan says the folder (and keep.txt) is replaced at the end.
    assert refused(desk, ExportRequest(run_id, str(target), overwrite=True)) == ["export-dir-foreign"]
    line = desk.plan_markdown(ExportRequest(run_id, str(target), overwrite=True))
    assert "keep" in line and "`--confirm-replace taken`" in line, line
    line = desk.plan_markdown(ExportRequest(run_id, str(target), overwrite=True, confirm="taken"))
    assert "replaced once the new export is complete" in line and "1 of its entries were not written by an export" in line
    assert sorted(os.listdir(target)) == ["keep.txt"]


def test_targets_outside_the_roots_links_and_roots_are_refused(trained_demo_run, tmp_path):
    store, run_id = run_copy(trained_demo_run, tmp_path)
    root = tmp_path / "exports"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    desk = ExportDesk(store, [root], export_dir=None)
    assert refused(desk, ExportRequest(run_id, str(elsewhere / "m"))) == ["export-dir-outside"]
    assert refused(desk, ExportRequest(run_id, "relative/path")) == ["export-dir-not-absolute"]
    assert refused(desk, ExportRequest(run_id, str(root))) == ["export-dir-is-root"]
    assert refused(desk, ExportRequest(run_id, str(root / ".." / "elsewhere" / "m"))) == ["export-dir-outside"]
    # A link as the folder itself (to an empty folder inside the root, too) is never written through.
    (root / "inside").mkdir()
    (root / "link").symlink_to(root / "inside")
    assert refused(desk, ExportRequest(run_id, str(root / "link"))) == ["export-dir-link"]
    # A link on the way that leads out of the root.
    (root / "out-link").symlink_to(elsewhere)
    assert refused(desk, ExportRequest(run_id, str(root / "out-link" / "m"))) == ["export-dir-link"]
    assert os.listdir(elsewhere) == [] and os.listdir(root / "inside") == []
    # The base model's folder and the runs folder are never written.
    wide = ExportDesk(store, [Path("/")], export_dir=None)
    assert refused(wide, ExportRequest(run_id, str(DEMO_MODEL))) == ["export-dir-kept"]
    assert refused(wide, ExportRequest(run_id, str(store.root / "x"))) == ["export-dir-kept"]
    assert refused(desk, ExportRequest(run_id, str(root / "m"), shard_gb=0)) == ["export-shard-range"]


def test_a_disk_too_small_is_refused_before_anything_is_written(trained_demo_run, tmp_path):
    store, run_id = run_copy(trained_demo_run, tmp_path)
    small = tmp_path / "small"
    mount_tmpfs(small, "256k")
    try:
        desk = ExportDesk(store, [small], export_dir=None)
        answer = desk.start(ExportRequest(run_id, str(small / "model")))
        assert [f.rule for f in answer.findings] == ["export-disk-small"]
        problem = answer.findings[0].problem
        # Both figures: the size needed (~2.6 MiB for the demo: weights, tokenizer, 2 MiB for
        # the small files) and what is free (256 KiB).
        plan, _ = plan_export(store, ExportRequest(run_id, str(small / "model")), [small])
        assert 2 * 2**20 < plan.needed_disk < 4 * 2**20
        assert f"about {size_text(plan.needed_disk)} of disk" in problem and "256.0 KiB free" in problem, problem
        assert os.listdir(small) == []
        assert_nothing_left(small / "model")
    finally:
        unmount(small)


def test_a_disk_that_fills_up_during_the_export_fails_clearly_and_keeps_nothing(trained_demo_run, tmp_path):
    """The pre-check passes (the disk has room), then another writer fills the disk while the
    model loads: the save hits ENOSPC, the export says so, and the staging folder goes."""
    store, run_id = run_copy(trained_demo_run, tmp_path)
    disk = tmp_path / "disk"
    mount_tmpfs(disk, "8m")
    try:
        desk = ExportDesk(store, [disk], export_dir=None)
        target = disk / "model"
        answer = desk.start(ExportRequest(run_id, str(target)))
        assert answer.started, answer.findings
        wait_until(lambda: desk.child_pid() is not None, 30, what="the merge to start")
        assert desk.progress().phase == "loading"
        filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(filler, b"\0" * 4096):
                pass
        except OSError as error:
            assert error.errno == 28
        finally:
            os.close(filler)
        progress = desk.wait(EXPORT_WAIT_S)
        assert progress.phase == "failed", progress.log_tail[-2000:]
        assert [f.rule for f in progress.findings] == ["export-disk-full"], progress.findings
        assert "No space left on device" in progress.findings[0].problem
        assert sorted(os.listdir(disk)) == ["filler"]
        assert_nothing_left(target)
    finally:
        unmount(disk)


def test_cancel_leaves_nothing(trained_demo_run, tmp_path):
    store, run_id = run_copy(trained_demo_run, tmp_path)
    desk = ExportDesk(store, [tmp_path / "exports"], export_dir=None)
    target = tmp_path / "exports" / "model"
    assert desk.start(ExportRequest(run_id, str(target))).started
    pid = wait_until(desk.child_pid, 30, what="the merge to start")
    # One export at a time.
    assert [f.rule for f in desk.start(ExportRequest(run_id, str(target) + "2")).findings] == ["export-busy"]
    desk.cancel()
    progress = desk.wait(30)
    assert progress.phase == "cancelled"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not target.exists()
    assert_nothing_left(target)


def test_close_stops_a_running_export_and_leaves_no_process(trained_demo_run, tmp_path):
    store, run_id = run_copy(trained_demo_run, tmp_path)
    desk = ExportDesk(store, [tmp_path / "exports"], export_dir=None)
    target = tmp_path / "exports" / "model"
    assert desk.start(ExportRequest(run_id, str(target))).started
    pid = wait_until(desk.child_pid, 30, what="the merge to start")
    desk.close()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not desk.running()
    assert not target.exists()
    assert_nothing_left(target)


def test_staging_left_by_a_killed_app_is_removed_by_the_next_export(tmp_path):
    from backend.export.job import STAGING_MARK, remove_stale_staging

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".model{STAGING_MARK}{dead.pid}-abcd1234"
    (stale / "model").mkdir(parents=True)
    mine = tmp_path / f".model{STAGING_MARK}{os.getpid()}-abcd1234"
    mine.mkdir()
    assert remove_stale_staging(tmp_path, "model") == [stale]
    assert not stale.exists() and mine.exists()


def test_a_failed_step_is_named_in_the_readers_words():
    """The step an export failed in is a message id, not an English word inside a Chinese
    sentence (the merge, the GGUF conversion, a child that never ends)."""
    from backend.export.job import failure_finding, step_words
    from backend.findings import Finding
    from backend.i18n import Message

    for log, step, words in (("No space left on device", "merge", "（合并）"), ("HIP out of memory", "merge", "（合并）"), ("ValueError: bad", "gguf", "（GGUF 转换）")):
        problem, _ = failure_finding(log, step).text("zh-CN")
        assert step not in problem and words in problem, problem
    timeout = Finding.of("export", "export-failed", step=step_words("merge"), error=Message("export.no-end", seconds=60))
    assert timeout.problem.startswith("The export failed (merge): no end after 60 s"), timeout.problem
    assert "no end" not in timeout.text("zh-CN")[0] and "60 秒后仍未结束" in timeout.text("zh-CN")[0]


def test_a_folder_that_cannot_be_looked_at_is_refused_in_the_readers_words(tmp_path, monkeypatch):
    """What the OS said (EACCES) is a message id, not its English text inside a Chinese sentence."""
    import errno

    from backend.export import target as target_module

    folder = tmp_path / "exports" / "model"
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):
        if os.fspath(path) == str(folder):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(target_module.os, "lstat", lstat)
    found, findings = target_module.check_target(str(folder), None, overwrite=False)
    assert found is None and [f.rule for f in findings] == ["export-dir-unusable"], findings
    assert findings[0].problem.endswith("cannot be used: Permission denied."), findings[0].problem
    problem = findings[0].text("zh-CN")[0]
    assert "Permission" not in problem and "权限不足" in problem, problem


def test_too_little_memory_for_a_cpu_merge_is_refused_with_both_figures(trained_demo_run, tmp_path):
    """The available memory is the machine's (psutil) in the app; here a small one is handed in."""
    store, run_id = run_copy(trained_demo_run, tmp_path)
    request = ExportRequest(run_id, str(tmp_path / "out"))
    plan, findings = plan_export(store, request, [tmp_path], ram=lambda: 300 * 2**20)
    assert [f.rule for f in findings] == ["export-ram-small"]
    assert f"about {size_text(plan.needed_ram)} is needed; 300.0 MiB is available" in findings[0].problem
    # Merging on the GPU (auto) is not held to the machine's memory.
    _, findings = plan_export(store, ExportRequest(run_id, str(tmp_path / "out"), device="auto"), [tmp_path], ram=lambda: 300 * 2**20)
    assert findings == []


def test_the_doctor_says_whether_the_gguf_converter_is_there(tmp_path):
    from backend.doctor import check_gguf_converter
    from backend.i18n import localized as render
    from tests.test_doctor import cpu_box

    found = check_gguf_converter(cpu_box(gguf_converter="/opt/llama.cpp/convert_hf_to_gguf.py"))
    assert found.verdict == "ok" and "/opt/llama.cpp/convert_hf_to_gguf.py" in render(found.saw, "en") and not found.fix
    missing = check_gguf_converter(cpu_box())
    assert missing.verdict == "ok" and "`make gguf`" in render(missing.fix, "en") and "make gguf" in render(missing.fix, "zh-CN")
    # ROCBOARD_GGUF_CONVERTER names another copy; one without its conversion/ package is not one.
    lone = tmp_path / "convert_hf_to_gguf.py"
    lone.write_text("")
    assert gguf_convert.find_converter({gguf_convert.CONVERTER_ENV: str(lone)}) in (None, gguf_convert.default_converter().resolve())
    for part in ("conversion", "gguf-py/gguf"):
        (tmp_path / part).mkdir(parents=True)
        (tmp_path / part / "__init__.py").write_text("")
    assert gguf_convert.find_converter({gguf_convert.CONVERTER_ENV: str(lone)}) == lone.resolve()


# --- the progress and a refusal, in words ----------------------------------------------------------


def test_the_progress_counts_toward_the_size_the_plan_showed_and_never_past_it(trained_demo_run, tmp_path):
    from backend.export.job import ExportJob
    from backend.i18n import translate
    from backend.service.export_desk import StartAnswer

    store, run_id = run_copy(trained_demo_run, tmp_path)
    desk = ExportDesk(store, [tmp_path / "exports"], export_dir=None)
    request = ExportRequest(run_id, str(tmp_path / "exports" / "m"))
    plan, findings = plan_export(store, request, desk.roots)
    assert plan is not None and findings == []
    job = ExportJob(plan)  # not started: its progress as the page reads it
    assert job.progress.expected_bytes == plan.needed_disk
    assert f"Size needed: about {size_text(plan.needed_disk)}" in desk.plan_markdown(request)
    desk._job = job
    job.progress.phase = "loading"
    # From the start, what it counts toward; then what it wrote.
    assert f"Written so far: 0 B of about {size_text(plan.needed_disk)}." in desk.status_markdown()
    job.progress.phase, job.progress.written_bytes = "saving", plan.needed_disk // 2
    assert f"Written so far: {size_text(plan.needed_disk // 2)} of about {size_text(plan.needed_disk)}." in desk.status_markdown()
    # More than the estimate: not shown as progress (no "of about"), and said in Chinese too.
    job.progress.written_bytes = plan.needed_disk + 1024
    over = desk.status_markdown()
    assert "Written so far: " in over and " of about " not in over.split("Written so far: ")[1].split(",")[0] and "finishing" in over
    assert translate("export.written_over", "zh-CN", written=size_text(plan.needed_disk + 1024), expected=size_text(plan.needed_disk)) in desk.status_markdown("zh-CN")
    # A refused Export: the plan line holds the reason once; another export running is added to it.
    job.progress.phase = "done"
    refused = ExportRequest(run_id, "/etc/rocboard-test")
    answer = desk.start(refused)
    assert not answer.started
    assert desk.refused_markdown(refused, answer) == desk.plan_markdown(refused) and "outside the folders" in desk.plan_markdown(refused)
    from backend.findings import Finding

    busy = StartAnswer(False, (Finding.of("export", "export-busy", run=run_id),))
    assert desk.refused_markdown(request, busy).startswith(desk.plan_markdown(request)) and "already running" in desk.refused_markdown(request, busy).split("\n\n")[-1]
