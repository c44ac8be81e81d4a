"""Prompt datasets -> token counts: ShareGPT conversations and JSONL prompt files.

- ``sharegpt``: the format of ``ShareGPT_V3_unfiltered_cleaned_split.json`` (the dataset of vLLM's
  serving benchmark): a JSON array of objects whose ``conversations`` list the messages, each
  ``{"from": ..., "value": text}`` (or ``{"role": ..., "content": text}``). Messages from ``gpt``,
  ``assistant``, ``chatgpt``, ``bard``, ``bing`` or ``model`` that follow another message are
  replies; everything else (``human``, ``user``, ``system``, ...) is prompt text. A turn is a reply
  and what came before it: its prompt is the whole conversation so far (previous turns' prompts
  and replies included), its output the reply. A single-turn workload takes each conversation's
  first turn (as vLLM's benchmark takes its first prompt and reply); sessions take every turn. An
  empty reply ends the conversation there; a conversation without a reply is skipped (counted).
- ``jsonl``: one object a line; ``prompt_key`` is the prompt as text (tokenized) or as an integer
  token count; ``output_key`` likewise, optional (rows without it take ``workload.output_tokens``).

Token counts: with a ``tokenizer.json`` (Hugging Face ``tokenizers``; nothing is downloaded) each
message is encoded without special tokens and every prompt adds the special tokens the tokenizer
puts around a text (e.g. BOS) once; no chat template is applied. Without one, a message of ``c``
characters counts ``ceil(c / chars_per_token)`` tokens, an estimate the summary warns about.

Files must be UTF-8 (a bad byte fails with its offset and line); malformed JSON fails with its
line and column, a malformed entry with its line and what is wrong. Nothing here draws random
numbers.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass

import numpy as np

from servesim.errors import InputError, shown, shown_path
from servesim.inputs.traces import (MAX_TOKENS, KeyTwice, TraceData, jsonl_objects, read_keys_once, read_utf8,
                                    resolve_path)

REPLY_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})
_WS = re.compile(r"\s*")
_CHUNK = 4096  # messages tokenized per batch


@dataclass(frozen=True)
class DatasetData:
    """Conversations as token counts. Conversation ``c`` has turns ``start[c]`` to
    ``start[c + 1] - 1``; turn ``t`` adds ``new_tokens[t]`` prompt tokens (the messages since the
    previous reply) and replies with ``reply_tokens[t]`` (-1: the file gives none)."""

    path: str
    new_tokens: np.ndarray  # int64 per turn
    reply_tokens: np.ndarray  # int64 per turn, -1 = unknown
    start: np.ndarray  # int64, conversations + 1 offsets into the turn arrays
    special_tokens: int  # added to every prompt (the tokenizer's BOS and the like)
    token_counts: str  # how tokens were counted, for the summary
    estimated: bool  # counts are a characters-per-token estimate
    skipped: int  # conversations without a usable turn

    @property
    def num_conversations(self) -> int:
        return len(self.start) - 1

    def first_turns(self) -> TraceData:
        """Each conversation's first turn as a row of lengths (no arrival times)."""
        first = self.start[:-1]
        prompt = self.new_tokens[first] + self.special_tokens
        return TraceData(self.path, None, prompt, self.reply_tokens[first])

    def turns(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """(prompt tokens, reply tokens) of each turn of conversation ``c``: a turn's prompt holds
        every earlier prompt message and reply."""
        a, b = int(self.start[c]), int(self.start[c + 1])
        new, out = self.new_tokens[a:b], self.reply_tokens[a:b]
        before = np.concatenate([[0], np.cumsum(new + np.maximum(out, 0))[:-1]])
        return self.special_tokens + before + new, out


# ---------------------------------------------------------------- token counting
class _Counter:
    """Token counts of texts: a tokenizer.json, or characters / chars_per_token."""

    def __init__(self, tokenizer: str | None, chars_per_token: float):
        self.cpt = chars_per_token
        self.tok = None
        self.special = 0
        if tokenizer is not None:
            where = "workload.dataset.tokenizer"
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise InputError(f"{where}: reading {tokenizer} needs the tokenizers package: "
                                 "pip install 'servesim[tokenizers]' (or leave it null for an estimate)") from None
            p = resolve_path(tokenizer)
            if p.is_dir():  # (a model's folder: its tokenizer.json is inside)
                inside = " (it has one)" if (p / "tokenizer.json").is_file() else ""
                raise InputError(f"{where}: {shown(tokenizer)} is a folder: give the path of the tokenizer.json "
                                 f"file in it{inside}")
            if not p.is_file():
                raise InputError(f"{where}: no file {shown(tokenizer)} (give the path of a tokenizer.json)")
            read_utf8(tokenizer, "tokenizer")  # a file that is not UTF-8 is named with its byte offset
            try:
                tok = Tokenizer.from_file(str(p))
            except Exception as e:  # the library's own parse errors (it may quote the file: not shown)
                raise InputError(f"{where}: {shown(tokenizer)} is not a tokenizer.json the tokenizers package "
                                 f"reads ({type(e).__name__})") from None
            tok.no_truncation()
            tok.no_padding()
            self.tok = tok
            self.special = len(tok.encode("", add_special_tokens=True).ids)

    def __call__(self, texts: list[str]) -> list[int]:
        if self.tok is not None:
            return [len(e.ids) for e in self.tok.encode_batch(texts, add_special_tokens=False)]
        return [math.ceil(len(t) / self.cpt) for t in texts]


# ---------------------------------------------------------------- readers
# the keys a ShareGPT entry is read by: one given twice in an object is refused (JSON keeps the last)
SHAREGPT_KEYS = ("conversations", "from", "role", "value", "content")


def _json_error(path: str, e: json.JSONDecodeError) -> InputError:
    return InputError(f"{path} line {e.lineno} column {e.colno}: malformed JSON: {e.msg}")


def _sharegpt_entries(path: str, text: str):
    """(line, entry) of each element of the top-level JSON array, parsed one at a time (so a
    malformed entry is named by its line)."""
    dec = json.JSONDecoder(object_pairs_hook=read_keys_once(SHAREGPT_KEYS))
    i = _WS.match(text, 0).end()
    if i >= len(text) or text[i] != "[":
        # (an object first: most likely one a line, a JSONL file not named *.jsonl)
        hint = "; a file of one JSON object a line takes workload.dataset.format: jsonl" if text[i:i + 1] == "{" else ""
        raise InputError(f"{path} line {text.count(chr(10), 0, i) + 1}: expected a JSON array of conversations "
                         "(ShareGPT format: [{\"conversations\": [{\"from\": \"human\", \"value\": ...}, ...]}, ...])"
                         + hint)
    i += 1
    line, at = 1, 0
    first = True
    while True:
        i = _WS.match(text, i).end()
        if i < len(text) and text[i] == "]":
            break
        if not first:
            if i >= len(text) or text[i] != ",":
                raise _json_error(path, json.JSONDecodeError("expected ',' or ']' between entries", text, i))
            i = _WS.match(text, i + 1).end()
        first = False
        line += text.count("\n", at, i)
        at = i
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise _json_error(path, e) from None
        except KeyTwice as e:
            raise InputError(f"{path} line {line}: key {shown(e.key)} is given twice in one object; which value "
                             "to read cannot be told: keep one") from None
        except (ValueError, RecursionError) as e:  # a number too long to read, nesting too deep
            raise InputError(f"{path} line {line}: cannot read the JSON: {shown(str(e), 120)}") from None
        yield line, obj
    rest = _WS.match(text, i + 1).end()
    if rest != len(text):
        raise _json_error(path, json.JSONDecodeError("extra data after the array", text, rest))


def _messages(path: str, line: int, entry) -> list[tuple[bool, str]]:
    """(is_reply_role, text) of each message of a ShareGPT entry."""
    where = f"{path} line {line}"
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise InputError(f"{where}: expected an object with a 'conversations' list (ShareGPT format), got "
                         f"{type(entry).__name__ if not isinstance(entry, dict) else 'keys ' + ', '.join(entry)}")
    out = []
    for k, m in enumerate(entry["conversations"]):
        if not isinstance(m, dict):
            raise InputError(f"{where}: conversations[{k}] must be an object with 'from' and 'value', "
                             f"got {type(m).__name__}")
        role = m.get("from", m.get("role"))
        value = m.get("value", m.get("content"))
        if not isinstance(role, str):
            raise InputError(f"{where}: conversations[{k}] needs 'from' (or 'role') as text, got {shown(role)}")
        if not isinstance(value, str):
            raise InputError(f"{where}: conversations[{k}].value must be text, got {shown(value)}")
        out.append((role.lower() in REPLY_ROLES, value))
    return out


def _turns(msgs: list[tuple[bool, str]], counts: list[int]) -> list[tuple[int, int]]:
    """(new prompt tokens, reply tokens) per turn of one conversation."""
    turns, pending, seen = [], 0, False
    for (reply, _), n in zip(msgs, counts):
        if reply and seen:
            if n < 1:
                break  # an empty reply ends the conversation
            turns.append((pending, n))
            pending = 0
        else:
            pending += n
            seen = True
    return turns


def _read_sharegpt(path: str, count: _Counter):
    text = read_utf8(path, "dataset")
    new, out, start, skipped = [], [], [0], 0
    batch: list = []  # conversations waiting for their texts to be counted

    def flush():
        nonlocal skipped
        texts = [t for msgs in batch for _, t in msgs]
        counts = []
        for i in range(0, len(texts), _CHUNK):
            counts += count(texts[i:i + _CHUNK])
        k = 0
        for msgs in batch:
            turns = _turns(msgs, counts[k:k + len(msgs)])
            k += len(msgs)
            if turns and turns[0][0] + count.special >= 1:
                for a, b in turns:
                    new.append(a)
                    out.append(b)
                start.append(len(new))
            else:
                skipped += 1
        batch.clear()

    for line, entry in _sharegpt_entries(path, text):
        batch.append(_messages(path, line, entry))
        if len(batch) >= 1000:
            flush()
    flush()
    return new, out, start, skipped


def _jsonl_value(raw, key: str, where: str, required: bool):
    """A text or a token count; None when absent and not required."""
    if raw is None:
        if required:
            raise InputError(f"{where}: no key {shown(key)} (set workload.dataset.prompt_key)")
        return None
    if isinstance(raw, str):
        return raw
    if isinstance(raw, int) and not isinstance(raw, bool):
        if not 1 <= raw <= MAX_TOKENS:
            raise InputError(f"{where}: {key} as a token count must be an integer in 1..{MAX_TOKENS}, got {raw}")
        return raw
    raise InputError(f"{where}: {key} must be text or an integer token count, got {shown(raw)}")


def _read_jsonl(path: str, count: _Counter, prompt_key: str, output_key: str):
    rows = []
    # (lines end at \n, \r\n or \r as a text file's do: splitlines would also split inside a string
    # holding U+2028, U+0085 and the like, which JSON allows unescaped)
    text = read_utf8(path, "dataset").replace("\r\n", "\n").replace("\r", "\n")
    for _, where, obj in jsonl_objects(path, text.split("\n"), (prompt_key, output_key)):
        rows.append((where, _jsonl_value(obj.get(prompt_key), prompt_key, where, True),
                     _jsonl_value(obj.get(output_key), output_key, where, False)))
    if not rows:
        raise InputError(f"{path}: the dataset has no rows")
    texts = [v for _, p, o in rows for v in (p, o) if isinstance(v, str)]
    counts = iter([c for i in range(0, len(texts), _CHUNK) for c in count(texts[i:i + _CHUNK])])
    new, out = [], []
    for where, p, o in rows:
        n = next(counts) if isinstance(p, str) else p - count.special
        m = next(counts) if isinstance(o, str) else (-1 if o is None else o)
        if n + count.special < 1:
            raise InputError(f"{where}: {prompt_key} is empty (0 tokens)")
        if m == 0:
            raise InputError(f"{where}: {output_key} is empty (0 tokens); a request makes at least one")
        new.append(n)
        out.append(m)
    return new, out, list(range(len(new) + 1)), 0


def load_dataset(ds) -> DatasetData:
    """Read ``workload.dataset`` (``servesim.inputs.scenario.Dataset``); cached by the files'
    identity, so sweeps read it once per process."""
    p = resolve_path(ds.path)
    try:
        st = p.stat()
    except OSError as e:
        raise InputError(f"workload.dataset.path: cannot read {shown_path(ds.path)}: {e.strerror or e}") from None
    tok = None
    if ds.tokenizer is not None:
        tp = resolve_path(ds.tokenizer)
        tok = (str(tp), tp.stat().st_mtime_ns if tp.is_file() else 0)
    return _load(ds.path, str(p), st.st_mtime_ns, st.st_size, dataset_format(ds), ds.tokenizer, tok, ds.chars_per_token,
                 ds.prompt_key, ds.output_key)


def dataset_format(ds) -> str:
    """``workload.dataset.format`` with ``auto`` resolved: jsonl for ``*.jsonl``, else sharegpt."""
    if ds.format == "auto":
        return "jsonl" if str(ds.path).endswith(".jsonl") else "sharegpt"
    return ds.format


@functools.lru_cache(maxsize=8)
def _load(path, _file, _mtime, _size, fmt, tokenizer, _tok_id, cpt, prompt_key, output_key) -> DatasetData:
    """``path``: as written (messages and the summary show it so); ``_file`` and the rest: the
    cache key."""
    count = _Counter(tokenizer, cpt)
    if fmt == "jsonl":
        new, out, start, skipped = _read_jsonl(path, count, prompt_key, output_key)
    else:
        new, out, start, skipped = _read_sharegpt(path, count)
    if len(start) < 2:
        raise InputError(f"{path}: no conversation with a prompt and a non-empty reply "
                         f"({skipped} skipped); is it ShareGPT format?")
    if tokenizer is not None:
        how = f"tokenizer {tokenizer}"
    else:
        how = (f"estimated at {cpt:g} characters per token (no workload.dataset.tokenizer): real counts depend "
               "on the model's tokenizer and the language; give a tokenizer.json for exact ones")
    arrays = [np.array(v, dtype=np.int64) for v in (new, out, start)]
    for a in arrays:
        a.flags.writeable = False  # cached and shared between runs
    return DatasetData(path, *arrays, count.special, how, tokenizer is None, skipped)
