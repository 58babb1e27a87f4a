"""Run history: signature records in an embedded SQLite database (stdlib ``sqlite3``).

One row per run (its ``run_id``), the record kept whole as JSON beside the columns a query
needs. The schema is versioned (table ``schema_version``); a record whose key metadata
disagree with itself or with the runs already stored under its job name is refused with
an error naming the run directory and the fix.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path

from .signature_record import RecordError, check_record

__all__ = ["SCHEMA_VERSION", "DEFAULT_HISTORY", "HistoryError", "History", "measured_ratios"]

SCHEMA_VERSION = 1
DEFAULT_HISTORY = "ailens-history.sqlite"
# Facts every run of one job must share (a job is one model and per-rank work).
_JOB_KEYS = ("framework", "mode", "batch_size", "param_count")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    job TEXT NOT NULL,
    platform TEXT NOT NULL,
    framework TEXT NOT NULL,
    mode TEXT NOT NULL,
    ranks INTEGER NOT NULL,
    ranks_per_node INTEGER NOT NULL,
    threads_per_rank INTEGER NOT NULL,
    cores_per_node REAL NOT NULL,
    batch_size INTEGER,
    param_count INTEGER,
    step_s REAL NOT NULL,
    run_dir TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_job ON runs (job);
"""


class HistoryError(ValueError):
    """A history database or record that cannot be used (message says what to do)."""


class History:
    """A run-history database. ``History(path)`` creates it when missing."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            self._db = sqlite3.connect(self.path)
            with self._db:
                self._db.executescript(_SCHEMA)
                rows = self._db.execute("SELECT version FROM schema_version").fetchall()
                if not rows:
                    self._db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
                elif rows[0][0] != SCHEMA_VERSION:
                    raise HistoryError(
                        f"{self.path}: history schema version {rows[0][0]}, this ailens reads "
                        f"{SCHEMA_VERSION}; start a new history file with --history"
                    )
        except sqlite3.DatabaseError as e:
            raise HistoryError(f"{self.path}: not an ailens history database ({e})") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add(self, rec: dict, *, replace: bool = False) -> bool:
        """Store one signature record; False when its run is already stored (and not
        ``replace``). Raises HistoryError when it contradicts itself or its job's runs."""
        where = rec.get("run_dir", "?") if isinstance(rec, dict) else "?"
        try:
            check_record(rec, where)
        except RecordError as e:
            raise HistoryError(str(e)) from None
        for other in self.records(job=rec["job"]):
            if other["run_id"] == rec["run_id"]:
                continue
            diff = [
                f"{k} {rec.get(k)!r} vs {other.get(k)!r}"
                for k in _JOB_KEYS
                if rec.get(k) is not None
                and other.get(k) is not None
                and rec.get(k) != other.get(k)
            ]
            if diff:
                raise HistoryError(
                    f"{where}: refused: job {rec['job']!r} already has run {other['run_dir']} "
                    f"with other key metadata ({'; '.join(diff)}); give this run its own job "
                    "name (`ailens history add RUN_DIR --job NAME --rebuild`)"
                )
        lay = rec["layout"]
        row = (
            rec["run_id"],
            rec["job"],
            rec["platform"]["name"],
            rec["framework"],
            rec["mode"],
            int(lay["ranks"]),
            int(lay["ranks_per_node"]),
            int(lay["threads_per_rank"]),
            float(lay["cores_per_node"]),
            rec.get("batch_size"),
            rec.get("param_count"),
            float(rec["step"]["step_s"]),
            str(rec.get("run_dir", "")),
            json.dumps(rec, sort_keys=True),
        )
        with self._db:
            exists = self._db.execute(
                "SELECT 1 FROM runs WHERE run_id = ?", (rec["run_id"],)
            ).fetchone()
            if exists and not replace:
                return False
            self._db.execute("DELETE FROM runs WHERE run_id = ?", (rec["run_id"],))
            self._db.execute(
                "INSERT INTO runs (run_id, job, platform, framework, mode, ranks, ranks_per_node,"
                " threads_per_rank, cores_per_node, batch_size, param_count, step_s, run_dir,"
                " record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        return True

    def records(self, *, job: str | None = None) -> list[dict]:
        """Stored records (of one job), in the order they were added."""
        q = (
            "SELECT record FROM runs"
            + (" WHERE job = ?" if job is not None else "")
            + " ORDER BY id"
        )
        with closing(self._db.execute(q, (job,) if job is not None else ())) as cur:
            return [json.loads(r[0]) for r in cur]

    def rows(self) -> list[tuple]:
        """(id, job, platform, framework, ranks, ranks_per_node, threads, cores, step_s,
        run_dir) per stored run, for ``ailens history list``."""
        q = (
            "SELECT id, job, platform, framework, ranks, ranks_per_node, threads_per_rank,"
            " cores_per_node, step_s, run_dir FROM runs ORDER BY id"
        )
        return self._db.execute(q).fetchall()


def format_rows(rows: list[tuple]) -> str:
    """``ailens history list`` text table."""
    if not rows:
        return "(no runs stored)"
    head = (
        "id",
        "job",
        "platform",
        "framework",
        "ranks",
        "per node",
        "threads",
        "cores",
        "step ms",
    )
    body = [
        (str(i), job, plat, fw, str(r), str(rpn), str(t), f"{c:g}", f"{s * 1e3:.2f}")
        for i, job, plat, fw, r, rpn, t, c, s, _ in rows
    ]
    widths = [min(max(len(x[k]) for x in [head, *body]), 40) for k in range(len(head))]
    lines = [
        "  ".join(v[:w].ljust(w) for v, w in zip(line, widths, strict=True))
        for line in [head, *body]
    ]
    return "\n".join(lines) + f"\n{len(rows)} runs"


def measured_ratios(records: list[dict], precision: str) -> list:
    """The history's jobs measured on two device types (``predict.MeasuredRatio``, what
    ``DeviceSpeedModel.with_history`` takes): for each job, every two of its records whose
    devices differ (a cluster platform's label it was stored under, ``ailens history add
    --platform dgx-a100``, else the accelerator its run recorded), at the same ranks, ranks
    per node and batch size: the compute time per step on one over the other (the step's
    compute where the run had several ranks, else its step). Records state no precision:
    the pairs count at ``precision``, the predicted job's."""
    from ..predict import MeasuredRatio, device_key, load_platform, platform_labels

    labels = set(platform_labels())
    runs: dict[str, list[tuple[str, dict]]] = {}
    for r in records:
        plat = r.get("platform") or {}
        name = str(plat.get("name") or "")
        device = load_platform(name).device if name in labels else plat.get("accelerator")
        if device:
            runs.setdefault(str(r.get("job")), []).append((device, r))
    out = []
    for job, mine in runs.items():
        for i, (da, a) in enumerate(mine):
            for db, b in mine[i + 1 :]:
                if (device_key(da) or da) == (device_key(db) or db) or _layout(a) != _layout(b):
                    continue
                ca, cb = _compute_s(a), _compute_s(b)
                if ca and cb:
                    out.append(MeasuredRatio(job=job, src_device=da, tgt_device=db,
                                             precision=precision, ratio=cb / ca,
                                             batch_per_device=a.get("batch_size")))  # fmt: skip
    return out


def _layout(rec: dict) -> tuple:
    lay = rec.get("layout") or {}
    return lay.get("ranks"), lay.get("ranks_per_node"), rec.get("batch_size")


def _compute_s(rec: dict) -> float | None:
    """A record's compute per step: its step at one rank, its compute beside collectives at
    several (the networks of two platforms differ)."""
    step = rec.get("step") or {}
    one = (rec.get("layout") or {}).get("ranks") == 1
    x = step.get("step_s") if one else step.get("compute_s")
    return float(x) if isinstance(x, (int, float)) and x > 0 else None
