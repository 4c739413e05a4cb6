"""``ruler report RUN_DIR``: ``report.md`` and PNG charts, written into the run directory.

Nothing is measured again. Rows are throughput.csv's (``run``); each rep's tok/s is the one the
row_done event recorded from the receipts; verdicts, void attempts, reruns and rejections are
journal events with their receipt files (``verdicts``, ``windows``); the methods come from the
frozen campaign.yaml, env.json and the recorded invocations (``methods``). A run without quality
receipts (older, or quality off) says "not measured" where a verdict would stand. The charts
(``charts``) need the optional extra ``ruler[report]``; without it every table is still written.
"""

from engine.report.render import CHARTS_SKIPPED, REPORT, cmd_report, render, write_report
from engine.report.run import (
    ReportError,
    Row,
    RunView,
    load_run,
    receipt_rep_tok_s,
)
from engine.report.text import Delta, delta, pct, tok
from engine.words import CONTROL

__all__ = ["CHARTS_SKIPPED", "CONTROL", "REPORT", "Delta", "ReportError", "Row", "RunView",
           "cmd_report", "delta", "load_run", "pct", "receipt_rep_tok_s", "render", "tok",
           "write_report"]
