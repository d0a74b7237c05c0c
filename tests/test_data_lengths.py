"""What the trainer will see of a dataset (backend/data/lengths.py + lengths_worker.py): token
lengths and one rendered example, computed with the model's own tokenizer and LLaMA-Factory's
own template and preprocessing, in a helper process.

Real throughout: the offline demo model and its dataset, a small sharegpt JSONL written here,
the one-shot worker, and a real long-lived helper (zygote.py's "lengths" op). The reference
lengths come from a separate process that encodes the raw JSON rows itself with the
tokenizer and LLaMA-Factory's template (`encode_multiturn`), without RocBoard's worker,
LLaMA-Factory's loader or its aligner.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from backend.data import lengths as lengths_module
from backend.data.lengths import LengthReport, length_histogram, measure_lengths, smallest_cutoff
from backend.llama_factory import helper_client
from tests.tiers import starts

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "demo" / "model"
DATA = ROOT / "demo" / "data"

# sharegpt rows: (system, [user, assistant, user, assistant, ...])
CHATS = [
    ("Be brief.", ["Hi", "Hello there!"]),
    ("", ["What is two plus two?", "Four.", "And three plus three?", "Six, which is two times three."]),
    ("You are a helpful assistant that answers in full sentences.", ["Name a colour.", "Blue is a colour of the sky on a clear day."]),
    ("", ["Tell me a long story about a cat. " * 6, "Once upon a time there was a cat who liked to sit in the sun. " * 5]),
    ("", ["Ok?", "Ok."]),
    ("Answer in one word.", ["Capital of France?", "Paris."]),
]


@pytest.fixture(scope="module")
def chat_data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("chat-data")
    rows = []
    for system, turns in CHATS:
        conversations = [{"from": "human" if i % 2 == 0 else "gpt", "value": text} for i, text in enumerate(turns)]
        rows.append({"conversations": conversations, "system": system})
    (folder / "chat.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    info = {
        "chat": {"file_name": "chat.jsonl", "formatting": "sharegpt", "columns": {"messages": "conversations", "system": "system"}},
        "broken": {"file_name": "broken.jsonl", "formatting": "sharegpt", "columns": {"messages": "conversations"}},
        "with_invalid": {"file_name": "with_invalid.jsonl", "formatting": "sharegpt", "columns": {"messages": "conversations"}},
    }
    (folder / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    (folder / "broken.jsonl").write_text('{"conversations": [\n', encoding="utf-8")
    invalid = [rows[0], {"conversations": [{"from": "human", "value": "a question with no reply"}]}, rows[5]]
    (folder / "with_invalid.jsonl").write_text("".join(json.dumps({"conversations": r["conversations"]}) + "\n" for r in invalid), encoding="utf-8")
    return folder


REFERENCE = textwrap.dedent(
    """
    import json, sys
    from transformers import AutoTokenizer
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments

    model, demo_file, chat_file, pt_file = sys.argv[1:5]
    tokenizer = AutoTokenizer.from_pretrained(model)
    template = get_template_and_fix_tokenizer(tokenizer, DataArguments(template="llama3"))

    def length(messages, system):
        pairs = template.encode_multiturn(tokenizer, messages, system, None)
        return sum(len(s) + len(t) for s, t in pairs) + (1 if template.efficient_eos else 0)

    demo = []
    for row in json.load(open(demo_file)):
        prompt = row["instruction"] + ("\\n" + row["input"] if row["input"] else "")
        demo.append(length([{"role": "user", "content": prompt}, {"role": "assistant", "content": row["output"]}], None))
    chat = []
    for line in open(chat_file):
        row = json.loads(line)
        turns = [{"role": "user" if m["from"] == "human" else "assistant", "content": m["value"]} for m in row["conversations"]]
        chat.append(length(turns, row["system"] or None))
    pt = []
    for row in json.load(open(pt_file))[:10]:
        text = row["text"] + "<|end_of_text|>"
        if getattr(tokenizer, "add_bos_token", False):
            text = tokenizer.bos_token + text
        pt.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    print(json.dumps({"demo": demo, "chat": chat, "pt": pt}))
    """
)


@pytest.fixture(scope="module")
def reference(demo_assets, chat_data, starts_lf_helper) -> dict[str, list[int]]:
    """The lengths LLaMA-Factory's supervised encoding gives, computed independently."""
    done = subprocess.run(
        [sys.executable, "-c", REFERENCE, str(MODEL), str(DATA / "demo.json"), str(chat_data / "chat.jsonl"), str(DATA / "demo_pt.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def no_helper(monkeypatch):
    """The one-shot path: no shared helper, whatever another test installed."""
    monkeypatch.setattr(helper_client, "shared", lambda: None)


@pytest.fixture(scope="module")
def helper(tmp_path_factory, demo_assets, starts_lf_helper):
    from backend.runs.launcher import helper_env

    made = helper_client.install_shared(lambda: helper_env(tmp_path_factory.mktemp("lengths-helper-runs")))
    assert made.wait_ready(240), made.ready_info
    yield made
    helper_client.close_shared()


@pytest.fixture
def through_helper(helper, monkeypatch):
    """measure_lengths must answer through the helper: the one-shot worker is not allowed."""

    def refuse(*args, **kwargs):
        raise AssertionError("the one-shot worker ran although a helper is there")

    monkeypatch.setattr(lengths_module, "_ask_one_shot", refuse)
    return helper


def expected_stats(lengths: list[int], cutoff: int) -> tuple[float, int, int]:
    ordered = sorted(lengths)
    n = len(ordered)
    import math

    return sum(1 for x in lengths if x > cutoff) / n, ordered[math.ceil(0.95 * n) - 1], ordered[math.ceil(0.99 * n) - 1]


# --- the web side stays light -------------------------------------------------------------------


def test_the_web_side_imports_no_ml_library():
    script = textwrap.dedent(
        """
        import json, sys
        from backend.data.lengths import ExampleSegment, LengthReport, length_histogram, measure_lengths
        report = LengthReport(3, (5, 9, 12), 10, 1 / 3, 12, 12, (ExampleSegment("a", False), ExampleSegment("b", True)), 0.1)
        length_histogram(report, "zh-CN")
        measure_lengths("/nonexistent-model", "llama3", "/nonexistent-data", "x", 10)
        print(json.dumps(sorted(m for m in ("torch", "transformers", "llamafactory", "datasets", "peft", "trl") if m in sys.modules)))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


# --- the one-shot worker ------------------------------------------------------------------------


def test_one_shot_demo_dataset_lengths_are_llamafactorys(no_helper, demo_assets, reference):
    rows = json.loads((DATA / "demo.json").read_text(encoding="utf-8"))
    cutoff = sorted(reference["demo"])[len(rows) // 2]  # about half are truncated
    report, findings = measure_lengths(str(MODEL), "llama3", str(DATA), "demo", cutoff)
    assert findings == []
    assert report is not None
    assert report.counted == len(rows) == report.total
    assert list(report.lengths) == reference["demo"]
    share, keeps_95, keeps_99 = expected_stats(reference["demo"], cutoff)
    assert report.truncated_share == pytest.approx(share)
    assert (report.keeps_95, report.keeps_99) == (keeps_95, keeps_99)
    assert 0 < report.truncated_share < 1
    # The first example as the trainer sees it: the template around the prompt, the reply trained.
    assert [s.trained for s in report.example] == [False, True]
    prompt, reply = report.example
    assert rows[0]["instruction"] in prompt.text and rows[0]["input"] in prompt.text
    assert "<|start_header_id|>user<|end_header_id|>" in prompt.text
    assert reply.text == rows[0]["output"] + "<|eot_id|>"
    assert report.seconds > 0


def test_helper_with_max_examples_says_how_many_the_file_has(through_helper, demo_assets, reference):
    report, findings = measure_lengths(str(MODEL), "llama3", str(DATA), "demo", 64, max_examples=20)
    assert findings == [] and report is not None
    assert report.counted == 20 and report.total == len(reference["demo"])
    assert list(report.lengths) == reference["demo"][:20]


@starts("lf_helper")
def test_one_shot_that_times_out_is_a_finding(no_helper, demo_assets):
    report, findings = measure_lengths(str(MODEL), "llama3", str(DATA), "demo", 64, timeout_s=0.5)
    assert report is None
    assert [(f.key, f.rule, f.severity) for f in findings] == [("dataset", "lengths-timeout", "warning")]


# --- refused before any process -----------------------------------------------------------------


@pytest.mark.parametrize(
    "args, rule",
    [
        (dict(template="llama33"), "lengths-unknown-template"),
        (dict(dataset="no_such_dataset"), "lengths-no-dataset"),
        (dict(model_path="/nonexistent/model"), "lengths-no-model"),
        (dict(dataset_dir="/nonexistent/data"), "lengths-no-dataset"),
    ],
)
def test_what_is_known_without_a_helper_is_refused_at_once(demo_assets, monkeypatch, args, rule):
    monkeypatch.setattr(lengths_module, "_ask_helper", lambda *a: pytest.fail("a helper was asked"))
    monkeypatch.setattr(lengths_module, "_ask_one_shot", lambda *a: pytest.fail("the worker ran"))
    call = dict(model_path=str(MODEL), template="llama3", dataset_dir=str(DATA), dataset="demo", cutoff_len=64) | args
    report, findings = measure_lengths(**call)
    assert report is None
    assert [(f.key, f.rule) for f in findings] == [("dataset", rule)]
    if rule == "lengths-unknown-template":
        assert findings[0].params["guess"] == "llama3"  # did you mean
    # Every finding renders in both languages from the catalogue.
    assert all(f.text("zh-CN")[0] != f.text("en")[0] for f in findings)


def test_bad_arguments_are_a_programming_error():
    with pytest.raises(ValueError):
        measure_lengths(str(MODEL), "llama3", str(DATA), "demo", 64, stage="dpo")
    with pytest.raises(ValueError):
        measure_lengths(str(MODEL), "llama3", str(DATA), "demo", 0)


# --- through the long-lived helper --------------------------------------------------------------


def test_helper_sharegpt_lengths_and_trained_replies(through_helper, chat_data, reference):
    cutoff = 40
    report, findings = measure_lengths(str(MODEL), "llama3", str(chat_data), "chat", cutoff)
    assert findings == [] and report is not None
    assert report.counted == len(CHATS) == report.total
    assert list(report.lengths) == reference["chat"]
    share, keeps_95, keeps_99 = expected_stats(reference["chat"], cutoff)
    assert report.truncated_share == pytest.approx(share) and 0 < share < 1
    assert (report.keeps_95, report.keeps_99) == (keeps_95, keeps_99)
    system, turns = CHATS[0]
    assert [s.text for s in report.example if s.trained] == [turns[1] + "<|eot_id|>"]
    untrained = "".join(s.text for s in report.example if not s.trained)
    assert system in untrained and turns[0] in untrained


def test_helper_multiturn_example_trains_every_reply(through_helper, chat_data, reference, monkeypatch):
    # The second conversation first: a two-turn one.
    (chat_data / "two_turns.jsonl").write_text(
        json.dumps({"conversations": [{"from": "human" if i % 2 == 0 else "gpt", "value": t} for i, t in enumerate(CHATS[1][1])]}) + "\n",
        encoding="utf-8",
    )
    info = json.loads((chat_data / "dataset_info.json").read_text(encoding="utf-8"))
    info["two_turns"] = {"file_name": "two_turns.jsonl", "formatting": "sharegpt", "columns": {"messages": "conversations"}}
    (chat_data / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    report, findings = measure_lengths(str(MODEL), "llama3", str(chat_data), "two_turns", 1024)
    assert findings == [] and report is not None
    assert list(report.lengths) == [reference["chat"][1]]
    turns = CHATS[1][1]
    assert [s.trained for s in report.example] == [False, True, False, True]
    assert [s.text for s in report.example if s.trained] == [turns[1] + "<|eot_id|>", turns[3] + "<|eot_id|>"]
    assert report.truncated_share == 0 and report.keeps_95 == report.keeps_99 == reference["chat"][1]


def test_helper_pretraining_lengths(through_helper, demo_assets, reference):
    report, findings = measure_lengths(str(MODEL), "llama3", str(DATA), "demo_pt", 16, stage="pt", max_examples=10)
    assert findings == [] and report is not None
    assert list(report.lengths) == reference["pt"]
    assert report.total == len(json.loads((DATA / "demo_pt.json").read_text(encoding="utf-8")))
    assert [s.trained for s in report.example] == [True]  # pt: every token is trained on
    assert report.example[0].text.endswith("<|end_of_text|>")


def test_helper_dropped_rows_are_a_warning(through_helper, chat_data):
    report, findings = measure_lengths(str(MODEL), "llama3", str(chat_data), "with_invalid", 64)
    assert report is not None and report.counted == 2 and report.dropped == 1
    assert [(f.rule, f.severity, f.params["dropped"], f.params["read"]) for f in findings] == [("lengths-dropped", "warning", 1, 3)]


def test_helper_failures_are_findings(through_helper, chat_data, tmp_path):
    report, findings = measure_lengths(str(MODEL), "llama3", str(chat_data), "broken", 64)
    assert report is None and [f.rule for f in findings] == ["lengths-dataset-unreadable"]
    assert findings[0].params["error"]  # LLaMA-Factory's (datasets') own words
    report, findings = measure_lengths(str(MODEL), "llama3", str(DATA), "demo_dpo", 64)
    assert report is None and [f.rule for f in findings] == ["lengths-dataset-unreadable"]
    assert "not applicable" in findings[0].params["error"]
    folder = tmp_path / "model-without-tokenizer"
    folder.mkdir()
    (folder / "config.json").write_text((MODEL / "config.json").read_text(encoding="utf-8"), encoding="utf-8")
    report, findings = measure_lengths(str(folder), "llama3", str(DATA), "demo", 64)
    assert report is None and [f.rule for f in findings] == ["lengths-no-tokenizer"]


def test_helper_checks_what_it_is_asked(through_helper, demo_assets):
    """The op's fields are validated in the helper: relative paths, a bad stage, an unknown
    template or dataset name (asked directly, past the web side's own checks)."""
    good = {"model_path": str(MODEL), "template": "llama3", "dataset_dir": str(DATA), "dataset": "demo", "stage": "sft", "max_examples": 3}
    for bad in ({"model_path": "demo/model"}, {"stage": "dpo"}, {"max_examples": 0}, {"dataset": "a,b"}, {"template": "x" * 1000}):
        answer = through_helper.lengths({**good, **bad}, 60)
        assert answer is not None and answer["ok"] is False and answer["error"]["kind"] == "request", bad
    assert through_helper.lengths({**good, "template": "llama33"}, 60)["error"]["kind"] == "template"
    assert through_helper.lengths({**good, "dataset": "nope"}, 60)["error"]["kind"] == "dataset-name"
    answer = through_helper.lengths(good, 60)
    assert answer["ok"] and answer["counted"] == 3
    assert through_helper.state == "ready"  # the helper itself is untouched


# --- pure parts ----------------------------------------------------------------------------------


def test_smallest_cutoff():
    lengths = list(range(1, 101))  # 1..100
    assert smallest_cutoff(lengths, 95) == 95 and smallest_cutoff(lengths, 99) == 99
    assert smallest_cutoff([7], 95) == 7 and smallest_cutoff([], 95) == 0


def test_a_dead_helper_is_a_finding():
    finding = lengths_module._finding_from_error({"kind": "internal", "type": "NoAnswer", "message": "the check child ended without an answer"}, {}, 10)
    assert finding.rule == "lengths-helper-died" and finding.severity == "warning"
    finding = lengths_module._finding_from_error({"kind": "died", "type": "NoAnswer", "message": "exit -9: Killed"}, {}, 10)
    assert finding.rule == "lengths-helper-died" and "Killed" in finding.problem
    finding = lengths_module._finding_from_error({"kind": "internal", "type": "Timeout", "message": "the check took too long"}, {}, 10)
    assert finding.rule == "lengths-timeout"


def test_histogram_has_the_cutoff_line_and_every_example():
    lengths = (3, 5, 5, 8, 12, 12, 40, 41, 200)
    report = LengthReport(len(lengths), lengths, 40, 2 / 9, 200, 200, (), 0.1)
    figure = length_histogram(report)
    json.dumps(figure)  # JSON-able
    kept, cut = figure["data"]
    assert sum(kept["y"]) == 7 and sum(cut["y"]) == 2  # 40 is kept whole, 41 and 200 are not
    assert all(x < 40 for x in kept["x"]) and all(x > 40 for x in cut["x"])
    (line,) = figure["layout"]["shapes"]
    assert line["type"] == "line" and line["x0"] == line["x1"] == 40
    (label,) = figure["layout"]["annotations"]
    assert label["x"] == 40 and "cutoff_len 40" in label["text"] and "22.2" in label["text"]
    assert figure["layout"]["xaxis"]["title"]["text"] == "tokens per example"
    chinese = length_histogram(report, "zh-CN")
    assert chinese["layout"]["title"]["text"] != figure["layout"]["title"]["text"]
    assert chinese["data"][0]["name"] == "完整保留"
