"""Multi-turn sessions: conversations whose turns go one after another, each turn's prompt holding
the whole conversation so far, so that the prefix cache can serve the earlier turns.

A session is a list of turns (prompt tokens, reply tokens). Synthetic sessions draw their number
of turns from ``sessions.turns``, each turn's new message from ``workload.prompt_tokens`` and its
reply from ``workload.output_tokens``; dataset sessions take a conversation's turns (ShareGPT),
their replies replaced by ``workload.output_tokens`` draws when that is given. Turn k's prompt
is the sum of every earlier new message and reply plus its own new message (plus the
tokenizer's special tokens, with a dataset). A session sends turn k + 1 a think time after turn
k's reply ended (``sim/core/clients.py``); a rejected turn ends its session (the user gives up:
counted as ``abandoned``). A turn that does not fit the model's context is clipped (counted in
``clipped_requests``) and ends its session.

Sessions start at the times of ``workload.arrival`` (open loop), or, with a ``closed_loop``
arrival, each client runs one session after another, thinking the closed loop's think time
before each. ``workload.num_requests`` counts turns: once that many were sent, no session sends
more; ``duration_s`` ends the run.

The prefix cache sees each session as a prefix group (its index): a turn's whole prompt is
shareable, and its full blocks past the prompt (the reply) stay cached when it ends
(``Request.cache_output``), so the next turn finds the conversation so far.

Draw order (one Generator, so a scenario and seed give the same sessions): open-loop session
start times first; then sessions in chunks of ``CHUNK``, in session order: turn counts (or
conversation rows), new-message and reply lengths, think times between turns, and the closed
loop's think time before each session.
"""

from __future__ import annotations

import bisect

import numpy as np

from servesim.errors import InputError
from servesim.inputs.arrivals import arrival_times
from servesim.inputs.datasets import load_dataset
from servesim.inputs.scenario import MAX_TURNS, ClosedLoopArrival, Workload

DEFAULT_CLASS = "default"


class Session:
    """One conversation's turns (plain lists, read by the client process)."""

    __slots__ = ("prompts", "outputs", "think_s", "clipped", "lead_s")

    def __init__(self, prompts, outputs, think_s, clipped, lead_s):
        self.prompts = prompts  # prompt tokens per turn (the conversation so far)
        self.outputs = outputs  # reply tokens per turn
        self.think_s = think_s  # before each turn (the first one's is not used)
        self.clipped = clipped  # per turn: shortened to the context length
        self.lead_s = lead_s  # closed loop: the client's think time before the session


class Sessions:
    """The source of a multi-turn workload (``simulate`` drives it with ``drive_sessions``)."""

    CHUNK = 256

    def __init__(self, workload: Workload, rng, max_context_tokens: int | None):
        self.w = workload
        self.opts = workload.sessions
        self.arrival = workload.arrival
        self.closed = isinstance(workload.arrival, ClosedLoopArrival)
        self.num_requests = workload.num_requests
        self.duration_s = workload.duration_s
        self.class_names = (DEFAULT_CLASS,)
        self._rng = rng
        self._clip = max_context_tokens
        self.data = load_dataset(workload.dataset) if workload.dataset is not None else None
        if self.data is not None and workload.output_tokens is None and (self.data.reply_tokens < 1).any():
            raise InputError(f"workload.output_tokens is missing: rows of {self.data.path} have no "
                             f"{workload.dataset.output_key!r}; give a length distribution for their replies")
        # turns a session runs at most: sessions.max_turns, and MAX_TURNS in any case (a drawn count
        # or a dataset's conversation)
        self._turn_cap = MAX_TURNS if self.opts.max_turns is None else self.opts.max_turns
        d = self.data
        if (d is not None and not workload.dataset.sample and not workload.dataset.loop
                and workload.num_requests is not None):
            # (as a single-turn workload refuses more requests than rows: the run ended with the
            # conversations, fewer turns than asked for and nothing said)
            turns = np.diff(d.start)
            total = int(np.minimum(turns, self._turn_cap).sum())  # (as _grow takes them)
            if workload.num_requests > total:
                raise InputError(f"workload.num_requests={workload.num_requests} exceeds the {total} turns of the "
                                 f"{d.num_conversations} conversations of {d.path}; set workload.dataset.loop: true "
                                 "or ask for fewer")
        # open loop: when each session starts (num_requests bounds the sessions: each has a turn)
        self.start_s = (None if self.closed else
                        arrival_times(workload.arrival, workload.num_requests, workload.duration_s, rng))
        if self.start_s is not None:
            from servesim.inputs.workload import check_horizon

            check_horizon(self.start_s, "sessions")
        # drawn sessions, a chunk at a time: (ends of the sessions' turns in the chunk's arrays,
        # turns, new tokens, replies, think times, leads, special tokens); each ``Session`` is
        # built when first asked for (a closed loop hands a million clients a session each and
        # runs a few)
        self._chunks: list[tuple] = []
        self._firsts: list[int] = []  # each chunk's first session index (for bisect)
        self._sessions: dict[int, Session] = {}
        self._drawn = 0
        self._pos = 0  # next conversation, when taking a dataset's in order
        self.sent = 0  # turns sent (request ids are given in send order)
        self._next = 0  # the next session to hand out
        self.started = 0  # sessions that sent a turn
        self.abandoned = 0  # sessions ended by a rejected turn
        self._clipped: list[bool] = []  # per request sent
        # a dataset's conversations used up (no loop, no sample): no session starts after that, so
        # the run's window ends with its last event, not at duration_s (RequestSpecs.source_ended)
        self.source_ended = False

    # ---------------------------------------------------------------- drawing sessions
    def _rows_left(self) -> float:
        d = self.data
        if d is None or self.w.dataset.sample or self.w.dataset.loop:
            return float("inf")
        return d.num_conversations - self._pos

    def _think(self, mean: float, kind: str, n: int) -> np.ndarray:
        if kind == "fixed" or mean == 0:
            return np.full(n, float(mean))
        return self._rng.exponential(mean, n)

    def _grow(self) -> bool:
        m = int(min(self.CHUNK, self._rows_left()))
        if m <= 0:
            self.source_ended = True  # (only a dataset's rows run out: synthetic sessions never do)
            return False
        rng, cap, special = self._rng, self._turn_cap, 0
        if self.data is None:
            from servesim.inputs.workload import sample_lengths

            turns = np.minimum(sample_lengths(self.opts.turns, m, rng), cap)
            total = int(turns.sum())
            new = sample_lengths(self.w.prompt_tokens, total, rng)
            out = sample_lengths(self.w.output_tokens, total, rng)
        else:
            d = self.data
            C = d.num_conversations
            rows = rng.integers(0, C, m) if self.w.dataset.sample else (self._pos + np.arange(m)) % C
            self._pos += m
            a = d.start[rows]
            turns = np.minimum(d.start[rows + 1] - a, cap)
            idx = np.concatenate([np.arange(s, s + t) for s, t in zip(a.tolist(), turns.tolist())])
            total = len(idx)
            new, out = d.new_tokens[idx], d.reply_tokens[idx]
            if self.w.output_tokens is not None:
                from servesim.inputs.workload import dataset_replies

                out = dataset_replies(self.w, out, rng)
            special = d.special_tokens
        think = self._think(self.opts.think_time_s, self.opts.think, total)
        lead = (self._think(self.arrival.think_time_s, self.arrival.think, m) if self.closed else np.zeros(m))
        self._firsts.append(self._drawn)
        self._chunks.append((np.cumsum(turns), turns, new, out, think, lead, special))
        self._drawn += m
        return True

    def next_session(self) -> int | None:
        """The index of the next session to begin (None when none is left)."""
        i = self._next
        if self.start_s is not None and i >= len(self.start_s):
            return None
        if self.num_requests is not None and self.sent >= self.num_requests:
            return None
        while self._drawn <= i:
            if not self._grow():
                return None
        self._next += 1
        return i

    def session(self, i: int) -> Session:
        """Session ``i`` (drawn already: ``next_session`` handed it out)."""
        got = self._sessions.get(i)
        if got is None:
            got = self._sessions[i] = self._build(i)
        return got

    def _locate(self, i: int) -> tuple:
        """(the chunk record drawn with session ``i``, ``i``'s position in it)."""
        c = bisect.bisect_right(self._firsts, i) - 1
        return self._chunks[c], i - self._firsts[c]

    def lead_s(self, i: int) -> float:
        """Session ``i``'s lead (closed loop: its client's think time before it), without building it."""
        chunk, j = self._locate(i)
        return float(chunk[5][j])

    def _build(self, i: int) -> Session:
        (ends, turns, new, out, think, lead, special), j = self._locate(i)
        b = int(ends[j])
        a = b - int(turns[j])
        n, o = new[a:b], out[a:b]
        prompt = special + np.cumsum(n + o) - o  # everything before the reply
        clipped = np.zeros(len(n), bool)
        if self._clip is not None:
            over = np.flatnonzero(prompt + o > self._clip)
            if len(over):
                k = int(over[0]) + 1  # the first turn that does not fit is the session's last
                prompt, o, clipped = prompt[:k].copy(), o[:k].copy(), clipped[:k]
                prompt[-1] = min(prompt[-1], self._clip - 1)
                o[-1] = min(o[-1], self._clip - prompt[-1])
                clipped[-1] = True
        return Session(prompt.tolist(), o.tolist(), think[a:a + len(prompt)].tolist(), clipped.tolist(),
                       float(lead[j]))

    def send(self, clipped: bool, first: bool) -> int | None:
        """A request id for a session's next turn (``first``: its first), or None once
        ``num_requests`` turns were sent."""
        if self.num_requests is not None and self.sent >= self.num_requests:
            return None
        self.started += first
        k = self.sent
        self.sent += 1
        self._clipped.append(clipped)
        return k

    # ---------------------------------------------------------------- what simulate reads
    def __len__(self) -> int:  # requests sent (all of them, once the run has ended)
        return self.sent

    @property
    def class_index(self) -> np.ndarray:
        return np.zeros(self.sent, np.int64)

    @property
    def clipped(self) -> np.ndarray:
        return np.array(self._clipped, dtype=bool)

    @property
    def info(self) -> dict:
        from servesim.inputs.workload import dataset_info

        out = {"sessions": {"started": self.started, "turns_sent": self.sent, "abandoned": self.abandoned}}
        out.update(dataset_info(self.w) or {})
        return out
