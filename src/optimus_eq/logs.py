"""optimus_eq's logs under PyTorch's logging conventions, so that a ``torch.compile`` user finds our report where
they find Inductor's.

* ``TORCH_LOGS="optimus_eq"``: each optimization's report (:meth:`Report.summary`) at INFO;
  ``TORCH_LOGS="+optimus_eq"`` adds, at DEBUG, why each op was left alone and what became of each input op.
  The log is registered with ``torch._logging.register_log`` (the ``optimus_eq``, ``optimus_bridge`` and
  ``optimus_greedy`` loggers).
* Under ``TORCH_TRACE`` (the structured trace ``tlparse`` reads), each report is an ``artifact`` entry named
  ``optimus_eq_report`` (``torch._logging.trace_structured``), tied to the compile that made it.

torch reads ``TORCH_LOGS`` when it is imported, before this log exists; :func:`register` therefore reads it
again (``torch._logging._internal._init_logs``) when it names ``optimus_eq``, and only then.
"""

from __future__ import annotations

import logging
import os

import torch._logging
from torch._logging import _internal as torch_logs

from optimus_eq.report import Report

NAME = "optimus_eq"
#: the structured-trace artifact of one report
ARTIFACT = "optimus_eq_report"
log = logging.getLogger(NAME)
_registered = False


def register() -> None:
    """Register the ``optimus_eq`` log with torch (once); re-read ``TORCH_LOGS`` if it names it."""
    global _registered
    if _registered:
        return
    _registered = True
    torch_logs.register_log(NAME, [NAME, "optimus_bridge", "optimus_greedy"])
    if NAME in os.environ.get("TORCH_LOGS", ""):
        torch_logs._init_logs()


def log_report(report: Report) -> None:
    """Log ``report`` (INFO: the summary; DEBUG: ops left alone and input op fates) and add it to the
    structured trace."""
    if log.isEnabledFor(logging.INFO):
        log.info("%s", report.summary())
    if log.isEnabledFor(logging.DEBUG):
        if report.kept_reasons:
            log.debug("left alone: %s", "; ".join(f"{n}: {why}" for n, why in report.kept_reasons.items()))
        if report.node_fates:
            log.debug("input ops: %s", ", ".join(f"{n} {fate}" for n, fate in report.node_fates.items()))
    torch._logging.trace_structured(
        "artifact", metadata_fn=lambda: {"name": ARTIFACT, "encoding": "string"},
        payload_fn=report.summary, expect_trace_id=False)


register()
