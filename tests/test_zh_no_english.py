"""No English reaches a Chinese page or a Chinese command-line line.

Every finding id (each `check.<id>` template with representative values, and the findings the
real rules produce from bad input: paths, dataset folders and files, Other keys, the registry,
huge and nested values), every doctor verdict (the test machines of tests/test_doctor.py and
the telemetry statuses the real sources give when their tool is missing, fails or is backed
off), every choice label and every command-preview line is rendered in zh-CN, and searched
for English.

What counts as English (`english_runs`): two or more consecutive words of lowercase ASCII
letters separated by single spaces, at least one of them three letters long, left
after taking out what a reader copies as written: `code spans`, quoted text ('...', "...",
「...」, “...”), URLs, and every token that holds a digit, `_`, `.`, `/`, `\\`, `=`, `:`, `@`,
`<` or `>` (keys, paths, file names, numbers, versions, options). A word joined to another by a
hyphen is a name (`amd-smi`, `llamafactory-cli`, `--runs-dir`), and so are the COMMANDS below;
any other name is a single word or written in code: "it is empty", "a list of 3 item(s)", "with CPU offload",
"process(es)" inside a sentence all count.

Run `python -m tests.test_zh_no_english` to print the count and every fragment.
"""

from __future__ import annotations

import json
import re
import string
import tempfile
from collections.abc import Iterator
from pathlib import Path

from backend.i18n import CATALOGUE, localized, render_message

ROOT = Path(__file__).resolve().parent.parent

_MASK = re.compile(
    r"`[^`\n]*`"
    r"|'[^'\n]*'|\"[^\"\n]*\"|「[^」\n]*」|“[^”\n]*”|‘[^’\n]*’"
    r"|https?://\S+"
    r"|[^\s，。；：、（）()「」,;]*[0-9_./\\=:@<>][^\s，。；：、（）()「」,;]*"
)
_RUN = re.compile(r"(?<![\w-])[a-z]+(?: [a-z]+)+(?![\w-])")
# Commands a reader types as written, though the catalogue does not put them in code.
COMMANDS = ("sudo usermod", "pip install")


def english_runs(text: str) -> list[str]:
    """The runs of English words in `text`, as defined in the module's docstring."""
    masked = _MASK.sub(" | ", str(text))
    return [run for run in _RUN.findall(masked) if any(len(word) >= 3 for word in run.split(" ")) and run not in COMMANDS]


# --- what a Chinese page shows -----------------------------------------------------------------


def _template_texts() -> Iterator[tuple[str, str]]:
    """Every finding id's texts with a neutral value in each placeholder: English written in the
    Chinese catalogue itself."""
    for key in CATALOGUE["zh-CN"]:
        if key.startswith("check."):
            names = {name.split(":")[0].split("!")[0] for _, name, _, _ in string.Formatter().parse(CATALOGUE["zh-CN"][key]) if name}
            yield key, render_message(key, dict.fromkeys(names, "7"), "zh-CN")  # a number: no words of its own


def _findings_texts(findings) -> Iterator[tuple[str, str]]:
    for finding in findings:
        problem, fix = finding.text("zh-CN")
        yield f"check.{finding.message or finding.rule}", f"{problem} {fix}"


def _real_findings(tmp: Path) -> list:
    """The findings the listed modules make of bad input."""
    from backend.config import parse_form, shown
    from backend.config.other_keys import read_deepspeed_file
    from backend.config.path_keys import ReadPlaces
    from backend.config.paths import path_problem
    from backend.data.dataset_file import inspect_dataset
    from backend.data.registry import DatasetRegistry
    from backend.findings import Finding

    findings: list = []
    # Paths the OS cannot look up, and values too big or too nested to show.
    for raw in ("a\0b", "x" * 5000, "d/" + "n" * 300):
        problem = path_problem(raw)
        if problem:
            findings.append(Finding.of("model_path", "path-unusable", path=shown(raw, 80), problem=problem))
    for value in ([1, 2, 3], {"a": 1}, (1,), {1}, 10**5000, -(10**5000), object()):
        findings += parse_form({"learning_rate": value, "lora_rank": value, "template": value, "run_name": value})[1]
    # The pre-launch check of a dataset folder and its files.
    data = tmp / "data"
    data.mkdir()
    files = {
        "empty.json": "",
        "scalar.json": "3",
        "none.json": "[]",
        "broken.json": "[{",
        "broken.jsonl": '{"a": 1}\n{',
        "latin.json": b"[\xff]",
        "deep.json": "[" * 100_000 + "]" * 100_000,
        "alpaca.json": json.dumps([{"question": 1, "prompt": 2, "answer": 3}]),
        "talk.json": json.dumps([{"conversations": [{"role": "user", "content": "hi"}]}]),
        "ragged.csv": "a,b\n1,2,3\n",
    }
    for name, text in files.items():
        (data / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    (data / "folder").mkdir()
    info = {name.split(".")[0] + "_" + name.split(".")[1]: {"file_name": name} for name in files}
    info["sharegpt_talk"] = {"file_name": "talk.json", "formatting": "sharegpt"}
    info["folder"] = {"file_name": "folder"}
    (data / "dataset_info.json").write_text(json.dumps(info))
    from tests import test_checks as cases

    assets = cases.Assets(tmp, cases.make_model_dir(tmp / "model"), cases.make_dataset_dir(tmp / "cases"))
    for dataset_dir, datasets in ((str(data), ",".join(info)), ("a\0b", "x"), (str(tmp / "nowhere"), "x"), (str(data / "empty.json"), "x")):
        values = {**cases.good_values(assets), "dataset_dir": dataset_dir, "dataset": datasets}
        findings += cases.findings_for(values, "rx7900xtx", True)
    bad_info = tmp / "bad_info"
    bad_info.mkdir()
    (bad_info / "dataset_info.json").write_text("[1]")
    findings += cases.findings_for({**cases.good_values(assets), "dataset_dir": str(bad_info)}, "rx7900xtx", True)
    broken_model = cases.make_model_dir(tmp / "broken_model")
    (broken_model / "config.json").write_text("{")
    for model in ("a\0b", str(tmp / "nowhere"), str(data / "empty.json"), str(broken_model)):
        findings += cases.findings_for({**cases.good_values(assets), "model_path": model}, "rx7900xtx", True)
    # A data file the Data tab reads, and the registry.
    for name in files:
        findings += inspect_dataset(data / name, name).findings
    findings += inspect_dataset(data / "folder", "folder").findings
    findings += inspect_dataset(tmp / "nowhere.json", "nowhere.json").findings
    registry = DatasetRegistry(tmp / "registry", [tmp], 2**20)
    (tmp / "registry" / "datasets").mkdir(parents=True)
    (tmp / "registry" / "datasets" / "dataset_info.json").write_text("[1]")
    findings += registry.check_name("x")
    for raw in ("a\0b", str(tmp / "nowhere.json"), str(data / "folder"), str(data / "empty.json")):
        findings += registry.check_server_path(raw)[1]
        findings += registry.inspect_server_path(raw).findings
    # Other keys: a key twice, and a DeepSpeed file that is not one.
    from backend.config.other_keys import parse_other_keys

    findings += parse_other_keys("pref_beta: 0.1\npref_beta: 0.2\n")[1]
    places = ReadPlaces.of([tmp])
    big = tmp / "big.json"
    big.write_text(" " * (2 * 2**20))
    for raw in (str(data / "folder"), str(tmp / "nowhere.json"), str(big), str(data / "broken.json")):
        findings += read_deepspeed_file(raw, places)[1]
    return findings


def _doctor_texts() -> Iterator[tuple[str, str]]:
    from dataclasses import replace

    from backend.doctor import run_checks
    from backend.telemetry.base import SourceStatus
    from backend.telemetry.command import CommandSource
    from backend.telemetry.tool import run_tool
    from tests import test_doctor as machines

    statuses = []
    for source_class in CommandSource.__subclasses__():
        source = source_class.__new__(source_class)
        try:
            source.__init__()
        except TypeError:
            continue
        source.env = {"PATH": "/nonexistent"}
        statuses.append(source.probe())
    failed = run_tool(["/nonexistent/tool"], 1.0, {})
    statuses.append(SourceStatus("amd-smi", False, failed.error or "", ""))
    statuses.append(SourceStatus("amd-smi", False, run_tool(["/"], 1.0, {}).error or "", ""))
    from backend.doctor import LibraryFact, TorchFacts

    boxes = [machines.cpu_box(), machines.rdna2_box(), machines.mi300x_node()]
    boxes.append(replace(machines.rdna2_box(), telemetry=tuple(statuses)))
    # The runtime's and the libraries' own words: torch that does not import, a CUDA build on an
    # AMD machine, libraries installed but broken.
    boxes.append(machines.rdna2_box(torch=TorchFacts(import_error="ModuleNotFoundError: No module named 'torch'")))
    boxes.append(machines.rdna2_box(torch=TorchFacts(version="2.7.1+cu126", cuda_version="12.6", arch_list=("sm_80",), device_error="RuntimeError: Found no NVIDIA driver on your system.")))
    broken = tuple(LibraryFact(name, "1.0", "ROCm", error="OSError: libcudart.so.12: cannot open shared object file") for name in ("bitsandbytes", "flash_attn", "deepspeed", "liger-kernel"))
    boxes.append(machines.mi300x_node(libraries=broken))
    # The ROCm torch commands and the Slurm checks, in every state (tests/test_doctor_first_hour.py)
    from tests import test_doctor_first_hour as first_hour

    for case in first_hour.every_state_box():
        boxes.append(case)
    for box in boxes:
        for check in run_checks(box):
            yield f"doctor.{localized(check.name, 'en')}", f"{localized(check.name, 'zh-CN')}: {localized(check.saw, 'zh-CN')} {localized(check.fix, 'zh-CN')}"


def _choice_texts() -> Iterator[tuple[str, str]]:
    from backend import view
    from backend.config import schema

    # What the page's widgets are built with and its load and language switch put there
    # (ui/train_tab.py, ui/app.py): the words of each field's label ids.
    for field in schema.page_fields():
        for label, value in view.choice_labels(field.name, "zh-CN"):
            yield f"choice.{field.name}.{value}", label


def _preview_texts(tmp: Path) -> Iterator[tuple[str, str]]:
    from backend.config.distributed import DistributedPlan, describe

    plans = [
        DistributedPlan(gpus=(0, 1), nproc=2),
        DistributedPlan(gpus=(0, 1), nproc=2, strategy="zero3", offload=True),
        DistributedPlan(gpus=(0, 1), nproc=2, strategy="zero2", nnodes=2, master_addr="10.0.0.1"),
        DistributedPlan(on_cpu=True, gpus=(0,)),
    ]
    for plan in plans:
        yield "preview", localized(describe(plan), "zh-CN")
    # The shell lines the preview (and the Import tab's export) show, with and without a preset
    # and a run name, and the DeepSpeed file's line.
    from backend.config import parse_form, schema
    from backend.config.export import export_shell
    from backend.config.other_keys import DeepSpeedFile
    from backend.config.presets import load_presets

    presets, _ = load_presets()
    for run_name, preset in (("", None), ("my-run", next(iter(presets.values())))):
        config, _ = parse_form({**schema.form_defaults(), "run_name": run_name})
        for line in localized(export_shell(config, preset, "config.yaml"), "zh-CN").splitlines():
            yield "preview.shell", line
    yield "preview.deepspeed", localized(DeepSpeedFile(str(tmp / "ds.json"), "{}", 3, "cpu", "none").summary(), "zh-CN")
    # On Slurm the preview is the batch script as it will be written (its comments in words).
    from backend.config.placement import SlurmPlacement
    from backend.slurm.script import batch_script

    for line in localized(batch_script(tmp / "runs" / "<run-id>", "<run-id>", SlurmPlacement(nodes=2, gpus_per_node=8), 8), "zh-CN").splitlines():
        if line.startswith("# "):  # its words (the rest is shell code and sbatch's options)
            yield "preview.slurm", line


def rendered_in_chinese() -> list[tuple[str, str]]:
    """(where, text) for everything the test reads in zh-CN."""
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        texts = list(_template_texts())
        texts += list(_findings_texts(_real_findings(tmp)))
        texts += list(_doctor_texts())
        texts += list(_choice_texts())
        texts += list(_preview_texts(tmp))
    return texts


def english_fragments() -> list[tuple[str, str, str]]:
    """(where, fragment, text) for every run of English in what a Chinese page shows."""
    return [(where, run, text) for where, text in rendered_in_chinese() for run in english_runs(text)]


# --- the tests ---------------------------------------------------------------------------------


def test_the_detector_sees_english_clauses_and_leaves_names_keys_paths_and_numbers() -> None:
    assert english_runs("无法读取数据集文件 /d/x.json：it is empty。") == ["it is empty"]
    assert english_runs("值 a list of 3 item(s) 超出范围") == ["a list of"]
    assert english_runs("DeepSpeed ZeRO-3 with CPU offload") == []  # one lowercase word between names
    assert english_runs("2 process(es): 2 per node on CPU") == ["per node on"]
    assert english_runs("请设置 `lora_target: all`，见 'my data' 与 /home/a b/x.json 或 HSA_OVERRIDE_GFX_VERSION=11.0.0") == []
    assert english_runs("无法读取（No such file or directory）") == ["such file or directory"]


def test_no_english_reaches_a_chinese_page() -> None:
    fragments = english_fragments()
    assert fragments == [], "\n".join(f"{where}: {run!r} in {text!r}" for where, run, text in fragments[:40])


if __name__ == "__main__":
    found = english_fragments()
    for where, run, text in found:
        print(f"{where}: {run!r} in {text[:160]!r}")
    print(f"{len(found)} English fragments in {len({(w, t) for w, _, t in found})} zh-CN texts")
