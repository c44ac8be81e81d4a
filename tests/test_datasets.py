"""Datasets: ShareGPT conversations and JSONL prompt files, counted by a tokenizer or estimated."""

import json
import math
import sys

import numpy as np
import pytest

from servesim.cli.main import main
from servesim.errors import InputError
from servesim.inputs.datasets import load_dataset
from servesim.inputs.scenario import Dataset
from servesim.inputs.workload import generate
from servesim.simulation import simulate
from tests.conftest import make_scenario

CONVS = [
    {"id": "a", "conversations": [{"from": "human", "value": "x" * 40}, {"from": "gpt", "value": "y" * 81},
                                  {"from": "human", "value": "z" * 12}, {"from": "gpt", "value": "w" * 8}]},
    {"id": "b", "conversations": [{"from": "human", "value": "only a question"}]},  # no reply: skipped
    {"id": "c", "conversations": [{"from": "system", "value": "s" * 20}, {"from": "human", "value": "q" * 20},
                                  {"from": "gpt", "value": "r" * 4}, {"from": "human", "value": "again"},
                                  {"from": "gpt", "value": ""}]},  # the empty reply ends it after one turn
]


def sharegpt(tmp_path, convs=CONVS, name="sg.json"):
    p = tmp_path / name
    p.write_text(json.dumps(convs, indent=1))
    return p


def ds(path, **kw):
    return Dataset(path=str(path), **kw)


def test_sharegpt_turns_estimated_from_characters(tmp_path):
    d = load_dataset(ds(sharegpt(tmp_path)))
    assert d.num_conversations == 2 and d.skipped == 1 and d.estimated
    # conversation a: 40 chars -> 10 tokens, reply 81 -> 21; then 12 -> 3, reply 8 -> 2
    assert d.turns(0)[0].tolist() == [10, 10 + 21 + 3] and d.turns(0)[1].tolist() == [21, 2]
    # conversation c: system + user (5 + 5 tokens) then a 1-token reply; the empty reply ends it
    assert d.turns(1)[0].tolist() == [10] and d.turns(1)[1].tolist() == [1]
    first = d.first_turns()
    assert first.prompt_tokens.tolist() == [10, 10] and first.output_tokens.tolist() == [21, 1]
    assert "estimated at 4 characters per token" in d.token_counts
    d3 = load_dataset(ds(sharegpt(tmp_path), chars_per_token=3.0))
    assert d3.first_turns().prompt_tokens.tolist() == [math.ceil(40 / 3), math.ceil(20 / 3) + math.ceil(20 / 3)]


def tokenizer_file(tmp_path):
    tk = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, processors

    vocab = {"[UNK]": 0, "<s>": 1, "hello": 2, "world": 3, "how": 4, "are": 5, "you": 6, "fine": 7}
    tok = tk.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_a_tokenizer_json_counts_tokens_and_adds_its_bos_once(tmp_path):
    tok = tokenizer_file(tmp_path)
    convs = [{"conversations": [{"from": "human", "value": "hello world"}, {"from": "gpt", "value": "fine"},
                                {"from": "human", "value": "how are you you"}, {"from": "gpt", "value": "fine fine"}]}]
    d = load_dataset(ds(sharegpt(tmp_path, convs), tokenizer=str(tok)))
    assert not d.estimated and d.special_tokens == 1
    prompts, outs = d.turns(0)
    assert prompts.tolist() == [1 + 2, 1 + 2 + 1 + 4] and outs.tolist() == [1, 2]


def test_jsonl_prompts_text_or_counts_with_outputs_from_the_workload(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"prompt": "' + "a" * 30 + '", "output": 7}\n\n{"prompt": 12}\n{"prompt": "bb", "output": "c"}\n')
    d = load_dataset(ds(p))
    t = d.first_turns()
    assert t.prompt_tokens.tolist() == [8, 12, 1] and t.output_tokens.tolist() == [7, -1, 1]
    base = {"workload.dataset": {"path": str(p)}, "workload.prompt_tokens": None, "workload.num_requests": 3}
    with pytest.raises(InputError, match="workload.output_tokens is missing: 1 rows of .* have no 'output'"):
        generate(make_scenario(**{**base, "workload.output_tokens": None}).workload, np.random.default_rng(0))
    s = generate(make_scenario(**{**base, "workload.output_tokens": {"dist": "fixed", "value": 5}}).workload,
                 np.random.default_rng(0))
    # only the row without a reply draws one (as output_key's doc says); the rows' own replies were
    # replaced too ([5, 5, 5])
    assert s.prompt_tokens.tolist() == [8, 12, 1] and s.output_tokens.tolist() == [7, 5, 1]


def test_a_dataset_run_warns_about_estimated_counts(tmp_path, capsys):
    path = sharegpt(tmp_path)
    sc = tmp_path / "s.yaml"
    sc.write_text(f"""
model: meta-llama/Meta-Llama-3-8B
hardware: {{gpu: h100-sxm}}
workload:
  num_requests: 6
  arrival: {{process: poisson, rate_rps: 2.0}}
  dataset: {{path: {path}, loop: true}}
""")
    assert main(["run", str(sc), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "warning       dataset" in out and "estimated at 4 characters per token" in out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["workload"]["dataset"]["token_counts_estimated"] is True
    assert summary["workload"]["dataset"]["skipped_conversations"] == 1
    assert main(["run", str(sc), "--out", str(tmp_path / "o2"), "--quiet",
                 "--set", "workload.dataset.loop=false"]) == 2
    assert "has 2 rows; set workload.dataset.loop: true" in capsys.readouterr().err


@pytest.mark.parametrize("arrival", [{"process": "poisson", "rate_rps": 1.0}, {"process": "closed_loop", "clients": 2}])
def test_sessions_that_use_up_a_dataset_say_so_or_end_the_window(tmp_path, arrival):
    # the 2 conversations hold 3 turns: num_requests=9 ran 3 and said nothing; with duration_s alone
    # the window was the whole duration_s (arrivals had stopped with the conversations)
    base = {"workload.dataset": {"path": str(sharegpt(tmp_path))}, "workload.prompt_tokens": None,
            "workload.output_tokens": None, "workload.arrival": arrival, "workload.sessions": {"think_time_s": 0.5}}
    with pytest.raises(InputError, match=r"workload.num_requests=9 exceeds the 3 turns of the 2 conversations of "
                                         r".*sg.json; set workload.dataset.loop: true"):
        simulate(make_scenario(**{**base, "workload.num_requests": 9}))
    with pytest.raises(InputError, match=r"num_requests=3 exceeds the 2 turns"):
        simulate(make_scenario(**{**base, "workload.num_requests": 3, "workload.sessions": {"max_turns": 1}}))
    assert simulate(make_scenario(**{**base, "workload.num_requests": 3})).summary["completed"] == 3
    r = simulate(make_scenario(**{**base, "workload.num_requests": None, "workload.duration_s": 600.0}))
    last = float(np.nanmax(r.requests["finish_s"]))
    assert r.summary["completed"] == 3 and last < 60 and r.summary["sim_time_s"] == pytest.approx(last)


def test_sharegpt_conversations_become_sessions(tmp_path):
    sc = make_scenario(**{"workload.dataset": {"path": str(sharegpt(tmp_path)), "loop": True},
                          "workload.prompt_tokens": None, "workload.output_tokens": None,
                          "workload.num_requests": 9, "workload.arrival": {"process": "poisson", "rate_rps": 1.0},
                          "workload.sessions": {"think_time_s": 1.0}, "policy.prefix_caching": True})
    r = simulate(sc)
    ss = r.summary["workload"]["sessions"]
    assert ss["turns_sent"] == 9
    # conversations alternate: a (2 turns), c (1 turn), a, c, ...
    assert sorted(set(r.requests["prompt_tokens"].tolist())) == [10, 34]


@pytest.mark.parametrize("text, match", [
    ('[{"conversations": []},\n {"conversations": [}]', r"sg.json line 2 column 21: malformed JSON"),
    ('{"conversations": []}', r"sg.json line 1: expected a JSON array of conversations.*one JSON object a line "
                              r"takes workload.dataset.format: jsonl"),
    ('"text"', r"sg.json line 1: expected a JSON array of conversations \(ShareGPT format: .*\]\)$"),
    ('[\n{"conversations": []},\n"text"\n]', r"sg.json line 3: expected an object with a 'conversations' list"),
    ('[\n\n{"conversations": [{"from": "human", "value": 3}]}]',
     r"sg.json line 3: conversations\[0\].value must be text"),
    ('[{"conversations": [{"value": "hi"}]}]', r"sg.json line 1: conversations\[0\] needs 'from'"),
    ('[{"conversations": [{"from": "human", "value": "x"}]}]', r"no conversation with a prompt and a non-empty reply"),
    ('[{"conversations": []}] extra', r"line 1 column 25: malformed JSON: extra data after the array"),
])
def test_malformed_sharegpt_names_the_line(tmp_path, text, match):
    p = tmp_path / "sg.json"
    p.write_text(text)
    with pytest.raises(InputError, match=match):
        load_dataset(ds(p))


@pytest.mark.parametrize("text, match", [
    ('{"prompt": "a"}\n{"prompt": "b"\n', r"p.jsonl line 2 column 15: malformed JSON"),
    ('{"prompt": "a"}\n{"text": "b"}\n', r"p.jsonl line 2: no key 'prompt'"),
    ('[1]\n', r"p.jsonl line 1: expected a JSON object"),
    ('{"prompt": 0}\n', r"p.jsonl line 1: prompt as a token count must be an integer in 1"),
    ('{"prompt": "a", "output": ""}\n', r"p.jsonl line 1: output is empty"),
    ('{"prompt": "a", "output": [1]}\n', r"p.jsonl line 1: output must be text or an integer token count"),
])
def test_malformed_jsonl_names_the_line(tmp_path, text, match):
    p = tmp_path / "p.jsonl"
    p.write_text(text)
    with pytest.raises(InputError, match=match):
        load_dataset(ds(p))


def test_a_dataset_that_is_not_utf8_names_the_byte(tmp_path, capsys):
    p = tmp_path / "sg.json"
    p.write_bytes(b'[{"conversations": [\n{"from": "human", "value": "caf\xe9"}]}]')
    with pytest.raises(InputError, match=r"sg.json line 2: not UTF-8 text: byte offset 52 \(0xe9\)"):
        load_dataset(ds(p))
    sc = tmp_path / "s.yaml"
    sc.write_text(f"""
model: meta-llama/Meta-Llama-3-8B
hardware: {{gpu: h100-sxm}}
workload: {{num_requests: 2, arrival: {{process: poisson, rate_rps: 2.0}}, dataset: {{path: {p}}}}}
""")
    assert main(["validate", str(sc)]) == 2
    assert "not UTF-8 text: byte offset 52" in capsys.readouterr().err


def test_tokenizer_problems_are_input_errors(tmp_path, monkeypatch):
    path = sharegpt(tmp_path)
    with pytest.raises(InputError, match="workload.dataset.tokenizer: no file"):
        load_dataset(ds(path, tokenizer=str(tmp_path / "missing.json")))
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    pytest.importorskip("tokenizers")
    with pytest.raises(InputError, match="is not a tokenizer.json the tokenizers package reads"):
        load_dataset(ds(path, tokenizer=str(bad)))
    # a model's folder, which exists, was 'no file' (give the tokenizer.json in it)
    with pytest.raises(InputError, match=r"tokenizer: '.*' is a folder: give the path of the tokenizer.json file in it "
                                         r"\(it has one\)"):
        load_dataset(ds(path, tokenizer=str(tmp_path)))
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if not installed
    with pytest.raises(InputError, match=r"needs the tokenizers package: pip install 'servesim\[tokenizers\]'"):
        load_dataset(ds(path, tokenizer=str(bad), chars_per_token=2.0))


def test_dataset_fields_are_checked():
    with pytest.raises(InputError, match="workload.prompt_tokens: prompt lengths come from workload.dataset"):
        make_scenario(**{"workload.dataset": {"path": "x.json"}})
    with pytest.raises(InputError, match="workload.dataset.chars_per_token"):
        make_scenario(**{"workload.dataset": {"path": "x.json", "chars_per_token": 0},
                         "workload.prompt_tokens": None})
    with pytest.raises(InputError, match="workload.arrival is missing"):
        make_scenario(**{"workload.dataset": {"path": "x.json"}, "workload.prompt_tokens": None,
                         "workload.arrival": None})
