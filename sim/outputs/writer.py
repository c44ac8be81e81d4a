"""Writing a run folder: ``summary.json``, ``requests`` and ``steps`` as CSV or Parquet, and
``scenario.yaml`` (see docs/outputs.md).

CSV is written a block of rows at a time (``CHUNK_ROWS``) and a column at a time within it: each
column becomes a matrix of characters at once (``numfmt``), the block's matrices are laid side
by side between the commas and newlines, and the NUL padding is dropped; no Python code runs per
cell. The text is what ``csv.writer`` (``lineterminator="\\n"``) writes for ``repr`` of each
float (NaN: an empty cell) and ``str`` of each integer and string, byte for byte, except that a
string holding a carriage return is quoted too (csv.writer leaves it bare, and its reader then
splits the row). Memory beyond the columns: one block's text.

Parquet (``pip install pyarrow``) holds the same columns, typed, in row groups of ``ROW_GROUP``
rows; NaN times are nulls.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.errors import InputError, did_you_mean
from servesim.outputs.numfmt import float_parts, int_cells

OUTPUTS = ("summary", "requests", "steps", "scenario")  # what a run folder can hold
STUDY_OUTPUTS = OUTPUTS + ("tbt",)  # a study's run folders can also hold tbt_s.npy (every TBT gap)
FORMATS = ("csv", "parquet")
CHUNK_ROWS = 1 << 14  # rows per CSV block: ~2 MB of text at a time (its temporaries stay in cache)
ROW_GROUP = 1 << 18  # rows per Parquet row group (readers like them large; ~25 MB of columns)


@dataclass(frozen=True)
class Labels:
    """A text column stored as small integer ``codes`` into ``labels`` (e.g. a step's bound)."""

    codes: np.ndarray
    labels: tuple

    def __len__(self) -> int:
        return len(self.codes)


def labels_of(col) -> Labels:
    """A text column (object array of str) as ``Labels``: each distinct value once."""
    if isinstance(col, Labels):
        return col
    values = col.tolist()
    index = {v: i for i, v in enumerate(dict.fromkeys(values))}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))
    return Labels(codes, tuple(index))


def finite(o):
    """``o`` with every non-finite float (NaN, inf) as None, through dicts, lists and tuples: the
    figure does not exist (TPOT of one-token outputs) or is unbounded, and JSON has no NaN or
    Infinity (Python writes them, strict readers refuse them)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite(v) for v in o]
    return o


def json_text(doc, **kw) -> str:
    """``doc`` as a JSON file's text (``json.dumps``' keywords; a newline at the end) with its
    non-finite floats as null (``finite``): every JSON file servesim writes goes through it."""
    return json.dumps(finite(doc), allow_nan=False, **kw) + "\n"


def name_part(text: str) -> str:
    """``text`` (a GPU's name, which a YAML file may set to anything, or its path) as part of one
    file or folder name: letters, digits, ``.``, ``+``, ``-`` and ``_`` kept, anything else (a path's
    separators) as ``_``, so that it names a file inside the folder written to."""
    return re.sub(r"[^\w.+-]", "_", text)


def csv_text(value) -> str:
    """One CSV cell: quoted when it holds a comma, a quote or a line break (quotes doubled)."""
    s = "" if value is None else str(value)
    if any(c in s for c in ',"\r\n'):
        s = '"' + s.replace('"', '""') + '"'
    return s


def _text_matrix(texts) -> np.ndarray:
    """(len(texts), width) uint8: each string's UTF-8 bytes, NUL-padded."""
    encoded = [t.encode() for t in texts]
    width = max(1, max(map(len, encoded), default=1))
    return np.array(encoded, dtype=f"S{width}").view(np.uint8).reshape(len(encoded), width)


def _cells(col, lo: int, hi: int, lut) -> list:
    """Rows lo .. hi - 1 of a column as text: (rows, k) uint8 pieces to lay side by side."""
    if isinstance(col, Labels):
        table, lengths = lut
        codes = col.codes[lo:hi]
        width = int(lengths[codes].max()) if hi > lo else 1
        if width == 0:  # (every label of the block empty)
            return [np.zeros((hi - lo, 0), dtype=np.uint8)]
        # each label's text as one fixed-width string: a row per code by ``take`` (indexing the
        # (labels, width) matrix by codes took ~80x as long, a row at a time)
        return [np.ascontiguousarray(table[:, :width]).view(f"S{width}").ravel().take(codes)
                .view(np.uint8).reshape(hi - lo, width)]
    part = col[lo:hi]
    if part.dtype.kind == "f":
        return float_parts(part)
    if part.dtype.kind in "iub":
        return [int_cells(part.astype(np.int64, copy=False))]
    raise TypeError(f"cannot write a column of dtype {part.dtype}")


def _place(block: np.ndarray, at: int, piece: np.ndarray) -> None:
    """``block[:, at:at + k] = piece`` for a (rows, k) uint8 ``piece``, each row's k bytes copied
    as one item (a ``V<k>`` view of both): numpy copied the 2-D slice a byte column at a time."""
    rows, k = piece.shape
    if k < 2 or not rows:
        block[:, at:at + k] = piece
        return
    into = np.ndarray((rows,), dtype=f"V{k}", buffer=block, offset=at, strides=(block.shape[1],))
    into[...] = np.ascontiguousarray(piece).view(f"V{k}").reshape(rows)


def write_csv(path, columns: dict, chunk_rows: int = CHUNK_ROWS) -> None:
    """``columns``: name -> numpy array (float, int) or ``Labels`` / object array of str, all of
    one length, written in the given order with a header row. ``path``: a file name, or a
    binary file object to write to."""
    names = list(columns)
    cols = [labels_of(c) if isinstance(c, Labels) or c.dtype == object else c for c in columns.values()]
    luts = [None] * len(cols)
    for i, c in enumerate(cols):
        if isinstance(c, Labels):
            table = _text_matrix([csv_text(v) for v in c.labels])
            luts[i] = (table, (table != 0).sum(axis=1))
    n = len(cols[0]) if cols else 0
    with (open(path, "wb") if isinstance(path, (str, Path)) else contextlib.nullcontext(path)) as fh:
        fh.write((",".join(csv_text(x) for x in names) + "\n").encode())
        for lo in range(0, n, chunk_rows):
            hi = min(lo + chunk_rows, n)
            pieces = [_cells(c, lo, hi, lut) for c, lut in zip(cols, luts)]
            # a row of the block: each column's pieces, then its separator. Every row starts as
            # the separators alone (one broadcast copy), then the pieces are copied in
            seps = np.cumsum([sum(p.shape[1] for p in col) + 1 for col in pieces]) - 1
            pattern = np.zeros(seps[-1] + 1, dtype=np.uint8)
            pattern[seps] = ord(",")
            pattern[-1] = ord("\n")
            width = len(pattern)
            block = np.empty((hi - lo, width), dtype=np.uint8)
            block[:] = pattern
            for col, end in zip(pieces, seps):
                at = end - sum(p.shape[1] for p in col)
                for p in col:
                    _place(block, at, p)
                    at += p.shape[1]
            del pieces
            fh.write(block[block != 0])  # NULs are padding: the cells' text remains


def parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def check_format(fmt: str, flag: str = "--format") -> None:
    """An input error unless ``fmt`` is a format this installation can write."""
    if fmt not in FORMATS:
        raise InputError(f"{flag} {fmt!r}: unknown format;{did_you_mean(fmt, FORMATS)}")
    if fmt == "parquet" and not parquet_available():
        raise InputError(f"{flag} parquet needs pyarrow: pip install pyarrow (or pip install 'servesim[parquet]')")


def write_parquet(path: Path, columns: dict, chunk_rows: int = ROW_GROUP) -> None:
    """The same columns as ``write_csv``, typed (NaN: null; text dictionary-encoded), one row
    group per ``chunk_rows`` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {k: (c if isinstance(c, Labels) or c.dtype != object else labels_of(c)) for k, c in columns.items()}
    # text columns as Parquet dictionaries: each distinct string once, as Labels hold them
    types = {k: pa.dictionary(pa.from_numpy_dtype(c.codes.dtype), pa.string()) if isinstance(c, Labels)
             else pa.from_numpy_dtype(c.dtype) for k, c in cols.items()}
    schema = pa.schema(list(types.items()))
    n = len(next(iter(cols.values()))) if cols else 0
    # (Parquet would try a dictionary on every column: numbers almost never repeat, and trying
    # took 3/4 of the time)
    text = [k for k, c in cols.items() if isinstance(c, Labels)]
    with pq.ParquetWriter(path, schema, use_dictionary=text) as w:
        for lo in range(0, max(n, 1), chunk_rows):
            hi = min(lo + chunk_rows, n)
            arrays = []
            for k, c in cols.items():
                if isinstance(c, Labels):
                    arrays.append(pa.DictionaryArray.from_arrays(c.codes[lo:hi], pa.array(c.labels, pa.string())))
                else:
                    arrays.append(pa.array(c[lo:hi], type=types[k], from_pandas=c.dtype.kind == "f"))
            w.write_table(pa.Table.from_arrays(arrays, schema=schema))


def parse_outputs(text: str | None, flag: str = "--outputs", valid: tuple = OUTPUTS) -> tuple:
    """``summary,requests,...`` -> the names in ``valid`` order (None: all of them)."""
    if text is None:
        return valid
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise InputError(f"{flag}: give at least one of {', '.join(valid)}")
    for i, name in enumerate(names):
        if name not in valid:
            raise InputError(f"{flag} {name!r}: unknown output;{did_you_mean(name, valid)}")
        if name in names[:i]:  # (taken once in silence, where compare --rates refuses a value given twice)
            raise InputError(f"{flag}: {name!r} is given twice; give each output once")
    return tuple(o for o in valid if o in names)


def study_file_names(outputs: tuple) -> list:
    """The files a study's run folder holds for these ``STUDY_OUTPUTS`` (CSV; summary.json always)."""
    return sorted({"summary.json", *("tbt_s.npy" if o == "tbt" else file_names((o,))[0] for o in outputs)})


def file_names(outputs=OUTPUTS, fmt: str = "csv") -> list:
    """The files ``write_run`` writes for these outputs, in order."""
    return [{"summary": "summary.json", "scenario": "scenario.yaml"}.get(o, f"{o}.{fmt}") for o in outputs]


# what a run folder holds: the outputs, sweeps' TBT samples, and what ``servesim report`` adds.
# A folder holding anything else is not replaced whole (see ``write_run``).
RUN_ENTRIES = frozenset({"summary.json", "scenario.yaml", "requests.csv", "requests.parquet", "steps.csv",
                         "steps.parquet", "tbt_s.npy", "report.md", "figures"})
TMP_PREFIX = ".tmp-"  # a run folder being written, beside its final place: .tmp-<name>-<pid>-<random>


# the first line of each report.md servesim writes into a study folder (``servesim report``, a plan's)
REPORT_HEADS = ("# servesim report:", "# servesim plan:")
FIGURE_SUFFIXES = (".png", ".svg")  # what a report draws into figures/


def write_text_whole(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all: into ``.<name>.tmp`` beside it, which then
    replaces it, so that a kill or a full disk while writing leaves the file as it was (a report.md
    cut mid-write began with its heading, was left for a study's ``remove_report`` to recognise
    only when its first line survived, and read as a whole report)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _listed_files(summary_path: Path) -> set:
    """The run files a servesim summary.json lists (its ``files``; only names a run writes), or none."""
    try:
        files = json.loads(summary_path.read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return set()
    return {n for n in files if isinstance(n, str) and n in RUN_ENTRIES} if isinstance(files, dict) else set()


def _listed_traces(summary_path: Path) -> set:
    """The trace files a servesim summary.json says its run wrote into its folder after it
    (``trace_files``: ``--decision-trace`` / ``--trace-events`` paths inside the folder, by name);
    only plain names of files a run folder does not otherwise hold."""
    try:
        traces = json.loads(summary_path.read_text()).get("trace_files")
    except (OSError, ValueError, AttributeError):
        return set()
    if not isinstance(traces, dict):
        return set()
    return {n for n in traces.values() if isinstance(n, str) and n not in ("", ".", "..") and "/" not in n
            and "\\" not in n and n not in RUN_ENTRIES and not n.startswith(TMP_PREFIX)}


def remove_report(folder: Path) -> bool:
    """Remove the report an earlier study left in ``folder``: report.md when servesim wrote it (its
    first line is one of ``REPORT_HEADS``) and figures/'s PNG and SVG files (figures/ itself when
    that empties it); other files stay. True when something was removed. A study calls it as it
    starts: the report described the earlier study's results (another grid, or the same one
    stopped with points still to run), not the ones the folder now holds."""
    removed = False
    md = folder / "report.md"
    (folder / ".report.md.tmp").unlink(missing_ok=True)  # (write_text_whole's, left by a kill -9)
    try:
        with md.open(encoding="utf-8", errors="replace") as fh:
            head = fh.readline()
    except OSError:
        head = ""
    if head.startswith(REPORT_HEADS):
        md.unlink(missing_ok=True)
        removed = True
    figs = folder / "figures"
    if figs.is_dir() and not figs.is_symlink():
        for f in figs.iterdir():
            if f.suffix in FIGURE_SUFFIXES and f.is_file():
                f.unlink(missing_ok=True)
                removed = True
        with contextlib.suppress(OSError):
            figs.rmdir()  # (only when empty)
    return removed


class _Digest:
    """A binary file that hashes (SHA-256) and counts what is written to it."""

    def __init__(self, fh):
        self.fh, self.sha, self.bytes = fh, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha.update(data)
        self.bytes += len(data)
        return self.fh.write(data)


def file_digest(path: Path) -> str:
    """The SHA-256 of a file, read a MiB at a time."""
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` holds nothing but what a run folder holds (so it can be replaced whole)."""
    return all(e.name in RUN_ENTRIES for e in path.iterdir())


def _swap(new: Path, old: Path) -> bool:
    """Exchange two folders atomically (Linux renameat2 RENAME_EXCHANGE); False where the system
    cannot (then the caller renames twice)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(old), exchange) == 0


def _write_files(folder: Path, summary: dict, requests: dict, steps: dict, scenario_yaml: str, outputs, fmt,
                 extra: dict, shown_as: Path) -> list:
    """Every output into ``folder``, summary.json last with ``files``: each other file's rows,
    bytes and SHA-256. Errors name the file as ``shown_as / name`` (where it is meant to be)."""
    table = write_parquet if fmt == "parquet" else write_csv
    files, written = {}, []
    names = list(zip(outputs, file_names(outputs, fmt)))
    for name, file in [*[x for x in names if x[0] != "summary"], *((k, k) for k in extra)]:
        path = folder / file
        try:
            if name == "scenario":
                data = scenario_yaml.encode()
                path.write_bytes(data)
                files[file] = {"rows": None, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            elif name in ("requests", "steps"):
                cols = requests if name == "requests" else steps
                rows = len(next(iter(cols.values()))) if cols else 0
                if fmt == "parquet":
                    table(path, cols)
                    files[file] = {"rows": rows, "bytes": path.stat().st_size, "sha256": file_digest(path)}
                else:
                    with open(path, "wb") as fh:
                        d = _Digest(fh)
                        table(d, cols)
                    files[file] = {"rows": rows, "bytes": d.bytes, "sha256": d.sha.hexdigest()}
            else:  # extra: name -> (rows, write(path))
                rows, write = extra[name]
                write(path)
                files[file] = {"rows": rows, "bytes": path.stat().st_size, "sha256": file_digest(path)}
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(shown_as / file)) from None
        written.append(shown_as / file)
    if "summary" in outputs:
        try:
            (folder / "summary.json").write_text(json_text({**summary, "files": files}, indent=2))
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(shown_as / "summary.json")) from None
        written.insert(0, shown_as / "summary.json")
    return written


def write_run(out: Path, summary: dict, requests: dict, steps: dict, scenario_yaml: str,
              outputs=OUTPUTS, fmt: str = "csv", extra: dict | None = None) -> list:
    """Write the named outputs into the folder ``out``; returns the paths written. ``requests``
    / ``steps``: column -> array in ``columns.REQUEST_COLUMNS`` / ``STEP_COLUMNS`` order;
    ``extra``: more files, name -> (rows, write(path)).

    The folder appears whole or not at all: everything is written into ``.tmp-<name>-...``
    beside it, which then takes its place (a folder already there is replaced only once the new
    one is complete; an atomic exchange on Linux). summary.json, written last, records each
    other file's rows, bytes and SHA-256 (``files``), which readers check
    (``rundir.verify_run``). A folder that holds anything a run folder does not (``--out .``)
    is not replaced: the files are written in place, each through a temporary file renamed
    over the old one, summary.json removed first and written last; the earlier run's report and
    the files its summary.json listed that this run does not write are removed. An ``OSError`` (a full
    disk) names the file it was writing; nothing half-written is left behind."""
    out = Path(out)
    extra = extra or {}
    real = out.resolve()  # (a symlink to a folder: the folder is replaced, the link stays)
    if real.exists() and not real.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "exists and is not a folder", str(out))
    parent = real.parent
    parent.mkdir(parents=True, exist_ok=True)
    in_place = real.is_dir() and not is_run_folder(real)
    tmp = parent / f"{TMP_PREFIX}{real.name}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        written = _write_files(tmp, summary, requests, steps, scenario_yaml, outputs, fmt, extra, out)
        if in_place:
            summary_path = real / "summary.json"
            old_files = _listed_files(summary_path)
            # (an earlier run's --decision-trace / --trace-events file in the folder described that run;
            # this run writes its own, where it is asked to, after the folder)
            old_traces = _listed_traces(summary_path)
            if summary_path.exists():
                summary_path.unlink()  # the old files are going: the folder is no run until the new summary lands
            # (the earlier run's report and its own files the new run does not write described that run:
            # a report of the new summary.json read the old requests.csv, and report.md stayed the old one's)
            remove_report(real)
            new_names = {f.name for f in tmp.iterdir()}
            for name in (old_files - new_names) | (old_traces - new_names):
                with contextlib.suppress(OSError):
                    (real / name).unlink()
            for f in sorted(tmp.iterdir(), key=lambda f: f.name == "summary.json"):
                os.replace(f, real / f.name)
        elif not real.exists():
            os.rename(tmp, real)
        elif not _swap(tmp, real):
            old = parent / f"{TMP_PREFIX}{real.name}-{os.getpid()}-old-{secrets.token_hex(4)}"
            os.rename(real, old)
            os.rename(tmp, real)
            tmp = old
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written
